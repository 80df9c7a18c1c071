"""Reading and writing safetensors files one tensor at a time.

Reading: the ``safetensors`` package opens every file first (its parser checks the header: the
JSON, the dtypes, that the data offsets tile the data exactly), and gives each tensor's dtype and
shape; the bytes are then read from the file by the header's ``data_offsets``, a slice at a
time, because the package's NumPy path cannot return bf16 (NumPy has no bfloat16) and because a
slice at a time is what keeps a 2 GB embedding table from being read whole. Plain reads rather
than a memory map: the pages of a map count in the process's RSS until the kernel reclaims
them, so mapping a 140 GB checkpoint would show (and, under a memory limit, be charged) its
size; a read buffer is one chunk.

Writing: the package's ``save_file`` takes every tensor at once, in memory. ``StreamingWriter``
writes the header first — from the names, dtypes and shapes alone — then each tensor's bytes in
order, in bounded chunks, so a converter's peak memory is one chunk, not the checkpoint.
"""

from __future__ import annotations

import json
import math
import os
import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .. import dtypes as _dtypes

# safetensors dtype names -> (client dtype name, bytes per element).
SAFETENSORS_DTYPES = {
    "F32": ("f32", 4),
    "F16": ("f16", 2),
    "BF16": ("bf16", 2),
    "F64": ("f64", 8),
    "I32": ("i32", 4),
    "I64": ("i64", 8),
}
_BY_CLIENT = {client: name for name, (client, _) in SAFETENSORS_DTYPES.items()}
# Bytes converted or copied at a time: bounds the converter's memory whatever a tensor's size.
CHUNK_BYTES = 64 << 20
# safetensors' own bound on the header (a larger one is refused as corrupt).
MAX_HEADER_BYTES = 100 << 20


class SafetensorsError(ValueError):
    """A safetensors file that cannot be read, naming the file (and the tensor)."""


@dataclass(frozen=True)
class TensorInfo:
    name: str
    dtype: str  # the safetensors name: "F32", "BF16"...
    shape: tuple
    path: Path
    begin: int  # absolute byte offset in the file
    end: int

    @property
    def nbytes(self) -> int:
        return self.end - self.begin


def safetensors_dtype(dtype: str) -> str:
    """The safetensors name of a client dtype: "bf16" -> "BF16"."""
    return _BY_CLIENT[_dtypes.normalize(dtype)]


def read_index(path: Path) -> dict:
    """Every tensor of one file, by name, checked by the safetensors package's own parser."""
    path = Path(path)
    try:
        from safetensors import safe_open
    except ImportError as error:  # pragma: no cover - an install without the dependency
        raise ImportError(
            "einsummable.models needs the safetensors package (pip install safetensors)"
        ) from error
    try:
        with safe_open(str(path), framework="numpy") as f:
            keys = list(f.keys())
            checked = {}
            for key in keys:
                piece = f.get_slice(key)
                checked[key] = (piece.get_dtype(), tuple(piece.get_shape()))
    except Exception as error:  # safetensors raises its own SafetensorError, or OSError
        raise SafetensorsError(f"{path}: not a valid safetensors file: {error}") from None
    with open(path, "rb") as f:
        (length,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(length))
    start = 8 + length
    tensors = {}
    for key, (dtype, shape) in checked.items():
        entry = header[key]
        if dtype not in SAFETENSORS_DTYPES:
            raise SafetensorsError(
                f"{path}: tensor '{key}' is {dtype}; supported: {', '.join(SAFETENSORS_DTYPES)}"
            )
        begin, end = entry["data_offsets"]
        tensors[key] = TensorInfo(key, dtype, shape, path, start + begin, start + end)
    return tensors


def read_directory(directory: Path) -> dict:
    """Every tensor of every ``*.safetensors`` file of a directory (a sharded checkpoint is
    several), by name; a tensor in two files is an error naming both."""
    directory = Path(directory)
    files = sorted(directory.glob("*.safetensors"))
    if not files:
        raise SafetensorsError(f"{directory}: no *.safetensors file")
    tensors: dict = {}
    for path in files:
        for name, info in read_index(path).items():
            if name in tensors:
                raise SafetensorsError(
                    f"tensor '{name}' is in two files: {tensors[name].path.name} and {path.name}"
                )
            tensors[name] = info
    return tensors


def _decode(raw: np.ndarray, dtype: str) -> np.ndarray:
    """float32/64 values (or the integers) of little-endian bytes of a safetensors dtype."""
    client = SAFETENSORS_DTYPES[dtype][0]
    if client == "bf16":
        return _dtypes.bf16_bits_to_float32(raw.view("<u2"))
    return raw.view(_dtypes._DTYPES[client][2])


