"""PyTorch reference of ChatTTS (2noise/ChatTTS at 1092c1f) and its Vocos vocoder
(gemelo-ai/vocos), written from reading the originals; it imports neither, nor transformers.

Module trees and parameter names follow the originals, so their released asset files load:
  Llama        asset/gpt/model.safetensors (transformers' LlamaModel minus embed_tokens)
  Embed        asset/Embed.safetensors, with head_text/head_code weight norm folded to .weight
  DVAE         asset/Decoder.safetensors (vq=None) and asset/DVAE.safetensors
  Vocos        asset/Vocos.safetensors

Numerics the originals fix, which this file reproduces (docs/voice-format.md lists them too):

GPT (transformers' LlamaModel as ChatTTS's gpt.py runs it, fed input embeddings)
  * pre-norm layers: h += o_proj(attn(rms(h))); h += down(silu(gate(rms(h))) * up(rms(h)));
    a final RMSNorm gives the hidden states both heads read. No biases anywhere.
  * RMSNorm: x / sqrt(mean(x²) + eps) computed in float32, then times weight; eps is the
    config's rms_norm_eps (1e-6 for ChatTTS).
  * rotary embedding, rotate_half form (dims i and i + d/2 pair up): inv_freq[i] =
    1 / theta^(2i/d) and angle = position · inv_freq are computed in float32 (as transformers
    does, whatever the model's dtype), cos/sin of those float32 angles.
  * attention: causal, scale 1/sqrt(head_dim), softmax over keys; positions 0..T-1 for an
    unpadded sequence (ChatTTS's left-padded batches reduce to this per row).
  * embeddings (Embed.forward): a position whose text_mask is true takes emb_text(id[:, 0]);
    otherwise the sum over q of emb_code[q](id[:, q]). text_mask is the tokenizer's attention
    mask, with the audio-prompt frames (spk_smp) set false. Generated steps are embedded by
    stage: the text stage always with emb_text(id[0]), the code stage always with the code sum.
  * speaker: every position whose id[0] is [spk_emb] gets the speaker vector, L2-normalised in
    float16 (the vector decoded from its string is float16; F.normalize runs in float16:
    norm computed, rounded to float16, each element divided and rounded to float16).
  * heads: head_text and head_code[q] read the final hidden states; logits in float32.

Logits processing of one step (gpt.py generate + processors.py gen_logits), per row:
  1. logits / temperature (float32 division; the code stage has one row per (item, q) with
     temperature[q]);
  2. repetition penalty, only if penalty != 1: counts of each id among the row's last 16
     generated ids (the prompt is not counted; code rows count their own q's codes),
     alpha = penalty ** count in float32, logit < 0 -> logit * alpha, else logit / alpha;
  3. top-P (transformers' TopPLogitsWarper, min_tokens_to_keep 3): sort ascending, softmax,
     cumulative sum; remove sorted positions whose cumulative probability <= 1 - top_P
     (the threshold is float32(1 - top_P) computed in double), except the last 3;
  4. top-K (TopKLogitsWarper, min_tokens_to_keep 3): k = min(max(top_K, 3), V); remove logits
     strictly below the k-th largest;
  5. if step < min_new_token: logit[eos] = -inf;
  6. softmax; one draw (sample_token below). Removed logits are -inf.

DVAE (dvae.py). Decode of codes [B, num_vq, T] (GPT ids transposed):
  * GFSQ: ids -> [B, T, G, R]: column q = g·R + r is residual r of group g. A code index c
    (0..prod(levels) - 1) has digits (c // basis[d]) % levels[d], basis = cumprod([1] +
    levels[:-1]) (first digit least significant); each digit becomes (digit - L//2) / (L//2);
    residual r is scaled by (levels - 1) ** -r, 1 and 1/4 for levels 5 (vector_quantize_pytorch
    1.12.5 to 1.25, Dec 2023 to Nov 2025, the versions ChatTTS was trained and released with;
    later versions scale by levels ** -r, 1/5, which ChatTTS, not pinning the package, then
    silently decodes with); the residuals of a group are summed, project_out (Linear
    len(levels) -> dim/G, with bias) and the groups concatenated: [B, dim, T].
  * both paths: x [B, C, T] -> view [B, 2, C/2, T] -> permute -> [B, C/2, 2T], so channels
    0..C/2-1 make the even frames and C/2..C-1 the odd frames; then conv_in (conv k3, GELU,
    conv k3), n_layer ConvNeXt blocks (depthwise conv k7 dilation 2 padding 6, LayerNorm eps
    1e-6, Linear, exact GELU, Linear, times the layer scale 'weight', residual), conv_out (k1,
    no bias), out_conv (k3, no bias) to 100 mels, times coef [1, 100, 1].
  * the Decoder (use_decoder=True) takes the GPT's last hidden states [B, hidden, T] the same
    way (no GFSQ): the hidden state of step i is the one that produced token i.

Vocos: embed conv k7 -> LayerNorm -> ConvNeXt blocks (depthwise k7, LayerNorm eps 1e-6,
  Linear, GELU, Linear, gamma, residual) -> final LayerNorm -> Linear to n_fft + 2 ->
  first half log-magnitude (exp, then clip at 1e2), second half phase -> S = mag·(cos p +
  i·sin p) -> torch.istft(center=True, hann window, n_fft 1024, hop 256): per frame the
  inverse real DFT (the imaginary parts of the DC and Nyquist bins are ignored), times the
  window, overlap-added, divided by the overlap-added squared window, n_fft/2 trimmed at
  each end: hop·(F - 1) samples for F frames.
"""
import math

