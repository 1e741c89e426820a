#!/usr/bin/env python3
"""Compares a voice's speech (`voxd synth`) with the teacher's on held-out utterances (CPU only).

For each of the dataset's utterances (the last --count of its manifest), voxd speaks the same
symbol ids; both WAVs get training/audio.py's log-mel. Reported per utterance and on average:

- mel L1: mean |teacher − voxd| log-mel over a DTW alignment of the two (frames matched by
  Euclidean log-mel distance);
- MCD (dB): mel-cepstral distortion of cepstra c1..c13 (orthonormal DCT-II of each log-mel frame)
  along the same path, (10 / ln 10) · sqrt(2 · Σ (Δc)²);
- duration ratio: voxd samples / teacher samples;
- F0 RMSE (Hz) and F0 correlation: training/audio.py's YIN F0 of both along the same path, over
  the frames both voice;
- copy-synthesis mel L1: the vocoder alone (`voxd vocode` of the teacher's own log-mel), mean
  |teacher − vocoded| log-mel frame by frame: how much of the distance is the vocoder's.

A PNG (grayscale, teacher above voxd, low frequencies at the bottom) shows the first utterance;
with --png-voice, a third panel below shows another voice speaking the same text (en-demo beside
en-slt, say: its own front end, its own symbols).

    /usr/bin/python3 training/evaluate.py --voice voices/en-demo --data HELDOUT_DATASET \\
        [--count 8] [--png /tmp/en-demo.png [--png-voice voices/OTHER]] [--voxd build/src/cli/voxd]
"""
import argparse
import json
import math
import os
import struct
import subprocess
import sys
import tempfile
import wave
import zlib

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import audio  # noqa: E402
import common  # noqa: E402

N_CEPSTRA = 13


def read_wav(path):
    with wave.open(path) as w:
        if w.getframerate() != audio.SAMPLE_RATE or w.getnchannels() != 1 or w.getsampwidth() != 2:
            raise SystemExit(f"error: {path}: expected mono 16-bit PCM at {audio.SAMPLE_RATE} Hz")
        return np.frombuffer(w.readframes(w.getnframes()), "<i2").astype(np.float32) / 32768


def log_mel(samples, extractor):
    """[frames, 80] log-mel of audio cut to whole hops."""
    n = len(samples) // audio.HOP * audio.HOP
    return extractor.mel(torch.from_numpy(samples[:n])[None])[0].T.numpy().astype(np.float64)


def dtw_path(a, b):
    """The minimum-cost monotonic alignment of frames a [N, D] and b [M, D] as (i, j) pairs."""
    cost = np.sqrt(((a[:, None, :] - b[None, :, :]) ** 2).sum(-1))
    n, m = cost.shape
    total = np.full((n + 1, m + 1), np.inf)
    total[0, 0] = 0.0
    for i in range(1, n + 1):
        row, prev = total[i], total[i - 1]
        for j in range(1, m + 1):
            row[j] = cost[i - 1, j - 1] + min(prev[j - 1], prev[j], row[j - 1])
    path, i, j = [], n, m
    while i > 0 and j > 0:
        path.append((i - 1, j - 1))
        step = np.argmin([total[i - 1, j - 1], total[i - 1, j], total[i, j - 1]])
        i, j = (i - 1, j - 1) if step == 0 else (i - 1, j) if step == 1 else (i, j - 1)
    return path[::-1]


def dct_matrix(n):
    """Orthonormal DCT-II [n, n]."""
    k, x = np.arange(n)[:, None], np.arange(n)[None, :]
    m = np.cos(math.pi * k * (2 * x + 1) / (2 * n)) * math.sqrt(2.0 / n)
    m[0] /= math.sqrt(2.0)
    return m


def f0_track(samples, extractor):
    """[frames] F0 in Hz (0: unvoiced) of audio cut to whole hops, one per log-mel frame."""
    n = len(samples) // audio.HOP * audio.HOP
    return extractor.f0(torch.from_numpy(samples[:n])[None])[0].numpy().astype(np.float64)


def compare(teacher, voxd):
    """(mel L1, MCD dB, DTW path [K, 2]) of two [frames, 80] log-mels along their DTW path."""
    path = np.array(dtw_path(teacher, voxd))
    a, b = teacher[path[:, 0]], voxd[path[:, 1]]
    dct = dct_matrix(a.shape[1])[1:N_CEPSTRA + 1]
    diff = (a - b) @ dct.T
    mcd = 10.0 / math.log(10.0) * np.sqrt(2.0 * (diff ** 2).sum(-1)).mean()
    return float(np.abs(a - b).mean()), float(mcd), path


def compare_f0(teacher, voxd, path):
    """(RMSE Hz, Pearson correlation) of two F0 tracks along `path`, over the pairs of frames
    both voice; (nan, nan) when fewer than two are."""
    a, b = teacher[path[:, 0]], voxd[path[:, 1]]
    voiced = (a > 0) & (b > 0)
    if voiced.sum() < 2:
        return float("nan"), float("nan")
    a, b = a[voiced], b[voiced]
    return float(np.sqrt(((a - b) ** 2).mean())), float(np.corrcoef(a, b)[0, 1])


