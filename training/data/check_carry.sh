#!/bin/bash
# Tests the carry that package.sh made as the GPU machine will see it: in a chroot holding only
# glibc, libstdc++, libgcc_s, /bin/sh, the corpus and symbol table, and .carry/espeak (so no
# system eSpeak library or espeak-ng-data can be used), with an empty environment. Generates
# LIMIT sentences (default 100) and checks that they match, byte for byte, what the build here
# makes with the system libraries. Needs root (chroot).
#   training/data/check_carry.sh
set -euo pipefail

root=$(git -C "$(dirname "$0")" rev-parse --show-toplevel)
build=${BUILD_DIR:-$root/build-data}
limit=${LIMIT:-100}
jail=$(mktemp -d /tmp/voxd-carry-check.XXXXXX)
trap 'rm -rf "$jail"' EXIT

mkdir -p "$jail/lib64" "$jail/lib/x86_64-linux-gnu" "$jail/bin" "$jail/repo/data/corpus" \
  "$jail/repo/data/symbols"
cp -L /lib64/ld-linux-x86-64.so.2 "$jail/lib64/"
for lib in libc.so.6 libm.so.6 libstdc++.so.6 libgcc_s.so.1; do
  cp -L "/lib/x86_64-linux-gnu/$lib" "$jail/lib/x86_64-linux-gnu/"
done
cp -L /bin/dash "$jail/bin/sh"
cp "$root/data/corpus/en-sentences.txt" "$jail/repo/data/corpus/"
cp "$root/data/symbols/espeak-ipa-en.txt" "$jail/repo/data/symbols/"
cp -a "$root/.carry" "$jail/repo/.carry"

env -i JOBS=2 /usr/sbin/chroot "$jail" /bin/sh -c "cd /repo && .carry/espeak/run.sh /out --limit $limit"
(cd "$root" && "$build/src/tools/voxd-dataset" --out "$jail/reference" --limit "$limit" \
  --jobs 2 >/dev/null)
if diff -r "$jail/out" "$jail/reference" >/dev/null; then
  echo "check_carry.sh: the carry works without the system's eSpeak and matches this build"
else
  echo "check_carry.sh: the carry's output differs from this build's" >&2
  exit 1
fi
