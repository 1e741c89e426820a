"""Audio features for training: HiFi-GAN-convention log-mel, F0, energy, phoneme averaging, stats.

All functions take and return torch tensors and run on whatever device their input is on.

Mel convention (jik876/hifi-gan's meldataset.mel_spectrogram, which voxd's vocoders expect):
22050 Hz, n_fft 1024, hop 256, Hann window 1024, 80 Slaney mel bands from 0 to 8000 Hz, reflect
padding of (n_fft - hop) / 2 on each side and no centring, magnitude sqrt(re² + im² + 1e-9),
log(clamp(mel, 1e-5)). `frames · 256` samples give exactly `frames` frames.
"""
import math

import numpy as np
import torch
import torch.nn.functional as F

SAMPLE_RATE = 22050
N_FFT = 1024
HOP = 256
WIN = 1024
N_MELS = 80
FMIN = 0.0
FMAX = 8000.0
F0_MIN = 60.0
F0_MAX = 600.0
YIN_THRESHOLD = 0.25


def hz_to_mel(f):
    """Slaney's mel scale: linear below 1 kHz (3 mels per 200 Hz), logarithmic above."""
    f = np.asarray(f, dtype=np.float64)
    log_step = math.log(6.4) / 27.0
    return np.where(f < 1000.0, f * 3.0 / 200.0, 15.0 + np.log(np.maximum(f, 1e-10) / 1000.0)
                    / log_step)


def mel_to_hz(m):
    m = np.asarray(m, dtype=np.float64)
    log_step = math.log(6.4) / 27.0
    return np.where(m < 15.0, m * 200.0 / 3.0, 1000.0 * np.exp(log_step * (m - 15.0)))


