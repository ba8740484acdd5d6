"""Reward shaping: rewards in member order -> coefficients C_n (docs/numerics.md §2).

- `zscore` (default): numpy's own mean and std (ddof 0) of a C-contiguous
  f64 array, then ``(R_n - mean) / (std + 1e-8)`` in f64, exactly as the
  es-at-scale reference's caller does; numpy's summation order decides the
  last bit, so numpy is called, not re-implemented.
- `centered_ranks` (N >= 2): ascending by (reward, member index); rank k
  gets ``rd32(rd32(k / (N - 1)) - 0.5)``. k/(N-1) of two f32-exact integers
  rounded through f64 is the correctly rounded f32 quotient (53 >= 2*24).
- `none`: C_n = R_n.

Rewards are validated member by member (`check_rewards`, `ACCEPTED`): a value that
cannot become a finite f64 raises ValueError or TypeError naming the member.

Checks: ``python -m pytest -q tests/test_es_invariants.py tests/test_es_errors.py tests/test_es_rewards_state.py``
(ties, monotone invariance, shift bounds, constant rewards, bad rewards).
"""
from __future__ import annotations

import math
import sys

import numpy as np

SHAPINGS = ("zscore", "centered_ranks", "none")
ZSCORE_EPS = 1e-8


#: Accepted reward types (each converted to one f64; anything else is a TypeError naming the member):
#: Python int and float (not bool), numpy integer and floating scalars (or 0-d arrays of them), and
#: 0-d real torch tensors;
#: as containers: a list/tuple of those, a 1-D numpy array or a 1-D torch tensor of a real dtype.
#: Floats wider than f64 (numpy longdouble) and ints beyond 2**53 round to the nearest f64, as
#: ``float()`` does; a value whose nearest f64 is not finite (10**400, 1e400 as longdouble, inf,
#: NaN) is a ValueError naming the member.
ACCEPTED = "Python int/float, numpy integer/floating scalars (or 0-d arrays) or 0-d real torch tensors"


def _torch_tensor(x) -> bool:
    torch = sys.modules.get("torch")    # never import torch just to validate floats
    return torch is not None and isinstance(x, torch.Tensor)


def _bad_type(m: int, x) -> TypeError:
    return TypeError(f"reward of member {m} is {type(x).__name__} {x!r:.60}: rewards must be {ACCEPTED}; "
                     f"nothing was changed")


def _not_finite(m: int, x, why: str) -> ValueError:
    return ValueError(f"reward of member {m} is {x!r:.60}: {why}; a NaN or infinite reward would poison "
                      f"every coefficient; nothing was changed")


def reward_f64(m: int, x) -> float:
    """One reward as a finite Python float (f64); TypeError/ValueError naming member `m`.

    See ACCEPTED for the types; source: docs/numerics.md §2 (a NaN or infinite reward is an error naming the member).
    """
    value = x
    if isinstance(x, (list, tuple)) or (isinstance(x, np.ndarray) and x.ndim):
        raise ValueError(f"reward of member {m} is a {type(x).__name__} of length {len(x)}: rewards "
                         f"must be 1-D (one per member); nothing was changed")
    if _torch_tensor(x):
        if x.ndim != 0 or x.dtype.is_complex or x.dtype == sys.modules["torch"].bool:
            raise _bad_type(m, x)
        value = x.item()   # exact: every real torch dtype widens exactly to a Python int or float
    elif isinstance(x, np.ndarray):
        if x.ndim != 0 or x.dtype.kind not in "fiu":
            raise _bad_type(m, x)
        value = x[()]      # the numpy scalar it holds
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise _bad_type(m, x)
    try:
        with np.errstate(over="ignore"):
            f = float(value)
    except OverflowError:
        raise _not_finite(m, x, "it has no finite f64 value (too large)") from None
    if not math.isfinite(f):
        wide_but_finite = isinstance(value, (int, np.integer)) or bool(np.isfinite(value))
        raise _not_finite(m, x, "it has no finite f64 value (too large)" if wide_but_finite
                          else "it is NaN or infinite")
    return f


def _array_fast_path(rewards):
    """A real numeric 1-D array as f64 (None when `rewards` is not a real numeric numpy array / tensor)."""
    if _torch_tensor(rewards):
        if rewards.dtype.is_complex or rewards.dtype == sys.modules["torch"].bool or rewards.ndim == 0:
            return None
        rewards = rewards.detach().to("cpu", sys.modules["torch"].float64).numpy()
    if isinstance(rewards, np.ndarray) and rewards.dtype.kind in "fiu" and rewards.ndim >= 1:
        if rewards.ndim != 1:
            raise ValueError(f"rewards must be 1-D (one per member), got shape {rewards.shape}")
        if rewards.dtype.kind == "f" and rewards.dtype.itemsize <= 8 or rewards.dtype.kind in "iu":
            with np.errstate(over="ignore"):
                return np.ascontiguousarray(rewards, dtype=np.float64)
    return None


