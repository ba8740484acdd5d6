"""The sparse, AltEggRoll and EggRollBS noisers in numpy, bit for bit on XLA CPU (docs/hyperscale.md §14).

Keys and draws are those of `noise` (a pair's key, +-sigma by the thread's parity).

- **Sparse**, matrix leaf (a, b): k = max(a, b) entries per pair; with (k1, k2) =
  split(pair key) (under partitionable threefry fold_in(pair key, 0) and 1),
  positions floor(rd(rd(u * a) * b)) as int32 for u = uniform(k1, (k,)) f32, row =
  position // b, column = position % b (with replacement: a position may repeat),
  values rd_dtype(normal(k2, (k,), dtype) * +-sigma). The forward pass adds the
  entries to W one by one in index order (a repeated position's adds rounded in
  turn). The update: per thread, zeros plus rd(f_t * v) scattered in index order;
  the mean over threads (a sequential sum over the leading axis, then the
  constants); g times k/(a*b).
- **AltEggRoll**: EggRoll's factors (`noise.eggroll_factors`); the update uses
  their signs, g = (1/N) sum_t s f_t sign(A_t) sign(B_t)^T with s = sigma/sqrt(r):
  the contraction of +-f_t (exact) with +-1 in XLA's dot order for the shape.
- **EggRollBS**: EggRoll's factors, A times 0 for a thread t with t mod G in
  {0, 1} (G the group size; G = 0 masks every thread, as jnp's integer modulo by
  0 is 0). Its shaping: scores as (N/G, G); each group minus its first score,
  divided by the group's population standard deviation + 1e-8 (a product with
  the rounded reciprocal, as XLA emits it), columns 0 and 1 set to 0, the mean
  over groups: G values, not N.

The updates' f32 arithmetic follows `update`'s rules (jit: s = rd(sigma * rd(1/sqrt r)),
constant factors folded, the step fused into W; eager: each operation rounded).
Sums longer than 32 terms, and dot shapes `update.dot_order` does not know, are a
ValueError unless every sum is exact.
"""
from __future__ import annotations

import math

import numpy as np

from . import jaxrandom as R
from . import noise as N
from . import shaping as S
from . import update as U
from .xlamath import fma32

F32 = np.float32
I32 = np.int32


def sparse_keys(pair_key) -> tuple[np.ndarray, np.ndarray]:
    """(k1, k2) = split(pair key): the positions' key and the values' key, uint32 (2,) each."""
    k = R.split(pair_key, 2)
    return k[0], k[1]


def sparse_positions(k1, shape) -> tuple[np.ndarray, np.ndarray]:
    """(rows, cols), int32 (k,) each, k = max(a, b), of a matrix leaf of `shape` (a, b): floor(u * a * b) of
    an f32 uniform, each product rounded. ValueError for a shape that is not 2-D."""
    if len(shape) != 2 or min(shape) < 1:
        raise ValueError(f"sparse noise needs a 2-D shape of positive sizes, got {shape}")
    a, b = (int(d) for d in shape)
    u = R.uniform(k1, (max(a, b),))
    pos = np.floor(((u * F32(a)).astype(F32) * F32(b)).astype(F32)).astype(I32)
    return pos // I32(b), pos % I32(b)


def sparse_values(draw, sigma: float, thread: int, dtype: str = "f32") -> np.ndarray:
    """rd_dtype(draw * +-sigma) of a pair's (k,) draw, in the dtype's numpy form."""
    return N.scale_draw(draw, sigma, thread, dtype)


def sparse_entries(key, epoch: int, thread: int, shape, sigma: float, dtype: str = "f32", noise_reuse: int = 0,
                   fma: bool = True):
    """(rows, cols, values) of thread `thread` on JAX's own noise, for a leaf with key `key`."""
    k1, k2 = sparse_keys(N.thread_key(key, epoch, thread, noise_reuse))
    rows, cols = sparse_positions(k1, shape)
    return rows, cols, sparse_values(R.normal(k2, (rows.size,), dtype, fma), sigma, thread, dtype)


