"""Bit patterns, hex encoding and ulp distances (docs/numerics.md §7, docs/CONTRACT.md §5).

A mismatch is any difference in bits, the sign of zero included. The ulp
distance of two values of one format is |ord(a) - ord(b)| where `ord` maps
the bit pattern to a monotone integer with ord(+0) = ord(-0) = 0. NaN and
infinities are never given a distance: they are reported by name.

Formats: "f64", "f32", "f16", "bf16", "f8e5m2", "f8e4m3fn" (floats) and
"u64", "u32", "u16", "u8" (integers and other patterns, compared for
equality only). Hex strings are "0x" plus 16 (f64, u64), 8 (f32, u32),
4 (f16, bf16, u16) or 2 (f8, u8) lowercase hex digits. f8e4m3fn has no
infinities and one NaN pattern per sign (all exponent and mantissa bits set).
The one comparator of bit patterns built on these is esverify.bitcompare.
"""
from __future__ import annotations

import numpy as np

#: format -> (width in bits, exponent bits, mantissa bits)
FLOAT_FORMATS = {"f64": (64, 11, 52), "f32": (32, 8, 23), "f16": (16, 5, 10), "bf16": (16, 8, 7),
                 "f8e5m2": (8, 5, 2), "f8e4m3fn": (8, 4, 3)}
INT_FORMATS = {"u64": 64, "u32": 32, "u16": 16, "u8": 8}
#: unsigned integer dtype of each bit width (the patterns a comparison works on)
UINT_OF_WIDTH = {64: np.uint64, 32: np.uint32, 16: np.uint16, 8: np.uint8}
#: float formats whose all-ones exponent is not reserved for inf/NaN (NaN only with an all-ones mantissa)
_NO_INF = ("f8e4m3fn",)


def width(fmt: str) -> int:
    """Width in bits of a format. Raises ValueError for an unknown format."""
    if fmt in FLOAT_FORMATS:
        return FLOAT_FORMATS[fmt][0]
    if fmt in INT_FORMATS:
        return INT_FORMATS[fmt]
    raise ValueError(f"unknown bit format {fmt!r}; known: {sorted(FLOAT_FORMATS) + sorted(INT_FORMATS)}")


def to_hex(bits: int, fmt: str) -> str:
    """Hex string of one bit pattern, e.g. to_hex(0x3f800000, "f32") == "0x3f800000"."""
    w = width(fmt)
    if not 0 <= int(bits) < (1 << w):
        raise ValueError(f"bit pattern {bits!r} does not fit {fmt}")
    return f"0x{int(bits):0{w // 4}x}"


