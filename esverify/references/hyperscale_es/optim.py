"""optax's sgd and adamw steps on one f32 leaf, as XLA CPU computes them, in numpy, bit for bit (docs/hyperscale.md §8).

The noisers' `do_updates` ends with `solver.update(grads, opt_state, params)` and
`optax.apply_updates`; the end-to-end test passes optax `adamw` (b1 0.9, b2 0.999,
eps 1e-8, eps_root 0, optax's default weight decay 1e-4, no mask). adamw is
`chain(scale_by_adam, add_decayed_weights, scale_by_learning_rate)`:

    mu' = (1 - b1) g + b1 mu          nu' = (1 - b2) g*g + b2 nu      count' = count + 1
    bc1 = 1 - b1**count'               bc2 = 1 - b2**count'
    u = (mu'/bc1) / (sqrt(nu'/bc2 + eps_root) + eps) + wd * p
    p' = p + (-lr) u

Measured on this host's XLA (jaxlib 0.10.2, x86 with FMA; optax 0.2.8), f32:

- the Python constants are rounded to f32 once: rd(1 - 0.9) = rd(0.1), rd(1 - 0.999), rd(wd), rd(-lr);
- b**count' (XLA's `power` of an f32 constant and the converted count) equals the correctly rounded
  power for count' 1 ... 684 (0.9: 685 is the first that differs; 0.999: 873); beyond, a ValueError;
- the division by a bias correction depends on how many leaves the tree has (optax computes one
  correction for the whole tree; eager too, its bias correction is jitted):
  one leaf: XLA rewrites the division by a broadcast scalar of one user into a product with its
  rounded reciprocal, mu^ = rd(mu' * rd(1/bc1)), nu^ = rd(nu' * rd(1/bc2)), u0 = rd(mu^ / rd(sqrt(nu^) + eps));
  several leaves, eager: true divisions, mu^ = rd(mu'/bc1), nu^ = rd(nu'/bc2), the same u0;
  several leaves, jit: (a/b)/c is rewritten a/(b c): u0 = rd(mu' / rd(bc1 * rd(sqrt(rd(nu'/bc2)) + eps)));
- jit: the moments are fused multiply-adds. Which product LLVM fuses depends on where the gradient comes
  from: a gradient the step reads from memory (optax on its own; a stacked leaf's, assembled slice by
  slice) fuses its own product, mu' = fma(g, rd(0.1), rd(b1 mu)), nu' = fma(rd(g g), rd(0.001), rd(b2 nu));
  a gradient computed in the same fusion (a noiser's estimate of an unstacked leaf, `grad_fused`) leaves
  its product rounded and fuses the moment's, mu' = fma(mu, b1, rd(rd(0.1) g)),
  nu' = fma(nu, b2, rd(rd(0.001) rd(g g))); the decay and the step fuse too: u = fma(p, wd, u0),
  p' = fma(u, -lr, p) (never rounded alone);
- eager: every operation rounded: mu' = rd(rd(0.1 g) + rd(b1 mu)), u = rd(u0 + rd(wd p)), p' = rd(p + rd(-lr u)).

sgd (optax.sgd, no momentum): p' = fma(g, -lr, p) jitted, rd(p + rd(-lr g)) eager.

Inputs and outputs are numpy float32 arrays (any shape, the leaf's); the state is an `AdamState`.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from .xlamath import fma32

F32 = np.float32
MODES = ("jit", "eager")
B1, B2, EPS, WEIGHT_DECAY = 0.9, 0.999, 1e-8, 1e-4
#: the largest count' whose bias-correction powers were measured to be the correctly rounded b**count'
MAX_COUNT = 684


class AdamState(NamedTuple):
    """adamw's state of one leaf: the step count (int, before the step) and the moments (f32, the leaf's shape)."""
    count: int
    mu: np.ndarray
    nu: np.ndarray


def adam_init(param) -> AdamState:
    """The state optax.adamw's init gives a leaf: count 0, zero moments of its shape (f32)."""
    z = np.zeros(np.shape(param), F32)
    return AdamState(0, z, z.copy())


