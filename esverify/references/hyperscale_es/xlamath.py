"""XLA CPU's f32 arithmetic as JAX's normal uses it, in numpy, bit for bit (docs/hyperscale.md §3).

What XLA's CPU backend emits for the functions `jax.random.normal` reaches
(jaxlib 0.10.2, x86): the f32 fused multiply-add, a Cephes rational log1p
on top of XLA's polynomial log, and the chlo expansion of erf_inv (Giles'
single-precision polynomial). LLVM contracts a multiply into the add or
subtract that is its single use (``AllowFPOpFusion=Fast``) when the CPU has
FMA; each function takes ``fma``: True models that host, False one without
FMA (``--xla_cpu_max_isa=AVX`` or older), where every product is rounded.
The bf16/f16 helpers keep values as f32 arrays holding dtype-representable
numbers, so no dtype library is needed (numpy has no bfloat16).

XLA CPU runs with denormals-are-zero: a subnormal input of `log32`,
`log1p32` or `erf_inv32` is read as a zero of its sign (modelled);
subnormal intermediates are not flushed here (in the draws modelled they
lie far below the result's last bit). NaN results are NaN; their sign and
payload bits (XLA's differ by function) are not modelled.

Every function takes and returns numpy float32 arrays of any shape
(bf16 helpers: float32 holding bf16 values; `bf16_bits` gives uint16).
No function here raises for finite input.
"""
from __future__ import annotations

import numpy as np

F32 = np.float32


def fma32(a, b, c) -> np.ndarray:
    """rd32(a*b + c) with one rounding: the f32 fused multiply-add, emulated exactly.

    The product of two f32 is exact in f64; the f64 sum is taken with round-to-odd
    (round to nearest, then moved one ulp toward the exact sum when the nearest is
    even and inexact), which makes the final rounding to f32 correct (no double
    rounding). Arrays broadcast; returns float32."""
    a, b, c = (np.asarray(v, dtype=F32).astype(np.float64) for v in (a, b, c))
    with np.errstate(invalid="ignore", over="ignore"):     # inf/NaN operands: the error term is unused
        p = a * b
        s = p + c
        bb = s - p                                   # TwoSum: the exact error of s
        err = (p - (s - bb)) + (c - bb)
    s = np.atleast_1d(s)
    even = (s.view(np.uint64) & np.uint64(1)) == 0
    move = (err != 0) & even & np.isfinite(s)
    if np.any(move):
        s = np.where(move, np.nextafter(s, np.where(err > 0, np.inf, -np.inf)), s)
    return s.astype(F32).reshape(np.shape(p))


def _mul_add(a, b, c, fma: bool) -> np.ndarray:
    """a*b + c as XLA CPU emits it: fused when the host has FMA, else two roundings."""
    if fma:
        return fma32(a, b, c)
    return (np.asarray(a, F32) * np.asarray(b, F32) + np.asarray(c, F32)).astype(F32)


def round_bf16(x) -> np.ndarray:
    """float32 -> the nearest bfloat16 (ties to even), held in float32. NaN stays NaN."""
    x = np.asarray(x, dtype=F32)
    u = x.view(np.uint32).astype(np.uint64)
    r = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) << 16
    out = r.astype(np.uint32).view(F32)
    return np.where(np.isnan(x), x, out).astype(F32)


def bf16_bits(x) -> np.ndarray:
    """uint16 bit patterns of float32 values that are bfloat16 values (from `round_bf16`)."""
    return (np.asarray(x, dtype=F32).view(np.uint32) >> 16).astype(np.uint16)


# Cephes log1p, as XLA's elemental emitter writes it (highest degree first)
_LOG1P_NUM = (4.5270000862445199635215E-5, 4.9854102823193375972212E-1, 6.5787325942061044846969E0,
              2.9911919328553073277375E1, 6.0949667980987787057556E1, 5.7112963590585538103336E1,
              2.0039553499201281259648E1)
_LOG1P_DEN = (1., 1.5062909083469192043167E1, 8.3047565967967209469434E1, 2.2176239823732856465394E2,
              3.0909872225312059774938E2, 2.1642788614495947685003E2, 6.0118660497603843919306E1)
_LOG1P_SMALL = F32(0.41421356237309504880)        # sqrt(2) - 1

# XLA CPU's vectorised f32 log (Cephes logf, in three interleaved Horner parts)
_LOG_P = tuple(F32(c) for c in (7.0376836292E-2, -1.1514610310E-1, 1.1676998740E-1, -1.2420140846E-1,
                                 1.4249322787E-1, -1.6668057665E-1, 2.0000714765E-1, -2.4999993993E-1,
                                 3.3333331174E-1))
_LOG_Q1, _LOG_Q2 = F32(-2.12194440e-4), F32(0.693359375)
_SQRTHF = F32(0.707106781186547524)


