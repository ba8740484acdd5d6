"""Parity reports a person acts on and CI can trust: the verdict of a run that checked
nothing, JUnit counts that agree with the exit code, the report's section order and size bound, the
JSON schema, the CI summary. Runs against the stand-in clones (tests/standins/) on small selections.
"""
from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import pandas as pd
import pytest
from click.testing import CliRunner

from esverify.cli import main
from esverify.oracle import adapters
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


@pytest.mark.slow   # 3 s (--durations, 2026-12-03): out of the fast tier
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
    # + each other reference, not selected; exit 1 <=> a failure
    others = len(adapters.names()) - 1
    assert counted == {"failure": 1, "error": 0, "skipped": 1 + others}
    verdict = suite.find("testcase[@name='verdict']/failure")
    assert verdict.get("type") == "verdict" and verdict.get("message").startswith(
        "nothing checked: es-at-scale: 1 skipped (cuda): the child sees no CUDA device")
    doc = json.loads((tmp_path / "out" / "parity.json").read_text())
    assert doc["verdict"] == "nothing checked" and doc["exit_code"] == 1 and doc["reason"].startswith("nothing checked")


@pytest.mark.slow   # 7 s (--durations, 2026-12-03): out of the fast tier
def test_a_passing_run_has_a_green_junit_and_require_all_turns_skips_red(tmp_path):
    args = ["--ref", AT_SCALE, "--target", "es-at-scale", "--case", "*/f32/iid/perturb/*", "--small", "--quiet"]
    code, output = _parity(*args, "--out", str(tmp_path / "a"), "--junit", str(tmp_path / "a.xml"))
    assert code == 0, output
    _, counted = _junit_counts(tmp_path / "a.xml")
    # cpu passes; cuda and each other reference skipped
    assert counted == {"failure": 0, "error": 0, "skipped": len(adapters.names())}
    code, output = _parity(*args, "--require-all", "--out", str(tmp_path / "b"), "--junit", str(tmp_path / "b.xml"))
    assert code == 1, output
    suite, counted = _junit_counts(tmp_path / "b.xml")
    assert counted == {"failure": 1, "error": 0, "skipped": len(adapters.names())}
    assert suite.find("testcase[@name='verdict']/failure") is not None


# ------------------------------------------------------------ no side effects before validation
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


# ------------------------------------------------------------ what the reports lead with
SECTION_ORDER = ["needs attention", "not checked here", "summary", "cases"]


def _headings(md: str) -> list[str]:
    return [line[3:] for line in md.splitlines() if line.startswith("## ")]


@pytest.fixture(scope="module")
def failing_run(tmp_path_factory):
    """One small run on a mutant whose perturb and restore rows fail (sigma fixed in the reference)."""
    from standins.mutants import make_mutant
    tmp = tmp_path_factory.mktemp("failing")
    clone = make_mutant(tmp, "sigma-constant")
    out = tmp / "out"
    code, output = _parity("--ref", str(clone), "--target", "es-at-scale", "--case", "*/f32/iid/*", "--small",
                           "--quiet", "--no-loops", "--out", str(out), "--junit", str(tmp / "j.xml"),
                           "--summary", str(tmp / "summary.md"))
    return code, output, out, tmp, clone


@pytest.mark.slow   # 4 s (--durations, 2026-12-03): out of the fast tier
def test_the_report_leads_with_the_verdict_then_what_to_do(failing_run):
    code, output, out, tmp, clone = failing_run
    assert code == 1, output
    md = (out / "parity.md").read_text()
    assert md.splitlines()[2] == "**Verdict: fail** (exit 1)"
    assert _headings(md)[:4] == SECTION_ORDER
    attention = md[md.index("## needs attention"):md.index("## not checked here")]
    # one entry per kind, in matrix order: perturb, restore and the update loop fail; update itself passes
    # under this mutant (sigma only enters the noise); fit is left out by --no-loops
    entries = [line for line in attention.splitlines() if line.startswith("- **")]
    assert [e.split("`")[1] for e in entries] == ["perturb", "restore", "loop"], attention
    assert "  - first difference: model.embed_tokens.weight[0]: ours 0x" in attention
    rerun = f"esverify parity --ref {clone} --target es-at-scale --case es-at-scale/cpu/f32/iid/perturb/N7 " \
            "--devices cpu --small"
    assert f"  - re-run only this row: ``{rerun}``" in attention
    # not checked here: the CUDA rows are ONE line with the reason and how to check them, as on the console
    unchecked = md[md.index("## not checked here"):md.index("## summary")]
    cuda = [line for line in unchecked.splitlines() if "| cuda |" in line]
    assert len(cuda) == 1 and "the child sees no CUDA device" in cuda[0] and "--devices cuda" in cuda[0]
    assert "the child sees no CUDA device" in output
    # the summary grid holds the devices where something ran; the cases table the reason after the identity
    summary = md[md.index("## summary"):md.index("## cases")]
    assert "| cpu |" in summary and "| cuda |" not in summary
    header = pd.read_csv(out / "parity-cases.csv", nrows=0).columns.tolist()
    assert header[:11] == ["target", "device", "dtype", "scheme", "noise", "op", "population", "case", "status",
                           "diagnosis", "detail"]
    page = (out / "parity.html").read_text()
    order = [page.index(f">{name}</h2>") for name in SECTION_ORDER]
    assert order == sorted(order) and page.index("class='verdict st-fail'") < order[0]


