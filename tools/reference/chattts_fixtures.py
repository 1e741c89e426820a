"""Fixtures for the ChatTTS parity tests (tests/fixtures/chattts/).

make(out_dir) writes one directory per case. Weight files are named, and their tensors named,
as in a voxd chattts voice (docs/voice-format.md: the originals' state-dict names, weight norm
folded); each config.json holds the sizes as the voice config.json's section of that name.
Random weights at reduced sizes, float32; expected outputs are computed in float64 from those
float32 weights and inputs (except the sampling cases, float32 as in the original), then
stored as float32. Activations stay O(1) (outputs' std is printed on generation), so a float32
implementation's max abs error is ~1e-6 and a 1e-4 bar is meaningful.

gpt/  config.json    the voice's "gpt" section (hidden_size 48, 3 heads of 16, 2 layers,
                     intermediate 96, rms_norm_eps 1e-5, rope_theta 2500, num_vq 4,
                     num_audio_tokens 33, num_text_tokens 48) plus "prefill" (positions run in
                     one pass before the cached steps), "spk_emb_id" (the [spk_emb] id) and
                     "spk_emb" (the speaker as ChatTTS's string: base16384 of LZMA2 of float16)
      gpt.safetensors    the Llama stack: layers.{i}.self_attn.{q,k,v,o}_proj.weight,
                     layers.{i}.mlp.{gate,up,down}_proj.weight,
                     layers.{i}.{input,post_attention}_layernorm.weight, norm.weight
      embed.safetensors  emb_text.weight [48, 48], emb_code.{q}.weight [33, 48],
                     head_text.weight [48, 48], head_code.{q}.weight [33, 48] (folded g·v/‖v‖)
      io.safetensors
        input_ids [1, T, 4] I64     T = 16: [Stts] [spk_emb] 6 text ids [Ptts] (text rows repeat
                                    the id in all 4 columns, as ChatTTS's tokenizer.encode), then
                                    7 audio frames of 4 codes (0..31, never EOS 32)
        text_mask [1, T] I64        1 for the 9 text positions, 0 for the audio frames
        spk_emb [48] F32            the speaker vector (float16 values), what "spk_emb" decodes to
        spk_emb_normalized [48] F32 it L2-normalised with float16 rounding (Speaker.apply)
        inputs_embeds [1, T, 48]    Embed.forward, then the [spk_emb] row replaced by the above
        hidden [1, T, 48]           last hidden states (after the final RMSNorm), one pass
        text_logits [1, T, 48]      head_text of hidden
        code_logits [1, T, 4, 33]   head_code[q] of hidden at [..., q, :]
        hidden_cached, text_logits_cached, code_logits_cached: the same, computed as generation
                                    does: positions 0..prefill-1 in one pass, then one position
                                    per call with the KV cache (they agree with the one-pass
                                    tensors to ~1e-12 here, ~1e-6 in float32)

sampling/<case>/  one step of logits processing and drawing, float32, no weights
      config.json  stage ("text" or "code"), vocab, eos, temperature (per row),
                   repetition_penalty, repetition_window 16, top_P, top_K (null: that warper
                   is off), min_tokens_to_keep 3, step, min_new_token (the names of the
                   voice's refine_text / infer_code / sampling sections)
      io.safetensors
        logits [R, V]       the head's logits (code stage: R = batch · 4, row b·4 + q is head q)
        temperature [R]     the row's temperature
        history [R, N] I64  the row's generated ids so far, oldest first (N may exceed 16)
        scaled, penalized, top_p, top_k, masked [R, V]   after each step, in order (the
                            original's logits /= T, repetition penalty, TopP, TopK, EOS mask);
                            removed logits are -inf
        probs [R, V]        softmax(masked)
        draws [R, D]        uniforms in [0, 1) (float32 values; use them as double)
        tokens [R, D] I64   the draw rule of chattts.sample_token applied to probs and each draw
      Cases: code_default (Infer params), code_per_vq_temperature, code_topk_binds,
      code_min_keep (top_P so small and top_K 1 that min_tokens_to_keep 3 decides),
      code_min_new_token (EOS masked), code_no_filter (penalty 1, no warpers),
      text_default (RefineText params), text_penalty, text_min_new_token.
      Every top-P cumulative sum, k-th/k+1-th logit gap and draw is at least MARGIN from its
      decision boundary, so float32 summation order cannot flip a decision.

decoder/  the Decoder (use_decoder=True): config.json = the voice's "decoder" section (idim 24,
      odim 24, hidden 32, n_layer 2, bn_dim 16, kernel 7, dilation 2, dim 24); decoder.safetensors
      (coef [1, 100, 1], decoder.conv_in.{0,2}.{weight,bias}, decoder.decoder_block.{i}.{dwconv,
      norm,pwconv1,pwconv2}.{weight,bias} and .weight (layer scale), decoder.conv_out.weight,
      out_conv.weight); io: hidden [1, T, 48] (GPT hidden states, one row per step, T = 10),
      decoder_input [1, 24, 2T] (after the view/permute), mel [1, 100, 2T]

dvae/  the DVAE decode path: config.json = the voice's "dvae" section (decoder: idim 16,
      odim 16, hidden 32, n_layer 2, bn_dim 16; dim 16; vq: dim 32, levels [5, 5, 5, 5], G 2,
      R 2); dvae.safetensors (as decoder/ plus vq_layer.quantizer.rvqs.{g}.project_{in,out}.
      {weight,bias}); io: codes [1, T, 4] I64 (GPT ids, one row per step, T = 12, values 0..624
      including 0 and 624), vq_feats [1, 32, T] (GFSQ output), decoder_input [1, 16, 2T],
      mel [1, 100, 2T]

vocos/  Vocos: config.json = the voice's "vocos" section (input_channels 100, dim 32,
      intermediate_dim 64, num_layers 2, n_fft 1024, hop_length 256, padding "center");
      vocos.safetensors (backbone.embed, backbone.norm, backbone.convnext.{i}.{dwconv,norm,
      pwconv1,pwconv2}, .gamma, backbone.final_layer_norm, head.out, head.istft.window); io:
      mel [1, 100, F] (F = 16), backbone [1, F, 32] (after the final LayerNorm), log_mag and
      phase [1, 513, F] (the head's two halves; 49 log-magnitudes exceed log(1e2) and are
      clipped), audio [1, 256·(F - 1)]; the written-out ISTFT is checked against torch.istft
      on generation.
"""
import copy
import json
import os

