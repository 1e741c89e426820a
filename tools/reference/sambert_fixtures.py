"""Fixtures for the KAN-TTS Sambert parity tests.

make(out_dir) writes one directory per case:
  config.json        {"params": Model.KanTtsSAMBERT.params field names and values (as in
                     sambert_16k.yaml, small sizes), "vocab": {"sy", "tone", "syllable_flag",
                     "word_segment", "emotion", "speaker": table sizes}}
  model.safetensors  the model's state dict, float32, with KAN-TTS's names
  io.safetensors     inputs: ling I64 [N, 4] (sy, tone, syllable_flag, word_segment), emotion
                     I64 [N], speaker I64 [N] (one utterance, the "~" EOS already dropped);
                     outputs of reference.sambert.infer: text_hid [N, P], pitch [N], energy [N],
                     log_duration [N], durations I64 [N], band_width I64 [1],
                     memory [L, r*P + S + E], decoder_mel [T, M], mel [T, M]

Weights are random (torch.Generator, fixed seeds) and scaled so activations stay O(1);
position_enc and inv_timescales are the tables the original builds. The duration head's output
layer is scaled per case and its bias shifted (deterministically, a few rounds) until the median
log duration is the case's target. A seed is kept only if every continuous duration exp(l) - 1
lies at least MARGIN (5e-3) from a rounding midpoint (x.5), the band value
max(exp(l) - 1) / r + 0.5 at least MARGIN from an integer, and the case's own requirements hold
(T >= 1, durations that vary, zero-frame tokens, T modulo r, band width, speaker and emotion
changes inside an LFR group), so float differences between implementations cannot change an
integer decision.

Cases:
  basic           12 tokens, one speaker/emotion, postnet K 7 shift 2 (lp 5, rp 1), a token
                  with 0 frames
  mixed           speakers and emotions change across tokens (both also inside an LFR group,
                  where the group's first frame wins), durations ~3-10, band >= 2, T % r != 0,
                  predictor K 4 (even: lp 2, rp 1)
  aligned         30 tokens, 3 encoder and 3 decoder layers, T % r == 0, max_len 24 < N (the
                  encoder position table is rebuilt from the formula), postnet K 8 shift 1
                  (lp 5, rp 2)
  negative_shift  predictor shift -2: the original ignores non-positive shifts (lp = rp = 2);
                  postnet K 5 shift 3: rp = -1, the window is wholly in the past (lp 5)
  one_token       N = 1
  equal_widths    embedding_dim == encoder_num_units, P + S + E == predictor_num_memory_units
                  and num_mels == postnet_num_memory_units: encoder layer 0 and FSMN layer 0
                  then DO add their outer residual (the original tests widths, not indices)
"""
import copy
import json
import os

import numpy as np
import torch
from safetensors_io import save  # tools/ is on sys.path (make_fixtures.py)

from . import sambert

MARGIN = 5e-3

BASE_PARAMS = {
    "max_len": 64,
    "embedding_dim": 32,
    "encoder_num_layers": 2,
    "encoder_num_heads": 2,
    "encoder_num_units": 16,
    "encoder_ffn_inner_dim": 32,
    "encoder_dropout": 0.1,
    "encoder_attention_dropout": 0.1,
    "encoder_relu_dropout": 0.1,
    "encoder_projection_units": 8,
    "speaker_units": 4,
    "emotion_units": 4,
    "predictor_filter_size": 5,
    "predictor_fsmn_num_layers": 2,
    "predictor_num_memory_units": 12,
    "predictor_ffn_inner_dim": 16,
    "predictor_dropout": 0.1,
    "predictor_shift": 0,
    "predictor_lstm_units": 8,
    "dur_pred_prenet_units": [8, 8],
    "dur_pred_lstm_units": 8,
    "decoder_prenet_units": [16, 16],
    "decoder_num_layers": 2,
    "decoder_num_heads": 2,
    "decoder_num_units": 16,
    "decoder_ffn_inner_dim": 32,
    "decoder_dropout": 0.1,
    "decoder_attention_dropout": 0.1,
    "decoder_relu_dropout": 0.1,
    "outputs_per_step": 3,
    "num_mels": 10,
    "postnet_filter_size": 5,
    "postnet_fsmn_num_layers": 2,
    "postnet_num_memory_units": 16,
    "postnet_ffn_inner_dim": 16,
    "postnet_dropout": 0.1,
    "postnet_shift": 0,
    "postnet_lstm_units": 8,
    "MAS": False,
}

