#!/bin/sh
# Runs the carried voxd-dataset (built and collected by training/data/package.sh) from the
# repository root, reading the corpus and symbol table of the checkout:
#   .carry/espeak/run.sh [OUT_DIR] [more voxd-dataset options, e.g. --limit 100]
# OUT_DIR defaults to /tmp/voxd-data/en-demo. Environment: CORPUS (default
# data/corpus/en-sentences.txt), SYMBOLS (default data/symbols/espeak-ipa-en.txt), PHONEMES
# (default espeak-ipa), LANGUAGE (default en-us; zh-cn for a Mandarin voice: data/zh is the
# checkout's, OpenCC's tables the carry's), JOBS (worker processes, default 16), TEACHER
# (espeak, or festival: the carried Festival speaks with CMU ARCTIC SLT's voice in ARPAbet,
# SYMBOLS defaulting to data/symbols/arpabet-en.txt; MAX_EXTRA_PHONEMES, MAX_SUBSTITUTIONS and
# MAX_MISSING, default 3, 6 and 3, bound how far its pronunciation may differ, per sentence).
case $0 in */*) here=${0%/*} ;; *) here=. ;; esac
here=$(cd "$here" && pwd) || exit 1
out=${1:-/tmp/voxd-data/en-demo}
[ $# -gt 0 ] && shift
# Only the carried libraries and eSpeak data: espeak_Initialize looks for
# $ESPEAK_DATA_PATH/espeak-ng-data.
export LD_LIBRARY_PATH="$here/lib"
export ESPEAK_DATA_PATH="$here"
export VOXD_DATA_DIR="$PWD/data" VOXD_OPENCC_DIR="$here/opencc"
if [ "${TEACHER:-espeak}" = festival ]; then
  # Festival and its libraries, unpacked once beside the carry (into a temporary folder renamed
  # when whole, so that an interrupted unpack is done again).
  festival="$here/festival"
  if [ ! -d "$festival" ]; then
    rm -rf "$festival.part" && mkdir -p "$festival.part" &&
      tar -C "$festival.part" -xJf "$here/festival.tar.xz" && mv "$festival.part" "$festival" ||
      exit 1
  fi
  export LD_LIBRARY_PATH="$here/lib:$festival/lib"
  share="$festival/share/festival"
  exec "$here/bin/voxd-dataset" --corpus "${CORPUS:-data/corpus/en-sentences.txt}" \
    --symbols "${SYMBOLS:-data/symbols/arpabet-en.txt}" --phonemes arpabet \
    --language "${LANGUAGE:-en-us}" --out "$out" --jobs "${JOBS:-16}" --teacher festival \
    --festival-command "$festival/bin/festival --libdir $share --datadir $share" \
    --max-extra-phonemes "${MAX_EXTRA_PHONEMES:-3}" --max-substitutions "${MAX_SUBSTITUTIONS:-6}" \
    --max-missing "${MAX_MISSING:-3}" "$@"
fi
exec "$here/bin/voxd-dataset" --corpus "${CORPUS:-data/corpus/en-sentences.txt}" \
  --symbols "${SYMBOLS:-data/symbols/espeak-ipa-en.txt}" --phonemes "${PHONEMES:-espeak-ipa}" \
  --language "${LANGUAGE:-en-us}" --out "$out" --jobs "${JOBS:-16}" "$@"
