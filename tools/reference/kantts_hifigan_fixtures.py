"""Fixtures for the KAN-TTS HiFiGAN vocoder parity tests.

make(out_dir) writes one directory per case:
  config.json            {"params": ...}: the Model.Generator.params of a KAN-TTS hifigan_*.yaml,
                         same field names (upsample_kernal_sizes sic) and values, smaller channels
  generator.safetensors  the Generator's state dict, float32, KAN-TTS names, weight norm kept
                         (weight_g / weight_v / bias; transposed convs have weight_g [in, 1, 1])
  io.safetensors         "mel" [2, in_channels, T] and "audio" [2, 1, T * hop] as the original
                         Generator's forward returns it (computed in float64, stored float32)
  expected.json          hop_length (prod of upsample_scales), audio_samples (T * hop),
                         receptive_field_frames and lookahead_frames, both measured from gradients
                         on a longer probe, independently of any formula:
                           receptive_field_frames = max over the output samples of one frame t of
                             t - (earliest mel frame with a nonzero gradient); the first samples of
                             a frame reach one frame further back than its last ones, so this is
                             the left context needed to reproduce a whole frame;
                           lookahead_frames = (latest mel frame with a nonzero gradient) - t,
                             at least 0 (0 for the causal configs).

Cases (Generator params of kantts/configs at 66202d0, channels reduced):
  v1_16k            hifigan_v1_16k.yaml (scales 10,5,2,2, kernels 20,10,4,4, dilations 1,3,5,7)
  v1_24k            hifigan_v1_24k.yaml (scales 8,5,3,2, kernels 16,10,6,4, dilations 1,3,5)
  noncausal_v1_16k  hifigan_noncausal_v1_16k.yaml (causal false, kernels 20,11,4,4: symmetric
                    padding, transposed padding (k - s)//2 with an odd k - s)
"""
import json
import os

import numpy as np
import torch
from safetensors_io import save  # tools/ is on sys.path (make_fixtures.py)

from . import kantts_hifigan

_DIL4 = [[1, 3, 5, 7], [1, 3, 5, 7], [1, 3, 5, 7]]


def _params(channels, scales, kernels, dilations, causal=True, in_channels=80):
    """Field set and order of a hifigan_*.yaml Model.Generator.params block."""
    return {
        "in_channels": in_channels,
        "out_channels": 1,
        "channels": channels,
        "kernel_size": 7,
        "upsample_scales": scales,
        "upsample_kernal_sizes": kernels,
        "resblock_kernel_sizes": [3, 7, 11],
        "resblock_dilations": dilations,
        "bias": True,
        "causal": causal,
        "nonlinear_activation": "LeakyReLU",
        "nonlinear_activation_params": {"negative_slope": 0.1},
        "use_weight_norm": True,
    }


# name -> (params, frames T)
CASES = {
    "v1_16k": (_params(32, [10, 5, 2, 2], [20, 10, 4, 4], _DIL4), 24),
    "v1_24k": (_params(32, [8, 5, 3, 2], [16, 10, 6, 4], [[1, 3, 5]] * 3), 27),
    "noncausal_v1_16k": (_params(32, [10, 5, 2, 2], [20, 11, 4, 4], _DIL4, causal=False), 21),
}
BATCH = 2


def _randomize(model, generator):
    """Random v and g (so folding g*v/||v|| matters) and biases. Each weight-norm group's norm is
    g ~ 0.5..1.5, halved for the resblocks' second convs (the residual adds) and 0.1..0.3 for
    conv_post, which keeps activations O(1) and the output away from tanh saturation."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("weight_v"):
                p.copy_(torch.randn(p.shape, generator=generator))
            elif name.endswith("weight_g"):
                gain = 0.2 if name.startswith("conv_post") else 0.5 if ".convs2." in name else 1.0
                p.copy_(gain * (0.5 + torch.rand(p.shape, generator=generator)))
            else:
                p.copy_(0.2 * torch.randn(p.shape, generator=generator))
            p.copy_(p.float())  # the values stored in the fixture are float32


def measure_context(model, hop, in_channels, frames=128, centre=None):
    """(receptive_field_frames, lookahead_frames) from the gradient of the output samples of one
    mid-sequence frame with respect to the mel (float64, so structural zeros stay exact)."""
    if centre is None:
        centre = frames // 2
    param = next(model.parameters())
    probe = torch.randn(1, in_channels, frames, generator=torch.Generator().manual_seed(7))
    mel = probe.to(param.dtype).requires_grad_(True)
    model(mel)[0, 0, centre * hop:(centre + 1) * hop].sum().backward()
    used = torch.nonzero(mel.grad[0].abs().sum(0)).flatten()
    assert 0 < used.min() and used.max() < frames - 1, "receptive field wider than the probe"
    return int(centre - used.min()), max(0, int(used.max() - centre))


def make_case(case_dir, params, frames, seed):
    """Builds one fixture directory from Generator params."""
    os.makedirs(case_dir, exist_ok=True)
    generator = torch.Generator().manual_seed(seed)
    model = kantts_hifigan.Generator(**params)
    _randomize(model, generator)
    model = model.double().eval()
    hop = int(np.prod(params["upsample_scales"]))
    mel = torch.randn(BATCH, params["in_channels"], frames, generator=generator)
    mel = mel.clamp(-4, 4).float()  # KAN-TTS mels are z-scored per bin
    with torch.no_grad():
        audio = model(mel.double()).float()
    assert audio.shape == (BATCH, 1, frames * hop)
    past, ahead = measure_context(model, hop, params["in_channels"])
    state = {k: v.float().numpy() for k, v in model.state_dict().items()}
    expected = {"hop_length": hop, "audio_samples": audio.shape[-1],
                "receptive_field_frames": past, "lookahead_frames": ahead}

    save(os.path.join(case_dir, "generator.safetensors"), state)
    save(os.path.join(case_dir, "io.safetensors"), {"mel": mel.numpy(), "audio": audio.numpy()})
    for name, value in (("config.json", {"params": params}), ("expected.json", expected)):
        with open(os.path.join(case_dir, name), "w") as f:
            json.dump(value, f, indent=2)
            f.write("\n")
    print(f"{case_dir}: audio {tuple(audio.shape)}, |audio| max {audio.abs().max():.3f} "
          f"std {audio.std():.3f}, context {past} frames back, {ahead} ahead")


def make(out_dir):
    """Writes every case under out_dir/<name>/."""
    for seed, (name, (params, frames)) in enumerate(sorted(CASES.items())):
        make_case(os.path.join(out_dir, name), params, frames, seed=4321 + seed)
