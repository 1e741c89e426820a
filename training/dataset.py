#!/usr/bin/env python3
"""A voxd training dataset (docs/dataset-format.md) held in memory, on the GPU when there is one.

Features are computed once and cached beside the manifest in `DATASET/cache/`:

| file | what |
|---|---|
| `audio.npy` | int16, every utterance's first `frames · 256` samples, concatenated |
| `mel.npy` | float16 [total frames, 80] log-mel (training/audio.py), concatenated |
| `pitch.npy`, `energy.npy` | float32 [total tokens], phoneme-level F0 (Hz) and energy, raw |
| `stats.json` | ming024's stats.json ([min, max, mean, std]; min/max of normalised values) |
| `key.json` | the manifest's SHA-1 and the feature version the cache was made from |

Once `cache/audio.npy` exists the wavs are no longer read, so a dataset can travel as
`manifest.jsonl`, `info.json` and `cache/audio.npy` alone (`dataset.py pack`), and the other
features are recomputed where it lands.

    /usr/bin/python3 training/dataset.py features DATASET     # build the cache, print stats
    /usr/bin/python3 training/dataset.py pack DATASET OUT      # a copy without wavs
"""
import argparse
import hashlib
import json
import os
import shutil
import sys
import wave

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import audio as features  # noqa: E402

FEATURE_VERSION = 1


class DatasetError(Exception):
    """A one-line reason the dataset cannot be used."""


