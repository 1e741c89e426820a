#!/usr/bin/env python3
"""Checks kantts_hifigan.Generator's NSF path against KAN-TTS's own Generator, and the NSF
fixtures' context against chunked vocoding.

For each NSF case of kantts_hifigan_fixtures (and the same shape at the configs' full width,
channels 512 for hifigan_v1_nsf_24k.yaml and 256 for hifigan_noncausal_nsf_v1_16k.yaml), both
generators get one random state dict (strict=True both ways) and one input; the original's
Uniform and Normal in kantts.models.hifigan.layers are replaced by stand-ins whose sample()
returns the reference's phase and noise. Printed, as max abs differences of the audio:
  injected  original vs reference, both float32, same phase and noise
  seeded    original vs reference drawing their own phase and noise after the same manual_seed
  float64   original (float32) vs the reference in float64, as the fixtures' audio is made
Then each NSF fixture written under tests/fixtures/kantts_hifigan is vocoded in chunks of 5
frames with its expected.json context around them (the source's phase carried in from the f0
before the chunk, the noise of the chunk's own samples): with the full context the chunks must
equal the whole, with a third of it they must not.

    /usr/bin/python3 tools/reference/check_kantts_hifigan_nsf.py [--kantts .peer/KAN-TTS]
"""
import argparse
import copy
import json
import os
import sys
import types
from unittest import mock

import torch

TOOLS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ROOT = os.path.dirname(TOOLS)
sys.path.insert(0, TOOLS)

from reference import kantts_hifigan, kantts_hifigan_fixtures as fixtures  # noqa: E402
from safetensors_io import load  # noqa: E402

FULL_CHANNELS = {"nsf_v1_24k": 512, "noncausal_nsf_v1_16k": 256}


def import_original(checkout):
    """KAN-TTS's Generator and its layers module, the package __init__ files skipped and what
    only training needs stubbed (as bench/sambert_serve_bench.py's import_kantts)."""
    def stub(name, **attributes):
        module = types.ModuleType(name)
        module.__dict__.update(attributes)
        sys.modules[name] = module

    class LooseVersion:
        def __init__(self, text):
            self.parts = [int(p) for p in text.split("+")[0].split(".")[:3] if p.isdigit()]

        def __ge__(self, other):
            return self.parts >= other.parts

    try:
        import distutils.version  # noqa: F401
    except ImportError:
        stub("distutils")
        stub("distutils.version", LooseVersion=LooseVersion)
    stub("numba", jit=lambda *a, **k: (lambda f: f), njit=lambda *a, **k: (lambda f: f))
    stub("pytorch_wavelets", DWT1DForward=object)
    for package in ("kantts", "kantts.models", "kantts.utils"):
        stub(package, __path__=[os.path.join(checkout, *package.split("."))])
    stub("kantts.utils.audio_torch", stft=None)
    from kantts.models.hifigan import hifigan, layers
    return hifigan.Generator, layers


def given(value):
    """A stand-in for a torch.distributions class whose sample() returns `value`."""
    class Given:
        def __init__(self, *args, **kwargs):
            pass

        def sample(self, sample_shape=()):
            assert tuple(sample_shape) == tuple(value.shape), (sample_shape, value.shape)
            return value.clone()  # the original zeroes harmonic 0's phase in place
    return Given


def compare(original_cls, layers, params, frames, seed):
    """(injected, seeded, float64) max abs differences of the audio for one shape."""
    generator = torch.Generator().manual_seed(seed)
    reference = kantts_hifigan.Generator(**params)
    fixtures._randomize(reference, generator)
    reference.eval()
    original = original_cls(**copy.deepcopy(params))
    original.load_state_dict(reference.state_dict(), strict=True)
    reference.load_state_dict(original.state_dict(), strict=True)
    original.eval()
    x, phase, noise = fixtures._nsf_inputs(params, 2, frames, generator)
    with torch.no_grad():
        with mock.patch.object(layers, "Uniform", given(phase[:, :, None])), \
                mock.patch.object(layers, "Normal", given(noise)):
            want = original(x)
        injected = (reference(x, phase, noise) - want).abs().max().item()
        torch.manual_seed(seed)
        drawn = original(x)
        torch.manual_seed(seed)
        seeded = (reference(x) - drawn).abs().max().item()
        wide = copy.deepcopy(reference).double()(x.double(), phase.double(), noise.double())
    return injected, seeded, (wide.float() - want).abs().max().item()


