#!/usr/bin/env bash
# Packs voxd's CUDA build for the GPU machine (Ubuntu 24.04, CUDA 13 driver, cuBLAS 13 in
# /usr/lib/x86_64-linux-gnu, no package registry), which lacks our build dependencies (gtest,
# OpenBLAS, eSpeak NG, libsndfile, ICU); scripts/gpu-check.py runs what it packs there.
#
#   scripts/gpu-pack.sh
#       On the build machine (nvcc, no GPU). Configures build-gpu/ (Release, and
#       VOXD_WITH_LIBAV=OFF: libavcodec and the ~35 codec libraries it loads are too big to carry,
#       so that voxd answers aac with a 400), builds the GPU test binaries and benchmarks that
#       build-gpu/gpu-tests.json lists (tests/cuda/CMakeLists.txt writes it; GPU_TESTS, names
#       separated by spaces, narrows the tests; GPU_BENCHES the benchmarks, set and empty for
#       none, as the serve modes need only voxd) and the `voxd` command (CUDA build) with its
#       voxd-espeak-worker, and copies them to build-gpu/dist/{bin,bench}/ with the manifest (narrowed) as dist/gpu-tests.json,
#       every shared library they need beyond glibc, the GCC runtime (libstdc++, libgcc_s) and
#       CUDA's in build-gpu/dist/lib/ (voxd's: eSpeak NG with libsonic, libsndfile with FLAC, Ogg
#       Vorbis, Opus, LAME and mpg123, ICU 72, spdlog, fmt and OpenMP; the HTTP layer is
#       Boost.Beast, header-only, and links nothing), and eSpeak NG's data for English in
#       build-gpu/dist/share/espeak-ng-data/ (the front end reads it through ESPEAK_DATA_PATH; the
#       other languages' dictionaries are left out). Two libraries the GPU machine never runs are
#       stubs (scripts/gpu-openblas-stub.c, scripts/pcaudio-stub.c): OpenBLAS (only the CPU
#       backend calls it; a call aborts) and pcaudiolib (eSpeak NG's audio output, which pulls in
#       PulseAudio, ALSA and X11; voxd only phonemises). Archives it as
#       build-gpu/dist.tar.xz (what a run carries: the tree and the carry together must stay under
#       64 MiB) and prints the sizes. Then checks the archive here, unpacked on its own: every
#       library resolves from dist/lib or is glibc's, the GCC runtime's or CUDA's, and the packed
#       voxd serves a request with --device cpu on voices/en-demo with the packed eSpeak NG data
#       (and the real OpenBLAS, which the CPU backend needs).
#
# VARIANTS="NAME=REF ..." also packs other builds of a few binaries for scripts/gpu-check.py ab
# (one call compares them with the working tree's): for each, a git worktree of REF (a commit,
# branch or tag) in build-gpu/variants/NAME/src, built in build-gpu/variants/NAME/build with the
# same options, and its VARIANT_TARGETS (default: test_cuda_ops voxd_gpu_bench) stripped into
# dist/variants/NAME/; dist/variants/refs.txt says which commit each is. They use dist/lib's
# libraries, and the solid archive grows by ~0.3 MB a binary, as they share most bytes.
#
# KEEP_SYMBOLS=1 packs the binaries unstripped. JOBS (2) is the build's parallelism;
# ICU_DATA_ITEMS the ICU data items kept (default nfkc.nrm, see scripts/shrink-icu-data.sh);
# ESPEAK_NG_DATA where eSpeak NG's data is, when not found.
set -euo pipefail
shopt -s nullglob  # dist/bench/ is empty when GPU_BENCHES is

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="$ROOT/build-gpu"
DIST="$BUILD/dist"

# Shared libraries the GPU machine has of its own (glibc, the GCC runtime, CUDA's): not packed.
system_library() {
  case "$1" in
    libc.so* | libm.so* | libdl.so* | librt.so* | libpthread.so* | ld-linux* | libstdc++.so* | \
      libgcc_s.so* | libcublas* | libcudart* | libcudnn* | libcufft*) return 0 ;;
    *) return 1 ;;
  esac
}

