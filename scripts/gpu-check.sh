#!/usr/bin/env bash
# GPU checks for voxd's CUDA backend, in two halves, because the GPU machine (Ubuntu 24.04, CUDA 13
# driver, cuBLAS 13 in /usr/lib/x86_64-linux-gnu, no package registry) lacks our build
# dependencies (gtest, OpenBLAS, eSpeak NG, libsndfile, ICU):
#
#   scripts/gpu-check.sh pack
#       On the build machine (nvcc, no GPU). Configures build-gpu/ (Release, and
#       VOXD_WITH_LIBAV=OFF: libavcodec and the ~35 codec libraries it loads are too big to carry,
#       so that voxd answers aac with a 400), builds only the GPU test binaries, the GPU benchmark
#       and the `voxd` command (CUDA build) and copies them to build-gpu/dist/{bin,bench}/, with
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
#   scripts/gpu-check.sh [check]
#       On the GPU machine, from the repository root (the working tree has tests/fixtures/).
#       1. nvidia-smi summary;
#       2. every GPU test (label "gpu") through ctest -L gpu --output-on-failure, one ctest test
#          per gtest case, from a CTestTestfile written here for build-gpu/dist/bin;
#       3. the test binaries under compute-sanitizer --tool memcheck (ops: F32 and BF16 cases,
#          F16 runs the same kernels; models: F32), each capped at $MEMCHECK_TIMEOUT seconds.
#          CudaDeviceAllocator.CountsAndReportsOutOfMemory is left out of this step only (step 2
#          runs it): it asks cudaMalloc for 1 PiB on purpose, and memcheck counts the
#          cudaErrorMemoryAllocation it provokes as 2 errors. The test is excluded rather than
#          run with --report-api-errors no, so any other failing CUDA API call still counts;
#       4. benchmarks: voxd_gpu_bench (bench/gpu_bench.cpp) on random-weight voices at the
#          public checkpoints' sizes, made on the machine by tools/make_bench_voices.py, and on
#          voices/en-demo (BENCH_RUNS overrides the list: one option line per run);
#       5. a summary table (tests passed/failed, sanitizer errors).
#
#   scripts/gpu-check.sh bench
#       Steps 1, 4 and 5 only: the benchmarks without the tests.
#
#   scripts/gpu-check.sh quick
#       Steps 1, 2 and 5 only (nvidia-smi, ctest -L gpu, summary): no sanitizer, no benchmarks,
#       about 20 s, to fold into another run (e.g. before training on the same machine).
#       Logs go to $OUT (or a temporary folder when $OUT is unset). Exit status 0 only when
#       every step passed; the whole run stays under the run tool's 600 s.
#
#   scripts/gpu-check.sh serve
#       `voxd serve` on the GPU (a run of its own; check's steps are not in it), with the packed
#       voxd, LD_LIBRARY_PATH on dist/lib and ESPEAK_DATA_PATH on dist/share:
#       1. nvidia-smi summary;
#       2. the end-to-end suite tests/cli/test_serve.py (python3 -m unittest -v) with
#          VOXD_BIN=dist/bin/voxd and VOXD_TEST_DEVICE=cuda (the suite asks for no aac, which
#          the packed voxd, built without libavcodec, refuses), log serve-e2e.log;
#       3. load: makes the lj-v1 bench voice if missing (FastSpeech2 at LJSpeech size + HiFiGAN
#          V1, tools/make_bench_voices.py), starts `voxd serve --device cuda` on it with
#          SERVE_ARGS (default: --max-connections 1100 --max-queue 2048 --max-batch 64
#          --gpu-memory-limit 8GiB; the server is asynchronous, a few threads for any number of
#          connections, but --max-connections (4096 by default) must still exceed the clients),
#          waits for /readyz, runs bench/stream_load.py once per line of LOAD_RUNS
#          (default: 1 client, 100, 1000 at once, and 1000 of four sentences each (about 11 s of
#          audio) started over 5 s, so that all are open at once) with
#          the listen queue's overflows counted around each (with IDLE_CONNECTIONS=N, N idle
#          keep-alive connections from bench/idle_connections.py held open meanwhile, for
#          IDLE_HOLD seconds, 240 by default), then SIGTERMs the server and wants
#          exit status 0; logs serve-load.log (the server's, JSON lines) and load.log;
#       4. a summary table: the suite's result, each load row, the server's exit status, and the
#          issue's target for 1,000 streams (p95 TTFA <= 200 ms, peak memory <= 8 GiB, no
#          errors) as met or missed (informational: it does not change the exit status).
#       Exit status 0 only when the suite passed, every load run had no errors and the server
#       exited 0. Each step is capped so that the whole stays under SERVE_DEADLINE (570 s).
#
# The device runs, after `scripts/gpu-check.sh pack` here:
#   run(command="scripts/gpu-check.sh", carry=["build-gpu/dist.tar.xz"], kind="nvidia-h200",
#       timeout_s=600)
#   run(command="scripts/gpu-check.sh serve", carry=["build-gpu/dist.tar.xz"],
#       kind="nvidia-h200", timeout_s=600)
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="$ROOT/build-gpu"
DIST="$BUILD/dist"
# GPU_TESTS (a space-separated list) narrows the test binaries packed and run.
ALL_TESTS="test_cuda_ops test_cuda_models test_cuda_chunker test_cuda_caching_allocator"
ALL_TESTS+=" test_workspace_plan test_cuda_graphs test_cuda_leak test_cuda_chattts"
read -r -a TESTS <<<"${GPU_TESTS:-$ALL_TESTS}"
BENCHES=(voxd_gpu_bench voxd_chattts_bench)

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

