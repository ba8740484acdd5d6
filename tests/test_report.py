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
