#!/usr/bin/env python3
"""Trains jik876's HiFi-GAN generator (tools/reference/hifigan.py) on a voxd dataset's audio.

jik876's recipe (train.py, models.py) with smaller discriminators: random 8192-sample segments
and their ground-truth mel frames; multi-period (periods 2, 3, 5, 7, 11) and multi-scale
discriminators; LSGAN losses, feature matching x2, mel L1 x45 (mel over the full band, as
jik876's fmax_for_loss null); AdamW(0.8, 0.99) for both, exponential lr decay.

    /usr/bin/python3 training/train_hifigan.py --data DATASET --ckpt CKPT/hifigan \\
        [--time-limit 500] [--steps N] [--accum K] [--precision auto|fp32|bf16|fp16]

Checkpoints: CKPT/hifigan/part-*.pt (common.py), resumed when present.
"""
import os
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.utils import spectral_norm, weight_norm

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import audio as features  # noqa: E402
import common  # noqa: E402
import dataset as datasets  # noqa: E402
from reference import hifigan  # noqa: E402

NAME = "hifigan"
LRELU = hifigan.LRELU_SLOPE


class DiscriminatorP(nn.Module):
    """jik876's period discriminator: audio folded to [B, 1, T/p, p], 2-D convs over time."""

    def __init__(self, period, channels):
        super().__init__()
        self.period = period
        dims = [1] + list(channels)
        self.convs = nn.ModuleList([
            weight_norm(nn.Conv2d(dims[i], dims[i + 1], (5, 1), (3 if i < 4 else 1, 1),
                                  padding=(2, 0)))
            for i in range(len(channels))])
        self.conv_post = weight_norm(nn.Conv2d(dims[-1], 1, (3, 1), 1, padding=(1, 0)))

    def forward(self, x):
        b, c, t = x.shape
        if t % self.period:
            x = F.pad(x, (0, self.period - t % self.period), "reflect")
            t = x.shape[-1]
        x = x.view(b, c, t // self.period, self.period)
        fmap = []
        for conv in self.convs:
            x = F.leaky_relu(conv(x), LRELU)
            fmap.append(x)
        x = self.conv_post(x)
        fmap.append(x)
        return torch.flatten(x, 1, -1), fmap


class DiscriminatorS(nn.Module):
    """jik876's scale discriminator: grouped strided 1-D convs (spectral norm on the first)."""

    # (kernel, stride, groups, padding) of jik876's seven convs.
    LAYERS = [(15, 1, 1, 7), (41, 2, 4, 20), (41, 2, 16, 20), (41, 4, 16, 20), (41, 4, 16, 20),
              (41, 1, 16, 20), (5, 1, 1, 2)]

    def __init__(self, channels, use_spectral_norm=False):
        super().__init__()
        norm = spectral_norm if use_spectral_norm else weight_norm
        dims = [1] + list(channels)
        self.convs = nn.ModuleList([
            norm(nn.Conv1d(dims[i], dims[i + 1], k, s, groups=min(g, dims[i]), padding=p))
            for i, (k, s, g, p) in enumerate(self.LAYERS)])
        self.conv_post = norm(nn.Conv1d(dims[-1], 1, 3, 1, padding=1))

    def forward(self, x):
        fmap = []
        for conv in self.convs:
            x = F.leaky_relu(conv(x), LRELU)
            fmap.append(x)
        x = self.conv_post(x)
        fmap.append(x)
        return torch.flatten(x, 1, -1), fmap


class MultiPeriodDiscriminator(nn.Module):
    def __init__(self, channels):
        super().__init__()
        self.discriminators = nn.ModuleList([DiscriminatorP(p, channels)
                                             for p in (2, 3, 5, 7, 11)])

    def forward(self, y):
        """Scores and feature maps of every period discriminator on y [N, 1, T]. The trainer
        passes real and generated audio as one batch (half the kernel launches of a pass each;
        nothing here mixes batch entries)."""
        outs = [d(y) for d in self.discriminators]
        return [o[0] for o in outs], [o[1] for o in outs]


class MultiScaleDiscriminator(nn.Module):
    def __init__(self, channels):
        super().__init__()
        self.discriminators = nn.ModuleList([DiscriminatorS(channels, use_spectral_norm=True),
                                             DiscriminatorS(channels), DiscriminatorS(channels)])
        self.meanpools = nn.ModuleList([nn.AvgPool1d(4, 2, padding=2),
                                        nn.AvgPool1d(4, 2, padding=2)])

    def forward(self, y):
        scores, fmaps = [], []
        for i, d in enumerate(self.discriminators):
            if i:
                y = self.meanpools[i - 1](y)
            score, fmap = d(y)
            scores.append(score)
            fmaps.append(fmap)
        return scores, fmaps


# The losses take the scores / feature maps of a merged batch: real audio in rows [:n], generated
# in rows [n:].

def feature_loss(fmaps, n):
    return 2 * sum(torch.mean(torch.abs(f[:n].detach().float() - f[n:].float()))
                   for d in fmaps for f in d)


def discriminator_loss(scores, n):
    return sum(torch.mean((1 - s[:n].float()) ** 2) + torch.mean(s[n:].float() ** 2)
               for s in scores)


def generator_loss(scores, n):
    return sum(torch.mean((1 - s[n:].float()) ** 2) for s in scores)


class LossMel(features.MelExtractor):
    """jik876's loss mel: the same STFT, filters up to Nyquist (fmax_for_loss null)."""

    def __init__(self, device):
        super().__init__(device)
        self.basis = features.mel_filterbank(fmax=features.SAMPLE_RATE / 2).to(self.device)


class Trainer:
    def __init__(self, args):
        self.args = args
        self.device = common.device_of(args.device)
        common.setup_backends(self.device, args, benchmark=True)  # fixed shapes
        self.cfg = common.load_config(args.config)["hifigan"]
        self.batch_size = args.batch_size or self.cfg["batch_size"]
        if self.cfg["segment_size"] % features.HOP:
            raise SystemExit(f"error: segment_size must be a multiple of {features.HOP}")
        self.data = datasets.Dataset(args.data, self.device, val=self.cfg["val"])
        torch.manual_seed(args.seed)
        self.generator = hifigan.Generator(self.cfg["generator"]).to(self.device)
        self.mpd = MultiPeriodDiscriminator(self.cfg["mpd_channels"]).to(self.device)
        self.msd = MultiScaleDiscriminator(self.cfg["msd_channels"]).to(self.device)
        betas = tuple(self.cfg["betas"])
        self.optim_g = common.adamw(self.generator.parameters(), self.device,
                                    lr=self.cfg["lr"], betas=betas)
        self.d_params = list(self.mpd.parameters()) + list(self.msd.parameters())
        self.optim_d = common.adamw(self.d_params, self.device, lr=self.cfg["lr"], betas=betas)
        gamma = self.cfg["lr_decay"] ** (1 / 1000)
        self.sched_g = torch.optim.lr_scheduler.ExponentialLR(self.optim_g, gamma)
        self.sched_d = torch.optim.lr_scheduler.ExponentialLR(self.optim_d, gamma)
        self.precision = common.Precision(args.precision, self.device)
        self.precision_d = common.Precision(args.precision, self.device)
        self.loss_mel = LossMel(self.device)
        self.sampler_rng = torch.Generator(device=self.device)
        self.sampler_rng.manual_seed(args.seed)
        self.sample = self.data.segment_sampler(self.cfg["segment_size"] // features.HOP,
                                                self.sampler_rng)
        self.step = 0
        self.history = []  # (step, mean losses) at each report
        self.rewarmup_g = common.Rewarmup(self.optim_g, 0)
        self.rewarmup_d = common.Rewarmup(self.optim_d, 0)
        state = None if args.no_resume else common.load_checkpoint(args.ckpt)
        if state is not None:
            for name in ("generator", "mpd", "msd", "sched_g", "sched_d"):
                getattr(self, name).load_state_dict(state[name])
            self.rewarmup_g = common.load_optimizer(self.optim_g, state.get("optim_g"),
                                                    self.sched_g, args.rewarmup)
            self.rewarmup_d = common.load_optimizer(self.optim_d, state.get("optim_d"),
                                                    self.sched_d, args.rewarmup)
            self.step = state["step"]
            self.sampler_rng.set_state(state["sampler_rng"])
            common.set_rng_state(state["rng"], self.device)
            kind = "light checkpoint (fresh discriminator moments, lr ramp over " \
                   f"{self.rewarmup_d.steps} steps)" if state.get("light") else "checkpoint"
            common.log(NAME, f"resumed {args.ckpt} at step {self.step} from a {kind}")

    def save(self):
        state = {name: getattr(self, name).state_dict()
                 for name in ("generator", "mpd", "msd", "sched_g", "sched_d")}
        state.update(optim_g=common.compact_optimizer(self.optim_g.state_dict()),
                     optim_d=common.compact_optimizer(self.optim_d.state_dict()),
                     step=self.step, sampler_rng=self.sampler_rng.get_state(),
                     rng=common.rng_state(self.device), config=self.cfg)
        common.save_checkpoint(self.args.ckpt, state)
        if self.args.light:
            # Weights in float16, the generator's moments (bfloat16) kept, the discriminators'
            # dropped (they are 3/4 of the moments, and a discriminator re-adapts quickly).
            state.update({name: common.light_model_state(getattr(self, name))
                          for name in ("generator", "mpd", "msd")})
            state.update(optim_d=None, light=True)
            common.save_checkpoint(self.args.light, state)

    def train_step(self):
        """One optimizer step of D then G over --accum micro-batches; returns the losses
        [disc, gen_adv, feature, mel] as a device tensor. Real and generated audio go through
        the discriminators as one batch of 2B; during G's pass the discriminators' weights are
        frozen (jik876 computes their gradients there and throws them away)."""
        accum, p, n = self.args.accum, self.precision, self.batch_size
        micro = []
        self.optim_d.zero_grad(set_to_none=True)
        d_sum = torch.zeros((), device=self.device)
        for _ in range(accum):
            mel, wav = self.sample(n)
            y = wav.unsqueeze(1)
            with p.autocast():
                y_hat = self.generator(mel)
            y_hat = y_hat.float()
            both = torch.cat([y, y_hat.detach()])
            with p.autocast():
                loss_d = (discriminator_loss(self.mpd(both)[0], n) +
                          discriminator_loss(self.msd(both)[0], n)) / accum
            self.precision_d.backward(loss_d)
            d_sum += loss_d.detach()
            micro.append((y, y_hat))
        with self.rewarmup_d.scaled():
            self.precision_d.step(self.optim_d, None)
        self.optim_g.zero_grad(set_to_none=True)
        g_sums = torch.zeros(3, device=self.device)
        for q in self.d_params:
            q.requires_grad_(False)
        for y, y_hat in micro:
            mels = self.loss_mel.mel(torch.cat([y, y_hat]).squeeze(1))
            loss_mel = F.l1_loss(mels[n:], mels[:n]) * 45
            both = torch.cat([y, y_hat])
            with p.autocast():
                scores_f, fmaps_f = self.mpd(both)
                scores_s, fmaps_s = self.msd(both)
                adv = generator_loss(scores_f, n) + generator_loss(scores_s, n)
                fm = feature_loss(fmaps_f, n) + feature_loss(fmaps_s, n)
            p.backward((adv + fm + loss_mel) / accum)
            g_sums += torch.stack([adv.detach(), fm.detach(), loss_mel.detach()]) / accum
        for q in self.d_params:
            q.requires_grad_(True)
        with self.rewarmup_g.scaled():
            p.step(self.optim_g, None)
        self.sched_g.step()
        self.sched_d.step()
        return torch.cat([d_sum.view(1), g_sums])

    def train(self, clock):
        args = self.args
        for m in (self.generator, self.mpd, self.msd):
            m.train()
        n_g = sum(x.numel() for x in self.generator.parameters())
        n_d = sum(x.numel() for m in (self.mpd, self.msd) for x in m.parameters())
        common.log(NAME, f"generator {n_g} parameters, discriminators {n_d}, "
                         f"{len(self.data.train)} training utterances, batch "
                         f"{self.batch_size}x{args.accum}, {self.precision.name} on "
                         f"{self.device}")
        common.log(NAME, common.config_line(self.device, self.precision, args, self.batch_size)
                   + f", optimizer {'fused ' if self.optim_g.defaults.get('fused') else ''}"
                   f"AdamW, segment {self.cfg['segment_size']} samples, real+generated audio "
                   f"in one discriminator batch of {2 * self.batch_size}")
        sums, count, t0, start_step = torch.zeros(4, device=self.device), 0, time.time(), self.step
        while self.step < args.steps and not clock.expired():
            sums += self.train_step()
            self.step += 1
            count += 1
            if (self.step % args.log_every == 0 or self.step == args.steps
                    or (args.log_seconds and time.time() - t0 >= args.log_seconds)):
                self.report(sums / count, count, time.time() - t0)
                sums.zero_()
                count, t0 = 0, time.time()
            if self.step % args.save_every == 0:
                self.save()
        if count:
            self.report(sums / count, count, time.time() - t0)
        self.save()
        common.log(NAME, f"stopped at step {self.step} ({self.step - start_step} this run, "
                         f"{clock.elapsed():.0f} s); checkpoint {args.ckpt}")

    def report(self, means, steps, seconds):
        m = means.tolist()
        self.history.append((self.step, m))
        seconds_of_audio = (steps * self.args.accum * self.batch_size * self.cfg["segment_size"]
                            / features.SAMPLE_RATE)
        common.log(NAME, f"step {self.step} disc {m[0]:.4f} gen {m[1]:.4f} fm {m[2]:.4f} "
                         f"mel {m[3]:.4f} lr {self.sched_g.get_last_lr()[0]:.2e} "
                         f"{steps / max(seconds, 1e-9):.2f} steps/s "
                         f"{steps * self.args.accum * self.batch_size / max(seconds, 1e-9):.0f}"
                         f" samples/s {seconds_of_audio / max(seconds, 1e-9):.0f} audio-s/s")


def main(argv=None):
    args = common.parser(__doc__.split("\n\n")[0]).parse_args(argv)
    clock = common.Clock(args.time_limit)  # set-up time counts against --time-limit too
    try:
        Trainer(args).train(clock)
    except datasets.DatasetError as e:
        raise SystemExit(f"error: {e}") from None


if __name__ == "__main__":
    main()
