"""Parity reports a person acts on and CI can trust (issue 19): the verdict of a run that checked
nothing, JUnit counts that agree with the exit code, the report's section order and size bound, the
JSON schema, the CI summary. Runs against the stand-in clones (tests/standins/) on small selections.
"""
from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import pytest
from click.testing import CliRunner

from esverify.cli import main
from standins.mutants import STANDINS

AT_SCALE = str(STANDINS / "es-at-scale")
AWD = str(STANDINS / "es-awd")


def _parity(*args):
    result = CliRunner().invoke(main, ["parity", *args])
    return result.exit_code, result.output


def _junit_counts(path):
    suite = ET.parse(path).getroot()
    cases = list(suite.iter("testcase"))
    counted = {kind: sum(c.find(kind) is not None for c in cases) for kind in ("failure", "error", "skipped")}
    assert (int(suite.get("tests")), int(suite.get("failures")), int(suite.get("errors")), int(suite.get("skipped"))) \
        == (len(cases), counted["failure"], counted["error"], counted["skipped"])   # the header counts its cases
    assert all(c.get("time") is not None for c in cases) and suite.get("time") is not None
    return suite, counted


def test_a_run_that_checked_nothing_says_so_and_its_junit_is_red(tmp_path):
    """Every row a CUDA row on a machine without one: not `FAIL` with 0 failed, not a green JUnit."""
    junit = tmp_path / "parity.xml"
    code, output = _parity("--ref", AT_SCALE, "--target", "es-at-scale", "--case", "*/cuda/f32/iid/perturb/*",
                           "--small", "--quiet", "--out", str(tmp_path / "out"), "--junit", str(junit))
    assert code == 1, output
    first = output.splitlines()[0]
    assert first.startswith("esverify parity: NOTHING CHECKED (exit 1): 1 cases: 1 skipped"), output
    assert "  nothing checked: es-at-scale: 1 skipped (cuda): the child sees no CUDA device" in output
    suite, counted = _junit_counts(junit)
    assert counted == {"failure": 1, "error": 0, "skipped": 2}   # + es-awd not checked; exit 1 <=> a failure
    verdict = suite.find("testcase[@name='verdict']/failure")
    assert verdict.get("type") == "verdict" and verdict.get("message").startswith(
        "nothing checked: es-at-scale: 1 skipped (cuda): the child sees no CUDA device")
    doc = json.loads((tmp_path / "out" / "parity.json").read_text())
    assert doc["verdict"] == "nothing checked" and doc["exit_code"] == 1 and doc["reason"].startswith("nothing checked")


def test_a_passing_run_has_a_green_junit_and_require_all_turns_skips_red(tmp_path):
    args = ["--ref", AT_SCALE, "--target", "es-at-scale", "--case", "*/f32/iid/perturb/*", "--small", "--quiet"]
    code, output = _parity(*args, "--out", str(tmp_path / "a"), "--junit", str(tmp_path / "a.xml"))
    assert code == 0, output
    _, counted = _junit_counts(tmp_path / "a.xml")
    assert counted == {"failure": 0, "error": 0, "skipped": 2}   # cpu passes; cuda and es-awd skipped
    code, output = _parity(*args, "--require-all", "--out", str(tmp_path / "b"), "--junit", str(tmp_path / "b.xml"))
    assert code == 1, output
    suite, counted = _junit_counts(tmp_path / "b.xml")
    assert counted == {"failure": 1, "error": 0, "skipped": 2}
    assert suite.find("testcase[@name='verdict']/failure") is not None


# ------------------------------------------------------------ no side effects before validation (issue 19 item 7)
@pytest.mark.parametrize("args", [
    ["--ref", "MISSING"],                                        # clone not found: a setup error
    ["--ref", AT_SCALE, "--format", "xml"],                      # a bad --format: a usage error
    ["--ref", AT_SCALE, "--case", "no-such-case"],               # the selection matches nothing
    ["--ref", "MISSING", "--junit", "ci/deep/parity.xml", "--summary", "ci/sum/summary.md"],
])
def test_a_run_refused_at_setup_leaves_nothing_behind(tmp_path, monkeypatch, args):
    import os
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("TMPDIR", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    for name in ("ESVERIFY_REF", "ESVERIFY_AWD_REF", "ESVERIFY_REPORTS"):
        monkeypatch.delenv(name, raising=False)
    args = [str(tmp_path / "missing") if a == "MISSING" else a for a in args]
    code, output = _parity(*args, "--target", "es-at-scale", "--small", "--quiet")
    assert code == 2, output
    assert sorted(os.listdir(tmp_path)) == ["tmp"], output      # no reports/, no ci/, no lock file
    assert os.listdir(tmp_path / "tmp") == []                    # no temporary folder either


def test_a_refused_audit_leaves_no_report_folder(tmp_path, monkeypatch):
    import os
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("ESVERIFY_REPORTS", raising=False)
    result = CliRunner().invoke(main, ["audit", "--tree", str(tmp_path), "--out", str(tmp_path / "a" / "b"),
                                       "--ngram", "9", "--min-words", "3"])
    assert result.exit_code == 2 and not os.path.exists(tmp_path / "a"), result.output
