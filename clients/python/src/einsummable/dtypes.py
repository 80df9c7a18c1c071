"""Element types: names, sizes, and the conversions between NumPy arrays and wire bytes.

Wire data is little-endian and row-major (service.proto ``Tensor``). NumPy has no bfloat16, so
bf16 data is converted from float32 by rounding to nearest even, and returned as float32. The
integer types ``i32`` and ``i64`` (token ids, positions) travel as two's complement; floats are
never sent as integers (a rounding the caller did not ask for), and an integer that does not
fit its type is refused rather than wrapped.
"""

from __future__ import annotations

import numpy as np

from .errors import GraphError

# Client name -> (GraphDef enum name, bytes per element, NumPy storage type on the wire).
_DTYPES = {
    "f16": ("F16", 2, np.dtype("<f2")),
    "bf16": ("BF16", 2, np.dtype("<u2")),
    "f32": ("F32", 4, np.dtype("<f4")),
    "f64": ("F64", 8, np.dtype("<f8")),
    "i32": ("I32", 4, np.dtype("<i4")),
    "i64": ("I64", 8, np.dtype("<i8")),
}
_ALIASES = {
    "float16": "f16",
    "half": "f16",
    "bfloat16": "bf16",
    "float32": "f32",
    "float": "f32",
    "float64": "f64",
    "double": "f64",
    "int32": "i32",
    "int64": "i64",
}
_BY_ENUM = {enum: name for name, (enum, _, _) in _DTYPES.items()}

DTYPES = tuple(_DTYPES)
INTEGER_DTYPES = ("i32", "i64")


def normalize(dtype) -> str:
    """The canonical client name ("f16", "bf16", "f32", "f64", "i32", "i64") of a name, alias or
    NumPy type (NumPy's int32 and int64 are i32 and i64; other integer types have no wire type)."""
    if isinstance(dtype, str):
        key = dtype.strip().lower()
        key = _ALIASES.get(key, key)
        if key in _DTYPES:
            return key
        upper = dtype.strip().upper()
        if upper in _BY_ENUM:
            return _BY_ENUM[upper]
    else:
        try:
            np_dtype = np.dtype(dtype)
        except TypeError:
            np_dtype = None
        if np_dtype is not None and np_dtype.kind == "f":
            name = {2: "f16", 4: "f32", 8: "f64"}.get(np_dtype.itemsize)
            if name:
                return name
        if np_dtype is not None and np_dtype.kind == "i":
            name = {4: "i32", 8: "i64"}.get(np_dtype.itemsize)
            if name:
                return name
    raise GraphError(f"unknown dtype {dtype!r}; expected one of {', '.join(DTYPES)}")


def enum_name(dtype: str) -> str:
    """The GraphDef ``DType`` enum name: "f32" -> "F32"."""
    return _DTYPES[normalize(dtype)][0]


def from_enum_name(enum: str) -> str:
    """The client name for a ``DType`` enum name: "BF16" -> "bf16"."""
    if enum not in _BY_ENUM:
        raise ValueError(f"unknown wire dtype {enum!r}")
    return _BY_ENUM[enum]


def itemsize(dtype: str) -> int:
    return _DTYPES[normalize(dtype)][1]


def is_integer(dtype: str) -> bool:
    """True for i32 and i64."""
    return normalize(dtype) in INTEGER_DTYPES


def numpy_dtype(dtype: str) -> np.dtype:
    """The NumPy type arrays of ``dtype`` come back as: float32 for bf16 (NumPy has no bf16)."""
    dtype = normalize(dtype)
    return np.dtype(np.float32) if dtype == "bf16" else _DTYPES[dtype][2].newbyteorder("=")


def float32_to_bf16_bits(array: np.ndarray) -> np.ndarray:
    """bfloat16 bit patterns (uint16) of float32 values, rounded to nearest even; NaN stays NaN."""
    values = np.ascontiguousarray(array, dtype=np.float32)
    bits = values.view(np.uint32)
    rounding = ((bits >> 16) & 1) + np.uint32(0x7FFF)
    rounded = ((bits + rounding) >> 16).astype(np.uint16)
    nan = np.isnan(values)
    if nan.any():
        rounded[nan] = ((bits[nan] >> 16) | 0x0040).astype(np.uint16)  # keep it a quiet NaN
    return rounded


def bf16_bits_to_float32(bits: np.ndarray) -> np.ndarray:
    """float32 values of bfloat16 bit patterns: exact (bf16 is float32's upper half)."""
    return (np.asarray(bits, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)


def to_bytes(array, dtype: str) -> bytes:
    """Wire bytes of ``array`` stored as ``dtype`` (values converted; C order, little-endian)."""
    dtype = normalize(dtype)
    values = np.asarray(array)
    if values.dtype.kind not in "fiub":
        raise TypeError(f"cannot send an array of {values.dtype} as {dtype}")
    if dtype == "bf16":
        return float32_to_bf16_bits(values.astype(np.float32, copy=False)).astype("<u2").tobytes()
    if dtype in INTEGER_DTYPES:
        if values.dtype.kind == "f":
            raise TypeError(
                f"cannot send an array of {values.dtype} as {dtype}: give integers "
                "(e.g. token ids as np.int32)"
            )
        info = np.iinfo(_DTYPES[dtype][2])
        if values.size and values.dtype.kind in "iu":
            low, high = values.min(), values.max()
            if low < info.min or high > info.max:
                bad = low if low < info.min else high
                raise ValueError(f"value {int(bad)} does not fit {dtype} ({info.min}..{info.max})")
    return np.ascontiguousarray(values, dtype=_DTYPES[dtype][2]).tobytes()


def from_bytes(data: bytes, dtype: str, shape) -> np.ndarray:
    """A NumPy array of wire bytes: f32 -> float32, f16 -> float16, bf16 -> float32 (converted),
    f64 -> float64, i32 -> int32, i64 -> int64."""
    dtype = normalize(dtype)
    shape = tuple(int(size) for size in shape)
    expected = int(np.prod(shape, dtype=np.int64)) * itemsize(dtype)
    if len(data) != expected:
        raise ValueError(
            f"tensor data has {len(data)} bytes; {dtype}{list(shape)} needs {expected}"
        )
    raw = np.frombuffer(data, dtype=_DTYPES[dtype][2]).reshape(shape)
    if dtype == "bf16":
        return bf16_bits_to_float32(raw)
    return raw.astype(raw.dtype.newbyteorder("="), copy=True)
