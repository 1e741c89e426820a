#!/usr/bin/env python3
"""Trains ming024's FastSpeech2 (tools/reference/fastspeech2.py) on a voxd dataset.

Teacher forcing as ming024's train.py: the length regulator and the pitch/energy embeddings use
the dataset's durations and phoneme-level pitch/energy; the losses are ming024's (mel and
postnet mel L1, pitch/energy MSE on normalised values, duration MSE on log(d + 1)), summed.
AdamW with a Noam-style schedule (linear warm-up, then 1/sqrt(step)), gradient clipping at 1.

    /usr/bin/python3 training/train_fastspeech2.py --data DATASET --ckpt CKPT/fastspeech2 \\
        [--time-limit 500] [--steps N] [--accum K] [--precision auto|fp32|bf16|fp16]

Checkpoints: CKPT/fastspeech2/part-*.pt (common.py), resumed when present.
"""
import math
import os
import random
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import common  # noqa: E402
import dataset as datasets  # noqa: E402
from reference import fastspeech2  # noqa: E402

NAME = "fastspeech2"
ROUND_SRC, ROUND_MEL = 8, 32  # batch padding granularity (tokens, frames)


def acoustic_config(model_yaml, stats):
    """The reference model's config (a voxd voice's acoustic section)."""
    return {"model": model_yaml, "stats": stats, "n_mels": 80,
            "pitch_feature_level": "phoneme_level", "energy_feature_level": "phoneme_level"}


def add_dropout(model, p_encoder, p_decoder):
    """ming024's dropout after the attention output projection and the feed-forward block of
    every FFT block (the reference, inference only, has none). Forward hooks, active in train
    mode only, so the module tree and state-dict names stay the original's."""
    def hook(p):
        return lambda module, inputs, output: F.dropout(output, p, module.training)

    for stack, p in ((model.encoder.layer_stack, p_encoder), (model.decoder.layer_stack,
                                                               p_decoder)):
        for block in stack:
            block.slf_attn.fc.register_forward_hook(hook(p))
            block.pos_ffn.w_2.register_forward_hook(hook(p))


def build_model(cfg, stats, n_symbols):
    """The reference FastSpeech2 with ming024's n_symbols + 1 embedding rows, dropout hooked."""
    model = fastspeech2.FastSpeech2(acoustic_config(cfg["model"], stats), n_symbols + 1,
                                    postnet_embedding_dim=cfg["postnet_dim"])
    t = cfg["model"]["transformer"]
    add_dropout(model, t.get("encoder_dropout", 0.2), t.get("decoder_dropout", 0.2))
    return model


def losses(model, batch):
    """ming024's FastSpeech2Loss on one collated batch: (total, [mel, postnet, pitch, energy,
    duration]) as device tensors."""
    mel, postnet, pitch, energy, log_d, src_masks, mel_masks = (
        fastspeech2.fastspeech2_teacher_forced(
            model, batch["ids"], batch["src_lens"], batch["max_src_len"], batch["mel_lens"],
            batch["max_mel_len"], batch["durations"], batch["pitch"], batch["energy"]))
    src_keep = (~src_masks).float()
    mel_keep = (~mel_masks).float().unsqueeze(-1)
    n_src, n_mel = src_keep.sum(), mel_keep.sum() * mel.shape[-1]
    target = batch["mels"]

    def mae(x):
        return ((x.float() - target).abs() * mel_keep).sum() / n_mel

    def mse(x, y):
        return ((x.float() - y).pow(2) * src_keep).sum() / n_src

    parts = [mae(mel), mae(postnet), mse(pitch, batch["pitch"]), mse(energy, batch["energy"]),
             mse(log_d, torch.log(batch["durations"].float() + 1))]
    return sum(parts), parts


def noam(warmup):
    """lr factor at step s (1-based): s / warmup before warm-up ends, sqrt(warmup / s) after."""
    return lambda step: min((step + 1) / warmup, math.sqrt(warmup / (step + 1)))