def write_png(path, image):
    """Writes a uint8 [H, W] array as a grayscale PNG."""
    height, width = image.shape
    raw = b"".join(b"\x00" + image[r].tobytes() for r in range(height))

    def chunk(kind, data):
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    with open(path, "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n")
        f.write(chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)))
        f.write(chunk(b"IDAT", zlib.compress(raw, 9)))
        f.write(chunk(b"IEND", b""))


def spectrogram_picture(*mels):
    """uint8 image: the log-mels one above the other (2 px per band, high bands on top)."""
    width = max(len(mel) for mel in mels)
    lo, hi = -11.5, max(mel.max() for mel in mels)

    def panel(mel):
        padded = np.full((width, mel.shape[1]), lo)
        padded[:len(mel)] = mel
        scaled = np.clip((padded - lo) / (hi - lo), 0, 1) * 255
        return np.repeat(scaled.T[::-1], 2, axis=0)

    gap = np.full((4, width), 255.0)
    parts = []
    for mel in mels:
        parts += [gap, panel(mel)] if parts else [panel(mel)]
    return np.concatenate(parts).astype(np.uint8)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--voice", default=os.path.join(common.REPO, "voices", "en-demo"))
    parser.add_argument("--data", required=True, help="teacher dataset (held-out sentences)")
    parser.add_argument("--count", type=int, default=8, help="last N utterances of the manifest")
    parser.add_argument("--voxd", default=os.path.join(common.REPO, "build", "src", "cli", "voxd"))
    parser.add_argument("--png", help="spectrogram picture of the first utterance")
    parser.add_argument("--png-voice", help="another voice speaking the first utterance's text, "
                                            "as a third panel of --png")
    args = parser.parse_args()
    if not os.path.isfile(args.voxd):
        raise SystemExit(f"error: {args.voxd}: no voxd binary (build it or pass --voxd)")
    manifest = os.path.join(args.data, "manifest.jsonl")
    if not os.path.isfile(manifest):
        raise SystemExit(f"error: {manifest}: no such file")
    with open(manifest, encoding="utf-8") as f:
        utterances = [json.loads(line) for line in f if line.strip()][-args.count:]
    extractor = audio.MelExtractor()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for n, u in enumerate(utterances):
            out = os.path.join(tmp, "out.wav")
            subprocess.run([args.voxd, "synth", "--voice", args.voice, "--ids",
                            " ".join(map(str, u["ids"])), "--out", out], check=True)
            teacher_audio = read_wav(os.path.join(args.data, u["wav"]))
            teacher = log_mel(teacher_audio, extractor)
            synth_audio = read_wav(out)
            voxd = log_mel(synth_audio, extractor)
            l1, mcd, path = compare(teacher, voxd)
            f0_rmse, f0_corr = compare_f0(f0_track(teacher_audio, extractor),
                                          f0_track(synth_audio, extractor), path)
            mel_path = os.path.join(tmp, "teacher.npy")
            np.save(mel_path, teacher.T.astype(np.float32))
            subprocess.run([args.voxd, "vocode", "--voice", args.voice, "--mel", mel_path,
                            "--out", out], check=True)
            vocoded = log_mel(read_wav(out), extractor)
            frames = min(len(teacher), len(vocoded))
            copy_l1 = float(np.abs(teacher[:frames] - vocoded[:frames]).mean())
            rows.append((u["id"], l1, mcd, len(synth_audio) / u["samples"], f0_rmse, f0_corr,
                         copy_l1))
            if n == 0 and args.png:
                panels = [teacher, voxd]
                if args.png_voice:
                    subprocess.run([args.voxd, "synth", "--voice", args.png_voice, "--text",
                                    u["text"], "--out", out], check=True)
                    panels.append(log_mel(read_wav(out), extractor))
                write_png(args.png, spectrogram_picture(*panels))
    print("| id | mel L1 | MCD dB | duration ratio | F0 RMSE Hz | F0 correlation "
          "| copy-synthesis mel L1 |\n|---|---|---|---|---|---|---|")
    for uid, l1, mcd, ratio, f0_rmse, f0_corr, copy_l1 in rows:
        print(f"| {uid} | {l1:.3f} | {mcd:.2f} | {ratio:.3f} | {f0_rmse:.1f} | {f0_corr:.3f} "
              f"| {copy_l1:.3f} |")
    means = np.nanmean([r[1:] for r in rows], axis=0)
    print(f"| mean | {means[0]:.3f} | {means[1]:.2f} | {means[2]:.3f} | {means[3]:.1f} "
          f"| {means[4]:.3f} | {means[5]:.3f} |")


if __name__ == "__main__":
    main()
