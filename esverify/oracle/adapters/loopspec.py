"""How the core replays a reference's training-loop rows (esverify.oracle.loop_rows): the loop's settings
(`LoopSpec`) and what the loop does its own way (`LoopQuirks`, code of the reference's package).

Both are defined in esverify.oracle.spec, the leaf a reference imports; this module keeps their old home."""
from __future__ import annotations

from ..spec import LoopQuirks, LoopSpec

__all__ = ["LoopQuirks", "LoopSpec"]