# eSpeak NG's data on this machine (ESPEAK_NG_DATA overrides).
find_espeak_data() {
  local d
  for d in "${ESPEAK_NG_DATA:-}" /usr/lib/x86_64-linux-gnu/espeak-ng-data /usr/share/espeak-ng-data \
    /usr/local/share/espeak-ng-data; do
    if [[ -n "$d" && -f "$d/phontab" ]]; then
      echo "$d"
      return
    fi
  done
}


# Writes build-gpu/gpu-tests.json narrowed to GPU_TESTS (every test when unset or empty) and
# GPU_BENCHES (every benchmark when unset, none when empty) to $1 and prints what to pack from it,
# a line "bin|bench NAME FILE" each.
narrow_manifest() {
  python3 - "$BUILD/gpu-tests.json" "$1" "${GPU_TESTS:-}" "${GPU_BENCHES-*}" <<'PY'
import json, sys
source, dest, names, bench_names = sys.argv[1], sys.argv[2], sys.argv[3].split(), sys.argv[4]
with open(source) as f:
    manifest = json.load(f)
tests = {t["name"]: t for t in manifest["tests"]}
unknown = [n for n in names if n not in tests]
if unknown:
    sys.exit(f"pack: GPU_TESTS names tests {source} lacks: {' '.join(unknown)}")
if names:
    manifest["tests"] = [tests[n] for n in names]
if bench_names != "*":
    benches = {b["name"]: b for b in manifest["benches"]}
    unknown = [n for n in bench_names.split() if n not in benches]
    if unknown:
        sys.exit(f"pack: GPU_BENCHES names benchmarks {source} lacks: {' '.join(unknown)}")
    manifest["benches"] = [benches[n] for n in bench_names.split()]
with open(dest, "w") as f:
    json.dump(manifest, f, indent=2)
for t in manifest["tests"]:
    print("bin", t["name"], t["file"])
for b in manifest["benches"]:
    print("bench", b["name"], b["file"])
PY
}

CMAKE_OPTIONS=(-DCMAKE_BUILD_TYPE=Release -DVOXD_CUDA=ON -DVOXD_BUILD_BENCH=ON -DVOXD_WITH_LIBAV=OFF)

# Builds each of VARIANTS (see the top) and copies its binaries into dist/variants/NAME/.
pack_variants() {
  local spec name ref src build target file commit
  local -a targets
  read -r -a targets <<<"${VARIANT_TARGETS:-test_cuda_ops voxd_gpu_bench}"
  for spec in ${VARIANTS:-}; do
    name="${spec%%=*}"
    ref="${spec#*=}"
    if [[ "$spec" != *=* || ! "$name" =~ ^[A-Za-z0-9_-]+$ || "$name" == main ]]; then
      echo "pack: VARIANTS wants NAME=REF items, NAME of letters, digits, - and _ (not main): '$spec'"
      exit 1
    fi
    commit="$(git -C "$ROOT" rev-parse --verify --quiet "$ref^{commit}")" ||
      { echo "pack: VARIANTS: '$ref' ($name) is no commit of this repository"; exit 1; }
    src="$BUILD/variants/$name/src"
    build="$BUILD/variants/$name/build"
    if [[ -e "$src/.git" ]]; then
      git -C "$src" checkout --quiet --detach "$commit"
    else
      git -C "$ROOT" worktree prune
      git -C "$ROOT" worktree add --quiet --detach "$src" "$commit"
    fi
    cmake -S "$src" -B "$build" "${CMAKE_OPTIONS[@]}" >/dev/null
    cmake --build "$build" -j "${JOBS:-2}" --target "${targets[@]}"
    mkdir -p "$DIST/variants/$name"
    for target in "${targets[@]}"; do
      file="$(find "$build" -type f -name "$target" -perm -u+x -not -path '*/CMakeFiles/*' | head -1)"
      [[ -n "$file" ]] || { echo "pack: variant $name built no $target"; exit 1; }
      cp "$file" "$DIST/variants/$name/"
    done
    echo "$name $commit $(git -C "$ROOT" log -1 --format=%s "$commit")" >>"$DIST/variants/refs.txt"
  done
}

