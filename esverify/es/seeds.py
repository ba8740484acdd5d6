"""The record of a member-seed schedule, and numpy's default_rng draw that two reference loops share (docs/references.md §5).

A *seed schedule* decides the 30-bit member seeds of each iteration of a
reference's loop; each reference declares its own (`SeedSchedule`, in its
package, registered in esverify.registry as ``seed_schedules``) and the
trainer asks esverify.es.schedule for it by name (``Config.seed_schedule``).
Its own module, importing nothing that looks schedules up, so that a
reference's schedule module can import it.

`default_rng_schedule` builds the draw
``numpy.random.default_rng((seed or 42) + i + first_iteration).integers(0, 2**30, size=count, dtype=int64)``,
where i is the trainer's iteration and `first_iteration` the reference
loop's index of it.

Checks: ``python -m pytest -q tests/test_es_schedule.py``.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

SEED_BOUND = 2 ** 30
DEFAULT_GLOBAL_SEED = 42


@dataclass(frozen=True)
class SeedSchedule:
    """One named member-seed schedule (docs/references.md §5).

    name: the value of ``Config.seed_schedule`` and of run logs (the
    reference's name). draw(seed, iteration, count) -> the `count` seeds
    (ints below 2**30) the loop draws at the trainer's `iteration`; it is
    called with ints, iteration and count >= 0, and raises ValueError for
    a seed it refuses. first_iteration: for a `default_rng_schedule`, the
    loop's index of the trainer's iteration 0 (None for another draw).
    """

    name: str
    draw: Callable[[int, int, int], list] = field(repr=False)
    first_iteration: int | None = None


@functools.lru_cache(maxsize=64)
def default_rng_draw(base: int, count: int) -> tuple:
    """``default_rng(base).integers(0, 2**30, size=count, dtype=int64)`` as a tuple of int (cached:
    ``default_rng_draw.cache_clear()`` after numpy's generator is replaced)."""
    return tuple(int(v) for v in np.random.default_rng(seed=base).integers(0, SEED_BOUND, size=count,
                                                                             dtype=np.int64))


def default_rng_seeds(seed: int, iteration: int, count: int, first_iteration: int = 0) -> list[int]:
    """``default_rng((seed or 42) + iteration + first_iteration).integers(0, 2**30, size=count, dtype=int64)``
    as a list of int (0 stands for 42, like the references' ``global_seed or 42``)."""
    return list(default_rng_draw((int(seed) or DEFAULT_GLOBAL_SEED) + int(iteration) + first_iteration, int(count)))


def default_rng_schedule(name: str, first_iteration: int) -> SeedSchedule:
    """The schedule `name` drawing `default_rng_seeds` with the loop's `first_iteration`."""
    return SeedSchedule(name=name, draw=functools.partial(default_rng_seeds, first_iteration=first_iteration),
                        first_iteration=first_iteration)