import torch
import torch.nn.functional as F
from torch import nn

# ---------------------------------------------------------------------------------------------
# Llama (transformers' LlamaModel numerics)


class RMSNorm(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):
        dtype = x.dtype
        h = x.to(torch.float32) if dtype in (torch.float16, torch.bfloat16) else x
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * h.to(dtype)


def rotary_cos_sin(positions, head_dim, theta, dtype):
    """cos, sin [T, head_dim] for integer positions [T], computed in float32 as transformers'
    LlamaRotaryEmbedding does, then cast to `dtype`."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.int64).float()
                                / head_dim))
    angles = positions.float()[:, None] * inv_freq[None, :]
    emb = torch.cat([angles, angles], dim=-1)
    return emb.cos().to(dtype), emb.sin().to(dtype)


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat([-x[..., half:], x[..., :half]], dim=-1)


class Attention(nn.Module):
    def __init__(self, config):
        super().__init__()
        hidden = config["hidden_size"]
        self.heads = config["num_attention_heads"]
        self.kv_heads = config.get("num_key_value_heads") or self.heads
        self.head_dim = hidden // self.heads
        self.q_proj = nn.Linear(hidden, self.heads * self.head_dim, bias=False)
        self.k_proj = nn.Linear(hidden, self.kv_heads * self.head_dim, bias=False)
        self.v_proj = nn.Linear(hidden, self.kv_heads * self.head_dim, bias=False)
        self.o_proj = nn.Linear(self.heads * self.head_dim, hidden, bias=False)

    def forward(self, x, cos, sin, past=None):
        """x [B, T, H]; past (k, v) each [B, kv_heads, P, head_dim]. Returns out, (k, v)."""
        b, t, _ = x.shape
        q = self.q_proj(x).view(b, t, self.heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(b, t, self.kv_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(b, t, self.kv_heads, self.head_dim).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        if past is not None:
            k = torch.cat([past[0], k], dim=2)
            v = torch.cat([past[1], v], dim=2)
        present = (k, v)
        if self.kv_heads != self.heads:  # grouped-query attention (not used by ChatTTS)
            k = k.repeat_interleave(self.heads // self.kv_heads, dim=1)
            v = v.repeat_interleave(self.heads // self.kv_heads, dim=1)
        p = k.shape[2] - t
        scores = q @ k.transpose(2, 3) / math.sqrt(self.head_dim)
        query_pos = torch.arange(p, p + t)[:, None]
        key_pos = torch.arange(p + t)[None, :]
        scores = scores.masked_fill(key_pos > query_pos, float("-inf"))
        weights = torch.softmax(scores, dim=-1)
        out = (weights @ v).transpose(1, 2).reshape(b, t, self.heads * self.head_dim)
        return self.o_proj(out), present


class MLP(nn.Module):
    def __init__(self, config):
        super().__init__()
        hidden, inner = config["hidden_size"], config["intermediate_size"]
        self.gate_proj = nn.Linear(hidden, inner, bias=False)
        self.up_proj = nn.Linear(hidden, inner, bias=False)
        self.down_proj = nn.Linear(inner, hidden, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nn.Module):
    def __init__(self, config):
        super().__init__()
        eps = config["rms_norm_eps"]
        self.self_attn = Attention(config)
        self.mlp = MLP(config)
        self.input_layernorm = RMSNorm(config["hidden_size"], eps)
        self.post_attention_layernorm = RMSNorm(config["hidden_size"], eps)

    def forward(self, x, cos, sin, past=None):
        attn, present = self.self_attn(self.input_layernorm(x), cos, sin, past)
        x = x + attn
        return x + self.mlp(self.post_attention_layernorm(x)), present


class Llama(nn.Module):
    """LlamaModel without embed_tokens: inputs_embeds [B, T, H] -> last hidden states."""

    def __init__(self, config):
        super().__init__()
        self.config = dict(config)
        self.layers = nn.ModuleList([DecoderLayer(config)
                                     for _ in range(config["num_hidden_layers"])])
        self.norm = RMSNorm(config["hidden_size"], config["rms_norm_eps"])

    def forward(self, inputs_embeds, past_key_values=None):
        """Returns (hidden [B, T, H], presents: one (k, v) per layer, the cache so far).

        With past_key_values the new positions continue after the cached ones."""
        past_len = 0 if past_key_values is None else past_key_values[0][0].shape[2]
        t = inputs_embeds.shape[1]
        head_dim = self.config["hidden_size"] // self.config["num_attention_heads"]
        cos, sin = rotary_cos_sin(torch.arange(past_len, past_len + t), head_dim,
                                  float(self.config.get("rope_theta", 10000.0)),
                                  inputs_embeds.dtype)
        x = inputs_embeds
        presents = []
        for i, layer in enumerate(self.layers):
            x, present = layer(x, cos, sin, None if past_key_values is None
                               else past_key_values[i])
            presents.append(present)
        return self.norm(x), presents


# ---------------------------------------------------------------------------------------------
# Embed (emb_text, emb_code, heads)


def fold_weight_norm(g, v):
    """torch.nn.utils.parametrizations.weight_norm with dim=0: w = v · (g / ‖v‖), the norm of
    each output row of v (all dimensions but 0)."""
    norm = v.reshape(v.shape[0], -1).norm(dim=1).reshape([-1] + [1] * (v.dim() - 1))
    return v * (g / norm)


class Embed(nn.Module):
    """ChatTTS's Embed with plain (folded) head weights."""

    def __init__(self, hidden_size, num_audio_tokens, num_text_tokens, num_vq=4):
        super().__init__()
        self.num_vq = num_vq
        self.emb_code = nn.ModuleList([nn.Embedding(num_audio_tokens, hidden_size)
                                       for _ in range(num_vq)])
        self.emb_text = nn.Embedding(num_text_tokens, hidden_size)
        self.head_text = nn.Linear(hidden_size, num_text_tokens, bias=False)
        self.head_code = nn.ModuleList([nn.Linear(hidden_size, num_audio_tokens, bias=False)
                                        for _ in range(num_vq)])

    def embed_text(self, ids):
        """ids [B, T] -> [B, T, H]."""
        return self.emb_text(ids)

    def embed_code(self, ids):
        """ids [B, T, num_vq] -> sum over q of emb_code[q](ids[..., q])."""
        out = self.emb_code[0](ids[..., 0])
        for q in range(1, self.num_vq):
            out = out + self.emb_code[q](ids[..., q])
        return out

    def forward(self, input_ids, text_mask):
        """input_ids [B, T, num_vq], text_mask [B, T] bool -> [B, T, H] (Embed.forward; each
        position is looked up only in the table its mask selects)."""
        emb = self.emb_text.weight.new_zeros(input_ids.shape[:2] + (self.emb_text.weight.shape[1],))
        emb[text_mask] = self.embed_text(input_ids[text_mask][:, 0])
        emb[~text_mask] = self.embed_code(input_ids[~text_mask])
        return emb

    def text_logits(self, hidden):
        return self.head_text(hidden)

    def code_logits(self, hidden):
        """hidden [B, T, H] -> [B, T, num_vq, num_audio_tokens]."""
        return torch.stack([head(hidden) for head in self.head_code], dim=2)