def _encode(values: np.ndarray, dtype: str) -> bytes:
    return _dtypes.to_bytes(values, SAFETENSORS_DTYPES[dtype][0])


def chunks(info: TensorInfo, dtype: str, chunk_bytes: int = CHUNK_BYTES):
    """The tensor's bytes as ``dtype`` (a safetensors name), in pieces of about ``chunk_bytes``
    read from the file: copied as they are when the dtypes agree, converted otherwise
    (f32 -> bf16 rounds to nearest even, as the client does everywhere)."""
    in_size = SAFETENSORS_DTYPES[info.dtype][1]
    elements = math.prod(info.shape)
    if elements * in_size != info.nbytes:
        raise SafetensorsError(
            f"{info.path}: tensor '{info.name}' has {info.nbytes} bytes; {info.dtype}"
            f"{list(info.shape)} needs {elements * in_size}"
        )
    if elements == 0:
        return
    step = max(1, chunk_bytes // in_size)
    with open(info.path, "rb", buffering=0) as f:
        for first in range(0, elements, step):
            count = min(step, elements - first)
            piece = os.pread(f.fileno(), count * in_size, info.begin + first * in_size)
            if len(piece) != count * in_size:
                raise SafetensorsError(
                    f"{info.path}: tensor '{info.name}' ends past the end of the file"
                )
            if dtype == info.dtype:
                yield piece
            else:
                yield _encode(_decode(np.frombuffer(piece, np.uint8), info.dtype), dtype)


class StreamingWriter:
    """A safetensors file written header first: ``add`` every tensor's name, dtype and shape,
    then ``write`` their bytes in that order (any number of calls per tensor), then ``close``.
    Writes ``path`` + ``.partial`` and renames it at ``close`` once every byte is there, so a
    failed conversion never leaves a file that looks complete."""

    def __init__(self, path: Path, metadata: dict | None = None):
        self.path = Path(path)
        self.metadata = dict(metadata or {})
        self._entries: list = []  # (name, dtype, shape, nbytes)
        self._file = None
        self._current = 0  # index of the tensor being written
        self._written = 0  # its bytes so far

    def add(self, name: str, dtype: str, shape) -> None:
        if self._file is not None:
            raise RuntimeError("StreamingWriter: add after the first write")
        if dtype not in SAFETENSORS_DTYPES:
            raise ValueError(f"unknown safetensors dtype {dtype!r}")
        shape = tuple(int(s) for s in shape)
        nbytes = math.prod(shape) * SAFETENSORS_DTYPES[dtype][1]
        self._entries.append((name, dtype, shape, nbytes))

    def header_bytes(self) -> bytes:
        header, offset = {}, 0
        if self.metadata:
            header["__metadata__"] = {str(k): str(v) for k, v in self.metadata.items()}
        for name, dtype, shape, nbytes in self._entries:
            header[name] = {
                "dtype": dtype,
                "shape": list(shape),
                "data_offsets": [offset, offset + nbytes],
            }
            offset += nbytes
        text = json.dumps(header, separators=(",", ":")).encode()
        text += b" " * (-len(text) % 8)  # the data starts 8-byte aligned, as the format advises
        if len(text) > MAX_HEADER_BYTES:
            raise ValueError(f"{self.path}: header of {len(text)} bytes is too large")
        return struct.pack("<Q", len(text)) + text

    def _open(self) -> None:
        if self._file is None:
            self._partial = self.path.with_name(self.path.name + ".partial")
            self._file = open(self._partial, "wb")  # noqa: SIM115 - closed by close/abort
            self._file.write(self.header_bytes())
            self._skip_empty()

    def _skip_empty(self) -> None:
        while self._current < len(self._entries) and self._entries[self._current][3] == 0:
            self._current += 1

    def write(self, data) -> None:
        """The next bytes of the tensors, in the order they were added."""
        self._open()
        data = memoryview(data).cast("B")
        while len(data):
            if self._current >= len(self._entries):
                raise ValueError(f"{self.path}: more bytes than the tensors added hold")
            nbytes = self._entries[self._current][3]
            take = min(len(data), nbytes - self._written)
            self._file.write(data[:take])
            data = data[take:]
            self._written += take
            if self._written == nbytes:
                self._current += 1
                self._written = 0
                self._skip_empty()

    def close(self) -> None:
        self._open()
        if self._current < len(self._entries):
            name, _, _, nbytes = self._entries[self._current]
            self._file.close()
            os.unlink(self._partial)
            raise ValueError(
                f"{self.path}: tensor '{name}' got {self._written} of its {nbytes} bytes"
            )
        self._file.flush()
        os.fsync(self._file.fileno())
        self._file.close()
        os.replace(self._partial, self.path)

    def abort(self) -> None:
        if self._file is not None:
            self._file.close()
            self._partial.unlink(missing_ok=True)
