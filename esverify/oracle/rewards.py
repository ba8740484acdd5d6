"""Reward populations of the parity cases, and what z-scoring each must give.

The update and zscore cases hand both sides one population of rewards
(docs/parity.md "Reward populations"). Drawn around N(0.5, 0.2) only, code
that acts on outliers, ties, equal rewards or the 0/1 rewards of accuracy
tasks (clipping |z|, a threshold, a degenerate std) is reached by chance
at best, so a case names one of SHAPES:

- `normal`: N(0.5, 0.2) (the rewards every case had before);
- `sparse`: 0/1 rewards (about 30% ones, at least one of each);
- `outliers`: 0.5 + N(0, 0.01) and one member 10 above the rest, whose
  z-score exceeds 5 (N >= OUTLIER_MIN: one outlier among N has
  |z| <= sqrt(N - 1));
- `ties`: values from {0.25, 0.5, 0.75}, at least two of them;
- `equal`: every reward 0.75 (a dyadic value: numpy's mean of copies is
  exact, the std is 0);
- `tiny`: 0.5 + N(0, 1e-12): a std far below the 1e-8 of the divisor.

Two more populations are not finite (NONFINITE): `nan` (the `normal`
draw with one member's reward NaN: a reward function that divided by
zero) and `inf` (one member's reward +inf). The references shape and
apply them without a check; our side follows their arithmetic
(esverify.oracle.nonfinite), so every coefficient is NaN and so is every
updated weight, compared bit for bit. The fuzzer draws neither (SHAPES).

`expectations(shape, rewards, coeffs)` lists what z-score coefficients of
such a population must satisfy, known in advance on our side (the tests
assert that ours satisfy it and that wrong shapings do not).
"""
from __future__ import annotations

import math

import numpy as np

SHAPES = ("normal", "sparse", "outliers", "ties", "equal", "tiny")
#: the populations with a non-finite reward (the matrix runs them; --fuzz draws from SHAPES only)
NONFINITE = ("nan", "inf")


def loop_reward(tensors, target: float, dtype=None) -> float:
    """-fsum((f64(theta) - target)**2): the training loops' reward of a member's parameters (tensors:
    any dtype and device), f64; fsum per tensor, then over the tensors. dtype: the precision the engine
    computing it runs in (a torch dtype; None: each tensor's own): each tensor is rounded to it first,
    as an engine launched in that precision holds its weights (docs/parity.md, "The training loops").
    `loop_rewards` (esverify.exactsum) gives it for several targets; the child calls that same function
    (oracles/child_server.py `reward`), so both sides of a loop row hand out identical rewards."""
    from esverify.exactsum import loop_rewards   # numba: not for the case model, which reads OUTLIER_MIN
    return loop_rewards(tensors, [target], dtype)[0]


#: the smallest population whose single outlier can have |z| > 5 (sqrt(N - 1) > 5)
OUTLIER_MIN = 27
EQUAL_VALUE = 0.75


def with_nonfinite_target(data, shape: str | None) -> tuple:
    """A loop's prompt targets (floats) with the first one made NaN (`nan`) or +inf (`inf`): every member's
    reward on that prompt, -fsum((theta - t)**2), is then NaN or -inf, as a reward function that divides by
    zero makes it (the loops' rows of the non-finite populations); `data` unchanged for None."""
    if shape is None:
        return tuple(data)
    if shape not in NONFINITE:
        raise ValueError(f"a loop's non-finite rewards must be one of {NONFINITE}, got {shape!r}")
    return (float("nan") if shape == "nan" else float("inf"),) + tuple(data)[1:]


def check_shape(shape: str, population: int) -> None:
    """ValueError for an unknown shape, or `outliers` below OUTLIER_MIN members."""
    if shape not in SHAPES + NONFINITE:
        raise ValueError(f"rewards must be one of {SHAPES + NONFINITE}, got {shape!r}")
    if shape == "outliers" and population < OUTLIER_MIN:
        raise ValueError(f"rewards 'outliers' need a population of at least {OUTLIER_MIN} (one outlier among N "
                         f"has |z| <= sqrt(N - 1)), got {population}")


