"""The noisers' key tree and EggRoll's low-rank factors, from JAX's own noise (docs/hyperscale.md §5).

Keys (jax's default partitionable threefry, where split(k, n)[i] equals
fold_in(k, i)): leaf i of the parameter tree (flatten order, dict keys
sorted) has key fold_in(base, i); a stacked leaf's layer l has
fold_in(leaf key, l); thread t at epoch e draws from
fold_in(fold_in(leaf key, e'), t // 2) with e' = e // noise_reuse, or 0 when
noise_reuse is 0 (the epoch-0 noise forever: a quirk the docs name). The
two threads of a pair share the draw; the even one gets +sigma, the odd one
-sigma.

EggRoll, matrix leaf (d0, d1), rank r: one normal draw of shape (d0 + d1, r)
in the parameter's dtype; B is its first d1 rows (unscaled), A its last d0
rows times +-scale, where the caller passes scale = sigma/sqrt(r); the
product is rounded to the dtype, and in bf16/f16 the scale is rounded to
the dtype first (the eager, "strict" arithmetic). Full-rank leaves: one
draw of the parameter's shape times +-sigma, rounded the same way.
"""
from __future__ import annotations

import numpy as np

from . import jaxrandom as R
from . import xlamath as X


def leaf_key(base_key, leaf: int, layer: int | None = None) -> np.ndarray:
    """The key of leaf `leaf` (and of slice `layer` of a stacked leaf): uint32 (2,)."""
    k = R.fold_in(base_key, leaf)
    return k if layer is None else R.fold_in(k, layer)


def thread_key(key, epoch: int, thread: int, noise_reuse: int) -> np.ndarray:
    """The key thread `thread` draws from at `epoch` (pairs share it). ValueError for negative inputs."""
    if min(epoch, thread, noise_reuse) < 0:
        raise ValueError(f"epoch {epoch}, thread {thread}, noise_reuse {noise_reuse}: want integers >= 0")
    e = epoch // noise_reuse if noise_reuse else 0
    return R.fold_in(R.fold_in(key, e), thread // 2)


def scale_draw(draw: np.ndarray, scale: float, thread: int, dtype: str) -> np.ndarray:
    """rd_dtype(draw * +-scale): + for an even thread, - for an odd one; the scale (f32) rounded to the
    dtype first in bf16/f16. Returns the dtype's numpy form (`jaxrandom.round_to`)."""
    s = np.float32(scale)
    if dtype != "f32":
        s = np.float32(R.round_to(s, dtype))
    s = s if thread % 2 == 0 else -s
    return R.round_to(np.asarray(draw, np.float32) * s, dtype)


def eggroll_factors(key, epoch: int, thread: int, shape, rank: int, scale: float, dtype: str = "f32",
                    noise_reuse: int = 0, fma: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """(A (d0, r), B (d1, r)) of thread `thread` for a matrix leaf of `shape` (d0, d1) with leaf key `key`.

    scale: sigma/sqrt(rank) as the caller computed it (a Python float, taken as f32). Values in the
    dtype's numpy form (`jaxrandom.normal`). ValueError for a shape that is not 2-D or a rank < 1."""
    if len(shape) != 2 or rank < 1:
        raise ValueError(f"EggRoll factors need a 2-D shape and rank >= 1, got {shape}, rank {rank}")
    d0, d1 = (int(d) for d in shape)
    draw = R.normal(thread_key(key, epoch, thread, noise_reuse), (d0 + d1, rank), dtype, fma)
    return scale_draw(draw[d1:], scale, thread, dtype), draw[:d1]


def full_rank_noise(key, epoch: int, thread: int, shape, sigma: float, dtype: str = "f32",
                    noise_reuse: int = 0, fma: bool = True) -> np.ndarray:
    """The full-rank perturbation (+-sigma times one draw of `shape`) of thread `thread`."""
    draw = R.normal(thread_key(key, epoch, thread, noise_reuse), tuple(shape), dtype, fma)
    return scale_draw(draw, sigma, thread, dtype)


def bits_of(x, dtype: str) -> np.ndarray:
    """Bit patterns (uint32 for f32, uint16 for f16/bf16) of values in the dtype's numpy form."""
    x = np.asarray(x)
    if dtype == "bf16":
        return X.bf16_bits(x)
    return x.view(np.uint16 if dtype == "f16" else np.uint32)