def check_chunks(case_dir, chunk=5):
    """(error with the expected context, error with a third of it) of chunked vocoding."""
    with open(os.path.join(case_dir, "config.json")) as f:
        params = json.load(f)["params"]
    with open(os.path.join(case_dir, "expected.json")) as f:
        expected = json.load(f)
    model = kantts_hifigan.Generator(**params)
    model.load_state_dict({k: torch.tensor(v) for k, v in
                           load(os.path.join(case_dir, "generator.safetensors")).items()})
    model.double().eval()
    io = {k: torch.tensor(v, dtype=torch.float64) for k, v in
          load(os.path.join(case_dir, "io.safetensors")).items()}
    x, phase, noise = io["mel"], io["phase"], io["noise"]
    hop, frames = expected["hop_length"], x.shape[-1]
    harmonics = torch.arange(1, phase.shape[1] + 1, dtype=torch.float64).view(1, -1, 1)

    def vocode(first, end):
        before = x[:, -2:-1, :first].sum(-1, keepdim=True) * hop * harmonics / \
            params["nsf_params"]["sampling_rate"]
        model.source_module.cycles = lambda freq: torch.cumsum(freq, -1) + before
        try:
            return model(x[..., first:end], phase, noise[..., first * hop:end * hop])
        finally:
            del model.source_module.cycles

    with torch.no_grad():
        whole = vocode(0, frames)
        assert (whole.float() - io["audio"].float()).abs().max() == 0

        def error(left, right):
            pieces = []
            for start in range(0, frames, chunk):
                first, end = max(0, start - left), min(frames, start + chunk)
                audio = vocode(first, min(frames, end + right))
                pieces.append(audio[..., (start - first) * hop:(end - first) * hop])
            return (torch.cat(pieces, -1) - whole).abs().max().item()
        left, right = expected["receptive_field_frames"], expected["lookahead_frames"]
        errors = [error(left, right), error(left // 3, right)]
        if right:
            errors.append(error(left, right // 3))
    return errors


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kantts", default=os.path.join(ROOT, ".peer", "KAN-TTS"),
                        help="a KAN-TTS checkout (its kantts/models is enough)")
    parser.add_argument("--fixtures", default=os.path.join(ROOT, "tests", "fixtures",
                                                           "kantts_hifigan"))
    args = parser.parse_args()
    original_cls, layers = import_original(os.path.abspath(args.kantts))
    worst = 0.0
    for name, (params, frames, seed) in fixtures.NSF_CASES.items():
        full = dict(params, channels=FULL_CHANNELS[name])
        for label, shape, count in ((name, params, frames), (f"{name} full", full, 6)):
            injected, seeded, wide = compare(original_cls, layers, shape, count, seed)
            worst = max(worst, injected, seeded)
            print(f"{label:28s} channels {shape['channels']:3d}, {count} frames: injected "
                  f"{injected:.3g}, seeded {seeded:.3g}, float64 {wide:.3g}")
        case_dir = os.path.join(args.fixtures, name)
        if os.path.isdir(case_dir):
            errors = check_chunks(case_dir)
            print(f"{name:28s} chunked: expected context {errors[0]:.3g}, a third of the left "
                  + (f"{errors[1]:.3g}, a third of the lookahead {errors[2]:.3g}"
                     if len(errors) > 2 else f"{errors[1]:.3g}"))
            assert errors[0] <= 1e-9 and min(errors[1:]) > 1e-4, errors
    assert worst <= 1e-5, worst
    print(f"ok: worst float32 difference {worst:.3g}")


if __name__ == "__main__":
    main()
