"""Straight-line algebra reference of the trainer, for tests and goldens (docs/numerics.md §2-§5).

numpy (with ml_dtypes for bfloat16), one rounding per spec line, no
chunking, no torch. The rounding primitives live in esverify.es.algebra
(re-exported here); each Trainer profile's own lines are its reference's
straight-line model (``esverify/references/<name>/model.py``, an
`esverify.es.algebra.Model` registered in esverify.registry), which the
whole operations below look up by ``cfg["profile"]``. Noise comes from the
slow scalar RNG reference (esverify.rng.scalar). Slow on purpose: it exists
to be read beside docs/numerics.md and to pin the trainer's kernels bit for
bit on small tensors.

Arrays are numpy arrays of dtype float32, float16 or ml_dtypes.bfloat16;
every function returns new arrays and changes none of its arguments.
Invariant: nothing here (nor in a model) imports torch or esverify.es's
kernels, so the reference cannot share a bug with the code it checks.

Checks: ``python -m pytest -q tests/test_es_kernels.py tests/test_es_goldens.py``
(the trainer against this module, bitwise; fma32 against exact rationals).
"""
from __future__ import annotations

import numpy as np

from esverify.rng import scalar

from .. import registry
from .algebra import NP_DTYPES, Model, dtype_name, f32, fma32, fma32_scalar, frac_rd32, rd, rd32s

__all__ = ["NP_DTYPES", "Model", "anchor_decay", "dtype_name", "f32", "fma32", "fma32_scalar", "frac_rd32", "model",
           "noise", "perturb", "rd", "rd32s", "shape", "update"]


def model(profile: str) -> Model:
    """The straight-line model registered for Trainer profile `profile`; ValueError naming the known ones."""
    models = registry.models()
    if profile not in models:
        raise ValueError(f"no straight-line model for profile {profile!r}; known: {sorted(models)}")
    return models[profile]


def _sign(d32: np.ndarray) -> np.ndarray:
    return np.where(d32 > 0, np.float32(1), np.where(d32 < 0, np.float32(-1), np.float32(0)))


def anchor_decay(theta: np.ndarray, anchor: np.ndarray, kind: str, a: float, rule: str | None = None) -> np.ndarray:
    """docs/numerics.md §5, line by line; a = alpha * lambda (f64); rule `cuda`: the l1 step stays f32."""
    name = dtype_name(theta)
    d = rd(f32(theta) - f32(anchor), name)
    if kind == "l2":
        d = rd(f32(d) * rd32s(1.0 - a), name)
    elif kind == "l1":
        b = rd32s(a) if name == "f32" or rule == "cuda" else f32(rd(np.float32(a), name))
        u = rd(np.abs(f32(d)) - b, name)
        v = np.where(f32(u) >= 0, f32(u), np.float32(0.0))
        d = rd(_sign(f32(d)) * v, name)
    else:
        raise ValueError(f"unknown decay {kind!r}")
    return rd(f32(d) + f32(anchor), name)


# -- shaping and noise -------------------------------------------------------
def shape(rewards, shaping: str) -> np.ndarray:
    """docs/numerics.md §2, per member in Python floats (numpy's mean/std for z-score)."""
    r = np.ascontiguousarray(rewards, dtype=np.float64)
    n = len(r)
    if shaping == "zscore":
        from .shaping import check_zscore
        with np.errstate(all="ignore"):
            mean, std = float(np.mean(r)), float(np.std(r))
        coeffs = np.array([(float(x) - mean) / (std + 1e-8) for x in r])
        check_zscore(r, mean, std, coeffs)   # an f64 overflow is refused, never a silent no-op step
        return coeffs
    if shaping == "centered_ranks":
        order = sorted(range(n), key=lambda m: (float(r[m]), m))
        out = np.empty(n)
        for k, m in enumerate(order):
            c = np.float32(k / (n - 1))
            out[m] = float(np.float32(c - np.float32(0.5)))
        return out
    if shaping == "none":
        return r.copy()
    raise ValueError(f"unknown shaping {shaping!r}")


def noise(cfg: dict, iteration: int, member: int, slot: int, numel: int) -> np.ndarray:
    """The f32 noise of (iteration, member, slot): docs/CONTRACT.md §4 with the antithetic member map.

    cfg: a Config.to_dict() (seed, population, antithetic, scheme, mapping
    are read). Returns an f32 array of shape (numel,), elements 0 ..
    numel-1 of the stream, from the scalar reference (about 150k elements/s for poly32).
    """
    m = member - member % 2 if cfg["antithetic"] else member
    ms = scalar.member_seed(cfg["seed"], iteration, cfg["population"], m)
    ss = scalar.stream_seed(ms, slot, cfg["scheme"])
    return np.asarray(scalar.gaussian(ss, numel, 0, cfg["mapping"]), np.float32)


# -- whole operations on a parameter list --------------------------------------
def perturb(cfg: dict, params: list, iteration: int, member: int, restore: bool = False,
            rule: str | None = None) -> list:
    """params after perturb(member) (or its regenerate-restore when `restore`) (docs/numerics.md §3-§4).

    cfg: a Config.to_dict(); params: numpy arrays in slot order. The odd
    member of an antithetic pair applies -sigma. rule: as for `update`.
    Returns new arrays of the params' dtypes and shapes.
    """
    lines = model(cfg["profile"])
    sign = -1.0 if cfg["antithetic"] and member % 2 else 1.0
    s = sign * cfg["sigma"] * (-1.0 if restore else 1.0)
    out = []
    for slot, p in enumerate(params):
        eps = noise(cfg, iteration, member, slot, p.size).reshape(p.shape)
        out.append(lines.perturb(p, eps, s, rule or lines.cpu_rule))
    return out


def update(cfg: dict, params: list, iteration: int, rewards, anchor: list | None = None,
           rule: str | None = None) -> tuple[list, np.ndarray]:
    """(params after update(rewards) at `iteration`, the shaped coefficients) (docs/numerics.md §1-§5).

    cfg: a Config.to_dict(); params: numpy arrays in slot order; rewards: N
    floats in member order; anchor: theta0 arrays in slot order (needed
    only when decay is on); rule: None for the profile's CPU rule
    ("portable" / "cpu"), or "cuda". Antithetic pairs fold to D_k = C_2k -
    C_2k+1 in f64 with divisor N. Returns new arrays (same dtypes) and the
    f64 coefficients of shape (N,). No validation: feed it valid configs.
    """
    lines = model(cfg["profile"])
    coeffs = shape(rewards, cfg["shaping"])
    n = cfg["population"]
    if cfg["antithetic"]:
        terms = [(2 * k, float(coeffs[2 * k] - coeffs[2 * k + 1])) for k in range(n // 2)]
    else:
        terms = list(enumerate(float(c) for c in coeffs))
    decay_on = cfg["anchor_decay"] != "none" and cfg["anchor_lambda"] > 0
    from .profiles import get_profile
    # the decay reads the rule only where the profile has it (es-at-scale's one rule is device-independent)
    decay_rule = rule if rule in get_profile(cfg["profile"]).rules else None
    out = []
    for slot, p in enumerate(params):
        eps_list = [noise(cfg, iteration, m, slot, p.size).reshape(p.shape) for m, _ in terms]
        cs = [c for _, c in terms]
        new = lines.update(p, eps_list, cs, cfg["alpha"], n, rule or lines.cpu_rule)
        if decay_on:
            new = anchor_decay(new, anchor[slot], cfg["anchor_decay"], cfg["alpha"] * cfg["anchor_lambda"], decay_rule)
        out.append(new)
    return out, coeffs
