"""esverify.report: atomic writers and the JUnit mapping."""
import json
import os
from xml.etree import ElementTree as ET

import pandas as pd
import pytest

from esverify import report


def test_write_report_all_formats(tmp_path):
    rows = pd.DataFrame([{"case": "a", "status": "pass", "detail": ""},
                         {"case": "b", "status": "fail", "detail": "bit 3 differs"}])
    paths = report.write_report(tmp_path, "parity", {"rows": rows}, {"seed": 42, "nan": float("nan")})
    names = sorted(p.name for p in paths)
    assert names == ["parity-metadata.json", "parity-rows.csv", "parity.html", "parity.json", "parity.md"]
    doc = json.loads((tmp_path / "parity.json").read_text())
    assert doc["metadata"] == {"nan": "nan", "seed": 42}
    assert [r["status"] for r in doc["sections"]["rows"]] == ["pass", "fail"]
    assert pd.read_csv(tmp_path / "parity-rows.csv")["case"].tolist() == ["a", "b"]
    assert "bit 3 differs" in (tmp_path / "parity.md").read_text()
    assert not [p for p in os.listdir(tmp_path) if p.endswith(".tmp")]


def test_written_files_honour_the_umask(tmp_path):
    old = os.umask(0o022)
    try:
        path = report.write_atomic(tmp_path / "r.md", "x")
    finally:
        os.umask(old)
    assert path.stat().st_mode & 0o777 == 0o644


def test_unknown_format_writes_nothing(tmp_path):
    with pytest.raises(ValueError, match="unknown report format"):
        report.write_report(tmp_path / "out", "x", {}, {}, formats=["csv", "pdf"])
    assert not (tmp_path / "out").exists()


def test_atomic_write_keeps_old_file_on_failure(tmp_path, monkeypatch):
    target = tmp_path / "r.json"
    report.write_atomic(target, "old")

    def boom(*_):
        raise OSError("disk full")
    monkeypatch.setattr(report.os, "replace", boom)
    with pytest.raises(OSError, match="disk full"):
        report.write_atomic(target, "new")
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["r.json"]


def test_junit_maps_statuses():
    rows = pd.DataFrame([{"op": "perturb", "status": "pass", "detail": ""},
                         {"op": "update", "status": "fail", "detail": "ulp 3"},
                         {"op": "zscore", "status": "error", "detail": "SyntaxError"},
                         {"op": "cuda", "status": "skipped", "detail": "no GPU"}])
    root = ET.fromstring(report.to_junit(rows, "parity", name_cols=["op"]).split("?>", 1)[1])
    assert root.attrib["tests"] == "4"
    assert (root.attrib["failures"], root.attrib["errors"], root.attrib["skipped"]) == ("1", "1", "1")
    assert root.find("testcase[@name='update']/failure").attrib["message"] == "ulp 3"


# ------------------------------------------------------------ reports lead with the verdict
import re  # noqa: E402
import threading  # noqa: E402

from esverify import outputs  # noqa: E402

HEADER = {"verdict": "fail", "exit_code": 1, "counts": {"pass": 2, "fail": 1},
          "started_utc": "2026-11-30T20:00:00+00:00", "finished_utc": "2026-11-30T20:01:00+00:00",
          "command_line": "esverify parity --ref x"}


def _sample():
    rows = pd.DataFrame([
        {"case": "a", "population": 6, "elements": 1062240, "max_abs_diff": 0.5, "status": "pass", "detail": ""},
        {"case": "b", "population": 30, "elements": None, "max_abs_diff": None, "status": "fail",
         "detail": "x | y\n<script>alert(1)</script>"},
        {"case": "c", "population": 6, "elements": 7, "max_abs_diff": 1.25e-08, "status": "error", "detail": "boom"}])
    summary = pd.DataFrame([{"target": "t", "op": "perturb", "f32/iid": "1 fail, 1 pass"},
                            {"target": "t", "op": "update", "f32/iid": "1 pass"}])
    metadata = {**HEADER, "seed": 42, "children": {"es-at-scale": {"python": "3.11.7", "torch": "2.13.0"}},
                "clones": {"es-at-scale": {"path": "/x", "warnings": ["not a git checkout"]}},
                "devices": ["cpu", "cuda"]}
    return {"summary": summary, "cases": rows}, metadata


def test_every_format_opens_with_the_verdict_then_the_summary(tmp_path):
    sections, metadata = _sample()
    report.write_report(tmp_path, "parity", sections, metadata, title="esverify parity report")
    md = (tmp_path / "parity.md").read_text()
    lines = md.splitlines()
    assert lines[0] == "# esverify parity report" and lines[2] == "**Verdict: fail** (exit 1)"
    for words in ("| counts | 2 pass, 1 fail |", "| started (UTC) | 2026-11-30T20:00:00+00:00 |",
                  "| command line | esverify parity --ref x |"):
        assert words in md
    assert md.index("## summary") < md.index("## cases") < md.index("## Metadata")
    doc = json.loads((tmp_path / "parity.json").read_text())
    assert list(doc)[:6] == ["verdict", "exit_code", "counts", "started_utc", "finished_utc", "command_line"]
    assert list(doc["sections"]) == ["summary", "cases"]
    verdict = pd.read_csv(tmp_path / "parity-verdict.csv")
    assert verdict["key"].tolist()[:3] == ["verdict", "exit code", "counts"]
    assert verdict["value"].tolist()[:2] == ["fail", "1"]
    page = (tmp_path / "parity.html").read_text()
    assert page.index("class='verdict st-fail'") < page.index(">summary</h2>") < page.index(">cases</h2>")