def mel_filterbank(sr=SAMPLE_RATE, n_fft=N_FFT, n_mels=N_MELS, fmin=FMIN, fmax=FMAX):
    """[n_mels, n_fft // 2 + 1] Slaney-normalised triangular filters (librosa's default)."""
    fft_hz = np.linspace(0.0, sr / 2.0, n_fft // 2 + 1)
    edges = mel_to_hz(np.linspace(hz_to_mel(fmin), hz_to_mel(fmax), n_mels + 2))
    widths = np.diff(edges)
    ramps = edges[:, None] - fft_hz[None, :]
    rising = -ramps[:-2] / widths[:-1, None]
    falling = ramps[2:] / widths[1:, None]
    weights = np.maximum(0.0, np.minimum(rising, falling))
    weights *= (2.0 / (edges[2:] - edges[:-2]))[:, None]
    return torch.from_numpy(weights.astype(np.float32))


class MelExtractor:
    """Computes log-mel, STFT energy and F0 frames of [B, samples] float audio in [-1, 1]."""

    def __init__(self, device="cpu"):
        self.device = torch.device(device)
        self.basis = mel_filterbank().to(self.device)
        self.window = torch.hann_window(WIN).to(self.device)

    def _padded(self, audio):
        pad = (N_FFT - HOP) // 2
        return F.pad(audio.unsqueeze(1), (pad, pad), mode="reflect").squeeze(1)

    def magnitude(self, audio):
        """[B, n_fft/2 + 1, frames] STFT magnitude, frames = samples // hop."""
        spec = torch.stft(self._padded(audio), N_FFT, hop_length=HOP, win_length=WIN,
                          window=self.window, center=False, normalized=False, onesided=True,
                          return_complex=True)
        return torch.sqrt(spec.real.pow(2) + spec.imag.pow(2) + 1e-9)

    def mel(self, audio):
        """[B, 80, frames] log-mel spectrogram."""
        return torch.log(torch.clamp(torch.matmul(self.basis, self.magnitude(audio)), min=1e-5))

    def mel_and_energy(self, audio):
        """([B, 80, frames] log-mel, [B, frames] energy = L2 norm of each frame's magnitude)."""
        mag = self.magnitude(audio)
        mel = torch.log(torch.clamp(torch.matmul(self.basis, mag), min=1e-5))
        return mel, torch.linalg.norm(mag, dim=1)

    def f0(self, audio):
        """[B, frames] F0 in Hz by YIN on each mel frame's 1024-sample window; 0 = unvoiced."""
        frames = self._padded(audio).unfold(-1, WIN, HOP)  # [B, T, WIN]
        tau_min = int(SAMPLE_RATE / F0_MAX)
        tau_max = int(SAMPLE_RATE / F0_MIN)
        width = WIN - tau_max
        # Difference function d(tau) = E(x[0:W]) + E(x[tau:tau+W]) - 2 r(tau), r by FFT.
        n = 2 * WIN
        spec_a = torch.fft.rfft(frames[..., :width], n)
        spec_x = torch.fft.rfft(frames, n)
        corr = torch.fft.irfft(spec_a.conj() * spec_x, n)[..., :tau_max + 1]
        sq = F.pad(frames.pow(2).cumsum(-1), (1, 0))
        energy_shift = sq[..., width:width + tau_max + 1] - sq[..., :tau_max + 1]
        diff = (sq[..., width:width + 1] + energy_shift - 2.0 * corr).clamp(min=0.0)
        # Cumulative mean normalised difference d'(tau) = d(tau) * tau / sum_{j<=tau} d(j).
        taus = torch.arange(tau_max + 1, device=audio.device, dtype=audio.dtype)
        cmnd = diff * taus / diff.cumsum(-1).clamp(min=1e-8)
        cmnd[..., :tau_min] = 2.0
        # First dip below the threshold, then its local minimum (the lowest point within the
        # following tau/4 lags, so the period and not a multiple of it is found).
        below = cmnd < YIN_THRESHOLD
        voiced = below.any(-1)
        first = torch.argmax(below.to(torch.int8), dim=-1, keepdim=True).float()
        window = (taus >= first) & (taus <= first * 1.25)
        best = torch.argmin(torch.where(window, cmnd, torch.full_like(cmnd, 3.0)), dim=-1)
        loud = frames.pow(2).mean(-1) > 1e-6
        inside = best > tau_min  # a dip at the shortest lag is noise (fricatives), not voicing
        return torch.where(voiced & loud & inside, SAMPLE_RATE / best.clamp(min=1).to(audio.dtype),
                           torch.zeros_like(best, dtype=audio.dtype))


def interpolate_unvoiced(f0):
    """[frames] F0 with unvoiced (0) frames linearly interpolated between voiced neighbours and
    the ends held at the first/last voiced value, as ming024's preprocessor does; all-unvoiced
    input stays 0."""
    voiced = torch.nonzero(f0 > 0).squeeze(1)
    if voiced.numel() == 0:
        return f0
    positions = torch.arange(f0.shape[0], device=f0.device, dtype=f0.dtype)
    vx, vy = voiced.to(f0.dtype), f0[voiced]
    right = torch.searchsorted(vx, positions).clamp(1, max(vx.numel() - 1, 1))
    left = right - 1
    if vx.numel() == 1:
        return torch.full_like(f0, vy[0].item())
    x0, x1, y0, y1 = vx[left], vx[right], vy[left], vy[right]
    out = y0 + (y1 - y0) * (positions - x0) / (x1 - x0)
    out = torch.where(positions <= vx[0], vy[0], out)
    return torch.where(positions >= vx[-1], vy[-1], out)


def phoneme_average(values, durations):
    """Mean of frame `values` [frames] over each token's `durations` [tokens] frames. A token of
    0 frames takes the value of the frame where it sits (the next token's first frame), so it
    does not drag the statistics towards 0."""
    ends = durations.cumsum(0)
    starts = ends - durations
    sums = F.pad(values.cumsum(0), (1, 0))
    means = (sums[ends] - sums[starts]) / durations.clamp(min=1).to(values.dtype)
    at = values[starts.clamp(max=values.shape[0] - 1)]
    return torch.where(durations > 0, means, at)


def stats(values):
    """(mean, std) of a 1-D tensor of phoneme-level values."""
    return float(values.mean()), float(values.std())


def stats_json(pitch, energy):
    """ming024's stats.json: {"pitch": [min, max, mean, std], "energy": [...]} where min and max
    are of the normalised values (value - mean) / std."""
    out = {}
    for name, values in (("pitch", pitch), ("energy", energy)):
        mean, std = stats(values)
        norm = (values - mean) / std
        out[name] = [float(norm.min()), float(norm.max()), mean, std]
    return out
