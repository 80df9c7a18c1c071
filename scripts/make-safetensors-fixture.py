#!/usr/bin/env python3
"""Writes tests/data/safetensors/small.safetensors, the fixture the C++ safetensors reader is
checked against (tests/unit/server/safetensors_test.cc, "Fixture"), with numpy and json only.

The layout is the format's as documented (huggingface/safetensors README): a little-endian u64
header length N, N bytes of UTF-8 JSON padded with spaces, then the tensors' bytes, little-endian
and row-major, contiguous from offset 0 of the data. It is written independently of the C++
writer, so the test checks the reader against a second implementation of the layout. The
header lists the tensors in name order while their bytes follow TENSORS' order, so a reader
that trusted the header's order would misplace them; the zero-size tensor sits between two
others, sharing its offset with the next one.

The values are small formulas the test repeats; change both together. Usage:
    scripts/make-safetensors-fixture.py [OUT]   (default tests/data/safetensors/small.safetensors)
"""

import json
import pathlib
import struct
import sys

import numpy as np


def bf16(values):
    """bfloat16 as uint16: the upper half of each float32 (every value here is exact)."""
    bits = np.asarray(values, dtype="<f4").view("<u4")
    assert np.all(bits & 0xFFFF == 0), "values must be exact in bfloat16"
    return (bits >> 16).astype("<u2")


# (name, dtype name, shape, little-endian bytes) in the order their bytes are written.
TENSORS = [
    ("embed", "F32", [2, 3], (np.arange(6, dtype="<f4") * 0.5 - 1.0).tobytes()),
    ("norm", "F16", [4], np.array([0.0, 0.5, 1.0, -2.0], dtype="<f2").tobytes()),
    ("empty", "F16", [0, 4], b""),
    ("proj", "BF16", [2, 2], bf16([1.0, -2.0, 0.5, 3.0]).tobytes()),
    ("ids", "I32", [3], np.array([-1, 0, 2**31 - 1], dtype="<i4").tobytes()),
    ("positions", "I64", [2, 1], np.array([-(2**40), 2**62], dtype="<i8").tobytes()),
    ("scale", "F32", [], np.array(2.5, dtype="<f4").tobytes()),
]
METADATA = {"format": "pt", "source": "scripts/make-safetensors-fixture.py"}
ELEMENT_BYTES = {"F32": 4, "F16": 2, "BF16": 2, "I32": 4, "I64": 8}


def main():
    root = pathlib.Path(__file__).resolve().parent.parent
    out = (
        pathlib.Path(sys.argv[1])
        if len(sys.argv) > 1
        else (root / "tests/data/safetensors/small.safetensors")
    )
    header = {"__metadata__": METADATA}
    offset = 0
    for name, dtype, shape, data in TENSORS:
        assert len(data) == int(np.prod(shape, dtype=np.int64)) * ELEMENT_BYTES[dtype], name
        header[name] = {
            "dtype": dtype,
            "shape": shape,
            "data_offsets": [offset, offset + len(data)],
        }
        offset += len(data)
    text = json.dumps(header, sort_keys=True, separators=(",", ":")).encode("utf-8")
    text += b" " * (-len(text) % 8)  # the data starts 8-byte aligned
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for _, _, _, data in TENSORS:
            f.write(data)
    print(f"wrote {out}: {8 + len(text) + offset} bytes, {len(TENSORS)} tensors")


if __name__ == "__main__":
    main()