import numpy as np
import torch
from chattts_codec import encode_spk_emb  # tools/ is on sys.path (make_fixtures.py)
from safetensors_io import save

from . import chattts

MARGIN = 1e-5

GPT_CONFIG = {"hidden_size": 48, "num_attention_heads": 3, "num_key_value_heads": 3,
              "head_dim": 16, "num_hidden_layers": 2, "intermediate_size": 96,
              "rms_norm_eps": 1e-5, "rope_theta": 2500.0, "hidden_act": "silu",
              "max_position_embeddings": 64, "num_vq": 4, "num_audio_tokens": 33,
              "num_text_tokens": 48,
              "weights": "gpt.safetensors", "embed_weights": "embed.safetensors"}
# Special ids of the fixture's vocabulary (the real ones come from tokenizer.json).
STTS, SPK_EMB, PTTS = 40, 41, 42

DECODER_CONFIG = {"idim": 24, "odim": 24, "hidden": 32, "n_layer": 2, "bn_dim": 16,
                  "kernel": 7, "dilation": 2, "dim": 24, "weights": "decoder.safetensors"}
DVAE_CONFIG = {"decoder": {"idim": 16, "odim": 16, "hidden": 32, "n_layer": 2, "bn_dim": 16,
                           "kernel": 7, "dilation": 2},
               "dim": 16, "vq": {"dim": 32, "levels": [5, 5, 5, 5], "G": 2, "R": 2},
               "encoder": None, "weights": "dvae.safetensors"}
VOCOS_CONFIG = {"input_channels": 100, "dim": 32, "intermediate_dim": 64, "num_layers": 2,
                "sample_rate": 24000, "n_fft": 1024, "hop_length": 256, "win_length": 1024,
                "padding": "center", "weights": "vocos.safetensors"}


def write_json(path, value):
    with open(path, "w", encoding="utf-8") as f:
        json.dump(value, f, indent=2, ensure_ascii=False)
        f.write("\n")


def numpy_state(module, keep=None):
    return {k: v.detach().float().numpy() for k, v in module.state_dict().items()
            if keep is None or keep(k)}


