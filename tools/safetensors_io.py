"""Minimal safetensors reader/writer on numpy, so voxd's tools need no extra package.

Format: 8-byte little-endian header length, a JSON header mapping each tensor name to
{"dtype", "shape", "data_offsets": [begin, end]} (offsets relative to the end of the header),
then the raw little-endian data.
"""
import json
import struct

import numpy as np

_DTYPES = {
    "F32": np.float32,
    "F16": np.float16,
    "I32": np.int32,
    "I64": np.int64,
}


def save(path, tensors, metadata=None):
    """Writes a dict of name -> numpy array (float32, float16, int32, int64) to `path`."""
    header = {}
    blobs = []
    offset = 0
    for name in sorted(tensors):
        array = np.asarray(tensors[name])
        if not array.flags["C_CONTIGUOUS"]:
            array = np.ascontiguousarray(array)
        dtype = next((k for k, v in _DTYPES.items() if array.dtype == v), None)
        if dtype is None:
            raise ValueError(f"{name}: unsupported dtype {array.dtype}")
        data = array.astype(array.dtype.newbyteorder("<"), copy=False).tobytes()
        header[name] = {"dtype": dtype, "shape": list(array.shape),
                        "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    encoded = json.dumps(header, separators=(",", ":")).encode()
    encoded += b" " * (-len(encoded) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(encoded)))
        f.write(encoded)
        for blob in blobs:
            f.write(blob)


def load(path):
    """Reads a safetensors file into a dict of name -> numpy array."""
    with open(path, "rb") as f:
        raw = f.read()
    (length,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + length])
    base = 8 + length
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        dtype = np.dtype(_DTYPES[info["dtype"]]).newbyteorder("<")
        out[name] = np.frombuffer(raw[base + begin:base + end], dtype=dtype).reshape(info["shape"])
    return out