def sparse_perturbed(w, rows, cols, values, dtype: str = "f32") -> np.ndarray:
    """W plus the entries, added one by one in index order, each add rounded to the dtype (the forward
    pass of one input vector). w: the dtype's values, held in f32 or f16; returns the dtype's numpy form."""
    out = np.array(w, np.float32)
    for r, c, v in zip(rows, cols, np.asarray(values, np.float32)):
        out[r, c] = np.asarray(R.round_to(F32(out[r, c]) + F32(v), dtype), np.float32)
    return R.round_to(out, dtype)


def sparse_estimate(shaped, entries, shape) -> np.ndarray:
    """The sparse noiser's unscaled estimate sum_t scatter(rd(f_t * v_t)) in f32, summed over threads in
    order (each thread's scatter in index order). entries: per thread (rows, cols, values f32)."""
    total = np.zeros(shape, F32)
    f = np.asarray(shaped, F32)
    if f.size > S.WINDOW:
        raise ValueError(f"a mean over {f.size} threads: XLA's order is modelled up to {S.WINDOW}")
    for t, (rows, cols, values) in enumerate(entries):
        dense = np.zeros(shape, F32)
        for r, c, v in zip(rows, cols, np.asarray(values, F32)):
            dense[r, c] = F32(dense[r, c] + F32(f[t] * F32(v)))
        total = (total + dense).astype(F32)
    return total


def sparse_update(w, shaped, entries, lr: float, mode: str = "jit") -> np.ndarray:
    """W2 (f32, W's shape) after one sgd step of the sparse noiser: g = mean_t scatter(f_t v_t) * k/(a b),
    W moves by lr * sqrt(N) * g. jit: the mean's rd(1/N), k/(a b) and sqrt(N) folded into one constant,
    the step fused into W; eager: each product rounded. ValueError for an unknown mode."""
    if mode not in U.MODES:
        raise ValueError(f"mode {mode!r}: want one of {list(U.MODES)}")
    w = np.asarray(w, F32)
    n = np.asarray(shaped).size
    a, b = w.shape
    total = sparse_estimate(shaped, entries, w.shape)
    inv_n, ratio, root_n = F32(1) / F32(n), F32(max(a, b) / (a * b)), F32(math.sqrt(n))
    if mode == "jit":
        g = (total * F32(F32(inv_n * ratio) * root_n)).astype(F32)
        return fma32(g, F32(lr), w)
    g = (((total * inv_n).astype(F32) * ratio).astype(F32) * root_n).astype(F32)
    return (w + (g * F32(lr)).astype(F32)).astype(F32)


def _contracted(xk: np.ndarray, bk: np.ndarray, order: str | None) -> np.ndarray:
    """sum_k xk[m, k] bk[n, k] (thread-major k) in `order`, or XLA's measured order for the shape, or any
    order where every sum is exact; ValueError otherwise."""
    if order is None:
        order = U.dot_order(xk.shape[0], xk.shape[1], bk.shape[0])
    if order is None:
        if not U.sums_exact(xk, bk):
            raise ValueError(f"XLA's dot order for {xk.shape[0]}x{xk.shape[1]}x{bk.shape[0]} is not modelled and "
                             f"the sums are not exact: name an order or keep every sum exact")
        order = "seq"
    return U.contract(xk, bk, order)


