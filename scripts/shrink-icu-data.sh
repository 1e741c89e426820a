#!/usr/bin/env bash
# Rewrites ICU's data library (libicudata.so.NN: 31 MB of locales, converters and break rules) as
# a library of the same soname and symbol (icudtNN_dat) holding only the items voxd reads, for
# the binaries carried to machines without our packages (scripts/gpu-pack.sh,
# training/data/package.sh). The default items are nfkc.nrm, the NFKC normaliser of
# src/text/normalize.cpp, and likelySubtags.res, from which src/text/scripts.cpp learns the
# scripts of a voice's language (the character properties both also ask for are built into
# libicuuc).
# A missing item is an error when ICU looks it up (U_FILE_ACCESS_ERROR), not a fallback.
# Needs icupkg (Debian's icu-devtools), nm, readelf and gcc.
#   scripts/shrink-icu-data.sh SOURCE DEST [ITEM ...]     (DEST may be SOURCE)
set -euo pipefail

source_lib="$1"
dest_lib="$2"
shift 2
if (($# > 0)); then items=("$@"); else items=(nfkc.nrm likelySubtags.res); fi
version="${source_lib##*.so.}"
work="$(mktemp -d "${TMPDIR:-/tmp}/voxd-icu.XXXXXX")"
trap 'rm -rf "$work"' EXIT

# The package is the bytes of the icudtNN_dat symbol: its address less its section's, plus the
# section's file offset.
read -r value size < <(nm -D -S --defined-only "$source_lib" |
  awk -v s="icudt${version}_dat" '$4 == s {print $1, $2}') ||
  { echo "shrink-icu-data: no icudt${version}_dat in $source_lib" >&2; exit 1; }
read -r addr off < <(readelf -SW "$source_lib" |
  awk '{for (i = 1; i < NF; i++) if ($i == ".rodata") print $(i + 2), $(i + 3)}') ||
  { echo "shrink-icu-data: no .rodata in $source_lib" >&2; exit 1; }
# icupkg wants the package's own name (icudtNNl) as the file's.
mkdir -p "$work/whole" "$work/items"
dd if="$source_lib" of="$work/whole/icudt${version}l.dat" bs=4M iflag=skip_bytes,count_bytes \
  status=none skip=$((16#$value - 16#$addr + 16#$off)) count=$((16#$size))
printf '%s\n' "${items[@]}" >"$work/items.txt"
icupkg -x "$work/items.txt" -d "$work/items" "$work/whole/icudt${version}l.dat"
icupkg -s "$work/items" -a "$work/items.txt" new "$work/icudt${version}l.dat"
cat >"$work/data.S" <<ASM
    .section .rodata
    .globl icudt${version}_dat
    .type icudt${version}_dat, @object
    .balign 16
icudt${version}_dat:
    .incbin "$work/icudt${version}l.dat"
    .size icudt${version}_dat, . - icudt${version}_dat
    .section .note.GNU-stack,"",@progbits
ASM
gcc -shared -Wl,-soname,"$(basename "$source_lib")" -o "$dest_lib" "$work/data.S"
echo "ICU data: $((16#$size)) bytes -> $(stat -c %s "$dest_lib") ($(icupkg -l "$work/icudt${version}l.dat" | tr '\n' ' '))"
