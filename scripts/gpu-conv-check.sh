#!/usr/bin/env bash
# The vocoder's convolution kernels side by side on the GPU machine, in one call (issue 19,
# part 1): what a kernel change needs checked and timed, in about five minutes.
#
#   run(command="scripts/gpu-conv-check.sh", carry=["build-gpu/dist.tar.xz"])
#   (packed with GPU_TESTS=test_cuda_ops GPU_BENCHES=voxd_gpu_bench scripts/gpu-pack.sh)
#
# 1. the op table's conv1d cases in F16 and BF16 (and the wgmma test) through the default path
#    (the mma.sync implicit GEMM) and through VOXD_CUDA_CONV=wgmma, the two in parallel (OPS=0
#    skips them, after a gpu-check.py quick in the same call);
# 2. voxd_gpu_bench on lj-v1 f16 at batches 1, 8 and 32 through each path;
# 3. ncu's kernel time by kernel name over a batch-of-8 pass through each path
#    (bench/ncu_summary.py; NCU_PATHS narrows the paths), and ncu's speed-of-light and
#    occupancy sections and memory tables (which traffic fills L2) of one wgmma launch (NCU=0
#    skips the step);
# 4. bench/pytorch_best.py (PyTorch's best on the same work: eager, inductor, CUDA graphs),
#    all three capped together at PEER_TIMEOUT seconds (200).
# The tables are printed; the tests' logs, ncu's sections and the peer's errors go to $OUT.
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
LOGS="${OUT:-/tmp/conv-check}"  # what comes back: a few logs
WORK=/tmp/conv-check-work         # ncu's CSVs and the peer's JSON stay on the machine
mkdir -p "$LOGS" "$WORK"
cd "$ROOT"
tar -C build-gpu -xJf build-gpu/dist.tar.xz || exit 1
export LD_LIBRARY_PATH="$ROOT/build-gpu/dist/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
BIN=build-gpu/dist/bin
BENCH=build-gpu/dist/bench/voxd_gpu_bench
VOICES=/tmp/voxd-bench-voices
[[ -f $VOICES/lj-v1/config.json ]] || python3 tools/make_bench_voices.py --out "$VOICES" >/dev/null

echo "== 1. conv1d op cases (F16, BF16) per path"
if [[ ${OPS:-1} == 0 ]]; then
  echo "skipped (OPS=0)"
else
FILTER='CudaOps.Conv1d/F16:CudaOps.Conv1d/BF16:*Wgmma*'
$BIN/test_cuda_ops --gtest_filter="$FILTER" >"$LOGS/ops-auto.log" 2>&1 &
auto=$!
VOXD_CUDA_CONV=wgmma $BIN/test_cuda_ops --gtest_filter="$FILTER" >"$LOGS/ops-wgmma.log" 2>&1
wgmma_rc=$?
wait $auto
auto_rc=$?
for path in auto wgmma; do
  grep -E "^\[  (PASSED|FAILED) " "$LOGS/ops-$path.log" | sed "s/^/$path: /"
done
echo "exit: auto $auto_rc, wgmma $wgmma_rc"
fi

echo "== 2. voxd_gpu_bench lj-v1 f16 per path"
for path in auto wgmma; do
  echo "-- VOXD_CUDA_CONV=$path"
  VOXD_CUDA_CONV=$path $BENCH --voice $VOICES/lj-v1 --dtype f16 --batches 1,8,32 2>&1 |
    grep -E "^\|" | tee -a "$LOGS/bench.log"
done

echo "== 3. kernel time by name, batch 8 (ncu)"
if [[ ${NCU:-1} == 0 ]]; then
  echo "skipped (NCU=0)"
elif command -v ncu >/dev/null; then
  for path in ${NCU_PATHS-auto wgmma}; do
    echo "-- VOXD_CUDA_CONV=$path"
    VOXD_CUDA_CONV=$path ncu --metrics gpu__time_duration.sum --csv --launch-skip 400 -c 800 \
      $BENCH --voice $VOICES/lj-v1 --dtype f16 --batches 8 --repeats 1 >"$WORK/ncu-$path.csv" 2>&1
    python3 bench/ncu_summary.py "$WORK/ncu-$path.csv" --top 8
  done
  VOXD_CUDA_CONV=wgmma ncu -k regex:wgmma_conv_kernel --launch-skip 20 -c 1 --section SpeedOfLight \
    --section WarpStateStats --section Occupancy --section MemoryWorkloadAnalysis_Tables \
    $BENCH --voice $VOICES/lj-v1 --dtype f16 --batches 8 --repeats 1 >"$LOGS/ncu-wgmma.txt" 2>&1
  grep -E "wgmma_conv_kernel|Throughput|Duration|Stall|Warp Cycles|Occupancy|Registers|L2|Shared" \
    "$LOGS/ncu-wgmma.txt" | head -60
else
  echo "ncu not found"
fi

echo "== 4. PyTorch's best on the same work"
# Eager first, then the compiled ways where they matter most (inductor at batch, CUDA graphs for
# one request), in case the cap cuts the compilations short.
deadline=$((SECONDS + ${PEER_TIMEOUT:-200}))
for ways in "eager 1,32" "inductor 32" "graphs 1"; do
  set -- $ways
  left=$((deadline - SECONDS))
  ((left > 10)) || { echo "pytorch_best $1: no time left"; continue; }
  timeout $left python3 bench/pytorch_best.py --voice $VOICES/lj-v1 --ways "$1" --batches "$2" \
    --json "$WORK/pytorch-best-$1.json" 2>>"$LOGS/pytorch-best.err"
  echo "pytorch_best $1 exit $?"
done