@pytest.mark.slow   # 3 s (--durations, 2026-12-03): out of the fast tier
def test_the_rerun_command_runs_exactly_that_row(failing_run, tmp_path):
    import shlex
    code, output, out, tmp, clone = failing_run
    doc = json.loads((out / "parity.json").read_text())
    entry = doc["sections"]["attention"][0]
    args = shlex.split(entry["rerun"])
    assert args[:2] == ["esverify", "parity"]
    again, said = _parity(*args[2:], "--quiet", "--out", str(tmp_path / "again"))
    assert again == 1 and said.startswith("esverify parity: FAIL (exit 1): 1 cases: 1 fail"), said
    rows = pd.read_csv(tmp_path / "again" / "parity-cases.csv")
    assert rows["case"].tolist() == [entry["example"]]


def test_junit_and_summary_of_a_failing_run(failing_run):
    code, output, out, tmp, clone = failing_run
    suite, counted = _junit_counts(tmp / "j.xml")
    frame = pd.read_csv(out / "parity-cases.csv")
    assert counted["failure"] == int((frame["status"] == "fail").sum()) > 0 and code == 1
    assert suite.find("testcase[@name='verdict']") is None                # the failing rows say it already
    failure = suite.find(".//failure")
    assert failure.get("type") == "fail" and failure.get("message")
    summary = (tmp / "summary.md").read_text()
    assert summary.startswith("### esverify parity: FAIL (exit 1)")
    assert "**Needs attention**" in summary and "re-run only this row" in summary
    assert "**Not checked here**" in summary and len(summary) < 10_000


def test_parity_json_follows_its_schema(failing_run):
    import jsonschema
    from pathlib import Path
    code, output, out, tmp, clone = failing_run
    schema = json.loads((Path(__file__).resolve().parents[1] / "docs" / "parity.schema.json").read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    doc = json.loads((out / "parity.json").read_text())
    jsonschema.validate(doc, schema)
    assert doc["schema_version"] == 1
    case = next(c for c in doc["sections"]["cases"] if c["op"] == "perturb" and c["device"] == "cpu")
    assert set(case["params"]) == {"sigma", "alpha"} and all(isinstance(v, float) for v in case["params"].values())
    cell = next(s for s in doc["sections"]["summary"] if s["op"] == "perturb" and s["device"] == "cpu")
    assert (cell["fail"], cell["pass"], cell["rows"]) == (1, 0, 1)
    bad = dict(doc, schema_version="1")
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, schema)


def test_parity_md_stays_under_the_bound_whatever_the_matrix(tmp_path):
    """The full default matrix of the stand-ins, every row failing with its own long detail (the worst
    case for the page), gives a parity.md under 60,000 characters; CSV and JSON keep every row."""
    from types import SimpleNamespace

    from esverify.oracle import cases as _cases
    from esverify.oracle import parity_report
    from esverify.oracle.console import summary_pivot
    from esverify.oracle.options import Options
    from esverify.oracle.rows import make_row as _row
    from esverify.report import write_report
    opts = Options()
    matrix = _cases.build_matrix(["es-at-scale", "es-awd"], opts.devices, opts.dtypes, opts.schemes, None, None,
                                 None, opts.iterations, False, opts.noises, opts.case_seed, True)
    # the default matrix: 650, plus 78 rows of the /layers set and reward populations, plus 16 of non-finite rewards
    assert len(matrix) == 744
    rows = [_row(c, status=("fail", "error", "unverifiable", "artifact")[i % 4], diagnosis="reuse" if i % 4 == 3 else "",
                 detail=f"row {i}: " + "x" * (400 + i % 7) + f" kind{i % 40}", elements=1000, mismatches=i,
                 first_mismatch_index=f"slot[{i}]", first_mismatch_ours="0x1", first_mismatch_theirs="0x2",
                 max_ulp_diff=i) for i, c in enumerate(matrix)]
    frame = pd.DataFrame(rows)
    metadata = {"verdict": "fail", "exit_code": 1, "counts": {"fail": 163}, "command_line": "esverify parity",
                "children": {"es-at-scale": {"python": "3.11", "torch": "2.13.0"}}}
    extra = {"not_checked": pd.DataFrame(columns=["target", "not_checked", "why"])}
    clones = {"es-at-scale": SimpleNamespace(path=STANDINS / "es-at-scale"),
              "es-awd": SimpleNamespace(path=STANDINS / "es-awd")}
    layout = parity_report.layout(frame, summary_pivot(frame), extra, opts, matrix, clones)
    assert len(layout["sections"]["attention"]) > parity_report.MD_ATTENTION    # more kinds than the page lists
    write_report(tmp_path, "parity", metadata=metadata, title="esverify parity report", header=None, **layout)
    md = (tmp_path / "parity.md").read_text()
    assert len(md) < parity_report.MD_LIMIT, len(md)
    assert _headings(md)[:4] == SECTION_ORDER
    assert "more kinds of problem" in md and "most alarming listed" in md
    assert len(pd.read_csv(tmp_path / "parity-cases.csv")) == 744
    assert len(json.loads((tmp_path / "parity.json").read_text())["sections"]["cases"]) == 744