# Each vocabulary ends with "_", "~", "@[MASK]" as KanTtsLinguisticUnit builds them; inputs use
# only the symbols before those three.
VOCAB = {"sy": 24, "tone": 8, "syllable_flag": 8, "word_segment": 8, "emotion": 8, "speaker": 6}

# name: dict(params overrides, n tokens, speakers/emotions ("const" ids or "mixed"),
#            duration head (median log duration, weight std), requirements, seed)
CASES = {
    "basic": dict(params={"postnet_filter_size": 7, "postnet_shift": 2}, n=12,
                  speaker=("const", 1), emotion=("const", 1), duration=(0.8, 2.5),
                  require={"zero_token": True}, seed=1),
    "mixed": dict(params={"predictor_filter_size": 4}, n=14, speaker=("mixed",),
                  emotion=("mixed",), duration=(1.9, 1.2),
                  require={"aligned": False, "min_band": 2, "min_rep": 3, "max_rep": 10,
                           "group_change": True}, seed=2),
    "aligned": dict(params={"encoder_num_layers": 3, "decoder_num_layers": 3, "max_len": 24,
                            "postnet_filter_size": 8, "postnet_shift": 1}, n=30,
                    speaker=("const", 2), emotion=("const", 3), duration=(1.1, 1.5),
                    require={"aligned": True}, seed=3),
    "negative_shift": dict(params={"predictor_shift": -2, "postnet_shift": 3}, n=10,
                           speaker=("const", 0), emotion=("const", 2), duration=(1.2, 2.0),
                           require={}, seed=4),
    "one_token": dict(params={}, n=1, speaker=("const", 1), emotion=("const", 0),
                      duration=(1.6, 0.5), require={"aligned": False}, seed=5),
    "equal_widths": dict(params={"embedding_dim": 16, "predictor_num_memory_units": 16,
                                 "postnet_num_memory_units": 10}, n=9, speaker=("const", 1),
                         emotion=("const", 1), duration=(1.2, 2.0), require={}, seed=6),
}


# Weight gains: sharper attention (so tokens do not all average to the same vector) and
# LSTMs whose states follow their inputs.
GAINS = {"qkv": 2.5, "w_h_kv": 2.5, "lstm": 2.0, "blstm": 2.0}


def _params(overrides):
    params = copy.deepcopy(BASE_PARAMS)
    params.update(overrides)
    return params


def _randomize(model, duration, generator):
    """Normal weights with std 1/sqrt(fan_in), small biases, LayerNorm near identity;
    the two constant tables keep the values the constructor computed."""
    def randn(shape):
        return torch.randn(shape, generator=generator)

    target, std = duration
    with torch.no_grad():
        layer_norms = {n for n, m in model.named_modules() if isinstance(m, torch.nn.LayerNorm)}
        embeddings = {n for n, m in model.named_modules() if isinstance(m, torch.nn.Embedding)}
        for name, p in model.named_parameters():
            owner, _, leaf = name.rpartition(".")
            if leaf in ("position_enc", "inv_timescales"):
                continue
            if owner in layer_norms:
                p.copy_((1.0 if leaf == "weight" else 0.0) + 0.1 * randn(p.shape))
            elif owner in embeddings:
                p.copy_(0.5 * randn(p.shape))
            elif p.dim() >= 2:
                gain = next((g for key, g in GAINS.items() if key in name), 1.0)
                p.copy_(randn(p.shape) * gain / np.sqrt(p[0].numel()))
            else:
                p.copy_(0.1 * randn(p.shape))
        fc = model.variance_adaptor.duration_predictor.fc
        fc.weight.copy_(randn(fc.weight.shape) * std / np.sqrt(fc.weight.shape[1]) * 3.0)
        fc.bias.fill_(target)


def _calibrate(model, target, ling, emotion, speaker, rounds=3):
    """Shifts the duration head's bias so the median log duration is about `target`
    (deterministic; the AR feedback makes a few rounds necessary). Returns the final outputs."""
    fc = model.variance_adaptor.duration_predictor.fc
    for _ in range(rounds):
        out = sambert.infer(model, ling, emotion, speaker)
        with torch.no_grad():
            fc.bias += float(target - np.median(out["log_duration"]))
    return sambert.infer(model, ling, emotion, speaker)