def _read_manifest(root):
    path = os.path.join(root, "manifest.jsonl")
    if not os.path.isfile(path):
        raise DatasetError(f"{path}: no such file (expected a voxd-dataset directory)")
    with open(path, "rb") as f:
        raw = f.read()
    utterances = []
    for n, line in enumerate(raw.decode("utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            u = json.loads(line)
        except json.JSONDecodeError as e:
            raise DatasetError(f"{path}:{n}: not valid JSON ({e})") from None
        missing = [k for k in ("id", "ids", "durations", "frames", "samples", "wav") if k not in u]
        if missing:
            raise DatasetError(f"{path}:{n}: missing field(s) {', '.join(missing)}")
        if len(u["ids"]) != len(u["durations"]) or sum(u["durations"]) != u["frames"]:
            raise DatasetError(f"{path}:{n}: durations must have one entry per id and sum to "
                               f"frames ({sum(u['durations'])} != {u['frames']})")
        if u["frames"] != u["samples"] // features.HOP or u["frames"] < 2:
            raise DatasetError(f"{path}:{n}: frames must be samples // {features.HOP} and at "
                               "least 2 (the mel's reflect padding needs 385 samples)")
        utterances.append(u)
    if not utterances:
        raise DatasetError(f"{path}: no utterances")
    return utterances, hashlib.sha1(raw).hexdigest()


def _read_wav(path, samples):
    try:
        with wave.open(path, "rb") as w:
            if (w.getframerate(), w.getnchannels(), w.getsampwidth()) != (
                    features.SAMPLE_RATE, 1, 2):
                raise DatasetError(f"{path}: expected mono 16-bit PCM at "
                                   f"{features.SAMPLE_RATE} Hz")
            data = np.frombuffer(w.readframes(w.getnframes()), dtype="<i2")
    except (OSError, wave.Error, EOFError) as e:
        raise DatasetError(f"{path}: cannot read WAV ({e})") from None
    if data.shape[0] < samples:
        raise DatasetError(f"{path}: has {data.shape[0]} samples, manifest says {samples}")
    return data


def _offsets(lengths):
    return np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)


def build_cache(root, utterances, key, device):
    """Computes and writes the feature cache (see the module docstring)."""
    cache = os.path.join(root, "cache")
    os.makedirs(cache, exist_ok=True)
    frames = np.array([u["frames"] for u in utterances])
    audio_path = os.path.join(cache, "audio.npy")
    audio_ok = False
    if os.path.isfile(audio_path):
        audio = np.load(audio_path, mmap_mode="r")
        audio_ok = audio.shape == (int(frames.sum()) * features.HOP,)
    if not audio_ok:
        audio = np.concatenate([
            _read_wav(os.path.join(root, u["wav"]), u["samples"])[:u["frames"] * features.HOP]
            for u in utterances])
        np.save(audio_path, audio)
    extractor = features.MelExtractor(device)
    sample_off = _offsets(frames * features.HOP)
    mels, pitches, energies = [], [], []
    for n, u in enumerate(utterances):
        wav = torch.from_numpy(np.asarray(audio[sample_off[n]:sample_off[n + 1]],
                                          dtype=np.float32) / 32768.0).to(device)
        mel, energy = extractor.mel_and_energy(wav[None])
        f0 = features.interpolate_unvoiced(extractor.f0(wav[None])[0])
        durations = torch.tensor(u["durations"], device=device)
        mels.append(mel[0].T.half().cpu())
        pitches.append(features.phoneme_average(f0, durations).cpu())
        energies.append(features.phoneme_average(energy[0], durations).cpu())
    voiced = torch.cat([torch.tensor(u["durations"]) for u in utterances]) > 0
    pitch, energy = torch.cat(pitches), torch.cat(energies)
    stats = features.stats_json(pitch[voiced], energy[voiced])
    np.save(os.path.join(cache, "mel.npy"), torch.cat(mels).numpy())
    np.save(os.path.join(cache, "pitch.npy"), pitch.numpy())
    np.save(os.path.join(cache, "energy.npy"), energy.numpy())
    with open(os.path.join(cache, "stats.json"), "w", encoding="utf-8") as f:
        json.dump(stats, f, indent=2)
    with open(os.path.join(cache, "key.json"), "w", encoding="utf-8") as f:
        json.dump({"manifest_sha1": key, "version": FEATURE_VERSION}, f)


def _cache_valid(root, key):
    path = os.path.join(root, "cache", "key.json")
    if not os.path.isfile(path):
        return False
    with open(path, encoding="utf-8") as f:
        return json.load(f) == {"manifest_sha1": key, "version": FEATURE_VERSION}


class Dataset:
    """All utterances of a dataset directory as flat tensors on `device`.

    Per utterance u: tokens ids[tok_off[u]:tok_off[u+1]] (with durations, normalised phoneme
    pitch and energy), mel frames mel[mel_off[u]:mel_off[u+1]], audio samples
    audio[mel_off[u]*256:mel_off[u+1]*256]. The last `val` utterances are held out of `train`.
    """

    def __init__(self, root, device="cpu", val=0):
        self.root, self.device = root, torch.device(device)
        utterances, key = _read_manifest(root)
        if not _cache_valid(root, key):
            build_cache(root, utterances, key, self.device)
        cache = os.path.join(root, "cache")
        with open(os.path.join(cache, "stats.json"), encoding="utf-8") as f:
            self.stats = json.load(f)
        self.utterances = utterances
        self.frames = np.array([u["frames"] for u in utterances], dtype=np.int64)
        self.tokens = np.array([len(u["ids"]) for u in utterances], dtype=np.int64)
        self.tok_off, self.mel_off = _offsets(self.tokens), _offsets(self.frames)

        def put(array, dtype):
            return torch.as_tensor(np.asarray(array)).to(self.device, dtype)

        self.ids = put(np.concatenate([u["ids"] for u in utterances]), torch.long)
        self.durations = put(np.concatenate([u["durations"] for u in utterances]), torch.long)
        p_mean, p_std = self.stats["pitch"][2:]
        e_mean, e_std = self.stats["energy"][2:]
        self.pitch = (put(np.load(os.path.join(cache, "pitch.npy")), torch.float32) - p_mean) / p_std
        self.energy = (put(np.load(os.path.join(cache, "energy.npy")), torch.float32) - e_mean) / e_std
        self.mel = put(np.load(os.path.join(cache, "mel.npy")), torch.float32)
        self.audio = put(np.load(os.path.join(cache, "audio.npy")), torch.int16)
        self.tok_off_t = put(self.tok_off, torch.long)
        self.mel_off_t = put(self.mel_off, torch.long)
        n = len(utterances)
        if not 0 <= val < n:
            raise DatasetError(f"{root}: cannot hold out {val} of {n} utterances")
        self.train = list(range(n - val))
        self.val = list(range(n - val, n))

    # FastSpeech2 batches --------------------------------------------------------------------

    def batches(self, batch_size, rng, group=4):
        """One epoch of training batches (lists of utterance indices), ming024's way: shuffle,
        sort each run of batch_size·group by length, cut into batches, shuffle the batches."""
        order = list(self.train)
        rng.shuffle(order)
        out = []
        for start in range(0, len(order), batch_size * group):
            chunk = sorted(order[start:start + batch_size * group], key=lambda u: -self.frames[u])
            out += [chunk[i:i + batch_size] for i in range(0, len(chunk), batch_size)]
        rng.shuffle(out)
        return out

    def _gather(self, flat, offsets, lengths, width):
        """[B, width(, ...)] rows offsets[b] + t of `flat` for t < lengths[b], zero after."""
        steps = torch.arange(width, device=self.device)
        index = offsets[:, None] + steps[None, :]
        valid = steps[None, :] < lengths[:, None]
        rows = flat[index.clamp(max=flat.shape[0] - 1)]
        mask = valid.view(valid.shape + (1,) * (rows.dim() - 2))
        return rows * mask.to(rows.dtype)

    def upload(self, batches):
        """The batches' utterance indices as device tensors, in one host-to-device copy (a copy
        from pageable memory waits for the GPU, so one per epoch rather than one per step)."""
        flat = torch.as_tensor(np.concatenate(batches)).to(self.device)
        return list(torch.split(flat, [len(b) for b in batches]))

    def collate(self, batch, index=None, round_src=1, round_mel=1, max_mel_cap=None):
        """Padded tensors of utterances `batch` (`index`: the same on the device, from upload):
        ids [B, L], src_lens [B], max_src_len, mels [B, T, 80], mel_lens [B], max_mel_len,
        pitch [B, L], energy [B, L], durations [B, L]. The maxima are host ints, rounded up to
        multiples of round_src / round_mel (at most max_mel_cap frames), so that few distinct
        shapes occur (each new shape costs cuDNN plan building and allocator blocks)."""
        max_src, max_mel = int(self.tokens[batch].max()), int(self.frames[batch].max())
        max_src = -(-max_src // round_src) * round_src
        rounded = -(-max_mel // round_mel) * round_mel
        max_mel = rounded if max_mel_cap is None else max(max_mel, min(rounded, max_mel_cap))
        if index is None:
            index = torch.as_tensor(batch).to(self.device)
        src_lens = self.tok_off_t[index + 1] - self.tok_off_t[index]
        mel_lens = self.mel_off_t[index + 1] - self.mel_off_t[index]
        tok0, mel0 = self.tok_off_t[index], self.mel_off_t[index]
        return {
            "ids": self._gather(self.ids, tok0, src_lens, max_src),
            "src_lens": src_lens, "max_src_len": max_src,
            "mels": self._gather(self.mel, mel0, mel_lens, max_mel),
            "mel_lens": mel_lens, "max_mel_len": max_mel,
            "pitch": self._gather(self.pitch, tok0, src_lens, max_src),
            "energy": self._gather(self.energy, tok0, src_lens, max_src),
            "durations": self._gather(self.durations, tok0, src_lens, max_src),
        }

    # HiFi-GAN segments ----------------------------------------------------------------------

    def segment_sampler(self, segment_frames, generator):
        """A function (batch) -> (mel [B, 80, segment_frames], audio [B, segment_frames·256]):
        random frame-aligned segments of random training utterances, sampled on the device."""
        eligible = [u for u in self.train if self.frames[u] >= segment_frames]
        if not eligible:
            raise DatasetError(f"{self.root}: no training utterance has {segment_frames} frames "
                               f"(segment {segment_frames * features.HOP} samples)")
        utts = torch.as_tensor(eligible).to(self.device)
        weights = torch.as_tensor(self.frames[eligible], dtype=torch.float).to(self.device)
        frame_steps = torch.arange(segment_frames, device=self.device)
        sample_steps = torch.arange(segment_frames * features.HOP, device=self.device)

        def sample(batch):
            pick = utts[torch.multinomial(weights, batch, replacement=True, generator=generator)]
            room = (self.mel_off_t[pick + 1] - self.mel_off_t[pick] - segment_frames + 1)
            start = self.mel_off_t[pick] + (torch.rand(batch, device=self.device,
                                                       generator=generator) * room).long()
            mel = self.mel[start[:, None] + frame_steps[None, :]].transpose(1, 2)
            wav = self.audio[start[:, None] * features.HOP + sample_steps[None, :]]
            return mel, wav.float() / 32768.0

        return sample


def pack(root, out):
    """Copies manifest.jsonl, info.json and cache/audio.npy (built if needed) to `out`."""
    Dataset(root, "cuda" if torch.cuda.is_available() else "cpu")
    os.makedirs(os.path.join(out, "cache"), exist_ok=True)
    for name in ("manifest.jsonl", "info.json", os.path.join("cache", "audio.npy")):
        if os.path.isfile(os.path.join(root, name)):
            shutil.copyfile(os.path.join(root, name), os.path.join(out, name))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    f = sub.add_parser("features", help="build the feature cache and print the stats")
    f.add_argument("dataset")
    p = sub.add_parser("pack", help="copy the dataset without wavs (cache/audio.npy instead)")
    p.add_argument("dataset")
    p.add_argument("out")
    args = parser.parse_args()
    try:
        if args.command == "features":
            data = Dataset(args.dataset, "cuda" if torch.cuda.is_available() else "cpu")
            print(f"{len(data.utterances)} utterances, {int(data.frames.sum())} frames "
                  f"({data.frames.sum() * features.HOP / features.SAMPLE_RATE / 60:.1f} min)")
            print(json.dumps(data.stats))
        else:
            pack(args.dataset, args.out)
            print(f"wrote {args.out}")
    except DatasetError as e:
        raise SystemExit(f"error: {e}") from None


if __name__ == "__main__":
    main()
