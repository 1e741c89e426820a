"""CPU smoke test of training/: features, both trainers (loss drops, bf16 + accumulation, exact
resume), export to a voice that `voxd synth` accepts.

Data: VOXD_DATASET (voxd-dataset) when set, else the espeak-ng command line (toy_dataset.py).
Engine: VOXD_BIN, else build/src/cli/voxd; the synth check is skipped when neither exists.
Tiny model sizes (TINY below) keep the whole file around a minute or two on 2 cores.
"""
import os
import shutil
import subprocess
import sys
import tempfile
import unittest
import wave

import numpy as np
import torch
import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
TRAINING = os.path.dirname(HERE)
REPO = os.path.dirname(TRAINING)
sys.path.insert(0, TRAINING)
sys.path.insert(0, HERE)

import audio  # noqa: E402
import common  # noqa: E402
import export  # noqa: E402
import toy_dataset  # noqa: E402
import train_fastspeech2  # noqa: E402
import train_hifigan  # noqa: E402

TINY = {
    "fastspeech2": {
        "model": {
            "transformer": {"encoder_layer": 1, "encoder_head": 2, "encoder_hidden": 32,
                            "decoder_layer": 1, "decoder_head": 2, "decoder_hidden": 32,
                            "conv_filter_size": 64, "conv_kernel_size": [9, 1],
                            "encoder_dropout": 0.1, "decoder_dropout": 0.1},
            "variance_predictor": {"filter_size": 32, "kernel_size": 3, "dropout": 0.1},
            "variance_embedding": {"pitch_quantization": "linear",
                                   "energy_quantization": "linear", "n_bins": 256},
            "multi_speaker": False, "max_seq_len": 1000},
        "postnet_dim": 32, "batch_size": 6, "group_size": 2, "lr": 0.003, "warmup_steps": 10,
        "betas": [0.9, 0.98], "eps": 1.0e-9, "weight_decay": 0.0, "grad_clip": 1.0, "val": 1},
    "hifigan": {
        "generator": {"resblock": "1", "upsample_rates": [8, 8, 2, 2],
                      "upsample_kernel_sizes": [16, 16, 4, 4], "upsample_initial_channel": 32,
                      "resblock_kernel_sizes": [3, 7], "resblock_dilation_sizes": [[1, 3, 5],
                                                                                   [1, 3, 5]],
                      "num_mels": 80},
        "mpd_channels": [4, 8, 16, 16, 16], "msd_channels": [8, 8, 16, 16, 16, 16, 16],
        "segment_size": 4096, "batch_size": 4, "lr": 0.001, "betas": [0.8, 0.99],
        "lr_decay": 0.999, "val": 1},
}


def run(trainer_module, data, ckpt, config, *extra):
    """Builds and runs a trainer in-process; returns it (history holds the reports)."""
    args = common.parser("test").parse_args(
        ["--data", data, "--ckpt", ckpt, "--config", config, "--save-every", "1000"] +
        list(extra))
    trainer = trainer_module.Trainer(args)
    trainer.train(common.Clock(0))
    return trainer


def fixed_batch_mel_loss(trainer):
    """The generator's mel L1 on one fixed batch of segments (per-batch training losses vary
    too much with the random segments to show progress in a few dozen steps)."""
    sample = trainer.data.segment_sampler(TINY["hifigan"]["segment_size"] // audio.HOP,
                                          torch.Generator().manual_seed(0))
    mel, wav = sample(8)
    with torch.no_grad():
        y_hat = trainer.generator(mel).squeeze(1)
        return float((trainer.loss_mel.mel(y_hat) - trainer.loss_mel.mel(wav)).abs().mean())