pack() {
  set -e
  # No libavcodec (VOXD_WITH_LIBAV=OFF; aac is refused): its ~35 codec libraries are 135 MB (40 MB
  # as xz), and it binds them at load (BIND_NOW), so stubs cannot stand in for them.
  cmake -S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DVOXD_CUDA=ON -DVOXD_BUILD_BENCH=ON \
    -DVOXD_WITH_LIBAV=OFF
  cmake --build "$BUILD" -j "${JOBS:-2}" --target "${TESTS[@]}" "${BENCHES[@]}" voxd
  rm -rf "$DIST"
  mkdir -p "$DIST/bin" "$DIST/lib" "$DIST/bench" "$DIST/share"
  for t in "${TESTS[@]}"; do cp "$BUILD/tests/cuda/$t" "$DIST/bin/"; done
  for b in "${BENCHES[@]}"; do cp "$BUILD/bench/$b" "$DIST/bench/"; done
  cp "$BUILD/src/cli/voxd" "$DIST/bin/"
  # Libraries the GPU machine may lack: anything but glibc, the GCC runtime and CUDA's own.
  local real_openblas=""
  while read -r name path; do
    if ! system_library "$name"; then
      cp -L "$path" "$DIST/lib/"
      if [[ "$name" == libopenblas.so.0 ]]; then real_openblas="$path"; fi
    fi
  done < <(ldd "$DIST"/bin/* "$DIST"/bench/* | awk '/=> \//{print $1, $3}' | sort -u)
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
  needed="$(LD_LIBRARY_PATH="$DIST/lib" ldd "$DIST"/bin/* "$DIST"/bench/* |
    awk -v lib="$DIST/lib/" 'index($3, lib) == 1 {n = split($3, p, "/"); print p[n]}' | sort -u)"
  for f in "$DIST"/lib/*; do
    grep -qxF "$(basename "$f")" <<<"$needed" || rm -f "$f"
  done
  local missing
  missing="$(LD_LIBRARY_PATH="$DIST/lib" ldd -r "$DIST"/bin/* "$DIST"/bench/* 2>&1 | grep -E 'not found|undefined' || true)"
  [[ -z "$missing" ]] || { echo "pack: the packed libraries (stubs?) lack symbols: $missing"; exit 1; }
  # eSpeak NG's data for English: every file but the other languages' dictionaries (*_dict).
  local espeak
  espeak="$(find_espeak_data)"
  [[ -n "$espeak" ]] || { echo "pack: no espeak-ng-data found (set ESPEAK_NG_DATA)"; exit 1; }
  mkdir -p "$DIST/share/espeak-ng-data"
  for f in "$espeak"/*; do
    case "$(basename "$f")" in
      *_dict) [[ "$(basename "$f")" == en_dict ]] || continue ;;
    esac
    cp -a "$f" "$DIST/share/espeak-ng-data/"
  done
  echo "eSpeak NG data: $(du -sh "$espeak" | cut -f1) at $espeak, $(du -sh "$DIST/share/espeak-ng-data" | cut -f1) packed (English)"
  # The binaries (CUDA's static runtime and the kernels in each) are too big to carry beside the
  # tree uncompressed: carry the archive, which check() and serve() unpack.
  tar -C "$BUILD" -cf - dist | xz -T0 -6 >"$BUILD/dist.tar.xz"
  du -shc "$DIST"/*
  du -sh "$BUILD/dist.tar.xz"
  local tree_bytes archive_bytes
  tree_bytes="$(cd "$ROOT" && git ls-files -z --cached --others --exclude-standard |
    xargs -0 stat -c %s 2>/dev/null | awk '{s += $1} END {print s + 0}')"
  archive_bytes="$(stat -c %s "$BUILD/dist.tar.xz")"
  awk -v t="$tree_bytes" -v a="$archive_bytes" 'BEGIN {
    m = 1048576; printf "carry: working tree %.1f MiB + archive %.1f MiB = %.1f MiB of 64 MiB\n", t / m, a / m, (t + a) / m
    if (t + a > 56 * m) print "WARNING: less than 8 MiB to spare under the 64 MiB a run may carry" }'
  pack_check "$real_openblas"
  echo "now: run(command=\"scripts/gpu-check.sh\", carry=[\"build-gpu/dist.tar.xz\"]) (or \"scripts/gpu-check.sh quick\", \"scripts/gpu-check.sh serve\")"
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
  done < <(LD_LIBRARY_PATH="$dist/lib" ldd "$dist"/bin/* "$dist"/bench/* | awk '/=>/{print $1, $3}' | sort -u)
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
    --voice "$ROOT/voices/en-demo" --port 0 --log-format json >/dev/null 2>"$log" &
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

# Writes a CTestTestfile.cmake (in a fresh temporary folder, printed) with one test per gtest case
# of each binary.
write_ctest_file() {
  local dir
  dir="$(mktemp -d "${TMPDIR:-/tmp}/voxd-gpu-ctest.XXXXXX")"
  local file="$dir/CTestTestfile.cmake"
  : >"$file"
  local t suite line name serial
  for t in "${TESTS[@]}"; do
    suite=""
    while IFS= read -r line; do
      if [[ "$line" =~ ^[^\ ] ]]; then
        suite="${line%% *}"
      elif [[ "$line" =~ ^\ \ ([^ ]+) ]]; then
        name="$suite${BASH_REMATCH[1]}"
        printf 'add_test([=[%s]=] "%s" [=[--gtest_filter=%s]=])\n' "$name" "$DIST/bin/$t" "$name" >>"$file"
        # Tests that compare with the driver's free memory must not share the GPU with others.
        serial=FALSE
        [[ "$t" == test_workspace_plan || "$t" == test_cuda_caching_allocator || "$t" == test_cuda_leak ]] &&
          serial=TRUE
        printf 'set_tests_properties([=[%s]=] PROPERTIES LABELS gpu WORKING_DIRECTORY "%s" ENVIRONMENT "VOXD_SOURCE_DIR=%s" TIMEOUT 300 RUN_SERIAL %s)\n' \
          "$name" "$ROOT" "$ROOT" "$serial" >>"$file"
      fi
    done < <("$DIST/bin/$t" --gtest_list_tests)
  done
  echo "$dir"
}

find_sanitizer() {
  local c
  for c in "$(command -v compute-sanitizer 2>/dev/null)" /usr/local/cuda/bin/compute-sanitizer \
    /usr/local/cuda/compute-sanitizer/compute-sanitizer; do
    if [[ -n "$c" && -x "$c" ]]; then
      echo "$c"
      return
    fi
  done
}

# The carried archive replaces whatever dist/ an earlier call left on this machine.
unpack_dist() {
  if [[ -f "$BUILD/dist.tar.xz" ]]; then
    rm -rf "$DIST"
    xz -dc "$BUILD/dist.tar.xz" | tar -C "$BUILD" -xf -
  fi
}

check() {
  local mode="${1:-full}"
  local logs="${OUT:-$(mktemp -d "${TMPDIR:-/tmp}/voxd-gpu-logs.XXXXXX")}"
  mkdir -p "$logs"
  export LD_LIBRARY_PATH="$DIST/lib:/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  export VOXD_SOURCE_DIR="$ROOT"
  unpack_dist
  local status=0 rc
  local -a rows=()

  echo "== 1. GPU"
  nvidia-smi --query-gpu=index,name,driver_version,memory.total,memory.used,temperature.gpu,clocks.max.sm \
    --format=csv || status=1
  for t in "${TESTS[@]}"; do
    [[ -x "$DIST/bin/$t" ]] || { echo "missing $DIST/bin/$t: run 'scripts/gpu-check.sh pack' first"; exit 2; }
  done

  if [[ "$mode" != bench ]]; then
    echo "== 2. GPU tests (ctest -L gpu)"
    local ctest_dir
    ctest_dir="$(write_ctest_file)"
    (cd "$ctest_dir" && ctest -L gpu --output-on-failure -j 4) 2>&1 | tee "$logs/ctest.log"
    local ctest_status=${PIPESTATUS[0]}
    local summary
    summary="$(grep -E 'tests passed, [0-9]+ tests failed' "$logs/ctest.log" | tail -1)"
    rows+=("gpu tests|${summary:-no summary (ctest exit $ctest_status)}")
    [[ $ctest_status -eq 0 ]] || status=1
    # The convolution paths the default does not take everywhere (VOXD_CUDA_CONV).
    if [[ -x "$DIST/bin/test_cuda_ops" ]]; then
      local path
      for path in cudnn im2col; do
        VOXD_CUDA_CONV=$path "$DIST/bin/test_cuda_ops" --gtest_filter='*Conv*:*Strided*' \
          >"$logs/conv-$path.log" 2>&1
        rc=$?
        rows+=("conv ops via $path|$(grep -oE '\[  (PASSED|FAILED)  \] [0-9]+' "$logs/conv-$path.log" | tr '\n' ' ')(exit $rc)")
        [[ $rc -eq 0 ]] || status=1
      done
    fi

    if [[ "$mode" == quick ]]; then
      echo "== 5. summary (quick: no memcheck, no benchmarks)"
      local r
      for r in "${rows[@]}"; do printf '%-26s %s\n' "${r%%|*}" "${r#*|}"; done
      exit $status
    fi

    echo "== 3. compute-sanitizer memcheck"
    local sanitizer
    sanitizer="$(find_sanitizer)"
    if [[ -z "$sanitizer" ]]; then
      rows+=("memcheck|compute-sanitizer not found")
      status=1
    else
      # The deliberate out-of-memory test is excluded here (see the header); ctest ran it above.
      local -A filters=([test_cuda_ops]='-*/F16:CudaDeviceAllocator.CountsAndReportsOutOfMemory'
        [test_cuda_models]='*_F32' [test_cuda_chunker]='*'
        [test_cuda_caching_allocator]='-CudaCachingAllocator.ADriverOutOfMemoryBecomesTheSameCleanError'
        [test_workspace_plan]='*' [test_cuda_leak]='-*' [test_cuda_chattts]='*'
        [test_cuda_graphs]='-CaptureOnGpu.UncapturableWorkFailsNamingTheOpAndTheBackendStaysUsable')
      local log errors rc
      for t in "${TESTS[@]}"; do
        # test_cuda_leak's 10,000 calls are for ctest alone (step 2): under the sanitizer they would
        # run past the cap, and with every case filtered out the sanitizer fails the empty run.
        if [[ "${filters[$t]}" == "-*" ]]; then
          rows+=("memcheck $t|not run (step 2 ran it)")
          continue
        fi
        log="$logs/memcheck-$t.log"
        timeout "${MEMCHECK_TIMEOUT:-150}" "$sanitizer" --tool memcheck --leak-check full \
          --error-exitcode 99 "$DIST/bin/$t" --gtest_filter="${filters[$t]}" >"$log" 2>&1
        rc=$?
        tail -n 5 "$log"
        errors="$(grep -oE 'ERROR SUMMARY: [0-9]+ error' "$log" | tail -1 | grep -oE '[0-9]+')"
        if [[ $rc -eq 124 ]]; then
          rows+=("memcheck $t|timed out after ${MEMCHECK_TIMEOUT:-150} s (${errors:-?} errors so far)")
          status=1
        else
          rows+=("memcheck $t|${errors:-?} errors, gtest $(grep -oE '\[  (PASSED|FAILED)  \] [0-9]+' "$log" | tr '\n' ' ')(exit $rc)")
          [[ $rc -eq 0 ]] || status=1
        fi
      done
    fi
  fi

  echo "== 4. benchmarks"
  # Random-weight voices at the public checkpoints' sizes (tools/make_bench_voices.py, PyTorch),
  # made here because they are too big to carry; then voxd_gpu_bench on each setting in BENCH_RUNS.
  local voices="${BENCH_VOICES:-/tmp/voxd-bench-voices}"
  if [[ ! -f "$voices/lj-v1/config.json" ]]; then
    python3 "$ROOT/tools/make_bench_voices.py" --out "$voices" >"$logs/bench-voices.log" 2>&1 ||
      { rows+=("bench voices|make_bench_voices.py failed (see bench-voices.log)"); status=1; }
  fi
  local run
  while IFS= read -r run; do
    [[ -n "$run" ]] || continue
    # shellcheck disable=SC2086  # run is an option list
    "$DIST/bench/voxd_gpu_bench" $run 2>&1 | tee -a "$logs/bench.log"
    rc=${PIPESTATUS[0]}
    rows+=("bench ${run}|exit $rc")
    [[ $rc -eq 0 ]] || status=1
  done <<<"${BENCH_RUNS:-"--voice $voices/lj-v1 --dtype f16 --batches 1,8,32,64
--voice $voices/lj-v1 --dtype f32 --batches 1
--voice $ROOT/voices/en-demo --dtype f16 --batches 1,32"}"

  echo "== 5. summary"
  local row
  for row in "${rows[@]}"; do printf '%-26s %s\n' "${row%%|*}" "${row#*|}"; done
  exit $status
}