def _poly(x, coeffs, fma: bool) -> np.ndarray:
    p = np.zeros_like(x)
    for c in coeffs:                                # XLA's EvaluatePolynomial: p = p*x + c from 0
        p = _mul_add(p, x, F32(c), fma)
    return p


def daz(x) -> np.ndarray:
    """Denormals-are-zero: subnormal float32 values become zeros of their sign."""
    x = np.asarray(x, dtype=F32)
    return np.where(np.abs(x) < np.finfo(F32).tiny, np.copysign(F32(0), x), x).astype(F32)


def log32(x, fma: bool = True) -> np.ndarray:
    """XLA CPU's f32 natural log for x > 0 (0 -> -inf, +inf -> +inf, negative or NaN -> NaN)."""
    x = daz(x)
    t = np.maximum(x, F32(np.finfo(F32).tiny))      # cut off subnormals
    bits = t.view(np.uint32)
    e = (((bits >> 23).astype(np.int32) - 0x7F).astype(F32) + F32(1))
    m = ((bits & np.uint32(0x807FFFFF)) | np.uint32(0x3F000000)).view(F32)     # mantissa in [0.5, 1)
    small = m < _SQRTHF
    tmp = np.where(small, m, F32(0))
    m = m - F32(1)
    e = e - np.where(small, F32(1), F32(0))
    m = m + tmp
    x2 = m * m
    x3 = x2 * m
    p = _LOG_P
    y = _mul_add(m, p[0], p[1], fma)
    y1 = _mul_add(m, p[3], p[4], fma)
    y2 = _mul_add(m, p[6], p[7], fma)
    y = _mul_add(y, m, p[2], fma)
    y1 = _mul_add(y1, m, p[5], fma)
    y2 = _mul_add(y2, m, p[8], fma)
    y = _mul_add(y, x3, y1, fma)
    y = _mul_add(y, x3, y2, fma)
    q1e = _LOG_Q1 * e
    y = _mul_add(y, x3, q1e, fma)                   # y*x3 + q1*e: both single-use products, the first fused
    m = _mul_add(-x2, F32(0.5), m, fma)             # exact either way (x2/2)
    m = m + y
    out = _mul_add(_LOG_Q2, e, m, fma)              # exact either way (few bits)
    out = np.where(x == 0, F32(-np.inf), out)
    out = np.where(x == np.inf, F32(np.inf), out)
    out = np.where((x < 0) | np.isnan(x), F32(np.nan), out)
    return out.astype(F32)


def log1p32(x, fma: bool = True) -> np.ndarray:
    """XLA CPU's f32 log1p: the Cephes rational for |x| < sqrt(2) - 1, else `log32(1 + x)`."""
    x = daz(x)
    with np.errstate(invalid="ignore", divide="ignore"):
        large = log32(x + F32(1), fma)
    with np.errstate(over="ignore", invalid="ignore"):      # the branch not taken may overflow
        x2 = x * x
        ratio = _poly(x, _LOG1P_NUM, fma) / _poly(x, _LOG1P_DEN, fma)
        small = (x * x2) * ratio
        small = _mul_add(F32(-0.5), x2, small, fma)
        small = x + small
    return np.where(np.abs(x) < _LOG1P_SMALL, small, large).astype(F32)


# Giles' single-precision erf_inv, as the chlo expansion emits it
_ERFINV_LT5 = tuple(F32(c) for c in (2.81022636e-08, 3.43273939e-07, -3.5233877e-06, -4.39150654e-06,
                                      0.00021858087, -0.00125372503, -0.00417768164, 0.246640727, 1.50140941))
_ERFINV_GE5 = tuple(F32(c) for c in (-0.000200214257, 0.000100950558, 0.00134934322, -0.00367342844,
                                      0.00573950773, -0.0076224613, 0.00943887047, 1.00167406, 2.83297682))


def erf_inv32(x, fma: bool = True) -> np.ndarray:
    """XLA's f32 erf_inv for x in [-1, 1] (+-1 -> +-inf)."""
    x = daz(x)
    w = -log1p32(x * -x, fma)
    lt = w < F32(5)
    with np.errstate(invalid="ignore"):
        w = np.where(lt, w - F32(2.5), np.sqrt(w) - F32(3))
    p = np.where(lt, _ERFINV_LT5[0], _ERFINV_GE5[0]).astype(F32)
    for a, b in zip(_ERFINV_LT5[1:], _ERFINV_GE5[1:]):
        p = _mul_add(p, w, np.where(lt, a, b).astype(F32), fma)
    out = p * x
    with np.errstate(invalid="ignore"):
        edge = x * F32(np.inf)
    return np.where(np.abs(x) == 1, edge, out).astype(F32)
