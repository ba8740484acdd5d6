"""Hostile text in every report writer: the JUnit XML stays well-formed (XML 1.0
characters only), a Markdown table keeps one line per row whatever a cell holds and passes no raw
HTML, the console shows no control character, and a CSV cell never starts a spreadsheet formula.
The writers are shared by parity, goldens and audit; the audit is also run end to end on a tree
whose file names are hostile.
"""
from __future__ import annotations

import csv
import io
import json
import shutil
from pathlib import Path
from xml.etree import ElementTree as ET

import pandas as pd
from click.testing import CliRunner
from hypothesis import given
from hypothesis import strategies as st

from esverify import report
from esverify.cli import main

NASTY = ["bad\x1b[31mred\x1b[0m\x00\x07\x0b\x0c\x7f\x85\x9b", "a | b\n| forged | row |\r\n| x |",
         "<script>alert(1)</script>", "=HYPERLINK(\"http://evil\",\"x\")", "+1+2", "-2-3", "@SUM(A1)",
         "\tTAB", "\rCR", "lone \ud800 surrogate \ufffe", "back\\slash at the end\\", "\u2028sep\u2029"]


def frame(texts) -> pd.DataFrame:
    return pd.DataFrame({"case": [f"c{k}" for k in range(len(texts))], "status": ["error"] * len(texts),
                         "detail": list(texts), "number": [-1.5] * len(texts)})


def unescaped_pipes(line: str) -> int:
    """Cell separators in a Markdown table line: '|' not escaped by a backslash."""
    count, k = 0, 0
    while k < len(line):
        if line[k] == "\\":
            k += 2
            continue
        count += line[k] == "|"
        k += 1
    return count


def table_lines(md: str, section: str) -> list:
    body = md.split(f"## {section}\n", 1)[1].split("\n## ", 1)[0]
    return [line for line in body.splitlines() if line.startswith("|")]


def assert_markdown_table_intact(md: str, section: str, rows: int, columns: int):
    lines = table_lines(md, section)
    assert len(lines) == rows + 2, lines                       # header, rule, one line per row
    assert {unescaped_pipes(line) for line in lines} == {columns + 1}


def test_junit_is_well_formed_xml_whatever_the_messages_hold():
    xml = report.to_junit(frame(NASTY), "parity", name_cols=["case", "detail"])
    root = ET.fromstring(xml.split("?>", 1)[1])
    errors = root.findall("testcase/error")
    assert len(errors) == len(NASTY)
    assert "\\x1b[31m" in errors[0].attrib["message"] and "\\x00" in errors[0].attrib["message"]
    assert "\\ud800" in errors[9].attrib["message"] and "\\ufffe" in errors[9].attrib["message"]


def test_markdown_cells_cannot_forge_rows_or_carry_html():
    md = report.to_markdown({"cases": frame(NASTY)}, {"note": NASTY[1], "raw": NASTY[2]}, "t")
    assert_markdown_table_intact(md, "cases", len(NASTY), 4)
    assert_markdown_table_intact(md, "Metadata", 2, 2)
    assert "<script>" not in md and "&lt;script>" in md
    for ch in "\x1b\x00\x07\x0b\x0c\x7f\x85\x9b":
        assert ch not in md


@given(st.lists(st.text(), min_size=1, max_size=4))
def test_markdown_table_keeps_one_line_per_row_for_any_text(texts):
    md = report.to_markdown({"cases": frame(texts)}, {}, "t")
    assert_markdown_table_intact(md, "cases", len(texts), 4)


@given(st.text())
def test_xml_text_is_always_xml_1_0(text):
    root = ET.fromstring(ET.tostring(ET.Element("a", b=report.xml_text(text))))
    assert root.attrib["b"].replace("\r\n", "\n").replace("\r", "\n") == \
        report.xml_text(text).replace("\r\n", "\n").replace("\r", "\n")


def test_html_has_no_control_characters_and_no_live_script():
    page = report.to_html({"cases": frame(NASTY)}, {"raw": NASTY[2]}, "t")
    # the one script is the page's own status filter; the hostile one is escaped text
    ours = page[page.index("<script>"):page.index("</script>")]
    assert page.count("<script>") == 1 and "esvFilter" in ours and "&lt;script&gt;" in page
    for ch in "\x1b\x00\x07\x0b\x0c\x7f\x85\x9b\ud800\ufffe":
        assert ch not in page


def test_csv_cells_never_start_a_formula(tmp_path):
    report.write_report(tmp_path, "r", {"cases": frame(NASTY)}, {}, formats=["csv"])
    rows = list(csv.DictReader(io.StringIO((tmp_path / "r-cases.csv").read_text())))
    for row in rows:
        for value in row.values():
            assert not value.startswith(("=", "+", "-", "@", "\t", "\r")) or value == "-1.5", value
    assert rows[3]["detail"] == "'" + NASTY[3] and rows[0]["number"] == "-1.5"


