"""ChatTTS's string encodings of speakers, on the standard library and numpy (no torch).

ChatTTS passes speaker vectors around as text: base16384 (each character carries 14 bits, as
fumiama/base16384 defines it) of a raw LZMA2 stream of the vector's float16 bytes. Its speaker
statistics (`spk_stat`, in ChatTTS/config/config.py) are base16384 of float16 bytes without
LZMA: 2·768 values, the per-dimension std first, then the mean.

base16384, as written here from its definition:
  * every 7 bytes (56 bits, read most significant bit first) become 4 characters, each
    U+4E00 + the next 14 bits;
  * a tail of r = len % 7 bytes (1..6) is padded with zero bits to ceil(8r/14) characters
    (1, 2, 2, 3, 3, 4) and followed by the marker character U+3D00 + r.
"""
import lzma

import numpy as np

_BASE = 0x4E00
_TAIL = 0x3D00
_TAIL_CHARS = {1: 1, 2: 2, 3: 2, 4: 3, 5: 3, 6: 4}
# ChatTTS's Speaker._encode/_decode: raw LZMA2 at preset 9 | EXTREME.
LZMA_FILTERS = [{"id": lzma.FILTER_LZMA2, "preset": 9 | lzma.PRESET_EXTREME}]


def b14_encode(data):
    """bytes -> base16384 str."""
    data = bytes(data)
    out = []
    full = len(data) - len(data) % 7
    for i in range(0, full, 7):
        value = int.from_bytes(data[i:i + 7], "big")
        out.extend(chr(_BASE + ((value >> shift) & 0x3FFF)) for shift in (42, 28, 14, 0))
    tail = len(data) - full
    if tail:
        n_chars = _TAIL_CHARS[tail]
        value = int.from_bytes(data[full:], "big") << (14 * n_chars - 8 * tail)
        out.extend(chr(_BASE + ((value >> (14 * (n_chars - 1 - k))) & 0x3FFF))
                   for k in range(n_chars))
        out.append(chr(_TAIL + tail))
    return "".join(out)


def b14_decode(text):
    """base16384 str -> bytes; ValueError on characters outside the alphabet."""
    text = text.strip()
    tail = 0
    if text and _TAIL < ord(text[-1]) <= _TAIL + 6:
        tail = ord(text[-1]) - _TAIL
        text = text[:-1]
    values = []
    for ch in text:
        v = ord(ch) - _BASE
        if not 0 <= v < 0x4000:
            raise ValueError(f"character U+{ord(ch):04X} is not base16384")
        values.append(v)
    n_tail_chars = _TAIL_CHARS[tail] if tail else 0
    if (len(values) - n_tail_chars) % 4 or len(values) < n_tail_chars:
        raise ValueError(f"{len(values)} base16384 characters do not make whole 7-byte groups")
    out = bytearray()
    full = len(values) - n_tail_chars
    for i in range(0, full, 4):
        value = 0
        for v in values[i:i + 4]:
            value = (value << 14) | v
        out += value.to_bytes(7, "big")
    if tail:
        value = 0
        for v in values[full:]:
            value = (value << 14) | v
        value >>= 14 * n_tail_chars - 8 * tail
        out += value.to_bytes(tail, "big")
    return bytes(out)


def encode_spk_emb(vector):
    """A speaker vector (any float array) -> ChatTTS's spk_emb string (float16, LZMA2, b14)."""
    raw = np.asarray(vector, dtype="<f2").tobytes()
    return b14_encode(lzma.compress(raw, format=lzma.FORMAT_RAW, filters=LZMA_FILTERS))


def decode_spk_emb(text):
    """ChatTTS's spk_emb string -> float16 numpy vector."""
    raw = lzma.decompress(b14_decode(text), format=lzma.FORMAT_RAW, filters=LZMA_FILTERS)
    if len(raw) % 2:
        raise ValueError(f"{len(raw)} bytes are not whole float16 values")
    return np.frombuffer(raw, dtype="<f2").astype(np.float16)


def encode_spk_stat(std, mean):
    """(std, mean) float vectors -> the spk_stat string of ChatTTS's config.py."""
    both = np.concatenate([np.asarray(std), np.asarray(mean)]).astype("<f2")
    return b14_encode(both.tobytes())


def decode_spk_stat(text):
    """The spk_stat string -> (std, mean), float16 vectors of equal length."""
    raw = b14_decode(text)
    if len(raw) % 4:
        raise ValueError(f"{len(raw)} bytes are not two equal float16 vectors")
    values = np.frombuffer(raw, dtype="<f2").astype(np.float16)
    half = len(values) // 2
    return values[:half].copy(), values[half:].copy()
