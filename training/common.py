"""What both trainers share: options, precision, sharded checkpoints, the step loop's clock."""
import argparse
import contextlib
import os
import random
import shutil
import sys
import time

import torch

TRAINING = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(TRAINING)
sys.path.insert(0, os.path.join(REPO, "tools"))
DEFAULT_CONFIG = os.environ.get("VOXD_TRAIN_CONFIG", os.path.join(TRAINING, "en-demo.yaml"))
SHARD_BYTES = 15 * 1024 * 1024  # every checkpoint file stays under 16 MiB
SAVE_MARGIN_S = 20.0  # --time-limit stops this long before the limit, to checkpoint


def load_config(path):
    import yaml
    if not os.path.isfile(path):
        raise SystemExit(f"error: {path}: no such config file")
    with open(path, encoding="utf-8") as f:
        return yaml.safe_load(f)


# What a config's `voice` section gives when it leaves a field out: the en-demo voice.
VOICE_DEFAULTS = {"name": "en-demo", "language": "en-us", "phonemes": "espeak-ipa",
                  "symbols": "data/symbols/espeak-ipa-en.txt"}


def voice_settings(config):
    """The voice a config trains (its `voice` section over VOICE_DEFAULTS); `symbols` made an
    absolute path (the config gives it relative to the repository)."""
    voice = dict(VOICE_DEFAULTS, **(config.get("voice") or {}))
    voice["symbols"] = os.path.join(REPO, voice["symbols"])
    return voice


def read_symbols(path):
    """A symbol table, one symbol per line (line n is id n)."""
    with open(path, encoding="utf-8") as f:
        return f.read().splitlines()


def parser(description):
    """The options both trainers take."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--data", required=True, help="dataset directory (docs/dataset-format.md)")
    p.add_argument("--ckpt", required=True, help="checkpoint directory (resumed if present)")
    p.add_argument("--config", default=DEFAULT_CONFIG, help="model/training YAML")
    p.add_argument("--steps", type=int, default=10 ** 9, help="stop after this many steps")
    p.add_argument("--time-limit", type=float, default=0, help="seconds; checkpoint and stop "
                   f"{SAVE_MARGIN_S:.0f} s before (0: none)")
    p.add_argument("--save-every", type=int, default=2000, help="checkpoint every N steps")
    p.add_argument("--log-every", type=int, default=100, help="print losses every N steps")
    p.add_argument("--log-seconds", type=float, default=0, help="also print losses when this "
                   "many seconds passed since the last report (0: only every --log-every)")
    p.add_argument("--accum", type=int, default=1, help="gradient accumulation micro-batches")
    p.add_argument("--batch-size", type=int, help="override the config's batch size")
    p.add_argument("--precision", choices=["auto", "fp32", "bf16", "fp16"], default="auto",
                   help="auto: bf16 autocast on CUDA, fp32 on CPU")
    p.add_argument("--device", default="auto", help="auto, cuda or cpu")
    p.add_argument("--no-resume", action="store_true", help="start over even if --ckpt exists")
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--threads", type=int, default=min(4, os.cpu_count() or 1),
                   help="torch CPU threads of this process (default min(4, cores): two "
                   "trainers share the GPU machine's cores; 0: torch's default)")
    p.add_argument("--light", metavar="DIR", help="at every checkpoint also write a light one "
                   "(f16 weights, fewer or no optimizer moments) to DIR; it resumes like a full "
                   "one, with fresh moments where they were dropped")
    p.add_argument("--rewarmup", type=int, default=200, help="after resuming an optimizer "
                   "without moments (light checkpoint), ramp its lr up linearly over N steps")
    return p


def device_of(name):
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise SystemExit("error: --device cuda but torch sees no GPU")
    return torch.device(name)


def cpu_bf16_autocast():
    """Whether this torch's CPU autocast runs the reference models in bfloat16."""
    return int(torch.__version__.split(".")[0]) >= 2


