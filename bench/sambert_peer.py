#!/usr/bin/env python3
"""The peer of bench/sambert_bench.cpp: the bench model (bench/make_sambert_bench_model.py) run by
tools/reference/sambert.py — a PyTorch module whose outputs equal KAN-TTS's own (the parity
fixtures check it against KanTtsSAMBERT) and that steps its decoder as KAN-TTS's infer() does —
on the same weights and tokens, one utterance at a time as infer_sambert.py runs. Prints one JSON
line: frames, milliseconds per utterance (median of the runs), real-time factor.

    /usr/bin/python3 bench/sambert_peer.py /tmp/sambert-bench [--runs 5] [--threads 2]
"""
import argparse
import json
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools"))

from reference import sambert  # noqa: E402
from safetensors_io import load  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model_dir")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--hop", type=int, default=200)
    parser.add_argument("--rate", type=int, default=16000)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    with open(os.path.join(args.model_dir, "config.json")) as f:
        config = json.load(f)
    model = sambert.KanTtsSAMBERT(dict(config["params"], **config["vocab"]))
    state = {n: torch.from_numpy(a.copy()) for n, a in
             load(os.path.join(args.model_dir, "model.safetensors")).items()}
    model.load_state_dict(state)
    with open(os.path.join(args.model_dir, "tokens.json")) as f:
        tokens = json.load(f)
    ling = torch.LongTensor(tokens["ling"])
    emotion = torch.LongTensor(tokens["emotion"])
    speaker = torch.LongTensor(tokens["speaker"])
    times = []
    frames = 0
    for _ in range(args.runs + 1):  # the first run warms up
        start = time.perf_counter()
        out = sambert.infer(model, ling, emotion, speaker)
        times.append(time.perf_counter() - start)
        frames = out["mel"].shape[0]
    ms = statistics.median(times[1:]) * 1000
    audio_s = frames * args.hop / args.rate
    print(json.dumps({"peer": "pytorch " + torch.__version__, "tokens": len(tokens["ling"]),
                      "frames": frames, "ms": round(ms, 1), "rtf": round(ms / 1000 / audio_s, 4)}))


if __name__ == "__main__":
    main()
