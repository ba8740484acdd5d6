"""Where two bit-pattern arrays differ: bitcompare's search, exactly `numpy.flatnonzero(a != b)` (docs/numerics.md §7).

Why: numpy's pass writes a bool array of the arrays' length and reads it back twice (a count, then the
indices), even when nothing differs, which is what a genuine checkpoint or a passing parity row gives.
Here a compiled pass first looks for the first difference (blocks of 256 elements OR-ed together, no
array written) and stops there: equal arrays cost one read of both (a 2^20-element f32 unit 94 against
139 us, measured on the 2-core development machine). When something differs, numpy's own pass finds the
indices from the first difference on: measured, a compiled pass that writes the indices itself was up to
6x slower than numpy's where the differences are scattered (a branch per element), and never faster.

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

#: `_first` compiled, False when numba is missing, None before the first call
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


def _compiled():
    """The compiled `_first`, or False where numba cannot be imported (numpy's pass then)."""
    global _kernels
    if _kernels is None:
        try:
            import numba  # noqa: F401 - jitcache's decorator imports it; a missing numba is seen here
        except ImportError:
            _kernels = False
        else:
            from .jitcache import njit
            _kernels = njit(nogil=True)(_first)
    return _kernels


def differing(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Flat indices (int64, ascending, on the host) where the numpy arrays a and b differ element by element:
    exactly `numpy.flatnonzero(a != b)`.

    a, b: numpy arrays of one shape (bitcompare's patterns are 1-D uint8/16/32/64; any other dtype, byte
    order or number of dimensions takes numpy's pass, with numpy's own result and errors: ValueError for
    shapes that do not broadcast).
    """
    if (a.ndim != 1 or a.shape != b.shape or a.dtype != b.dtype or a.dtype.kind != "u"
            or not a.dtype.isnative or a.size < NUMPY_BELOW):
        return np.flatnonzero(a != b)
    first = _compiled()
    if not first:
        return np.flatnonzero(a != b)
    k = first(a, b)
    if k < 0:
        return np.empty(0, dtype=np.intp)
    if k < SKIP_FROM:   # skipping a short equal prefix saves less than the views and the shift cost
        return np.flatnonzero(a != b)
    index = np.flatnonzero(a[k:] != b[k:])
    index += k
    return index


__all__ = ["NUMPY_BELOW", "differing"]
