"""Straight-line reference of the `skill-sample` profile, for tests and goldens (docs/numerics.md §8).

numpy (with ml_dtypes for bfloat16), one rounding per spec line, no torch,
nothing imported from the kernels it checks (esverify.references.skill_sample.profile,
esverify.references.skill_sample.loop): the utilities are rebuilt here from their
formula, the noise comes from numpy's RandomState (native) or from the slow
scalar RNG reference (esverify.rng.scalar; contract). Slow on purpose
(contract noise is one Python call per element): keep vectors to a few
hundred elements.

Parameters are 1-D numpy arrays of float32, float16 or ml_dtypes.bfloat16;
every function returns new arrays and changes none of its arguments.

Checks: ``python -m pytest -q tests/test_skill_sample_profile.py`` (the
kernels and the loop against this module, bitwise) and
``esverify goldens check --area skill-sample`` (generated from it).
"""
from __future__ import annotations

import math

import numpy as np

from esverify.es.algebra import NP_DTYPES, dtype_name
from esverify.rng import scalar

GLOBAL_POPULATION = 30


def rd32(x) -> np.ndarray:
    """rd32: f64 (or exact narrower) values rounded once to f32; beyond its range +-inf."""
    with np.errstate(over="ignore"):
        return np.asarray(x, dtype=np.float64).astype(np.float32)


def rd(x32, name: str) -> np.ndarray:
    """rd_dt: f32 values rounded once to dtype `name` (identity for f32); beyond its range +-inf, as IEEE says."""
    with np.errstate(over="ignore"):
        return np.asarray(x32, dtype=np.float32).astype(NP_DTYPES[name])


def f32(x) -> np.ndarray:
    """Exact widening of f32/f16/bf16 values to f32."""
    return np.asarray(x).astype(np.float32)


def utilities() -> np.ndarray:
    """The page's global: max(0, log(16) - log(i+1)) for i < 30 by math.log, as f64, divided by its numpy sum."""
    u = np.array([max(0, math.log(GLOBAL_POPULATION / 2 + 1) - math.log(i + 1)) for i in range(GLOBAL_POPULATION)],
                 dtype=np.float64)
    return u / u.sum()


def noise(seed: int, n: int, kind: str, mapping: str = "poly32") -> np.ndarray:
    """f64 noise of one seed: RandomState(seed).randn(n) ("native") or the scalar contract stream ("contract")."""
    if kind == "native":
        return np.random.RandomState(seed).randn(n)
    if kind == "contract":
        stream = scalar.stream_seed(seed, 0, "correlated")
        return np.array(scalar.gaussian(stream, n, 0, mapping), dtype=np.float32).astype(np.float64)
    raise ValueError(f"unknown noise {kind!r}")


def perturb(params: np.ndarray, eps: np.ndarray, sigma: float) -> np.ndarray:
    """q = rd_dt(rd32(eps)); t = rd_dt(rd32(f32(q) * rd32(sigma))); rd_dt(rd32(f32(params) + f32(t)))."""
    name = dtype_name(params)
    q = rd(rd32(eps), name)
    t = rd(f32(q) * np.float32(sigma), name)
    return rd(f32(params) + f32(t), name)


def update(params: np.ndarray, eps_list, z: np.ndarray, weights: np.ndarray, lr: float, sigma: float) -> np.ndarray:
    """acc = 0 (f64); acc = acc + (w_m * eps_m) * z_m per member; a = rd_dt(rd32(acc));
    step = rd_dt(rd32(f32(a) * rd32(lr / sigma))); rd_dt(rd32(f32(params) + f32(step)))."""
    name = dtype_name(params)
    acc = np.zeros(params.shape, dtype=np.float64)
    for m, eps in enumerate(eps_list):
        acc = acc + (weights[m] * eps) * z[m]
    a = rd(rd32(acc), name)
    step = rd(f32(a) * np.float32(lr / sigma), name)
    return rd(f32(params) + f32(step), name)


def zscore(rewards) -> np.ndarray:
    """(r - mean) / (std + 1e-8) with numpy's mean and ddof-0 std of the f64 rewards."""
    r = np.array(rewards, dtype=np.float64)
    return (r - np.mean(r)) / (np.std(r) + 1e-8)


def run(params: np.ndarray, rewards_per_generation, population: int, sigma: float, lr: float, seed_base: int,
        kind: str, mapping: str = "poly32") -> list[dict]:
    """The loop with PRESCRIBED rewards (one list of N per generation), for goldens.

    Returns one dict per generation: "model" (the last member's perturbed
    vector), "z" (f64), "params" (after the update). The perturbed vectors
    are computed (they are what a reward function would see) but the
    rewards are taken from `rewards_per_generation`.
    """
    weights = utilities()
    out = []
    for g, rewards in enumerate(rewards_per_generation):
        seeds = [seed_base + g * population + m for m in range(population)]
        eps_list = [noise(s, params.size, kind, mapping) for s in seeds]
        model = perturb(params, eps_list[-1], sigma)
        z = zscore(rewards)
        params = update(params, eps_list, z, weights, lr, sigma)
        out.append({"model": model, "z": z, "params": params})
    return out
