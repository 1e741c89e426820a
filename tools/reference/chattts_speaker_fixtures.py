#!/usr/bin/env python3
"""Writes tests/fixtures/chattts/speakers.json for the spk_emb tests
(tests/families/chattts/speaker_code_test.cpp):

  "base16384": [{"hex": bytes, "text": their base16384 text}, ...] for byte strings of every
               length 0..21 (every remainder mod 7, with and without full groups) plus the
               README's examples
  "bomb":      the spk_emb-style string of 8 MiB of zeros (a few hundred characters)
  "speakers":  [{"name", "dim", "values": [float16 values as floats], "spk_emb": string}, ...]
               where spk_emb is what ChatTTS's Speaker._encode (ChatTTS/model/speaker.py) makes
               of those values: float16 bytes, lzma.compress(FORMAT_RAW, LZMA2 preset
               9 | PRESET_EXTREME), then pybase16384.encode_to_string. The cases cover every
               remainder of the compressed length mod 7 (so every base16384 tail marker) and
               one 768-value speaker like ChatTTS's.

base16384 comes from pybase16384 when it is importable, else from the base16384 program
(Debian: apt-get install base16384; the same C code pybase16384 wraps), minus its UTF-16 BOM.
--check compares an existing speakers.json with what this machine makes instead of writing.

    python3 tools/reference/chattts_speaker_fixtures.py [--out tests/fixtures/chattts] [--check]
"""
import argparse
import json
import lzma
import os
import random
import struct
import subprocess

try:
    import pybase16384
except ImportError:
    pybase16384 = None

FILTERS = [{"id": lzma.FILTER_LZMA2, "preset": 9 | lzma.PRESET_EXTREME}]


def b14_encode(data):
    if pybase16384 is not None:
        return pybase16384.encode_to_string(data)
    out = subprocess.run(["base16384", "-e", "-", "-"], input=data, capture_output=True,
                         check=True).stdout
    if out.startswith(b"\xfe\xff"):
        out = out[2:]
    return out.decode("utf-16-be")


def half_values(rng, dim, scale):
    """dim float16 values (as Python floats, exact) from a seeded normal distribution."""
    raw = struct.pack(f"<{dim}e", *[rng.gauss(0.0, scale) for _ in range(dim)])
    return list(struct.unpack(f"<{dim}e", raw)), raw


def speakers():
    cases = []
    # Small speakers until every compressed-length remainder mod 7 is covered.
    seen = set()
    rng = random.Random(1234)
    dim = 1
    while len(seen) < 7:
        values, raw = half_values(rng, dim, 0.5)
        packed = lzma.compress(raw, format=lzma.FORMAT_RAW, filters=FILTERS)
        if len(packed) % 7 not in seen:
            seen.add(len(packed) % 7)
            cases.append({"name": f"dim{dim}_rem{len(packed) % 7}", "dim": dim,
                          "values": values, "spk_emb": b14_encode(packed)})
        dim += 1
    # A speaker of ChatTTS's size (gpt.hidden_size 768), values spread like its spk_stat.
    values, raw = half_values(random.Random(768), 768, 2.0)
    packed = lzma.compress(raw, format=lzma.FORMAT_RAW, filters=FILTERS)
    cases.append({"name": "dim768", "dim": 768, "values": values, "spk_emb": b14_encode(packed)})
    # Exact zeros and signed zeros compress to a short stream.
    raw = struct.pack("<8e", 0.0, -0.0, 1.0, -1.0, 65504.0, -65504.0, 6.0e-8, -6.0e-8)
    packed = lzma.compress(raw, format=lzma.FORMAT_RAW, filters=FILTERS)
    cases.append({"name": "extremes", "dim": 8, "values": list(struct.unpack("<8e", raw)),
                  "spk_emb": b14_encode(packed)})
    return cases


def base16384_vectors():
    rng = random.Random(16384)
    vectors = []
    for n in range(22):
        data = bytes(rng.randrange(256) for _ in range(n))
        vectors.append({"hex": data.hex(), "text": b14_encode(data)})
    for data in (b"1234567", b"hello!!", b"\xff" * 7, b"\x00" * 7):
        vectors.append({"hex": data.hex(), "text": b14_encode(data)})
    return vectors


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "..",
                                                      "tests", "fixtures", "chattts"))
    parser.add_argument("--check", action="store_true")
    args = parser.parse_args()
    bomb = lzma.compress(bytes(8 << 20), format=lzma.FORMAT_RAW, filters=FILTERS)
    made = {"base16384": base16384_vectors(), "bomb": b14_encode(bomb), "speakers": speakers()}
    path = os.path.join(args.out, "speakers.json")
    if args.check:
        with open(path, encoding="utf-8") as f:
            stored = json.load(f)
        same = stored == made
        print("speakers.json", "matches" if same else "DIFFERS",
              "(base16384 from", "pybase16384)" if pybase16384 else "the base16384 program)")
        raise SystemExit(0 if same else 1)
    os.makedirs(args.out, exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(made, f, ensure_ascii=False, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
