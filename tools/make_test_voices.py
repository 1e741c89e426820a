#!/usr/bin/env python3
"""Regenerates the small test voices in tests/fixtures/voices/ (deterministic for one torch).

Each voice is made the way a user makes one: tiny randomly initialised (seeded) FastSpeech2 and
HiFi-GAN reference models (tools/reference/, the originals' module trees and state-dict names)
are saved in the originals' checkpoint formats with ming024-style YAML/JSON configs, and
tools/convert_checkpoint.py converts them. The voices produce noise, not speech; tests use them
for lengths and plumbing.

  tiny-arpabet  ming024's symbol table (arpabet), phoneme-level pitch/energy, single speaker,
                hidden 32, HiFi-GAN V1 shape with upsample_initial_channel 32, 22050 Hz, hop 256
  tiny-ipa      phonemes espeak-ipa, symbols data/symbols/espeak-ipa-en.txt, shares
                tiny-arpabet's vocoder.safetensors through --vocoder-weights

    /usr/bin/python3 tools/make_test_voices.py [--out tests/fixtures/voices]
"""
import argparse
import json
import math
import os
import sys
import tempfile

import torch

TOOLS = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, TOOLS)

import convert_checkpoint  # noqa: E402
import symbols as symbol_tables  # noqa: E402
from reference import fastspeech2, hifigan  # noqa: E402

DEFAULT_OUT = os.path.join(os.path.dirname(TOOLS), "tests", "fixtures", "voices")
IPA_SYMBOLS = os.path.join(os.path.dirname(TOOLS), "data", "symbols", "espeak-ipa-en.txt")

# A ming024 model.yaml shrunk to hidden 32 (the original: 4/6 layers, hidden 256, filter 1024).
TINY_MODEL_YAML = {
    "transformer": {"encoder_layer": 2, "encoder_head": 2, "encoder_hidden": 32,
                    "decoder_layer": 2, "decoder_head": 2, "decoder_hidden": 32,
                    "conv_filter_size": 64, "conv_kernel_size": [9, 1],
                    "encoder_dropout": 0.2, "decoder_dropout": 0.2},
    "variance_predictor": {"filter_size": 32, "kernel_size": 3, "dropout": 0.5},
    "variance_embedding": {"pitch_quantization": "linear", "energy_quantization": "linear",
                           "n_bins": 256},
    "multi_speaker": False,
    "max_seq_len": 1000,
    "vocoder": {"model": "HiFi-GAN", "speaker": "LJSpeech"},
}
TINY_POSTNET_DIM = 32  # ming024 hard-codes 512; the reference makes it an argument

# ming024's preprocess.yaml for LJSpeech, paths aside.
PREPROCESS_YAML = {
    "dataset": "Tiny",
    "path": {"corpus_path": "/nonexistent", "lexicon_path": "lexicon/librispeech-lexicon.txt",
             "raw_path": "./raw_data/Tiny", "preprocessed_path": "./preprocessed_data/Tiny"},
    "preprocessing": {
        "val_size": 512,
        "text": {"text_cleaners": ["english_cleaners"], "language": "en"},
        "audio": {"sampling_rate": 22050, "max_wav_value": 32768.0},
        "stft": {"filter_length": 1024, "hop_length": 256, "win_length": 1024},
        "mel": {"n_mel_channels": 80, "mel_fmin": 0, "mel_fmax": 8000},
        "pitch": {"feature": "phoneme_level", "normalization": True},
        "energy": {"feature": "phoneme_level", "normalization": True},
    },
}
# ming024's LJSpeech stats.json values: [min, max, mean, std].
STATS_JSON = {"pitch": [-2.917079304729967, 11.391254536985784, 207.6309860026605,
                        46.77559025098988],
              "energy": [-1.431044578552246, 8.184337615966797, 37.32621679053821,
                         26.044180782835863]}

# jik876's config_v1.json with upsample_initial_channel 32 (V1 has 512).
TINY_HIFIGAN_JSON = {
    "resblock": "1", "num_gpus": 0, "batch_size": 16, "learning_rate": 0.0002,
    "adam_b1": 0.8, "adam_b2": 0.99, "lr_decay": 0.999, "seed": 1234,
    "upsample_rates": [8, 8, 2, 2], "upsample_kernel_sizes": [16, 16, 4, 4],
    "upsample_initial_channel": 32, "resblock_kernel_sizes": [3, 7, 11],
    "resblock_dilation_sizes": [[1, 3, 5], [1, 3, 5], [1, 3, 5]],
    "segment_size": 8192, "num_mels": 80, "num_freq": 1025, "n_fft": 1024, "hop_size": 256,
    "win_size": 1024, "sampling_rate": 22050, "fmin": 0, "fmax": 8000, "fmax_for_loss": None,
    "num_workers": 4,
    "dist_config": {"dist_backend": "nccl", "dist_url": "tcp://localhost:54321", "world_size": 1},
}

FRAMES_PER_PHONEME = 5  # every phoneme of a test voice lasts this many frames


def reference_acoustic_config(model_yaml, preprocess_yaml, stats):
    """The config dict tools/reference/fastspeech2.FastSpeech2 takes (a voice's acoustic section)."""
    pre = preprocess_yaml["preprocessing"]
    return {"model": model_yaml, "stats": stats, "n_mels": pre["mel"]["n_mel_channels"],
            "pitch_feature_level": pre["pitch"]["feature"],
            "energy_feature_level": pre["energy"]["feature"]}


