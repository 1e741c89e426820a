"""Writes a random-weight ChatTTS voice at the release's sizes (ChatTTS/config/config.py: GPT
hidden 768, 12 heads, 20 layers, intermediate 3072, 626 audio tokens; Decoder 384 -> 512 x 12
layers; DVAE 512 -> 256 x 12; Vocos dim 512, intermediate 1536, 8 layers) for
bench/chattts_bench.cpp and bench/chattts_peer.py, which time the same weights. The tokenizer is
tools/make_test_voices.py's small one, so head_text and emb_text have 155 rows instead of 21,178:
only the refine-text stage reads them, and neither benchmark runs it.

    /usr/bin/python3 bench/make_chattts_bench_voice.py OUT_DIR
"""
import os
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tools"))
import make_test_voices  # noqa: E402

RELEASE_SIZES = {
    "gpt": {"hidden_size": 768, "num_attention_heads": 12, "num_key_value_heads": 12,
            "num_hidden_layers": 20, "intermediate_size": 3072, "max_position_embeddings": 4096,
            "rms_norm_eps": 1e-6, "rope_theta": 10000.0, "num_audio_tokens": 626, "num_vq": 4},
    "decoder": {"idim": 384, "odim": 384, "hidden": 512, "n_layer": 12, "bn_dim": 128},
    "dvae_decoder": {"idim": 512, "odim": 512, "hidden": 256, "n_layer": 12, "bn_dim": 128},
    "dvae_encoder": {"idim": 512, "odim": 1024, "hidden": 256, "n_layer": 12, "bn_dim": 128},
    "dvae_dim": 512,
    "vq": {"dim": 1024, "levels": [5, 5, 5, 5], "G": 2, "R": 2},
    "vocos": {"input_channels": 100, "dim": 512, "intermediate_dim": 1536, "num_layers": 8,
              "n_fft": 1024, "hop_length": 256, "padding": "center"},
}


def main():
    if len(sys.argv) != 2:
        raise SystemExit(__doc__)
    with tempfile.TemporaryDirectory() as work:
        make_test_voices.make_chattts_voice(sys.argv[1], work, sizes=RELEASE_SIZES, seed=5,
                                            name="chattts-bench")


if __name__ == "__main__":
    main()