def fold_embed_state(state):
    """An Embed.safetensors state dict (weight norm as parametrizations.weight.original0 = g,
    original1 = v) -> the same with each pair folded into '<head>.weight'."""
    out = {}
    for name, value in state.items():
        if name.endswith(".parametrizations.weight.original1"):
            continue
        if name.endswith(".parametrizations.weight.original0"):
            base = name[:-len(".parametrizations.weight.original0")]
            v = state[base + ".parametrizations.weight.original1"]
            out[base + ".weight"] = fold_weight_norm(value, v)
        else:
            out[name] = value
    return out


class GPT(nn.Module):
    """The Llama stack plus ChatTTS's Embed; config holds the gpt sizes (voice config 'gpt')."""

    def __init__(self, config):
        super().__init__()
        self.config = dict(config)
        self.gpt = Llama(config)
        self.embed = Embed(config["hidden_size"], config["num_audio_tokens"],
                           config["num_text_tokens"], config["num_vq"])

    def forward(self, inputs_embeds, past_key_values=None):
        return self.gpt(inputs_embeds, past_key_values)


# ---------------------------------------------------------------------------------------------
# Speaker


def normalize_speaker(spk):
    """F.normalize(p=2, dim=0, eps=1e-12) as ChatTTS's Speaker.apply runs it on the float16
    vector decoded from a spk_emb string: norm in float16 (accumulated in float32, rounded),
    each element divided and rounded to float16. Returns float16."""
    spk = spk.to(torch.float16)
    norm = spk.float().pow(2).sum().sqrt().to(torch.float16).float()
    return (spk.float() / norm.clamp_min(1e-12)).to(torch.float16)


