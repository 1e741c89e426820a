"""PyTorch reference of KAN-TTS's Sambert acoustic model (KanTtsSAMBERT), for voxd's parity fixtures.

Written from reading modelscope/KAN-TTS at commit 66202d0 (kantts/models/sambert/
kantts_sambert.py, adaptors.py, __init__.py, fsmn.py, positions.py, kantts/models/utils.py and
kantts/bin/infer_sambert.py). The module tree
and therefore the state-dict names are the original's, so the "model" state dict of a KAN-TTS
checkpoint loads into KanTtsSAMBERT with strict=True (training-only align_attention.* keys of
MAS checkpoints excepted: load those with strict=False or drop them). Only inference is covered
(no targets, eval mode), and only the plain variant: four linguistic channels (sy, tone,
syllable_flag, word_segment), speaker and emotion embedding tables; no SE, no FP, no byte input
(NSF changes nothing in the network, only post-processing outside it, which is not done here).

Behaviour kept on purpose, because the original has it:

- the summed linguistic embedding is scaled by sqrt(encoder_num_units), not sqrt(embedding_dim);
  the encoder's position table starts at position 1, is laid out as all sines then all cosines,
  uses 10000^(j / (depth/2 - 1)), and is rebuilt from the formula when the sequence is longer
  than max_len (the original then overwrites the parameter; here the table is computed without
  touching the parameter, which gives the same output);
- attention and FSMN layers add their outer residual only when the output width equals the
  input width (so encoder layer 0 and FSMN layer 0 normally have none, but do when the widths
  happen to match);
- the FSMN memory block pads lp = int(round((K-1)/2)) on the left and rp = int((K-1)/2) on the
  right, and moves the window by `shift` only when shift > 0: a negative shift is ignored, and a
  shift larger than rp makes rp negative (F.pad then crops, the window lies wholly in the past).
  K = 2, 6, 10, ... give lp + rp = K - 2 and the original fails on a shape mismatch; the
  constructor here raises instead;
- the duration predictor is autoregressive over tokens: the prenet of the previous ReLU'd log
  duration (0 for the first token) comes first, then the condition; the repetition counts are
  int(exp(l) - 1 + 0.5) in float32, and the band width is int(max(exp(l) - 1) / r + 0.5) over
  the continuous durations of the whole batch;
- frames are padded with zeros to a multiple of r; the duration-position sinusoid (interleaved
  sin/cos, 1-based index inside a token) is then added to every frame, so padded frames carry
  pe(0) = [0, 1, 0, 1, ...]; in a batch, a shorter utterance's frames between its own length and
  the batch's longest get index t + 1 (the one-hot row is empty, so the token offset is 0);
- the LFR memory of group s is the r text frames of the group side by side, then the speaker and
  emotion vectors of the group's first frame;
- the decoder runs step by step for all T_pad / r groups, fed with the prenet of the last frame
  of the previous group (zeros first); memory keys/values are computed from the raw memory;
  the self-attention band is [s - band, s], the memory band [s, s + band], masked with -inf;
  the decoder prenet's dropouts are nn.Dropout modules, so they are off in eval;
- decoder frames >= T are zeroed, the FSMN + LSTM postnet predicts a residual on the decoder
  mel, and its output is zeroed at frames >= T again; in a batch the postnet LSTM runs over the
  padded frames (not packed), the pitch/energy BiLSTMs are packed.

One difference on purpose: the original's batched inference fails in the decoder for B > 1
with more than one head (its band masks have batch dimension 1 and are repeated n_head times
only, while the scores have n_head * B rows); forward() here broadcasts the masks over the batch.
With that one fix applied to the original, both give the same batched outputs; batch 1 (what
infer_sambert.py runs, and what infer() below runs) needs no fix.

Differences that do not change outputs: the decoder keeps its caches in local lists instead of
module state (reset_state), the length regulator gathers rows instead of multiplying by a
one-hot matrix, and attention is computed as [B, H, L, d] matmuls instead of (H*B)-batched bmm.
"""
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


def lengths_mask(lengths, max_len):
    """True at padding: index >= length."""
    return torch.arange(int(max_len))[None, :] >= lengths[:, None]


