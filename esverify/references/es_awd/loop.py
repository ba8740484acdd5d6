"""What es-awd's `main` loop does its own way (docs/references.md §5): the quirks the core's loop row
(esverify.oracle.loop_rows, loop_compare) asks through `LoopQuirks`."""
from __future__ import annotations

from esverify.oracle.spec import LoopQuirks


class MainQuirks(LoopQuirks):
    """main's parse_args switches torch.use_deterministic_algorithms on when it is given a global seed;
    otherwise its loop is the default one (num_iterations updates, records from 1, torch.save at the end)."""

    def deterministic(self, global_seed) -> bool:
        return global_seed is not None


QUIRKS = MainQuirks()