def apply_speaker(emb, input_ids, spk_emb_id, spk):
    """Speaker.apply: rows of emb [B, T, H] whose input_ids[..., 0] == spk_emb_id become the
    normalised speaker vector (converted to emb's dtype)."""
    vector = normalize_speaker(spk).to(emb.dtype)
    cond = (input_ids[..., 0] == spk_emb_id)[..., None]
    return torch.where(cond, vector.expand_as(emb), emb)


# ---------------------------------------------------------------------------------------------
# Logits processing and sampling

MIN_TOKENS_TO_KEEP = 3   # gen_logits passes min_tokens_to_keep=3 to both warpers
REPETITION_WINDOW = 16   # CustomRepetitionPenaltyLogitsProcessorRepeat's past_window


def repetition_penalty(logits, history, penalty, window=REPETITION_WINDOW):
    """logits [R, V] float32, history [R, N] int64 (the row's generated ids, oldest first)."""
    if penalty == 1.0 or history.shape[1] == 0:
        return logits
    recent = history[:, -window:]
    counts = F.one_hot(recent, logits.shape[1]).sum(1)
    alpha = torch.pow(torch.tensor(penalty, dtype=torch.float32), counts.float())
    return torch.where(logits < 0, logits * alpha, logits / alpha)


def top_p_filter(logits, top_p, min_keep=MIN_TOKENS_TO_KEEP):
    """transformers' TopPLogitsWarper. Ties are broken by ascending id (a stable sort)."""
    sorted_logits, order = torch.sort(logits, dim=-1, descending=False, stable=True)
    cumulative = sorted_logits.softmax(dim=-1).cumsum(dim=-1)
    remove = cumulative <= torch.tensor(1.0 - top_p, dtype=torch.float32)
    remove[..., -min_keep:] = False
    remove = remove.scatter(1, order, remove)
    return logits.masked_fill(remove, float("-inf"))


