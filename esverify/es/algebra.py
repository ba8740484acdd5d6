"""The rounding primitives of the straight-line reference, and the record of a profile's model (docs/numerics.md §3).

numpy (with ml_dtypes for bfloat16), one rounding per call, no torch and
nothing of the kernels they check. `esverify.es.reference` (the whole
operations) and each reference's own straight-line model
(``esverify/references/<name>/model.py``, registered as `Model`) are
written with them. Its own module so that a model imports the primitives
without importing the module that looks models up (esverify.es.reference).

Checks: ``python -m pytest -q tests/test_es_kernels.py`` (fma32 against
the trainer's fast fma32; every profile against its model, bitwise).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Callable

import ml_dtypes
import numpy as np

NP_DTYPES = {"f32": np.dtype(np.float32), "f16": np.dtype(np.float16),
             "bf16": np.dtype(ml_dtypes.bfloat16)}


def dtype_name(a: np.ndarray) -> str:
    """The name of a's dtype: "f32", "f16" or "bf16"; ValueError for any other dtype."""
    for name, dt in NP_DTYPES.items():
        if a.dtype == dt:
            return name
    raise ValueError(f"unsupported dtype {a.dtype}; supported: f32, f16, bf16")


def f32(x) -> np.ndarray:
    """Exact widening to f32 (or rounding of an f64 array to f32)."""
    return np.asarray(x).astype(np.float32)


def rd(x32: np.ndarray, name: str) -> np.ndarray:
    """rd_dt: one round-to-nearest-even of an f32 array to dtype `name`."""
    return np.asarray(x32, dtype=np.float32).astype(NP_DTYPES[name])


def rd32s(a: float) -> np.float32:
    """rd32 of a Python float."""
    return np.float32(a)


def frac_rd32(v: Fraction) -> float:
    """The f32 nearest to the exact rational v (ties to even), as a Python float (v != 0)."""
    neg = v < 0
    v = -v if neg else v
    e = v.numerator.bit_length() - v.denominator.bit_length()
    if Fraction(2) ** e > v:
        e -= 1                                          # now 2**e <= v < 2**(e+1)
    q = max(e, -126) - 23                               # exponent of one ulp (subnormals: 2**-149)
    m = round(v / Fraction(2) ** q)                     # Fraction.__round__ ties to even
    out = math.ldexp(m, q)
    if out >= 2.0 ** 128:                               # rounded past the largest f32
        out = math.inf
    return -out if neg else out


def fma32_scalar(x: np.float32, y: np.float32, k: np.float32) -> np.float32:
    """rd32(x + y*k) with one rounding, by exact rational arithmetic."""
    x, y, k = float(x), float(y), float(k)
    if not (math.isfinite(x) and math.isfinite(y) and math.isfinite(k)):
        return np.float32(x + y * k)
    exact = Fraction(x) + Fraction(y) * Fraction(k)
    if exact == 0:
        prod_neg = math.copysign(1.0, y) * math.copysign(1.0, k) < 0
        both_neg_zero = x == 0 and math.copysign(1.0, x) < 0 and (y == 0 or k == 0) and prod_neg
        return np.float32(-0.0 if both_neg_zero else 0.0)
    return np.float32(frac_rd32(exact))


def fma32(x32: np.ndarray, y32: np.ndarray, k: np.float32) -> np.ndarray:
    """Elementwise rd32(x + y*k) with one rounding, by exact rational arithmetic (`fma32_scalar`).

    x32, y32: f32 arrays of one shape; k: an f32 scalar. Returns a new f32
    array of that shape. Exact zeros take IEEE fma's sign; a non-finite
    input gives the IEEE result of the f64 expression. Slow (Fractions per
    element): keep arrays to a few thousand elements. The trainer's fast
    equivalent is esverify.es.numerics.fma32.
    """
    out = np.empty(x32.shape, np.float32)
    for i, (x, y) in enumerate(zip(x32.reshape(-1), y32.reshape(-1))):
        out.reshape(-1)[i] = fma32_scalar(x, y, k)
    return out


@dataclass(frozen=True)
class Model:
    """The straight-line model of one Trainer profile (docs/numerics.md §3), registered by its reference.

    name: the profile's name (the key of `esverify.es.reference.perturb`'s
    ``cfg["profile"]``). cpu_rule: the rule the profile uses on CPU, taken
    when a caller gives none. perturb(theta, eps, s, rule) -> theta + s
    q(eps): theta an f32/f16/bf16 array, eps its f32 noise (same shape),
    s an f64 (+sigma, or -sigma to restore). update(theta, eps_list,
    coeffs, alpha, population, rule) -> theta after the step without
    decay: eps_list the f32 noise arrays, one per f64 coefficient (already
    folded for antithetic pairs), population the divisor N. Both return new
    arrays of theta's dtype and shape and raise ValueError for an unknown
    rule or dtype.
    """

    name: str
    cpu_rule: str
    perturb: Callable = field(repr=False)
    update: Callable = field(repr=False)
