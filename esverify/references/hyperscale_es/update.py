"""One EggRoll update (`do_updates`, sgd) of a matrix leaf, as XLA CPU computes it (docs/hyperscale.md §8).

The estimate: with A_t carrying +-s (s = sigma/sqrt(r)) and B_t from the
thread's draw (`noise.eggroll_factors`), G = sum over threads t and rank j
of (f_t A_t)[:, j] (x) B_t[:, j] (the contraction over (thread, rank),
thread-major), g = G/N, and sgd moves W by lr * sqrt(N) * g.

Arithmetic (jaxlib 0.10.2, x86 with FMA), in f32:

- jit (as the test and the LLM loop run it): s = rd(sigma * rd(1/rd(sqrt r)))
  (XLA turns the division by a constant into a product with its rounded
  reciprocal); A_t = rd(draw * +-s); X_t = rd(f_t * A_t); G by the dot
  order XLA picks for the shape (below); g = rd(G * rd(rd(1/N) * rd(sqrt N)));
  W2 = fma(g, lr, W): optax's step and the add fused, never rounded alone.
- eager: s = rd(sigma / rd(sqrt r)); the same A_t, X_t and G;
  g = rd(rd(G / N) * rd(sqrt N)); W2 = rd(W + rd(g * lr)).

bf16/f16 (`update_from_draws`' dtype): s rounded to the dtype; A_t exact in
f32, rounded to the dtype except for bf16 under jit (XLA's excess
precision); X_t, the dot and the scaled estimate in f32, the estimate
rounded to the dtype, then the step rd(g * rd(lr)) and the add each rounded.

The dot's order depends on the product's shape M x K x N (M = d0, K = N
threads times r, N = d1), as measured: "seq", fma accumulation from 0 in
k order, for a single row and for 33x192x17, 40x128x24, 64x256x64; "acc4",
four accumulators taking k round-robin, combined as ((a0 + a1) + (a2 + a3)),
at K 16 with 2-64 rows and 5-16 columns and at 64x16x17; "acc2" (two
accumulators) at 64x16x32. Other shapes are a ValueError, unless every
sum is exact (all products multiples of one power of two whose total
magnitude fits 24 bits), where every order gives the same bits.
"""
from __future__ import annotations

import math

import numpy as np

from . import jaxrandom as R
from . import noise as N
from .xlamath import fma32

F32 = np.float32
ORDERS = ("seq", "acc4", "acc2")
MODES = ("jit", "eager")
_SEQ_SHAPES = {(33, 192, 17), (40, 128, 24), (64, 256, 64)}


def _inputs(w, shaped, draws, rank):
    """(w f32, shaped f32, n, d0, d1, f32 sqrt(rank)) of an update's inputs; ValueError unless there are n
    draws of shape (d0 + d1, rank), one per shaped score."""
    w = np.asarray(w, F32)
    f = np.asarray(shaped, F32)
    n = f.size
    d0, d1 = w.shape
    if len(draws) != n or any(np.shape(d) != (d0 + d1, rank) for d in draws):
        raise ValueError(f"want {n} draws of shape {(d0 + d1, rank)}")
    return w, f, n, d0, d1, F32(math.sqrt(rank))


def dot_order(m: int, k: int, n: int) -> str | None:
    """The measured accumulation order of XLA CPU's f32 dot of shape m x k x n, or None (not measured)."""
    if m == 1 or (m, k, n) in _SEQ_SHAPES:
        return "seq"
    if k == 16 and (2 <= m <= 64 and 5 <= n <= 16 or (m, n) == (64, 17)):
        return "acc4"
    if (m, k, n) == (64, 16, 32):
        return "acc2"
    return None


def _lowest_bit(v: np.ndarray) -> np.ndarray:
    """Exponent of the lowest set bit of each nonzero finite f64 (normal) value."""
    u = np.abs(v).view(np.uint64)
    e = ((u >> np.uint64(52)) & np.uint64(0x7FF)).astype(np.int64)
    mant = (u & np.uint64((1 << 52) - 1)) | np.uint64(1 << 52)
    low = mant & (~mant + np.uint64(1))
    return e - 1075 + np.log2(low.astype(np.float64)).astype(np.int64)


def sums_exact(xk: np.ndarray, bk: np.ndarray) -> bool:
    """Whether every partial sum of sum_k xk[m, k] * bk[n, k], in any order, is exact in f32."""
    terms = xk.astype(np.float64)[:, None, :] * bk.astype(np.float64)[None, :, :]
    nz = terms != 0
    if not nz.any():
        return True
    low = np.where(nz, _lowest_bit(np.where(nz, terms, 1.0)), 10**6).min(axis=2)
    total = np.abs(terms).sum(axis=2)          # a bound: exact enough to compare with a power of two
    return bool(np.all((total < np.ldexp(1.0, np.minimum(low, 1000) + 24)) | ~nz.any(axis=2)))


