"""A small dataset in docs/dataset-format.md's layout, for tests and development.

With the real generator (VOXD_DATASET=path to voxd-dataset) it runs that. Without it, it calls
the espeak-ng command line: audio from `espeak-ng -w`, phonemes from `--ipa` split greedily into
symbols of data/symbols/espeak-ipa-en.txt, and durations spread evenly over the voiced tokens
(stress marks and spaces last 0 frames). The fallback's durations are not real alignments; it
only exercises the training code.

    /usr/bin/python3 training/tests/toy_dataset.py OUT_DIR [--count N]
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import wave

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SYMBOLS = os.path.join(REPO, "data", "symbols", "espeak-ipa-en.txt")
HOP = 256
SENTENCES = [
    "The quick brown fox jumps over the lazy dog.",
    "She sells sea shells by the sea shore.",
    "How much wood would a woodchuck chuck?",
    "Peter Piper picked a peck of pickled peppers.",
    "A stitch in time saves nine.",
    "The rain in Spain stays mainly in the plain.",
    "Every good boy deserves fudge.",
    "Bright vixens jump, dozy fowl quack.",
    "We promptly judged antique ivory buckles for the next prize.",
    "Sphinx of black quartz, judge my vow.",
    "Five quacking zephyrs jolt my wax bed.",
    "The five boxing wizards jump quickly.",
]
SILENT = {" ", "ˈ", "ˌ"}


def read_symbols():
    with open(SYMBOLS, encoding="utf-8") as f:
        return [line.rstrip("\n") for line in f]


def tokenize(ipa, symbols):
    """Greedy longest match of eSpeak's IPA against the symbol table; unknown characters go."""
    table = set(symbols)
    longest = max(len(s) for s in symbols)
    tokens, i = [], 0
    text = " ".join(ipa.split())
    while i < len(text):
        for n in range(longest, 0, -1):
            if text[i:i + n] in table:
                tokens.append(text[i:i + n])
                i += n
                break
        else:
            i += 1
    return tokens


def spread(frames, tokens):
    """`frames` spread as evenly as possible over the tokens that are not stress marks/spaces."""
    voiced = [i for i, t in enumerate(tokens) if t not in SILENT]
    durations = [0] * len(tokens)
    for k, i in enumerate(voiced):
        durations[i] = frames * (k + 1) // len(voiced) - frames * k // len(voiced)
    return durations


def espeak_dataset(out, count):
    symbols = read_symbols()
    os.makedirs(os.path.join(out, "wavs"), exist_ok=True)
    lines = []
    for n in range(count):
        text = SENTENCES[n % len(SENTENCES)]
        uid = f"{n:06d}"
        wav = os.path.join("wavs", uid + ".wav")
        speed = str(150 + 15 * (n // len(SENTENCES)))
        subprocess.run(["espeak-ng", "-v", "en-us", "-s", speed, "-w", os.path.join(out, wav),
                        text], check=True)
        ipa = subprocess.run(["espeak-ng", "-v", "en-us", "-s", speed, "-q", "--ipa", text],
                             check=True, capture_output=True, text=True).stdout
        tokens = tokenize(ipa, symbols) + ["."]
        with wave.open(os.path.join(out, wav)) as w:
            samples = w.getnframes()
        frames = samples // HOP
        lines.append({"id": uid, "text": text, "normalized": text, "phonemes": tokens,
                      "ids": [symbols.index(t) for t in tokens],
                      "durations": spread(frames, tokens), "frames": frames,
                      "samples": samples, "wav": wav})
    with open(os.path.join(out, "manifest.jsonl"), "w", encoding="utf-8") as f:
        for line in lines:
            f.write(json.dumps(line, ensure_ascii=False) + "\n")
    with open(os.path.join(out, "info.json"), "w", encoding="utf-8") as f:
        json.dump({"sample_rate": 22050, "hop_length": HOP, "teacher": "espeak-ng en-us",
                   "symbols": SYMBOLS, "count": count}, f)


def make(out, count=12):
    """Writes a `count`-utterance dataset to `out` (replacing it)."""
    shutil.rmtree(out, ignore_errors=True)
    generator = os.environ.get("VOXD_DATASET")
    if generator and os.path.isfile(generator):
        text_file = out + ".txt"
        with open(text_file, "w", encoding="utf-8") as f:
            f.write("\n".join(SENTENCES[n % len(SENTENCES)] for n in range(count)) + "\n")
        subprocess.run([generator, "--corpus", text_file, "--out", out], check=True)
    else:
        espeak_dataset(out, count)
    return out


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out")
    parser.add_argument("--count", type=int, default=12)
    args = parser.parse_args()
    make(args.out, args.count)
    print(f"wrote {args.out}", file=sys.stderr)
