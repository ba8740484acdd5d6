"""The ops of the sparse, AltEggRoll and EggRollBS rows and the cells they run in (docs/hyperscale.md §14).

Kept apart from .rows_noisers so that the adapter reads them without importing the rows (which import
the core's comparison, and torch, when a row runs).
"""
from __future__ import annotations

#: op -> population of the forward rows (every dtype, both noises)
NOISE_OPS = {"noise-sparse": 4, "noise-alteggroll": 4, "noise-eggrollbs": 8, "eggrollbs-defaults": 4}
#: op -> (noiser, rank, population) of the update rows (f32, both noises)
UPDATE_OPS = {"update-alteggroll-jit": ("alteggroll", 2, 8), "update-alteggroll-eager": ("alteggroll", 2, 8),
              "update-sparse-jit": ("sparse", 1, 8), "update-sparse-eager": ("sparse", 1, 8)}
#: op -> population of the findings rows (f32, native noise)
FINDING_OPS = {"sparse-batch": 2}
OPS = (*NOISE_OPS, *FINDING_OPS, *UPDATE_OPS)


def cases(cell) -> None:
    """These rows of one cell (the adapter's `cases` has already kept CPU, one scheme cell, no mixed set)."""
    for op, n in NOISE_OPS.items():
        cell.add(op, n)
    if cell.dtype == "f32":
        for op, (_, _, n) in UPDATE_OPS.items():
            cell.add(op, n)
        if cell.noise == "native":
            for op, n in FINDING_OPS.items():
                cell.add(op, n)
