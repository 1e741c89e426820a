#!/usr/bin/env bash
# One GPU session of en-demo training: FastSpeech2 and HiFi-GAN train at the same time on the one
# GPU (two processes, 4 CPU threads each), each resuming from CKPT if a checkpoint is there (full
# or light), each stopping cleanly (checkpoint written) before the wall-time budget ends. Each
# also writes a light checkpoint (CKPT/light/<model>, ~10 + ~6.5 MB) that can be carried into a
# cold machine. When OUT is set, these come back (at most 8 files, 64 MiB):
#   $OUT/light/fastspeech2/part-0.pt, $OUT/light/hifigan/part-0.pt   always (carry these back
#       as out/ckpt/fastspeech2/part-0.pt and out/ckpt/hifigan/part-0.pt)
#   $OUT/logs/train.log                                               both trainers' logs
#   $OUT/hifigan/part-*.pt, then $OUT/fastspeech2/part-*.pt           full checkpoints, each
#       only if it fits in what is left of the 8 files / 64 MiB
# and a summary is printed.
#
#   training/run_gpu.sh DATASET CKPT [SECONDS]
#
# DATASET: a voxd-dataset directory, or one packed by `training/dataset.py pack` (no wavs). If it
#          has no manifest.jsonl and .carry/espeak/run.sh was carried (training/data/package.sh),
#          the dataset is generated there first.
# CKPT:    checkpoint directory (CKPT/fastspeech2, CKPT/hifigan); resumed when present.
# SECONDS: wall-time budget of the whole script (default 510, under a 10-minute kill).
# PYTHON:  interpreter (default python3).
# MODELS:  which trainers run (default "fastspeech2 hifigan"; e.g. MODELS=hifigan to give the
#          vocoder the whole GPU once the acoustic model has converged).
# FASTSPEECH2_ARGS, HIFIGAN_ARGS: extra trainer options (e.g. HIFIGAN_ARGS="--batch-size 64").
set -euo pipefail
start=$(date +%s)
if [ $# -lt 2 ]; then
    echo "usage: training/run_gpu.sh DATASET CKPT [SECONDS]" >&2
    exit 2
fi
data=$1
ckpt=$2
budget=${3:-510}
py=${PYTHON:-python3}
export PYTHONUNBUFFERED=1
# Two processes on the machine's cores: a few intra-op threads each (torch's default is one per
# core in each process; the GPU trainers hardly use them, but 2 x 16 spinning OpenMP threads
# compete with the Python threads that launch the kernels).
threads=${THREADS:-4}
export OMP_NUM_THREADS=$threads MKL_NUM_THREADS=$threads
cd "$(dirname "$0")/.."
mkdir -p "$ckpt"

"$py" -c 'import torch; print("torch", torch.__version__, "cuda", torch.cuda.is_available(),
          torch.cuda.get_device_name(0) if torch.cuda.is_available() else "")'
if [ ! -f "$data/manifest.jsonl" ]; then
    if [ ! -f .carry/espeak/run.sh ]; then
        echo "error: $data has no manifest.jsonl and .carry/espeak/run.sh is not here to make it" >&2
        exit 2
    fi
    sh .carry/espeak/run.sh "$data"
fi
# The feature cache once, before both trainers would race to build it.
"$py" training/dataset.py features "$data"

copy_reserve=20  # seconds kept for copying checkpoints out
limit=$(( budget - ($(date +%s) - start) - copy_reserve ))
echo "training for ${limit} s (budget ${budget} s)"

models=${MODELS:-fastspeech2 hifigan}
pids=()
for model in $models; do
    case $model in
        fastspeech2) every="--log-every 500 --save-every 5000" extra=${FASTSPEECH2_ARGS:-} ;;
        hifigan) every="--log-every 200 --save-every 2000" extra=${HIFIGAN_ARGS:-} ;;
        *) echo "error: MODELS: unknown model '$model' (fastspeech2, hifigan)" >&2; exit 2 ;;
    esac
    # shellcheck disable=SC2086  # every and extra are option lists
    "$py" "training/train_$model.py" --data "$data" --ckpt "$ckpt/$model" \
        --light "$ckpt/light/$model" --threads "$threads" --time-limit "$limit" \
        --log-seconds 20 $every $extra 2>&1 | tee "$ckpt/$model.log" &
    pids+=($!)
done
status=0
for pid in "${pids[@]}"; do
    wait "$pid" || status=1
done

if [ -n "${OUT:-}" ]; then
    # $OUT takes at most 8 files, 16 MiB each, 64 MiB in all: light checkpoints and logs first,
    # then each full checkpoint that still fits.
    max_files=8 max_bytes=$(( 64 * 1024 * 1024 - 64 * 1024 ))
    used_files=0 used_bytes=0
    put() {  # put DEST FILE... : copies all FILEs to $OUT/DEST/ if they fit, else none
        local dest=$1 n=0 bytes=0 f
        shift
        for f in "$@"; do [ -f "$f" ] || return 0; n=$((n + 1)); bytes=$((bytes + $(stat -c %s "$f"))); done
        [ "$n" -gt 0 ] || return 0
        if [ $((used_files + n)) -gt "$max_files" ] || [ $((used_bytes + bytes)) -gt "$max_bytes" ]; then
            echo "not copied to \$OUT/$dest (no room: $n files, $bytes bytes)"
            return 0
        fi
        mkdir -p "$OUT/$dest"
        cp "$@" "$OUT/$dest/"
        used_files=$((used_files + n)) used_bytes=$((used_bytes + bytes))
    }
    put light/fastspeech2 "$ckpt"/light/fastspeech2/part-*.pt
    put light/hifigan "$ckpt"/light/hifigan/part-*.pt
    cat "$ckpt/fastspeech2.log" "$ckpt/hifigan.log" > "$ckpt/train.log" 2>/dev/null || true
    put logs "$ckpt/train.log"
    put hifigan "$ckpt"/hifigan/part-*.pt
    put fastspeech2 "$ckpt"/fastspeech2/part-*.pt
    echo "copied to \$OUT: $(find "$OUT" -type f | wc -l) files, $(du -sh "$OUT" | cut -f1)"
    find "$OUT" -type f -printf '  %P %s\n' | sort
fi

"$py" - "$ckpt" <<'EOF'
import re, sys
print("| model | step | last losses | throughput |\n|---|---|---|---|")
for name in ("fastspeech2", "hifigan"):
    try:
        lines = open(f"{sys.argv[1]}/{name}.log", encoding="utf-8").read().splitlines()
    except OSError:
        continue
    reports = [l for l in lines if re.match(rf"\[{name}\] step \d+ ", l)]
    if not reports:
        print(f"| {name} | - | no report | - |")
        continue
    words = reports[-1].split("] ", 1)[1].split()
    lr = words.index("lr")
    throughput = " ".join(words[lr + 2:])
    losses = " ".join(words[2:lr])
    print(f"| {name} | {words[1]} | {losses} | {throughput} |")
EOF
echo "done in $(( $(date +%s) - start )) s, status ${status}"
exit "$status"
