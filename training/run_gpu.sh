#!/usr/bin/env bash
# One GPU session of en-demo training: FastSpeech2 and HiFi-GAN train at the same time on the one
# GPU (two processes), each resuming from CKPT if a checkpoint is there, each stopping cleanly
# (checkpoint written) before the wall-time budget ends. Then the checkpoints are copied to
# $OUT/fastspeech2/part-*.pt and $OUT/hifigan/part-*.pt (when OUT is set) and a summary printed.
#
#   training/run_gpu.sh DATASET CKPT [SECONDS]
#
# DATASET: a voxd-dataset directory, or one packed by `training/dataset.py pack` (no wavs). If it
#          has no manifest.jsonl and .carry/espeak/run.sh was carried (training/data/package.sh),
#          the dataset is generated there first.
# CKPT:    checkpoint directory (CKPT/fastspeech2, CKPT/hifigan); resumed when present.
# SECONDS: wall-time budget of the whole script (default 510, under a 10-minute kill).
# PYTHON:  interpreter (default python3).
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

"$py" training/train_fastspeech2.py --data "$data" --ckpt "$ckpt/fastspeech2" \
    --time-limit "$limit" --log-every 500 --save-every 5000 2>&1 | tee "$ckpt/fastspeech2.log" &
fs2=$!
"$py" training/train_hifigan.py --data "$data" --ckpt "$ckpt/hifigan" \
    --time-limit "$limit" --log-every 200 --save-every 2000 2>&1 | tee "$ckpt/hifigan.log" &
voc=$!
status=0
wait "$fs2" || status=1
wait "$voc" || status=1

if [ -n "${OUT:-}" ]; then
    for model in fastspeech2 hifigan; do
        if [ -d "$ckpt/$model" ]; then
            mkdir -p "$OUT/$model"
            cp "$ckpt/$model"/part-*.pt "$OUT/$model/"
        fi
    done
    echo "copied to \$OUT: $(find "$OUT" -type f | wc -l) files, $(du -sh "$OUT" | cut -f1)"
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
    throughput = " ".join(words[-4:]) if name == "hifigan" else " ".join(words[-2:])
    losses = " ".join(w for w in words[2:-4 if name == "hifigan" else -2]
                      if not w.startswith("lr") and not re.match(r"\d\.\d+e", w))
    print(f"| {name} | {words[1]} | {losses} | {throughput} |")
EOF
echo "done in $(( $(date +%s) - start )) s, status ${status}"
exit "$status"
