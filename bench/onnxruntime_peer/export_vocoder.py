#!/usr/bin/env python3
"""Exports a bench voice's HiFi-GAN (tools/reference's Generator on the voice's own weights, weight
norm folded, fp32) to ONNX with dynamic batch and frame axes, for vocoder.js.

    /usr/bin/python3 bench/onnxruntime_peer/export_vocoder.py /tmp/voxd-bench-voices/lj-v1 /tmp/lj-v1.onnx
"""
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import pytorch_baseline  # noqa: E402


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    voice, out = sys.argv[1], sys.argv[2]
    config, _, vocoder = pytorch_baseline.build(voice)
    mel = torch.zeros(1, config["vocoder"]["model"]["num_mels"], 720)
    torch.onnx.export(vocoder, mel, out, input_names=["mel"], output_names=["audio"],
                      dynamic_axes={"mel": {0: "batch", 2: "frames"},
                                    "audio": {0: "batch", 2: "samples"}}, opset_version=13)
    print(f"{out}: {config['name']}'s vocoder")


if __name__ == "__main__":
    main()
