"""The core's services a reference's own rows use, handed over at run time as `session.tools` (CONTRIBUTING.md,
"Adding a reference"): a reference module imports of esverify.oracle only the spec, the case types and the
result types verdict judges (tests/test_reference_spec.py); what it needs of the core beyond them (the child
round trip, the bitwise comparison, the parameter sets, the loops' reward) it reaches through the RowTools of
the session its `run_row(session, case)` receives, as numpy hands a bit generator's functions through its
capsule. Each method delegates to one core function with that function's signature (exchange less its
session, which the tools are bound to); none decides a verdict.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Callable

if TYPE_CHECKING:
    from . import compare as _compare

# The services' modules import torch: each method imports its own when called, so that making a Session
# (which binds these tools) imports nothing heavy: a run launches its warm start server before torch loads.


class RowTools:
    """The core's row services, bound to one Session (Session.tools)."""

    def __init__(self, session):
        self.session = session

    def exchange(self, case, command: dict, compute: Callable | None = None,
                 first_result: Callable | None = None) -> tuple:
        """esverify.oracle.verdict.exchange with this session: (reply, our computed result or None); a child
        that failed or an error reply ends the row with the core's own row."""
        from . import verdict
        return verdict.exchange(self.session, case, command, compute, first_result)

    @staticmethod
    def compare(ours: list, theirs: list, theirs_dtypes: list, names: list | None = None) -> _compare.Comparison:
        """esverify.oracle.compare.compare: our tensors against the child's bit arrays, slot by slot."""
        from . import compare as _compare
        return _compare.compare(ours, theirs, theirs_dtypes, names)

    @staticmethod
    def findings(attribution: dict | None) -> _compare.Findings:
        """esverify.oracle.compare.findings: the child's `attribution` reply as Findings (Draws.found)."""
        from . import compare as _compare
        return _compare.findings(attribution)

    @staticmethod
    def read_set(path) -> tuple:
        """esverify.oracle.paramsets.read: (names or [], bit arrays, dtype names) of a set or result file."""
        from . import paramsets
        return paramsets.read(path)

    @staticmethod
    def tensor_bits(t):
        """esverify.oracle.paramsets.tensor_bits: a tensor's raw bit patterns, shape kept."""
        from . import paramsets
        return paramsets.tensor_bits(t)

    @staticmethod
    def dtype_name(t) -> str:
        """esverify.oracle.paramsets.dtype_name: "f32", "f16", "bf16" or "f64" of a tensor's dtype."""
        from . import paramsets
        return paramsets.dtype_name(t)

    @staticmethod
    def reward(tensors, target: float, dtype=None) -> float:
        """esverify.oracle.rewards.loop_reward: -fsum((f64(theta) - target)**2), the loops' member reward."""
        from . import rewards
        return rewards.loop_reward(tensors, target, dtype)

    @staticmethod
    def with_nonfinite_target(data, shape: str | None) -> tuple:
        """esverify.oracle.rewards.with_nonfinite_target: the targets with the first made NaN or +inf."""
        from . import rewards
        return rewards.with_nonfinite_target(data, shape)
