"""A bounded store of drawn noise ranges, for callers that draw the same range again.

A range of the contract is a pure function of what decides its bits (mapping, stream seed, first
element, length: docs/CONTRACT.md §4), so a caller that draws it again may copy it instead. The
parity oracle does so on both sides: our side's trainers (esverify.oracle.noise_memo) and the child's
noise hook (oracle_child/child_server.py), where a member's perturb, restore and update, and the rows
of one run, draw the same ranges. The trainer library itself never keeps noise.
"""
from __future__ import annotations

import threading
from collections import OrderedDict


class RangeMemo:
    """Tensors kept under keys, least recently used out first once they pass `budget` bytes (an int
    >= 0; the newest is always kept, so the store holds at most the budget plus one range).

    The caller's key must hold everything that decides the bits (and the device). Tensors are shared:
    hand out copies. Thread-safe: two threads asking for one key at once may both draw it (the same
    bits), and one is kept. ValueError naming `budget` when it is not an int >= 0.
    """

    def __init__(self, budget: int):
        if isinstance(budget, bool) or not isinstance(budget, int) or budget < 0:
            raise ValueError(f"budget must be an int >= 0 (bytes), got {budget!r}")
        self.budget = budget
        self.bytes = 0
        self._kept: OrderedDict = OrderedDict()
        self._lock = threading.Lock()
        self._cleared = 0   # clear() calls so far: a range drawn across one is not kept

    def get(self, key, draw):
        """(tensor, hit): the tensor kept under `key` and True, or draw()'s tensor, now kept (unless clear()
        ran while it was drawn), and False."""
        with self._lock:
            kept = self._kept.get(key)
            if kept is not None:
                self._kept.move_to_end(key)
                return kept, True
            cleared = self._cleared
        tensor = draw()
        with self._lock:
            if cleared != self._cleared:
                return tensor, False
            old = self._kept.pop(key, None)   # another thread may have drawn the same range meanwhile
            if old is not None:
                self.bytes -= old.numel() * old.element_size()
            self._kept[key] = tensor
            self.bytes += tensor.numel() * tensor.element_size()
            while self.bytes > self.budget and len(self._kept) > 1:
                _, old = self._kept.popitem(last=False)
                self.bytes -= old.numel() * old.element_size()
        return tensor, False

    def keys(self) -> list:
        """The keys kept, least recently used first."""
        with self._lock:
            return list(self._kept)

    def __len__(self) -> int:
        return len(self._kept)

    def clear(self) -> None:
        """Forget every range kept."""
        with self._lock:
            self._kept.clear()
            self.bytes = 0
            self._cleared += 1