def randomize(module, generator, layer_scale=(0.3, 0.7)):
    """Random weights that keep activations O(1): weights N(0, 1/fan_in), biases 0.1·N,
    norm weights 1 + 0.1·N, layer scales uniform in `layer_scale`, embeddings N(0, 1)."""
    with torch.no_grad():
        for name, p in module.named_parameters():
            leaf = name.rsplit(".", 1)[-1]
            owner = module.get_submodule(name.rsplit(".", 1)[0]) if "." in name else module
            if isinstance(owner, (torch.nn.LayerNorm, chattts.RMSNorm)):
                p.copy_((1.0 if leaf == "weight" else 0.0)
                        + 0.1 * torch.randn(p.shape, generator=generator))
            elif isinstance(owner, torch.nn.Embedding):
                p.copy_(torch.randn(p.shape, generator=generator))
            elif leaf in ("gamma",) or (leaf == "weight" and p.dim() == 1):
                lo, hi = layer_scale
                p.copy_(lo + (hi - lo) * torch.rand(p.shape, generator=generator))
            elif leaf == "bias":
                p.copy_(0.1 * torch.randn(p.shape, generator=generator))
            else:
                fan_in = p[0].numel()
                p.copy_(torch.randn(p.shape, generator=generator) / fan_in ** 0.5)


def random_weight_norm_heads(embed, generator):
    """Heads made as weight norm would store them (g ~ U(0.5, 1.5) per row, v ~ N(0, 1)) and
    folded, so the folded weights are what a converted checkpoint holds."""
    with torch.no_grad():
        for head in [embed.head_text, *embed.head_code]:
            v = torch.randn(head.weight.shape, generator=generator)
            g = 0.5 + torch.rand(head.weight.shape[0], 1, generator=generator)
            head.weight.copy_(chattts.fold_weight_norm(g, v))


def _f32(t):
    return t.detach().float().numpy()


def _report(name, **arrays):
    parts = [f"{k} {tuple(v.shape)} std {float(v.float().std()):.3f} "
             f"max {float(v.float().abs().max()):.3f}" for k, v in arrays.items()]
    print(f"{name}: " + "; ".join(parts))


# ---------------------------------------------------------------------------------------------
# GPT


def make_gpt(case_dir, seed=1):
    os.makedirs(case_dir, exist_ok=True)
    gen = torch.Generator().manual_seed(seed)
    config = {k: v for k, v in GPT_CONFIG.items()}
    model = chattts.GPT(config)
    randomize(model, gen)
    random_weight_norm_heads(model.embed, gen)
    model = model.float()
    h, vq, n_audio = config["hidden_size"], config["num_vq"], config["num_audio_tokens"]

    text = [STTS, SPK_EMB] + torch.randint(0, 40, (6,), generator=gen).tolist() + [PTTS]
    frames = torch.randint(0, n_audio - 1, (7, vq), generator=gen)
    ids = torch.cat([torch.tensor(text)[:, None].expand(-1, vq), frames])[None]
    text_mask = torch.zeros(ids.shape[:2], dtype=torch.bool)
    text_mask[:, :len(text)] = True
    prefill = len(text) + 2  # two audio frames in the prompt, as an audio sample (spk_smp) puts
    spk = (2.0 * torch.randn(h, generator=gen)).half()
    spk_string = encode_spk_emb(spk.numpy())

    def run(m, dtype):
        m = m.to(dtype)
        emb = chattts.apply_speaker(m.embed(ids, text_mask), ids, SPK_EMB, spk)
        with torch.no_grad():
            hidden, _ = m(emb)
            parts, past = [], None
            for start, end in [(0, prefill)] + [(t, t + 1) for t in range(prefill, ids.shape[1])]:
                out, past = m(emb[:, start:end], past)
                parts.append(out)
            cached = torch.cat(parts, dim=1)
        logits = {"hidden": hidden, "text_logits": m.embed.text_logits(hidden),
                  "code_logits": m.embed.code_logits(hidden), "hidden_cached": cached,
                  "text_logits_cached": m.embed.text_logits(cached),
                  "code_logits_cached": m.embed.code_logits(cached)}
        return emb, {k: v.detach() for k, v in logits.items()}

    model32 = copy.deepcopy(model).float()
    emb, out = run(model.double(), torch.float64)
    _, out32 = run(model32, torch.float32)
    for name in ("hidden", "text_logits", "code_logits"):
        gap = (out[name] - out[name + "_cached"]).abs().max()
        gap32 = (out32[name] - out32[name + "_cached"]).abs().max()
        err32 = (out32[name].double() - out[name]).abs().max()
        assert gap < 1e-10 and gap32 < 1e-5, (name, gap, gap32)
        print(f"gpt {name}: cached vs one pass {gap:.1e} (float32 {gap32:.1e}); "
              f"float32 vs float64 {err32:.1e}")
    _report("gpt", **{k: out[k] for k in ("hidden", "text_logits", "code_logits")})

    weights = {k: v.float() for k, v in model.state_dict().items()}
    save(os.path.join(case_dir, "gpt.safetensors"),
         {k[len("gpt."):]: _f32(v) for k, v in weights.items() if k.startswith("gpt.")})
    save(os.path.join(case_dir, "embed.safetensors"),
         {k[len("embed."):]: _f32(v) for k, v in weights.items() if k.startswith("embed.")})
    io = {"input_ids": ids.numpy().astype(np.int64),
          "text_mask": text_mask.numpy().astype(np.int64),
          "spk_emb": _f32(spk), "spk_emb_normalized": _f32(chattts.normalize_speaker(spk)),
          "inputs_embeds": _f32(emb)}
    io.update({k: _f32(v) for k, v in out.items()})
    save(os.path.join(case_dir, "io.safetensors"), io)
    write_json(os.path.join(case_dir, "config.json"),
               dict(config, prefill=prefill, spk_emb_id=SPK_EMB, spk_emb=spk_string))


