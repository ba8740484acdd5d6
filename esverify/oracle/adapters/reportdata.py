"""The report part of a reference adapter: what the reports say of it (coverage, findings, blame, not
checked); see esverify.oracle.adapters.clone for the four parts."""
from __future__ import annotations


class ReportData:
    """The per-reference data of parity's reports (esverify.oracle.parity_report, loop_report, blame)."""

    #: one line saying what the reference is (for people and docs; `parity --help` imports no adapter)
    summary: str = ""
    #: clone file -> functions its loops reach (docs/references.md §5), for the coverage section
    reached: dict = {}
    #: finding key -> description of a documented reference quirk a row may observe
    findings: dict = {}
    #: op (or op family, the part before "-") -> ["clone file::qualified function"] that compute its
    #: results: a failing row of a clean clone names them (esverify.oracle.blame; docs/parity.md "Blame")
    computes: dict = {}

    def computes_for(self, case) -> list[str]:
        """["file::function"] that compute the results of `case`'s op (`computes`; [] when unknown)."""
        return list(self.computes.get(case.op) or self.computes.get(case.kind)
                    or self.computes.get(case.op.split("-")[0]) or [])

    def not_checked(self, loops_left_out: bool = False) -> str:
        """The ops a report lists as not checked: every op, or (loops_left_out) the loop ops."""
        return ", ".join(self.loop_ops if loops_left_out else self.all_ops())

    def never_checked(self) -> list[tuple[str, str]]:
        """[(what, why)]: parts of the reference parity never checks, listed in every report that runs it
        (none by default)."""
        return []

    def finding(self, key: str) -> str:
        """The description of finding `key` (KeyError names the adapter's findings)."""
        if key not in self.findings:
            raise KeyError(f"{self.name}: unknown finding {key!r}; known: {sorted(self.findings)}")
        return self.findings[key]
