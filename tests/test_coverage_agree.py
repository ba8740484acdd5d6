"""A report's coverage section and its rows agree: a function that a passing row ran is never reported as
"did not run" in the same report (docs/parity.md, "Coverage").

EGGROLL's resume rows run the trainer twice, into <case>/first and <case>/resumed; the child counted two
folders up from a command's `out` to find the run's work folder, so those two runs' record went to
work/cases/ where the parent never looked, and the report warned that `load_checkpoint` did not run
beside rows that said they had resumed from a checkpoint through it."""
from __future__ import annotations

import subprocess
import sys

import pandas as pd
import pytest

from esverify.oracle import Options, run_parity
from esverify.paths import oracles_dir
from standins.mutants import STANDINS


def _store_path(out, target="t"):
    """child_coverage.store_path, run where it runs: in a child interpreter with the child's folder on
    sys.path (the esverify package never imports the child's modules)."""
    script = (f"import sys; sys.path.insert(0, {str(oracles_dir())!r}); import child_coverage; "
              f"print(child_coverage.store_path({{'out': {str(out)!r}}}, {target!r}))")
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60,
                          check=True).stdout.strip()


@pytest.mark.parametrize("inside", ["", "first", "resumed", "first/deeper"])
def test_every_command_of_a_case_saves_its_record_in_the_run_work_folder(tmp_path, inside):
    work = tmp_path / "work"
    out = work / "cases" / "eggroll_cpu_f32_resume" / inside
    assert _store_path(out) == str(work.resolve() / "coverage-t.json")


@pytest.mark.slow   # runs one eggroll resume row (two trainer runs) on the stand-in
def test_a_resume_row_that_passed_is_covered_by_the_coverage_section(tmp_path):
    result = run_parity(Options(ref=str(STANDINS / "eggroll-vllm"), target="eggroll", case="*/r2-e2-resume",
                                quiet=True, out=str(tmp_path / "out")))
    frame = result.frame
    assert list(frame["status"]) == ["pass"] and "resumed from the checkpoint" in frame["detail"].iloc[0]
    coverage = result.metadata["coverage"]["eggroll"]
    assert coverage["error"] == "" and coverage["reached_not_run"] == []
    warnings = [w for w in result.metadata["warnings"] if "coverage" in w]
    assert warnings == [], warnings
    table = pd.read_csv(result.out_dir / "parity-coverage.csv")
    ran = dict(zip(table["function"], table["ran"]))
    assert ran["load_checkpoint"] and ran["save_checkpoint"] and ran["main"], ran
