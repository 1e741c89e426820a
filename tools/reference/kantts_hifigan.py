"""PyTorch reference of KAN-TTS's HiFiGAN Generator (inference only), with or without NSF.

Written from reading modelscope/KAN-TTS at commit 66202d0: kantts/models/hifigan/hifigan.py
(Generator), kantts/models/hifigan/layers.py (CausalConv1d, Conv1d, CausalConvTranspose1d,
ConvTranspose1d, ResidualBlock, SourceModule) and the Model.Generator.params of
kantts/configs/hifigan_*.yaml, which are passed as keyword arguments: Generator(**params).

The module tree mirrors the original so that a KAN-TTS checkpoint's "generator" state dict loads
with strict=True. Parameter names:
  conv_pre.conv1d.{weight_g,weight_v,bias}
  repeat_upsamples.{i}.2.conv1d.*             (0 = nearest Upsample, 1 = activation)
  transpose_upsamples.{i}.1.deconv.*          (0 = activation)
  conv_blocks.{i*R+j}.convs1.{m}.conv1d.*, conv_blocks.{i*R+j}.convs2.{m}.conv1d.*
  conv_post.conv1d.*
  source_module.ffn.0.*                       (NSF only; 1 = Tanh)
  source_downs.{i}.conv1d.*                   (NSF only)
Every conv is wrapped in torch.nn.utils.weight_norm (dim=0, old hook API), so each has
weight_g / weight_v / bias. For the transposed convs the weight is stored [in, out, k], so
weight_g is [in, 1, 1]: the norm is taken per *input* channel.

Behaviours of the original kept on purpose:
  * causal=True: every conv pads (k-1)*dilation zeros on the left only (the padding argument is
    ignored); a transposed conv runs with padding 0 and drops its last k - s output columns.
    causal=False: symmetric padding (k-1)//2 (conv_pre, repeat convs, conv_post),
    d*(k-1)//2 (resblocks) and (k - s)//2 for the transposed convs.
  * each upsampling stage starts with x = sin(x) + x (also the first one, right after conv_pre;
    not before conv_post);
  * a stage sums the repeat branch (nearest upsample by s, activation, conv k=kernel_size) and the
    transposed branch (activation, transposed conv), the latter cut to the repeat branch's length;
  * the R resblocks of a stage are summed and divided by R; a resblock is, per dilation,
    x += conv2(act(conv1_d(act(x)))), with no activation after it;
  * the activation is getattr(torch.nn, nonlinear_activation)(**nonlinear_activation_params)
    (LeakyReLU 0.1 in every config), but the one before conv_post is F.leaky_relu with torch's
    default slope 0.01;
  * the output is tanh(conv_post(.)), [B, out_channels, T * prod(upsample_scales)] for every
    shipped config;
  * `bias` and `use_weight_norm` are accepted and ignored: every conv has a bias and weight norm;
  * repeat_upsample=False builds no repeat branch, but the original's forward still indexes it and
    fails; here forward raises the same way (with a clearer message).

NSF (nsf_params = {nb_harmonics: H, sampling_rate: sr}, hifigan_*nsf*.yaml): the input is
x [B, in_channels + 2, T] = mel, then f0 in Hz (channel -2), then voicing uv in {0, 1} (channel
-1). SourceModule makes the excitation [B, 1, T * hop] (hop = prod(upsample_scales)):
  f0 and uv repeated over each frame's hop samples (the original's nearest F.interpolate);
  F_h[n] = f0[n] * (h + 1) / sr for h = 0..H; theta_h = 2*pi * (cumsum_n(F_h) % 1);
  e = uv * (alpha * sin(theta_h + phase_h) + noise_h) + (1 - uv) * alpha/(3*sigma) * noise_h,
  alpha = 0.1, sigma = 0.003; excitation = tanh(conv1x1_{H+1 -> 1}(e)).
Stage i then adds source_downs[i](excitation) (x = rep + e_i + up[..., :len]): the source down
to the stage's rate u_i = hop / prod(upsample_scales[:i + 1]) by a conv 1 -> C_{i+1} with kernel
2*u_i and stride u_i (causal: 2*u_i - 1 zeros on the left; non-causal: padding u_i//2, whose
length only matches for an even u_i, else the add fails as in the original), or a 1x1 conv
where u_i = 1 (the last stage).
Injectable randomness: forward(x, phase=None, noise=None), phase [B, H + 1] (or [B, H + 1, 1];
harmonic 0's is set to 0 as the original does, on a copy) and noise [B, H + 1, T * hop]. What is
not given is drawn as the original draws it, from torch's global RNG, phase then noise:
Uniform(-pi, pi).sample((B, H + 1, 1)) and Normal(0, sigma).sample((B, H + 1, T * hop)) (both
are drawn when either is missing, so the stream stays aligned with the original's; with the same
seed the reference and the original draw the same numbers).
Differences that do not change values: the original makes the excitation under torch.no_grad();
here it keeps its graph, so the context can be measured through f0, uv and the noise. The
original builds F in torch's default dtype (float32) whatever the model's; here F, the phase and
the noise follow x's dtype (float64 in the fixtures; float32 gives the original's numbers).
Precision note: the cumulative sum is taken before the `% 1`, so in float32 theta loses about
ulp(sum of F) (on CPU torch accumulates a float32 cumsum in double and rounds each output; on
CUDA it scans in float32). The phase at sample n also depends on the f0 of *every* earlier frame
through that sum: a chunk of frames is reproduced only with the running cycle count (sum of f0
before it * hop / sr, per harmonic times h + 1) carried in, which `cycles` allows for.
The original fails with nsf_params when upsample_scales is a tuple (its default; [1] + tuple);
this reference accepts either.
Not implemented: the PQMF path (out_channels > 1) lives outside the Generator and is not covered.
"""
import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.distributions.normal import Normal
from torch.distributions.uniform import Uniform
from torch.nn.utils import weight_norm


