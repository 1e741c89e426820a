#!/usr/bin/env python3
"""PyTorch eager baseline on the same work as bench/voxd_bench, on the same machine.

Runs the reference modules (tools/reference: the originals' forward code) on the random
benchmark voices' checkpoints-as-converted (the same weights voxd loads), fp32, no grad,
`--threads` intra-op threads, and prints RTF rows in voxd_bench's table format.

    /usr/bin/python3 tools/make_bench_voices.py --out /tmp/voxd-bench-voices
    /usr/bin/python3 bench/pytorch_baseline.py --voice /tmp/voxd-bench-voices/lj-v2 --threads 2
"""
import argparse
import json
import os
import statistics
import sys
import time

import numpy as np
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tools"))

import safetensors_io  # noqa: E402
from reference import fastspeech2, hifigan  # noqa: E402


def load_state(path):
    return {k: torch.from_numpy(np.array(v, dtype=np.float32 if v.dtype == np.float16 else v.dtype))
            for k, v in safetensors_io.load(path).items()}


def build(voice_dir):
    with open(os.path.join(voice_dir, "config.json"), encoding="utf-8") as f:
        config = json.load(f)
    acoustic_state = load_state(os.path.join(voice_dir, config["acoustic"]["weights"]))
    n_symbols = acoustic_state["encoder.src_word_emb.weight"].shape[0]
    postnet_dim = acoustic_state["postnet.convolutions.0.0.conv.weight"].shape[0]
    acoustic = fastspeech2.FastSpeech2(config["acoustic"], n_symbols, 0,
                                       postnet_embedding_dim=postnet_dim)
    acoustic.load_state_dict(acoustic_state, strict=False)
    vocoder = hifigan.Generator(config["vocoder"]["model"])
    vocoder.load_state_dict(load_state(os.path.join(voice_dir, config["vocoder"]["weights"])))
    return config, acoustic.eval(), hifigan.fold_weight_norm(vocoder).eval()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--voice", action="append", required=True)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--phonemes", type=int, default=120)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, {args.threads} threads")
    print("| voice | phonemes | frames | audio s | acoustic s | vocoder s | acoustic RTF | "
          "vocoder RTF | total RTF |\n|---|---|---|---|---|---|---|---|---|")
    for voice_dir in args.voice:
        config, acoustic, vocoder = build(voice_dir)
        rng = np.random.default_rng(1234)
        ids = torch.from_numpy(rng.integers(1, 61, size=(1, args.phonemes)))
        lens = torch.tensor([args.phonemes])
        acoustic_times, vocoder_times = [], []
        with torch.no_grad():
            for r in range(args.repeats + 1):
                start = time.perf_counter()
                out = acoustic(torch.zeros(1, dtype=torch.long), ids, lens, args.phonemes)
                mel = out[1].transpose(1, 2)
                middle = time.perf_counter()
                audio = vocoder(mel)
                end = time.perf_counter()
                if r:
                    acoustic_times.append(middle - start)
                    vocoder_times.append(end - middle)
        frames = mel.shape[2]
        seconds = frames * config["hop_length"] / config["sample_rate"]
        a, v = statistics.median(acoustic_times), statistics.median(vocoder_times)
        assert audio.shape[-1] == frames * config["hop_length"]
        print(f"| {config['name']} (PyTorch) | {args.phonemes} | {frames} | {seconds:.2f} | {a:.3f} | "
              f"{v:.3f} | {a / seconds:.4f} | {v / seconds:.4f} | {(a + v) / seconds:.4f} |",
              flush=True)


if __name__ == "__main__":
    main()
