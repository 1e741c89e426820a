"""Fixtures for the FastSpeech2 parity tests (tests/families/fastspeech2/test_fastspeech2.cpp).

make(out_dir) writes one directory per case:
  config.json            the acoustic section of a voxd voice config.json (docs/voice-format.md)
  acoustic.safetensors   the model's state dict, float32, with ming024's names
  io.safetensors         inputs: ids [B, T] (I64, padded with 0), src_lens [B], speakers [B],
                         controls [3] F32 = (d_control, p_control, e_control);
                         outputs of the reference forward: log_d [B, T], d_rounded [B, T],
                         durations [B, T] (I64, the int() the length regulator applies),
                         mel_lens [B], pitch and energy predictions ([B, T] at phoneme level,
                         [B, T_mel] at frame level), mel [B, T_mel, 80] (before the postnet)
                         and postnet_mel [B, T_mel, 80]

Weights are random with non-trivial LayerNorm and BatchNorm parameters and running statistics;
the variance predictors' output layers are biased and scaled so durations are 2-8 frames and
pitch/energy predictions spread over many bins. A seed is kept only if every prediction lies
at least MARGIN from a bin boundary and every exp(log_d) - 1 at least MARGIN from a rounding
midpoint, so float32 differences between implementations cannot flip a bucket or a duration.
"""
import copy
import json
import os

import numpy as np
import torch
from safetensors_io import save  # tools/ is on sys.path (make_fixtures.py)

from . import fastspeech2

N_SYMBOLS = 48
POSTNET_DIM = 16
MARGIN = 2e-3

BASE = {
    "type": "fastspeech2",
    "weights": "acoustic.safetensors",
    "model": {
        "transformer": {"encoder_layer": 2, "encoder_head": 2, "encoder_hidden": 32,
                        "decoder_layer": 2, "decoder_head": 2, "decoder_hidden": 32,
                        "conv_filter_size": 64, "conv_kernel_size": [9, 1],
                        "encoder_dropout": 0.2, "decoder_dropout": 0.2},
        "variance_predictor": {"filter_size": 32, "kernel_size": 3, "dropout": 0.5},
        "variance_embedding": {"pitch_quantization": "linear", "energy_quantization": "linear",
                               "n_bins": 16},
        "multi_speaker": False,
        "max_seq_len": 1000,
    },
    "pitch_feature_level": "phoneme_level",
    "energy_feature_level": "phoneme_level",
    "stats": {"pitch": [-2.917, 11.392, 0.0, 1.0], "energy": [-1.431, 8.184, 0.0, 1.0]},
}
LOG_STATS = {"pitch": [2.0, 40.0, 9.0, 6.0], "energy": [1.0, 20.0, 5.0, 3.0]}


def _case(levels=("phoneme_level", "phoneme_level"), quantization=("linear", "linear"),
          multi_speaker=False, max_seq_len=1000, stats=None):
    config = copy.deepcopy(BASE)
    config["pitch_feature_level"], config["energy_feature_level"] = levels
    emb = config["model"]["variance_embedding"]
    emb["pitch_quantization"], emb["energy_quantization"] = quantization
    config["model"]["multi_speaker"] = multi_speaker
    config["model"]["max_seq_len"] = max_seq_len
    if stats:
        config["stats"] = stats
    return config


# name: (config, n_speakers, src_lens, speakers, (d_control, p_control, e_control),
#        perturb position tables, seed)
CASES = {
    "single_phoneme_linear": (_case(), 0, [15], [0], (1.0, 1.0, 1.0), False, 1),
    "multi_frame_log": (_case(("frame_level", "frame_level"), ("log", "log"), True,
                              stats=LOG_STATS), 4, [14], [2], (1.0, 1.0, 1.0), False, 2),
    # d_control 0.8 gives non-integer durations the length regulator truncates; p != e shows
    # that energy is scaled by p_control.
    "controls": (_case(("frame_level", "phoneme_level")), 0, [16], [0], (0.8, 1.3, 0.6), False,
                 3),
    # Two sequences of different lengths: padded rows carry the speaker embedding and the
    # pitch/energy embeddings of a masked 0.0 into the predictors' and postnet's convolutions.
    # Position tables are perturbed so the test sees that the parameter is used.
    "batch": (_case(("phoneme_level", "frame_level"), ("linear", "log"), True,
                    stats={"pitch": BASE["stats"]["pitch"], "energy": LOG_STATS["energy"]}),
              3, [15, 9], [1, 2], (1.1, 0.9, 1.0), True, 4),
    # Longer than max_seq_len: encoder and decoder use a fresh sinusoid table.
    "long_input": (_case(max_seq_len=12), 0, [15, 11], [0, 0], (1.0, 1.0, 1.0), False, 5),
}

# (bias, std) of the predictions before controls, per quantization.
PREDICTION = {"linear": (1.5, 2.0), "log": (9.0, 6.0)}
ENERGY_PREDICTION = {"linear": (1.5, 2.0), "log": (5.0, 3.0)}
DURATION = (1.6, 0.35)


