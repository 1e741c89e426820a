#!/usr/bin/env bash
# GPU checks for voxd's CUDA backend, in two halves, because the GPU machine (Ubuntu 24.04, CUDA 13
# driver, cuBLAS 13 in /usr/lib/x86_64-linux-gnu, no package registry) lacks our build
# dependencies (gtest, OpenBLAS, eSpeak NG, libsndfile, ICU):
#
#   scripts/gpu-check.sh pack
#       On the build machine (nvcc, no GPU). Configures build-gpu/ (Release), builds only the GPU
#       test binaries (they link core, the reference and CUDA backends and the models: cuBLAS,
#       libstdc++ and glibc are all they load) and copies them to build-gpu/dist/bin/, with any
#       shared library they need beyond glibc, libstdc++ and CUDA's in build-gpu/dist/lib/.
#       Archives it as build-gpu/dist.tar.xz (what a run carries: the tree and the carry together
#       must stay under 64 MiB) and prints both sizes.
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
# The device run, after `scripts/gpu-check.sh pack` here:
#   run(command="scripts/gpu-check.sh", carry=["build-gpu/dist.tar.xz"], kind="nvidia-h200",
#       timeout_s=600)
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="$ROOT/build-gpu"
DIST="$BUILD/dist"
# GPU_TESTS (a space-separated list) narrows the test binaries packed and run.
ALL_TESTS="test_cuda_ops test_cuda_models test_cuda_chunker test_cuda_caching_allocator"
ALL_TESTS+=" test_workspace_plan test_cuda_graphs test_cuda_leak"
read -r -a TESTS <<<"${GPU_TESTS:-$ALL_TESTS}"
BENCHES=(voxd_gpu_bench)

pack() {
  set -e
  cmake -S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DVOXD_CUDA=ON -DVOXD_BUILD_BENCH=ON
  cmake --build "$BUILD" -j "${JOBS:-2}" --target "${TESTS[@]}" "${BENCHES[@]}"
  rm -rf "$DIST"
  mkdir -p "$DIST/bin" "$DIST/lib" "$DIST/bench"
  for t in "${TESTS[@]}"; do cp "$BUILD/tests/cuda/$t" "$DIST/bin/"; done
  for b in "${BENCHES[@]}"; do cp "$BUILD/bench/$b" "$DIST/bench/"; done
  # Libraries the GPU machine may lack: anything but glibc, the GCC runtime and CUDA's own.
  ldd "$DIST"/bin/* "$DIST"/bench/* | awk '/=> \//{print $1, $3}' | sort -u | while read -r name path; do
    case "$name" in
      libc.so* | libm.so* | libdl.so* | librt.so* | libpthread.so* | ld-linux* | libstdc++.so* | \
        libgcc_s.so* | libcublas* | libcudart* | libcudnn*) ;;
      *) cp -L "$path" "$DIST/lib/" ;;
    esac
  done
  # OpenBLAS (36 MB + libgfortran) only backs the CPU backend, which never runs there: a stub.
  if [[ -f "$DIST/lib/libopenblas.so.0" ]]; then
    rm -f "$DIST"/lib/{libopenblas.so.0,libgfortran.so.5,libquadmath.so.0}
    gcc -shared -fPIC -O2 -Wall -Wextra -Werror -Wl,-soname,libopenblas.so.0 \
      -o "$DIST/lib/libopenblas.so.0" "$ROOT/scripts/gpu-openblas-stub.c"
    local missing
    missing="$(LD_LIBRARY_PATH="$DIST/lib" ldd -r "$DIST"/bin/* "$DIST"/bench/* 2>&1 | grep -E 'not found|undefined' || true)"
    [[ -z "$missing" ]] || { echo "pack: the OpenBLAS stub lacks symbols: $missing"; exit 1; }
  fi
  # The binaries (CUDA's static runtime and the kernels in each) are too big to carry beside the
  # tree uncompressed: carry the archive, which check() unpacks.
  tar -C "$BUILD" -cf - dist | xz -T0 -6 >"$BUILD/dist.tar.xz"
  du -sh "$DIST" "$BUILD/dist.tar.xz"
  echo "now: run(command=\"scripts/gpu-check.sh\", carry=[\"build-gpu/dist.tar.xz\"]) (or \"scripts/gpu-check.sh quick\")"
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

check() {
  local mode="${1:-full}"
  local logs="${OUT:-$(mktemp -d "${TMPDIR:-/tmp}/voxd-gpu-logs.XXXXXX")}"
  mkdir -p "$logs"
  export LD_LIBRARY_PATH="$DIST/lib:/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  export VOXD_SOURCE_DIR="$ROOT"
  # The carried archive replaces whatever dist/ an earlier call left on this machine.
  if [[ -f "$BUILD/dist.tar.xz" ]]; then
    rm -rf "$DIST"
    xz -dc "$BUILD/dist.tar.xz" | tar -C "$BUILD" -xf -
  fi
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
        [test_workspace_plan]='*' [test_cuda_leak]='-*'
        [test_cuda_graphs]='-CaptureOnGpu.UncapturableWorkFailsNamingTheOpAndTheBackendStaysUsable')
      local log errors rc
      for t in "${TESTS[@]}"; do
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

case "${1:-check}" in
  pack) pack ;;
  check) check full ;;
  quick) check quick ;;
  bench) check bench ;;
  *) echo "usage: scripts/gpu-check.sh [pack|check|quick|bench]"; exit 2 ;;
esac