class AudioTest(unittest.TestCase):
    def test_frame_count(self):
        ex = audio.MelExtractor()
        for frames in (2, 7, 100):  # reflect padding needs > 384 samples
            mel, energy = ex.mel_and_energy(torch.zeros(1, frames * audio.HOP))
            self.assertEqual(mel.shape, (1, 80, frames))
            self.assertEqual(energy.shape, (1, frames))
            self.assertEqual(ex.f0(torch.zeros(1, frames * audio.HOP)).shape, (1, frames))

    def test_filterbank_pure_tone(self):
        fb = audio.mel_filterbank()
        self.assertEqual(tuple(fb.shape), (80, 513))
        edges = audio.mel_to_hz(np.linspace(audio.hz_to_mel(0), audio.hz_to_mel(8000), 82))
        ex = audio.MelExtractor()
        t = torch.arange(40 * audio.HOP) / audio.SAMPLE_RATE
        for k in (5, 30, 70):  # a tone at band k's centre peaks in band k
            tone = 0.5 * torch.sin(2 * np.pi * float(edges[k + 1]) * t)
            self.assertEqual(int(ex.mel(tone[None])[0, :, 20].argmax()), k)
        # Slaney scale: 1 kHz is mel 15, linear below.
        self.assertAlmostEqual(float(audio.hz_to_mel(1000.0)), 15.0)
        self.assertAlmostEqual(float(audio.mel_to_hz(audio.hz_to_mel(4321.0))), 4321.0, 3)

    def test_f0_of_a_tone(self):
        t = torch.arange(30 * audio.HOP) / audio.SAMPLE_RATE
        f0 = audio.MelExtractor().f0(0.5 * torch.sin(2 * np.pi * 150.0 * t)[None])[0, 5:-5]
        self.assertTrue(torch.all((f0 - 150).abs() < 3), f0)
        self.assertTrue(torch.equal(audio.interpolate_unvoiced(torch.tensor([0., 100., 0., 200.,
                                                                             0.])),
                                    torch.tensor([100., 100., 150., 200., 200.])))
        self.assertTrue(torch.equal(audio.phoneme_average(torch.arange(6.), torch.tensor(
            [2, 0, 3, 1])), torch.tensor([0.5, 2.0, 3.0, 5.0])))


class TrainingTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        torch.set_num_threads(2)
        cls.tmp = tempfile.mkdtemp(prefix="voxd-training-test-")
        cls.data = toy_dataset.make(os.path.join(cls.tmp, "data"), 12)
        cls.config = os.path.join(cls.tmp, "tiny.yaml")
        with open(cls.config, "w", encoding="utf-8") as f:
            yaml.safe_dump(TINY, f)
        cls.ckpt = os.path.join(cls.tmp, "ckpt")

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def check_resume(self, module, ckpt_name, total, split, loss_index):
        """Trains `total` steps straight, and `split` steps then a resumed run to split + 1; the
        resumed run starts at `split` and its first loss equals the straight run's."""
        straight = run(module, self.data, os.path.join(self.tmp, ckpt_name + "-a"), self.config,
                       "--steps", str(total), "--log-every", "1", "--no-resume")
        part = os.path.join(self.tmp, ckpt_name + "-b")
        run(module, self.data, part, self.config, "--steps", str(split), "--log-every", "1000")
        resumed = run(module, self.data, part, self.config, "--steps", str(split + 1),
                      "--log-every", "1")
        self.assertEqual(resumed.history[0][0], split + 1)
        self.assertAlmostEqual(resumed.history[0][1][loss_index],
                               straight.history[split][1][loss_index], places=4)
        return straight

    def check_precision_and_accum(self, module, ckpt_name, loss_index):
        """One step with --accum 2, in bf16 where this torch's CPU autocast supports it (else
        fp32, and bf16 must be refused with a one-line error)."""
        precision = "bf16" if common.cpu_bf16_autocast() else "fp32"
        if precision == "fp32":
            with self.assertRaises(SystemExit):
                common.Precision("bf16", torch.device("cpu"))
        trainer = run(module, self.data, os.path.join(self.tmp, ckpt_name + "-accum"),
                      self.config, "--steps", "1", "--log-every", "1", "--precision", precision,
                      "--accum", "2")
        self.assertTrue(np.isfinite(trainer.history[-1][1][loss_index]))

    def test_1_fastspeech2(self):
        straight = self.check_resume(train_fastspeech2, "fs2", 40, 20, 0)
        first = np.mean([h[1][0] for h in straight.history[:5]])
        last = np.mean([h[1][0] for h in straight.history[-5:]])
        self.assertLess(last, 0.6 * first, "FastSpeech2 loss did not drop")
        shutil.copytree(os.path.join(self.tmp, "fs2-a"), os.path.join(self.ckpt, "fastspeech2"))
        self.check_precision_and_accum(train_fastspeech2, "fs2", 0)

    def test_2_hifigan(self):
        args = common.parser("test").parse_args(
            ["--data", self.data, "--ckpt", os.path.join(self.ckpt, "hifigan"), "--config",
             self.config, "--steps", "40", "--log-every", "10", "--no-resume"])
        trainer = train_hifigan.Trainer(args)
        before = fixed_batch_mel_loss(trainer)
        trainer.train(common.Clock(0))
        after = fixed_batch_mel_loss(trainer)
        self.assertLess(after, 0.8 * before, "HiFi-GAN mel loss did not drop")
        self.check_resume(train_hifigan, "voc", 4, 3, 3)
        self.check_precision_and_accum(train_hifigan, "voc", 3)

    def test_4_light(self):
        """--light writes a smaller checkpoint (f16 weights, dropped moments) that resumes: the
        step, schedule and weights (to f16 rounding) carry over, the first loss stays close."""
        for module, name, loss_index, dropped in ((train_fastspeech2, "fs2", 0, "optimizer"),
                                                  (train_hifigan, "voc", 3, "optim_d")):
            full = os.path.join(self.tmp, name + "-full")
            light = os.path.join(self.tmp, name + "-light")
            straight = run(module, self.data, full, self.config, "--steps", "4", "--log-every",
                           "1", "--no-resume", "--light", light)
            size = {d: sum(os.path.getsize(os.path.join(d, f)) for f in os.listdir(d))
                    for d in (full, light)}
            self.assertLess(size[light], 0.6 * size[full], size)
            state = common.load_checkpoint(light)
            self.assertTrue(state["light"])
            self.assertIsNone(state[dropped])
            self.assertEqual(state["step"], 4)
            resumed = run(module, self.data, light, self.config, "--steps", "5", "--log-every",
                          "1", "--rewarmup", "3")
            self.assertEqual(resumed.history[0][0], 5)
            self.assertTrue(np.isfinite(resumed.history[0][1][loss_index]))
            lrs = [g["lr"] for o in ([resumed.optimizer] if name == "fs2" else
                                     [resumed.optim_g, resumed.optim_d])
                   for g in o.param_groups]
            ref = [g["lr"] for o in ([straight.optimizer] if name == "fs2" else
                                     [straight.optim_g, straight.optim_d])
                   for g in o.param_groups]
            self.assertTrue(all(r > 0 for r in lrs))
            self.assertEqual(len(lrs), len(ref))

    def test_3_export(self):
        if not os.path.isdir(os.path.join(self.ckpt, "hifigan")):
            self.skipTest("needs the checkpoints of test_1 and test_2")
        voice = os.path.join(self.tmp, "voice")
        fixture = os.path.join(self.tmp, "parity.safetensors")
        export.main(["--ckpt", self.ckpt, "--out", voice, "--fixture", fixture])
        for name in ("config.json", "acoustic.safetensors", "vocoder.safetensors",
                     "symbols.txt"):
            self.assertTrue(os.path.isfile(os.path.join(voice, name)), name)
        voxd = os.environ.get("VOXD_BIN") or os.path.join(REPO, "build", "src", "cli", "voxd")
        if not os.path.isfile(voxd):
            self.skipTest(f"no voxd binary at {voxd} (set VOXD_BIN)")
        wav, mel = os.path.join(self.tmp, "out.wav"), os.path.join(self.tmp, "out.npy")
        subprocess.run([voxd, "synth", "--voice", voice, "--text", "Hello world.",
                        "--out", wav, "--mel-out", mel], check=True)
        frames = np.load(mel).shape[1]
        with wave.open(wav) as w:
            self.assertEqual(w.getnframes(), frames * audio.HOP)
        self.assertGreater(frames, 0)


if __name__ == "__main__":
    unittest.main()
