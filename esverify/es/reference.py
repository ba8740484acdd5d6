"""Straight-line algebra reference of the trainer, for tests and goldens (docs/numerics.md §2-§5).

numpy (with ml_dtypes for bfloat16), one rounding per spec line, no
chunking, no torch; the one fused operation of es-awd (`fma32`) is
computed in exact rational arithmetic (`fractions`) and rounded once to
f32 by hand. Noise comes from the slow scalar RNG reference
(esverify.rng.scalar). Slow on purpose: it exists to be read beside docs/numerics.md
and to pin the trainer's kernels bit for bit on small tensors.

Arrays are numpy arrays of dtype float32, float16 or ml_dtypes.bfloat16;
every function returns new arrays and changes none of its arguments.
Invariant: nothing here imports torch or esverify.es's kernels, so the
reference cannot share a bug with the code it checks.

Checks: ``python -m pytest -q tests/test_es_kernels.py tests/test_es_goldens.py``
(the trainer against this module, bitwise; fma32 against exact rationals).
"""
from __future__ import annotations

import math
from fractions import Fraction

import ml_dtypes
import numpy as np

from esverify.rng import scalar

NP_DTYPES = {"f32": np.dtype(np.float32), "f16": np.dtype(np.float16),
             "bf16": np.dtype(ml_dtypes.bfloat16)}
TAIL_BLOCK = 32


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


def k_of(a: float, name: str) -> np.float32:
    """es-awd's scalar: rd32(a) for f32, f32(rd_dt(rd32(a))) for f16/bf16."""
    return rd32s(a) if name == "f32" else np.float32(np.array(rd32s(a)).astype(NP_DTYPES[name]))


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


# -- the profiles, straight line ---------------------------------------------
def at_scale_perturb(theta: np.ndarray, eps: np.ndarray, s: float) -> np.ndarray:
    """es-at-scale: t = rd_dt(rd32(f32(q) * rd32(s))); theta = rd_dt(f32(theta) + f32(t))."""
    name = dtype_name(theta)
    q = f32(rd(eps, name))
    t = rd(q * rd32s(s), name)
    return rd(f32(theta) + f32(t), name)


def at_scale_update(theta: np.ndarray, eps_list, coeffs, alpha: float, population: int) -> np.ndarray:
    """es-at-scale: acc = rd32(acc + rd32(f32(q_n) * rd32(C_n))); acc = rd32(acc * rd32(alpha/N)); add."""
    name = dtype_name(theta)
    acc = np.zeros(theta.shape, np.float32)
    for eps, c in zip(eps_list, coeffs):
        prod = f32(rd(eps, name)) * rd32s(c)
        acc = acc + prod
    acc = acc * rd32s(alpha / population)
    return rd(f32(theta) + f32(rd(acc, name)), name)


def awd_scaled_add(x: np.ndarray, y: np.ndarray, a: float, rule: str) -> np.ndarray:
    """es-awd x + a*y, rule "cpu" (tail of 32 on the whole tensor) or "cuda" (docs/numerics.md §3)."""
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


def awd_perturb(theta: np.ndarray, eps: np.ndarray, s: float, rule: str) -> np.ndarray:
    """es-awd perturb: theta + s * rd_dt(eps) by `awd_scaled_add` under `rule` (docs/numerics.md §3).

    theta: f32/f16/bf16 array; eps: f32 noise of theta's shape; s: f64
    (+sigma, or -sigma for a regenerate-restore). Returns a new array of
    theta's dtype and shape. ValueError for an unknown rule or dtype.
    """
    return awd_scaled_add(theta, rd(eps, dtype_name(theta)), s, rule)


def awd_update(theta: np.ndarray, eps_list, coeffs, alpha: float, population: int, rule: str) -> np.ndarray:
    """es-awd update without decay (docs/numerics.md §3): acc in theta's dtype, then theta + (alpha/N) * acc.

    acc starts at 0 and takes ``awd_scaled_add(acc, rd_dt(eps_n), C_n)`` per
    term, in order; theta then takes ``awd_scaled_add(theta, acc, alpha /
    population)``. eps_list: f32 arrays of theta's shape, one per entry of
    coeffs (f64; already folded to D_k for antithetic pairs); population:
    the divisor N. Returns a new array of theta's dtype. ValueError for an
    unknown rule or dtype.
    """
    name = dtype_name(theta)
    acc = np.zeros(theta.shape, NP_DTYPES[name])
    for eps, c in zip(eps_list, coeffs):
        acc = awd_scaled_add(acc, rd(eps, name), c, rule)
    return awd_scaled_add(theta, acc, alpha / population, rule)