def from_hex(text: str, fmt: str) -> int:
    """Parse a hex string written by `to_hex`; raises ValueError on a malformed one."""
    w = width(fmt)
    if not (isinstance(text, str) and text.startswith("0x") and len(text) == 2 + w // 4):
        raise ValueError(f"malformed {fmt} hex {text!r}: want 0x plus {w // 4} lowercase hex digits")
    return int(text[2:], 16)


def array_bits(values) -> tuple[np.ndarray, str]:
    """Bit patterns of an array or tensor as unsigned ints, with its format.

    Accepts numpy arrays (float64/32/16, ml_dtypes bfloat16, uint64/32) and
    torch tensors on any device (copied to CPU). Returns a flat uint array.
    """
    try:
        import torch
    except ImportError:  # pragma: no cover - torch is a dependency
        torch = None
    if torch is not None and isinstance(values, torch.Tensor):
        t = values.detach().to("cpu").contiguous().reshape(-1)
        fmt = {torch.float64: "f64", torch.float32: "f32", torch.float16: "f16",
               torch.bfloat16: "bf16", torch.int64: "u64", torch.uint64: "u64"}.get(t.dtype)
        if fmt is None:
            raise TypeError(f"no bit format for tensor dtype {t.dtype}")
        view = {64: torch.int64, 32: torch.int32, 16: torch.int16}[width(fmt)]
        raw = t.view(view).numpy()
        return raw.view(UINT_OF_WIDTH[width(fmt)]), fmt
    a = np.ascontiguousarray(values).reshape(-1)
    name = a.dtype.name
    fmt = {"float64": "f64", "float32": "f32", "float16": "f16", "bfloat16": "bf16",
           "uint64": "u64", "int64": "u64", "uint32": "u32"}.get(name)
    if fmt is None:
        raise TypeError(f"no bit format for numpy dtype {a.dtype}")
    return a.view(UINT_OF_WIDTH[width(fmt)]), fmt


def ordinal(bits, fmt: str) -> np.ndarray:
    """Monotone integer of each float bit pattern; ord(+0) = ord(-0) = 0.

    Returns int64 for f32/f16/bf16 and Python-int object arrays for f64
    (so the distance cannot overflow). NaN patterns get an ordinal too; use
    `classify` or `nonfinite` to keep them out of distances.
    """
    w, _, _ = FLOAT_FORMATS[fmt]
    b = _widened(bits, fmt)
    sign = 1 << (w - 1)
    mag = b & (sign - 1)
    neg = (b & sign) != 0
    return np.where(neg, -mag, mag)


def special_mask(fmt: str) -> int:
    """The bits all set in every NaN and infinity of float format `fmt` (a name of FLOAT_FORMATS), and in no
    finite value: the all-ones exponent, with the all-ones mantissa too in a format whose all-ones exponent is
    finite (f8e4m3fn: its one NaN). KeyError for a format that is not a float format."""
    _, e, m = FLOAT_FORMATS[fmt]
    exp_all = ((1 << e) - 1) << m
    return exp_all | ((1 << m) - 1) if fmt in _NO_INF else exp_all


def _special(b, fmt: str):
    """(NaN or infinite, NaN, negative) masks of patterns b already widened (int64, or object for 64 bits)."""
    w, _, m = FLOAT_FORMATS[fmt]
    special = special_mask(fmt)
    is_special = (b & special) == special
    is_nan = is_special if fmt in _NO_INF else is_special & ((b & ((1 << m) - 1)) != 0)
    return is_special, is_nan, (b & (1 << (w - 1))) != 0


def _widened(bits, fmt: str):
    w = FLOAT_FORMATS[fmt][0]
    return np.asarray(bits, dtype=np.uint64).astype(object) if w == 64 else np.asarray(bits).astype(np.int64)


def nonfinite(bits, fmt: str) -> np.ndarray:
    """Per element: True for NaN and infinities (`classify`'s non-empty names), as a bool array."""
    return np.atleast_1d(_special(_widened(bits, fmt), fmt)[0])


def classify(bits, fmt: str) -> np.ndarray:
    """Per element: "" for finite values, "nan", "+inf" or "-inf"."""
    b = _widened(bits, fmt)
    is_special, is_nan, neg = _special(b, fmt)
    out = np.full(len(np.atleast_1d(b)), "", dtype=object)
    out[np.atleast_1d(is_special & ~is_nan & ~neg)] = "+inf"
    out[np.atleast_1d(is_special & ~is_nan & neg)] = "-inf"
    out[np.atleast_1d(is_nan)] = "nan"
    return out


def ulp_distance(a_bits, b_bits, fmt: str) -> np.ndarray:
    """Elementwise |ord(a) - ord(b)| as an object array of Python ints.

    Elements where either side is NaN or infinite get None (report them by
    name with `classify`). Integer formats get 0 for equal and None for
    different patterns (no distance is defined).
    """
    if fmt in INT_FORMATS:
        a = np.asarray(a_bits, dtype=np.uint64)
        b = np.asarray(b_bits, dtype=np.uint64)
        return np.where(a == b, 0, None).astype(object)
    oa, ob = ordinal(a_bits, fmt), ordinal(b_bits, fmt)
    dist = np.abs(oa.astype(object) - ob.astype(object))
    special = (classify(a_bits, fmt) != "") | (classify(b_bits, fmt) != "")
    dist = np.array(dist, dtype=object).reshape(-1)
    dist[special.reshape(-1)] = None
    return dist


def describe(bits: int, fmt: str) -> str:
    """A human-readable value for reports: hex pattern plus decimal value."""
    h = to_hex(bits, fmt)
    if fmt in INT_FORMATS:
        return h
    if fmt == "bf16":
        value = np.array([int(bits) << 16], dtype=np.uint32).view(np.float32)[0]
    elif fmt.startswith("f8"):
        import torch   # numpy has no f8 types; torch (a dependency) has both
        value = torch.tensor([int(bits)], dtype=torch.uint8).view(
            {"f8e5m2": torch.float8_e5m2, "f8e4m3fn": torch.float8_e4m3fn}[fmt]).float().item()
    else:
        value = np.array([int(bits)], dtype=UINT_OF_WIDTH[width(fmt)]).view({"f64": np.float64, "f32": np.float32, "f16": np.float16}[fmt])[0]
    return f"{h} ({float(value)!r})"
