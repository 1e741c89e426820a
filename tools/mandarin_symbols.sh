#!/bin/sh
# Writes the symbol table of voxd's Mandarin voices (data/symbols/espeak-mnemonic-zh.txt) to
# stdout: eSpeak NG's cmn-latn-pinyin phoneme mnemonics of every syllable data/zh/chars.tsv
# reads, with each tone 1-5 and with erhua, and of the letters a-z (Latin words are spelled),
# through voxd's phonemizer (tests/text/make_symbol_table.cpp).
#   tools/mandarin_symbols.sh [MAKE_SYMBOL_TABLE]   (default build/tests/text/voxd_make_symbol_table)
# With --check FILE MAKE_SYMBOL_TABLE it exits 1 unless FILE is what it writes.
set -eu
cd "$(dirname "$0")/.."
if [ "${1:-}" = --check ]; then
  expected=$2
  shift 2
  "$0" "$@" | cmp -s - "$expected" || {
    echo "$expected is not what tools/mandarin_symbols.sh writes; run it to rebuild" >&2
    exit 1
  }
  exit 0
fi
maker=${1:-build/tests/text/voxd_make_symbol_table}
{
  cut -f2 data/zh/chars.tsv | tr ' ' '\n' | sed 's/[1-5]$//' | LC_ALL=C sort -u |
    while read -r syllable; do
      for tone in 1 2 3 4 5; do
        echo "$syllable$tone"
        echo "${syllable}r$tone"
      done
    done
  for letter in a b c d e f g h i j k l m n o p q r s t u v w x y z; do echo "$letter"; done
} | "$maker" cmn-latn-pinyin espeak-mnemonic
