"""PyTorch reference of jik876/hifi-gan's Generator, written from reading its models.py.

Module structure, parameter names and forward pass follow the original so that its state dicts
load unchanged, including its quirks:
  * conv_pre always has 80 input channels (the original hardcodes 80, not h.num_mels);
  * channel counts are upsample_initial_channel // 2**i (floor division);
  * ConvTranspose1d padding is (k - u) // 2, so an odd k - u gives T·u + 1 samples;
  * ResBlock1 reads dilation[0..2] and ResBlock2 dilation[0..1]; further entries are ignored;
  * resblocks are paired with dilations by zip (the shorter list wins);
  * the resblock outputs of a stage are summed, then divided by num_kernels;
  * the final leaky ReLU uses torch's default slope 0.01, not LRELU_SLOPE.
Every conv and transposed conv carries weight norm (torch.nn.utils.weight_norm, dim=0).
"""
import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils import remove_weight_norm, weight_norm

LRELU_SLOPE = 0.1


def get_padding(kernel_size, dilation=1):
    """'Same' padding of a stride-1 dilated conv, truncated as the original's int(x / 2)."""
    return int((kernel_size * dilation - dilation) / 2)


def _conv(channels, kernel_size, dilation):
    return weight_norm(nn.Conv1d(channels, channels, kernel_size, 1, dilation=dilation,
                                 padding=get_padding(kernel_size, dilation)))


class ResBlock1(nn.Module):
    """Per dilation d: x += conv_1(lrelu(conv_d(lrelu(x))))."""

    def __init__(self, channels, kernel_size=3, dilation=(1, 3, 5)):
        super().__init__()
        self.convs1 = nn.ModuleList([_conv(channels, kernel_size, dilation[i]) for i in range(3)])
        self.convs2 = nn.ModuleList([_conv(channels, kernel_size, 1) for _ in range(3)])

    def forward(self, x):
        for c1, c2 in zip(self.convs1, self.convs2):
            xt = c2(F.leaky_relu(c1(F.leaky_relu(x, LRELU_SLOPE)), LRELU_SLOPE))
            x = xt + x
        return x


class ResBlock2(nn.Module):
    """Per dilation d: x += conv_d(lrelu(x))."""

    def __init__(self, channels, kernel_size=3, dilation=(1, 3)):
        super().__init__()
        self.convs = nn.ModuleList([_conv(channels, kernel_size, dilation[i]) for i in range(2)])

    def forward(self, x):
        for c in self.convs:
            x = c(F.leaky_relu(x, LRELU_SLOPE)) + x
        return x


class Generator(nn.Module):
    """Mel [B, 80, T] -> audio [B, 1, T'] in [-1, 1]; T' = T·hop when every k - u is even."""

    def __init__(self, h):
        super().__init__()
        self.num_kernels = len(h["resblock_kernel_sizes"])
        self.num_upsamples = len(h["upsample_rates"])
        c0 = h["upsample_initial_channel"]
        self.conv_pre = weight_norm(nn.Conv1d(80, c0, 7, 1, padding=3))
        resblock = ResBlock1 if h["resblock"] == "1" else ResBlock2
        self.ups = nn.ModuleList()
        for i, (u, k) in enumerate(zip(h["upsample_rates"], h["upsample_kernel_sizes"])):
            self.ups.append(weight_norm(nn.ConvTranspose1d(
                c0 // 2 ** i, c0 // 2 ** (i + 1), k, u, padding=(k - u) // 2)))
        self.resblocks = nn.ModuleList()
        for i in range(len(self.ups)):
            ch = c0 // 2 ** (i + 1)
            for k, d in zip(h["resblock_kernel_sizes"], h["resblock_dilation_sizes"]):
                self.resblocks.append(resblock(ch, k, d))
        self.conv_post = weight_norm(nn.Conv1d(ch, 1, 7, 1, padding=3))

    def forward(self, x):
        x = self.conv_pre(x)
        for i in range(self.num_upsamples):
            x = self.ups[i](F.leaky_relu(x, LRELU_SLOPE))
            xs = None
            for j in range(self.num_kernels):
                y = self.resblocks[i * self.num_kernels + j](x)
                xs = y if xs is None else xs + y
            x = xs / self.num_kernels
        x = F.leaky_relu(x)  # default slope 0.01, as the original
        return torch.tanh(self.conv_post(x))


def fold_weight_norm(model):
    """Replaces weight_g/weight_v by the plain weight in every module (remove_weight_norm)."""
    for module in model.modules():
        if hasattr(module, "weight_g"):
            remove_weight_norm(module)
    return model
