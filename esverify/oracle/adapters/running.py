"""The running part of a reference adapter: how the core runs a row of it (the generic single-op path
under its numerics profile, its loop rows through a LoopSpec, or rows it runs itself); see
esverify.oracle.adapters.clone for the four parts."""
from __future__ import annotations

from .loopspec import LoopSpec


class RowRunning:
    """How a reference's rows run (esverify.oracle.rows, row_runner, loop_rows). Subclasses provide
    `profile`, and `loop_spec` when they have loop ops."""

    #: our numerics profile (esverify.es.profiles) the clean-room side runs this reference's cases under
    profile: str = ""

    def loop_spec(self, case) -> LoopSpec:
        """How the core replays the loop row `case` (one of `loop_ops`); see LoopSpec."""
        raise NotImplementedError(f"{type(self).__name__}.loop_spec must be overridden when it has loop_ops")

    def set_variant(self, case) -> str:
        """The parameter-set variant a single-op case starts from (esverify.oracle.paramsets)."""
        return "base"

    def needs_anchor(self, case) -> bool:
        """Whether a single-op case gets the anchor set (anchored decay)."""
        return False

    def rule_for(self, device: str) -> str:
        """The profile rule a case on `device` runs under: the trainer profile's `rule_for` when it has
        several rules (es-awd, es-paper), "" when it has one or is not a trainer profile (a loop profile
        overrides this)."""
        import torch

        from esverify.es import get_profile
        try:
            prof = get_profile(self.profile)
        except ValueError:
            return ""
        return prof.rule_for(torch.device(device)) if len(prof.rules) > 1 else ""

    def run_row(self, session, case):
        """What `case` ran and found when this adapter runs it entirely (an esverify.oracle.verdict.Outcome,
        which the core judges into the row; see esverify.oracle.session.Session for what `session` offers),
        or None: the core's generic single-op path runs it."""
        return None
