"""A noiser's `do_updates` on a parameter tree (several leaves, es_map codes, scanned leaves), sgd or adamw, in
numpy, bit for bit as XLA CPU computes it (docs/hyperscale.md §5, §8).

The tree is a dict of name -> f32 array (nested dicts allowed); its leaves are taken in JAX's
flatten order (dict keys sorted), leaf i having key fold_in(base, i). Per leaf, by its es_map code:

- MM_PARAM (1): EggRoll's low-rank estimate (.update: A_t = draw * +-sigma/sqrt(r), X_t = f_t A_t, the
  contraction over (thread, rank) in XLA's measured order for the shape, or exact sums);
- PARAM (0): the full-rank estimate, mean over threads of f_t * rd(draw_t * +-sigma): the products and
  the sum over threads in thread order from 0 (fma-accumulated under jit, rounded products eager;
  population <= 32, the reduction order measured for that length); jitted on JAX's own noise, the draw
  is fused into a reduction LLVM vectorises (`FUSED_LANES`);
- EMB_PARAM (2), EXCLUDED (3): zero gradient.

Every estimate becomes the gradient -sqrt(N) * g (jit: one product with rd(rd(1/N) * rd(sqrt N));
eager: rd(rd(G/N) * rd(sqrt N))), then one optimiser step on the whole tree (.optim: sgd, or adamw, whose
arithmetic depends on the number of leaves). A leaf with scan_map (0,) holds stacked slices along its
leading axis, slice l keyed fold_in(leaf key, l), each estimated as a separate 2-D leaf.

Limits: f32 only (the low-precision rules of .update hold for a single sgd matrix leaf); a jitted PARAM
leaf on JAX's own noise is modelled for the populations of FUSED_LANES (1 to 8), a ValueError for
others and for a one-element leaf, as is jitted adamw on a tree with a one-element leaf.

Public entry: `tree_update(params, es_map, shaped, draws_by_leaf, sigma, lr, rank, mode, solver,
opt_state)` -> (new params, new opt_state); `leaf_keys` and `native_draws` build the draws of JAX's noise.
"""
from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from . import jaxrandom as R
from . import noise as N
from . import optim as O
from . import update as U
from .xlamath import erf_inv32, fma32

F32 = np.float32
PARAM, MM_PARAM, EMB_PARAM, EXCLUDED = 0, 1, 2, 3
CODES = (PARAM, MM_PARAM, EMB_PARAM, EXCLUDED)
SOLVERS = ("sgd", "adamw")
#: the longest population whose full-rank reduction order (sequential from 0) was measured
MAX_PARAM_THREADS = 32
#: jitted, on JAX's own noise (the draw fused into the reduction over threads), LLVM vectorises that
#: reduction: population -> accumulator lanes (thread t into lane t mod lanes, fma; the lanes then halved
#: pairwise, lane i + half into lane i). Up to 7 threads: one lane, sequential; 8: eight lanes. Measured on
#: leaves of 4 to 64 elements; 16, 24 and 32 threads take these lanes on wide leaves only (not modelled).
FUSED_LANES = {**{n: 1 for n in range(1, 8)}, 8: 8}


def flatten(tree, prefix: str = "") -> list[tuple[str, object]]:
    """[(path, leaf)] of a nested dict in JAX's flatten order (keys sorted); paths join keys with '/'."""
    if not isinstance(tree, dict):
        return [(prefix, tree)]
    out = []
    for k in sorted(tree):
        out.extend(flatten(tree[k], f"{prefix}/{k}" if prefix else str(k)))
    return out


def unflatten(like, values: dict, prefix: str = ""):
    """The nested dict shaped like `like` whose leaves are `values[path]`."""
    if not isinstance(like, dict):
        return values[prefix]
    return {k: unflatten(v, values, f"{prefix}/{k}" if prefix else str(k)) for k, v in like.items()}


def leaf_keys(base_key, params, scan_map=None) -> dict:
    """{path: key}: leaf i (flatten order) gets fold_in(base, i); a scanned leaf (scan_map (0,)) a (n, 2) array,
    row l = fold_in(leaf key, l) for the n slices of its leading axis."""
    scans = dict(flatten(scan_map)) if scan_map is not None else {}
    out = {}
    for i, (path, leaf) in enumerate(flatten(params)):
        k = N.leaf_key(base_key, i)
        if tuple(scans.get(path, ()) or ()) == (0,):
            k = np.stack([R.fold_in(k, layer) for layer in range(np.shape(leaf)[0])])
        out[path] = k
    return out


def _draw_shape(shape, code: int, rank: int):
    return (shape[0] + shape[1], rank) if code == MM_PARAM else tuple(shape)


