"""PyTorch reference of KAN-TTS's HiFiGAN Generator (inference only, no NSF).

Written from reading modelscope/KAN-TTS at commit 66202d0: kantts/models/hifigan/hifigan.py
(Generator), kantts/models/hifigan/layers.py (CausalConv1d, Conv1d, CausalConvTranspose1d,
ConvTranspose1d, ResidualBlock) and the Model.Generator.params of kantts/configs/hifigan_*.yaml,
which are passed as keyword arguments: Generator(**params).

The module tree mirrors the original so that a KAN-TTS checkpoint's "generator" state dict loads
with strict=True. Parameter names:
  conv_pre.conv1d.{weight_g,weight_v,bias}
  repeat_upsamples.{i}.2.conv1d.*             (0 = nearest Upsample, 1 = activation)
  transpose_upsamples.{i}.1.deconv.*          (0 = activation)
  conv_blocks.{i*R+j}.convs1.{m}.conv1d.*, conv_blocks.{i*R+j}.convs2.{m}.conv1d.*
  conv_post.conv1d.*
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
Not implemented: the NSF source module and source_downs (nsf_params); passing nsf_params raises.
The PQMF path (out_channels > 1) lives outside the Generator and is not covered either.
"""
import torch
import torch.nn.functional as F
from torch import nn
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


class Generator(nn.Module):
    """KAN-TTS HiFiGAN generator: mel [B, in_channels, T] -> audio [B, out_channels, T*hop]."""

    def __init__(self, in_channels=80, out_channels=1, channels=512, kernel_size=7,
                 upsample_scales=(8, 8, 2, 2), upsample_kernal_sizes=(16, 16, 4, 4),
                 resblock_kernel_sizes=(3, 7, 11),
                 resblock_dilations=((1, 3, 5), (1, 3, 5), (1, 3, 5)), repeat_upsample=True,
                 bias=True, causal=True, nonlinear_activation="LeakyReLU",
                 nonlinear_activation_params=None, use_weight_norm=True, nsf_params=None):
        super().__init__()
        del bias, use_weight_norm  # ignored by the original too
        if nsf_params is not None:
            raise NotImplementedError("NSF (nsf_params) is not part of this reference")
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

    def forward(self, mel):
        if len(self.repeat_upsamples) < self.num_upsamples:
            raise IndexError("repeat_upsample=False: KAN-TTS's forward still indexes "
                             "repeat_upsamples and fails")
        x = self.conv_pre(mel)
        for i in range(self.num_upsamples):
            x = torch.sin(x) + x
            rep = self.repeat_upsamples[i](x)
            up = self.transpose_upsamples[i](x)
            x = rep + up[:, :, :rep.shape[-1]]
            blocks = self.conv_blocks[i * self.num_kernels:(i + 1) * self.num_kernels]
            total = None
            for block in blocks:
                y = block(x)
                total = y if total is None else total + y
            x = total / self.num_kernels
        x = F.leaky_relu(x)  # default slope 0.01, as the original
        return torch.tanh(self.conv_post(x))