# ---------------------------------------------------------------------------------------------
# Sampling

CODE = {"stage": "code", "vocab": 626, "eos": 625, "rows": 4}
TEXT = {"stage": "text", "vocab": 300, "eos": 290, "rows": 2}
SAMPLING_CASES = {
    # InferCodeParams: temperature 0.3, repetition_penalty 1.05, top_P 0.7, top_K 20.
    "code_default": dict(CODE, temperature=[0.3] * 4, repetition_penalty=1.05, top_P=0.7,
                         top_K=20, step=30, min_new_token=0, history=24),
    "code_per_vq_temperature": dict(CODE, temperature=[0.3, 0.5, 0.8, 1.2],
                                    repetition_penalty=1.05, top_P=0.7, top_K=20, step=10,
                                    min_new_token=0, history=10),
    "code_topk_binds": dict(CODE, temperature=[0.7] * 4, repetition_penalty=1.3, top_P=0.95,
                            top_K=5, step=40, min_new_token=0, history=20),
    "code_min_keep": dict(CODE, temperature=[1.0] * 4, repetition_penalty=1.05, top_P=0.02,
                          top_K=1, step=12, min_new_token=0, history=12),
    "code_min_new_token": dict(CODE, temperature=[0.3] * 4, repetition_penalty=1.05, top_P=0.7,
                               top_K=20, step=2, min_new_token=4, history=2, boost_eos=True),
    "code_no_filter": dict(CODE, temperature=[0.3] * 4, repetition_penalty=1.0, top_P=None,
                           top_K=None, step=8, min_new_token=0, history=8),
    # RefineTextParams: temperature 0.7, repetition_penalty 1.0, top_P 0.7, top_K 20.
    "text_default": dict(TEXT, temperature=[0.7] * 2, repetition_penalty=1.0, top_P=0.7,
                         top_K=20, step=6, min_new_token=0, history=6),
    "text_penalty": dict(TEXT, temperature=[0.7] * 2, repetition_penalty=1.2, top_P=0.7,
                         top_K=20, step=20, min_new_token=0, history=20),
    "text_min_new_token": dict(TEXT, temperature=[0.7] * 2, repetition_penalty=1.0, top_P=0.7,
                               top_K=20, step=1, min_new_token=3, history=1, boost_eos=True),
}
DRAWS = 8


def _top_p_margin(logits, top_p):
    sorted_logits = torch.sort(logits, dim=-1)[0]
    cumulative = sorted_logits.double().softmax(-1).cumsum(-1)
    finite = torch.isfinite(sorted_logits)
    gap = (cumulative - float(torch.tensor(1.0 - top_p, dtype=torch.float32))).abs()
    return float(gap[finite].min())


def _top_k_margin(logits, top_k):
    k = min(max(top_k, chattts.MIN_TOKENS_TO_KEEP), logits.shape[-1])
    values = torch.topk(logits, k + 1, dim=-1)[0]
    gaps = (values[:, k - 1] - values[:, k]).abs()
    return float(gaps[torch.isfinite(values[:, k])].min()) if torch.isfinite(
        values[:, k]).any() else 1.0


