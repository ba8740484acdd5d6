"""Reward shaping: rewards in member order -> coefficients C_n (docs/numerics.md §2).

- `zscore` (default): numpy's own mean and std (ddof 0) of a C-contiguous
  f64 array, then ``(R_n - mean) / (std + 1e-8)`` in f64, exactly as the
  es-at-scale reference's caller does; numpy's summation order decides the
  last bit, so numpy is called, not re-implemented.
- `centered_ranks` (N >= 2): ascending by (reward, member index); rank k
  gets ``rd32(rd32(k / (N - 1)) - 0.5)``. k/(N-1) of two f32-exact integers
  rounded through f64 is the correctly rounded f32 quotient (53 >= 2*24).
- `none`: C_n = R_n.

A NaN or infinite reward raises ValueError naming the member.

Checks: ``python -m pytest -q tests/test_es_invariants.py tests/test_es_errors.py``
(ties, monotone invariance, shift bounds, constant rewards, bad rewards).
"""
from __future__ import annotations

import numpy as np

SHAPINGS = ("zscore", "centered_ranks", "none")
ZSCORE_EPS = 1e-8


def check_rewards(rewards, population: int | None = None) -> np.ndarray:
    """Rewards as a 1-D C-contiguous f64 array, validated.

    Raises ValueError when the length differs from `population` (if given),
    the array is not 1-D, or a reward is NaN or infinite (naming the member).
    """
    try:
        r = np.ascontiguousarray(np.asarray(rewards, dtype=np.float64))
    except (TypeError, ValueError) as exc:
        raise ValueError(f"rewards must be numbers, one per member: {exc}") from None
    if r.ndim != 1:
        raise ValueError(f"rewards must be 1-D (one per member), got shape {r.shape}")
    if population is not None and r.shape[0] != population:
        raise ValueError(f"rewards has {r.shape[0]} entries but the population is {population}")
    bad = np.flatnonzero(~np.isfinite(r))
    if bad.size:
        m = int(bad[0])
        raise ValueError(f"reward of member {m} is {r[m]!r}: a NaN or infinite reward would poison "
                         f"every coefficient; nothing was changed")
    return r


def zscore(r: np.ndarray) -> tuple[np.ndarray, float, float]:
    """(coeffs, mean, std): ``(r - mean) / (std + 1e-8)`` in f64 (docs/numerics.md §2, z-score).

    r: a validated 1-D C-contiguous f64 array of N >= 1 rewards (see
    `check_rewards`). mean and std (ddof 0) are numpy's own, as Python
    floats: numpy's pairwise summation decides their last bit, as in the
    reference. coeffs: new f64 array of shape (N,). Constant rewards give
    all-zero coefficients (std = 0, divisor 1e-8). Raises nothing itself;
    an f64 overflow gives inf/NaN (numpy warns), which the trainer refuses.
    """
    mean = float(np.mean(r))
    std = float(np.std(r))
    return (r - mean) / (std + ZSCORE_EPS), mean, std


def centered_ranks(r: np.ndarray) -> np.ndarray:
    """Centered-rank coefficients of r, an f64 array of shape (N,) holding f32 values (docs/numerics.md §2).

    r: validated 1-D f64 rewards, N >= 2. Members are sorted ascending by
    (reward, member index), so ties keep member order; rank k gets
    rd32(rd32(k / (N - 1)) - 0.5), in [-0.5, 0.5]. Raises ValueError when
    N < 2 (k / (N - 1) is undefined).
    """
    n = r.shape[0]
    if n < 2:
        raise ValueError("centered_ranks shaping needs a population of at least 2")
    order = np.lexsort((np.arange(n), r))            # by reward, ties by member index
    ranks = np.empty(n, dtype=np.int64)
    ranks[order] = np.arange(n)
    c = (ranks / (n - 1)).astype(np.float32)
    return (c - np.float32(0.5)).astype(np.float64)


def shape_rewards(rewards, shaping: str = "zscore") -> tuple[np.ndarray, dict]:
    """Coefficients for `rewards` under `shaping`, and reward statistics.

    rewards: a sequence of N finite floats in member order. Returns
    ``(coeffs, stats)``: coeffs a float64 numpy array of shape (N,) (f32
    values widened for centered ranks); stats a dict with mean, std (ddof
    0), min, max (Python floats), shaping and coefficients. Raises
    ValueError for an unknown shaping, a NaN/inf reward (naming the member)
    or N < 2 with centered ranks. Source: docs/numerics.md §2.
    """
    if shaping not in SHAPINGS:
        raise ValueError(f"unknown shaping {shaping!r}; known: {SHAPINGS}")
    r = check_rewards(rewards)
    if r.shape[0] == 0:
        raise ValueError("rewards is empty: a population has at least one member")
    if shaping == "zscore":
        coeffs, mean, std = zscore(r)
    else:
        mean, std = float(np.mean(r)), float(np.std(r))
        coeffs = centered_ranks(r) if shaping == "centered_ranks" else r.copy()
    stats = {"shaping": shaping, "mean": mean, "std": std, "min": float(r.min()),
             "max": float(r.max()), "coefficients": coeffs}
    return coeffs, stats
