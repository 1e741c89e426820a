#!/usr/bin/env python3
"""A Sambert at KAN-TTS's sambert_16k.yaml sizes with random weights, for bench/sambert_bench.cpp
and bench/sambert_peer.py: DIR/config.json ({"params", "vocab"} as the parity fixtures),
DIR/model.safetensors (KAN-TTS's state-dict names) and DIR/tokens.json (one utterance of N
random tokens: ling [N][4], emotion, speaker). The duration predictor is biased to about 5
frames a token, as a trained model gives for Mandarin phones.

    /usr/bin/python3 bench/make_sambert_bench_model.py /tmp/sambert-bench [--tokens 60]
"""
import argparse
import json
import math
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools"))

from reference import sambert, sambert_fixtures  # noqa: E402
from safetensors_io import save  # noqa: E402

# Model.KanTtsSAMBERT.params of kantts/configs/sambert_16k.yaml.
PARAMS = {
    "max_len": 800, "embedding_dim": 512, "encoder_num_layers": 8, "encoder_num_heads": 8,
    "encoder_num_units": 128, "encoder_ffn_inner_dim": 1024, "encoder_projection_units": 32,
    "speaker_units": 32, "emotion_units": 32, "predictor_filter_size": 41,
    "predictor_fsmn_num_layers": 3, "predictor_num_memory_units": 128,
    "predictor_ffn_inner_dim": 256, "predictor_shift": 0, "predictor_lstm_units": 128,
    "dur_pred_prenet_units": [128, 128], "dur_pred_lstm_units": 128,
    "decoder_prenet_units": [256, 256], "decoder_num_layers": 12, "decoder_num_heads": 8,
    "decoder_num_units": 128, "decoder_ffn_inner_dim": 1024, "outputs_per_step": 3,
    "num_mels": 80, "postnet_filter_size": 41, "postnet_fsmn_num_layers": 4,
    "postnet_num_memory_units": 256, "postnet_ffn_inner_dim": 512, "postnet_shift": 17,
    "postnet_lstm_units": 128,
}
# ModelScope's table sizes for the PinYin inventory with speaker_list F7 (mask rows dropped).
VOCAB = {"sy": 146, "tone": 9, "syllable_flag": 7, "word_segment": 7, "emotion": 35,
         "speaker": 3}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out")
    parser.add_argument("--tokens", type=int, default=60)
    args = parser.parse_args()
    generator = torch.Generator().manual_seed(15)
    model = sambert.KanTtsSAMBERT(dict(PARAMS, **VOCAB))
    sambert_fixtures._randomize(model, (math.log(6.0), 0.3), generator)
    os.makedirs(args.out, exist_ok=True)
    save(os.path.join(args.out, "model.safetensors"),
         {n: t.detach().numpy() for n, t in model.state_dict().items()})
    with open(os.path.join(args.out, "config.json"), "w") as f:
        json.dump({"params": PARAMS, "vocab": VOCAB}, f, indent=1)
    n = args.tokens
    limits = [VOCAB["sy"] - 3, VOCAB["tone"] - 3, VOCAB["syllable_flag"] - 3,
              VOCAB["word_segment"] - 3]
    ling = [[int(torch.randint(0, m, (1,), generator=generator)) for m in limits]
            for _ in range(n)]
    with open(os.path.join(args.out, "tokens.json"), "w") as f:
        json.dump({"ling": ling, "emotion": [1] * n, "speaker": [0] * n}, f)


if __name__ == "__main__":
    main()
