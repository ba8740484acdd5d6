"""Member seed schedules and per-member reward aggregation (docs/references.md §5; issue 9).

Design record:
- A *seed schedule* decides the u64 member seed of (iteration, member),
  from which docs/CONTRACT.md §4 derives every stream seed. Three named schedules:
  - ``contract`` (default): docs/CONTRACT.md §4's ``member_seed(seed, iteration,
    population, member)``: 64-bit, counter-based, portable;
  - ``es-at-scale``: the published seeds of the es-at-scale training loop:
    iteration i (the trainer's counter) draws
    ``numpy.random.default_rng((seed or 42) + i).integers(0, 2**30,
    size=count, dtype=int64)``;
  - ``es-awd``: the same draw with the reference's first iteration 1:
    ``default_rng((seed or 42) + i + 1)``.
  - ``es-paper``: the paper's original scripts (docs/references.md §6):
    numpy's LEGACY generator seeded once, ``np.random.seed(seed)``, then
    per iteration ``np.random.randint(0, 2**30, size=count, dtype=int64)``,
    so iteration i's seeds follow i earlier draws of the same stream. We
    never touch numpy's global state: a private ``RandomState(seed)``
    yields the same stream (tests/test_es_paper_profile.py shows it). The
    seed is used as given (0 is 0) and must be in [0, 2**32), numpy's
    legacy range.
  ``count`` is N, or N/2 under antithetic pairs (one seed per pair,
  docs/numerics.md §4; both halves of pair k use draw k). The drawn 30-bit integer
  IS the member seed: under contract noise its streams are the contract
  streams of that u64 value, under torch's own noise it is the value given
  to ``torch.Generator.manual_seed``, as in the references. So a run can be
  reconstructed from the seeds a reference logs.
  Two equal draws in one iteration give two members the same noise (the
  es-at-scale loop keys members by seed value and would merge them;
  practically never at 2**30): `duplicate_seeds` names them.
- *Reward aggregation* turns the per-prompt rewards of one member into its
  reward, the way each reference's loop does:
  ``batch_weighted_mean`` (es-at-scale's train_step: per mini-batch the
  numpy mean of its rewards, weighted by the batch size, summed in batch
  order as Python floats, divided by the total count) and ``mean_reward``
  (es-awd: one numpy mean of all per-prompt rewards). Both are f64; the
  exact expressions are our reading of docs/references.md §5, which a parity
  run against a real clone confirms or refutes bit for bit.

Checks: ``python -m pytest -q tests/test_es_schedule.py``.
"""
from __future__ import annotations

import functools
import math

import numpy as np

SCHEDULES = ("contract", "es-at-scale", "es-awd", "es-paper")
#: the reference's loop index of the trainer's iteration 0, per numpy schedule
FIRST_ITERATION = {"es-at-scale": 0, "es-awd": 1}
SEED_BOUND = 2 ** 30
DEFAULT_GLOBAL_SEED = 42


def check_schedule(name) -> str:
    """`name` if it is a known schedule, else ValueError naming the field."""
    if name not in SCHEDULES:
        raise ValueError(f"seed_schedule: unknown value {name!r}; known: {SCHEDULES}")
    return name


@functools.lru_cache(maxsize=64)
def _draw(base: int, count: int) -> tuple:
    return tuple(int(v) for v in np.random.default_rng(seed=base).integers(0, SEED_BOUND, size=count,
                                                                             dtype=np.int64))


def paper_seed_stream(initial_seed: int, count: int):
    """An endless iterator of the es-paper seed lists: iteration i's `count` seeds (list of int).

    ``RandomState(initial_seed)`` then ``randint(0, 2**30, size=count, dtype=int64).tolist()`` per
    iteration: bit for bit the scripts' ``np.random.seed`` + ``np.random.randint`` on numpy's
    global generator, without touching it. ValueError for a seed outside [0, 2**32) (numpy's
    legacy seeding refuses it) or a negative count.
    """
    seed = int(initial_seed)
    if isinstance(initial_seed, bool) or not 0 <= seed < 2 ** 32:
        raise ValueError(f"initial_seed must be an int in [0, 2**32) (numpy's legacy seed), got {initial_seed!r}")
    if count < 0:
        raise ValueError(f"count must be >= 0, got {count}")
    rs = np.random.RandomState(seed)
    while True:
        yield rs.randint(0, SEED_BOUND, size=count, dtype=np.int64).tolist()