def _mode(mode: str) -> None:
    if mode not in MODES:
        raise ValueError(f"mode {mode!r}: want one of {list(MODES)}")


def _rd(x) -> np.ndarray:
    return np.asarray(x, F32)


def power32(base: float, count: int) -> np.float32:
    """XLA CPU's f32 `power(rd(base), count)` for 1 <= count <= MAX_COUNT: the correctly rounded value.
    ValueError outside that range (not measured: XLA's pow differs from it for some larger counts)."""
    if not 1 <= count <= MAX_COUNT:
        raise ValueError(f"adamw step count {count}: the bias-correction power is modelled for 1..{MAX_COUNT}")
    return F32(np.float64(F32(base)) ** count)


def _bias_corrected(mu, nu, count: int, mode: str, leaves: int) -> np.ndarray:
    """u0 = (mu/bc1) / (sqrt(nu/bc2) + eps) as XLA rewrites it for a tree of `leaves` leaves (module docstring)."""
    if leaves < 1:
        raise ValueError(f"leaves {leaves}: want >= 1")
    bc1 = F32(F32(1) - power32(B1, count))
    bc2 = F32(F32(1) - power32(B2, count))
    eps = F32(EPS)
    if leaves == 1:
        return _rd(_rd(mu * F32(F32(1) / bc1)) / _rd(np.sqrt(_rd(nu * F32(F32(1) / bc2))) + eps))
    if mode == "eager":
        return _rd(_rd(mu / bc1) / _rd(np.sqrt(_rd(nu / bc2)) + eps))
    return _rd(mu / _rd(bc1 * _rd(np.sqrt(_rd(nu / bc2)) + eps)))


def sgd_step(param, grad, lr: float, mode: str = "jit") -> np.ndarray:
    """optax.sgd(lr) then apply_updates on one f32 leaf: p + (-lr) g, fused under jit."""
    _mode(mode)
    p, g, step = _rd(param), _rd(grad), F32(-lr)
    if mode == "jit":
        return fma32(g, step, p)
    return _rd(p + _rd(step * g))


def adamw_step(param, grad, state: AdamState, lr: float, mode: str = "jit", leaves: int = 1,
               grad_fused: bool = False, weight_decay: float = WEIGHT_DECAY,
               decay: bool = True) -> tuple[np.ndarray, AdamState]:
    """optax.adamw(lr, b1=0.9, b2=0.999, eps=1e-8, weight_decay) then apply_updates on one f32 leaf.

    param, grad: f32 arrays of one shape; state: the leaf's `AdamState` (count before the step);
    leaves: how many leaves the tree optax steps has (1 or more: it decides XLA's division, above);
    grad_fused: whether, under jit, the gradient is computed in the step's own fusion (above).
    decay False models a leaf the optimiser's mask skips (optax's `mask`: no `wd * p` term).
    Returns (p', the new state). ValueError for an unknown mode or a count beyond MAX_COUNT - 1."""
    _mode(mode)
    p, g = _rd(param), _rd(grad)
    count = state.count + 1
    c1, c2, b1, b2 = F32(1 - B1), F32(1 - B2), F32(B1), F32(B2)
    gg = _rd(g * g)
    if mode == "jit" and grad_fused:
        mu = fma32(state.mu, b1, _rd(c1 * g))
        nu = fma32(state.nu, b2, _rd(c2 * gg))
    elif mode == "jit":
        mu = fma32(g, c1, _rd(state.mu * b1))
        nu = fma32(gg, c2, _rd(state.nu * b2))
    else:
        mu = _rd(_rd(c1 * g) + _rd(b1 * state.mu))
        nu = _rd(_rd(c2 * gg) + _rd(b2 * state.nu))
    u = _bias_corrected(mu, nu, count, mode, leaves)
    wd, step = F32(weight_decay), F32(-lr)
    if mode == "jit":
        if decay:
            u = fma32(p, wd, u)
        new = fma32(u, step, p)
    else:
        if decay:
            u = _rd(u + _rd(wd * p))
        new = _rd(p + _rd(step * u))
    return new, AdamState(count, mu, nu)