class Precision:
    """Autocast context and loss scaling for --precision on a device."""

    def __init__(self, name, device):
        if name == "auto":
            name = "bf16" if device.type == "cuda" else "fp32"
        if name == "fp16" and device.type != "cuda":
            raise SystemExit("error: --precision fp16 needs CUDA (use bf16 or fp32 on CPU)")
        if name == "bf16" and device.type == "cpu" and not cpu_bf16_autocast():
            raise SystemExit(f"error: --precision bf16 on CPU needs torch >= 2 (its CPU autocast "
                             f"leaves LayerNorm mismatched in {torch.__version__}); use fp32")
        self.name, self.device = name, device
        self.dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(name)
        self.scaler = None
        if name == "fp16":
            self.scaler = torch.cuda.amp.GradScaler()

    def autocast(self):
        if self.dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=self.dtype)

    def backward(self, loss):
        (self.scaler.scale(loss) if self.scaler else loss).backward()

    def step(self, optimizer, parameters, clip=None):
        """Unscales, clips (if `clip`), steps and updates the scale."""
        if self.scaler:
            self.scaler.unscale_(optimizer)
        if clip:
            torch.nn.utils.clip_grad_norm_(parameters, clip)
        if self.scaler:
            self.scaler.step(optimizer)
            self.scaler.update()
        else:
            optimizer.step()


# ---------------------------------------------------------------------------------------------
# Checkpoints: one directory of files part-0.pt, part-1.pt, ..., each < 16 MiB. The state is a
# nested dict; its tensors are spread over the parts, the rest (skeleton) is in part-0.
# Optimizer moments are stored as bfloat16 (optimizer.load_state_dict casts them back to the
# parameters' float32), weights as float32, so a resumed run computes the same next loss.


