#!/bin/bash
# Tests the carry that package.sh made as the GPU machine will see it: in a chroot holding only
# glibc, libstdc++, libgcc_s, /bin/sh, the corpus and symbol table, and .carry/espeak (so no
# system eSpeak library or espeak-ng-data can be used), with an empty environment. Generates
# LIMIT sentences (default 100) and checks that they match, byte for byte, what the build here
# makes with the system libraries. Needs root (chroot). LANGUAGE=zh-cn checks the Mandarin
# teacher instead (data/zh, OpenCC's tables from the carry); TEACHER=festival the carried Festival
# with CMU ARCTIC SLT's voice (ARPAbet) against the system's.
#   training/data/check_carry.sh
set -euo pipefail

root=$(git -C "$(dirname "$0")" rev-parse --show-toplevel)
build=${BUILD_DIR:-$root/build-data}
limit=${LIMIT:-100}
jail=$(mktemp -d /tmp/voxd-carry-check.XXXXXX)
trap 'rm -rf "$jail"' EXIT

# The alignment limits the Festival teacher is run with, here and (through the environment) in
# the jail's run.sh.
extra=3 substitutions=6 missing=3
limits="MAX_EXTRA_PHONEMES=$extra MAX_SUBSTITUTIONS=$substitutions MAX_MISSING=$missing"
if [ "${TEACHER:-espeak}" = festival ]; then
  corpus=data/corpus/en-sentences.txt symbols=data/symbols/arpabet-en.txt phonemes=arpabet
  options="--phonemes arpabet --teacher festival --max-extra-phonemes $extra"
  options="$options --max-substitutions $substitutions --max-missing $missing"
elif [ "${LANGUAGE:-en-us}" = zh-cn ]; then
  corpus=data/corpus/zh-sentences.txt symbols=data/symbols/espeak-mnemonic-zh.txt
  phonemes=espeak-mnemonic options="--phonemes espeak-mnemonic --language zh-cn"
else
  corpus=data/corpus/en-sentences.txt symbols=data/symbols/espeak-ipa-en.txt
  phonemes=espeak-ipa options=""
fi
mkdir -p "$jail/lib64" "$jail/lib/x86_64-linux-gnu" "$jail/bin" "$jail/repo/data/corpus" \
  "$jail/repo/data/symbols"
cp -L /lib64/ld-linux-x86-64.so.2 "$jail/lib64/"
for lib in libc.so.6 libm.so.6 libstdc++.so.6 libgcc_s.so.1; do
  cp -L "/lib/x86_64-linux-gnu/$lib" "$jail/lib/x86_64-linux-gnu/"
done
cp -L /bin/dash "$jail/bin/sh"
cp "$root/$corpus" "$jail/repo/data/corpus/"
cp "$root/$symbols" "$jail/repo/data/symbols/"
cp -a "$root/data/zh" "$jail/repo/data/zh"
cp -a "$root/.carry" "$jail/repo/.carry"
# The jail has no tar or xz: Festival unpacked beforehand, where run.sh looks for it.
mkdir -p "$jail/repo/.carry/espeak/festival"
tar -C "$jail/repo/.carry/espeak/festival" -xJf "$root/.carry/espeak/festival.tar.xz"

# shellcheck disable=SC2086  # options is a list
# shellcheck disable=SC2086  # limits is a list of assignments
env -i JOBS=2 CORPUS="$corpus" SYMBOLS="$symbols" PHONEMES="$phonemes" $limits \
  LANGUAGE="${LANGUAGE:-en-us}" TEACHER="${TEACHER:-espeak}" /usr/sbin/chroot "$jail" /bin/sh -c \
  "cd /repo && .carry/espeak/run.sh /out --limit $limit"
# shellcheck disable=SC2086
(cd "$root" && "$build/src/tools/voxd-dataset" --corpus "$corpus" --symbols "$symbols" $options \
  --out "$jail/reference" --limit "$limit" --jobs 2 >/dev/null)
if diff -r "$jail/out" "$jail/reference" >/dev/null; then
  echo "check_carry.sh: the carry works without the system's eSpeak and matches this build"
else
  echo "check_carry.sh: the carry's output differs from this build's" >&2
  exit 1
fi
