"""The one bitwise comparator of parity, replay and the goldens (docs/numerics.md §7).

Two arrays agree when their dtypes agree, their shapes agree and every
bit pattern is equal (the sign of zero and NaN payloads included).
Nothing is ever converted: an int64 buffer saved as int32, bool or
float64 is a difference of dtype, reported with both dtypes, never
"equal after a cast"; bits are compared in the array's own dtype, as
unsigned integers of its width. The ulp distance (esverify.bits) is
given for float formats, NaN and infinities excluded (reported by name);
integer and bool patterns have none.

- `patterns(x)`: the flat bit patterns, dtype name, bit format and shape
  of a torch tensor (any dtype of 1, 2, 4 or 8 bytes, any device) or a
  numpy array (ml_dtypes' bfloat16 and f8 included);
- `of_format(raw, fmt, shape)`: patterns already given as integers of a
  bit format (golden files, a child's replies); the format is the dtype;
- `compare(expected, got)`: a `BitDiff`;
- `summary(expected, got, start)`: what a report keeps of it (the count, the first difference, the largest
  distance), without the per-element arrays.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from . import bits
from .differing import differing, tally

#: float dtype name -> bit format; every other dtype is compared as u8/u16/u32/u64 patterns (equality only)
FLOAT_DTYPES = {"float64": "f64", "float32": "f32", "float16": "f16", "bfloat16": "bf16",
                "float8_e5m2": "f8e5m2", "float8_e4m3fn": "f8e4m3fn"}


@dataclass(frozen=True)
class Patterns:
    """Flat unsigned bit patterns (`bits`, numpy uintW), the array's own dtype name (torch's spelling,
    e.g. "int64", "bool", "bfloat16"; for `of_format`, the format), its bit format and its shape."""

    bits: np.ndarray
    dtype: str
    fmt: str
    shape: tuple


def _format(dtype: str, width: int) -> str:
    return FLOAT_DTYPES.get(dtype, f"u{width}")


def patterns(values) -> Patterns:
    """The bit patterns of a torch tensor or numpy array, in its own dtype (no conversion).

    Raises TypeError for a dtype whose elements are not 1, 2, 4 or 8 bytes (sub-byte, complex128).
    """
    try:
        import torch
    except ImportError:  # pragma: no cover - torch is a dependency
        torch = None
    if torch is not None and isinstance(values, torch.Tensor):
        t = values.detach().to("cpu").contiguous().reshape(-1)
        size = t.element_size()
        view = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}.get(size)
        name = str(t.dtype).removeprefix("torch.")
        if view is None or t.dtype.is_complex and size != 8:
            raise TypeError(f"no bit format for tensor dtype {t.dtype}")
        raw = t.view(view).numpy().view(bits.UINT_OF_WIDTH[8 * size])
        return Patterns(raw, name, _format(name, 8 * size), tuple(values.shape))
    a = np.asarray(values)
    flat = np.ascontiguousarray(a).reshape(-1)
    if not flat.dtype.isnative:   # a big-endian array's bytes, viewed as native integers, are not its patterns
        flat = flat.astype(flat.dtype.newbyteorder("="))
    size = flat.dtype.itemsize
    if size not in (1, 2, 4, 8):
        raise TypeError(f"no bit format for numpy dtype {flat.dtype}")
    name = flat.dtype.name
    return Patterns(flat.view(bits.UINT_OF_WIDTH[8 * size]), name, _format(name, 8 * size), tuple(a.shape))


def of_format(raw, fmt: str, shape: tuple | None = None) -> Patterns:
    """Patterns given as unsigned integers of bit format `fmt` (esverify.bits); shape defaults to flat.

    Raises ValueError for an unknown format or a pattern that does not fit its width (never truncated).
    """
    w = bits.width(fmt)
    a = np.asarray(raw)
    flat = a.reshape(-1)
    unsigned = bits.UINT_OF_WIDTH[w]
    # the format's own unsigned type holds nothing that does not fit (what the result files hold): taken as
    # it is, with no range pass and no copy; any other integer type is checked element by element
    if flat.size and flat.dtype != unsigned:
        if flat.dtype.kind not in "ui" or int(flat.min()) < 0 or int(flat.max()) >= 1 << w:
            raise ValueError(f"bit patterns of dtype {flat.dtype} do not all fit {fmt}")
    return Patterns(flat.astype(unsigned, copy=False), fmt, fmt, tuple(a.shape) if shape is None else tuple(shape))


@dataclass
class BitDiff:
    """The bitwise difference of `expected` and `got`.

    layout: "" when dtypes and shapes agree, else what differs (both dtypes / shapes; then no element
    is compared and every element counts as differing); elements: expected's element count;
    index: flat indices of the differing elements; expected_bits, got_bits: their patterns; fmt: the
    bit format; dist: their ulp distances (0 where not finite); finite: where a distance exists.
    """

    layout: str
    elements: int
    fmt: str
    index: np.ndarray
    expected_bits: np.ndarray
    got_bits: np.ndarray
    dist: np.ndarray
    finite: np.ndarray

    @property
    def mismatches(self) -> int:
        return max(self.elements, 1) if self.layout else int(self.index.size)

    @property
    def max_ulp(self) -> int | None:
        return int(self.dist[self.finite].max()) if self.finite.any() else None

    def ulps(self) -> list:
        """Per differing element its ulp distance, None where NaN/inf or an integer format."""
        return [int(d) if f else None for d, f in zip(self.dist.tolist(), self.finite.tolist())]

    def first(self, start: int = 0) -> dict | None:
        """{"index" (start + flat index), "expected", "got" (hex and value), "ulp"} of the first difference."""
        if not self.index.size:
            return None
        return {"index": start + int(self.index[0]),
                "expected": bits.describe(int(self.expected_bits[0]), self.fmt),
                "got": bits.describe(int(self.got_bits[0]), self.fmt),
                "ulp": int(self.dist[0]) if self.finite[0] else None}


def _distances(a: np.ndarray, b: np.ndarray, fmt: str):
    """(distances, finite mask) of differing patterns a, b of one format (docs/numerics.md §7)."""
    if fmt not in bits.FLOAT_FORMATS:
        return np.zeros(a.size, dtype=np.int64), np.zeros(a.size, dtype=bool)
    special = bits.nonfinite(a, fmt) | bits.nonfinite(b, fmt)   # masks, not classify's names: 4x faster
    if fmt == "f64":   # ordinals up to 2**63: Python ints, so a distance cannot overflow
        dist = np.abs(bits.ordinal(a, fmt).astype(object) - bits.ordinal(b, fmt).astype(object))
        dist = np.array(dist, dtype=object).reshape(-1)
        dist[special] = 0
        return dist, ~special
    dist = np.abs(bits.ordinal(a.astype(np.int64), fmt) - bits.ordinal(b.astype(np.int64), fmt))
    dist[special] = 0
    return dist, ~special


def compare(expected, got) -> BitDiff:
    """Compare two arrays bit for bit without converting either (module docstring).

    expected, got: torch tensors, numpy arrays or `Patterns`. A dtype or shape that differs is the
    BitDiff's `layout` (naming both), never an error and never a cast.
    """
    e = expected if isinstance(expected, Patterns) else patterns(expected)
    g = got if isinstance(got, Patterns) else patterns(got)
    empty = np.zeros(0, dtype=np.int64)
    problems = []
    if e.dtype != g.dtype:
        problems.append(f"dtype {g.dtype} where {e.dtype} is expected")
    if e.shape != g.shape:
        problems.append(f"shape {g.shape} where {e.shape} is expected")
    if problems:
        return BitDiff("; ".join(problems), int(e.bits.size), e.fmt, empty, empty, empty, empty,
                       np.zeros(0, dtype=bool))
    index = differing(e.bits, g.bits)   # np.flatnonzero(e.bits != g.bits), without its bool array when equal
    eb, gb = e.bits[index], g.bits[index]
    if not index.size:   # the common case: no distance to take (classifying empty arrays was half a row's compare)
        return BitDiff("", int(e.bits.size), e.fmt, index, eb, gb, empty, np.zeros(0, dtype=bool))
    dist, finite = _distances(eb, gb, e.fmt)
    return BitDiff("", int(e.bits.size), e.fmt, index, eb, gb, dist, finite)


@functools.lru_cache(maxsize=None)
def _sign_and_special(fmt: str) -> tuple[int, int]:
    """(sign bit, the bits all set in a NaN or infinity) of a float format, (0, 0) for an integer format (no
    distance): what esverify.differing.tally takes."""
    if fmt not in bits.FLOAT_FORMATS:
        return 0, 0
    return 1 << (bits.FLOAT_FORMATS[fmt][0] - 1), bits.special_mask(fmt)


def summary(expected, got, start: int = 0) -> dict:
    """What a report keeps of `compare(expected, got)`: {"mismatches": BitDiff.mismatches, "first":
    BitDiff.first(start), "max_ulp": BitDiff.max_ulp}, plus "layout" when dtypes or shapes differ.

    expected, got: as `compare`. The values are compare's, bit for bit; for patterns of at most 32 bits
    (long enough, numba present) they come from one compiled pass that writes no per-element array
    (esverify.differing.tally), which costs less than compare's index, patterns and distances where many
    elements differ (a replay's naive result); otherwise from compare itself.
    """
    e = expected if isinstance(expected, Patterns) else patterns(expected)
    g = got if isinstance(got, Patterns) else patterns(got)
    counted = None
    if e.dtype == g.dtype and e.shape == g.shape:
        counted = tally(e.bits, g.bits, *_sign_and_special(e.fmt))
    if counted is None:
        diff = compare(e, g)
        out = {"mismatches": diff.mismatches, "first": diff.first(start), "max_ulp": diff.max_ulp}
        if diff.layout:
            out["layout"] = diff.layout
        return out
    count, k, best = counted
    if not count:
        return {"mismatches": 0, "first": None, "max_ulp": None}
    one = np.array([k], dtype=np.int64)
    first = compare(Patterns(e.bits[one], e.dtype, e.fmt, (1,)), Patterns(g.bits[one], g.dtype, g.fmt, (1,))).first()
    first["index"] = start + k
    return {"mismatches": count, "first": first, "max_ulp": None if best < 0 else best}
