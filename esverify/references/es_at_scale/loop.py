"""What es-at-scale's `fit` loop does its own way (docs/references.md §5): the quirks the core's loop row
(esverify.oracle.loop_rows, loop_compare) asks through `LoopQuirks`."""
from __future__ import annotations

from esverify.oracle.spec import LoopQuirks

#: the finding a fit row records (the adapter's `findings` describes it)
EXTRA_UPDATE = "fit-extra-update"

#: what counts as fit's final save when its tape records what happened after the last update
_SAVES = ("torch_save", "save_calls", "files")


class FitQuirks(LoopQuirks):
    """fit tests its counter after the increment (num_iterations + 1 updates, reproduced on our side and
    recorded as a finding), numbers its iterations from 0, saves engine 0's weights at the end by a means
    the docs leave open, and keys members by seed value (equal seeds merge into one member)."""

    def updates(self, iterations: int) -> int:
        return iterations + 1

    def record_number(self, index: int) -> int:
        return index

    def save_missing(self, theirs: dict) -> str | None:
        after = theirs.get("after_last_update")
        if after is None or any(after.get(k) for k in _SAVES):
            return None
        # docs/references.md §5 says fit saves engine 0's weights at the end, not how: any of the three
        return ("final save: theirs saved nothing after its last update (no torch.save, no worker method named "
                "*save*, no file written under its logging folder); docs/references.md §5: fit saves engine 0's "
                "weights at the end")

    def notes(self, session, case, ours: dict, theirs: dict) -> list[str]:
        # here, not at the top: the adapter imports this module to recognise clones, before a parity run
        # imports torch (esverify.es does)
        from esverify.es.schedule import duplicate_seeds
        session.record_finding(EXTRA_UPDATE, case, f"{theirs['updates']} updates for num_iterations "
                                                   f"{int(case.extra['iterations'])}")
        notes = []
        for i, it in enumerate(ours["iterations"]):
            repeated = duplicate_seeds(it["update"]["seeds"])
            if repeated:   # members keyed by seed value (docs/references.md §5)
                notes.append(f"note: iteration {i} drew equal seeds {sorted(repeated)}: {case.target}'s loop merges "
                             "them into one member (a quirk of the reference)")
        return notes


QUIRKS = FitQuirks()