def _draw_margin(probs, draws):
    cumulative = probs.double().cumsum(-1)
    targets = draws.double() * cumulative[:, -1:]
    return float((cumulative[:, :, None] - targets[:, None, :]).abs().min())


def _sampling_inputs(case, gen):
    rows, vocab = case["rows"], case["vocab"]
    logits = 1.2 * torch.randn(rows, vocab, generator=gen)
    if case.get("boost_eos"):
        logits[:, case["eos"]] = logits.max(dim=1).values + 0.5
    # History drawn from the likely tokens, with repeats, so the penalty changes them.
    likely = torch.topk(logits, 6, dim=1).indices
    pick = torch.randint(0, 6, (rows, case["history"]), generator=gen)
    history = torch.gather(likely, 1, pick)
    if case["stage"] == "code":
        history[history == case["eos"]] = 0  # a generated code row never holds EOS
    draws = torch.rand(rows, DRAWS, generator=gen)
    return logits, history, draws


def make_sampling_case(case_dir, case, seed):
    os.makedirs(case_dir, exist_ok=True)
    for attempt in range(100):
        gen = torch.Generator().manual_seed(seed * 1000 + attempt)
        logits, history, draws = _sampling_inputs(case, gen)
        temperature = torch.tensor(case["temperature"], dtype=torch.float32)
        out = chattts.process_logits(logits, history, temperature,
                                     penalty=case["repetition_penalty"], top_p=case["top_P"],
                                     top_k=case["top_K"], eos=case["eos"],
                                     step=case["step"], min_new_token=case["min_new_token"])
        margins = [_draw_margin(out["probs"], draws)]
        if case["top_P"] is not None:
            margins.append(_top_p_margin(out["penalized"], case["top_P"]))
        if case["top_K"] is not None:
            margins.append(_top_k_margin(out["top_p"], case["top_K"]))
        if min(margins) > MARGIN:
            break
    else:
        raise RuntimeError(f"{case_dir}: no seed kept every decision {MARGIN} from a boundary")
    tokens = torch.stack([chattts.sample_token(out["probs"], draws[:, d])
                          for d in range(DRAWS)], dim=1)
    kept = torch.isfinite(out["masked"]).sum(1).tolist()
    print(f"sampling {os.path.basename(case_dir)}: kept {kept} of {case['vocab']}, "
          f"tokens {tokens[0].tolist()}, margin {min(margins):.1e}")
    config = {k: v for k, v in case.items() if k not in ("rows", "history", "boost_eos")}
    config.update(repetition_window=chattts.REPETITION_WINDOW,
                  min_tokens_to_keep=chattts.MIN_TOKENS_TO_KEEP)
    io = {"logits": logits.numpy(), "temperature": temperature.numpy(),
          "history": history.numpy().astype(np.int64), "draws": draws.numpy(),
          "tokens": tokens.numpy().astype(np.int64)}
    io.update({k: v.numpy() for k, v in out.items()})
    save(os.path.join(case_dir, "io.safetensors"), io)
    write_json(os.path.join(case_dir, "config.json"), config)


# ---------------------------------------------------------------------------------------------
# Decoder, DVAE, Vocos


def _decoder_args(config):
    return {k: config[k] for k in ("idim", "odim", "n_layer", "bn_dim", "hidden", "kernel",
                                   "dilation")}


def _double_and_float(model, fn):
    """fn(model) in float64 and in float32; asserts they agree to 1e-4 and returns float64."""
    model32 = copy.deepcopy(model).float()
    out64 = fn(model.double())
    out32 = fn(model32)
    for name in out64:
        err = (out32[name].double() - out64[name]).abs().max()
        assert err < 1e-4, (name, err)
        print(f"  {name}: float32 vs float64 {err:.1e}")
    return out64