def top_k_filter(logits, top_k, min_keep=MIN_TOKENS_TO_KEEP):
    """transformers' TopKLogitsWarper: keeps logits >= the k-th largest."""
    k = min(max(top_k, min_keep), logits.shape[-1])
    kth = torch.topk(logits, k, dim=-1)[0][..., -1:]
    return logits.masked_fill(logits < kth, float("-inf"))


def process_logits(logits, history, temperature, *, penalty, top_p, top_k, eos, step,
                   min_new_token):
    """One step of gpt.py's generate() before the draw. logits [R, V] float32; temperature [R]
    float32. Returns every intermediate, in order (the last, 'masked', is what is sampled)."""
    out = {"scaled": logits / temperature[:, None]}
    out["penalized"] = repetition_penalty(out["scaled"], history, penalty)
    out["top_p"] = top_p_filter(out["penalized"], top_p) if top_p is not None \
        else out["penalized"]
    out["top_k"] = top_k_filter(out["top_p"], top_k) if top_k is not None else out["top_p"]
    masked = out["top_k"].clone()
    if step < min_new_token:
        masked[:, eos] = float("-inf")
    out["masked"] = masked
    out["probs"] = torch.softmax(masked, dim=-1)
    return out


def sample_token(probs, u):
    """voxd's draw rule, one uniform u in [0, 1) per row (torch.multinomial draws from the same
    distribution; its own rule, argmax p / Exp(1), needs V draws per row and torch's RNG).

    Inverse CDF in vocabulary order: c_i = p_0 + ... + p_i accumulated in float64 over the
    float32 probabilities; the token is the smallest i with c_i > u · c_{V-1}; if rounding
    leaves none, the largest i with p_i > 0. Tokens of probability 0 are never drawn."""
    tokens = []
    for row, draw in zip(probs.double(), u.double()):
        cumulative = row.cumsum(0)
        hits = torch.nonzero(cumulative > draw * cumulative[-1]).flatten()
        tokens.append(int(hits[0]) if len(hits) else int(torch.nonzero(row > 0).max()))
    return torch.tensor(tokens, dtype=torch.int64)


# ---------------------------------------------------------------------------------------------
# DVAE: GFSQ dequantisation and the ConvNeXt decoder