class Trainer:
    def __init__(self, args):
        self.args = args
        self.device = common.device_of(args.device)
        # Every batch has other lengths: no cudnn.benchmark (it re-times each new shape).
        common.setup_backends(self.device, args, benchmark=False)
        config = common.load_config(args.config)
        self.cfg = config["fastspeech2"]
        self.batch_size = args.batch_size or self.cfg["batch_size"]
        self.data = datasets.Dataset(args.data, self.device, val=self.cfg["val"])
        max_len = self.cfg["model"]["max_seq_len"]
        too_long = [u for u in self.data.train if self.data.frames[u] > max_len]
        self.data.train = [u for u in self.data.train if self.data.frames[u] <= max_len]
        if too_long:
            common.log(NAME, f"skipping {len(too_long)} utterances longer than {max_len} frames")
        self.n_symbols = len(common.read_symbols(common.voice_settings(config)["symbols"]))
        torch.manual_seed(args.seed)
        self.model = build_model(self.cfg, self.data.stats, self.n_symbols).to(self.device)
        self.optimizer = common.adamw(
            self.model.parameters(), self.device,  # the frozen tables get no grad
            lr=self.cfg["lr"], betas=tuple(self.cfg["betas"]), eps=self.cfg["eps"],
            weight_decay=self.cfg["weight_decay"])
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer,
                                                           noam(self.cfg["warmup_steps"]))
        self.precision = common.Precision(args.precision, self.device)
        self.step = 0
        self.history = []  # (step, mean losses) at each report
        self.epoch_batches, self.epoch_indices, self.epoch = None, None, -1
        self.per_epoch = len(self.data.batches(self.batch_size, random.Random(0),
                                               self.cfg["group_size"]))
        self.rewarmup = common.Rewarmup(self.optimizer, 0)
        state = None if args.no_resume else common.load_checkpoint(args.ckpt)
        if state is not None:
            self.model.load_state_dict(state["model"])
            self.scheduler.load_state_dict(state["scheduler"])
            self.rewarmup = common.load_optimizer(self.optimizer, state.get("optimizer"),
                                                  self.scheduler, args.rewarmup)
            self.step = state["step"]
            common.set_rng_state(state["rng"], self.device)
            kind = "light checkpoint (fresh optimizer moments, lr ramp over " \
                   f"{self.rewarmup.steps} steps)" if state.get("light") else "checkpoint"
            common.log(NAME, f"resumed {args.ckpt} at step {self.step} from a {kind}")

    def batch(self, k):
        """Micro-batch number k of the run; epochs are reshuffled from (seed, epoch), so the
        sequence is the same whether or not training was interrupted."""
        per_epoch = self.per_epoch
        epoch = k // per_epoch
        if epoch != self.epoch:
            self.epoch = epoch
            self.epoch_batches = self.data.batches(
                self.batch_size, random.Random(self.args.seed * 100003 + epoch),
                self.cfg["group_size"])
            self.epoch_indices = self.data.upload(self.epoch_batches)
        return self.data.collate(self.epoch_batches[k % per_epoch],
                                 self.epoch_indices[k % per_epoch], ROUND_SRC, ROUND_MEL,
                                 self.cfg["model"]["max_seq_len"])

    def save(self):
        state = {"model": self.model.state_dict(),
                 "optimizer": common.compact_optimizer(self.optimizer.state_dict()),
                 "scheduler": self.scheduler.state_dict(), "step": self.step,
                 "rng": common.rng_state(self.device),
                 "config": self.cfg, "stats": self.data.stats, "n_symbols": self.n_symbols}
        common.save_checkpoint(self.args.ckpt, state)
        if self.args.light:
            # Weights in float16, no optimizer moments (they are half the full checkpoint).
            state.update(model=common.light_model_state(self.model), optimizer=None, light=True)
            common.save_checkpoint(self.args.light, state)

    def train(self, clock):
        args = self.args
        self.model.train()
        sums = torch.zeros(6, device=self.device)
        count, frames, utts, t0, start_step = 0, 0, 0, time.time(), self.step
        common.log(NAME, f"{sum(p.numel() for p in self.model.parameters() if p.requires_grad)}"
                         f" parameters, {len(self.data.train)} training utterances, batch "
                         f"{self.batch_size}x{args.accum}, {self.precision.name} on "
                         f"{self.device}")
        common.log(NAME, common.config_line(self.device, self.precision, args, self.batch_size)
                   + f", optimizer {'fused ' if self.optimizer.defaults.get('fused') else ''}"
                   f"AdamW, padding to {ROUND_SRC} tokens / {ROUND_MEL} frames")
        while self.step < args.steps and not clock.expired():
            self.optimizer.zero_grad(set_to_none=True)
            for micro in range(args.accum):
                batch = self.batch(self.step * args.accum + micro)
                with self.precision.autocast():
                    total, parts = losses(self.model, batch)
                self.precision.backward(total / args.accum)
                sums += torch.stack([total.detach()] + [p.detach() for p in parts]) / args.accum
                frames += batch["max_mel_len"] * len(batch["src_lens"])
                utts += len(batch["src_lens"])
            with self.rewarmup.scaled():
                self.precision.step(self.optimizer, self.model.parameters(),
                                    self.cfg["grad_clip"])
            self.scheduler.step()
            self.step += 1
            count += 1
            if (self.step % args.log_every == 0 or self.step == args.steps
                    or (args.log_seconds and time.time() - t0 >= args.log_seconds)):
                self.report(sums / count, count, utts, frames, time.time() - t0)
                sums.zero_()
                count, frames, utts, t0 = 0, 0, 0, time.time()
            if self.step % args.save_every == 0:
                self.save()
        if count:
            self.report(sums / count, count, utts, frames, time.time() - t0)
        self.save()
        common.log(NAME, f"stopped at step {self.step} ({self.step - start_step} this run, "
                         f"{clock.elapsed():.0f} s); checkpoint {args.ckpt}")

    def report(self, means, steps, utts, frames, seconds):
        m = means.tolist()  # the only device-to-host copy (and sync) of the loop
        self.history.append((self.step, m))
        common.log(NAME, f"step {self.step} loss {m[0]:.4f} mel {m[1]:.4f} postnet {m[2]:.4f} "
                         f"pitch {m[3]:.4f} energy {m[4]:.4f} duration {m[5]:.4f} "
                         f"lr {self.scheduler.get_last_lr()[0]:.2e} "
                         f"{steps / max(seconds, 1e-9):.2f} steps/s "
                         f"{utts / max(seconds, 1e-9):.0f} samples/s "
                         f"{frames / max(seconds, 1e-9):.0f} frames/s")


def main(argv=None):
    args = common.parser(__doc__.split("\n\n")[0]).parse_args(argv)
    clock = common.Clock(args.time_limit)  # set-up time counts against --time-limit too
    try:
        Trainer(args).train(clock)
    except datasets.DatasetError as e:
        raise SystemExit(f"error: {e}") from None


if __name__ == "__main__":
    main()