def _split(obj, tensors):
    if isinstance(obj, torch.Tensor):
        tensors.append(obj.detach().cpu())
        return {"__tensor__": len(tensors) - 1}
    if isinstance(obj, dict):
        return {k: _split(v, tensors) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(_split(v, tensors) for v in obj)
    return obj


def _join(obj, tensors):
    if isinstance(obj, dict):
        if set(obj) == {"__tensor__"}:
            return tensors[obj["__tensor__"]]
        return {k: _join(v, tensors) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(_join(v, tensors) for v in obj)
    return obj


def compact_optimizer(state_dict):
    """An optimizer state dict with its float32 moment tensors as bfloat16."""
    state = {k: {n: (v.to(torch.bfloat16) if v.is_floating_point() and v.dim() > 0 else v)
                 for n, v in s.items()}
             for k, s in state_dict["state"].items()}
    return {"state": state, "param_groups": state_dict["param_groups"]}


def save_checkpoint(directory, state):
    """Writes `state` to `directory` (replacing it) through a temporary directory."""
    tensors = []
    skeleton = _split(state, tensors)
    parts, size = [[]], 0
    for i, t in enumerate(tensors):
        nbytes = t.numel() * t.element_size()
        if parts[-1] and size + nbytes > SHARD_BYTES - 1024 * 1024:
            parts.append([])
            size = 0
        parts[-1].append(i)
        size += nbytes
    tmp = directory.rstrip("/") + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    for n, indices in enumerate(parts):
        payload = {"tensors": {i: tensors[i] for i in indices}}
        if n == 0:
            payload.update(skeleton=skeleton, parts=len(parts))
        torch.save(payload, os.path.join(tmp, f"part-{n}.pt"))
    old = directory.rstrip("/") + ".old"
    shutil.rmtree(old, ignore_errors=True)
    if os.path.isdir(directory):
        os.rename(directory, old)
    os.rename(tmp, directory)
    shutil.rmtree(old, ignore_errors=True)


def _torch_load(path):
    """torch.load of a file save_checkpoint wrote: weights_only where torch can (2.x); torch 1.13's
    weights-only unpickler rejects plain floats, so there it loads normally."""
    if int(torch.__version__.split(".")[0]) >= 2:
        return torch.load(path, map_location="cpu", weights_only=True)
    return torch.load(path, map_location="cpu")


def load_checkpoint(directory):
    """The state saved by save_checkpoint, or None if `directory` holds no checkpoint."""
    first = os.path.join(directory, "part-0.pt")
    if not os.path.isfile(first):
        return None
    head = _torch_load(first)
    tensors = dict(head["tensors"])
    for n in range(1, head["parts"]):
        path = os.path.join(directory, f"part-{n}.pt")
        if not os.path.isfile(path):
            raise SystemExit(f"error: {path}: missing (the checkpoint has {head['parts']} parts)")
        tensors.update(_torch_load(path)["tensors"])
    return _join(head["skeleton"], tensors)


def rng_state(device):
    state = {"python": random.getstate(), "torch": torch.get_rng_state()}
    if device.type == "cuda":
        state["cuda"] = torch.cuda.get_rng_state(device)
    return state


def set_rng_state(state, device):
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    torch.set_rng_state(state["torch"])
    if device.type == "cuda" and "cuda" in state:
        torch.cuda.set_rng_state(state["cuda"], device)


class Clock:
    """Wall time since start; `expired()` once --time-limit minus the save margin is reached."""

    def __init__(self, limit):
        self.start, self.limit = time.time(), limit

    def elapsed(self):
        return time.time() - self.start

    def expired(self):
        return self.limit > 0 and self.elapsed() > self.limit - SAVE_MARGIN_S


def setup_backends(device, args=None, benchmark=True):
    """CPU threads (--threads) and, on CUDA, TF32 and cudnn.benchmark. benchmark=False for
    models whose input shapes change every step: cudnn.benchmark times every convolution
    algorithm again for each new shape (forward and both backwards), hundreds of ms a shape."""
    if args is not None and args.threads > 0:
        torch.set_num_threads(args.threads)
    if device.type == "cuda":
        torch.backends.cudnn.benchmark = benchmark
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True


def log(name, message):
    print(f"[{name}] {message}", flush=True)


def adamw(params, device, **kwargs):
    """AdamW, fused (one kernel per step for all parameters) on CUDA where torch has it."""
    if device.type == "cuda":
        try:
            return torch.optim.AdamW(params, fused=True, **kwargs)
        except (TypeError, RuntimeError):
            pass
    return torch.optim.AdamW(params, **kwargs)


def config_line(device, precision, args, batch):
    return (f"config: batch {batch}x{args.accum}, {precision.name} on {device}, torch "
            f"{torch.__version__}, {torch.get_num_threads()} CPU threads, cudnn.benchmark "
            f"{torch.backends.cudnn.benchmark if device.type == 'cuda' else '-'}, log every "
            f"{args.log_every}, save every {args.save_every}")


# ---------------------------------------------------------------------------------------------
# Light checkpoints: what travels into a cold machine (docs/voices.md). Trainable weights as
# float16 (bfloat16 for a tensor outside float16's range), buffers and frozen tables (position
# encodings, bins, BatchNorm statistics) as they are, and only the optimizer moments the trainer
# keeps; "light": True. load_state_dict casts the weights back to float32. A resumed run is not
# bit-exact (weights rounded, dropped moments start from zero), see Rewarmup.


def light_tensor(t):
    if not t.is_floating_point() or t.dtype != torch.float32:
        return t
    half = t.half()
    if torch.isfinite(half).all() or not torch.isfinite(t).all():
        return half
    return t.bfloat16()


def light_model_state(module):
    """module.state_dict() with the trainable parameters rounded by light_tensor."""
    trainable = {n for n, p in module.named_parameters() if p.requires_grad}
    return {n: (light_tensor(t) if n in trainable else t)
            for n, t in module.state_dict().items()}


class Rewarmup:
    """Linear lr ramp over `steps` optimizer steps for an optimizer resumed without moments
    (Adam's first updates are about lr per weight whatever the gradient, which would shake a
    trained model at the schedule's full lr). Scales the lr only around optimizer.step(), so the
    scheduler's own lr (and its state) are untouched."""

    def __init__(self, optimizer, steps):
        self.optimizer, self.steps, self.done = optimizer, steps, 0

    @contextlib.contextmanager
    def scaled(self):
        if self.done >= self.steps:
            yield
            return
        self.done += 1
        factor = self.done / (self.steps + 1)
        saved = [g["lr"] for g in self.optimizer.param_groups]
        for g in self.optimizer.param_groups:
            g["lr"] = g["lr"] * factor
        try:
            yield
        finally:
            for g, lr in zip(self.optimizer.param_groups, saved):
                g["lr"] = lr


def load_optimizer(optimizer, state, scheduler, rewarmup_steps):
    """Loads `state` into `optimizer` (keeping how it was built: fused/foreach are this machine's
    choice, not the checkpoint's), or, when the checkpoint dropped it (light), keeps the fresh
    optimizer at the scheduler's current lr. Returns the Rewarmup to step with (0 steps when
    the moments were there)."""
    if state is not None:
        kept = [{k: g[k] for k in ("fused", "foreach", "capturable") if k in g}
                for g in optimizer.param_groups]
        optimizer.load_state_dict(state)
        for g, k in zip(optimizer.param_groups, kept):
            g.update(k)
        return Rewarmup(optimizer, 0)
    for g, lr in zip(optimizer.param_groups, scheduler.get_last_lr()):
        g["lr"] = lr
    return Rewarmup(optimizer, rewarmup_steps)
