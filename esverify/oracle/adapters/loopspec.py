"""How the core replays a reference's training-loop rows (esverify.oracle.loop_rows): the loop's settings
(`LoopSpec`) and what the loop does its own way (`LoopQuirks`, code of the reference's package)."""
from __future__ import annotations

from dataclasses import dataclass, field


class LoopQuirks:
    """What a reference's training loop does its own way, as code of its package (docs/references.md §5):
    the core's loop row (esverify.oracle.loop_rows, loop_compare) calls these hooks; the defaults are a loop
    that makes num_iterations updates, numbers its records from 1, saves its final weights with torch.save,
    and leaves the determinism switch alone. A reference overrides what its loop does otherwise."""

    def updates(self, iterations: int) -> int:
        """How many updates the loop makes for num_iterations `iterations`."""
        return iterations

    def record_number(self, index: int) -> int:
        """The iteration number the loop's record of its `index`-th update (from 0) carries."""
        return index + 1

    def deterministic(self, global_seed) -> bool:
        """Whether the loop's entry point switches torch.use_deterministic_algorithms on for `global_seed`
        (our side then runs under the same setting)."""
        return False

    def save_missing(self, theirs: dict) -> str | None:
        """Why the loop's tape `theirs` lacks the final save the loop makes (None: it has it). The default:
        the final weights saved with torch.save (`theirs["saved"]`)."""
        return None if theirs.get("saved") else "final state_dict: theirs saved none with torch.save"

    def notes(self, session, case, ours: dict, theirs: dict) -> list[str]:
        """Notes the row carries for what the reference's loop did its own way in this run (a quirk seen:
        `session.record_finding` lists it among the findings); none by default."""
        return []


@dataclass(frozen=True)
class LoopSpec:
    """How the core replays one training-loop row of a reference (esverify.oracle.loop_rows).

    style: "batched" (every member evaluated on each mini-batch of `data`, the batch-weighted mean
    reward per member, z-scores handed over explicitly) or "passes" (one pass over the members per sign,
    the mean reward over `data`, mirrored pairs when `mirror`); engines: engines the members are
    grouped over; schedule: the seed schedule of esverify.es.schedule (and its FIRST_ITERATION key);
    data, mini_batch: the reward targets of an iteration and the mini-batch size (batched);
    mirror, caching, decay, lam: the loop's sampling and anchored-decay settings (caching None: its
    perturb/restore take no such argument); engine_dtype: the precision the reference documents
    launching its engines with ("bfloat16", "float16", "float32"; "auto": the weights' own): our rewards
    are computed in it, the stand-in engines compute theirs in what the loop really launched
    (docs/parity.md, "The training loops"); command: the op-specific fields of the child's loop command;
    quirks: what the loop does its own way (`LoopQuirks`, code of the reference's package). (A loop whose
    caching=True reuses noise needs no flag: the hook sees the reuse and the one rule of every row judges
    it, esverify.oracle.compare.judge_reuse.)"""
    style: str
    engines: int
    schedule: str
    data: tuple
    command: dict
    mini_batch: int = 0
    mirror: bool = False
    caching: bool | None = None
    decay: str = "none"
    lam: float = 0.0
    engine_dtype: str = "auto"
    quirks: LoopQuirks = field(default_factory=LoopQuirks)
