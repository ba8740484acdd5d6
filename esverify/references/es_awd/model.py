"""Straight-line model of the `es-awd` profile, for tests and goldens (docs/numerics.md §3).

numpy (with ml_dtypes), one rounding per spec line, on the primitives of
esverify.es.algebra; nothing of the kernels it checks
(esverify.references.es_awd.profile). The one fused operation (`fma32`)
is computed in exact rational arithmetic and rounded once to f32 by hand.
Registered as this reference's `MODEL`, so that esverify.es.reference's
whole operations run it for ``cfg["profile"] == "es-awd"``; its CPU rule is `cpu`.

Checks: ``python -m pytest -q tests/test_es_kernels.py`` (the trainer and
the profile's scaled add against it, bitwise, both rules).
"""
from __future__ import annotations

import numpy as np

from esverify.es.algebra import NP_DTYPES, Model, dtype_name, f32, fma32, rd, rd32s

#: the CPU rule's tail: the last numel % 32 elements of the whole tensor take the unfused lines
TAIL_BLOCK = 32
CPU_RULE = "cpu"


def k_of(a: float, name: str) -> np.float32:
    """es-awd's scalar: rd32(a) for f32, f32(rd_dt(rd32(a))) for f16/bf16."""
    return rd32s(a) if name == "f32" else np.float32(np.array(rd32s(a)).astype(NP_DTYPES[name]))


def scaled_add(x: np.ndarray, y: np.ndarray, a: float, rule: str) -> np.ndarray:
    """x + a*y, rule "cpu" (tail of 32 on the whole tensor) or "cuda" (docs/numerics.md §3)."""
    name = dtype_name(x)
    xf, yf = f32(x).reshape(-1), f32(y).reshape(-1)
    n = xf.size
    if rule == "cuda" or name == "f32":
        return rd(fma32(xf, yf, rd32s(a)), name).reshape(x.shape)
    if rule != "cpu":
        raise ValueError(f"unknown rule {rule!r}")
    k = k_of(a, name)
    split = TAIL_BLOCK * (n // TAIL_BLOCK)
    body = rd(fma32(xf[:split], yf[:split], k), name)
    tail = rd(xf[split:] + f32(rd(yf[split:] * k, name)), name)
    return np.concatenate([body, tail]).reshape(x.shape)


def perturb(theta: np.ndarray, eps: np.ndarray, s: float, rule: str = CPU_RULE) -> np.ndarray:
    """theta + s * rd_dt(eps) by `scaled_add` under `rule` (docs/numerics.md §3).

    theta: f32/f16/bf16 array; eps: f32 noise of theta's shape; s: f64
    (+sigma, or -sigma for a regenerate-restore). Returns a new array of
    theta's dtype and shape. ValueError for an unknown rule or dtype.
    """
    return scaled_add(theta, rd(eps, dtype_name(theta)), s, rule)


def update(theta: np.ndarray, eps_list, coeffs, alpha: float, population: int, rule: str = CPU_RULE) -> np.ndarray:
    """The update without decay (docs/numerics.md §3): acc in theta's dtype, then theta + (alpha/N) * acc.

    acc starts at 0 and takes ``scaled_add(acc, rd_dt(eps_n), C_n)`` per
    term, in order; theta then takes ``scaled_add(theta, acc, alpha /
    population)``. eps_list: f32 arrays of theta's shape, one per entry of
    coeffs (f64; already folded to D_k for antithetic pairs); population:
    the divisor N. Returns a new array of theta's dtype. ValueError for an
    unknown rule or dtype.
    """
    name = dtype_name(theta)
    acc = np.zeros(theta.shape, NP_DTYPES[name])
    for eps, c in zip(eps_list, coeffs):
        acc = scaled_add(acc, rd(eps, name), c, rule)
    return scaled_add(theta, acc, alpha / population, rule)


MODEL = Model(name="es-awd", cpu_rule=CPU_RULE, perturb=perturb, update=update)