def _activation(name, params):
    return getattr(nn, name)(**params)


class CausalConv1d(nn.Module):
    """Conv1d with (k-1)*dilation zeros on the left; parameters under .conv1d."""

    def __init__(self, in_ch, out_ch, kernel_size, stride=1, dilation=1):
        super().__init__()
        self.left = (kernel_size - 1) * dilation
        self.conv1d = weight_norm(nn.Conv1d(in_ch, out_ch, kernel_size, stride,
                                            padding=0, dilation=dilation))

    def forward(self, x):
        return self.conv1d(F.pad(x, (self.left, 0)))


class Conv1d(nn.Module):
    """Plain conv with symmetric padding; parameters under .conv1d."""

    def __init__(self, in_ch, out_ch, kernel_size, stride=1, padding=0, dilation=1):
        super().__init__()
        self.conv1d = weight_norm(nn.Conv1d(in_ch, out_ch, kernel_size, stride,
                                            padding=padding, dilation=dilation))

    def forward(self, x):
        return self.conv1d(x)


class CausalConvTranspose1d(nn.Module):
    """Transposed conv with no padding whose last k - s columns are dropped (T*s remain)."""

    def __init__(self, in_ch, out_ch, kernel_size, stride):
        super().__init__()
        self.trim = kernel_size - stride
        self.deconv = weight_norm(nn.ConvTranspose1d(in_ch, out_ch, kernel_size, stride))

    def forward(self, x):
        y = self.deconv(x)
        # The original slices [:, :, :-trim]; with trim == 0 that is empty, kept as is.
        return y[:, :, :-self.trim]


