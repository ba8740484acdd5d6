"""The reference adapter: what the oracle core knows about one reference (CONTRIBUTING.md, "Adding a reference").

Design record: one reference = one adapter. The core (cases,
runner, session, reports, command line) is written once against this class,
as numpy's Generator is written against BitGenerator, and checks only that
an adapter is one. An adapter is the sum of four small parts, each in its
own module with defaults for all but a few members: the clone
(`clone.CloneLayout`: layout, recognition, child driver), its cases
(`casebook.CaseBook`: ops, its part of the default matrix, check, draw and
shrink), how its rows run (`running.RowRunning`: numerics profile, the
generic single-op path or its own `run_row`, loop rows through a
`loopspec.LoopSpec` whose `LoopQuirks` are the reference's own code) and
its report data (`reportdata.ReportData`: functions its loops reach,
findings, blame, not-checked text). The parts are mixins of one object
(a report part reads the cases part's ops). A subclass must set `name`
(adapters.get checks it), `files`, `driver`, `profile` and `ops` (and
`fuzz_ops` for `--fuzz`), and override `cell_cases` (and `loop_spec`
when it has loop ops: they raise NotImplementedError); everything else
has a default that a simple single-op reference keeps. A reference need not
subclass it: it may write an esverify.oracle.spec.ReferenceSpec (twelve
members), which esverify.oracle.adapters.from_spec.SpecAdapter answers
this interface from.
"""
from __future__ import annotations

from dataclasses import replace

from ..case_model import Cell
from ..spec import even
from .casebook import CaseBook, MatrixSpec
from .clone import CloneLayout
from .loopspec import LoopQuirks, LoopSpec
from .reportdata import ReportData
from .running import RowRunning


class Adapter(CloneLayout, CaseBook, RowRunning, ReportData):
    """One reference, as the oracle core sees it. Subclasses set the class attributes and override
    what the parts cannot know; see CONTRIBUTING.md, "Adding a reference"."""

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name}>"


__all__ = ["Adapter", "CaseBook", "Cell", "CloneLayout", "LoopQuirks", "LoopSpec", "MatrixSpec", "ReportData",
           "RowRunning", "even", "replace"]