def native_draws(params, es_map, keys: dict, epoch: int, n: int, rank: int, noise_reuse: int = 0,
                 fma: bool = True) -> dict:
    """{path: draws} of JAX's own f32 noise (.jaxrandom) for `n` threads: per leaf a list of n draws (thread t's,
    pairs sharing one; a PARAM leaf's a `FullRankDraw`), per scanned leaf (key of shape (L, 2)) a list over
    slices of such lists, None for a leaf with zero gradient. keys: `leaf_keys`' (or keys a run recorded, as
    uint32 words); fma: the host's (.rows.host_fma)."""
    codes = dict(flatten(es_map))
    out = {}
    for path, leaf in flatten(params):
        code, key = codes[path], np.asarray(keys[path], np.uint32)
        if code not in (PARAM, MM_PARAM):
            out[path] = None
            continue

        def draws(k, shape):
            def one(key):
                if code == PARAM:
                    return full_rank_draw(key, shape, fma)
                return R.normal(key, _draw_shape(shape, code, rank), "f32", fma)
            pairs = [one(N.thread_key(k, epoch, 2 * p, noise_reuse)) for p in range((n + 1) // 2)]
            return [pairs[t // 2] for t in range(n)]

        shape = np.shape(leaf)
        out[path] = [draws(k, shape[1:]) for k in key] if key.ndim == 2 else draws(key, shape)
    return out


def _scale_estimate(total: np.ndarray, n: int, mode: str) -> np.ndarray:
    """sqrt(N) * total / N: the folded constant under jit, two roundings eager (.update's rule)."""
    return U.scaled_estimate(np.asarray(total, F32), n, mode)


class FullRankDraw(NamedTuple):
    """JAX's own f32 draw of a PARAM leaf: the normal (rd(sqrt2 * e)) and e = erf_inv(u) behind it. Under jit XLA
    fuses the draw into the update and folds the constant sqrt2 into the thread's scale, so a model needs e; a
    served (contract) draw is a plain array, opaque to XLA."""
    normal: np.ndarray
    erf_inv: np.ndarray


def full_rank_draw(key, shape, fma: bool = True) -> FullRankDraw:
    """jax.random.normal(key, shape) in f32 with its erf_inv part (.jaxrandom's arithmetic)."""
    u = R.scaled_uniform(R.unit_from_bits(R.random_bits(key, 32, tuple(shape)), "f32"), "f32", -(1 - 2.0**-24), 1.0)
    e = erf_inv32(np.asarray(u, F32), fma)
    return FullRankDraw((F32(math.sqrt(2)) * e).astype(F32), e)


def full_rank_estimate(f, draws, sigma: float, mode: str) -> np.ndarray:
    """sqrt(N) * mean_t f_t * noise_t in f32 (a PARAM leaf's g; the gradient is its negation), noise_t =
    rd(draw_t * +-sigma). The sum over threads runs from 0 in thread order (measured up to MAX_PARAM_THREADS),
    fma-accumulated under jit. Under jit a `FullRankDraw` (JAX's own draw) is fused into the reduction and XLA
    folds the normal's sqrt2 into the thread's scale: noise_t = rd(e_t * rd(+-sigma * sqrt2)), the sum in
    FUSED_LANES' vectorised order, a ValueError for a population not there (not modelled)."""
    n = len(draws)
    if n > MAX_PARAM_THREADS:
        raise ValueError(f"{n} threads: the full-rank reduction order is measured up to {MAX_PARAM_THREADS}")
    s = F32(sigma)
    acc, lanes = None, 1
    for t in range(n):
        d, sign = draws[t], (s if t % 2 == 0 else -s)
        if mode == "jit" and isinstance(d, FullRankDraw):
            if n not in FUSED_LANES:
                raise ValueError(f"{n} threads: a jitted PARAM leaf on JAX's own noise is modelled for "
                                 f"{sorted(FUSED_LANES)} threads (XLA fuses the draw into a vectorised reduction; "
                                 f"serve the draws, or run eager)")
            if d.erf_inv.size == 1:
                raise ValueError("a jitted one-element PARAM leaf on JAX's own noise is not modelled (XLA "
                                 "keeps its scale a scalar: another rounding)")
            noise = (d.erf_inv * F32(sign * F32(math.sqrt(2)))).astype(F32)
            lanes = FUSED_LANES[n]
        else:
            noise = (np.asarray(d.normal if isinstance(d, FullRankDraw) else d, F32) * sign).astype(F32)
        acc = [np.zeros(noise.shape, F32) for _ in range(lanes)] if acc is None else acc
        if mode == "jit":
            acc[t % lanes] = fma32(F32(f[t]), noise, acc[t % lanes])
        else:
            acc[0] = (acc[0] + (F32(f[t]) * noise).astype(F32)).astype(F32)
    while len(acc) > 1:
        half = len(acc) // 2
        acc = [(acc[i] + acc[i + half]).astype(F32) for i in range(half)]
    return _scale_estimate(acc[0], n, mode)


def low_rank_estimate(f, draws, shape, sigma: float, rank: int, mode: str, order: str | None = None) -> np.ndarray:
    """sqrt(N) * G / N of an MM_PARAM leaf of `shape` (d0, d1) from its threads' draws ((d0 + d1, r) each), f32:
    .update's arithmetic (s = sigma/sqrt(r) per mode, X_t = f_t A_t, the contraction in XLA's order for the
    shape, or exact sums; ValueError otherwise)."""
    n, (d0, d1) = len(draws), shape
    root_r = F32(math.sqrt(rank))
    s = F32(F32(sigma) * (F32(1) / root_r)) if mode == "jit" else F32(F32(sigma) / root_r)
    xs, bs = [], []
    for t in range(n):
        d = np.asarray(draws[t], F32)
        if d.shape != (d0 + d1, rank):
            raise ValueError(f"thread {t}'s draw has shape {d.shape}, want {(d0 + d1, rank)}")
        xs.append((F32(f[t]) * (d[d1:] * (s if t % 2 == 0 else -s)).astype(F32)).astype(F32))
        bs.append(d[:d1])
    return _scale_estimate(U.contracted(xs, bs, n, rank, order), n, mode)


def _estimate(code: int, f, draws, shape, sigma, rank, mode, order) -> np.ndarray:
    """The leaf's sqrt(N) g (f32, the leaf's shape): zeros for EMB_PARAM and EXCLUDED."""
    if code == MM_PARAM:
        return low_rank_estimate(f, draws, shape, sigma, rank, mode, order)
    if code == PARAM:
        return full_rank_estimate(f, draws, sigma, mode)
    return np.zeros(shape, F32)


def gradients(params, es_map, shaped, draws_by_leaf: dict, sigma: float, rank: int, mode: str = "jit",
              order: str | None = None) -> dict:
    """{path: the leaf's gradient -sqrt(N) g (f32, the leaf's shape)}; a scanned leaf (its draws a list over
    slices) is estimated slice by slice. ValueError for an unknown es_map code or mode."""
    if mode not in U.MODES:
        raise ValueError(f"mode {mode!r}: want one of {list(U.MODES)}")
    f = np.asarray(shaped, F32).ravel()
    codes = dict(flatten(es_map))
    out = {}
    for path, leaf in flatten(params):
        code, shape, draws = codes[path], np.shape(leaf), draws_by_leaf.get(path)
        if code not in CODES:
            raise ValueError(f"leaf {path!r}: es_map code {code!r}, want one of {list(CODES)}")
        if _is_scanned(draws):
            g = np.stack([_estimate(code, f, d, shape[1:], sigma, rank, mode, order) for d in draws])
        else:
            g = _estimate(code, f, draws, shape, sigma, rank, mode, order)
        out[path] = (-g).astype(F32)
    return out


def _is_scanned(draws) -> bool:
    return draws is not None and len(draws) > 0 and isinstance(draws[0], list)


def init_state(params, solver: str = "sgd"):
    """The optimiser state init_noiser builds: None for sgd, {path: optim.AdamState} for adamw."""
    if solver not in SOLVERS:
        raise ValueError(f"solver {solver!r}: want one of {list(SOLVERS)}")
    return None if solver == "sgd" else {path: O.adam_init(leaf) for path, leaf in flatten(params)}


def tree_update(params, es_map, shaped, draws_by_leaf: dict, sigma: float, lr: float, rank: int,
                mode: str = "jit", solver: str = "sgd", opt_state=None, order: str | None = None):
    """One `do_updates` of a tree of f32 leaves: (new params, new optimiser state).

    params: dict (nested allowed) of f32 arrays; es_map: the same tree of codes (PARAM 0, MM_PARAM 1,
    EMB_PARAM 2, EXCLUDED 3); shaped: the N shaped fitnesses (f32, .shaping); draws_by_leaf: {path: draws}
    as `native_draws` gives (thread t's raw draw, pairs sharing one; a list over slices for a scanned leaf;
    None for a zero-gradient leaf); sigma, lr: Python floats (taken as f32); rank: EggRoll's; mode "jit" or
    "eager"; solver "sgd" or "adamw" (optax's defaults but lr); opt_state: None for sgd, else `init_state`'s
    or a previous call's (adamw: None starts at count 0). order: the dot order of every matrix leaf (None:
    measured per shape, else exact sums, else ValueError). Returns params' structure, f32."""
    grads = gradients(params, es_map, shaped, draws_by_leaf, sigma, rank, mode, order)
    flat = flatten(params)
    if solver == "sgd":
        new = {path: O.sgd_step(leaf, grads[path], lr, mode) for path, leaf in flat}
        return unflatten(params, new), None
    if mode == "jit" and any(np.size(leaf) == 1 for _, leaf in flat):
        raise ValueError("jitted adamw on a one-element leaf is not modelled (XLA's scalar kernel fuses the "
                         "second moment differently)")
    state = init_state(params, solver) if opt_state is None else opt_state
    new, states = {}, {}
    scanned = {path for path, d in draws_by_leaf.items() if _is_scanned(d)}
    for path, leaf in flat:
        new[path], states[path] = O.adamw_step(leaf, grads[path], state[path], lr, mode, leaves=len(flat),
                                               grad_fused=path not in scanned)
    return unflatten(params, new), states
