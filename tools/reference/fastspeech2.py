"""PyTorch reference of ming024/FastSpeech2's inference path, for voxd's parity fixtures.

Written from reading ming024's model/fastspeech2.py, model/modules.py, transformer/*.py and
utils/tools.py; the module tree and therefore the state-dict names are the original's, so an
original checkpoint's state dict loads into this module unchanged. Only inference (no targets,
eval mode) is covered. Behaviour kept on purpose, because the original has it:

- the speaker embedding is added to every position, padding included, so the variance
  predictors' convolutions see it in the padded rows next to a shorter sequence's end;
- pitch and energy embeddings are likewise added to padded rows (bucket of a masked 0.0);
- the energy prediction is scaled by p_control (the original passes p_control to
  get_energy_embedding at both feature levels; e_control is accepted and unused);
- the variance predictor's second conv has padding=1 whatever its kernel size;
- durations are clamp(round(exp(log_d) - 1) * d_control, min=0) and the length regulator
  truncates them with int();
- in eval mode a sequence longer than max_seq_len gets a freshly computed sinusoid table instead
  of the position_enc parameter (encoder and decoder alike);
- the postnet runs over the padded mel frames (mel_linear of a zeroed decoder row, i.e. its bias).

Differences that do not change outputs: the stats and speaker count are passed in rather than
read from preprocessed_path, and PostNet's sizes (80 mels, 512 channels, kernel 5, 5 convs in
the original, which hard-codes them) are constructor arguments so fixtures can be small.
"""
from collections import OrderedDict

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

PAD = 0


def get_mask_from_lengths(lengths, max_len=None):
    """True at padding: position >= length."""
    if max_len is None:
        max_len = torch.max(lengths).item()
    ids = torch.arange(0, max_len, device=lengths.device).unsqueeze(0).expand(lengths.shape[0], -1)
    return ids >= lengths.unsqueeze(1).expand(-1, max_len)


