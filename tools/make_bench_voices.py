#!/usr/bin/env python3
"""Makes random-weight voices at the public checkpoints' sizes, for benchmarks (not committed).

  lj-v1  FastSpeech2 at ming024's LJSpeech size (34.6 M parameters) + HiFiGAN V1 (13.9 M)
  lj-v2  the same FastSpeech2 + HiFiGAN V2 (0.9 M)
  lj-v3  the same FastSpeech2 + HiFiGAN V3

Every phoneme lasts 6 frames (the duration predictor's output layer is fixed), as in the PyTorch
baseline of shared/REFERENCES.md: 120 phonemes give 720 frames, 8.36 s of 22.05 kHz audio.

    /usr/bin/python3 tools/make_bench_voices.py --out /tmp/voxd-bench-voices [--voices lj-v1]

The voices use ming024's symbol table with phonemes "arpabet", so `voxd serve` and `voxd synth`
speak text with them (eSpeak NG's phonemes mapped to ARPAbet, each looked up as "@" + phoneme).
"""
import argparse
import copy
import os
import sys
import tempfile

TOOLS = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, TOOLS)

import make_test_voices as tv  # noqa: E402
import symbols as symbol_tables  # noqa: E402

# ming024's config/LJSpeech/model.yaml.
LJSPEECH_MODEL_YAML = copy.deepcopy(tv.TINY_MODEL_YAML)
LJSPEECH_MODEL_YAML["transformer"].update({
    "encoder_layer": 4, "encoder_head": 2, "encoder_hidden": 256,
    "decoder_layer": 6, "decoder_head": 2, "decoder_hidden": 256, "conv_filter_size": 1024})
LJSPEECH_MODEL_YAML["variance_predictor"]["filter_size"] = 256
LJSPEECH_POSTNET_DIM = 512

# The generator fields of jik876's config_v1.json, config_v2.json and config_v3.json.
HIFIGAN_V1 = dict(tv.TINY_HIFIGAN_JSON, upsample_initial_channel=512)
HIFIGAN_V2 = dict(tv.TINY_HIFIGAN_JSON, upsample_initial_channel=128)
HIFIGAN_V3 = dict(tv.TINY_HIFIGAN_JSON, resblock="2", upsample_rates=[8, 8, 4],
                  upsample_kernel_sizes=[16, 16, 8], upsample_initial_channel=256,
                  resblock_kernel_sizes=[3, 5, 7],
                  resblock_dilation_sizes=[[1, 2], [2, 6], [3, 12]])
VOCODERS = {"lj-v1": HIFIGAN_V1, "lj-v2": HIFIGAN_V2, "lj-v3": HIFIGAN_V3}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--voices", default=",".join(VOCODERS),
                        help="comma-separated names of the voices to make (default: all)")
    args = parser.parse_args()
    names = [n for n in args.voices.split(",") if n]
    unknown = [n for n in names if n not in VOCODERS]
    if unknown or not names:
        parser.error(f"--voices: unknown {unknown}; known: {', '.join(VOCODERS)}")
    for name in names:
        vocoder = VOCODERS[name]
        with tempfile.TemporaryDirectory() as work:
            tv.make_voice(os.path.join(args.out, name), work, symbol_tables.MING024_SYMBOLS,
                          phonemes="arpabet", seed=7, name=name,
                          model_yaml_data=LJSPEECH_MODEL_YAML, hifigan_json=vocoder,
                          postnet_dim=LJSPEECH_POSTNET_DIM, frames_per_phoneme=6)
        print(f"wrote {os.path.join(args.out, name)}")


if __name__ == "__main__":
    main()