def contract(xk: np.ndarray, bk: np.ndarray, order: str) -> np.ndarray:
    """G[m, n] = sum_k xk[m, k] * bk[n, k] in f32, fma-accumulated in `order` ("seq", "acc4", "acc2")."""
    if order not in ORDERS:
        raise ValueError(f"dot order {order!r} is not modelled; known: {list(ORDERS)}")
    lanes = 1 if order == "seq" else int(order[3:])
    acc = [np.zeros((xk.shape[0], bk.shape[0]), F32) for _ in range(lanes)]
    for k in range(xk.shape[1]):
        acc[k % lanes] = fma32(xk[:, k][:, None], bk[:, k][None, :], acc[k % lanes])
    while len(acc) > 1:
        acc = [(acc[2 * i] + acc[2 * i + 1]).astype(F32) for i in range(len(acc) // 2)]
    return acc[0]


def update_from_draws(w, shaped, draws, sigma: float, lr: float, rank: int, mode: str = "jit",
                      order: str | None = None, dtype: str = "f32",
                      excess_precision: bool | None = None) -> np.ndarray:
    """W2 (W's shape (d0, d1), in the dtype's numpy form) from the threads' raw draws (each (d0 + d1, r)
    in the dtype; pairs share one).

    shaped: the N shaped fitnesses (f32, `shaping.convert_fitnesses`); draws: N arrays, thread t's draw
    (its sign comes from t's parity). order None: `dot_order` of the shape, else exact sums, else
    ValueError. dtype "f32", "bf16" or "f16" (§8's low-precision rules); excess_precision (bf16/f16
    only): whether A = draw * s stays unrounded in f32 (None: True for bf16 under jit, XLA's default;
    False otherwise, as eager runs and `--xla_allow_excess_precision=false`)."""
    if mode not in MODES:
        raise ValueError(f"mode {mode!r}: want one of {list(MODES)}")
    if dtype != "f32":
        return _update_low(w, shaped, draws, sigma, lr, rank, mode, order, dtype,
                           mode == "jit" and dtype == "bf16" if excess_precision is None else excess_precision)
    w, f, n, d0, d1, root_r = _inputs(w, shaped, draws, rank)
    s = F32(F32(sigma) * (F32(1) / root_r)) if mode == "jit" else F32(F32(sigma) / root_r)
    xs, bs = [], []
    for t in range(n):
        d = np.asarray(draws[t], F32)
        a = (d[d1:] * (s if t % 2 == 0 else -s)).astype(F32)
        xs.append((f[t] * a).astype(F32))
        bs.append(d[:d1])
    return _finish_f32(w, xs, bs, n, rank, mode, order, lr)


def contracted(xs, bs, n: int, rank: int, order: str | None) -> np.ndarray:
    xk = np.concatenate(xs, axis=1)           # (d0, N*r), thread-major
    bk = np.concatenate(bs, axis=1)           # (d1, N*r)
    d0, d1 = xk.shape[0], bk.shape[0]
    if order is None:
        order = dot_order(d0, n * rank, d1)
        if order is None:
            if not sums_exact(xk, bk):
                raise ValueError(f"XLA's dot order for {d0}x{n * rank}x{d1} is not modelled and the sums are "
                                 f"not exact: name an order or keep every sum exact")
            order = "seq"
    return contract(xk, bk, order)


def scaled_estimate(g: np.ndarray, n: int, mode: str) -> np.ndarray:
    """sqrt(N) * G / N in f32: one product with the folded constant under jit, two roundings eager."""
    root_n = F32(math.sqrt(n))
    if mode == "jit":
        return (g * F32((F32(1) / F32(n)) * root_n)).astype(F32)
    return ((g / F32(n)).astype(F32) * root_n).astype(F32)


def _finish_f32(w, xs, bs, n, rank, mode, order, lr) -> np.ndarray:
    g = scaled_estimate(contracted(xs, bs, n, rank, order), n, mode)
    if mode == "jit":
        return fma32(g, F32(lr), w)
    return (w + (g * F32(lr)).astype(F32)).astype(F32)


def _update_low(w, shaped, draws, sigma, lr, rank, mode, order, dtype, excess) -> np.ndarray:
    """bf16/f16: s rounded to the dtype; A = draw * +-s (exact in f32; rounded to the dtype unless
    `excess`); X_t = rd32(f_t * A); the f32 dot; the estimate rounded to the dtype; the step
    rd(g * rd(lr)) and the add each rounded to the dtype."""
    rd = R.round_to
    w, f, n, d0, d1, root_r = _inputs(w, shaped, draws, rank)
    s32 = F32(F32(sigma) * (F32(1) / root_r)) if mode == "jit" else F32(F32(sigma) / root_r)
    s = F32(np.asarray(rd(s32, dtype), F32))
    xs, bs = [], []
    for t in range(n):
        d = np.asarray(draws[t], F32)
        a = (d[d1:] * (s if t % 2 == 0 else -s)).astype(F32)
        if not excess:
            a = np.asarray(rd(a, dtype), F32)
        xs.append((f[t] * a).astype(F32))
        bs.append(d[:d1])
    g = np.asarray(rd(scaled_estimate(contracted(xs, bs, n, rank, order), n, mode), dtype), F32)
    step = np.asarray(rd((g * np.asarray(rd(F32(lr), dtype), F32)).astype(F32), dtype), F32)
    return rd((w + step).astype(F32), dtype)


def eggroll_update(w, shaped, key, epoch: int, sigma: float, lr: float, rank: int, noise_reuse: int = 0,
                   mode: str = "jit", order: str | None = None, fma: bool = True, dtype: str = "f32",
                   excess_precision: bool | None = None) -> np.ndarray:
    """One sgd update of a matrix leaf (values of `dtype`) with leaf key `key` on JAX's own noise
    (`noise.thread_key`); see `update_from_draws`.

    fma: the host's FMA for the noise (the update's own fused operations are those of a host with FMA)."""
    w = np.asarray(w, F32)
    d0, d1 = w.shape
    draws = [np.asarray(R.normal(N.thread_key(key, epoch, t, noise_reuse), (d0 + d1, rank), dtype, fma), F32)
             for t in range(np.asarray(shaped).size)]
    return update_from_draws(w, shaped, draws, sigma, lr, rank, mode, order, dtype, excess_precision)
