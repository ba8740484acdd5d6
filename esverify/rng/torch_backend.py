"""torch kernels of the gaussian mappings (docs/CONTRACT.md §3), CPU and CUDA; the trainer's GPU path.

splitmix64 runs on int64 tensors (two's-complement add and multiply wrap
as u64 does; right shifts are masked to be logical, docs/CONTRACT.md §9). poly32 is a
chain of separate elementwise ops, one f32 rounding each: no addcmul, no
``add(..., alpha=)`` (which fuses on CPU), no torch.compile, so nothing is
contracted into an FMA on either device. Every constant is a Python float
holding an exact f32 value (rounded from `esverify.rng.constants`), so
however torch converts it, it is the f32 literal of the spec. torch's CPU
f32 sqrt is not correctly rounded, so sqrt is taken in f64 of the f32
value and rounded once to f32 (the correctly rounded f32 root even when
the f64 root is only faithful).
libm64 uses torch's f64 log/sqrt/cos/sin of the device: bit-exact per
backend, within one f32 ulp of the glibc reference (differences counted
by `esverify.rng.checks`, docs/CONTRACT.md §3a).

Kernel signature: `esverify.rng.mappings`. Checks: ``python -m pytest -q
tests/test_rng_backends.py tests/test_rng_cuda.py`` (the CUDA tests skip
without a GPU) and ``esverify goldens check`` (targets torch-cpu and,
with a GPU, torch-cuda).
"""
from __future__ import annotations

import numpy as np
import torch

from .. import forksafe
from . import constants as K
from .splitmix import GAMMA, MASK64, mix_torch, to_signed64

forksafe.install()   # a forked child runs torch single-threaded instead of deadlocking (esverify.forksafe)


def _f(x: float) -> float:
    """The f32 nearest to x, as the Python float holding exactly that value."""
    return float(np.float32(x))


_MASK53 = (1 << 53) - 1
_TWO_M53 = K.TWO_M53
_SQRT_HALF = _f(K.SQRT_HALF)
_P0 = _f(K.LOG_P0)
_LOG_COEFFS = tuple(_f(c) for c in K.LOG_COEFFS)
_Q1, _Q2 = _f(K.LOG_Q1), _f(K.LOG_Q2)
_HALF_PI = _f(K.HALF_PI)
_SIN_C = tuple(_f(c) for c in K.SIN_COEFFS)
_COS_C = tuple(_f(c) for c in K.COS_COEFFS)
_TWO_PI = K.TWO_PI


def pair_words(seed: int, p0: int, npairs: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    """(a, b) = (at(seed, p0 + 2k), at(seed, p0 + 2k + 1)) for k < npairs, as int64 bits."""
    z0 = to_signed64(seed + (p0 + 1) * GAMMA)
    za = torch.arange(npairs, dtype=torch.int64, device=device) * to_signed64(2 * GAMMA) + z0
    zb = za + to_signed64(GAMMA)
    return mix_torch(za), mix_torch(zb)


def uniforms64(a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """ua in (0, 1], ub in [0, 1) as exact f64 tensors (53-bit integers times 2**-53)."""
    ua = (((a >> 11) & _MASK53) + 1).to(torch.float64) * _TWO_M53
    ub = ((b >> 11) & _MASK53).to(torch.float64) * _TWO_M53
    return ua, ub


def ln32(x: torch.Tensor) -> torch.Tensor:
    """Cephes logf of f32 values in (0, 1], each step one f32 rounding."""
    bits = x.view(torch.int32)  # sign bit is 0: shifts need no mask
    e = ((bits >> 23) - K.EXP_OFFSET).to(torch.float32)
    m = ((bits & K.F32_MANTISSA) | K.F32_HALF_EXPONENT).view(torch.float32)
    low = m < _SQRT_HALF
    e = torch.where(low, e - 1.0, e)
    m = torch.where(low, m + m, m)
    f = m - 1.0
    z = f * f
    p = torch.full_like(f, _P0)
    for c in _LOG_COEFFS:
        p = p * f
        p = p + c
    y = (f * z) * p
    y = y + e * _Q1
    y = y - z * 0.5
    y = f + y
    return y + e * _Q2


def sqrt32(x: torch.Tensor) -> torch.Tensor:
    """Correctly rounded f32 sqrt: f64 sqrt of the f32 value, rounded once (docs/CONTRACT.md §9)."""
    return torch.sqrt(x.to(torch.float64)).to(torch.float32)


def sincos_turn32(u: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(sin, cos) of 2*pi*u for f32 u in [0, 1): quadrant reduction plus Cephes kernels."""
    t4 = u * 4.0
    q_f = torch.floor(t4 + 0.5)
    y = t4 - q_f
    x = y * _HALF_PI
    z = x * x
    s = z * _SIN_C[0]
    s = s + _SIN_C[1]
    s = s * z
    s = s + _SIN_C[2]
    sin_x = x + (x * z) * s
    c = z * _COS_C[0]
    c = c + _COS_C[1]
    c = c * z
    c = c + _COS_C[2]
    cos_x = (1.0 - z * 0.5) + (z * z) * c
    q = q_f.to(torch.int32) & 3
    odd_q = (q & 1) != 0
    sin_b = torch.where(odd_q, cos_x, sin_x)
    cos_b = torch.where(odd_q, sin_x, cos_x)
    sin_v = torch.where((q & 2) != 0, -sin_b, sin_b)
    cos_v = torch.where(((q + 1) & 2) != 0, -cos_b, cos_b)
    return sin_v, cos_v


def _poly32_halves(a, b):
    ua, ub = uniforms64(a, b)
    r = sqrt32(ln32(ua.to(torch.float32)) * -2.0)
    sin_v, cos_v = sincos_turn32(ub.to(torch.float32))
    return r * cos_v, r * sin_v


def _libm64_halves(a, b):
    ua, ub = uniforms64(a, b)
    r = torch.sqrt(torch.log(ua) * -2.0)
    t = ub * _TWO_PI
    return (r * torch.cos(t)).to(torch.float32), (r * torch.sin(t)).to(torch.float32)


def _fill(out: torch.Tensor, seed: int, first: int, halves) -> None:
    n = out.shape[0]
    if n == 0:
        return
    p0 = first - (first & 1)
    npairs = (first + n - p0 + 1) // 2
    a, b = pair_words(seed, p0 & MASK64, npairs, out.device)
    even, odd = halves(a, b)
    off = first - p0
    out.copy_(torch.stack((even, odd), dim=1).reshape(-1)[off:off + n])


@torch.no_grad()
def poly32(out: torch.Tensor, seed: int, first: int) -> None:
    """Fill the float32 tensor `out` (any device) with poly32 elements first .. first+len(out)-1."""
    _fill(out, seed, first, _poly32_halves)


@torch.no_grad()
def libm64(out: torch.Tensor, seed: int, first: int) -> None:
    """Fill the float32 tensor `out` (any device) with libm64 elements first .. first+len(out)-1."""
    _fill(out, seed, first, _libm64_halves)