class ConvNeXtBlock(nn.Module):
    """dvae.py's block: its layer scale is named 'weight' (Vocos's is 'gamma')."""

    def __init__(self, dim, intermediate_dim, kernel, dilation):
        super().__init__()
        self.dwconv = nn.Conv1d(dim, dim, kernel_size=kernel, padding=dilation * (kernel // 2),
                                dilation=dilation, groups=dim)
        self.norm = nn.LayerNorm(dim, eps=1e-6)
        self.pwconv1 = nn.Linear(dim, intermediate_dim)
        self.pwconv2 = nn.Linear(intermediate_dim, dim)
        self.weight = nn.Parameter(1e-6 * torch.ones(dim))

    def forward(self, x):
        y = self.norm(self.dwconv(x).transpose(1, 2))
        y = self.pwconv2(F.gelu(self.pwconv1(y))) * self.weight
        return x + y.transpose(1, 2)


class DVAEDecoder(nn.Module):
    def __init__(self, idim, odim, n_layer=12, bn_dim=64, hidden=256, kernel=7, dilation=2):
        super().__init__()
        self.conv_in = nn.Sequential(nn.Conv1d(idim, bn_dim, 3, 1, 1), nn.GELU(),
                                     nn.Conv1d(bn_dim, hidden, 3, 1, 1))
        self.decoder_block = nn.ModuleList([ConvNeXtBlock(hidden, hidden * 4, kernel, dilation)
                                            for _ in range(n_layer)])
        self.conv_out = nn.Conv1d(hidden, odim, kernel_size=1, bias=False)

    def forward(self, x):
        y = self.conv_in(x)
        for block in self.decoder_block:
            y = block(y)
        return self.conv_out(y)


class _ResidualFSQ(nn.Module):
    """The parameters of vector_quantize_pytorch's ResidualFSQ for one group."""

    def __init__(self, dim, levels):
        super().__init__()
        self.project_in = nn.Linear(dim, len(levels))
        self.project_out = nn.Linear(len(levels), dim)


class _GroupedResidualFSQ(nn.Module):
    def __init__(self, dim, levels, groups):
        super().__init__()
        self.rvqs = nn.ModuleList([_ResidualFSQ(dim // groups, levels) for _ in range(groups)])


def fsq_codes(indices, levels):
    """FSQ implicit codebook: indices [...] -> codes [..., len(levels)] in [-1, 1]."""
    levels_t = torch.tensor(levels, dtype=torch.int64)
    basis = torch.cumprod(torch.tensor([1] + list(levels[:-1]), dtype=torch.int64), 0)
    digits = (indices[..., None] // basis) % levels_t
    half = levels_t // 2
    return (digits - half).double() / half.double()


class GFSQ(nn.Module):
    """dvae.py's GFSQ, decode side (GroupedResidualFSQ.get_output_from_indices)."""

    def __init__(self, dim, levels, G, R):
        super().__init__()
        self.levels, self.G, self.R = list(levels), G, R
        self.quantizer = _GroupedResidualFSQ(dim, self.levels, G)

    def residual_scales(self):
        """[R, len(levels)]: (levels - 1) ** -r."""
        levels = torch.tensor(self.levels, dtype=torch.float64)
        return torch.stack([(levels - 1) ** -r for r in range(self.R)])

    def embed(self, codes):
        """codes [B, G·R, T] int64 -> features [B, dim, T]."""
        ids = codes.transpose(1, 2)
        b, t, _ = ids.shape
        ids = ids.reshape(b, t, self.G, self.R)
        scales = self.residual_scales()
        dtype = self.quantizer.rvqs[0].project_out.weight.dtype
        outs = []
        for g, rvq in enumerate(self.quantizer.rvqs):
            summed = sum(fsq_codes(ids[:, :, g, r], self.levels) * scales[r]
                         for r in range(self.R))
            outs.append(rvq.project_out(summed.to(dtype)))
        return torch.cat(outs, dim=-1).transpose(1, 2)


class _Buffers(nn.Module):
    """Holds named buffers (and submodules) so that state-dict names nest like the originals'."""

    def __init__(self, **members):
        super().__init__()
        for name, value in members.items():
            if isinstance(value, nn.Module):
                self.add_module(name, value)
            else:
                self.register_buffer(name, value)


def hann_window(n):
    """torch.hann_window(n) (periodic)."""
    return torch.hann_window(n)


def melscale_fbanks(n_freqs, n_mels, sample_rate, f_min=0.0, f_max=None):
    """torchaudio.functional.melscale_fbanks with HTK mels and no norm (MelSpectrogram's
    defaults) -> [n_freqs, n_mels]. Used only to fill the feature extractors' buffers."""
    f_max = float(sample_rate // 2) if f_max is None else f_max
    all_freqs = torch.linspace(0, sample_rate // 2, n_freqs, dtype=torch.float64)

    def hz_to_mel(f):
        return 2595.0 * math.log10(1.0 + f / 700.0)

    m_pts = torch.linspace(hz_to_mel(f_min), hz_to_mel(f_max), n_mels + 2, dtype=torch.float64)
    f_pts = 700.0 * (10 ** (m_pts / 2595.0) - 1.0)
    f_diff = f_pts[1:] - f_pts[:-1]
    slopes = f_pts[None, :] - all_freqs[:, None]
    down = -slopes[:, :-2] / f_diff[:-1]
    up = slopes[:, 2:] / f_diff[1:]
    return torch.clamp(torch.minimum(down, up), min=0).float()


def _mel_spectrogram_buffers(n_fft=1024, n_mels=100, sample_rate=24000):
    """torchaudio MelSpectrogram's state: spectrogram.window and mel_scale.fb."""
    return _Buffers(spectrogram=_Buffers(window=hann_window(n_fft)),
                    mel_scale=_Buffers(fb=melscale_fbanks(n_fft // 2 + 1, n_mels, sample_rate)))


class DVAE(nn.Module):
    """dvae.py's DVAE. decoder_config: idim, odim, n_layer, bn_dim, hidden (kernel 7, dilation 2
    unless given); dim: out_conv's input channels; vq_config (dim, levels, G, R) for the DVAE,
    None for the Decoder. encoder_config adds the encoder side's modules, so that the released
    DVAE.safetensors loads whole; its forward (audio -> codes) is not part of this reference."""

    def __init__(self, decoder_config, dim, vq_config=None, encoder_config=None, n_mels=100):
        super().__init__()
        self.register_buffer("coef", torch.rand(1, n_mels, 1))
        if encoder_config is not None:
            self.downsample_conv = nn.Sequential(
                nn.Conv1d(n_mels, dim, 3, 1, 1), nn.GELU(), nn.Conv1d(dim, dim, 4, 2, 1),
                nn.GELU())
            self.preprocessor_mel = _Buffers()
            self.preprocessor_mel.mel_spec = _mel_spectrogram_buffers(n_mels=n_mels)
            self.encoder = DVAEDecoder(**encoder_config)
        self.decoder = DVAEDecoder(**decoder_config)
        self.out_conv = nn.Conv1d(dim, n_mels, 3, 1, 1, bias=False)
        self.vq_layer = None if vq_config is None else GFSQ(
            vq_config["dim"], vq_config["levels"], vq_config["G"], vq_config["R"])

    @staticmethod
    def interleave(x):
        """[B, C, T] -> [B, C/2, 2T]: frame 2t + j, channel c = x[:, j·C/2 + c, t]."""
        b, c, t = x.shape
        return x.view(b, 2, c // 2, t).permute(0, 2, 3, 1).flatten(2)

    def features(self, inp):
        """The decoder's input: GFSQ features of codes [B, num_vq, T] (DVAE) or the hidden
        states [B, hidden, T] themselves (Decoder), interleaved to [B, C/2, 2T]."""
        feats = self.vq_layer.embed(inp) if self.vq_layer is not None else inp
        return self.interleave(feats)

    def forward(self, inp):
        """Decode: -> mel [B, 100, 2T]."""
        return self.out_conv(self.decoder(self.features(inp))) * self.coef


# ---------------------------------------------------------------------------------------------
# Vocos


class VocosConvNeXtBlock(nn.Module):
    def __init__(self, dim, intermediate_dim):
        super().__init__()
        self.dwconv = nn.Conv1d(dim, dim, kernel_size=7, padding=3, groups=dim)
        self.norm = nn.LayerNorm(dim, eps=1e-6)
        self.pwconv1 = nn.Linear(dim, intermediate_dim)
        self.pwconv2 = nn.Linear(intermediate_dim, dim)
        self.gamma = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        y = self.norm(self.dwconv(x).transpose(1, 2))
        y = self.gamma * self.pwconv2(F.gelu(self.pwconv1(y)))
        return x + y.transpose(1, 2)


class VocosBackbone(nn.Module):
    def __init__(self, input_channels, dim, intermediate_dim, num_layers):
        super().__init__()
        self.embed = nn.Conv1d(input_channels, dim, kernel_size=7, padding=3)
        self.norm = nn.LayerNorm(dim, eps=1e-6)
        self.convnext = nn.ModuleList([VocosConvNeXtBlock(dim, intermediate_dim)
                                       for _ in range(num_layers)])
        self.final_layer_norm = nn.LayerNorm(dim, eps=1e-6)

    def forward(self, mel):
        """mel [B, C, F] -> [B, F, dim]."""
        x = self.norm(self.embed(mel).transpose(1, 2)).transpose(1, 2)
        for block in self.convnext:
            x = block(x)
        return self.final_layer_norm(x.transpose(1, 2))


def inverse_rdft(spec, n_fft):
    """Inverse real DFT of each frame, written out: spec [B, n_fft/2 + 1, F] complex ->
    frames [B, n_fft, F] real, (1/N)·(Re X_0 + (-1)^n Re X_{N/2} + 2·Σ_k Re(X_k e^{2πikn/N}));
    like torch.fft.irfft it ignores the imaginary parts of the DC and Nyquist bins."""
    n = torch.arange(n_fft, dtype=torch.float64)
    k = torch.arange(n_fft // 2 + 1, dtype=torch.float64)
    angle = 2 * math.pi * torch.outer(n, k) / n_fft
    weight = torch.full((n_fft // 2 + 1,), 2.0, dtype=torch.float64)
    weight[0] = weight[-1] = 1.0
    cos = (torch.cos(angle) * weight).to(spec.real.dtype)
    sin = (torch.sin(angle) * weight).to(spec.real.dtype)
    sin[:, 0] = 0
    sin[:, -1] = 0
    return (cos @ spec.real - sin @ spec.imag) / n_fft


def istft_center(spec, n_fft, hop_length, window):
    """torch.istft(spec, n_fft, hop_length, n_fft, window, center=True), written out."""
    frames = inverse_rdft(spec, n_fft) * window[None, :, None]
    b, _, n_frames = frames.shape
    total = n_fft + hop_length * (n_frames - 1)
    audio = frames.new_zeros(b, total)
    envelope = frames.new_zeros(total)
    for f in range(n_frames):
        audio[:, f * hop_length:f * hop_length + n_fft] += frames[:, :, f]
        envelope[f * hop_length:f * hop_length + n_fft] += window ** 2
    pad = n_fft // 2
    return audio[:, pad:total - pad] / envelope[pad:total - pad]


class ISTFTHead(nn.Module):
    def __init__(self, dim, n_fft, hop_length, padding="center"):
        super().__init__()
        if padding != "center":
            raise ValueError("ChatTTS configures Vocos with padding 'center' only")
        self.n_fft, self.hop_length = n_fft, hop_length
        self.out = nn.Linear(dim, n_fft + 2)
        self.istft = _Buffers(window=hann_window(n_fft))

    def log_mag_phase(self, x):
        """x [B, F, dim] -> (log-magnitude, phase), each [B, n_fft/2 + 1, F]."""
        return self.out(x).transpose(1, 2).chunk(2, dim=1)

    def spectrum(self, x):
        """x [B, F, dim] -> complex S [B, n_fft/2 + 1, F]."""
        log_mag, phase = self.log_mag_phase(x)
        mag = torch.clip(torch.exp(log_mag), max=1e2)
        return torch.complex(mag * torch.cos(phase), mag * torch.sin(phase))

    def forward(self, x):
        window = self.istft.window.to(x.dtype)
        return istft_center(self.spectrum(x), self.n_fft, self.hop_length, window)


class Vocos(nn.Module):
    """vocos' Vocos as ChatTTS builds it (MelSpectrogramFeatures, VocosBackbone, ISTFTHead)."""

    def __init__(self, config):
        super().__init__()
        self.feature_extractor = _Buffers()
        self.feature_extractor.mel_spec = _mel_spectrogram_buffers(
            config["n_fft"], config["input_channels"], config.get("sample_rate", 24000))
        self.backbone = VocosBackbone(config["input_channels"], config["dim"],
                                      config["intermediate_dim"], config["num_layers"])
        self.head = ISTFTHead(config["dim"], config["n_fft"], config["hop_length"],
                              config.get("padding", "center"))

    def forward(self, mel):
        """Vocos.decode: mel [B, 100, F] -> audio [B, hop·(F - 1)]."""
        return self.head(self.backbone(mel))