# Seconds a step of serve() may take: at most $1, leaving $2 (default 30) of SERVE_DEADLINE
# for what follows; 0 when there is no time left.
budget() {
  local left=$((${SERVE_DEADLINE:-570} - SECONDS - ${2:-30}))
  ((left > $1)) && left=$1
  ((left > 0)) || left=0
  echo "$left"
}

# The server's model steps so far, from its /metrics text in $1: per kind the steps, their mean
# batch and time, and the device thread's share of the wall time spent in them.
step_summary() {
  awk '
    /^voxd_engine_step_seconds_(sum|count)\{/ || /^voxd_engine_batch_size_(sum|count)\{/ {
      match($0, /kind="[a-z]+"/); kind = substr($0, RSTART + 6, RLENGTH - 7)
      split($1, name, "{"); v[name[1] "," kind] = $2; kinds[kind] = 1 }
    END {
      for (k in kinds) {
        n = v["voxd_engine_step_seconds_count," k]; s = v["voxd_engine_step_seconds_sum," k]
        b = v["voxd_engine_batch_size_sum," k]
        if (n > 0) printf "steps so far: %s %d steps, mean batch %.1f, mean %.1f ms, total %.2f s\n",
          k, n, b / n, 1000 * s / n, s }
    }' "$1"
}

# The process ids whose parent is $1 (from /proc: procps may be missing).
children_of() {
  local stat line ppid pid
  for stat in /proc/[0-9]*/stat; do
    line="$(cat "$stat" 2>/dev/null)" || continue
    read -r _ ppid _ <<<"${line##*) }"  # after "pid (comm) ": state, then the parent's id
    if [[ "$ppid" == "$1" ]]; then
      pid="${stat#/proc/}"
      echo "${pid%/stat}"
    fi
  done
}

# Runs "$@" in the background for at most $1 seconds; when time is up, ends its children first
# (the servers a test started), then it. Returns its exit status, or 124 when time ran out.
run_capped() {
  local cap="$1"
  shift
  "$@" &
  local pid=$!
  local end=$((SECONDS + cap))
  while kill -0 "$pid" 2>/dev/null; do
    if ((SECONDS >= end)); then
      local children
      children="$(children_of "$pid")"
      # shellcheck disable=SC2086  # a list of ids
      kill -TERM $children "$pid" 2>/dev/null
      sleep 5
      # shellcheck disable=SC2086
      kill -KILL $children "$pid" 2>/dev/null
      wait "$pid" 2>/dev/null
      return 124
    fi
    sleep 0.5
  done
  wait "$pid"
}

# TcpExt ListenOverflows (connections the kernel dropped because a listen queue was full); empty
# where /proc/net/netstat does not say.
listen_overflows() {
  awk '/^TcpExt:/ { if (!h) { for (i = 2; i <= NF; i++) n[i] = $i; h = 1 }
                    else for (i = 2; i <= NF; i++) if (n[i] == "ListenOverflows") print $i }' \
    /proc/net/netstat 2>/dev/null
}

# GET $1: prints the body and succeeds on status 200.
http_get() {
  python3 -c 'import sys, urllib.request
with urllib.request.urlopen(sys.argv[1], timeout=5) as r:
    sys.stdout.write(r.read().decode())' "$1" 2>/dev/null
}

serve() {
  local logs="${OUT:-$(mktemp -d "${TMPDIR:-/tmp}/voxd-gpu-logs.XXXXXX")}"
  mkdir -p "$logs"
  unpack_dist
  export LD_LIBRARY_PATH="$DIST/lib:/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  export ESPEAK_DATA_PATH="$DIST/share"
  export PYTHONUNBUFFERED=1
  local voxd="$DIST/bin/voxd"
  if [[ ! -x "$voxd" || ! -f "$ESPEAK_DATA_PATH/espeak-ng-data/phontab" ]]; then
    echo "missing $voxd or $ESPEAK_DATA_PATH/espeak-ng-data: run 'scripts/gpu-check.sh pack' first"
    exit 2
  fi
  # A socket per stream on both sides: more than the usual 1,024 open files.
  local hard
  hard="$(ulimit -Hn)"
  if [[ "$hard" == unlimited || "$hard" -ge 65536 ]]; then ulimit -n 65536; else ulimit -n "$hard"; fi
  local status=0 rc cap
  local -a rows=()

  echo "== 1. GPU"
  nvidia-smi --query-gpu=index,name,driver_version,memory.total,memory.used,temperature.gpu,clocks.max.sm \
    --format=csv || status=1
  echo "open files: $(ulimit -n); voxd: $voxd; ESPEAK_DATA_PATH=$ESPEAK_DATA_PATH"

  echo "== 2. end to end: tests/cli/test_serve.py with VOXD_TEST_DEVICE=cuda"
  if [[ "${E2E_TIMEOUT:-240}" == 0 ]]; then
    rows+=("e2e tests (cuda)|not run (E2E_TIMEOUT=0)")
    status=1
  else
    cap="$(budget "${E2E_TIMEOUT:-240}" 240)"
    (cd "$ROOT" && VOXD_BIN="$voxd" VOXD_TEST_DEVICE=cuda run_capped "$cap" \
      python3 -m unittest -v tests/cli/test_serve.py) >"$logs/serve-e2e.log" 2>&1
    rc=$?
    tail -n 40 "$logs/serve-e2e.log"
    local ran result failing
    ran="$(grep -E '^Ran [0-9]+ tests? in' "$logs/serve-e2e.log" | tail -1)"
    result="$(grep -E '^(OK|FAILED)' "$logs/serve-e2e.log" | tail -1)"
    failing="$(grep -E ' \.\.\. (FAIL|ERROR)$' "$logs/serve-e2e.log" | awk '{print $1}' | tr '\n' ' ')"
    if [[ $rc -eq 124 ]]; then
      rows+=("e2e tests (cuda)|timed out after $cap s, $(grep -cE ' \.\.\. ok$' "$logs/serve-e2e.log") passed so far ${failing:+; failed: $failing}")
    else
      rows+=("e2e tests (cuda)|${ran:-no result}: ${result:-?} (exit $rc)${failing:+; failed: $failing}")
    fi
    [[ $rc -eq 0 ]] || status=1
  fi

  echo "== 3. load: voxd serve --device cuda on lj-v1, bench/stream_load.py"
  local voices="${BENCH_VOICES:-/tmp/voxd-bench-voices}"
  if [[ ! -f "$voices/lj-v1/config.json" ]]; then
    cap="$(budget 180 150)"
    run_capped "$cap" python3 "$ROOT/tools/make_bench_voices.py" --out "$voices" --voices lj-v1 \
      >"$logs/bench-voices.log" 2>&1
    rc=$?
    tail -n 3 "$logs/bench-voices.log"
    [[ $rc -eq 0 ]] || { rows+=("bench voice lj-v1|make_bench_voices.py exit $rc (see bench-voices.log)"); status=1; }
  fi
  local server_args="${SERVE_ARGS:---max-connections 1100 --max-queue 2048 --max-batch 64 --gpu-memory-limit 8GiB}"
  local server="" url="" server_rc="not started"
  if [[ -f "$voices/lj-v1/config.json" ]]; then
    local serve_log="$logs/serve-load.log"
    : >"$serve_log"
    echo "$voxd serve --device cuda --voice $voices/lj-v1 --port 0 --log-format json $server_args"
    # shellcheck disable=SC2086  # server_args is an option list
    "$voxd" serve --device cuda --voice "$voices/lj-v1" --port 0 --log-format json $server_args \
      >/dev/null 2>"$serve_log" &
    server=$!
    local end=$((SECONDS + $(budget 90 120)))
    while ((SECONDS < end)) && kill -0 "$server" 2>/dev/null; do
      [[ -n "$url" ]] || url="$(grep -o '"url":"http://[^"]*"' "$serve_log" | head -1 | cut -d'"' -f4)"
      [[ -n "$url" ]] && http_get "$url/readyz" >/dev/null && break
      sleep 0.5
    done
    grep -m1 '"msg":"listening"' "$serve_log"
    if [[ -z "$url" ]] || ! http_get "$url/readyz" >/dev/null; then
      echo "voxd serve did not get ready:"
      tail -n 20 "$serve_log"
      rows+=("load server|not ready (see serve-load.log)")
      status=1
    else
      local run row before after overflows out round=0 idle="" idle_out=""
      if ((${IDLE_CONNECTIONS:-0} > 0)); then
        # Idle keep-alive connections held open through every load round (the server needs a
        # --keep-alive-timeout longer than the rounds and --max-connections above them).
        idle_out="$logs/idle-connections.log"
        python3 "$ROOT/bench/idle_connections.py" --url "$url" --pid "$server" \
          --connections "$IDLE_CONNECTIONS" --hold "${IDLE_HOLD:-240}" >"$idle_out" 2>&1 &
        idle=$!
        end=$((SECONDS + 60))
        while ((SECONDS < end)) && kill -0 "$idle" 2>/dev/null && ! grep -q '^opened' "$idle_out"; do
          sleep 0.5
        done
        head -n 1 "$idle_out"
      fi
      out="$(mktemp "${TMPDIR:-/tmp}/voxd-load.XXXXXX")"
      while IFS= read -r run; do
        [[ -n "$run" ]] || continue
        cap="$(budget 150 45)"
        if ((cap == 0)) || ! kill -0 "$server" 2>/dev/null; then
          rows+=("load $run|not run: $( ((cap == 0)) && echo "out of time" || echo "the server is gone")")
          status=1
          continue
        fi
        before="$(listen_overflows)"
        # shellcheck disable=SC2086  # run is an option list
        run_capped "$cap" python3 "$ROOT/bench/stream_load.py" --url "$url" --voice lj-v1 \
          --timeout 60 $run >"$out" 2>&1
        rc=$?
        after="$(listen_overflows)"
        overflows="n/a"
        if [[ -n "$before" && -n "$after" ]]; then overflows=$((after - before)); fi
        { echo "\$ stream_load.py $run (exit $rc; listen queue overflows meanwhile: $overflows)"; cat "$out"; } |
          tee -a "$logs/load.log"
        ((++round))
        http_get "$url/metrics" >"$logs/metrics-after-round-$round.txt" &&
          step_summary "$logs/metrics-after-round-$round.txt" | tee -a "$logs/load.log"
        row="$(grep -E '^\| [0-9]' "$out" | tail -1)"
        rows+=("load $run|${row:-no table row} exit $rc, listen overflows $overflows")
        [[ $rc -eq 0 ]] || status=1
      done <<<"${LOAD_RUNS:-"--clients 1
--clients 100
--clients 1000
--clients 1000 --sentences 4 --ramp 5"}"
      rm -f "$out"
      if [[ -n "$idle" ]]; then
        wait "$idle"
        rc=$?
        cat "$idle_out"
        row="$(grep -E '^\| [0-9]' "$idle_out" | tail -1)"
        rows+=("idle connections|${row:-no table row} exit $rc")
        [[ $rc -eq 0 ]] || status=1
      fi
      http_get "$url/debug/memory?format=json" >"$logs/memory-after-load.json" &&
        python3 -c 'import json, sys
m = json.load(open(sys.argv[1])); s = m["stats"]; r = m.get("device_reading") or {}
g = lambda b: "%.2f GiB" % (b / 2**30)
print("memory after the load: peak reserved", g(s["peak_reserved_bytes"]), "peak allocated",
      g(s["peak_allocated_bytes"]), "limit", g(s["limit_bytes"]) if s.get("limit_bytes") else "none",
      "| NVML used now", g(r["used_bytes"]) if "used_bytes" in r else r.get("reason", "-"))' \
          "$logs/memory-after-load.json"
    fi
    kill -TERM "$server" 2>/dev/null
    end=$((SECONDS + $(budget 60 5)))
    while kill -0 "$server" 2>/dev/null && ((SECONDS < end)); do sleep 0.5; done
    if kill -0 "$server" 2>/dev/null; then
      kill -KILL "$server" 2>/dev/null
      wait "$server" 2>/dev/null
      server_rc="did not exit after SIGTERM (killed)"
    else
      wait "$server"
      server_rc=$?
    fi
    grep -E '"msg":"(shutting down|stopped)"' "$serve_log"
  fi
  rows+=("load server exit|$server_rc")
  [[ "$server_rc" == 0 ]] || status=1

  echo "== 4. summary"
  local r
  for r in "${rows[@]}"; do printf '%-34s %s\n' "${r%%|*}" "${r#*|}"; done
  # The issue's target, from the first run of 1,000 clients or more started at once.
  local target
  target="$(printf '%s\n' "${rows[@]}" | awk -F'|' '
    /^load --clients [0-9]+/ && !/--ramp/ && !done {
      split($1, w, " "); if (w[3] + 0 < 1000) next
      done = 1; err = $5 + 0; p95 = $7 + 0; mem = ($11 ~ /[0-9]/) ? $11 + 0 : $10 + 0
      what = ($11 ~ /[0-9]/) ? "NVML device used" : "reserved"
      printf "%s clients: p95 TTFA %d ms (<= 200), peak %s %.2f GiB (<= 8), %d errors: %s",
        w[3], p95, what, mem, err, (err == 0 && p95 <= 200 && mem <= 8) ? "met" : "missed" }')"
  printf '%-34s %s\n' "target (informational)" "${target:-no run of 1,000 clients at once}"
  exit $status
}

case "${1:-check}" in
  pack) pack ;;
  check) check full ;;
  quick) check quick ;;
  bench) check bench ;;
  serve) serve ;;
  *) echo "usage: scripts/gpu-check.sh [pack|check|quick|bench|serve]"; exit 2 ;;
esac