pack() {
  # No libavcodec (VOXD_WITH_LIBAV=OFF; aac is refused): its ~35 codec libraries are 135 MB (40 MB
  # as xz), and it binds them at load (BIND_NOW), so stubs cannot stand in for them.
  cmake -S "$ROOT" -B "$BUILD" "${CMAKE_OPTIONS[@]}"
  local entries dir name file
  local -a targets=()
  entries="$(narrow_manifest "$BUILD/gpu-tests.packed.json")"
  while read -r dir name file; do targets+=("$name"); done <<<"$entries"
  cmake --build "$BUILD" -j "${JOBS:-2}" --target "${targets[@]}" voxd voxd-espeak-worker
  rm -rf "$DIST"
  mkdir -p "$DIST/bin" "$DIST/lib" "$DIST/bench" "$DIST/share"
  while read -r dir name file; do cp "$file" "$DIST/$dir/"; done <<<"$entries"
  mv "$BUILD/gpu-tests.packed.json" "$DIST/gpu-tests.json"
  cp "$BUILD/src/cli/voxd" "$BUILD/src/cli/voxd-espeak-worker" "$DIST/bin/"
  pack_variants
  local -a binaries=("$DIST"/bin/* "$DIST"/bench/* "$DIST"/variants/*/*)
  # Symbols only name host functions in a backtrace: stripped, the archive is ~8 % smaller.
  # KEEP_SYMBOLS=1 keeps them (compute-sanitizer's host frames then have names).
  if [[ -z "${KEEP_SYMBOLS:-}" ]]; then strip --strip-unneeded "${binaries[@]}"; fi
  # Libraries the GPU machine may lack: anything but glibc, the GCC runtime and CUDA's own.
  local real_openblas=""
  while read -r name path; do
    if ! system_library "$name"; then
      cp -L "$path" "$DIST/lib/"
      if [[ "$name" == libopenblas.so.0 ]]; then real_openblas="$path"; fi
    fi
  done < <(ldd "${binaries[@]}" | awk '/=> \//{print $1, $3}' | sort -u)
  # OpenBLAS (36 MB + libgfortran) only backs the CPU backend, which never runs there (voxd serve
  # --device cuda makes no CPU backend): a stub that aborts if called.
  if [[ -f "$DIST/lib/libopenblas.so.0" ]]; then
    rm -f "$DIST"/lib/{libopenblas.so.0,libgfortran.so.5,libquadmath.so.0}
    gcc -shared -fPIC -O2 -Wall -Wextra -Werror -Wl,-soname,libopenblas.so.0 \
      -o "$DIST/lib/libopenblas.so.0" "$ROOT/scripts/gpu-openblas-stub.c"
  fi
  # pcaudiolib is eSpeak NG's audio output, never used by voxd: a stub (see the file), without
  # PulseAudio, ALSA, X11, D-Bus and systemd behind it.
  if [[ -f "$DIST/lib/libpcaudio.so.0" ]]; then
    gcc -shared -fPIC -O2 -Wall -Wextra -Werror -Wl,-soname,libpcaudio.so.0 \
      -o "$DIST/lib/libpcaudio.so.0" "$ROOT/scripts/pcaudio-stub.c"
  fi
  local icudata
  for icudata in "$DIST"/lib/libicudata.so.*; do
    # ICU_DATA_ITEMS: the items kept (default nfkc.nrm); pack_check's request goes through NFKC.
    if [[ -f "$icudata" ]]; then
      if command -v icupkg >/dev/null; then
        # shellcheck disable=SC2086  # ICU_DATA_ITEMS is a list
        "$ROOT/scripts/shrink-icu-data.sh" "$icudata" "$icudata" ${ICU_DATA_ITEMS:-}
      else
        echo "pack: no icupkg (icu-devtools): ICU's data packed whole"
      fi
    fi
  done
  # Drop what only the real libraries needed: keep what the binaries load from dist/lib now.
  local needed f
  needed="$(LD_LIBRARY_PATH="$DIST/lib" ldd "${binaries[@]}" |
    awk -v lib="$DIST/lib/" 'index($3, lib) == 1 {n = split($3, p, "/"); print p[n]}' | sort -u)"
  for f in "$DIST"/lib/*; do
    grep -qxF "$(basename "$f")" <<<"$needed" || rm -f "$f"
  done
  local missing
  missing="$(LD_LIBRARY_PATH="$DIST/lib" ldd -r "${binaries[@]}" 2>&1 | grep -E 'not found|undefined' || true)"
  [[ -z "$missing" ]] || { echo "pack: the packed libraries (stubs?) lack symbols: $missing"; exit 1; }
  # eSpeak NG's data for English and Mandarin: every file but the other languages' dictionaries.
  local espeak
  espeak="$(find_espeak_data)"
  [[ -n "$espeak" ]] || { echo "pack: no espeak-ng-data found (set ESPEAK_NG_DATA)"; exit 1; }
  mkdir -p "$DIST/share/espeak-ng-data"
  for f in "$espeak"/*; do
    case "$(basename "$f")" in
      *_dict) [[ "$(basename "$f")" == en_dict || "$(basename "$f")" == cmn_dict ]] || continue ;;
    esac
    cp -a "$f" "$DIST/share/espeak-ng-data/"
  done
  echo "eSpeak NG data: $(du -sh "$espeak" | cut -f1) at $espeak, $(du -sh "$DIST/share/espeak-ng-data" | cut -f1) packed (English, Mandarin)"
  # OpenCC's traditional-to-simplified tables for the Mandarin front end (VOXD_OPENCC_DIR there).
  mkdir -p "$DIST/share/opencc"
  cp /usr/share/opencc/t2s.json /usr/share/opencc/TSPhrases.ocd2 /usr/share/opencc/TSCharacters.ocd2 \
    "$DIST/share/opencc/"
  # The binaries (CUDA's static runtime and the kernels in each) are too big to carry beside the
  # tree uncompressed: carry the archive, which scripts/gpu-check.py unpacks. One thread and -9's
  # 64 MiB window, so that each binary is compressed against the others, which share most of their
  # bytes (the whole suite: 14.4 MB with -T0 -6, 9.0 MB so, 8.3 MB stripped).
  tar -C "$BUILD" -cf - dist | xz -T1 -9 >"$BUILD/dist.tar.xz"
  du -shc "$DIST"/*
  du -sh "$BUILD/dist.tar.xz"
  local tree_bytes archive_bytes
  tree_bytes="$(cd "$ROOT" && git ls-files -z --cached --others --exclude-standard |
    xargs -0 stat -c %s 2>/dev/null | awk '{s += $1} END {print s + 0}')"
  archive_bytes="$(stat -c %s "$BUILD/dist.tar.xz")"
  awk -v t="$tree_bytes" -v a="$archive_bytes" 'BEGIN {
    m = 1048576; printf "carry: working tree %.1f MiB + archive %.1f MiB = %.1f MiB of 64 MiB\n", t / m, a / m, (t + a) / m
    if (t + a > 64 * m) print "ERROR: over the 64 MiB a run may carry: narrow GPU_TESTS or GPU_BENCHES"
    else if (t + a > 56 * m) print "WARNING: less than 8 MiB to spare under the 64 MiB a run may carry" }'
  pack_check "$real_openblas"
  echo "now: run(command=\"scripts/gpu-check.py\", carry=[\"build-gpu/dist.tar.xz\"]) (or \"scripts/gpu-check.py quick\", \"scripts/gpu-check.py serve\")"
}

# Checks build-gpu/dist.tar.xz, unpacked in a temporary folder, on this machine: every library
# the binaries load resolves from its dist/lib or is glibc's, the GCC runtime's or CUDA's; and its
# voxd serves one request on the CPU (voices/en-demo, the packed eSpeak NG data, with
# `real_openblas`'s folder first on the library path, because the CPU backend calls OpenBLAS and
# the packed one is a stub).
pack_check() {
  local real_openblas="$1"
  local dir
  dir="$(mktemp -d "${TMPDIR:-/tmp}/voxd-pack-check.XXXXXX")"
  xz -dc "$BUILD/dist.tar.xz" | tar -C "$dir" -xf -
  local dist="$dir/dist" bad=""
  local name path
  while read -r name path; do
    if [[ "$path" == "not" ]]; then
      bad+=" $name (not found)"
    elif ! system_library "$name" && [[ "$path" != "$dist/lib/"* ]]; then
      bad+=" $name ($path)"
    fi
  done < <(LD_LIBRARY_PATH="$dist/lib" ldd "$dist"/bin/* "$dist"/bench/* "$dist"/variants/*/* | awk '/=>/{print $1, $3}' | sort -u)
  [[ -z "$bad" ]] || { echo "pack check: libraries not from dist/lib:$bad"; exit 1; }
  echo "pack check: every library resolves from dist/lib or is glibc's, the GCC runtime's or CUDA's"
  [[ -n "$real_openblas" ]] || real_openblas="$(ldconfig -p | awk '/libopenblas.so.0 /{print $NF; exit}')"
  local libpath="$dist/lib"
  if [[ -n "$real_openblas" ]]; then libpath="$(dirname "$real_openblas"):$libpath"; fi
  # The packed eSpeak NG honours ESPEAK_DATA_PATH: pointed at an empty folder, it fails there.
  mkdir -p "$dir/empty"
  if ESPEAK_DATA_PATH="$dir/empty" LD_LIBRARY_PATH="$libpath" "$dist/bin/voxd" --backend cpu synth \
    --voice "$ROOT/voices/en-demo" --text "Hello." --out "$dir/none.wav" >"$dir/empty.log" 2>&1; then
    echo "pack check: voxd spoke with ESPEAK_DATA_PATH on an empty folder (which data did it use?)"
    exit 1
  fi
  grep -q "$dir/empty/" "$dir/empty.log" ||
    { echo "pack check: eSpeak NG did not look in ESPEAK_DATA_PATH:"; cat "$dir/empty.log"; exit 1; }
  echo "pack check: eSpeak NG reads its data from ESPEAK_DATA_PATH ($(head -1 "$dir/empty.log"))"
  local log="$dir/serve.log"
  : >"$log"
  ESPEAK_DATA_PATH="$dist/share" LD_LIBRARY_PATH="$libpath" "$dist/bin/voxd" serve --device cpu \
    --voice "$ROOT/voices/en-demo" --port 0 --log-format json --espeak-processes 2 \
    >/dev/null 2>"$log" &
  local pid=$! url="" i
  for ((i = 0; i < 600; i++)); do
    url="$(grep -o '"url":"http://[^"]*"' "$log" | head -1 | cut -d'"' -f4 || true)"
    [[ -n "$url" ]] || ! kill -0 "$pid" 2>/dev/null && break
    sleep 0.1
  done
  [[ -n "$url" ]] || { echo "pack check: voxd serve did not start:"; cat "$log"; kill "$pid" 2>/dev/null; exit 1; }
  local rc=0
  # Full-width letters and a ligature go through ICU's NFKC, digits and a time through the
  # normaliser, the words through eSpeak NG.
  python3 - "$url" "$dir/hello.wav" <<'EOF' || rc=$?
import json, sys, urllib.request
url, out = sys.argv[1], sys.argv[2]
body = json.dumps({"model": "tts-1", "voice": "en-demo", "response_format": "wav",
                   "input": "Ｈｅｌｌｏ from the packed voxd: the ﬁrst 2 tests at 10:30."}).encode()
request = urllib.request.Request(url + "/v1/audio/speech", body, {"Content-Type": "application/json"})
with urllib.request.urlopen(request, timeout=300) as response:
    data = response.read()
assert data[:4] == b"RIFF" and len(data) > 44 + 22050, (len(data), data[:64])
open(out, "wb").write(data)
print(f"pack check: voxd serve --device cpu answered a {len(data)}-byte WAV "
      f"({(len(data) - 44) / 2 / 22050:.2f} s of audio)")
EOF
  kill -TERM "$pid" 2>/dev/null || true
  local exit_rc=0
  wait "$pid" || exit_rc=$?
  if [[ $rc -ne 0 || $exit_rc -ne 0 ]]; then
    echo "pack check: the request failed (exit $rc) or voxd serve exited $exit_rc:"
    cat "$log"
    exit 1
  fi
  echo "pack check: voxd serve exited 0 after SIGTERM"
  rm -rf "$dir"
}

pack
