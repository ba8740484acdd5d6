"""Every row that is not a pass is accounted for, in every format: the rows of a
run are pass, needs attention (fail, error, unverifiable, artifact, defect) or not checked here
(skipped, unsupported, not-run), and each format's counts add up to the number of rows. One run of
the skill-sample stand-in: its bf16 rows are the sample's documented defect, its cuda rows skipped."""
from __future__ import annotations

import json
import re

import pandas as pd
import pytest
from click.testing import CliRunner

from esverify.cli import main
from esverify.oracle.console import accounting, accounting_line
from standins.mutants import STANDINS

LINE = re.compile(r"(\d+) rows = (\d+) pass \+ (\d+) need attention(?: \(([^)]*)\))? \+ (\d+) not checked here")


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("accounting")
    out = tmp / "out"
    result = CliRunner().invoke(main, ["parity", "--ref", str(STANDINS / "skill-sample"), "--dtypes", "f32,bf16",
                                       "--small", "--quiet", "--out", str(out)])
    return result, out


def _sums(text: str) -> tuple:
    match = LINE.search(text)
    assert match, text[:2000]
    rows, passed, attention, _, unchecked = (int(g) if g and g.isdigit() else g for g in match.groups())
    assert passed + attention + unchecked == rows, match.group(0)
    return rows, passed, attention, unchecked


def test_accounting_adds_up_for_every_status():
    frame = pd.DataFrame({"status": ["pass", "fail", "error", "skipped", "unverifiable", "artifact", "defect",
                                     "unsupported", "not-run", "pass", "defect"]})
    account = accounting(frame)
    assert account == {"rows": 11, "pass": 2, "needs_attention": {"fail": 1, "error": 1, "unverifiable": 1,
                                                                  "artifact": 1, "defect": 2},
                       "not_checked": {"skipped": 1, "unsupported": 1, "not-run": 1}}
    assert accounting_line(account) == ("11 rows = 2 pass + 6 need attention (1 fail, 1 error, 1 unverifiable, "
                                        "1 artifact, 2 defect) + 3 not checked here (1 skipped, 1 unsupported, "
                                        "1 not-run)")


@pytest.mark.slow   # 3 s (--durations, 2026-12-03): out of the fast tier
def test_the_counts_add_up_in_every_format(run):
    result, out = run
    cases = pd.read_csv(out / "parity-cases.csv")
    counts = cases["status"].value_counts().to_dict()
    assert counts.get("defect", 0) > 0 and counts.get("skipped", 0) > 0 and counts.get("pass", 0) > 0, counts
    want = (len(cases), counts["pass"], counts["defect"] + counts.get("fail", 0), counts["skipped"])
    # the console: the line, the needs-attention groups and the not-checked groups
    console = result.output
    assert _sums(console) == want
    attention = console[console.index("needs attention:"):console.index("\nnot checked here")]
    assert sum(int(n) for n in re.findall(r"^  (?:fail|error|unverifiable|artifact|defect) \((\d+) rows?[,;)]", attention, re.M)) == want[2]
    assert "  defect (4 rows, diagnosis reference-defect; targets skill-sample;" in attention
    assert "e.g. skill-sample/cpu/bf16/" in attention and "es_finetuning_skill.py:90" in attention
    unchecked = console[console.index("\nnot checked here"):]
    assert sum(int(n) for n in re.findall(r"^  (\d+) rows \(", unchecked, re.M)) == want[3]
    # parity.md: the header line, the needs-attention entries, the not-checked table
    md = (out / "parity.md").read_text()
    assert _sums(md) == want
    section = md[md.index("## needs attention"):md.index("## not checked here")]
    assert sum(int(n) for n in re.findall(r": (\d+) row\(s\)", section)) == want[2]
    assert "**defect** skill-sample" in section
    # the HTML: the header line, the entries, the grid's defect colour
    page = (out / "parity.html").read_text()
    assert _sums(page) == want
    lead = page[page.index(">needs attention</h2>"):page.index(">not checked here</h2>")]
    assert sum(int(n) for n in re.findall(r"</b>(?:, diagnosis <code>[^<]*</code>)?: (\d+) row\(s\)", lead)) == want[2]
    grid = page[page.index(">summary</h2>"):page.index(">cases</h2>")]
    assert "class='st-defect'" in grid and ".st-defect{background:" in page
    # the JSON: the accounting object and the sections
    doc = json.loads((out / "parity.json").read_text())
    account = doc["accounting"]
    assert account["rows"] == len(doc["sections"]["cases"]) == want[0]
    assert account["pass"] + sum(account["needs_attention"].values()) + sum(account["not_checked"].values()) \
        == account["rows"]
    assert sum(e["rows"] for e in doc["sections"]["attention"]) == want[2]
    assert sum(e["rows"] for e in doc["sections"]["not_checked_here"] if e["rows"] is not None) == want[3]