# ------------------------------------------------------------ pictures
def test_the_ulp_profile_says_where_the_sides_differ():
    """128 f32 elements, elements 3 and 100 differ by 1 and 5 ulp, element 127 is a NaN on one side:
    64 runs of 2 elements; run 1 holds 1 ulp, run 50 holds 5, run 63 the NaN (-1); the rest 0."""
    import numpy as np
    import torch

    from esverify.oracle.compare import compare
    ours = torch.arange(128, dtype=torch.float32) + 1.0
    theirs = ours.numpy().view(np.uint32).copy()
    theirs[3] += 1
    theirs[100] += 5
    theirs[127] = 0x7FC00000
    cmp = compare([ours], [theirs], ["f32"], ["w"])
    assert cmp.mismatches == 3 and cmp.max_ulp_diff == 5
    (slot,) = cmp.profile
    assert (slot["slot"], slot["elements"], slot["mismatches"]) == ("w", 128, 3)
    expected = [0] * 64
    expected[1], expected[50], expected[63] = 1, 5, -1
    assert slot["bins"] == expected
    same = compare([ours], [ours.numpy().view(np.uint32).copy()], ["f32"], ["w"])
    assert same.profile == []                                  # nothing differs: nothing to draw


def test_the_html_summary_is_a_heatmap_whose_cells_link_to_their_rows(failing_run):
    import re
    code, output, out, tmp, clone = failing_run
    page = (out / "parity.html").read_text()
    grid = page[page.index(">summary</h2>"):page.index(">cases</h2>")]
    assert re.search(r"<table id='s\d+-summary' class='grid'>", grid) and "cuda" not in grid   # the skipped device is one line
    targets = re.findall(r"<a href='#(c-[^']+)'", grid)
    assert targets and all(f"id='{t}'" in page for t in targets)                  # every link has its row
    assert "class='st-fail'><a href='#c-es-at-scale_cpu_f32_iid_perturb_N7'" in grid
    plots = page[page.index("Where the two sides differ"):page.index(">not checked here</h2>")]
    failing = pd.read_csv(out / "parity-cases.csv").query("status == 'fail'")
    assert plots.count("<details open>") == len(failing) and plots.count("<svg class='ulp'") >= len(failing)
    assert "(max 2007721360 ulp)" in plots or re.search(r"\(max \d+ ulp\)", plots)


def test_screenshots_of_the_report_in_a_headless_browser(failing_run, tmp_path):
    """benchmarks/screenshot_report.py in headless Chromium (skipped where none is installed): three
    PNGs 1400 px wide. The pictures were looked at by hand (docs/parity.md, 'Reading the report')."""
    import shutil
    import struct
    import subprocess
    import sys
    from pathlib import Path
    if not (shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")):
        pytest.skip("no chromium on this machine (apt-get install chromium)")
    code, output, out, tmp, clone = failing_run
    script = Path(__file__).resolve().parents[1] / "benchmarks" / "screenshot_report.py"
    subprocess.run([sys.executable, str(script), str(out), "--out", str(tmp_path)], check=True, timeout=300)
    for name in ("parity-top.png", "parity-summary.png", "parity-not_checked_here.png"):
        head = (tmp_path / name).read_bytes()[:24]
        assert head[:8] == b"\x89PNG\r\n\x1a\n"
        assert struct.unpack(">II", head[16:24])[0] == 1400, name


@pytest.mark.slow   # 2 s (--durations, 2026-12-03): out of the fast tier
def test_github_step_summary_is_appended_to(tmp_path):
    """$GITHUB_STEP_SUMMARY holds the earlier steps' blocks: the run's block is appended, never replacing them."""
    step = tmp_path / "step.md"
    step.write_text("earlier step\n")
    result = CliRunner().invoke(main, ["parity", "--ref", AT_SCALE, "--target", "es-at-scale", "--case",
                                       "*/cuda/f32/iid/perturb/*", "--small", "--quiet", "--out", str(tmp_path / "o")],
                                env={"GITHUB_STEP_SUMMARY": str(step)})
    assert result.exit_code == 1, result.output
    text = step.read_text()
    assert text.startswith("earlier step\n### esverify parity: NOTHING CHECKED (exit 1)")
    assert "nothing checked: es-at-scale: 1 skipped (cuda): the child sees no CUDA device" in text
    assert "the child sees no CUDA device; to check: run on a machine with a CUDA GPU" in text
