#!/usr/bin/env python3
"""Turns training checkpoints into a voxd voice and a parity fixture.

CKPT/fastspeech2 and CKPT/hifigan (train_fastspeech2.py, train_hifigan.py) are written out the
way the original repositories save them (ming024: {"model": state_dict} with preprocess.yaml,
model.yaml, stats.json; jik876: {"generator": state_dict} with config.json), then
tools/convert_checkpoint.py makes the voice directory. The parity fixture holds a few fixed
symbol sequences run through the PyTorch reference forward (eval mode, weights rounded to the
voice's storage type): `ids_K` (int64), `mel_K` ([80, frames], postnet output) and `audio_K`
(samples), K = 0, 1, ...

    /usr/bin/python3 training/export.py --ckpt CKPT [--config training/en-demo.yaml] \\
        [--out voices/NAME] [--fixture tests/fixtures/NAME/parity.safetensors] [--dtype f16|f32]

NAME, the language, the phoneme set, the symbol table and the parity sequences are the config's
`voice` section (common.voice_settings; en-demo's when it has none).
"""
import argparse
import json
import os
import sys
import tempfile

import numpy as np
import torch
import yaml

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import common  # noqa: E402
import convert_checkpoint  # noqa: E402
import safetensors_io  # noqa: E402
import train_fastspeech2  # noqa: E402
from reference import hifigan  # noqa: E402



def preprocess_yaml(voice):
    """ming024's preprocess.yaml fields the converter reads (HiFi-GAN-convention features)."""
    return {
        "dataset": voice["name"],
        "path": {"preprocessed_path": "."},
        "preprocessing": {
            "text": {"language": voice["language"]},
            "audio": {"sampling_rate": 22050, "max_wav_value": 32768.0},
            "stft": {"filter_length": 1024, "hop_length": 256, "win_length": 1024},
            "mel": {"n_mel_channels": 80, "mel_fmin": 0, "mel_fmax": 8000},
            "pitch": {"feature": "phoneme_level", "normalization": True},
            "energy": {"feature": "phoneme_level", "normalization": True},
        },
    }

# en-demo's fixed phoneme sequences for the parity fixture ("hello world.", "the quick brown
# fox.", "testing, one two three?"), as voxd's front end spells them; a config's voice.parity
# gives another voice's.
PARITY_PHONEMES = [
    ["h", "ə", "l", "ˈ", "oʊ", " ", "w", "ˈ", "ɜː", "l", "d", "."],
    ["ð", "ə", " ", "k", "w", "ˈ", "ɪ", "k", " ", "b", "ɹ", "ˈ", "aʊ", "n", " ", "f", "ˈ", "ɑː",
     "k", "s", "."],
    ["t", "ˈ", "ɛ", "s", "t", "ɪ", "ŋ", ",", " ", "w", "ˈ", "ʌ", "n", " ", "t", "ˈ", "uː", " ",
     "θ", "ɹ", "ˈ", "iː", "?"],
]


def round_to_storage(module, dtype):
    """Rounds float parameters (not the *_bins edges, which stay float32 in a voice) through
    float16 when the voice stores f16, so PyTorch computes with the weights voxd loads."""
    if dtype != "f16":
        return
    with torch.no_grad():
        for name, tensor in list(module.named_parameters()) + list(module.named_buffers()):
            if tensor.is_floating_point() and not name.endswith("_bins"):
                tensor.copy_(tensor.half().float())


def load_models(ckpt):
    """(fastspeech2 model, fs2 state, generator, hifigan state) from CKPT, in eval mode."""
    fs2 = common.load_checkpoint(os.path.join(ckpt, "fastspeech2"))
    voc = common.load_checkpoint(os.path.join(ckpt, "hifigan"))
    if fs2 is None or voc is None:
        raise SystemExit(f"error: {ckpt}: expected fastspeech2/part-0.pt and hifigan/part-0.pt "
                         "(train_fastspeech2.py and train_hifigan.py checkpoints)")
    model = train_fastspeech2.build_model(fs2["config"], fs2["stats"], fs2["n_symbols"])
    model.load_state_dict(fs2["model"])
    generator = hifigan.Generator(voc["config"]["generator"])
    generator.load_state_dict(voc["generator"])
    return model.eval(), fs2, generator.eval(), voc


