"""The `es-paper` seed schedule: the paper's original scripts' numpy draw (docs/references.md §6).

The scripts seed numpy's LEGACY generator once, ``np.random.seed(seed)``,
then draw per iteration ``np.random.randint(0, 2**30, size=count,
dtype=int64)``, so iteration i's seeds follow i earlier draws of the same
stream. We never touch numpy's global state: a private
``RandomState(seed)`` yields the same stream (tests/test_es_paper_profile.py
shows it). The seed is used as given (0 is 0) and must be in [0, 2**32),
numpy's legacy range.

Checks: ``python -m pytest -q tests/test_es_paper_profile.py``.
"""
from __future__ import annotations

import functools

import numpy as np

from esverify.es.seeds import SEED_BOUND, SeedSchedule


def seed_stream(initial_seed: int, count: int):
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
def _draw(seed: int, count: int, iteration: int) -> tuple:
    stream = seed_stream(seed, count)
    for _ in range(iteration):
        next(stream)
    return tuple(next(stream))


def draw(seed: int, iteration: int, count: int) -> list[int]:
    """Iteration `iteration`'s `count` seeds of the stream seeded `seed` (cached; ValueError as `seed_stream`)."""
    return list(_draw(int(seed), int(count), int(iteration)))


SCHEDULE = SeedSchedule(name="es-paper", draw=draw)
