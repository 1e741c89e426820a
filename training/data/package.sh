#!/bin/bash
# Builds voxd-dataset here (Debian 12) and collects into .carry/espeak/ everything it needs on the
# GPU machine (Ubuntu 24.04 with nothing of ours installed): the binary, the shared libraries it
# links beyond glibc/libstdc++/libm/libgcc_s, the English and Mandarin parts of espeak-ng-data,
# OpenCC's traditional-to-simplified tables (the Mandarin front end), Festival with CMU ARCTIC
# SLT's HTS voice (the en-slt teacher) as festival.tar.xz, and run.sh.
# .carry/ is ignored through .git/info/exclude and never committed. Then run check_carry.sh.
#   training/data/package.sh            (BUILD_DIR, default build-data; JOBS, default 2)
set -euo pipefail

root=$(git -C "$(dirname "$0")" rev-parse --show-toplevel)
build=${BUILD_DIR:-$root/build-data}
carry=$root/.carry/espeak
libdir=/usr/lib/x86_64-linux-gnu
data=$libdir/espeak-ng-data
# Libraries the GPU machine has; everything else must come from the carry.
system_libs='linux-vdso.so.1|/lib64/ld-linux-x86-64.so.2|libc.so.6|libm.so.6|libstdc\+\+.so.6|libgcc_s.so.1'

cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$build" --target voxd-dataset -j "${JOBS:-2}"

exclude=$(cd "$root" && realpath -m "$(git rev-parse --git-path info/exclude)")
mkdir -p "$(dirname "$exclude")"
grep -qx '/.carry/' "$exclude" 2>/dev/null || echo '/.carry/' >>"$exclude"

rm -rf "$carry"
mkdir -p "$carry/bin" "$carry/lib" "$carry/espeak-ng-data/lang/gmw"
install -m 755 -s "$build/src/tools/voxd-dataset" "$carry/bin/voxd-dataset"
# libespeak-ng and its speed-up library, ICU's common library, OpenCC, libsoxr (the Festival
# teacher's resampler) with the OpenMP runtime it uses, and liblzma (data/zh/words.tsv.xz).
for lib in libespeak-ng.so.1 libsonic.so.0 libicuuc.so.72 libopencc.so.1.1 libmarisa.so.0 \
  libsoxr.so.0 libgomp.so.1 liblzma.so.5; do
  cp -L "$libdir/$lib" "$carry/lib/$lib"
done
# ICU's data library is 31 MB; the text normaliser only reads its NFKC table (nfkc.nrm, 55 KB):
# a libicudata.so.72 holding just that item, so the carry and the tracked tree fit together in
# one device call.
"$root/scripts/shrink-icu-data.sh" "$libdir/libicudata.so.72" "$carry/lib/libicudata.so.72"
# libpcaudio would bring PulseAudio, ALSA, D-Bus and X11; voxd-dataset never plays audio.
gcc -shared -fPIC -O2 -Wall -Wextra -Werror -Wl,-soname,libpcaudio.so.0 \
  -o "$carry/lib/libpcaudio.so.0" "$root/scripts/pcaudio-stub.c"
# eSpeak NG data for en-us and cmn-latn-pinyin only: phoneme tables, intonation, the English and
# Mandarin dictionaries, the voices.
cp "$data"/{phontab,phonindex,phondata,intonations,en_dict,cmn_dict} "$carry/espeak-ng-data/"
cp "$data/lang/gmw/en-US" "$data/lang/gmw/en" "$carry/espeak-ng-data/lang/gmw/"
mkdir -p "$carry/espeak-ng-data/lang/sit"
cp "$data/lang/sit/cmn-Latn-pinyin" "$carry/espeak-ng-data/lang/sit/"
mkdir -p "$carry/opencc"
cp /usr/share/opencc/{t2s.json,TSPhrases.ocd2,TSCharacters.ocd2} "$carry/opencc/"
install -m 755 "$root/training/data/run.sh" "$carry/run.sh"

# Festival (Debian's festival, festlex-cmu and festvox-us-slt-hts): the program, the Edinburgh
# Speech Tools and what they link, and its library folder (lexicons, voices) for --libdir.
# libestbase links ALSA and PulseAudio's simple API for playing audio, which the teacher never
# does: ALSA's library needs nothing beyond glibc and comes as it is; PulseAudio's would bring
# D-Bus, X11, systemd and libsndfile's codecs, so a stub stands in (scripts/pulse-simple-stub.c).
# Packed with xz (about 4 MB instead of 19) so that it travels beside checkpoints.
festival=$(mktemp -d /tmp/voxd-festival.XXXXXX)
trap 'rm -rf "$festival"' EXIT
mkdir -p "$festival/bin" "$festival/lib" "$festival/share"
install -m 755 /usr/bin/festival "$festival/bin/festival"
for lib in libestools.so.2.5 libestbase.so.2.5 libeststring.so.2.5 libtinfo.so.6 libgomp.so.1 \
  libasound.so.2; do
  cp -L "$libdir/$lib" "$festival/lib/$lib"
done
gcc -shared -fPIC -O2 -Wall -Wextra -Werror -Wl,-soname,libpulse-simple.so.0 \
  -Wl,--version-script="$root/scripts/pulse-simple-stub.map" \
  -o "$festival/lib/libpulse-simple.so.0" "$root/scripts/pulse-simple-stub.c"
cp -a /usr/share/festival "$festival/share/festival"

# Every dependency of the binaries and of each carried library resolves into the carry or is a
# system library.
check_closure() {  # DIR LIBDIR FILES...
  local dir=$1 lib=$2 missing
  shift 2
  for file in "$@"; do
    missing=$(LD_LIBRARY_PATH="$lib" ldd "$file" | grep -vE "^\s*($system_libs)\b" |
      grep -v "=> $lib/" | grep -v 'statically linked' || true)
    if [ -n "$missing" ]; then
      echo "package.sh: $file needs libraries outside $dir:" >&2
      echo "$missing" >&2
      exit 1
    fi
  done
}
check_closure "$carry" "$carry/lib" "$carry/bin/voxd-dataset" "$carry"/lib/*
check_closure "$festival" "$festival/lib" "$festival/bin/festival" "$festival"/lib/*
tar -C "$festival" -cJf "$carry/festival.tar.xz" bin lib share
echo "package.sh: $(du -sh "$carry" | cut -f1) in $carry:"
(cd "$carry" && find . -type f | LC_ALL=C sort | xargs ls -l | awk '{print "  " $5 "\t" $9}')