def alteggroll_update_from_draws(w, shaped, draws, sigma: float, lr: float, rank: int,
                                 mode: str = "jit", order: str | None = None) -> np.ndarray:
    """W2 (f32) after one AltEggRoll sgd update from the threads' raw (d0 + d1, r) f32 draws (pairs share
    one; the sign by the thread's parity): G = contraction of +-f_t sign(draw_A) with sign(draw_B), then
    g = G * s / N * sqrt(N). order: `update.contract`'s, None for `update.dot_order` (ValueError where
    neither it nor exact sums apply)."""
    if mode not in U.MODES:
        raise ValueError(f"mode {mode!r}: want one of {list(U.MODES)}")
    w, f = np.asarray(w, F32), np.asarray(shaped, F32)
    n, (d0, d1), root_r = f.size, w.shape, F32(math.sqrt(rank))
    if len(draws) != n or any(np.shape(d) != (d0 + d1, rank) for d in draws):
        raise ValueError(f"want {n} draws of shape {(d0 + d1, rank)}")
    s = F32(F32(sigma) * (F32(1) / root_r)) if mode == "jit" else F32(F32(sigma) / root_r)
    xs, bs = [], []
    for t in range(n):
        d = np.asarray(draws[t], F32)
        xs.append((f[t] * (np.sign(d[d1:]) * F32(1 if t % 2 == 0 else -1))).astype(F32))
        bs.append(np.sign(d[:d1]).astype(F32))
    big = (_contracted(np.concatenate(xs, axis=1), np.concatenate(bs, axis=1), order) * s).astype(F32)
    root_n = F32(math.sqrt(n))
    if mode == "jit":
        g = (big * F32((F32(1) / F32(n)) * root_n)).astype(F32)
        return fma32(g, F32(lr), w)
    g = ((big / F32(n)).astype(F32) * root_n).astype(F32)
    return (w + (g * F32(lr)).astype(F32)).astype(F32)


def bs_live(thread: int, group_size: int) -> bool:
    """Whether EggRollBS gives thread `thread` noise: its index mod the group size is not 0 or 1 (jnp's modulo
    by 0 is 0: no thread has noise at group size 0)."""
    slot = thread % group_size if group_size else 0
    return slot not in (0, 1)


def eggrollbs_factors(key, epoch: int, thread: int, shape, rank: int, scale: float, group_size: int,
                      dtype: str = "f32", noise_reuse: int = 0, fma: bool = True):
    """EggRollBS's (A (d0, r), B (d1, r)): EggRoll's, A zero (signed) for a masked thread (`bs_live`)."""
    if bs_live(thread, group_size):
        return N.eggroll_factors(key, epoch, thread, shape, rank, scale, dtype, noise_reuse, fma)
    d1 = int(shape[1])
    draw = R.normal(N.thread_key(key, epoch, thread, noise_reuse), (int(shape[0]) + d1, rank), dtype, fma)
    return N.scale_draw(draw[d1:], 0.0, thread, dtype), draw[:d1]   # +-0: the scale times the mask


def eggrollbs_shaping(scores, group_size: int) -> np.ndarray:
    """EggRollBS's convert_fitnesses (eager f32): G values, the mean over the N/G groups of
    (s - s[first]) / (std(s) + 1e-8) with columns 0 and 1 zero. ZeroDivisionError for group size 0 (as the
    reference), ValueError for a group size that does not divide N or exceeds 32."""
    s = np.asarray(scores).astype(F32)
    if s.ndim != 1 or s.size == 0:
        raise ValueError(f"scores must be a non-empty 1-D array, got shape {s.shape}")
    q = s.size // group_size                      # group size 0: ZeroDivisionError, as the reference
    if group_size < 0 or s.size % group_size or group_size > S.WINDOW or q > S.WINDOW:
        raise ValueError(f"group size {group_size} of {s.size} scores: want a divisor, groups of at most 32")
    rows = s.reshape(q, group_size)
    std = np.sqrt(S.xla_var(rows)).astype(F32)
    den = (std + F32(1e-8)).astype(F32)
    out = ((rows - rows[:, :1]).astype(F32) * (F32(1) / den)[:, None]).astype(F32)   # XLA: x * rd(1/den)
    out[:, :2] = 0
    return S.xla_mean(out.T)
