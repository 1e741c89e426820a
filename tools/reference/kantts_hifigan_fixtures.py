"""Fixtures for the KAN-TTS HiFiGAN vocoder parity tests.

make(out_dir) writes one directory per case:
  config.json            {"params": ...}: the Model.Generator.params of a KAN-TTS hifigan_*.yaml,
                         same field names (upsample_kernal_sizes sic) and values, smaller channels
  generator.safetensors  the Generator's state dict, float32, KAN-TTS names, weight norm kept
                         (weight_g / weight_v / bias; transposed convs have weight_g [in, 1, 1])
  io.safetensors         "mel" [2, in_channels, T] and "audio" [2, 1, T * hop] as the original
                         Generator's forward returns it (computed in float64, stored float32);
                         NSF cases: "mel" [2, in_channels + 2, T] (channel -2 f0 in Hz, a
                         contour of 80..300 Hz continuous through the unvoiced frames as KAN-TTS's
                         interpolated f0 is; channel -1 uv, 0 or 1), the source's randomness
                         "phase" [2, H + 1] (uniform in [-pi, pi), harmonic 0's 0) and "noise"
                         [2, H + 1, T * hop] (normal, sigma 0.003), and "audio" made with them
  expected.json          hop_length (prod of upsample_scales), audio_samples (T * hop),
                         receptive_field_frames and lookahead_frames, both measured from gradients
                         on a longer probe, independently of any formula:
                           receptive_field_frames = max over the output samples of one frame t of
                             t - (earliest mel frame with a nonzero gradient); the first samples of
                             a frame reach one frame further back than its last ones, so this is
                             the left context needed to reproduce a whole frame;
                           lookahead_frames = (latest mel frame with a nonzero gradient) - t,
                             at least 0 (0 for the causal configs).
                         NSF cases measure both through every input: all channels of "mel" (the
                         mel, f0 and uv) and the noise (its samples counted in their frames). The
                         source's phase sums f0 over the whole utterance, so an output sample
                         depends on the f0 of every earlier frame; that sum is the state a chunk
                         carries in (as voxd's NsfSource does), and the gradient through it is
                         cut at each frame's start: the f0 of frame s counts through the phase
                         increments of frame s's own samples only.

Cases (Generator params of kantts/configs at 66202d0, channels reduced):
  v1_16k            hifigan_v1_16k.yaml (scales 10,5,2,2, kernels 20,10,4,4, dilations 1,3,5,7)
  v1_24k            hifigan_v1_24k.yaml (scales 8,5,3,2, kernels 16,10,6,4, dilations 1,3,5)
  noncausal_v1_16k  hifigan_noncausal_v1_16k.yaml (causal false, kernels 20,11,4,4: symmetric
                    padding, transposed padding (k - s)//2 with an odd k - s)
NSF cases (nsf_params nb_harmonics 7 as the configs; channels 16 and 16 frames, so that the noise,
[2, 8, T * hop], keeps a case near 400 KB):
  nsf_v1_24k            hifigan_v1_nsf_24k.yaml (as v1_24k, sampling_rate 24000; source rates
                        30, 6, 2, 1: causal strided convs with kernels 60, 12, 4, then 1x1)
  noncausal_nsf_v1_16k  hifigan_noncausal_nsf_v1_16k.yaml (as noncausal_v1_16k, sampling_rate
                        16000; source rates 20, 4, 2, 1: padding rate//2, kernels 40, 8, 4, 1)

Regenerate only these: cd tools && /usr/bin/python3 -m reference.kantts_hifigan_fixtures
(tools/make_fixtures.py regenerates every model's fixtures.)
"""
import json
import os

import numpy as np
import torch
from safetensors_io import save  # tools/ is on sys.path (make_fixtures.py)

from . import kantts_hifigan

_DIL4 = [[1, 3, 5, 7], [1, 3, 5, 7], [1, 3, 5, 7]]