def _inputs(case, generator):
    n = case["n"]
    ling = torch.stack([torch.randint(0, VOCAB[k] - 3, (n,), generator=generator)
                        for k in ("sy", "tone", "syllable_flag", "word_segment")], dim=1)

    def ids(spec, vocab):
        if spec[0] == "const":
            return torch.full((n,), spec[1], dtype=torch.long)
        # runs of 1-3 tokens, each run a different id than the one before
        out, current = [], int(torch.randint(0, vocab - 3, (1,), generator=generator))
        while len(out) < n:
            out.extend([current] * int(torch.randint(1, 4, (1,), generator=generator)))
            current = (current + 1 + int(torch.randint(0, vocab - 4, (1,),
                                                       generator=generator))) % (vocab - 3)
        return torch.LongTensor(out[:n])

    return ling, ids(case["emotion"], VOCAB["emotion"]), ids(case["speaker"], VOCAB["speaker"])


def _check(out, emotion, speaker, r, require):
    """None if the outputs suit the fixture, else the reason."""
    d = (torch.exp(torch.from_numpy(out["log_duration"])) - 1).numpy()
    reps = out["durations"]
    t = int(reps.sum())
    if t < 1:
        return "T = 0"
    if (np.abs(d - np.floor(d) - 0.5) < MARGIN).any():
        return "duration near a rounding midpoint"
    band = d.max() / r + 0.5
    if abs(band - np.round(band)) < MARGIN:
        return "band value near an integer"
    if require.get("zero_token") and not (reps == 0).any():
        return "no zero-frame token"
    if len(reps) >= 5 and len(set(reps.tolist())) < 3:
        return "durations do not vary"
    if "aligned" in require and (t % r == 0) != require["aligned"]:
        return "T modulo r"
    if out["band_width"][0] < require.get("min_band", 0):
        return "band too narrow"
    if reps.min() < require.get("min_rep", 0) or reps.max() > require.get("max_rep", 1 << 30):
        return "durations out of range"
    if require.get("group_change"):
        for what, ids in (("speaker", speaker), ("emotion", emotion)):
            frames = np.repeat(ids.numpy(), reps)
            frames = np.pad(frames, (0, -len(frames) % r), constant_values=-1)
            if not any(len(set(g[g >= 0].tolist())) > 1 for g in frames.reshape(-1, r)):
                return f"no {what} change inside an LFR group"
    return None


def _write_case(out_dir, name, case):
    params = _params(case["params"])
    full = dict(params, **VOCAB)
    r = params["outputs_per_step"]
    ling, emotion, speaker = _inputs(case, torch.Generator().manual_seed(1000 + case["seed"]))
    for attempt in range(200):
        seed = case["seed"] * 1000 + attempt
        torch.manual_seed(seed)
        model = sambert.KanTtsSAMBERT(full)
        _randomize(model, case["duration"], torch.Generator().manual_seed(seed))
        model.eval()
        try:
            out = _calibrate(model, case["duration"][0], ling, emotion, speaker)
        except ValueError as e:  # T = 0
            reason = str(e)
            continue
        reason = _check(out, emotion, speaker, r, case["require"])
        if reason is None:
            break
    else:
        raise RuntimeError(f"sambert/{name}: no seed met the requirements ({reason})")
    for key, value in out.items():
        if value.dtype == np.float32:
            assert np.isfinite(value).all(), (name, key)
    assert np.abs(out["mel"]).max() > 1e-2 and np.abs(out["decoder_mel"]).max() > 1e-2

    case_dir = os.path.join(out_dir, name)
    os.makedirs(case_dir, exist_ok=True)
    with open(os.path.join(case_dir, "config.json"), "w") as f:
        json.dump({"params": params, "vocab": VOCAB}, f, indent=2)
        f.write("\n")
    save(os.path.join(case_dir, "model.safetensors"),
         {k: v.detach().numpy().astype(np.float32) for k, v in model.state_dict().items()})
    arrays = {"ling": ling.numpy(), "emotion": emotion.numpy(), "speaker": speaker.numpy()}
    arrays.update(out)
    save(os.path.join(case_dir, "io.safetensors"), arrays)
    reps = out["durations"]
    print(f"sambert/{name}: seed {seed}, N {len(reps)}, T {int(reps.sum())}, "
          f"L {out['memory'].shape[0]}, band {int(out['band_width'][0])}, "
          f"durations {reps.tolist()}")


def make(out_dir):
    torch.set_num_threads(1)
    for name, case in CASES.items():
        _write_case(out_dir, name, case)