def draw(shape: str, seed: int, n: int) -> np.ndarray:
    """The f64 rewards (shape (n,)) of population `shape` for (seed, n), deterministic; ValueError as
    check_shape. `normal` is the stream every case used before shapes existed."""
    check_shape(shape, n)
    if shape in NONFINITE:   # the `normal` draw, one member's reward (chosen from the same seed) not finite
        r = draw("normal", seed, n)
        pick = np.random.Generator(np.random.PCG64([seed, n, 7, len(SHAPES) + NONFINITE.index(shape)]))
        r[int(pick.integers(n))] = np.nan if shape == "nan" else np.inf
        return r
    rng = np.random.Generator(np.random.PCG64([seed, n, 7] if shape == "normal"
                                              else [seed, n, 7, SHAPES.index(shape)]))
    if shape == "normal":
        return rng.normal(0.5, 0.2, n)
    if shape == "sparse":
        r = (rng.random(n) < 0.3).astype(np.float64)
        if r.min() == r.max():           # at least one success and one failure
            r[int(rng.integers(n))] = 1.0 - r[0]
        return r
    if shape == "outliers":
        r = 0.5 + rng.normal(0.0, 0.01, n)
        r[int(rng.integers(n))] += 10.0
        return r
    if shape == "ties":
        r = rng.choice([0.25, 0.5, 0.75], n)
        if r.min() == r.max():
            r[int(rng.integers(n))] = 0.25 if r[0] != 0.25 else 0.75
        return r
    if shape == "equal":
        return np.full(n, EQUAL_VALUE)
    return 0.5 + rng.normal(0.0, 1e-12, n)            # tiny


def expectations(shape: str, rewards, coeffs) -> list[str]:
    """What z-score coefficients (docs/numerics.md §2) of a `shape` population must satisfy; the
    problems found ([] when all holds). Every shape: equal rewards get bitwise equal coefficients and
    a higher reward never gets a lower one. Then: `equal` -> every coefficient +0.0; `sparse` -> two
    values, positive for the ones and negative for the zeros; `outliers` -> the outlier's |z| > 5 and
    every other |z| < 1; `ties` -> one coefficient per distinct reward; `tiny` -> std below 1e-8
    (the 1e-8 of the divisor dominates), so every |z| < 1e-3 and not all zero, and (r - mean) / z is
    std + 1e-8 (no floor on a degenerate std)."""
    r, c = np.asarray(rewards, dtype=np.float64), np.asarray(coeffs, dtype=np.float64)
    problems = []
    if r.shape != c.shape:
        return [f"{len(c)} coefficients for {len(r)} rewards"]
    if shape in NONFINITE:   # the references' arithmetic: a NaN mean (nan) or a NaN std (inf: inf - inf)
        return [] if np.isnan(c).all() else [f"{shape}: every coefficient must be NaN (the mean or the std is "
                                             f"NaN), got {int(np.count_nonzero(~np.isnan(c)))} that are not"]
    bits = c.view(np.uint64)
    order = np.argsort(r, kind="stable")
    for a, b in zip(order[:-1], order[1:]):
        if r[a] == r[b] and bits[a] != bits[b]:
            problems.append(f"members {a} and {b} have equal rewards but coefficients {c[a]!r} and {c[b]!r}")
            break
        if r[a] < r[b] and c[a] > c[b]:
            problems.append(f"member {b} has a higher reward than member {a} but a lower coefficient")
            break
    if shape == "equal" and not (np.all(bits == 0)):
        problems.append(f"equal rewards: coefficients must all be +0.0, got {sorted(set(c.tolist()))[:4]}")
    if shape == "sparse":
        ones, zeros = c[r == 1.0], c[r == 0.0]
        if len(set(c.tolist())) != 2 or not (ones.min() > 0 > zeros.max()):
            problems.append(f"sparse 0/1 rewards: want one positive value for the ones and one negative value "
                            f"for the zeros, got {sorted(set(c.tolist()))[:4]}")
    if shape == "outliers":
        k = int(np.argmax(r))
        others = np.delete(np.abs(c), k)
        if not abs(c[k]) > 5 or not (others.max() < 1):
            problems.append(f"outliers: want |z| > 5 for member {k} (got {c[k]!r}) and |z| < 1 elsewhere "
                            f"(max {others.max()!r})")
    if shape == "ties" and len(set(c.tolist())) != len(set(r.tolist())):
        problems.append(f"ties: {len(set(r.tolist()))} distinct rewards but {len(set(c.tolist()))} distinct "
                        "coefficients")
    if shape == "tiny":
        std, mean = float(np.std(r)), float(np.mean(r))
        if not (std < 1e-8 and np.abs(c).max() < 1e-3 and np.abs(c).max() > 0 and math.isfinite(std)):
            problems.append(f"tiny spread: want std < 1e-8 and 0 < max |z| < 1e-3, got std {std!r} and max |z| "
                            f"{np.abs(c).max()!r}")
        else:   # the divisor is std + 1e-8, whatever a guard would floor it to
            nz = c != 0
            divisor = (r[nz] - mean) / c[nz]
            if not np.all(np.abs(divisor - (std + 1e-8)) <= 1e-6 * (std + 1e-8)):
                problems.append(f"tiny spread: the divisor must be std + 1e-8 = {std + 1e-8!r}, got about "
                                f"{float(np.median(divisor))!r}")
    return problems
