"""Straight-line model of the `es-at-scale` profile, for tests and goldens (docs/numerics.md §3).

numpy (with ml_dtypes), one rounding per spec line, on the primitives of
esverify.es.algebra; nothing of the kernels it checks
(esverify.references.es_at_scale.profile). Registered as this reference's
`MODEL`, so that esverify.es.reference's whole operations run it for
``cfg["profile"] == "es-at-scale"``. Its one rule, `portable`, is accepted
and ignored.

Checks: ``python -m pytest -q tests/test_es_kernels.py`` (the trainer against it, bitwise).
"""
from __future__ import annotations

import numpy as np

from esverify.es.algebra import Model, dtype_name, f32, rd, rd32s

RULE = "portable"


def perturb(theta: np.ndarray, eps: np.ndarray, s: float, rule: str | None = None) -> np.ndarray:
    """t = rd_dt(rd32(f32(q) * rd32(s))); theta = rd_dt(f32(theta) + f32(t)), q = rd_dt(eps); a new array."""
    name = dtype_name(theta)
    q = f32(rd(eps, name))
    t = rd(q * rd32s(s), name)
    return rd(f32(theta) + f32(t), name)


def update(theta: np.ndarray, eps_list, coeffs, alpha: float, population: int, rule: str | None = None) -> np.ndarray:
    """acc = rd32(acc + rd32(f32(q_n) * rd32(C_n))); acc = rd32(acc * rd32(alpha/N)); theta + rd_dt(acc)."""
    name = dtype_name(theta)
    acc = np.zeros(theta.shape, np.float32)
    for eps, c in zip(eps_list, coeffs):
        prod = f32(rd(eps, name)) * rd32s(c)
        acc = acc + prod
    acc = acc * rd32s(alpha / population)
    return rd(f32(theta) + f32(rd(acc, name)), name)


MODEL = Model(name="es-at-scale", cpu_rule=RULE, perturb=perturb, update=update)
