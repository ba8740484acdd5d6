"""Buffers a replay worker reuses from one unit to the next (docs/replay.md §9).

Why: every unit needs the same few buffers (its base elements, the
checkpoint's, the naive replay, a window's accumulator), and a buffer
allocated anew per unit is fresh memory whose pages the operating system
faults in and zeroes on first touch: measured at about 0.6 ms per 4 MiB,
3-4% of a unit at the benchmark's defaults. A buffer here is allocated
once per thread and role and handed out again for every later unit of at
most its size. Values are never carried from one use to the next: a
caller overwrites (or zeroes) what it takes. The memory held is the
largest unit's buffers, until `release`.
"""
from __future__ import annotations

import threading

import torch

_LOCAL = threading.local()


class Scratch:
    """Per-role byte buffers, grown on demand, on the CPU (one thread's: not shared between threads)."""

    def __init__(self):
        self._buffers: dict = {}

    def take(self, role: str, n: int, dtype: torch.dtype) -> torch.Tensor:
        """A 1-D CPU tensor of `n` elements of `dtype` (contiguous, 64-byte aligned, contents undefined),
        the same memory for every call with this `role` until a larger one is asked for. The tensor of an
        earlier call with the same role is overwritten by whoever uses this one: one live use per role."""
        size = n * dtype.itemsize
        buf = self._buffers.get(role)
        if buf is None or buf.numel() < size:
            self._buffers.pop(role, None)   # the old buffer's memory goes back before the new one is taken
            buf = self._buffers[role] = torch.empty(size, dtype=torch.uint8)
        return buf[:size].view(dtype)

    def held(self) -> int:
        """Bytes held by this thread's buffers."""
        return sum(b.numel() for b in self._buffers.values())

    def clear(self) -> None:
        self._buffers.clear()


def scratch() -> Scratch:
    """This thread's Scratch (created on first use)."""
    mine = getattr(_LOCAL, "scratch", None)
    if mine is None:
        mine = _LOCAL.scratch = Scratch()
    return mine


def release() -> None:
    """Free this thread's buffers (a replay run in the calling process gives them back when it ends)."""
    scratch().clear()