def _randomize(model, config, generator):
    def randn(shape):
        return torch.randn(shape, generator=generator)

    emb = config["model"]["variance_embedding"]
    with torch.no_grad():
        for name, module in model.named_modules():
            if isinstance(module, torch.nn.LayerNorm):
                module.weight.copy_(1 + 0.1 * randn(module.weight.shape))
                module.bias.copy_(0.1 * randn(module.bias.shape))
            elif isinstance(module, torch.nn.BatchNorm1d):
                module.weight.copy_(1 + 0.2 * randn(module.weight.shape))
                module.bias.copy_(0.1 * randn(module.bias.shape))
                module.running_mean.copy_(0.2 * randn(module.running_mean.shape))
                module.running_var.copy_(
                    0.5 + torch.rand(module.running_var.shape, generator=generator))
                module.num_batches_tracked.fill_(1000)
        va = model.variance_adaptor
        targets = [(va.duration_predictor, DURATION),
                   (va.pitch_predictor, PREDICTION[emb["pitch_quantization"]]),
                   (va.energy_predictor, ENERGY_PREDICTION[emb["energy_quantization"]])]
        filter_size = config["model"]["variance_predictor"]["filter_size"]
        for predictor, (bias, std) in targets:
            predictor.linear_layer.weight.copy_(
                randn(predictor.linear_layer.weight.shape) * std / np.sqrt(filter_size))
            predictor.linear_layer.bias.fill_(bias)


def _build(config, n_speakers, seed, perturb):
    torch.manual_seed(seed)
    model = fastspeech2.FastSpeech2(config, N_SYMBOLS, n_speakers, POSTNET_DIM)
    generator = torch.Generator().manual_seed(seed)
    _randomize(model, config, generator)
    if perturb:
        with torch.no_grad():
            for table in (model.encoder.position_enc, model.decoder.position_enc):
                table.add_(0.05 * torch.randn(table.shape, generator=generator))
    return model.eval()


def _margins_ok(model, outputs, src_lens):
    _, _, pitch, energy, log_d, _, _, mel_masks, _, mel_lens = outputs
    va = model.variance_adaptor
    for values, bins, level in ((pitch, va.pitch_bins, va.pitch_feature_level),
                                (energy, va.energy_bins, va.energy_feature_level)):
        lengths = src_lens if level == "phoneme_level" else mel_lens
        for b, n in enumerate(lengths.tolist()):
            gap = (values[b, :n, None] - bins[None, :]).abs().min().item()
            if gap < MARGIN:
                return False
    for b, n in enumerate(src_lens.tolist()):
        frac = torch.exp(log_d[b, :n]) - 1
        if ((frac - frac.floor() - 0.5).abs() < MARGIN).any():
            return False
    return True


def _write_case(out_dir, name, config, n_speakers, lens, speakers, controls, perturb, seed):
    d_control, p_control, e_control = controls
    generator = torch.Generator().manual_seed(1000 + seed)
    max_len = max(lens)
    ids = torch.zeros(len(lens), max_len, dtype=torch.long)
    for b, n in enumerate(lens):
        ids[b, :n] = torch.randint(1, N_SYMBOLS, (n,), generator=generator)
    src_lens = torch.LongTensor(lens)
    speakers_t = torch.LongTensor(speakers)
    for attempt in range(100):
        model = _build(config, n_speakers, seed * 100 + attempt, perturb)
        with torch.no_grad():
            outputs = model(speakers_t, ids, src_lens, max_len, p_control, e_control, d_control)
        if _margins_ok(model, outputs, src_lens):
            break
    else:
        raise RuntimeError(f"{name}: no seed kept predictions away from boundaries")
    mel, postnet_mel, pitch, energy, log_d, d_rounded, _, _, _, mel_lens = outputs
    durations = torch.LongTensor([[max(int(v), 0) for v in row] for row in d_rounded.tolist()])

    case_dir = os.path.join(out_dir, name)
    os.makedirs(case_dir, exist_ok=True)
    with open(os.path.join(case_dir, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
        f.write("\n")
    save(os.path.join(case_dir, "acoustic.safetensors"),
         {k: v.detach().numpy() for k, v in model.state_dict().items()})
    arrays = {"ids": ids, "src_lens": src_lens, "speakers": speakers_t,
              "controls": torch.tensor([d_control, p_control, e_control], dtype=torch.float32),
              "log_d": log_d, "d_rounded": d_rounded, "durations": durations,
              "mel_lens": mel_lens, "pitch": pitch, "energy": energy, "mel": mel,
              "postnet_mel": postnet_mel}
    save(os.path.join(case_dir, "io.safetensors"), {k: v.numpy() for k, v in arrays.items()})
    buckets = torch.bucketize(pitch, model.variance_adaptor.pitch_bins).unique().numel()
    print(f"fastspeech2/{name}: seed {seed * 100 + attempt}, mel_lens {mel_lens.tolist()}, "
          f"durations {durations.min().item()}..{durations.max().item()}, "
          f"{buckets} pitch buckets")


def make(out_dir):
    torch.set_num_threads(1)
    for name, case in CASES.items():
        _write_case(out_dir, name, *case)