def make_decoder(case_dir, seed=2):
    os.makedirs(case_dir, exist_ok=True)
    gen = torch.Generator().manual_seed(seed)
    config = dict(DECODER_CONFIG)
    model = chattts.DVAE(_decoder_args(config), config["dim"])
    randomize(model, gen)
    with torch.no_grad():
        model.coef.copy_(0.5 + torch.rand(model.coef.shape, generator=gen))
    model = model.float().eval()
    hidden = torch.randn(1, 10, 2 * config["idim"], generator=gen)

    def run(m):
        with torch.no_grad():
            x = hidden.to(m.coef.dtype).transpose(1, 2)
            return {"decoder_input": m.features(x), "mel": m(x)}

    out = _double_and_float(model, run)
    _report("decoder", **out)
    save(os.path.join(case_dir, "decoder.safetensors"), numpy_state(model))
    save(os.path.join(case_dir, "io.safetensors"),
         {"hidden": hidden.numpy(), **{k: _f32(v) for k, v in out.items()}})
    write_json(os.path.join(case_dir, "config.json"), config)


def make_dvae(case_dir, seed=3):
    os.makedirs(case_dir, exist_ok=True)
    gen = torch.Generator().manual_seed(seed)
    config = json.loads(json.dumps(DVAE_CONFIG))
    model = chattts.DVAE(_decoder_args(config["decoder"]), config["dim"], config["vq"])
    randomize(model, gen)
    with torch.no_grad():
        model.coef.copy_(0.5 + torch.rand(model.coef.shape, generator=gen))
    model = model.float().eval()
    n_codes = int(np.prod(config["vq"]["levels"]))
    codes = torch.randint(0, n_codes, (1, 12, 4), generator=gen)
    codes[0, 0, :] = torch.tensor([0, n_codes - 1, 0, n_codes - 1])
    codes[0, 1, :] = torch.tensor([n_codes - 1, 0, 312, 7])

    def run(m):
        with torch.no_grad():
            x = codes.transpose(1, 2)
            return {"vq_feats": m.vq_layer.embed(x), "decoder_input": m.features(x),
                    "mel": m(x)}

    out = _double_and_float(model, run)
    _report("dvae", **out)
    save(os.path.join(case_dir, "dvae.safetensors"), numpy_state(model))
    save(os.path.join(case_dir, "io.safetensors"),
         {"codes": codes.numpy().astype(np.int64), **{k: _f32(v) for k, v in out.items()}})
    write_json(os.path.join(case_dir, "config.json"), config)


def make_vocos(case_dir, seed=4):
    os.makedirs(case_dir, exist_ok=True)
    gen = torch.Generator().manual_seed(seed)
    config = dict(VOCOS_CONFIG)
    model = chattts.Vocos(config)
    randomize(model, gen)
    with torch.no_grad():  # log-magnitudes around 2, so a few bins reach the clip at 1e2
        half = config["n_fft"] // 2 + 1
        model.head.out.bias[:half] += 2.0
    model = model.float().eval()
    mel = (-2.0 + 1.5 * torch.randn(1, config["input_channels"], 16, generator=gen))

    def run(m):
        with torch.no_grad():
            x = mel.to(m.head.out.weight.dtype)
            backbone = m.backbone(x)
            log_mag, phase = m.head.log_mag_phase(backbone)
            return {"backbone": backbone, "log_mag": log_mag, "phase": phase,
                    "audio": m(x)}

    out = _double_and_float(model, run)
    with torch.no_grad():
        model = model.double()
        spec = model.head.spectrum(out["backbone"])
        window = model.head.istft.window.double()
        reference = torch.istft(spec, config["n_fft"], config["hop_length"], config["n_fft"],
                                window, center=True)
        err = (reference - out["audio"]).abs().max()
        assert err < 1e-10, err
    clipped = int((out["log_mag"] > np.log(1e2)).sum())
    print(f"  written-out ISTFT vs torch.istft {err:.1e}; {clipped} of "
          f"{out['log_mag'].numel()} magnitudes clipped")
    _report("vocos", **out)
    save(os.path.join(case_dir, "vocos.safetensors"),
         numpy_state(model, keep=lambda k: not k.startswith("feature_extractor.")))
    save(os.path.join(case_dir, "io.safetensors"),
         {"mel": mel.numpy(), **{k: _f32(v) for k, v in out.items()}})
    write_json(os.path.join(case_dir, "config.json"), config)


def make(out_dir):
    """Writes every case under out_dir/."""
    make_gpt(os.path.join(out_dir, "gpt"))
    for seed, (name, case) in enumerate(sorted(SAMPLING_CASES.items())):
        make_sampling_case(os.path.join(out_dir, "sampling", name), case, seed=100 + seed)
    make_decoder(os.path.join(out_dir, "decoder"))
    make_dvae(os.path.join(out_dir, "dvae"))
    make_vocos(os.path.join(out_dir, "vocos"))
