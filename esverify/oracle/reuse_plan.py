"""A reference's noise reuse, call by call, for our side to replay (docs/parity.md, "Diagnoses").

The child's hook records, for every perturb, restore and update a loop
makes, the slots that call left undrawn (oracles/child_loops.py
`CallAudit`). A reuse need not be the same in every call: a reference may
reuse an equal-size draw in its perturb and draw every slot in its restore
(the restore then does not undo the perturb, and theta drifts). Replaying
one map for the whole case would make our restore reuse too, and the row
would fail on a difference that is not there. `ReusePlan` therefore turns
each call's undrawn slots into that call's {slot: noise slot} map
(`compare.reuse_sources`, the rule of every row kind), and our side sets
it before the matching call: per iteration and per member evaluation for
the loops driven through their entry points (the tape's member records),
in call order for the in-process loop (whose calls our trainer makes in
the child's order).
"""
from __future__ import annotations

from . import compare as _compare


def _map(missing, layout) -> dict:
    return _compare.reuse_sources(list(missing), layout) if missing else {}


class ReusePlan:
    """Per-call slot maps of one loop row.

    layout: [(dtype name, shape)] per slot, in slot order; iterations: per iteration with an update,
    {"perturb": [map per evaluation], "restore": [map per evaluation], "update": map}."""

    def __init__(self, layout, iterations):
        self.layout, self.iterations = list(layout), list(iterations)

    @classmethod
    def from_tape(cls, theirs: dict, layout) -> "ReusePlan | None":
        """The plan of a reference's loop tape (iterations with an update, their members in evaluation
        order, each with `missing` and `restore_missing`; the update's `missing`); None when the tape
        records no call's undrawn slots (a child without the record) or no call left any undrawn."""
        iterations, seen, any_missing = [], False, False
        for it in theirs.get("iterations", []):
            update = it.get("update")
            if not update:
                continue
            members = it.get("members", [])
            seen = seen or "missing" in update or any("missing" in m for m in members)
            any_missing = any_missing or bool(update.get("missing")) or any(
                m.get("missing") or m.get("restore_missing") for m in members)
            iterations.append({"perturb": [_map(m.get("missing"), layout) for m in members],
                               "restore": [_map(m.get("restore_missing"), layout) for m in members],
                               "update": _map(update.get("missing"), layout)})
        return cls(layout, iterations) if seen and any_missing else None

    def perturb(self, iteration: int, evaluation: int) -> dict:
        """The map of the perturb of evaluation `evaluation` (0-based, time order) of iteration
        `iteration` (0-based over the updates); {} beyond what the reference did."""
        return self._get(iteration, "perturb", evaluation)

    def restore(self, iteration: int, evaluation: int) -> dict:
        return self._get(iteration, "restore", evaluation)

    def update(self, iteration: int) -> dict:
        return self.iterations[iteration]["update"] if iteration < len(self.iterations) else {}

    def _get(self, iteration, call, evaluation) -> dict:
        if iteration >= len(self.iterations):
            return {}
        maps = self.iterations[iteration][call]
        return maps[evaluation] if evaluation < len(maps) else {}


class CallOrderPlan:
    """The maps of a reference's calls in the order it made them ([missing slots] per call, as
    `CallAudit.per_call`): `next()` gives the next call's map ({} once they run out). For a loop our
    trainer drives in the child's own call order (the in-process loop: each member's perturb and
    restore, then the update)."""

    def __init__(self, per_call, layout):
        self.maps = [_map(missing, layout) for missing in per_call]
        self.position = 0

    def next(self) -> dict:
        self.position += 1
        return self.maps[self.position - 1] if self.position <= len(self.maps) else {}