def get_sinusoid_encoding_table(n_position, d_hid):
    """[n_position, d_hid]: sin at even columns, cos at odd ones, computed in float64."""
    hid = np.arange(d_hid)
    angles = np.arange(n_position)[:, None] / np.power(10000, 2 * (hid // 2) / d_hid)[None, :]
    table = angles.astype(np.float64)
    table[:, 0::2] = np.sin(table[:, 0::2])
    table[:, 1::2] = np.cos(table[:, 1::2])
    return torch.FloatTensor(table)


def _pad_frames(sequences, max_len=None):
    if max_len is None:
        max_len = max(s.size(0) for s in sequences)
    return torch.stack([F.pad(s, (0, 0, 0, max_len - s.size(0)), "constant", 0.0)
                        for s in sequences])


class ScaledDotProductAttention(nn.Module):
    def __init__(self, temperature):
        super().__init__()
        self.temperature = temperature

    def forward(self, q, k, v, mask):
        scores = torch.bmm(q, k.transpose(1, 2)) / self.temperature
        scores = scores.masked_fill(mask, -np.inf)
        return torch.bmm(torch.softmax(scores, dim=2), v)


class MultiHeadAttention(nn.Module):
    def __init__(self, n_head, d_model, d_k, d_v):
        super().__init__()
        self.n_head, self.d_k, self.d_v = n_head, d_k, d_v
        self.w_qs = nn.Linear(d_model, n_head * d_k)
        self.w_ks = nn.Linear(d_model, n_head * d_k)
        self.w_vs = nn.Linear(d_model, n_head * d_v)
        self.attention = ScaledDotProductAttention(temperature=np.power(d_k, 0.5))
        self.layer_norm = nn.LayerNorm(d_model)
        self.fc = nn.Linear(n_head * d_v, d_model)

    def forward(self, x, mask):
        b, t, _ = x.size()
        h = self.n_head

        def heads(proj, d):
            return proj(x).view(b, t, h, d).permute(2, 0, 1, 3).contiguous().view(-1, t, d)

        out = self.attention(heads(self.w_qs, self.d_k), heads(self.w_ks, self.d_k),
                             heads(self.w_vs, self.d_v), mask.repeat(h, 1, 1))
        out = out.view(h, b, t, self.d_v).permute(1, 2, 0, 3).contiguous().view(b, t, -1)
        return self.layer_norm(self.fc(out) + x)


class PositionwiseFeedForward(nn.Module):
    def __init__(self, d_in, d_hid, kernel_size):
        super().__init__()
        self.w_1 = nn.Conv1d(d_in, d_hid, kernel_size[0], padding=(kernel_size[0] - 1) // 2)
        self.w_2 = nn.Conv1d(d_hid, d_in, kernel_size[1], padding=(kernel_size[1] - 1) // 2)
        self.layer_norm = nn.LayerNorm(d_in)

    def forward(self, x):
        out = self.w_2(F.relu(self.w_1(x.transpose(1, 2)))).transpose(1, 2)
        return self.layer_norm(out + x)


class FFTBlock(nn.Module):
    def __init__(self, d_model, n_head, d_k, d_v, d_inner, kernel_size):
        super().__init__()
        self.slf_attn = MultiHeadAttention(n_head, d_model, d_k, d_v)
        self.pos_ffn = PositionwiseFeedForward(d_model, d_inner, kernel_size)

    def forward(self, x, mask, slf_attn_mask):
        out = self.slf_attn(x, slf_attn_mask).masked_fill(mask.unsqueeze(-1), 0)
        return self.pos_ffn(out).masked_fill(mask.unsqueeze(-1), 0)


def _fft_stack(config, prefix):
    t = config["transformer"]
    d_model, n_head = t[prefix + "_hidden"], t[prefix + "_head"]
    d_k = d_model // n_head
    return nn.ModuleList([FFTBlock(d_model, n_head, d_k, d_k, t["conv_filter_size"],
                                   t["conv_kernel_size"])
                          for _ in range(t[prefix + "_layer"])])


def _positions(param, length, max_seq_len, d_model):
    """The eval-mode position table for `length` rows: the parameter, or a fresh table when the
    sequence is longer than max_seq_len."""
    if length > max_seq_len:
        return get_sinusoid_encoding_table(length, d_model)[:length, :].unsqueeze(0).to(param)
    return param[:, :length, :]


class Encoder(nn.Module):
    def __init__(self, config, n_src_vocab):
        super().__init__()
        d_model = config["transformer"]["encoder_hidden"]
        self.max_seq_len, self.d_model = config["max_seq_len"], d_model
        self.src_word_emb = nn.Embedding(n_src_vocab, d_model, padding_idx=PAD)
        self.position_enc = nn.Parameter(
            get_sinusoid_encoding_table(config["max_seq_len"] + 1, d_model).unsqueeze(0),
            requires_grad=False)
        self.layer_stack = _fft_stack(config, "encoder")

    def forward(self, src_seq, mask):
        b, t = src_seq.shape
        slf_attn_mask = mask.unsqueeze(1).expand(-1, t, -1)
        out = self.src_word_emb(src_seq) + _positions(
            self.position_enc, t, self.max_seq_len, self.d_model).expand(b, -1, -1)
        for layer in self.layer_stack:
            out = layer(out, mask, slf_attn_mask)
        return out


class Decoder(nn.Module):
    def __init__(self, config):
        super().__init__()
        d_model = config["transformer"]["decoder_hidden"]
        self.max_seq_len, self.d_model = config["max_seq_len"], d_model
        self.position_enc = nn.Parameter(
            get_sinusoid_encoding_table(config["max_seq_len"] + 1, d_model).unsqueeze(0),
            requires_grad=False)
        self.layer_stack = _fft_stack(config, "decoder")

    def forward(self, x, mask):
        # The original slices x and mask to min(t, max_seq_len) rows when t <= max_seq_len: a no-op.
        b, t = x.shape[0], x.shape[1]
        slf_attn_mask = mask.unsqueeze(1).expand(-1, t, -1)
        out = x + _positions(self.position_enc, t, self.max_seq_len, self.d_model).expand(
            b, -1, -1)
        for layer in self.layer_stack:
            out = layer(out, mask, slf_attn_mask)
        return out, mask


class Conv(nn.Module):
    """Conv1d over [B, T, C] input."""

    def __init__(self, in_channels, out_channels, kernel_size, padding):
        super().__init__()
        self.conv = nn.Conv1d(in_channels, out_channels, kernel_size, padding=padding)

    def forward(self, x):
        return self.conv(x.contiguous().transpose(1, 2)).contiguous().transpose(1, 2)


class VariancePredictor(nn.Module):
    def __init__(self, config):
        super().__init__()
        d_in = config["transformer"]["encoder_hidden"]
        f, k = config["variance_predictor"]["filter_size"], config["variance_predictor"][
            "kernel_size"]
        self.conv_layer = nn.Sequential(OrderedDict([
            ("conv1d_1", Conv(d_in, f, k, padding=(k - 1) // 2)),
            ("relu_1", nn.ReLU()),
            ("layer_norm_1", nn.LayerNorm(f)),
            ("dropout_1", nn.Dropout(config["variance_predictor"].get("dropout", 0.5))),
            ("conv1d_2", Conv(f, f, k, padding=1)),
            ("relu_2", nn.ReLU()),
            ("layer_norm_2", nn.LayerNorm(f)),
            ("dropout_2", nn.Dropout(config["variance_predictor"].get("dropout", 0.5))),
        ]))
        self.linear_layer = nn.Linear(f, 1)

    def forward(self, x, mask):
        return self.linear_layer(self.conv_layer(x)).squeeze(-1).masked_fill(mask, 0.0)


def _bins(quantization, lo, hi, n_bins):
    if quantization == "log":
        return torch.exp(torch.linspace(np.log(lo), np.log(hi), n_bins - 1))
    return torch.linspace(lo, hi, n_bins - 1)


class LengthRegulator(nn.Module):
    def forward(self, x, duration, max_len=None):
        expanded = [torch.cat([vec.expand(max(int(d.item()), 0), -1)
                               for vec, d in zip(seq, dur)], 0)
                    for seq, dur in zip(x, duration)]
        mel_len = torch.tensor([e.shape[0] for e in expanded], device=x.device)
        return _pad_frames(expanded, max_len), mel_len


class VarianceAdaptor(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.duration_predictor = VariancePredictor(config["model"])
        self.length_regulator = LengthRegulator()
        self.pitch_predictor = VariancePredictor(config["model"])
        self.energy_predictor = VariancePredictor(config["model"])
        self.pitch_feature_level = config["pitch_feature_level"]
        self.energy_feature_level = config["energy_feature_level"]
        emb = config["model"]["variance_embedding"]
        n_bins = emb["n_bins"]
        self.pitch_bins = nn.Parameter(_bins(emb["pitch_quantization"], *config["stats"]["pitch"][
            :2], n_bins), requires_grad=False)
        self.energy_bins = nn.Parameter(_bins(emb["energy_quantization"],
                                              *config["stats"]["energy"][:2], n_bins),
                                        requires_grad=False)
        hidden = config["model"]["transformer"]["encoder_hidden"]
        self.pitch_embedding = nn.Embedding(n_bins, hidden)
        self.energy_embedding = nn.Embedding(n_bins, hidden)

    def _variance(self, predictor, bins, embedding, x, mask, control):
        prediction = predictor(x, mask) * control
        return prediction, embedding(torch.bucketize(prediction, bins))

    def pitch(self, x, mask, control):
        return self._variance(self.pitch_predictor, self.pitch_bins, self.pitch_embedding, x,
                              mask, control)

    def energy(self, x, mask, control):
        return self._variance(self.energy_predictor, self.energy_bins, self.energy_embedding, x,
                              mask, control)

    def forward(self, x, src_mask, p_control, e_control, d_control):
        del e_control  # the original scales energy by p_control
        log_d = self.duration_predictor(x, src_mask)
        if self.pitch_feature_level == "phoneme_level":
            pitch, emb = self.pitch(x, src_mask, p_control)
            x = x + emb
        if self.energy_feature_level == "phoneme_level":
            energy, emb = self.energy(x, src_mask, p_control)
            x = x + emb
        d_rounded = torch.clamp(torch.round(torch.exp(log_d) - 1) * d_control, min=0)
        x, mel_len = self.length_regulator(x, d_rounded)
        mel_mask = get_mask_from_lengths(mel_len)
        if self.pitch_feature_level == "frame_level":
            pitch, emb = self.pitch(x, mel_mask, p_control)
            x = x + emb
        if self.energy_feature_level == "frame_level":
            energy, emb = self.energy(x, mel_mask, p_control)
            x = x + emb
        return x, pitch, energy, log_d, d_rounded, mel_len, mel_mask


class ConvNorm(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size):
        super().__init__()
        self.conv = nn.Conv1d(in_channels, out_channels, kernel_size,
                              padding=int((kernel_size - 1) / 2))

    def forward(self, x):
        return self.conv(x)


class PostNet(nn.Module):
    def __init__(self, n_mel_channels=80, postnet_embedding_dim=512, postnet_kernel_size=5,
                 postnet_n_convolutions=5):
        super().__init__()
        dims = ([n_mel_channels] + [postnet_embedding_dim] * (postnet_n_convolutions - 1) +
                [n_mel_channels])
        self.convolutions = nn.ModuleList([
            nn.Sequential(ConvNorm(dims[i], dims[i + 1], postnet_kernel_size),
                          nn.BatchNorm1d(dims[i + 1]))
            for i in range(postnet_n_convolutions)])

    def forward(self, x):
        x = x.contiguous().transpose(1, 2)
        for conv in self.convolutions[:-1]:
            x = torch.tanh(conv(x))
        x = self.convolutions[-1](x)
        return x.contiguous().transpose(1, 2)


class FastSpeech2(nn.Module):
    """config: the acoustic section of a voxd voice config.json (docs/voice-format.md)."""

    def __init__(self, config, n_src_vocab, n_speakers=0, postnet_embedding_dim=512):
        super().__init__()
        model = config["model"]
        n_mels = config.get("n_mels", 80)
        self.encoder = Encoder(model, n_src_vocab)
        self.variance_adaptor = VarianceAdaptor(config)
        self.decoder = Decoder(model)
        self.mel_linear = nn.Linear(model["transformer"]["decoder_hidden"], n_mels)
        self.postnet = PostNet(n_mels, postnet_embedding_dim)
        self.speaker_emb = None
        if model["multi_speaker"]:
            self.speaker_emb = nn.Embedding(n_speakers, model["transformer"]["encoder_hidden"])

    def forward(self, speakers, texts, src_lens, max_src_len, p_control=1.0, e_control=1.0,
                d_control=1.0):
        """Returns (mel, postnet_mel, pitch, energy, log_d, d_rounded, src_masks, mel_masks,
        src_lens, mel_lens), as the original's inference call returns them."""
        src_masks = get_mask_from_lengths(src_lens, max_src_len)
        out = self.encoder(texts, src_masks)
        if self.speaker_emb is not None:
            out = out + self.speaker_emb(speakers).unsqueeze(1).expand(-1, max_src_len, -1)
        out, pitch, energy, log_d, d_rounded, mel_lens, mel_masks = self.variance_adaptor(
            out, src_masks, p_control, e_control, d_control)
        out, mel_masks = self.decoder(out, mel_masks)
        mel = self.mel_linear(out)
        postnet_mel = self.postnet(mel) + mel
        return (mel, postnet_mel, pitch, energy, log_d, d_rounded, src_masks, mel_masks,
                src_lens, mel_lens)


# ---------------------------------------------------------------------------------------------
# Training mode (training/train_fastspeech2.py). Added for teacher forcing; nothing above calls
# it, so inference and the parity fixtures are unchanged.


def lengths_to_mask(lengths, max_len):
    """True at padding, on the lengths' device; max_len is a host int, so nothing syncs."""
    return torch.arange(max_len, device=lengths.device)[None, :] >= lengths[:, None]


def regulate_lengths(x, durations, max_len):
    """The length regulator without a Python loop: row t of sequence b is x[b, i] for the token
    i whose cumulative duration first exceeds t; rows past sum(durations[b]) are zero.
    x [B, L, C], durations [B, L] (integers >= 0) -> [B, max_len, C]."""
    ends = torch.cumsum(durations, dim=1)
    frames = torch.arange(max_len, device=x.device)[None, :].expand(x.shape[0], -1)
    token = torch.searchsorted(ends.contiguous(), frames.contiguous(), right=True)
    valid = (frames < ends[:, -1:]).unsqueeze(-1)
    rows = torch.gather(x, 1, token.clamp(max=x.shape[1] - 1).unsqueeze(-1).expand(
        -1, -1, x.shape[2]))
    return rows * valid.to(rows.dtype)


def variance_adaptor_teacher_forced(adaptor, x, src_mask, max_mel_len, d_target, p_target,
                                    e_target):
    """ming024's VarianceAdaptor.forward in training: the predictors run on the encoder output,
    but the embeddings and the length regulator use the targets. Phoneme-level pitch and energy
    only (the feature level voxd's voices use). Returns (x, pitch_pred, energy_pred, log_d_pred)."""
    if adaptor.pitch_feature_level != "phoneme_level" or (
            adaptor.energy_feature_level != "phoneme_level"):
        raise ValueError("teacher forcing is implemented for phoneme_level pitch and energy")
    log_d = adaptor.duration_predictor(x, src_mask)
    pitch = adaptor.pitch_predictor(x, src_mask)
    x = x + adaptor.pitch_embedding(torch.bucketize(p_target, adaptor.pitch_bins))
    energy = adaptor.energy_predictor(x, src_mask)
    x = x + adaptor.energy_embedding(torch.bucketize(e_target, adaptor.energy_bins))
    return regulate_lengths(x, d_target, max_mel_len), pitch, energy, log_d


def fastspeech2_teacher_forced(model, texts, src_lens, max_src_len, mel_lens, max_mel_len,
                               d_target, p_target, e_target, speakers=None):
    """ming024's FastSpeech2.forward with targets (train mode). Returns (mel, postnet_mel,
    pitch, energy, log_d, src_masks, mel_masks); masks are True at padding."""
    src_masks = lengths_to_mask(src_lens, max_src_len)
    mel_masks = lengths_to_mask(mel_lens, max_mel_len)
    out = model.encoder(texts, src_masks)
    if model.speaker_emb is not None:
        out = out + model.speaker_emb(speakers).unsqueeze(1).expand(-1, max_src_len, -1)
    out, pitch, energy, log_d = variance_adaptor_teacher_forced(
        model.variance_adaptor, out, src_masks, max_mel_len, d_target, p_target, e_target)
    out, mel_masks = model.decoder(out, mel_masks)
    mel = model.mel_linear(out)
    postnet_mel = model.postnet(mel) + mel
    return mel, postnet_mel, pitch, energy, log_d, src_masks, mel_masks