def test_integer_columns_stay_integers_and_empty_cells_stay_empty(tmp_path):
    sections, metadata = _sample()
    report.write_report(tmp_path, "parity", sections, metadata)
    csv = (tmp_path / "parity-cases.csv").read_text()
    assert "1062240" in csv and "6.0" not in csv and "30.0" not in csv and "nan" not in csv.lower()
    assert csv.splitlines()[2].startswith("b,30,,,fail,")
    md = (tmp_path / "parity.md").read_text()
    assert "1062240" in md and "1.06224e+06" not in md and "nan" not in md and "6.0 " not in md
    assert "1.25e-08" in md                                 # floats keep every digit they have
    rows = json.loads((tmp_path / "parity.json").read_text())["sections"]["cases"]
    assert rows[0]["population"] == 6 and isinstance(rows[0]["population"], int) and rows[1]["elements"] is None
    table = report.console_table(sections["cases"])
    assert "1062240" in table and "nan" not in table and "6.0" not in table


def test_metadata_nested_values_are_small_tables_not_json_cells(tmp_path):
    sections, metadata = _sample()
    md = report.to_markdown(sections, metadata, "r")
    meta = md[md.index("## Metadata"):]
    assert "### children" in meta and "| es-at-scale | 3.11.7 | 2.13.0 |" in meta
    assert '{"es-at-scale"' not in meta and "| devices | cpu<br>cuda |" in meta
    page = report.to_html(sections, metadata, "r")
    assert "<th>children</th><td><table>" in page


def test_html_is_escaped_styled_and_filterable():
    sections, metadata = _sample()
    metadata = {**metadata, "note": "<b>bold</b> & co"}
    page = report.to_html(sections, metadata, "<title>")
    assert "<script>alert(1)</script>" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "&lt;b&gt;bold&lt;/b&gt; &amp; co" in page and "<title>&lt;title&gt;</title>" in page
    assert "<td class='st-fail'>fail</td>" in page and "<td class='st-pass'>pass</td>" in page
    assert "<td class='st-fail'>1 fail, 1 pass</td>" in page          # the grid cell takes its worst status
    assert "data-status='error'" in page and "onchange='esvFilter(this)'" in page and "function esvFilter" in page
    assert "<style>" in page and ".st-fail" in page


def test_markdown_cells_cannot_break_the_table():
    sections, metadata = _sample()
    md = report.to_markdown(sections, metadata, "r")
    row = next(line for line in md.splitlines() if line.startswith("| b |"))
    assert row.count(" | ") == len(sections["cases"].columns) - 1 and "x \\| y<br>" in row


# ------------------------------------------------ destinations and report folders
def test_destinations_are_checked_with_one_line_reasons(tmp_path):
    (tmp_path / "f").write_text("x")
    with pytest.raises(outputs.OutputError, match=r"^--out .*/f/sub: .*/f is a file, not a directory$"):
        outputs.check_folder(tmp_path / "f" / "sub")
    with pytest.raises(outputs.OutputError, match="exists and is not a directory"):
        outputs.check_folder(tmp_path / "f")
    with pytest.raises(outputs.OutputError, match="is a directory, not a file"):
        outputs.check_file(tmp_path, "--junit")
    assert outputs.check_file(tmp_path / "new" / "r.xml", "--junit") == tmp_path / "new" / "r.xml"
    assert (tmp_path / "new").is_dir() and not list((tmp_path / "new").iterdir())   # the probe file is gone


def test_an_earlier_report_is_refused_unless_overwrite(tmp_path):
    patterns = report.report_patterns("parity") + ("child-*.log",)
    out = tmp_path / "out"
    with outputs.claim_report_folder(out, "parity", patterns):
        report.write_report(out, "parity", {"cases": pd.DataFrame([{"a": 1}])}, {})
    (out / "child-x.log").write_text("log")
    (out / "my-notes.txt").write_text("the user's own file")
    with pytest.raises(outputs.OutputError, match="holds an earlier report .* pass --overwrite"):
        outputs.claim_report_folder(out, "parity", patterns)
    with outputs.claim_report_folder(out, "parity", patterns, overwrite=True):
        assert sorted(p.name for p in out.iterdir()) == [".esverify-run.lock", "my-notes.txt"]
    assert sorted(p.name for p in out.iterdir()) == ["my-notes.txt"]


