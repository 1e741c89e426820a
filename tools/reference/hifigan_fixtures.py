"""Fixtures for the HiFiGAN parity tests (tests/families/fastspeech2/test_hifigan.cpp).

make(out_dir) writes one directory per case:
  config.json            the generator fields of a jik876/hifi-gan config.json
  generator.safetensors  the Generator's state dict, float32 (weight_g/weight_v, or folded .weight)
  io.safetensors         "mel" [2, 80, T] and "audio" [2, 1, T'] as the original Generator returns
  expected.json          hop_length, audio_samples (T') and receptive_field_frames, the last
                         measured from gradients (independently of the C++ formula)

The cases have the shapes of jik876's V1, V2 and V3 with small channel counts, a hop-300
(24 kHz-style) ResBlock1 model, a case whose odd k - u makes T' = T·hop + 1 per stage, and one
with weight norm already folded away.
"""
import json
import os

import numpy as np
import torch
from safetensors_io import save  # tools/ is on sys.path (make_fixtures.py)

from . import hifigan

# Generator fields of jik876's config_v1/v2/v3.json with smaller upsample_initial_channel.
V1 = {"resblock": "1", "upsample_rates": [8, 8, 2, 2], "upsample_kernel_sizes": [16, 16, 4, 4],
      "upsample_initial_channel": 32, "resblock_kernel_sizes": [3, 7, 11],
      "resblock_dilation_sizes": [[1, 3, 5], [1, 3, 5], [1, 3, 5]], "num_mels": 80}
CASES = {
    "v1": (V1, False),
    "v2": (dict(V1, upsample_initial_channel=16), False),
    "v3": ({"resblock": "2", "upsample_rates": [8, 8, 4], "upsample_kernel_sizes": [16, 16, 8],
            "upsample_initial_channel": 32, "resblock_kernel_sizes": [3, 5, 7],
            "resblock_dilation_sizes": [[1, 2], [2, 6], [3, 12]], "num_mels": 80}, False),
    "hop300": (dict(V1, upsample_rates=[5, 5, 4, 3], upsample_kernel_sizes=[11, 11, 8, 7],
                    upsample_initial_channel=32), False),
    # k - u odd (7 - 4, 5 - 2): torch gives T·u + 1 samples per stage. Even resblock kernel 4
    # with even dilations keeps ResBlock2's residual shapes equal, so the original runs it.
    "odd_kernels": ({"resblock": "2", "upsample_rates": [4, 2], "upsample_kernel_sizes": [7, 5],
                     "upsample_initial_channel": 16, "resblock_kernel_sizes": [3, 4],
                     "resblock_dilation_sizes": [[1, 3], [2, 4]], "num_mels": 80}, False),
    "folded": (dict(V1, resblock="2", upsample_rates=[8, 4], upsample_kernel_sizes=[16, 8],
                    upsample_initial_channel=16, resblock_kernel_sizes=[3, 5],
                    resblock_dilation_sizes=[[1, 3], [1, 2]]), True),
}
BATCH, FRAMES = 2, 20


def _randomize(model, generator):
    """Random v and g (so folding g·v/‖v‖ matters) and biases; each filter's norm is g ~ 0.5..1.5,
    which keeps activations O(1) and the output away from tanh saturation."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("weight_v"):
                p.copy_(torch.randn(p.shape, generator=generator))
            elif name.endswith("weight_g"):
                p.copy_(0.5 + torch.rand(p.shape, generator=generator))
            else:
                p.copy_(0.2 * torch.randn(p.shape, generator=generator))
            p.copy_(p.float())  # the values stored in the fixture are float32


def _receptive_field(model, hop, frames=96):
    """Largest distance in frames between an output sample's frame and a mel frame it depends on,
    from the gradient of one mid-sequence frame's samples."""
    mel = torch.randn(1, 80, frames, dtype=torch.float64, requires_grad=True)
    centre = frames // 2
    model(mel)[0, 0, centre * hop:(centre + 1) * hop].sum().backward()
    used = torch.nonzero(mel.grad[0].abs().sum(0)).flatten()
    assert 0 < used.min() and used.max() < frames - 1, "receptive field wider than the probe"
    return int(max(centre - used.min(), used.max() - centre))


def make_case(case_dir, config, folded, seed):
    """Builds one fixture directory from a generator config."""
    os.makedirs(case_dir, exist_ok=True)
    generator = torch.Generator().manual_seed(seed)
    model = hifigan.Generator(config)
    _randomize(model, generator)
    model = model.double().eval()
    if folded:
        hifigan.fold_weight_norm(model)
    hop = int(np.prod(config["upsample_rates"]))
    mel = (-1.5 + 1.2 * torch.randn(BATCH, 80, FRAMES, generator=generator)).clamp(-8, 2).float()
    with torch.no_grad():
        audio = model(mel.double()).float()
    state = {k: v.float().numpy() for k, v in model.state_dict().items()}
    expected = {"hop_length": hop, "audio_samples": audio.shape[-1],
                "receptive_field_frames": _receptive_field(model, hop)}

    save(os.path.join(case_dir, "generator.safetensors"), state)
    save(os.path.join(case_dir, "io.safetensors"), {"mel": mel.numpy(), "audio": audio.numpy()})
    for name, value in (("config.json", config), ("expected.json", expected)):
        with open(os.path.join(case_dir, name), "w") as f:
            json.dump(value, f, indent=2)
            f.write("\n")
    print(f"{case_dir}: audio {tuple(audio.shape)}, |audio| max {audio.abs().max():.3f} "
          f"std {audio.std():.3f}, receptive field {expected['receptive_field_frames']} frames")


def make(out_dir):
    """Writes every case under out_dir/<name>/."""
    for seed, (name, (config, folded)) in enumerate(sorted(CASES.items())):
        make_case(os.path.join(out_dir, name), config, folded, seed=1234 + seed)
