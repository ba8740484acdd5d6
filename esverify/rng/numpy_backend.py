"""numpy kernels of the gaussian mappings (docs/CONTRACT.md §3), whole-array per chunk.

poly32 relies on numpy's float32 ufuncs (+, -, *, sqrt, floor) being
correctly rounded and never fused (docs/CONTRACT.md §9); every literal is an explicit
np.float32 (rounded from `esverify.rng.constants`) so no step is promoted
to f64. Each chunk computes whole aligned pairs (cosine half at even j,
sine half at odd j) and keeps the requested slice, so an odd `first` is
served exactly like the middle of the stream.
libm64 uses numpy's f64 log/sqrt/cos/sin, which may differ from glibc's in
the last f64 bit; after the rounding to f32 that shows up only rarely, as
a one-ulp difference (counted by `esverify.rng.checks`).

Kernel signature: `esverify.rng.mappings`. Checks: ``python -m pytest -q
tests/test_rng_backends.py`` and ``esverify goldens check``.
"""
from __future__ import annotations

import numpy as np

from . import constants as K
from .splitmix import GAMMA, MASK64, mix_numpy

F = np.float32
TWO_M53 = K.TWO_M53
SQRT_HALF = F(K.SQRT_HALF)
LOG_P0 = F(K.LOG_P0)
LOG_COEFFS = tuple(F(c) for c in K.LOG_COEFFS)
LOG_Q1 = F(K.LOG_Q1)
LOG_Q2 = F(K.LOG_Q2)
HALF_PI = F(K.HALF_PI)
SIN_C = tuple(F(c) for c in K.SIN_COEFFS)
COS_C = tuple(F(c) for c in K.COS_COEFFS)
ONE, HALF, TWO, FOUR = F(1.0), F(0.5), F(2.0), F(4.0)


def pair_words(seed: int, p0: int, npairs: int) -> tuple[np.ndarray, np.ndarray]:
    """(a, b) = (at(seed, p0 + 2k), at(seed, p0 + 2k + 1)) for k < npairs, uint64."""
    za = np.uint64((seed + (p0 + 1) * GAMMA) & MASK64) + \
        np.arange(npairs, dtype=np.uint64) * np.uint64((2 * GAMMA) & MASK64)
    return mix_numpy(za), mix_numpy(za + np.uint64(GAMMA))


def uniforms64(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """ua in (0, 1], ub in [0, 1), exact f64 (53-bit integers times 2**-53)."""
    ua = ((a >> np.uint64(11)) + np.uint64(1)).astype(np.float64) * TWO_M53
    ub = (b >> np.uint64(11)).astype(np.float64) * TWO_M53
    return ua, ub


def ln32(x: np.ndarray) -> np.ndarray:
    """Cephes logf of f32 values in (0, 1], each step one f32 rounding."""
    bits = x.view(np.uint32)
    e = ((bits >> np.uint32(23)).astype(np.int32) - np.int32(K.EXP_OFFSET)).astype(F)
    m = ((bits & np.uint32(K.F32_MANTISSA)) | np.uint32(K.F32_HALF_EXPONENT)).view(F)
    low = m < SQRT_HALF
    e = np.where(low, e - ONE, e)
    m = np.where(low, m + m, m)
    f = m - ONE
    z = f * f
    p = np.full_like(f, LOG_P0)
    for c in LOG_COEFFS:
        p = p * f
        p += c
    y = (f * z) * p
    y = y + e * LOG_Q1
    y = y - HALF * z
    y = f + y
    return y + e * LOG_Q2


def sincos_turn32(u: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(sin, cos) of 2*pi*u for f32 u in [0, 1): quadrant reduction plus Cephes kernels."""
    t4 = u * FOUR
    q_f = np.floor(t4 + HALF)
    y = t4 - q_f
    x = y * HALF_PI
    z = x * x
    s = SIN_C[0] * z
    s += SIN_C[1]
    s = s * z
    s += SIN_C[2]
    sin_x = x + (x * z) * s
    c = COS_C[0] * z
    c += COS_C[1]
    c = c * z
    c += COS_C[2]
    cos_x = (ONE - HALF * z) + (z * z) * c
    q = q_f.astype(np.int32) & 3
    odd_q = (q & 1) != 0
    sin_b = np.where(odd_q, cos_x, sin_x)
    cos_b = np.where(odd_q, sin_x, cos_x)
    sin_v = np.where((q & 2) != 0, -sin_b, sin_b)
    cos_v = np.where(((q + 1) & 2) != 0, -cos_b, cos_b)
    return sin_v, cos_v


def _fill(out: np.ndarray, seed: int, first: int, halves) -> None:
    n = out.shape[0]
    if n == 0:
        return
    p0 = first - (first & 1)
    npairs = (first + n - p0 + 1) // 2
    a, b = pair_words(seed, p0, npairs)
    even, odd = halves(a, b)
    both = np.empty(2 * npairs, dtype=F)
    both[0::2] = even
    both[1::2] = odd
    off = first - p0
    out[:] = both[off:off + n]


def _poly32_halves(a, b):
    ua, ub = uniforms64(a, b)
    r = np.sqrt(F(-2.0) * ln32(ua.astype(F)))
    sin_v, cos_v = sincos_turn32(ub.astype(F))
    return r * cos_v, r * sin_v


def _libm64_halves(a, b):
    ua, ub = uniforms64(a, b)
    r = np.sqrt(-2.0 * np.log(ua))
    t = K.TWO_PI * ub
    return (r * np.cos(t)).astype(F), (r * np.sin(t)).astype(F)


def poly32(out: np.ndarray, seed: int, first: int) -> None:
    """Fill float32 `out` with poly32 elements first .. first+len(out)-1 of `seed`."""
    _fill(out, seed, first, _poly32_halves)


def libm64(out: np.ndarray, seed: int, first: int) -> None:
    """Fill float32 `out` with libm64 elements first .. first+len(out)-1 of `seed`."""
    _fill(out, seed, first, _libm64_halves)