class ConvTranspose1d(nn.Module):
    """Transposed conv with padding (k - s)//2 (non-causal configs)."""

    def __init__(self, in_ch, out_ch, kernel_size, stride):
        super().__init__()
        self.deconv = weight_norm(nn.ConvTranspose1d(in_ch, out_ch, kernel_size, stride,
                                                     padding=(kernel_size - stride) // 2))

    def forward(self, x):
        return self.deconv(x)


def _conv(causal, in_ch, out_ch, kernel_size, dilation=1):
    """Stride-1 conv of either kind; non-causal padding is dilation*(k-1)//2."""
    if causal:
        return CausalConv1d(in_ch, out_ch, kernel_size, 1, dilation)
    return Conv1d(in_ch, out_ch, kernel_size, 1, int((kernel_size * dilation - dilation) / 2),
                  dilation)


class ResidualBlock(nn.Module):
    """For each dilation d: x = x + conv2(act(conv1_d(act(x)))); conv2 has dilation 1."""

    def __init__(self, channels, kernel_size, dilations, act_name, act_params, causal):
        super().__init__()
        assert kernel_size % 2 == 1
        self.convs1 = nn.ModuleList([_conv(causal, channels, channels, kernel_size, d)
                                     for d in dilations])
        self.convs2 = nn.ModuleList([_conv(causal, channels, channels, kernel_size, 1)
                                     for _ in dilations])
        self.activation = _activation(act_name, act_params)

    def forward(self, x):
        for first, second in zip(self.convs1, self.convs2):
            x = x + second(self.activation(first(self.activation(x))))
        return x


class SourceModule(nn.Module):
    """NSF source: f0 [B, 1, T] (Hz) and uv [B, 1, T] -> excitation [B, 1, T * upsample_ratio].
    Parameters under .ffn.0 (weight-normed 1x1 conv over the H + 1 harmonics; .ffn.1 is Tanh)."""

    def __init__(self, nb_harmonics, upsample_ratio, sampling_rate, alpha=0.1, sigma=0.003):
        super().__init__()
        self.nb_harmonics = nb_harmonics
        self.upsample_ratio = int(upsample_ratio)
        self.sampling_rate = sampling_rate
        self.alpha = alpha
        self.sigma = sigma
        self.ffn = nn.Sequential(weight_norm(nn.Conv1d(nb_harmonics + 1, 1, 1)), nn.Tanh())

    @staticmethod
    def cycles(freq):
        """Cycles run through by each sample: the running sum over time of freq [B, H+1, N]
        (cycles per sample). A chunk made alone adds the count carried in from before it."""
        return torch.cumsum(freq, dim=-1)

    def draw(self, batch, samples):
        """(phase [B, H+1, 1], noise [B, H+1, samples]) drawn as the original draws them."""
        harmonics = self.nb_harmonics + 1
        phase = Uniform(low=-np.pi, high=np.pi).sample(sample_shape=(batch, harmonics, 1))
        noise = Normal(loc=0.0, scale=self.sigma).sample(
            sample_shape=(batch, harmonics, samples))
        return phase, noise

    def forward(self, pitch, uv, phase=None, noise=None):
        batch, harmonics = pitch.shape[0], self.nb_harmonics + 1
        # nearest upsampling by an integer factor: each frame's value over its hop samples
        pitch = pitch.repeat_interleave(self.upsample_ratio, dim=-1)
        uv = uv.repeat_interleave(self.upsample_ratio, dim=-1)
        samples = pitch.shape[-1]
        if phase is None or noise is None:
            drawn_phase, drawn_noise = self.draw(batch, samples)
            phase = drawn_phase if phase is None else phase
            noise = drawn_noise if noise is None else noise
        phase = phase.to(pitch).reshape(batch, harmonics, 1).clone()
        phase[:, 0] = 0  # the fundamental starts at phase 0
        noise = noise.to(pitch)
        if noise.shape != (batch, harmonics, samples):
            raise ValueError(f"noise must be {(batch, harmonics, samples)}, got "
                             f"{tuple(noise.shape)}")
        order = torch.arange(1, harmonics + 1, dtype=pitch.dtype, device=pitch.device)
        freq = pitch * order.view(1, harmonics, 1) / self.sampling_rate
        theta = 2 * np.pi * (self.cycles(freq) % 1)
        voiced = self.alpha * torch.sin(theta + phase) + noise
        unvoiced = self.alpha / 3 / self.sigma * noise
        return self.ffn(voiced * uv + unvoiced * (1 - uv))


class Generator(nn.Module):
    """KAN-TTS HiFiGAN generator: mel [B, in_channels, T] -> audio [B, out_channels, T*hop];
    with nsf_params the input is [B, in_channels + 2, T] (mel, f0 in Hz, uv)."""

    def __init__(self, in_channels=80, out_channels=1, channels=512, kernel_size=7,
                 upsample_scales=(8, 8, 2, 2), upsample_kernal_sizes=(16, 16, 4, 4),
                 resblock_kernel_sizes=(3, 7, 11),
                 resblock_dilations=((1, 3, 5), (1, 3, 5), (1, 3, 5)), repeat_upsample=True,
                 bias=True, causal=True, nonlinear_activation="LeakyReLU",
                 nonlinear_activation_params=None, use_weight_norm=True, nsf_params=None):
        super().__init__()
        del bias, use_weight_norm  # ignored by the original too
        if nonlinear_activation_params is None:
            nonlinear_activation_params = {"negative_slope": 0.1}
        assert kernel_size % 2 == 1
        assert len(upsample_scales) == len(upsample_kernal_sizes)
        assert len(resblock_dilations) == len(resblock_kernel_sizes)
        self.num_upsamples = len(upsample_scales)
        self.num_kernels = len(resblock_kernel_sizes)
        act = (nonlinear_activation, nonlinear_activation_params)
        width = [channels // 2 ** i for i in range(self.num_upsamples + 1)]

        self.conv_pre = _conv(causal, in_channels, width[0], kernel_size)
        self.transpose_upsamples = nn.ModuleList()
        self.repeat_upsamples = nn.ModuleList()
        self.conv_blocks = nn.ModuleList()
        for i, (scale, k) in enumerate(zip(upsample_scales, upsample_kernal_sizes)):
            deconv_cls = CausalConvTranspose1d if causal else ConvTranspose1d
            self.transpose_upsamples.append(nn.Sequential(
                _activation(*act), deconv_cls(width[i], width[i + 1], k, scale)))
            if repeat_upsample:
                self.repeat_upsamples.append(nn.Sequential(
                    nn.Upsample(scale_factor=scale, mode="nearest"), _activation(*act),
                    _conv(causal, width[i], width[i + 1], kernel_size)))
            for rk, dil in zip(resblock_kernel_sizes, resblock_dilations):
                self.conv_blocks.append(ResidualBlock(width[i + 1], rk, dil, *act, causal))
        self.conv_post = _conv(causal, width[-1], out_channels, kernel_size)

        self.nsf = nsf_params is not None
        if self.nsf:
            scales = [int(s) for s in upsample_scales]
            self.source_module = SourceModule(nsf_params["nb_harmonics"], int(np.prod(scales)),
                                              nsf_params["sampling_rate"])
            # the source's samples per index of stage i's output: the product of the later scales
            rates = np.cumprod([1] + scales[::-1][:-1])[::-1]
            self.source_downs = nn.ModuleList()
            for i, rate in enumerate(int(r) for r in rates):
                if rate == 1:
                    self.source_downs.append(Conv1d(1, width[i + 1], 1))
                elif causal:
                    self.source_downs.append(CausalConv1d(1, width[i + 1], 2 * rate, rate))
                else:
                    self.source_downs.append(Conv1d(1, width[i + 1], 2 * rate, rate, rate // 2))

    def forward(self, x, phase=None, noise=None):
        """x: mel [B, in_channels, T], or with NSF [B, in_channels + 2, T] (mel, f0 Hz, uv);
        phase [B, H+1] and noise [B, H+1, T*hop]: the NSF source's randomness (drawn if None)."""
        if len(self.repeat_upsamples) < self.num_upsamples:
            raise IndexError("repeat_upsample=False: KAN-TTS's forward still indexes "
                             "repeat_upsamples and fails")
        if self.nsf:
            excitation = self.source_module(x[:, -2:-1], x[:, -1:], phase, noise)
            x = x[:, :-2]
        elif phase is not None or noise is not None:
            raise ValueError("phase and noise are inputs of an NSF generator only")
        x = self.conv_pre(x)
        for i in range(self.num_upsamples):
            x = torch.sin(x) + x
            rep = self.repeat_upsamples[i](x)
            up = self.transpose_upsamples[i](x)
            if self.nsf:
                x = rep + self.source_downs[i](excitation) + up[:, :, :rep.shape[-1]]
            else:
                x = rep + up[:, :, :rep.shape[-1]]
            blocks = self.conv_blocks[i * self.num_kernels:(i + 1) * self.num_kernels]
            total = None
            for block in blocks:
                y = block(x)
                total = y if total is None else total + y
            x = total / self.num_kernels
        x = F.leaky_relu(x)  # default slope 0.01, as the original
        return torch.tanh(self.conv_post(x))