@functools.lru_cache(maxsize=256)
def _paper_draw(seed: int, count: int, iteration: int) -> tuple:
    stream = paper_seed_stream(seed, count)
    for _ in range(iteration):
        next(stream)
    return tuple(next(stream))


def reference_seeds(schedule: str, seed: int, iteration: int, count: int) -> list[int]:
    """The `count` 30-bit seeds a reference loop draws at the trainer's `iteration` (list of int).

    schedule: "es-at-scale", "es-awd" or "es-paper" (ValueError otherwise); seed:
    the global seed (0 stands for 42, like the references' ``global_seed or 42``;
    under "es-paper" the initial seed as given); iteration: the trainer's counter
    (>= 0); count: N, or N/2 with pairs.
    """
    if schedule == "es-paper":
        if iteration < 0 or count < 0:
            raise ValueError(f"iteration and count must be >= 0, got {iteration}, {count}")
        return list(_paper_draw(int(seed), int(count), int(iteration)))
    if schedule not in FIRST_ITERATION:
        raise ValueError(f"seed_schedule {schedule!r} has no numpy draw; use 'es-at-scale', 'es-awd' or 'es-paper'")
    if iteration < 0 or count < 0:
        raise ValueError(f"iteration and count must be >= 0, got {iteration}, {count}")
    base = (int(seed) or DEFAULT_GLOBAL_SEED) + int(iteration) + FIRST_ITERATION[schedule]
    return list(_draw(base, int(count)))


def schedule_seed(schedule: str, seed: int, iteration: int, population: int, antithetic: bool,
                  member: int) -> int:
    """The member seed of `member` (0 <= member < population) under a numpy schedule (an int < 2**30)."""
    count = population // 2 if antithetic else population
    index = member // 2 if antithetic else member
    return reference_seeds(schedule, seed, iteration, count)[index]


def duplicate_seeds(seeds) -> dict:
    """{seed: [positions]} for every seed value occurring more than once in `seeds`."""
    where: dict = {}
    for k, s in enumerate(seeds):
        where.setdefault(int(s), []).append(k)
    return {s: ks for s, ks in where.items() if len(ks) > 1}


def _rewards(values, what: str) -> np.ndarray:
    r = np.ascontiguousarray(np.asarray(values, dtype=np.float64)).reshape(-1)
    if not r.size:
        raise ValueError(f"{what}: no rewards")
    if not np.isfinite(r).all():
        raise ValueError(f"{what}: reward {int(np.flatnonzero(~np.isfinite(r))[0])} is not finite")
    return r


def mean_reward(values) -> float:
    """es-awd's member reward: ``float(numpy.mean(values))`` over the per-prompt rewards (f64).

    ValueError when there is none or one is NaN/inf.
    """
    with np.errstate(all="ignore"):
        m = float(np.mean(_rewards(values, "mean_reward")))
    return _finite(m, "mean_reward: numpy's mean of the finite rewards")


def batch_weighted_mean(batches) -> float:
    """es-at-scale's member reward over mini-batches (docs/references.md §5, train_step).

    batches: a sequence of per-prompt reward sequences, one per mini-batch,
    in evaluation order. Per batch ``m_b = float(numpy.mean(batch))``; then,
    in Python floats, ``total += m_b * len(batch)`` and ``count += len(batch)``
    in batch order; the result is ``total / count``. ValueError on an empty
    batch list, an empty batch or a non-finite reward.
    """
    total, count = 0.0, 0
    batches = list(batches)
    if not batches:
        raise ValueError("batch_weighted_mean: no mini-batches")
    for b, batch in enumerate(batches):
        r = _rewards(batch, f"batch_weighted_mean: mini-batch {b}")
        with np.errstate(all="ignore"):
            m_b = float(np.mean(r))
        total += _finite(m_b, f"batch_weighted_mean: numpy's mean of mini-batch {b}") * r.size
        count += r.size
        _finite(total, f"batch_weighted_mean: the running total after mini-batch {b}")
    return total / count


def _finite(x: float, what: str) -> float:
    """x, or ValueError: finite rewards whose mean overflows f64 are refused, never passed on as inf."""
    if not math.isfinite(x):
        raise ValueError(f"{what} overflows f64 ({x!r}) although every reward is finite; rescale the rewards")
    return x
