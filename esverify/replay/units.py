"""Work units of a replay: (tensor, element range) (docs/replay.md §5).

Every element of a replayed tensor depends only on the same element of
the base weights and of the noise, so any partition of the elements gives
the same bits. Under native noise a unit is a whole tensor (torch's CPU
generator has no random access: a draw always starts at element 0);
under contract noise a unit is at most `shard_elements` elements (the
contract's streams are counter-based, docs/CONTRACT.md §4). Tensors that
are not f32/f16/bf16 (integer buffers) get a `static` unit: ES never
changes them, so they are compared as they are.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

#: default elements per unit under contract noise (64 MiB of f32)
DEFAULT_SHARD = 1 << 24
FLOATS = (torch.float32, torch.float16, torch.bfloat16)
#: member-elements (elements x seeds, summed over iterations) that pay for one more worker process:
#: a spawned worker costs seconds of start-up (torch, the noise kernels), about what one worker
#: replays of this much work, so a smaller replay runs in this process (docs/replay.md §5)
WORK_PER_WORKER = 1 << 29


@dataclass(frozen=True)
class Unit:
    """One work unit: elements [start, end) of tensor `name` (numel elements, shape, dtype name).

    kind: "replay" (an ES parameter) or "static" (compared as is); dtype: the replay's (never
    taken from the checkpoint under test); layout: "" or how the checkpoint's dtype or shape differs
    from the replay's (then every element is a difference and none is compared).
    """

    index: int
    name: str
    start: int
    end: int
    numel: int
    shape: tuple
    dtype: str
    kind: str
    layout: str = ""


def plan_units(tensors, noise: str, shard_elements: int = DEFAULT_SHARD) -> list[Unit]:
    """The units of a replay, in tensor order then element order (docs/replay.md §5).

    tensors: (name, shape, torch dtype) triples of the expected checkpoint;
    noise: "native" (whole tensors) or "contract" (ranges of at most
    shard_elements >= 1). Empty tensors get one empty unit. ValueError for
    an unknown noise or a shard size below 1.
    """
    if noise not in ("native", "contract"):
        raise ValueError(f"noise: unknown value {noise!r}; known: ('native', 'contract')")
    if isinstance(shard_elements, bool) or not isinstance(shard_elements, int) or shard_elements < 1:
        raise ValueError(f"shard_elements must be an integer >= 1, got {shard_elements!r}")
    units = []
    for name, shape, dtype in tensors:
        numel = math.prod(shape)
        kind = "replay" if dtype in FLOATS else "static"
        step = shard_elements if noise == "contract" and kind == "replay" else max(numel, 1)
        for start in range(0, max(numel, 1), step):
            units.append(Unit(len(units), name, start, min(numel, start + step), numel, tuple(shape),
                              str(dtype).removeprefix("torch."), kind))
    return units


def default_workers(units, iterations, cores: int) -> int:
    """Workers a replay gets when --workers is not given: one per WORK_PER_WORKER member-elements of
    its replay units, at least 1, at most `cores` and the number of replay units (docs/replay.md §5).

    units: the Units; iterations: per iteration (seeds, ...); cores: the cores available."""
    members = sum(len(it[0]) for it in iterations)
    work = members * sum(u.end - u.start for u in units if u.kind == "replay")
    replay_units = sum(1 for u in units if u.kind == "replay")
    return max(1, min(cores, replay_units, work // WORK_PER_WORKER))