def check_rewards(rewards, population: int | None = None) -> np.ndarray:
    """Rewards as a 1-D C-contiguous f64 array, validated member by member (docs/numerics.md §2, §6).

    rewards: a list/tuple of accepted scalars (see ACCEPTED), or a 1-D numpy
    array / torch tensor of a real dtype (any device). Raises TypeError naming
    the member for a value of another type (str, None, Decimal, Fraction,
    complex, bool, a tensor with more than one element, ...), ValueError naming
    the member for one without a finite f64 value (NaN, inf, 10**400), and
    ValueError when the length differs from `population` (if given) or the
    array is not 1-D. Validation happens before anything else uses the
    rewards, so a refused update changes nothing.
    """
    if isinstance(rewards, (str, bytes, dict)) or not hasattr(rewards, "__len__"):
        raise TypeError(f"rewards must be a sequence of numbers, one per member, got {type(rewards).__name__}")
    fast = _array_fast_path(rewards)
    if fast is not None:
        r = fast
    else:
        if isinstance(rewards, np.ndarray) and rewards.ndim != 1:
            raise ValueError(f"rewards must be 1-D (one per member), got shape {rewards.shape}")
        r = np.array([reward_f64(m, x) for m, x in enumerate(rewards)], dtype=np.float64)
    if population is not None and r.shape[0] != population:
        raise ValueError(f"rewards has {r.shape[0]} entries but the population is {population}")
    bad = np.flatnonzero(~np.isfinite(r))
    if bad.size:
        m = int(bad[0])
        raise _not_finite(m, rewards[m], "it has no finite f64 value")
    return r


def zscore(r: np.ndarray) -> tuple[np.ndarray, float, float]:
    """(coeffs, mean, std): ``(r - mean) / (std + 1e-8)`` in f64 (docs/numerics.md §2, z-score).

    r: a validated 1-D C-contiguous f64 array of N >= 1 rewards (see
    `check_rewards`). mean and std (ddof 0) are numpy's own, as Python
    floats: numpy's pairwise summation decides their last bit, as in the
    reference. coeffs: new f64 array of shape (N,). Constant rewards give
    all-zero coefficients (std = 0, divisor 1e-8). Raises nothing itself;
    RewardOverflowError (a ValueError) when the mean, the std, a deviation
    or a coefficient overflows f64 (`check_zscore`).
    """
    with np.errstate(all="ignore"):   # an overflow is refused below, by name, not warned about
        mean = float(np.mean(r))
        std = float(np.std(r))
        coeffs = (r - mean) / (std + ZSCORE_EPS)
    check_zscore(r, mean, std, coeffs)
    return coeffs, mean, std


class RewardOverflowError(ValueError):
    """Finite rewards whose z-score intermediates overflow f64 (docs/numerics.md §2, *Overflow*)."""


def _overflow(what: str, members=None) -> RewardOverflowError:
    where = f" (member(s) {members[:8]}{' ...' if len(members) > 8 else ''})" if members else ""
    return RewardOverflowError(f"z-score shaping: {what}{where} overflows f64 although every reward is finite; "
                         f"numpy's result would be wrong (an infinite std makes every coefficient +-0 and the "
                         f"step a silent no-op); rescale the rewards; nothing was changed")


def check_zscore(r: np.ndarray, mean: float, std: float, coeffs: np.ndarray) -> None:
    """RewardOverflowError (a ValueError: never a silent no-op) when a z-score intermediate is not finite.

    Finite rewards can still overflow f64 in numpy's sum (the mean), in the
    squared deviations (the std: [1e200, -1e200, 0, 1] gives std = inf), in
    ``R_n - mean`` or in the division; each is refused here, naming the
    intermediate (docs/numerics.md §2, *Overflow*).
    """
    if not math.isfinite(mean):
        raise _overflow("the mean (numpy's sum of the rewards)")
    if not math.isfinite(std):
        raise _overflow("the standard deviation (numpy's sum of the squared deviations)")
    with np.errstate(all="ignore"):
        dev_bad = np.flatnonzero(~np.isfinite(r - mean))
    if dev_bad.size:
        raise _overflow("the deviation R_n - mean", [int(m) for m in dev_bad])
    bad = np.flatnonzero(~np.isfinite(coeffs))
    if bad.size:
        raise _overflow("the coefficient (R_n - mean) / (std + 1e-8)", [int(m) for m in bad])


def statistics(r: np.ndarray) -> tuple[float, float]:
    """(mean, std) of validated rewards as numpy gives them, or, when numpy's overflow (finite rewards
    whose sum or squared deviations exceed f64), computed on rewards scaled by a power of two and
    scaled back: informational statistics of the shapings that do not use them (centered ranks, none)."""
    with np.errstate(all="ignore"):
        mean, std = float(np.mean(r)), float(np.std(r))
        if math.isfinite(mean) and math.isfinite(std):
            return mean, std
        e = math.frexp(float(np.max(np.abs(r))))[1]     # scaling by 2**-e is exact (bar tiny values)
        small = np.ldexp(r, -e)
        return math.ldexp(float(np.mean(small)), e), math.ldexp(float(np.std(small)), e)


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
    or N < 2 with centered ranks; RewardOverflowError (a ValueError) when a z-score intermediate
    overflows f64 (`check_zscore`). Centered ranks and `none` use no
    statistic: their mean and std are reported finite even then
    (`statistics`). Source: docs/numerics.md §2.
    """
    if shaping not in SHAPINGS:
        raise ValueError(f"unknown shaping {shaping!r}; known: {SHAPINGS}")
    r = check_rewards(rewards)
    if r.shape[0] == 0:
        raise ValueError("rewards is empty: a population has at least one member")
    if shaping == "zscore":
        coeffs, mean, std = zscore(r)
    else:
        mean, std = statistics(r)
        coeffs = centered_ranks(r) if shaping == "centered_ranks" else r.copy()
    stats = {"shaping": shaping, "mean": mean, "std": std, "min": float(r.min()),
             "max": float(r.max()), "coefficients": coeffs}
    return coeffs, stats
