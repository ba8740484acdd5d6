"""HyperscaleES's fitness shaping (`convert_fitnesses`), eager f32, bit for bit (docs/hyperscale.md §4).

The rule of `eggroll`, `open_es`, `sparse` and `alteggroll`: group size 0,
(s - mean(s)) / sqrt(var(s) + 1e-5) over all N scores; group size G > 0,
scores as (N/G, G), each row centred on its own mean but divided by the
square root of the variance of all N raw scores + 1e-5 (per-group means,
a global variance: a quirk the docs name). Population variance.

Arithmetic, as XLA CPU runs one eager call (jaxlib 0.10.2, a host with FMA):
a sum of n <= 32 values is sequential from +0; of 33 to 1024 values, the
values padded with zeros to a multiple of 32 (floor(padding/2) of them in
front), each 32-value window summed so, and the window sums reduced the
same way; a mean is the sum times rd(1/n). The variance's sum of squares,
n <= 32: rd(c1*c1), then fma(c0, c0, .), then fma(ck, ck, .) for
k = 2 ... n-1; n > 32: the squares rounded, summed by windows; either way
divided by n. The final division is a product with rd(1/den). XLA CPU
runs with denormals-are-zero and flush-to-zero: a subnormal score is read
as a zero of its sign and a subnormal result of any step is a zero of its
sign (`xlamath.daz` after every step here: a result flushed to zero is
what the next step would read as zero). Longer
reductions (and group means over more than 32 values) use orders not
modelled here: a ValueError. Jitted calls differ (XLA's approximate
reciprocal square root); this models the eager call only.
"""
from __future__ import annotations

import numpy as np

from .xlamath import daz, fma32

F32 = np.float32
#: the longest 1-D reduction whose order is modelled, and the window of the longer ones
MAX_REDUCTION = 1024
WINDOW = 32
EPS = F32(1e-5)


def _check(n: int, limit: int = MAX_REDUCTION):
    if n > limit:
        raise ValueError(f"a reduction over {n} values: XLA's order is modelled up to {limit} only")


def _windows(x: np.ndarray) -> np.ndarray:
    """x (..., n) zero-padded to a multiple of 32, floor(padding/2) in front, as (..., n/32, 32)."""
    n = x.shape[-1]
    m = -(-n // WINDOW) * WINDOW
    front = (m - n) // 2
    pad = [(0, 0)] * (x.ndim - 1) + [(front, m - n - front)]
    return np.pad(x, pad).reshape(x.shape[:-1] + (m // WINDOW, WINDOW))


def _sequential(x: np.ndarray) -> np.ndarray:
    acc = np.zeros(x.shape[:-1], F32)
    for k in range(x.shape[-1]):
        acc = daz(acc + x[..., k])
    return acc


def xla_sum(x: np.ndarray) -> np.ndarray:
    """Sum over the last axis in f32: sequential from +0 up to 32 values (one is returned as is), by
    32-value windows up to 1024."""
    x = daz(np.asarray(x, dtype=F32))
    n = x.shape[-1]
    _check(n)
    if n == 1:                                       # XLA drops a one-element reduction: -0 stays -0
        return x[..., 0].copy()
    if n <= WINDOW:
        return _sequential(x)
    return xla_sum(_sequential(_windows(x)))


def xla_mean(x: np.ndarray) -> np.ndarray:
    """Mean over the last axis: the sum times rd(1/n)."""
    x = np.asarray(x, dtype=F32)
    return daz(xla_sum(x) * (F32(1) / F32(x.shape[-1])))


def xla_var(x: np.ndarray) -> np.ndarray:
    """Population variance over the last axis (the fused sum of squares of the centred values)."""
    x = daz(np.asarray(x, dtype=F32))
    n = x.shape[-1]
    _check(n)
    c = daz(x - xla_mean(x)[..., None])
    if n > WINDOW:
        return daz(xla_sum(daz(c * c)) / F32(n))
    if n == 1:
        acc = daz(c[..., 0] * c[..., 0])
    else:
        acc = daz(c[..., 1] * c[..., 1])
        acc = daz(fma32(c[..., 0], c[..., 0], acc))
        for k in range(2, n):
            acc = daz(fma32(c[..., k], c[..., k], acc))
    return daz(acc / F32(n))


def convert_fitnesses(scores, group_size: int = 0) -> np.ndarray:
    """Shaped fitness of N raw scores (any real or integer dtype, cast to f32): float32 (N,).

    group_size 0: global centring; G > 0: per-group centring, global variance.
    ValueError: scores not 1-D, G not dividing N (the reference's reshape error),
    G < 0, more than 1024 scores or G > 32 (orders not modelled)."""
    s = np.asarray(scores)
    if s.ndim != 1 or s.size == 0:
        raise ValueError(f"scores must be a non-empty 1-D array, got shape {s.shape}")
    s = daz(s.astype(F32))
    n = s.size
    if group_size < 0 or (group_size and n % group_size):
        raise ValueError(f"group size {group_size} does not divide {n} scores")
    den = np.sqrt((xla_var(s) + EPS).astype(F32)).astype(F32)
    inv = (F32(1) / den).astype(F32)
    if group_size == 0:
        c = daz(s - xla_mean(s))
    else:
        _check(group_size, WINDOW)
        rows = s.reshape(n // group_size, group_size)
        c = daz(rows - xla_mean(rows)[:, None]).reshape(n)
    return daz(c * inv)