def test_console_table_shows_no_control_characters_and_one_line_per_row():
    text = report.console_table(frame(NASTY))
    assert len(text.splitlines()) == 2 + len(NASTY)
    for ch in "\x1b\x00\x07\x0b\x0c\x7f\x85\x9b\r":
        assert ch not in text
    assert report.terminal_text("a\x1b[2Jb\nc") == "a\\x1b[2Jb\\nc"


def test_audit_reports_of_a_tree_with_hostile_file_names(tmp_path):
    fixtures = Path(__file__).parent / "fixtures" / "audit"
    tree = tmp_path / "tree"
    shutil.copytree(fixtures / "clean", tree)
    names = ['=HYPERLINK("evil","x").py', "a|b\n| forged |.py", "esc\x1b[31m.py"]
    for name in names:
        (tree / name).write_text("x = 1\n")
    out = tmp_path / "out"
    result = CliRunner().invoke(main, ["audit", "--tree", str(tree), "--ref", str(fixtures / "reference"),
                                       "--out", str(out)])
    assert result.exit_code in (0, 1), result.output
    assert "\x1b" not in result.output
    manifest = list(csv.DictReader(io.StringIO((out / "audit-manifest.csv").read_text())))
    paths = [r["path"] for r in manifest]
    assert "'" + names[0] in paths and not any(p.startswith("=") for p in paths)
    md = (out / "audit.md").read_text()
    doc = json.loads((out / "audit.json").read_text())
    assert_markdown_table_intact(md, "manifest", len(doc["sections"]["manifest"]),
                                 len(doc["sections"]["manifest"][0]))
    assert "\x1b" not in md


CONTROLS = "\x1b\x00\x07\x0b\x0c\x7f\x85\x9b\ud800\ufffe"


@given(st.sampled_from(NASTY), st.text(alphabet=st.characters(max_codepoint=0x9f), max_size=8))
def test_every_parity_html_block_goes_through_the_shared_escaper(nasty, extra):
    """The "needs attention" block, the ulp plots and their SVG labels show control characters (ESC
    from a reference's error text) as escapes and carry no live HTML, like the tables."""
    from esverify.oracle import parity_report
    text = nasty + extra
    entries = pd.DataFrame([{"status": text, "target": text, "op": text, "diagnosis": text, "rows": 2,
                             "other_cases": text, "example": text, "reason": text, "first_difference": text,
                             "rerun": text}])
    frame = pd.DataFrame({"case": [text], "status": ["fail"], "max_ulp_diff": [3]})
    profiles = {text: [{"slot": text, "elements": 64, "mismatches": 1, "bins": [0] * 63 + [3]}]}
    for block in (parity_report.attention_html(entries), parity_report.ulp_plots(frame, profiles)):
        assert not any(ch in block for ch in CONTROLS + "".join(chr(c) for c in range(0x20) if chr(c) not in "\n\t\r"))
        assert "<script>" not in block
        if "\x1b" in text:
            assert "\\x1b" in block


def test_one_html_escaper():
    """No module but esverify/report.py escapes HTML itself: every block uses report.html_text."""
    root = Path(__file__).parent.parent / "esverify"
    users = sorted(str(p.relative_to(root)) for p in root.rglob("*.py")
                   if "html.escape" in p.read_text(encoding="utf-8") and p.name != "report.py")
    assert users == []


def test_a_childs_coverage_record_with_odd_line_counts_still_makes_the_section(tmp_path):
    """The coverage record is written by the child (outside input): line counts that are not whole
    numbers >= 0 are left blank, never a crash of the report, and the rest of the section stands."""
    from esverify.oracle import loop_report
    record = {"files": {"mod.py": {"functions": {"a": True, "b": True, "c": False, "d": True, "e": False},
                                   "lines": "many",
                                   "function_lines": {"a": 1.5, "b": [1], "c": True, "d": 3, "e": -2}},
                        "other.py": {"functions": {"f": True}, "lines": 4, "function_lines": ["f"]}},
              "error": "", "how": "x"}
    frame, summary = loop_report._coverage_frame({"es-awd": {"coverage": record}})
    assert list(frame["function"]) == ["a", "b", "c", "d", "e", "f"]
    assert [None if pd.isna(v) else int(v) for v in frame["lines"]] == [None, None, None, 3, None, None]
    assert summary["es-awd"]["lines"] == 4 and summary["es-awd"]["functions_ran"] == 4
    report.write_report(tmp_path, "parity", {"coverage": frame}, {"coverage": summary})
    doc = json.loads((tmp_path / "parity.json").read_text())
    assert [r["lines"] for r in doc["sections"]["coverage"]] == [None, None, None, 3, None, None]
    assert pd.read_csv(tmp_path / "parity-coverage.csv")["lines"].tolist()[3] == 3