def _sign(d32: np.ndarray) -> np.ndarray:
    return np.where(d32 > 0, np.float32(1), np.where(d32 < 0, np.float32(-1), np.float32(0)))


def anchor_decay(theta: np.ndarray, anchor: np.ndarray, kind: str, a: float) -> np.ndarray:
    """docs/numerics.md §5, line by line; a = alpha * lambda (f64)."""
    name = dtype_name(theta)
    d = rd(f32(theta) - f32(anchor), name)
    if kind == "l2":
        d = rd(f32(d) * rd32s(1.0 - a), name)
    elif kind == "l1":
        b = rd32s(a) if name == "f32" else f32(rd(np.float32(a), name))
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
    numel-1 of the stream, from the scalar reference (~100k elements/s).
    """
    m = member - member % 2 if cfg["antithetic"] else member
    ms = scalar.member_seed(cfg["seed"], iteration, cfg["population"], m)
    ss = scalar.stream_seed(ms, slot, cfg["scheme"])
    return np.asarray(scalar.gaussian(ss, numel, 0, cfg["mapping"]), np.float32)


# -- whole operations on a parameter list --------------------------------------
def _rule(cfg: dict, rule: str | None) -> str:
    return rule or ("portable" if cfg["profile"] == "es-at-scale" else "cpu")


def perturb(cfg: dict, params: list, iteration: int, member: int, restore: bool = False,
            rule: str | None = None) -> list:
    """params after perturb(member) (or its regenerate-restore when `restore`) (docs/numerics.md §3-§4).

    cfg: a Config.to_dict(); params: numpy arrays in slot order. The odd
    member of an antithetic pair applies -sigma. rule: as for `update`.
    Returns new arrays of the params' dtypes and shapes.
    """
    sign = -1.0 if cfg["antithetic"] and member % 2 else 1.0
    s = sign * cfg["sigma"] * (-1.0 if restore else 1.0)
    out = []
    for slot, p in enumerate(params):
        eps = noise(cfg, iteration, member, slot, p.size).reshape(p.shape)
        if cfg["profile"] == "es-at-scale":
            out.append(at_scale_perturb(p, eps, s))
        else:
            out.append(awd_perturb(p, eps, s, _rule(cfg, rule)))
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
    coeffs = shape(rewards, cfg["shaping"])
    n = cfg["population"]
    if cfg["antithetic"]:
        terms = [(2 * k, float(coeffs[2 * k] - coeffs[2 * k + 1])) for k in range(n // 2)]
    else:
        terms = list(enumerate(float(c) for c in coeffs))
    decay_on = cfg["anchor_decay"] != "none" and cfg["anchor_lambda"] > 0
    out = []
    for slot, p in enumerate(params):
        eps_list = [noise(cfg, iteration, m, slot, p.size).reshape(p.shape) for m, _ in terms]
        cs = [c for _, c in terms]
        if cfg["profile"] == "es-at-scale":
            new = at_scale_update(p, eps_list, cs, cfg["alpha"], n)
        else:
            new = awd_update(p, eps_list, cs, cfg["alpha"], n, _rule(cfg, rule))
        if decay_on:
            new = anchor_decay(new, anchor[slot], cfg["anchor_decay"], cfg["alpha"] * cfg["anchor_lambda"])
        out.append(new)
    return out, coeffs


# -- es-paper: the paper's scripts, one torch op per line (docs/numerics.md §3) --
def paper_mul(x: np.ndarray, c: float) -> np.ndarray:
    """es-paper ``x * c`` / ``x.mul_(c)``: rd_dt(rd32(f32(x) * rd32(c))); the scalar is rounded to f32 only."""
    name = dtype_name(x)
    return rd(f32(x) * rd32s(c), name)


def paper_add(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """es-paper ``x.add_(y)``: rd_dt(f32(x) + f32(y)) (x, y of one dtype)."""
    return rd(f32(x) + f32(y), dtype_name(x))


def paper_div(x: np.ndarray, n: int) -> np.ndarray:
    """es-paper ``x.div_(n)``: rd_dt(rd32(f32(x) / rd32(n))), a true division (not x * (1/n))."""
    return rd(f32(x) / rd32s(float(n)), dtype_name(x))


def paper_perturb(theta: np.ndarray, q: np.ndarray, s: float) -> np.ndarray:
    """es-paper ``theta.add_(s * q)``: q is the noise already in theta's dtype; s = +sigma or -sigma."""
    return paper_add(theta, paper_mul(q, s))


