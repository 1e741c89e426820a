#!/usr/bin/env python3
"""Regenerates the reference fixtures the C++ parity tests compare against.

Each model's reference is a PyTorch module written to behave exactly as the original
(jik876/hifi-gan, ming024/FastSpeech2, 2noise/ChatTTS with gemelo-ai/vocos, modelscope/KAN-TTS's
Sambert and HiFiGAN), run on random weights and inputs with fixed seeds.
Run with a python that has torch and numpy (Debian: /usr/bin/python3 with python3-torch):

    /usr/bin/python3 tools/make_fixtures.py [--out tests/fixtures]
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from reference import (chattts_fixtures, fastspeech2_fixtures, hifigan_fixtures,  # noqa: E402
                       kantts_hifigan_fixtures, sambert_fixtures)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..",
                                                      "tests", "fixtures"))
    args = parser.parse_args()
    hifigan_fixtures.make(os.path.join(args.out, "hifigan"))
    fastspeech2_fixtures.make(os.path.join(args.out, "fastspeech2"))
    chattts_fixtures.make(os.path.join(args.out, "chattts"))
    sambert_fixtures.make(os.path.join(args.out, "sambert"))
    kantts_hifigan_fixtures.make(os.path.join(args.out, "kantts_hifigan"))


if __name__ == "__main__":
    main()