def build_fastspeech2(model_yaml, preprocess_yaml, stats, n_symbols, n_speakers=0, seed=0,
                      postnet_dim=TINY_POSTNET_DIM, frames_per_phoneme=FRAMES_PER_PHONEME):
    """A randomly initialised reference FastSpeech2 with ming024's embedding of n_symbols + 1 rows.

    The duration predictor's output layer is zeroed with its bias set to
    log(1 + frames_per_phoneme), so every phoneme lasts exactly frames_per_phoneme frames
    (round(exp(log_d) - 1)) instead of a random, often zero, count.
    """
    torch.manual_seed(seed)
    model = fastspeech2.FastSpeech2(reference_acoustic_config(model_yaml, preprocess_yaml, stats),
                                    n_symbols + 1, n_speakers, postnet_embedding_dim=postnet_dim)
    with torch.no_grad():
        linear = model.variance_adaptor.duration_predictor.linear_layer
        linear.weight.zero_()
        linear.bias.fill_(math.log(1 + frames_per_phoneme))
    return model.eval()


def build_hifigan(config, seed=0):
    """A randomly initialised reference HiFi-GAN generator (weight norm split, as trained)."""
    torch.manual_seed(seed)
    return hifigan.Generator(config).eval()


def save_fastspeech2_checkpoint(model, path, module_prefix=False):
    """Saves as ming024's train.py does: {"model": state_dict, "optimizer": ...}."""
    state = model.state_dict()
    if module_prefix:
        state = {"module." + k: v for k, v in state.items()}
    optimizer = torch.optim.Adam(model.parameters(), lr=0.001)
    torch.save({"model": state, "optimizer": optimizer.state_dict()}, path)


def save_hifigan_checkpoint(model, path):
    """Saves as jik876's train.py does: {"generator": state_dict}."""
    torch.save({"generator": model.state_dict()}, path)


def write_yaml(path, data):
    import yaml
    with open(path, "w", encoding="utf-8") as f:
        yaml.safe_dump(data, f, sort_keys=False)


def write_json(path, data):
    with open(path, "w", encoding="utf-8") as f:
        json.dump(data, f, indent=4)


def make_voice(out_dir, work, symbols, *, phonemes, seed, vocoder_weights=None, name=None,
               model_yaml_data=TINY_MODEL_YAML, hifigan_json=TINY_HIFIGAN_JSON,
               postnet_dim=TINY_POSTNET_DIM, frames_per_phoneme=FRAMES_PER_PHONEME):
    """Builds random checkpoints and configs in `work`, then converts them into `out_dir`.

    The defaults make the tiny test voices; tools/make_bench_voices.py passes full sizes.
    """
    pre, model_yaml, stats = (os.path.join(work, n) for n in
                              ("preprocess.yaml", "model.yaml", "stats.json"))
    write_yaml(pre, PREPROCESS_YAML)
    write_yaml(model_yaml, model_yaml_data)
    write_json(stats, STATS_JSON)
    symbols_path = os.path.join(work, "symbols.txt")
    symbol_tables.write_symbols(symbols_path, symbols)
    ckpt = os.path.join(work, f"{seed}.pth.tar")
    save_fastspeech2_checkpoint(
        build_fastspeech2(model_yaml_data, PREPROCESS_YAML, STATS_JSON, len(symbols), seed=seed,
                          postnet_dim=postnet_dim, frames_per_phoneme=frames_per_phoneme),
        ckpt)
    argv = ["--fastspeech2", ckpt, "--preprocess-config", pre, "--model-config", model_yaml,
            "--stats", stats, "--symbols", symbols_path, "--phonemes", phonemes,
            "--out", out_dir, "--force"]
    if name:
        argv += ["--name", name]
    if vocoder_weights:
        argv += ["--vocoder-weights", vocoder_weights]
    else:
        hifigan_config = os.path.join(work, "config.json")
        write_json(hifigan_config, hifigan_json)
        generator = os.path.join(work, "g_00000000")
        save_hifigan_checkpoint(build_hifigan(hifigan_json, seed=seed + 1), generator)
        argv += ["--hifigan", generator, "--hifigan-config", hifigan_config]
    if convert_checkpoint.main(argv) != 0:
        raise SystemExit(f"converting {out_dir} failed")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=DEFAULT_OUT, help="where the voice directories go")
    args = parser.parse_args()
    torch.use_deterministic_algorithms(True)
    arpabet = os.path.join(args.out, "tiny-arpabet")
    with tempfile.TemporaryDirectory() as work:
        make_voice(arpabet, work, symbol_tables.MING024_SYMBOLS, phonemes="arpabet", seed=1)
    if not os.path.isfile(IPA_SYMBOLS):
        raise SystemExit(f"{IPA_SYMBOLS}: no such file (the espeak-ipa symbol table)")
    with tempfile.TemporaryDirectory() as work:
        make_voice(os.path.join(args.out, "tiny-ipa"), work,
                   symbol_tables.read_symbols(IPA_SYMBOLS), phonemes="espeak-ipa", seed=3,
                   vocoder_weights=os.path.join(arpabet, "vocoder.safetensors"))


if __name__ == "__main__":
    main()