def write_voice(ckpt, out, dtype, voice):
    model, fs2, generator, voc = load_models(ckpt)
    with tempfile.TemporaryDirectory() as work:
        paths = {n: os.path.join(work, n) for n in ("preprocess.yaml", "model.yaml",
                                                    "stats.json", "config.json", "fs2.pth.tar",
                                                    "g_latest")}
        for name, data in (("preprocess.yaml", preprocess_yaml(voice)),
                           ("model.yaml", fs2["config"]["model"])):
            with open(paths[name], "w", encoding="utf-8") as f:
                yaml.safe_dump(data, f, sort_keys=False)
        hifigan_json = dict(voc["config"]["generator"], sampling_rate=22050, hop_size=256,
                            n_fft=1024, win_size=1024, fmin=0, fmax=8000,
                            segment_size=voc["config"]["segment_size"])
        for name, data in (("stats.json", fs2["stats"]), ("config.json", hifigan_json)):
            with open(paths[name], "w", encoding="utf-8") as f:
                json.dump(data, f, indent=2)
        torch.save({"model": model.state_dict()}, paths["fs2.pth.tar"])
        torch.save({"generator": generator.state_dict()}, paths["g_latest"])
        status = convert_checkpoint.main([
            "--fastspeech2", paths["fs2.pth.tar"], "--preprocess-config", paths["preprocess.yaml"],
            "--model-config", paths["model.yaml"], "--stats", paths["stats.json"],
            "--hifigan", paths["g_latest"], "--hifigan-config", paths["config.json"],
            "--symbols", voice["symbols"], "--phonemes", voice["phonemes"],
            "--language", voice["language"], "--name", voice["name"], "--dtype", dtype,
            "--out", out, "--force"])
    if status != 0:
        raise SystemExit(f"error: converting the checkpoints in {ckpt} to {out} failed")
    return model, generator, fs2, voc


def symbol_of(phoneme, voice):
    """The symbol table's name of a front-end phoneme: ARPAbet ones are "@"-prefixed (ming024's
    table, as voxd's ARPAbet front end looks them up)."""
    return "@" + phoneme if voice["phonemes"] == "arpabet" else phoneme


def write_fixture(model, generator, path, dtype, voice):
    symbols = common.read_symbols(voice["symbols"])
    parity = voice.get("parity", PARITY_PHONEMES)
    round_to_storage(model, dtype)
    round_to_storage(generator, dtype)
    tensors = {}
    with torch.no_grad():
        for k, phonemes in enumerate(parity):
            ids = torch.tensor([[symbols.index(symbol_of(p, voice)) for p in phonemes]])
            out = model(None, ids, torch.tensor([ids.shape[1]]), ids.shape[1])
            mel = out[1][0].T  # postnet mel [80, frames]
            audio = generator(mel.unsqueeze(0))[0, 0]
            tensors[f"ids_{k}"] = ids[0].numpy().astype(np.int64)
            tensors[f"mel_{k}"] = mel.numpy().astype(np.float32)
            tensors[f"audio_{k}"] = audio.numpy().astype(np.float32)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    safetensors_io.save(path, tensors, metadata={"count": len(parity),
                                                 "voice": f"voices/{voice['name']}",
                                                 "dtype": dtype})


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ckpt", required=True, help="directory with fastspeech2/ and hifigan/")
    parser.add_argument("--config", default=common.DEFAULT_CONFIG, help="the training YAML "
                        "(its voice section)")
    parser.add_argument("--out", help="voice directory to (re)write (default voices/NAME)")
    parser.add_argument("--fixture", help="parity fixture to write (default "
                        "tests/fixtures/NAME/parity.safetensors; '' for none)")
    parser.add_argument("--dtype", choices=["f16", "f32"], default="f16",
                        help="weight storage in the voice")
    args = parser.parse_args(argv)
    voice = common.voice_settings(common.load_config(args.config))
    if args.out is None:
        args.out = os.path.join(common.REPO, "voices", voice["name"])
    if args.fixture is None:
        args.fixture = os.path.join(common.REPO, "tests", "fixtures", voice["name"],
                                    "parity.safetensors")
    model, generator, fs2, voc = write_voice(args.ckpt, args.out, args.dtype, voice)
    if args.fixture:
        write_fixture(model, generator, args.fixture, args.dtype, voice)
    size = sum(os.path.getsize(os.path.join(args.out, f)) for f in os.listdir(args.out))
    n_ac = sum(p.numel() for p in model.parameters() if p.requires_grad)
    n_voc = sum(p.numel() for p in generator.parameters())
    print(f"wrote {args.out}: {size / 1e6:.1f} MB ({args.dtype}), fastspeech2 step "
          f"{fs2['step']} ({n_ac} parameters), hifigan step {voc['step']} ({n_voc} parameters)"
          + (f"; fixture {args.fixture}" if args.fixture else ""))


if __name__ == "__main__":
    main()
