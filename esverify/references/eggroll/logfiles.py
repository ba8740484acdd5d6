"""The files of a low-rank run log, written by our loop (docs/replay.md §10); `runlog` reads and replays them.

Design record: `lowrank.run_lowrank_loop(..., run_log=DIR)` writes through
this module, and `runlog` (which replays with the loop's own update)
imports `lowrank`: the writing side is here so that the two import one
way. `args.json` holds the settings with ``esverify.format`` = `FORMAT`;
each step is ``iteration_updates/iteration_NNNNNN.json``; every file is
written atomically.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from ... import jsonin
from ...report import write_atomic

FORMAT = "esverify.references.eggroll.runlog/1"
STEPS_DIR = "iteration_updates"
SETTINGS = ("population", "sigma", "lr", "rank", "steps_per_adapter", "normalize_with_std", "scale_lr_in_grad",
            "chunk_size", "noise", "base_seed", "seed", "mapping", "start_step", "peft_shapes")


def step_file(folder, step: int) -> Path:
    return Path(folder) / STEPS_DIR / f"iteration_{step:06d}.json"


def write_args(folder, settings: dict) -> None:
    """Write `args.json` (settings plus the format tag) atomically; creates the folder and iteration_updates/."""
    folder = Path(folder)
    (folder / STEPS_DIR).mkdir(parents=True, exist_ok=True)
    write_atomic(folder / "args.json", jsonin.dumps({**settings, "esverify": {"format": FORMAT}}, indent=1,
                                                  sort_keys=True) + "\n")


def write_step(folder, step: int, generation: int, rewards: np.ndarray, shaped: np.ndarray) -> None:
    """Write one step's file atomically: {"iteration", "generation", "fitness" (N x P'), "shaped" (N)}."""
    doc = {"iteration": int(step), "generation": int(generation),
           "fitness": [[float(v) for v in row] for row in np.asarray(rewards, dtype=np.float64)],
           "shaped": [float(v) for v in np.asarray(shaped, dtype=np.float64)]}
    write_atomic(step_file(folder, step), jsonin.dumps(doc) + "\n")


def settings_of(peft_shapes, **kw) -> dict:
    """args.json's settings from the loop's arguments (JSON-able; peft_shapes as [name, [out, in]])."""
    out = {k: kw[k] for k in SETTINGS if k != "peft_shapes"}
    out["peft_shapes"] = [[name, [int(shape[0]), int(shape[1])]] for name, shape in peft_shapes]
    return out
