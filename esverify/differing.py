"""Where two bit-pattern arrays differ: bitcompare's search, exactly `numpy.flatnonzero(a != b)` (docs/numerics.md §7).

Why: numpy's pass writes a bool array of the arrays' length and reads it back twice (a count, then the
indices), even when nothing differs, which is what a genuine checkpoint or a passing parity row gives.
Here a compiled pass first looks for the first difference (blocks of 256 elements OR-ed together, no
array written) and stops there: equal arrays cost one read of both (a 2^20-element f32 unit 94 against
139 us, measured on the 2-core development machine). When something differs, numpy's own pass finds the
indices from the first difference on: measured, a compiled pass that writes the indices itself was up to
6x slower than numpy's where the differences are scattered (a branch per element), and never faster.
`tally` counts the differing elements and takes their largest distance without writing any array (for
`bitcompare.summary`, which keeps only those).

numba is imported on the first call, not with this module: bitcompare sits under the command line's start
(`esverify parity --help` must not load numba). Without numba, and for arrays below `NUMPY_BELOW` elements,
numpy's pass is used: below it the compiled pass saved at most 1.5 us on equal arrays and cost about 1 us
on differing ones, not worth loading numba for.

This module imports nothing of esverify but the leaf jitcache (on the first call).
"""
from __future__ import annotations

import numpy as np

#: arrays shorter than this take numpy's pass (module docstring)
NUMPY_BELOW = 1 << 14

#: a first difference this far in or farther is skipped: numpy's pass then reads only from there on (below it the
#: views and the shift of the indices cost more than the prefix saves, measured)
SKIP_FROM = 1 << 12

#: (`_first`, `_tally`) compiled, False when numba is missing, None before the first call
_kernels = None


def _first(a, b):
    """The first index where a and b differ, or -1: blocks of 256 elements are OR-ed together (a loop
    numba vectorises) and only the first block with a difference is searched element by element."""
    n = a.size
    i = 0
    while i + 256 <= n:
        x = a[i] ^ b[i]
        for j in range(i + 1, i + 256):
            x |= a[j] ^ b[j]
        if x != 0:
            break
        i += 256
    for k in range(i, n):
        if a[k] != b[k]:
            return k
    return -1


def _tally(a, b, sign, special):
    """(count of differing elements, the largest |ordinal distance| of those where neither
    pattern is special, -1 if none). sign: the sign bit, 0 for patterns without a distance (integer formats);
    special: the exponent (and mantissa) bits all set in a NaN or infinity. Patterns of at most 32 bits, so
    that the ordinals and their distance fit int64. Written without branches (selects and 0/1 factors) so
    that numba vectorises it: with `abs`, `max` and ifs, or a loop from a start index, the same loop ran 4-5x
    slower (the caller hands it views from the first difference on instead)."""
    count = 0
    best = -1
    magnitude = sign - 1
    for i in range(a.size):
        u = np.int64(a[i])
        v = np.int64(b[i])
        ne = np.int64(u != v)
        # 1 where the element differs and has a distance: both patterns finite, a float format
        has = np.int64((u & special) != special) & np.int64((v & special) != special) & ne & np.int64(sign != 0)
        ou = (u & magnitude) * (1 - 2 * np.int64((u & sign) != 0))   # ordinal: the magnitude, negated if signed
        ov = (v & magnitude) * (1 - 2 * np.int64((v & sign) != 0))
        d = ou - ov
        d = d if d >= 0 else -d
        d = d * has + has - 1                                           # -1 where no distance counts
        best = d if d > best else best
        count += ne
    return count, best


def _compiled():
    """The compiled (`_first`, `_tally`), or False where numba cannot be imported (numpy's passes then)."""
    global _kernels
    if _kernels is None:
        try:
            import numba  # noqa: F401 - jitcache's decorator imports it; a missing numba is seen here
        except ImportError:
            _kernels = False
        else:
            from .jitcache import njit
            _kernels = (njit(nogil=True)(_first), njit(nogil=True)(_tally))
    return _kernels


def _applies(a: np.ndarray, b: np.ndarray) -> bool:
    """Whether a and b are what the compiled passes take: native 1-D unsigned arrays of one dtype and length,
    long enough to be worth them."""
    # plain arrays only: a subclass (numpy.ma's masked arrays) is not what numba takes, and numpy's `!=` is
    # its own there
    return (type(a) is np.ndarray and type(b) is np.ndarray and a.ndim == 1 and a.shape == b.shape
            and a.dtype == b.dtype and a.dtype.kind == "u" and a.dtype.isnative and a.size >= NUMPY_BELOW)


def differing(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Flat indices (int64, ascending, on the host) where the numpy arrays a and b differ element by element:
    exactly `numpy.flatnonzero(a != b)`.

    a, b: numpy arrays of one shape (bitcompare's patterns are 1-D uint8/16/32/64; any other dtype, byte
    order or number of dimensions takes numpy's pass, with numpy's own result and errors: ValueError for
    shapes that do not broadcast).
    """
    kernels = _compiled() if _applies(a, b) else False
    if not kernels:
        return np.flatnonzero(a != b)
    k = kernels[0](a, b)
    if k < 0:
        return np.empty(0, dtype=np.intp)
    if k < SKIP_FROM:   # skipping a short equal prefix saves less than the views and the shift cost
        return np.flatnonzero(a != b)
    index = np.flatnonzero(a[k:] != b[k:])
    index += k
    return index


def tally(a: np.ndarray, b: np.ndarray, sign: int, special: int) -> tuple[int, int, int] | None:
    """(count, first index, largest distance) of the differing elements of two bit-pattern arrays, from
    compiled passes that write no array (`_first`, then `_tally` from the first difference on; for
    bitcompare.summary, docs/numerics.md §7), or None where they do not apply (no numba, arrays `differing`
    would hand to numpy, patterns wider than 32 bits): the caller then takes the general path.

    count: `differing(a, b).size`; first: its first index (-1 if none); largest distance: the largest
    |ordinal(a) - ordinal(b)| over the differing elements where neither pattern has all the `special` bits set
    (NaN and infinities), -1 if there is none or `sign` is 0 (integer formats: no distance). sign: the
    format's sign bit; special: its exponent bits (with the mantissa's where all-ones exponents are finite).
    """
    # the format's width, not the arrays' item size, bounds the ordinals: a hand-made f64 Patterns over 32-bit
    # integers would hand the int64 kernel a sign of 2**63
    narrow = a.dtype.itemsize <= 4 and 0 <= sign < 1 << 32 and 0 <= special < 1 << 32
    kernels = _compiled() if narrow and _applies(a, b) else False
    if not kernels:
        return None
    first, count_and_best = kernels
    k = first(a, b)
    if k < 0:
        return 0, -1, -1
    count, best = count_and_best(a[k:], b[k:], sign, special)
    return count, k, best


__all__ = ["NUMPY_BELOW", "differing", "tally"]