def encoder_position_table(n_position, depth):
    """[n_position, depth] float32, built in float64 like SinusoidalPositionEncoder: row n is
    position n + 1, columns [0, depth/2) sin and [depth/2, depth) cos of
    p / 10000^(j / (depth/2 - 1))."""
    half = depth // 2
    divisor = float(depth / 2 - 1)
    angles = np.array([[p / np.power(10000, j / divisor) for j in range(half)]
                       for p in range(1, n_position + 1)], dtype=np.float64).reshape(
                           n_position, half)
    table = np.zeros((n_position, depth))
    table[:, :half] = np.sin(angles)
    table[:, half:] = np.cos(angles)
    return torch.FloatTensor(table)


def duration_inv_timescales(depth):
    """[depth] float32: 10000^(2 * floor(i/2) / depth), built in float64."""
    return torch.FloatTensor([np.power(10000, 2 * (i // 2) / depth) for i in range(depth)])


def fsmn_paddings(filter_size, shift):
    """(lp, rp) of MemoryBlockV2; shift moves the window only when positive."""
    lp = int(round((filter_size - 1) / 2))
    rp = int((filter_size - 1) / 2)
    if shift > 0:
        lp, rp = lp + shift, rp - shift
    if lp + rp != filter_size - 1:
        raise ValueError(f"FSMN filter size {filter_size}: paddings {lp}+{rp} do not keep the "
                         "length (the original fails here too)")
    return lp, rp


def _heads(x, n_head):
    """[B, L, H*d] -> [B, H, L, d]."""
    b, t, _ = x.shape
    return x.view(b, t, n_head, -1).transpose(1, 2)


def _merge_heads(x):
    """[B, H, L, d] -> [B, L, H*d], head-major features."""
    b, h, t, d = x.shape
    return x.transpose(1, 2).contiguous().view(b, t, h * d)


def _attend(q, k, v, temperature, blocked):
    """Scaled dot-product attention; blocked (broadcastable to [B, H, Lq, Lk]) is True where a
    key may not be attended (-inf before the softmax)."""
    scores = torch.matmul(q, k.transpose(-1, -2)) / temperature
    if blocked is not None:
        scores = scores.masked_fill(blocked, -np.inf)
    return torch.matmul(torch.softmax(scores, dim=-1), v)


# ---------------------------------------------------------------------------------------------
# Text encoder


class SinusoidalPositionEncoder(nn.Module):
    def __init__(self, max_len, depth):
        super().__init__()
        self.max_len, self.depth = max_len, depth
        self.position_enc = nn.Parameter(encoder_position_table(max_len, depth).unsqueeze(0),
                                         requires_grad=False)

    def forward(self, x):
        n = x.size(1)
        if n > self.max_len:
            table = encoder_position_table(n, self.depth).unsqueeze(0).to(x.device)
        else:
            table = self.position_enc[:, :n, :]
        return x + table.expand(x.size(0), -1, -1)


class MultiHeadSelfAttention(nn.Module):
    def __init__(self, n_head, d_in, d_model, d_head):
        super().__init__()
        self.n_head = n_head
        self.temperature = np.power(d_head, 0.5)
        self.layer_norm = nn.LayerNorm(d_in, eps=1e-6)
        self.w_qkv = nn.Linear(d_in, 3 * n_head * d_head)
        self.fc = nn.Linear(n_head * d_head, d_model)

    def forward(self, x, key_mask):
        q, k, v = (_heads(t, self.n_head) for t in
                   self.w_qkv(self.layer_norm(x)).chunk(3, dim=-1))
        blocked = None if key_mask is None else key_mask[:, None, None, :]
        out = self.fc(_merge_heads(_attend(q, k, v, self.temperature, blocked)))
        if out.size(-1) == x.size(-1):
            out = out + x
        return out


class PositionwiseConvFeedForward(nn.Module):
    """Pre-norm conv FFN with residual: x + w_2(relu(w_1(LN(x)))) over time."""

    def __init__(self, d_in, d_hid, kernel_size):
        super().__init__()
        self.w_1 = nn.Conv1d(d_in, d_hid, kernel_size[0], padding=(kernel_size[0] - 1) // 2)
        self.w_2 = nn.Conv1d(d_hid, d_in, kernel_size[1], padding=(kernel_size[1] - 1) // 2)
        self.layer_norm = nn.LayerNorm(d_in, eps=1e-6)

    def forward(self, x, mask=None):
        hidden = F.relu(self.w_1(self.layer_norm(x).transpose(1, 2)))
        if mask is not None:
            hidden = hidden.masked_fill(mask[:, None, :], 0)
        return self.w_2(hidden).transpose(1, 2) + x


class FFTBlock(nn.Module):
    def __init__(self, d_in, d_model, n_head, d_head, d_inner, kernel_size):
        super().__init__()
        self.slf_attn = MultiHeadSelfAttention(n_head, d_in, d_model, d_head)
        self.pos_ffn = PositionwiseConvFeedForward(d_model, d_inner, kernel_size)

    def forward(self, x, mask):
        out = self.slf_attn(x, mask).masked_fill(mask[..., None], 0)
        return self.pos_ffn(out, mask).masked_fill(mask[..., None], 0)


class SelfAttentionEncoder(nn.Module):
    def __init__(self, n_layer, d_in, d_model, n_head, d_head, d_inner, max_len):
        super().__init__()
        self.d_model = d_model
        self.fft = nn.ModuleList([
            FFTBlock(d_in if i == 0 else d_model, d_model, n_head, d_head, d_inner, (3, 1))
            for i in range(n_layer)])
        self.ln = nn.LayerNorm(d_model, eps=1e-6)
        self.position_enc = SinusoidalPositionEncoder(max_len, d_in)

    def forward(self, x, mask):
        x = self.position_enc(x * self.d_model ** 0.5)
        for block in self.fft:
            x = block(x, mask)
        return self.ln(x)


class TextFftEncoder(nn.Module):
    def __init__(self, params):
        super().__init__()
        d_emb = params["embedding_dim"]
        self.sy_emb = nn.Embedding(params["sy"], d_emb)
        self.tone_emb = nn.Embedding(params["tone"], d_emb)
        self.syllable_flag_emb = nn.Embedding(params["syllable_flag"], d_emb)
        self.ws_emb = nn.Embedding(params["word_segment"], d_emb)
        d_model, n_head = params["encoder_num_units"], params["encoder_num_heads"]
        self.ling_enc = SelfAttentionEncoder(
            params["encoder_num_layers"], d_emb, d_model, n_head, d_model // n_head,
            params["encoder_ffn_inner_dim"], params["max_len"])
        self.ling_proj = nn.Linear(d_model, params["encoder_projection_units"], bias=False)

    def forward(self, ling, mask):
        emb = (self.sy_emb(ling[:, :, 0]) + self.tone_emb(ling[:, :, 1]) +
               self.syllable_flag_emb(ling[:, :, 2]) + self.ws_emb(ling[:, :, 3]))
        return self.ling_proj(self.ling_enc(emb, mask))


# ---------------------------------------------------------------------------------------------
# FSMN (predictors and postnet)


class FeedForwardNet(nn.Module):
    """Two per-frame linear maps (kernel-1 convs), ReLU between, the second without bias."""

    def __init__(self, d_in, d_hid, d_out):
        super().__init__()
        self.w_1 = nn.Conv1d(d_in, d_hid, 1)
        self.w_2 = nn.Conv1d(d_hid, d_out, 1, bias=False)

    def forward(self, x):
        return self.w_2(F.relu(self.w_1(x.transpose(1, 2)))).transpose(1, 2)


class MemoryBlockV2(nn.Module):
    """out[t] = x[t] + sum_k w[k] * x[t - lp + k] per channel, x zero outside the valid frames."""

    def __init__(self, d, filter_size, shift):
        super().__init__()
        self.lp, self.rp = fsmn_paddings(filter_size, shift)
        self.conv_dw = nn.Conv1d(d, d, filter_size, 1, 0, groups=d, bias=False)

    def forward(self, x, mask=None):
        if mask is not None:
            x = x.masked_fill(mask[..., None], 0)
        padded = F.pad(x.transpose(1, 2), (self.lp, self.rp))
        out = self.conv_dw(padded).transpose(1, 2) + x
        if mask is not None:
            out = out.masked_fill(mask[..., None], 0)
        return out


class FsmnEncoderV2(nn.Module):
    def __init__(self, filter_size, n_layer, d_in, d_memory, d_inner, shift):
        super().__init__()
        self.ffn_lst = nn.ModuleList([FeedForwardNet(d_in if i == 0 else d_memory, d_inner,
                                                     d_memory) for i in range(n_layer)])
        self.memory_block_lst = nn.ModuleList([MemoryBlockV2(d_memory, filter_size, shift)
                                               for _ in range(n_layer)])

    def forward(self, x, mask=None):
        for ffn, block in zip(self.ffn_lst, self.memory_block_lst):
            out = block(ffn(x), mask)
            if out.size(-1) == x.size(-1):
                out = out + x
            x = out
        return x


# ---------------------------------------------------------------------------------------------
# Variance adaptor


class Prenet(nn.Module):
    """Linear + ReLU (+ dropout, off in eval) per unit count, then an optional output Linear.
    The ReLU/Dropout modules hold the ModuleList slots so the Linears sit at 0, 3, 6, ..."""

    def __init__(self, in_units, units, out_units=0):
        super().__init__()
        self.fcs = nn.ModuleList()
        for d_in, d_out in zip([in_units] + list(units[:-1]), units):
            self.fcs.extend([nn.Linear(d_in, d_out), nn.ReLU(), nn.Dropout(0.5)])
        if out_units:
            self.fcs.append(nn.Linear(units[-1], out_units))

    def forward(self, x):
        for layer in self.fcs:
            x = layer(x)
        return x


class VarFsmnRnnNARPredictor(nn.Module):
    """FSMN encoder, BiLSTM (packed by the token lengths), Linear to one value per token."""

    def __init__(self, d_in, filter_size, n_layer, d_memory, d_inner, shift, lstm_units):
        super().__init__()
        self.fsmn = FsmnEncoderV2(filter_size, n_layer, d_in, d_memory, d_inner, shift)
        self.blstm = nn.LSTM(d_memory, lstm_units, num_layers=1, batch_first=True,
                             bidirectional=True)
        self.fc = nn.Linear(2 * lstm_units, 1)

    def forward(self, x, mask):
        n = x.size(1)
        lengths = (~mask).sum(dim=1)
        h = self.fsmn(x, mask)
        packed = nn.utils.rnn.pack_padded_sequence(h, lengths.tolist(), batch_first=True,
                                                   enforce_sorted=False)
        h, _ = nn.utils.rnn.pad_packed_sequence(self.blstm(packed)[0], batch_first=True,
                                                total_length=n)
        return self.fc(h).squeeze(-1).masked_fill(mask, 0.0)


class VarRnnARPredictor(nn.Module):
    """Autoregressive log-duration predictor: a 2-layer LSTM over [prenet(prev) | cond_i]."""

    def __init__(self, cond_units, prenet_units, rnn_units):
        super().__init__()
        self.prenet = Prenet(1, prenet_units)
        self.lstm = nn.LSTM(prenet_units[-1] + cond_units, rnn_units, num_layers=2,
                            batch_first=True)
        self.fc = nn.Linear(rnn_units, 1)

    def infer(self, cond, mask):
        prev = torch.zeros(cond.size(0), 1, 1, device=cond.device)
        state = None
        steps = []
        for i in range(cond.size(1)):
            z = torch.cat([self.prenet(prev), cond[:, i:i + 1, :]], dim=-1)
            h, state = self.lstm(z, state)
            prev = F.relu(self.fc(h))  # [B, 1, 1], fed back in the log domain
            steps.append(prev[:, :, 0])
        return torch.cat(steps, dim=1).masked_fill(mask, 0.0)


def regulate_lengths(x, reps, r):
    """Repeats token i reps[i] times ([B, N, C] -> [B, T_max, C], zero rows past each
    utterance's length), then pads the frame axis with zeros to a multiple of r. Also returns
    each frame's token start offset and the frame count T_max before padding."""
    b, n, c = x.shape
    ends = torch.cumsum(reps, dim=1)
    t_max = int(ends[:, -1].max())
    frames = torch.arange(t_max)[None, :].expand(b, -1)
    token = torch.searchsorted(ends.contiguous(), frames.contiguous(), right=True)
    valid = frames < ends[:, -1:]
    token = token.clamp(max=n - 1)
    rows = torch.gather(x, 1, token[..., None].expand(-1, -1, c))
    rows = rows.masked_fill(~valid[..., None], 0.0)
    starts = torch.gather(ends - reps, 1, token).masked_fill(~valid, 0)
    t_pad = -(-t_max // r) * r
    return F.pad(rows, (0, 0, 0, t_pad - t_max)), starts, t_max


class DurSinusoidalPositionEncoder(nn.Module):
    def __init__(self, depth, outputs_per_step):
        super().__init__()
        self.r = outputs_per_step
        self.inv_timescales = nn.Parameter(duration_inv_timescales(depth), requires_grad=False)

    def forward(self, starts, t_max):
        """starts [B, T_max]: each frame's token start (0 past the utterance); frames t get
        position t - start + 1, the r-padding frames position 0."""
        pos = (torch.arange(t_max)[None, :] - starts + 1).float()
        t_pad = -(-t_max // self.r) * self.r
        pos = F.pad(pos, (0, t_pad - t_max))
        angle = pos[:, :, None] / self.inv_timescales[None, None, :]
        pe = torch.empty_like(angle)
        pe[:, :, 0::2] = torch.sin(angle[:, :, 0::2])
        pe[:, :, 1::2] = torch.cos(angle[:, :, 1::2])
        return pe


class VarianceAdaptor(nn.Module):
    def __init__(self, params):
        super().__init__()
        p = params["encoder_projection_units"]
        d_in = p + params["emotion_units"] + params["speaker_units"]

        def predictor():
            return VarFsmnRnnNARPredictor(
                d_in, params["predictor_filter_size"], params["predictor_fsmn_num_layers"],
                params["predictor_num_memory_units"], params["predictor_ffn_inner_dim"],
                params["predictor_shift"], params["predictor_lstm_units"])

        self.r = params["outputs_per_step"]
        self.pitch_predictor = predictor()
        self.energy_predictor = predictor()
        self.duration_predictor = VarRnnARPredictor(d_in, params["dur_pred_prenet_units"],
                                                    params["dur_pred_lstm_units"])
        self.dur_position_encoder = DurSinusoidalPositionEncoder(p, self.r)
        self.pitch_emb = nn.Conv1d(1, p, kernel_size=9, padding=4)
        self.energy_emb = nn.Conv1d(1, p, kernel_size=9, padding=4)

    def forward(self, text, emo, spk, mask):
        vp_in = torch.cat([text, spk, emo], dim=-1)
        pitch = self.pitch_predictor(vp_in, mask)
        energy = self.energy_predictor(vp_in, mask)
        text_aug = (text + self.pitch_emb(pitch[:, None, :]).transpose(1, 2) +
                    self.energy_emb(energy[:, None, :]).transpose(1, 2))
        log_dur = self.duration_predictor.infer(torch.cat([text_aug, spk, emo], dim=-1), mask)
        durations = torch.exp(log_dur) - 1
        reps = (durations + 0.5).long()
        lr_text, starts, t_max = regulate_lengths(text_aug, reps, self.r)
        lr_text = lr_text + self.dur_position_encoder(starts, t_max)
        lr_spk = regulate_lengths(spk, reps, self.r)[0]
        lr_emo = regulate_lengths(emo, reps, self.r)[0]
        return {"lr_text": lr_text, "lr_spk": lr_spk, "lr_emo": lr_emo, "reps": reps,
                "lengths": reps.sum(dim=1), "log_duration": log_dur, "durations": durations,
                "pitch": pitch, "energy": energy}


# ---------------------------------------------------------------------------------------------
# PNCA decoder


class MultiHeadPNCAAttention(nn.Module):
    def __init__(self, n_head, d_model, d_mem, d_head):
        super().__init__()
        self.n_head = n_head
        self.temperature = np.power(d_head, 0.5)
        self.layer_norm = nn.LayerNorm(d_model, eps=1e-6)
        self.w_x_qkv = nn.Linear(d_model, 3 * n_head * d_head)
        self.fc_x = nn.Linear(n_head * d_head, d_model)
        self.w_h_kv = nn.Linear(d_mem, 2 * n_head * d_head)
        self.fc_h = nn.Linear(n_head * d_head, d_model)

    def memory_kv(self, memory):
        """Keys and values of the memory (the raw LFR memory, no LayerNorm): [B, H, L, d]."""
        return tuple(_heads(t, self.n_head) for t in self.w_h_kv(memory).chunk(2, dim=-1))

    def step(self, x, cache, h_kv, x_blocked, h_blocked):
        """One decoder step: x [B, 1, D]; cache is this layer's list of past (k, v)."""
        q, k, v = (_heads(t, self.n_head) for t in
                   self.w_x_qkv(self.layer_norm(x)).chunk(3, dim=-1))
        cache.append((k, v))
        keys = torch.cat([c[0] for c in cache], dim=2)
        values = torch.cat([c[1] for c in cache], dim=2)
        out_x = self.fc_x(_merge_heads(_attend(q, keys, values, self.temperature, x_blocked)))
        out_h = self.fc_h(_merge_heads(_attend(q, h_kv[0], h_kv[1], self.temperature,
                                               h_blocked)))
        return out_x + out_h + x


class PNCABlock(nn.Module):
    def __init__(self, d_model, d_mem, n_head, d_head, d_inner):
        super().__init__()
        self.pnca_attn = MultiHeadPNCAAttention(n_head, d_model, d_mem, d_head)
        self.pos_ffn = PositionwiseConvFeedForward(d_model, d_inner, (1, 1))

    def step(self, x, cache, h_kv, x_blocked, h_blocked):
        return self.pos_ffn(self.pnca_attn.step(x, cache, h_kv, x_blocked, h_blocked))


class HybridAttentionDecoder(nn.Module):
    def __init__(self, d_in, prenet_units, n_layer, d_model, d_mem, n_head, d_head, d_inner,
                 d_out):
        super().__init__()
        self.d_model, self.d_in = d_model, d_in
        self.prenet = Prenet(d_in, prenet_units, d_model)
        self.dec_in_proj = nn.Linear(d_model + d_mem, d_model)
        self.pnca = nn.ModuleList([PNCABlock(d_model, d_mem, n_head, d_head, d_inner)
                                   for _ in range(n_layer)])
        self.ln = nn.LayerNorm(d_model, eps=1e-6)
        self.dec_out_proj = nn.Linear(d_model, d_out)

    def infer(self, memory, x_band_width, h_band_width):
        """Autoregressive loop over the L memory groups: [B, L, d_mem] -> [B, L, r * M]."""
        b, n_steps, _ = memory.shape
        idx = torch.arange(n_steps)
        q, k = idx[:, None], idx[None, :]
        x_blocked = ~((k >= q - x_band_width) & (k <= q))  # [L, L], True = not attended
        h_blocked = ~((k >= q) & (k <= q + h_band_width))
        h_kv = [layer.pnca_attn.memory_kv(memory) for layer in self.pnca]
        caches = [[] for _ in self.pnca]
        prev = torch.zeros(b, 1, self.d_in, device=memory.device)
        outputs = []
        for s in range(n_steps):
            u = self.dec_in_proj(torch.cat([memory[:, s:s + 1, :], self.prenet(prev)], dim=-1))
            u = u * self.d_model ** 0.5
            for j, layer in enumerate(self.pnca):
                u = layer.step(u, caches[j], h_kv[j], x_blocked[s, :s + 1], h_blocked[s])
            out = self.dec_out_proj(self.ln(u))
            outputs.append(out)
            prev = out[:, :, -self.d_in:]  # the group's last frame, raw
        return torch.cat(outputs, dim=1)


class MelPNCADecoder(nn.Module):
    def __init__(self, params):
        super().__init__()
        r, m = params["outputs_per_step"], params["num_mels"]
        d_model, n_head = params["decoder_num_units"], params["decoder_num_heads"]
        d_mem = (params["encoder_projection_units"] * r + params["emotion_units"] +
                 params["speaker_units"])
        self.r, self.d_mel = r, m
        self.mel_dec = HybridAttentionDecoder(
            m, params["decoder_prenet_units"], params["decoder_num_layers"], d_model, d_mem,
            n_head, d_model // n_head, params["decoder_ffn_inner_dim"], m * r)

    def forward(self, memory, x_band_width, h_band_width):
        return self.mel_dec.infer(memory, x_band_width, h_band_width)


class PostNet(nn.Module):
    def __init__(self, params):
        super().__init__()
        m, d_memory = params["num_mels"], params["postnet_num_memory_units"]
        self.fsmn = FsmnEncoderV2(params["postnet_filter_size"],
                                  params["postnet_fsmn_num_layers"], m, d_memory,
                                  params["postnet_ffn_inner_dim"], params["postnet_shift"])
        self.lstm = nn.LSTM(d_memory, params["postnet_lstm_units"], num_layers=1,
                            batch_first=True)
        self.fc = nn.Linear(params["postnet_lstm_units"], m)

    def forward(self, x, mask):
        """The residual the postnet adds to x."""
        return self.fc(self.lstm(self.fsmn(x, mask))[0])


# ---------------------------------------------------------------------------------------------


class KanTtsSAMBERT(nn.Module):
    """params: Model.KanTtsSAMBERT.params of a KAN-TTS config, with the vocabulary sizes (sy,
    tone, syllable_flag, word_segment, emotion, speaker) merged in as am_infer does."""

    def __init__(self, params):
        super().__init__()
        for flag in ("SE", "FP", "using_byte"):
            if params.get(flag, False):
                raise NotImplementedError(f"{flag} variant is not covered by this reference")
        self.text_encoder = TextFftEncoder(params)
        self.spk_tokenizer = nn.Embedding(params["speaker"], params["speaker_units"])
        self.emo_tokenizer = nn.Embedding(params["emotion"], params["emotion_units"])
        self.variance_adaptor = VarianceAdaptor(params)
        self.mel_decoder = MelPNCADecoder(params)
        self.mel_postnet = PostNet(params)

    def forward(self, inputs_ling, inputs_emotion, inputs_speaker, input_lengths):
        """Batched inference as KanTtsSAMBERT.forward computes it without targets.
        inputs_ling [B, N, 4], inputs_emotion / inputs_speaker [B, N], input_lengths [B]."""
        b, n = inputs_ling.shape[:2]
        r = self.mel_decoder.r
        token_mask = lengths_mask(input_lengths, n)
        text_hid = self.text_encoder(inputs_ling, token_mask)
        emo_hid = self.emo_tokenizer(inputs_emotion)
        spk_hid = self.spk_tokenizer(inputs_speaker)
        va = self.variance_adaptor(text_hid, emo_hid, spk_hid, token_mask)
        if int(va["lengths"].max()) == 0:
            raise ValueError("every duration rounds to 0 frames (the original fails here too)")

        s_units, e_units = spk_hid.size(-1), emo_hid.size(-1)
        memory = torch.cat([va["lr_text"].reshape(b, -1, r * text_hid.size(-1)),
                            va["lr_spk"].reshape(b, -1, r * s_units)[:, :, :s_units],
                            va["lr_emo"].reshape(b, -1, r * e_units)[:, :, :e_units]], dim=-1)
        band_width = int(va["durations"].max() / r + 0.5)

        dec = self.mel_decoder(memory, band_width, band_width)
        dec = dec.reshape(b, -1, self.mel_decoder.d_mel)
        frame_mask = lengths_mask(va["lengths"], dec.size(1))
        dec = dec.masked_fill(frame_mask[..., None], 0)
        post = self.mel_postnet(dec, frame_mask) + dec
        post = post.masked_fill(frame_mask[..., None], 0)
        return {"text_hid": text_hid, "pitch": va["pitch"], "energy": va["energy"],
                "log_duration": va["log_duration"], "durations": va["reps"],
                "lengths": va["lengths"], "band_width": band_width, "memory": memory,
                "dec_outputs": dec, "postnet_outputs": post}


def infer(model, ling, emotion, speaker):
    """One utterance (EOS already dropped): ling [N, 4], emotion [N], speaker [N] int64.
    Returns numpy arrays: text_hid [N, P], pitch [N], energy [N], log_duration [N],
    durations int64 [N], band_width int64 [1], memory [L, r*P + S + E], decoder_mel [T, M],
    mel [T, M] (post-postnet, the model's output)."""
    model.eval()
    with torch.no_grad():
        res = model(ling[None], emotion[None], speaker[None], torch.LongTensor([ling.size(0)]))
    t = int(res["lengths"][0])
    return {
        "text_hid": res["text_hid"][0].numpy(),
        "pitch": res["pitch"][0].numpy(),
        "energy": res["energy"][0].numpy(),
        "log_duration": res["log_duration"][0].numpy(),
        "durations": res["durations"][0].numpy().astype(np.int64),
        "band_width": np.array([res["band_width"]], dtype=np.int64),
        "memory": res["memory"][0].numpy(),
        "decoder_mel": res["dec_outputs"][0, :t].numpy(),
        "mel": res["postnet_outputs"][0, :t].numpy(),
    }