def paper_update(theta: np.ndarray, q_list, coeffs, alpha: float, population: int) -> np.ndarray:
    """es-paper update of one parameter: acc = zeros (theta's dtype); acc += q_n * C_n in order;
    acc /= N; theta += alpha * acc, each a separate rounding in theta's dtype (docs/numerics.md §3).

    q_list: noise arrays in theta's dtype (``randn(dtype=dt)``), one per coefficient (f64 values;
    the scripts pass f32 values). Returns a new array of theta's dtype.
    """
    acc = np.zeros(theta.shape, theta.dtype)
    for q, c in zip(q_list, coeffs):
        acc = paper_add(acc, paper_mul(q, c))
    return paper_add(theta, paper_mul(paper_div(acc, population), alpha))


def paper_normalise(member_rewards) -> tuple[np.ndarray, np.ndarray]:
    """(r, normalised) of the paper's loop: r = the f64 member rewards rounded to f32 (the script
    gathers them in an f32 tensor), then numpy's own f32 ``(r - r.mean()) / (r.std() + 1e-8)``."""
    r = np.array([np.float32(x) for x in member_rewards], dtype=np.float32)
    with np.errstate(all="ignore"):
        return r, ((r - r.mean()) / (r.std() + 1e-8)).astype(np.float32)


def paper_seeds(initial_seed: int, iterations: int, population: int) -> list[list[int]]:
    """The per-iteration seed lists of the scripts: numpy's legacy MT19937 seeded once, then
    ``randint(0, 2**30, size=N, dtype=int64)`` per iteration (a private RandomState)."""
    rs = np.random.RandomState(initial_seed)
    return [rs.randint(0, 2 ** 30, size=population, dtype=np.int64).tolist() for _ in range(iterations)]


def paper_contract_noise(seed: int, slot: int, numel: int, iid: bool, mapping: str, name: str) -> np.ndarray:
    """Contract noise of a script's draw: the 30-bit `seed` IS the u64 member seed; the plain scripts
    are `correlated`, the ``_iid`` scripts' ``seed + slot`` is the member's `iid` stream of `slot`;
    ``randn(dtype=dt)`` is the f32 stream rounded to dt (docs/references.md §3, §3a)."""
    ss = scalar.stream_seed(seed, slot, "iid" if iid else "correlated")
    return rd(np.asarray(scalar.gaussian(ss, numel, 0, mapping), np.float32), name)


def paper_loop(params: list, *, iterations: int, population: int, sigma: float, alpha: float,
               initial_seed: int, gpu_threads: int, prompt_rewards, dataset_size: int, draw) -> dict:
    """The scripts' ``main()`` loop, straight line (docs/references.md §6, docs/numerics.md §3).

    params: numpy arrays (f32/f16/bf16) in slot order; draw(seed, slot, shape, name) -> the noise
    array in dtype `name` (``randn`` with the generator seeded `seed`, or `seed + slot` in the iid
    scripts: the caller's draw decides); prompt_rewards(list of arrays) -> per-prompt f64 rewards.
    Returns the tape of esverify.references.es_paper.loop.run_paper_loop with numpy arrays.
    """
    copies = [[p.copy() for p in params] for _ in range(gpu_threads)]
    tape = {"seeds": [], "rewards": [], "normalised": []}
    for seeds in paper_seeds(initial_seed, iterations, population):
        rewards = [0.0] * population
        for start in range(0, population, gpu_threads):
            for j, n in enumerate(range(start, min(population, start + gpu_threads))):
                model = copies[j]
                noises = [draw(seeds[n], k, p.shape, dtype_name(p)) for k, p in enumerate(model)]
                model[:] = [paper_perturb(p, q, sigma) for p, q in zip(model, noises)]
                rewards[n] = sum(prompt_rewards(model)) / dataset_size
                model[:] = [paper_perturb(p, q, -sigma) for p, q in zip(model, noises)]
        r, norm = paper_normalise(rewards)
        before = [[p.copy() for p in c] for c in copies]
        copies[0][:] = [paper_update(p, [draw(seeds[n], k, p.shape, dtype_name(p)) for n in range(population)],
                                     [float(c) for c in norm], alpha, population)
                        for k, p in enumerate(copies[0])]
        for j in range(1, gpu_threads):
            copies[j] = [p.copy() for p in copies[0]]
        tape["seeds"].append(list(seeds))
        tape["rewards"].append(r)
        tape["normalised"].append(norm)
    tape["params"] = copies[0]
    tape["copies_before_update"] = before if iterations else copies
    return tape
