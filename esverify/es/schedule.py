"""Member seed schedules and per-member reward aggregation (docs/references.md §5).

Design record:
- A *seed schedule* decides the u64 member seed of (iteration, member),
  from which docs/CONTRACT.md §4 derives every stream seed. The schedules
  are ``contract`` (default): docs/CONTRACT.md §4's ``member_seed(seed,
  iteration, population, member)``: 64-bit, counter-based, portable; and
  one numpy schedule per reference loop that draws its own seeds, each
  declared by its reference (`esverify.es.seeds.SeedSchedule`, registered
  in esverify.registry; docs/references.md §5, §6 describe them) and asked
  for here by name. `SCHEDULES` is the tuple of every known name, contract first.
  ``count`` is N, or N/2 under antithetic pairs (one seed per pair,
  docs/numerics.md §4; both halves of pair k use draw k). The drawn 30-bit integer
  IS the member seed: under contract noise its streams are the contract
  streams of that u64 value, under torch's own noise it is the value given
  to ``torch.Generator.manual_seed``, as in the references. So a run can be
  reconstructed from the seeds a reference logs.
  Two equal draws in one iteration give two members the same noise (a
  loop keying members by seed value would merge them; practically never
  at 2**30): `duplicate_seeds` names them.
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

import math
from collections.abc import Mapping

import numpy as np

from .. import registry
from .seeds import DEFAULT_GLOBAL_SEED, SEED_BOUND, SeedSchedule

#: the schedule of docs/CONTRACT.md §4, the default; every other one is a reference's
CONTRACT = "contract"

__all__ = ["CONTRACT", "DEFAULT_GLOBAL_SEED", "FIRST_ITERATION", "SCHEDULES", "SEED_BOUND", "SeedSchedule",
           "batch_weighted_mean", "check_schedule", "duplicate_seeds", "mean_reward", "reference_seeds",
           "schedule_seed", "schedules"]


def schedules() -> tuple:
    """Every known schedule name: "contract", then the references' numpy schedules in report order."""
    return (CONTRACT, *registry.seed_schedules())


def __getattr__(name: str):
    if name == "SCHEDULES":   # asked of the registry each time, so a plug-in's schedule is known
        return schedules()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _first_iterations() -> dict:
    return {name: s.first_iteration for name, s in registry.seed_schedules().items()
            if s.first_iteration is not None}


#: the reference's loop index of the trainer's iteration 0, per default_rng schedule
FIRST_ITERATION: Mapping = registry.Asked(_first_iterations)


def check_schedule(name) -> str:
    """`name` if it is a known schedule, else ValueError naming the field."""
    known = schedules()
    if name not in known:
        raise ValueError(f"seed_schedule: unknown value {name!r}; known: {known}")
    return name


def _choices(names) -> str:
    quoted = [repr(n) for n in names]
    return " or ".join([", ".join(quoted[:-1]), quoted[-1]]) if len(quoted) > 1 else "".join(quoted)


def reference_seeds(schedule: str, seed: int, iteration: int, count: int) -> list[int]:
    """The `count` 30-bit seeds a reference loop draws at the trainer's `iteration` (list of int).

    schedule: a reference's numpy schedule (ValueError naming them otherwise, "contract"
    included); seed: the global seed (0 stands for 42 under the default_rng schedules, like
    the references' ``global_seed or 42``; a schedule may refuse a seed with ValueError);
    iteration: the trainer's counter (>= 0); count: N, or N/2 with pairs.
    """
    known = registry.seed_schedules()
    if schedule not in known:
        raise ValueError(f"seed_schedule {schedule!r} has no numpy draw; use {_choices(known)}")
    if iteration < 0 or count < 0:
        raise ValueError(f"iteration and count must be >= 0, got {iteration}, {count}")
    return list(known[schedule].draw(int(seed), int(iteration), int(count)))


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