def _params(channels, scales, kernels, dilations, causal=True, in_channels=80, nsf=None):
    """Field set and order of a hifigan_*.yaml Model.Generator.params block; nsf =
    (nb_harmonics, sampling_rate) adds nsf_params."""
    params = {
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
    if nsf is not None:
        params["nsf_params"] = {"nb_harmonics": nsf[0], "sampling_rate": nsf[1]}
    return params


# name -> (params, frames T)
CASES = {
    "v1_16k": (_params(32, [10, 5, 2, 2], [20, 10, 4, 4], _DIL4), 24),
    "v1_24k": (_params(32, [8, 5, 3, 2], [16, 10, 6, 4], [[1, 3, 5]] * 3), 27),
    "noncausal_v1_16k": (_params(32, [10, 5, 2, 2], [20, 11, 4, 4], _DIL4, causal=False), 21),
}
# name -> (params, frames T, seed). Seeds apart from CASES' (theirs come from the sorted names);
# picked among 5320..5329 for an output std of 0.2..0.3: with 16 channels the last stage has
# one channel, which some seeds leave nearly silent.
NSF_CASES = {
    "nsf_v1_24k": (_params(16, [8, 5, 3, 2], [16, 10, 6, 4], [[1, 3, 5]] * 3,
                           nsf=(7, 24000)), 16, 5321),
    "noncausal_nsf_v1_16k": (_params(16, [10, 5, 2, 2], [20, 11, 4, 4], _DIL4, causal=False,
                                     nsf=(7, 16000)), 16, 5323),
}
BATCH = 2
SIGMA = 0.003  # SourceModule's noise deviation


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


def f0_track(batch, frames, generator):
    """(f0 [B, 1, T] in Hz, uv [B, 1, T] in {0, 1}): a smooth contour around a per-item base of
    100..200 Hz with some jitter, within 80..300 Hz, and two or three unvoiced runs of 1..4
    frames (f0 stays continuous through them, as KAN-TTS's interpolated frame f0 does)."""
    t = torch.arange(frames, dtype=torch.float64)
    f0 = torch.empty(batch, 1, frames, dtype=torch.float64)
    uv = torch.ones(batch, 1, frames, dtype=torch.float64)
    for b in range(batch):
        base = 100 + 100 * torch.rand((), generator=generator, dtype=torch.float64)
        period = 8 + 16 * torch.rand((), generator=generator, dtype=torch.float64)
        shift = 6.3 * torch.rand((), generator=generator, dtype=torch.float64)
        jitter = 0.03 * torch.randn(frames, generator=generator, dtype=torch.float64)
        f0[b, 0] = (base * 2 ** (0.5 * torch.sin(2 * np.pi * t / period + shift) + jitter))
        for _ in range(2 + int(torch.randint(2, (), generator=generator))):
            start = int(torch.randint(frames, (), generator=generator))
            uv[b, 0, start:start + 1 + int(torch.randint(4, (), generator=generator))] = 0
    return f0.clamp(80, 300), uv


def _nsf_inputs(params, batch, frames, generator):
    """x [B, in_channels + 2, T] (mel, f0, uv), phase [B, H + 1], noise [B, H + 1, T * hop]."""
    harmonics = params["nsf_params"]["nb_harmonics"] + 1
    samples = frames * int(np.prod(params["upsample_scales"]))
    mel = torch.randn(batch, params["in_channels"], frames, generator=generator).clamp(-4, 4)
    f0, uv = f0_track(batch, frames, generator)
    x = torch.cat([mel.double(), f0, uv], dim=1)
    phase = np.pi * (2 * torch.rand(batch, harmonics, generator=generator) - 1)
    phase[:, 0] = 0
    noise = SIGMA * torch.randn(batch, harmonics, samples, generator=generator)
    return x.float(), phase.float(), noise.float()


def measure_nsf_context(model, hop, params, frames=128, centre=None):
    """(receptive_field_frames, lookahead_frames) of an NSF generator as measure_context, from the
    gradient with respect to every channel of its input (mel, f0, uv) and the noise, with the
    source's running phase carried in at each frame's start (module docstring)."""
    if centre is None:
        centre = frames // 2
    dtype = next(model.parameters()).dtype
    x, phase, noise = _nsf_inputs(params, 1, frames, torch.Generator().manual_seed(7))
    x = x.to(dtype).requires_grad_(True)
    noise = noise.to(dtype).requires_grad_(True)
    source = model.source_module

    def carried_cycles(freq):
        total = torch.cumsum(freq, dim=-1)
        own = freq.unflatten(-1, (frames, hop)).cumsum(-1).flatten(-2)  # within each frame
        return (total - own).detach() + own

    source.cycles = carried_cycles
    try:
        model(x, phase.to(dtype), noise)[0, 0, centre * hop:(centre + 1) * hop].sum().backward()
    finally:
        del source.cycles
    reach = x.grad[0].abs().sum(0) + noise.grad[0].abs().sum(0).view(frames, hop).sum(-1)
    used = torch.nonzero(reach).flatten()
    assert 0 < used.min() and used.max() < frames - 1, "receptive field wider than the probe"
    # Uncut, the phase reaches back to the first frame through f0.
    f0 = x.detach().clone().requires_grad_(True)
    audio = model(f0, phase.to(dtype), noise.detach())
    audio[0, 0, centre * hop:(centre + 1) * hop].sum().backward()
    assert f0.grad[0, -2, 0] != 0, "expected the phase to depend on the first frame's f0"
    return int(centre - used.min()), max(0, int(used.max() - centre))


def make_case(case_dir, params, frames, seed):
    """Builds one fixture directory from Generator params."""
    os.makedirs(case_dir, exist_ok=True)
    generator = torch.Generator().manual_seed(seed)
    model = kantts_hifigan.Generator(**params)
    _randomize(model, generator)
    model = model.double().eval()
    hop = int(np.prod(params["upsample_scales"]))
    if params.get("nsf_params") is None:
        mel = torch.randn(BATCH, params["in_channels"], frames, generator=generator)
        mel = mel.clamp(-4, 4).float()  # KAN-TTS mels are z-scored per bin
        with torch.no_grad():
            audio = model(mel.double()).float()
        past, ahead = measure_context(model, hop, params["in_channels"])
        io = {"mel": mel.numpy(), "audio": audio.numpy()}
    else:
        mel, phase, noise = _nsf_inputs(params, BATCH, frames, generator)
        with torch.no_grad():
            audio = model(mel.double(), phase.double(), noise.double()).float()
        past, ahead = measure_nsf_context(model, hop, params)
        io = {"mel": mel.numpy(), "phase": phase.numpy(), "noise": noise.numpy(),
              "audio": audio.numpy()}
    assert audio.shape == (BATCH, 1, frames * hop)
    state = {k: v.float().numpy() for k, v in model.state_dict().items()}
    expected = {"hop_length": hop, "audio_samples": audio.shape[-1],
                "receptive_field_frames": past, "lookahead_frames": ahead}

    save(os.path.join(case_dir, "generator.safetensors"), state)
    save(os.path.join(case_dir, "io.safetensors"), io)
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
    for name, (params, frames, seed) in NSF_CASES.items():
        make_case(os.path.join(out_dir, name), params, frames, seed)


if __name__ == "__main__":
    make(os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                       "tests", "fixtures", "kantts_hifigan")))