def test_two_runs_never_share_a_folder(tmp_path):
    claimed, errors = [], []

    def claim():
        try:
            claimed.append(outputs.claim_report_folder(None, "parity", ("parity*",), base=tmp_path))
        except outputs.OutputError as exc:   # pragma: no cover - would be the bug
            errors.append(exc)
    threads = [threading.Thread(target=claim) for _ in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and len({c.path for c in claimed}) == 16
    assert all(re.fullmatch(r"parity-\d{8}T\d{6}\.\d{6}Z-\d+-[0-9a-f]{4}", c.path.name) for c in claimed)
    # an explicit folder in use by a live run is refused, not shared
    first = outputs.claim_report_folder(tmp_path / "shared", "parity", ("parity*",))
    with pytest.raises(outputs.OutputError, match="another esverify run is writing there now"):
        outputs.claim_report_folder(tmp_path / "shared", "parity", ("parity*",))
    first.release()
    outputs.claim_report_folder(tmp_path / "shared", "parity", ("parity*",)).release()


# ------------------------------------------------------------ JUnit for strict consumers
def _suite(xml: str):
    return ET.fromstring(xml.split("?>", 1)[1])


def test_junit_carries_time_and_type_and_counts_agree_with_its_cases():
    rows = pd.DataFrame([{"case": "a", "status": "pass", "detail": "", "seconds": 0.25},
                         {"case": "b", "status": "fail", "detail": "3 of 9 differ", "seconds": 1.5},
                         {"case": "c", "status": "unverifiable", "detail": "eager", "seconds": None},
                         {"case": "d", "status": "skipped", "detail": "no GPU", "seconds": None}])
    suite = _suite(report.to_junit(rows, "esverify.parity", name_cols=["case"], failing=("fail",), time_col="seconds",
                                   suite_time=2.0, exit_code=1, verdict="fail", timestamp="2026-12-01T21:00:00+00:00"))
    assert {k: suite.get(k) for k in ("tests", "failures", "errors", "skipped", "time", "timestamp")} == \
        {"tests": "4", "failures": "1", "errors": "1", "skipped": "1", "time": "2.000", "timestamp": "2026-12-01T21:00:00"}
    assert [c.get("time") for c in suite.iter("testcase")] == ["0.250", "1.500", "0.000", "0.000"]
    assert suite.find("testcase[@name='b']/failure").attrib["type"] == "fail"
    assert suite.find("testcase[@name='c']/error").attrib["type"] == "unverifiable"
    assert suite.find("testcase[@name='verdict']") is None     # the failing rows already say exit 1


@pytest.mark.parametrize("verdict, code, reason", [
    ("nothing checked", 1, "nothing checked: es-at-scale: 10 skipped (cuda): the child sees no CUDA device"),
    ("interrupted", 130, "interrupted by SIGINT: 3 rows not run"),
    ("fail", 1, "--require-all: 1 row not checked here")])
def test_junit_of_a_run_that_exits_non_zero_without_failing_rows_fails_with_its_reason(verdict, code, reason):
    """`tests=10 failures=0 errors=0 skipped=10` for a run that exited 1 showed green in CI panels."""
    rows = pd.DataFrame([{"case": f"c{i}", "status": "skipped", "detail": "no GPU"} for i in range(10)])
    suite = _suite(report.to_junit(rows, "esverify.parity", name_cols=["case"], exit_code=code, verdict=verdict,
                                   reason=reason))
    assert (suite.get("tests"), suite.get("failures"), suite.get("errors"), suite.get("skipped")) == \
        ("11", "1", "0", "10")
    failure = suite.find("testcase[@name='verdict']/failure")
    assert failure.get("type") == "verdict" and failure.get("message") == reason
    clean = _suite(report.to_junit(rows, "esverify.parity", name_cols=["case"], exit_code=0, verdict="pass"))
    assert (clean.get("tests"), clean.get("failures")) == ("10", "0")


def test_an_interrupted_run_with_failing_rows_still_says_interrupted():
    rows = pd.DataFrame([{"case": "a", "status": "fail", "detail": "x"}, {"case": "b", "status": "not-run", "detail": ""}])
    suite = _suite(report.to_junit(rows, "s", name_cols=["case"], skipping=("not-run",), exit_code=143,
                                   verdict="interrupted", reason="interrupted by SIGTERM: 1 rows not run"))
    assert (suite.get("failures"), suite.get("skipped")) == ("2", "1")
    assert "SIGTERM" in suite.find("testcase[@name='verdict']/failure").get("message")


def test_utc_now_is_iso_8601_utc_to_the_second():
    """report.utc_now: the metadata's started_utc / finished_utc, parseable, UTC, no fraction of a second."""
    import datetime
    before = datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0)
    text = report.utc_now()
    after = datetime.datetime.now(datetime.timezone.utc)
    assert len(text) == len("2026-12-04T19:39:21+00:00") and text.endswith("+00:00")
    assert before <= datetime.datetime.fromisoformat(text) <= after
