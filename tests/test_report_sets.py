"""Report sets are written whole or not at all (esverify/reportset.py).

A write that fails part-way (the Nth file raises ENOSPC, or RLIMIT_FSIZE stops a subprocess) must
leave no file of the set that claims a verdict: before, audit exited 2 but left 14 of its 15 files,
whose JSON said "pass, exit 0". Checked for the set itself, audit, goldens check (--json with
--junit) and parity (report, child logs and --junit).
"""
from __future__ import annotations

import errno
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from esverify import reportset
from esverify.cli import main

ROOT = Path(__file__).resolve().parents[1]


def _fail_on(monkeypatch, n: int) -> list:
    """Make the n-th staged file of any set raise ENOSPC (after the earlier ones were written)."""
    calls = []
    real = reportset._stage

    def stage(path, content):
        calls.append(path)
        if len(calls) == n:
            raise OSError(errno.ENOSPC, "No space left on device (simulated)", str(path))
        return real(path, content)
    monkeypatch.setattr(reportset, "_stage", stage)
    return calls


def _leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.rglob("*") if p.is_file() and p.name != ".esverify-run.lock")


@pytest.mark.parametrize("n", [1, 2, 3])
def test_a_set_failing_at_the_nth_file_leaves_nothing(tmp_path, monkeypatch, n):
    _fail_on(monkeypatch, n)
    s = reportset.ReportSet()
    for name in ("r.json", "r-summary.csv", "r.md"):
        s.add_text(tmp_path / name, "x" * 100)
    with pytest.raises(OSError, match="simulated"):
        s.commit()
    assert _leftovers(tmp_path) == []                         # no file of the set, no temp file


def test_a_rename_failing_part_way_removes_what_was_placed(tmp_path, monkeypatch):
    real, moved = os.replace, []

    def replace(src, dst):
        if len(moved) == 1:
            raise OSError(errno.ENOSPC, "no space for the directory entry (simulated)")
        moved.append(dst)
        return real(src, dst)
    monkeypatch.setattr(reportset.os, "replace", replace)
    s = reportset.ReportSet()
    for name in ("r.json", "r-summary.csv"):
        s.add_text(tmp_path / name, "x")
    with pytest.raises(OSError):
        s.commit()
    assert moved == [tmp_path / "r-summary.csv"]               # verdict files go last: the csv was first
    assert _leftovers(tmp_path) == []


def test_a_whole_set_is_written_with_the_verdict_last(tmp_path, monkeypatch):
    order, real = [], os.replace
    monkeypatch.setattr(reportset.os, "replace", lambda a, b: (order.append(Path(b).name), real(a, b)))
    s = reportset.ReportSet()
    for name in ("r.json", "r-cases.csv", "r.md", "r-metadata.json", "child.log", "junit.xml"):
        s.add_text(tmp_path / name, name)
    assert [p.name for p in s.commit()] == ["r.json", "r-cases.csv", "r.md", "r-metadata.json", "child.log",
                                            "junit.xml"]
    assert order == ["r-cases.csv", "r-metadata.json", "child.log", "r.json", "r.md", "junit.xml"]
    assert (tmp_path / "r.md").read_text() == "r.md"


def _tree(tmp_path) -> Path:
    tree = tmp_path / "tree"
    tree.mkdir()
    shutil.copy(ROOT / "esverify" / "bits.py", tree / "bits.py")
    return tree


def test_audit_failing_at_its_last_file_exits_2_and_claims_nothing(tmp_path, monkeypatch):
    calls = _fail_on(monkeypatch, 15)                         # 14 of 15 files written, the 15th fails
    out = tmp_path / "out"
    result = CliRunner().invoke(main, ["audit", "--tree", str(_tree(tmp_path)), "--ref",
                                       str(ROOT / "tests" / "fixtures"), "--out", str(out)])
    assert len(calls) == 15 and result.exit_code == 2, result.output
    assert _leftovers(out) == []


@pytest.mark.slow   # 2 s (--durations, 2026-12-03): out of the fast tier
def test_audit_under_a_file_size_limit_leaves_no_verdict(tmp_path):
    out = tmp_path / "out"

    def limit():   # every write past 4 KiB fails with EFBIG (SIGXFSZ ignored), as on a full quota
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))
    proc = subprocess.run([sys.executable, "-m", "esverify", "audit", "--tree", str(_tree(tmp_path)), "--ref",
                           str(ROOT / "tests" / "fixtures"), "--out", str(out)], preexec_fn=limit,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "File too large" in proc.stdout + proc.stderr
    assert _leftovers(out) == []


@pytest.mark.parametrize("n", [1, 2])
def test_goldens_check_json_and_junit_are_one_set(tmp_path, monkeypatch, n):
    _fail_on(monkeypatch, n)
    result = CliRunner().invoke(main, ["goldens", "check", "--area", "rng", "--backend", "numpy",
                                       "--json", str(tmp_path / "g.json"), "--junit", str(tmp_path / "g.xml")])
    assert result.exit_code == 2, result.output
    assert "cannot write the report" in result.output
    assert _leftovers(tmp_path) == []


@pytest.mark.slow   # 3 s (--durations, 2026-12-03): out of the fast tier
def test_parity_failing_part_way_exits_2_and_claims_nothing(tmp_path, monkeypatch):
    calls = _fail_on(monkeypatch, 4)
    out = tmp_path / "out"
    result = CliRunner().invoke(main, [
        "parity", "--ref", str(ROOT / "tests" / "standins" / "es-at-scale"), "--target", "es-at-scale",
        "--devices", "cpu", "--small", "--dtypes", "f32", "--schemes", "iid", "--iterations", "1", "--quiet",
        "--no-loops", "--case", "*/f32/iid/p*", "--out", str(out), "--junit", str(tmp_path / "p.xml")])
    assert len(calls) == 4 and result.exit_code == 2, result.output
    assert "cannot write the report" in result.output and "no report file was left" in result.output
    assert not (tmp_path / "p.xml").exists() and [n for n in _leftovers(out) if n.startswith("parity")] == []


@pytest.mark.slow   # 3 s (--durations, 2026-12-03): out of the fast tier
def test_parity_whole_set_is_written_when_nothing_fails(tmp_path):
    out = tmp_path / "out"
    result = CliRunner().invoke(main, [
        "parity", "--ref", str(ROOT / "tests" / "standins" / "es-at-scale"), "--target", "es-at-scale",
        "--devices", "cpu", "--small", "--dtypes", "f32", "--schemes", "iid", "--iterations", "1", "--quiet",
        "--no-loops", "--case", "*/f32/iid/p*", "--out", str(out), "--junit", str(tmp_path / "p.xml")])
    assert result.exit_code == 0, result.output
    assert json.loads((out / "parity.json").read_text())["exit_code"] == 0 and (tmp_path / "p.xml").is_file()
    assert (out / "child-es-at-scale.log").is_file()
