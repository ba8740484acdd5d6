"""Every HTML report fits a 1,400 px window: no horizontal scrollbar on the page (docs/parity.md, "Reading the
report"). Wide tables scroll inside their own box, prose and commands wrap, cells never overlap, and a page
shows nothing twice.

Two kinds of check: the rules of the shared writer (esverify.report.to_html, which every HTML report goes
through: parity, audit), checked on the HTML text; and the page's own scroll width measured in headless
Chromium at 1,400 px for a report of each kind that writes HTML, skipped where no Chromium is installed
(Debian: apt-get install chromium). The goldens gate and replay write no HTML (their reports are JSON,
JUnit and the console), so a page made by the shared writer from the widest content they hold stands in
for them."""
from __future__ import annotations

import html
import json
import re
import shutil
import subprocess

import pandas as pd
import pytest
from click.testing import CliRunner

from esverify import report
from esverify.cli import main
from esverify.oracle import parity_report
from standins.mutants import STANDINS, make_mutant

WIDTH = 1400
BROWSER = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
#: a CSS length above this many px could pass the window (1 em taken as 16 px, the browsers' default)
EM = 16

#: a row of the widest content a report holds: a long case id, a detail of several hundred characters, a
#: command line without spaces, a hex dump
WIDE = {"case": "eggroll/cpu/bf16/correlated/eggroll-main/N4/native/r2-e2-std-resume", "status": "fail",
        "detail": "the first difference " + "x" * 300 + " " + "word " * 80,
        "command": "esverify parity --ref " + "/a/very/long/path" * 30 + " --case " + "c" * 120,
        "bits": "0x" + "0123456789abcdef" * 40}


def _wide_page() -> str:
    grid = pd.DataFrame([{"target": "es-awd", "device": "cpu", "op": "main-l1-lambda0",
                          **{f"f{i}/correlated/native": "1 pass" for i in range(18)}}])
    sections = {"summary": grid, "cases": pd.DataFrame([WIDE] * 3), "notes": pd.DataFrame([WIDE])}
    metadata = {"verdict": "fail", "exit_code": 1, "children": {"es-awd": {"env": WIDE, "list": list(WIDE.values())}},
                "warnings": [WIDE["detail"], WIDE["command"]]}
    return report.to_html(sections, metadata, "a title naming a path " + "/t" * 120)


# ------------------------------------------------------------------------------------------ the rules


def unboxed_tables(page: str) -> int:
    """How many <table>s of a page have no scrolling box (div.scroll) around them."""
    stack, unboxed = [], 0
    for tag in re.finditer(r"<div class='scroll'>|<div\b[^>]*>|</div>|<table\b", page):
        text = tag.group(0)
        if text.startswith("<table"):
            unboxed += "scroll" not in stack
        elif text == "</div>":
            stack.pop()
        else:
            stack.append("scroll" if text == "<div class='scroll'>" else "div")
    return unboxed


def test_every_table_sits_in_a_scrolling_box():
    page = _wide_page()
    assert page.count("<table") >= 5 and unboxed_tables(page) == 0
    assert unboxed_tables("<div class='x'><table></table></div><div class='scroll'><table></table></div>") == 1
    css = page[page.index("<style>"):page.index("</style>")]
    assert re.search(r"div\.scroll\{[^}]*max-width:100%[^}]*overflow-x:auto", css)


def _lengths(css: str) -> list[tuple[str, float]]:
    return [(m[0], float(m[2]) * (EM if m[3] == "em" else 1))
            for m in re.findall(r"((?:min-|max-)?width)\s*:\s*(([\d.]+)(px|em))", css)]


def test_no_rule_or_attribute_sets_a_width_past_the_window():
    css = report._CSS
    lengths = _lengths(css)
    assert lengths and all(px <= WIDTH - 100 for _, px in lengths), lengths
    assert "90em" not in css   # div.entry's old max-width: 1,440 px, more than the window
    assert _lengths("div{max-width:90em}") == [("max-width", 1440.0)]   # the reader sees em and px


def test_a_grid_cell_holds_its_op_name_without_spilling_into_the_next():
    """The first three grid columns (target, device, op) do not wrap, so they must not be capped either:
    a capped, unwrapped cell draws its text over the next cell (`main-l1-lambda0` did)."""
    rule = re.search(r"table\.grid td:nth-child\(-n\+3\)[^{]*\{([^}]*)\}", report._CSS)
    assert rule and "nowrap" in rule[1] and "max-width:none" in rule[1]


def test_prose_and_commands_wrap():
    css = report._CSS
    assert re.search(r"(^|\})h1,h2,p,li[^{]*\{[^}]*overflow-wrap:anywhere", css, re.M)
    assert re.search(r"pre\{[^}]*white-space:pre-wrap", css)
    assert re.search(r"pre\.cmd\{[^}]*word-break:break-all", css)


def test_a_section_another_shows_is_left_out_of_the_html_only(tmp_path):
    frame = pd.DataFrame([{"a": 1}])
    written = report.write_report(tmp_path, "r", {"one": frame, "two": frame}, {"verdict": "pass"},
                                  formats=("json", "html"), html_omit=("two",))
    page = (tmp_path / "r.html").read_text()
    assert ">one</h2>" in page and ">two</h2>" not in page
    assert set(json.loads((tmp_path / "r.json").read_text())["sections"]) >= {"one", "two"}
    assert len(written) == 2


def test_the_parity_page_shows_the_targets_not_checked_once():
    """"not checked here" folds in every row of "targets not checked": the page shows the first only."""
    targets = pd.DataFrame([{"target": "eggroll", "not_checked": "GPU kernels", "why": "stand-in engines"},
                            {"target": "es-awd", "not_checked": "everything", "why": "no clone given: pass --ref"}])
    frame = pd.DataFrame(columns=["status", "device", "target", "detail"])
    here = parity_report.not_checked_here(frame, targets)
    for row in targets.itertuples():
        assert any(row.target in r.targets and row.not_checked in r.reason for r in here.itertuples())
    assert "not_checked" in parity_report.HTML_OMIT and "not_checked" not in parity_report.HTML_ORDER


# ------------------------------------------------------------------------------ measured in a browser

_MEASURE = """<script>window.addEventListener('load',function(){var d=document.documentElement;
var pre=document.createElement('pre');pre.id='esv-width';pre.textContent=JSON.stringify([d.scrollWidth,d.clientWidth]);
document.body.appendChild(pre);});</script>"""


def scroll_width(page_text: str, tmp_path) -> tuple[int, int]:
    """(document.documentElement.scrollWidth, clientWidth) of a page in headless Chromium at WIDTH px."""
    copy = tmp_path / "measured.html"
    copy.write_text(page_text.replace("</head>", _MEASURE + "</head>", 1), encoding="utf-8")
    dom = subprocess.run([BROWSER, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                          f"--window-size={WIDTH},1000", "--virtual-time-budget=5000", "--dump-dom", copy.as_uri()],
                         capture_output=True, text=True, timeout=180, check=True).stdout
    found = re.search(r"<pre id=\"esv-width\">(.*?)</pre>", dom, re.S)
    assert found, dom[-2000:]
    scroll, client = json.loads(html.unescape(found.group(1)))
    return scroll, client


needs_browser = pytest.mark.skipif(BROWSER is None, reason="no chromium on this machine (apt-get install chromium)")


@needs_browser
def test_the_measure_sees_a_page_that_is_too_wide(tmp_path):
    """The measurement itself: a page with one unboxed 3,000 px table is 3,000 px wide."""
    page = "<!doctype html><html><head></head><body><table><tr><td style='min-width:3000px'>x</td></tr></table></body></html>"
    scroll, client = scroll_width(page, tmp_path)
    assert scroll >= 3000 and client <= WIDTH


@pytest.fixture(scope="module")
def parity_page(tmp_path_factory):
    """A parity report with failing rows (needs attention, plots, blame) and passing loop rows."""
    if BROWSER is None:
        pytest.skip("no chromium on this machine (apt-get install chromium)")
    tmp = tmp_path_factory.mktemp("width")
    out = tmp / "parity"
    result = CliRunner().invoke(main, ["parity", "--ref", str(make_mutant(tmp, "sigma-constant")), "--ref",
                                       str(STANDINS / "es-awd"), "--dtypes", "f32", "--small", "--quiet",
                                       "--out", str(out)])
    assert result.exit_code == 1, result.output
    return (out / "parity.html").read_text(encoding="utf-8")


@needs_browser
def test_a_parity_report_fits_the_window(parity_page, tmp_path):
    scroll, client = scroll_width(parity_page, tmp_path)
    assert scroll <= WIDTH and scroll == client, (scroll, client)


@needs_browser
def test_an_audit_report_fits_the_window(tmp_path):
    tree, ref = tmp_path / "tree", tmp_path / "ref"
    body = "".join(f"def f{i}(values):\n    total = 0\n    for v in values:\n        total += v * {i}\n"
                   f"    return total - {i}\n\n" for i in range(60))
    for folder in (tree, ref):
        folder.mkdir()
        (folder / ("a_very_long_module_name_" * 6 + "x.py")).write_text(body)
    result = CliRunner().invoke(main, ["audit", "--tree", str(tree), "--ref", str(ref), "--out", str(tmp_path / "a")])
    assert result.exit_code in (0, 1), result.output
    scroll, client = scroll_width((tmp_path / "a" / "audit.html").read_text(encoding="utf-8"), tmp_path)
    assert scroll <= WIDTH and scroll == client, (scroll, client)


@needs_browser
def test_the_widest_content_of_goldens_and_replay_fits_the_window(tmp_path):
    scroll, client = scroll_width(_wide_page(), tmp_path)
    assert scroll <= WIDTH and scroll == client, (scroll, client)


def _replay_report() -> dict:
    """A replay report (esverify.replay.report.build_report's shape) with long names and a layout row."""
    def side(n, first=None, layout=""):
        out = {"mismatches": n, "first": first, "max_ulp": 3 if first else None}
        return {**out, "layout": layout} if layout else out
    first = {"index": 123456, "replayed": "0x3f800001 (1.0000001)", "checkpoint": "0x3f800000 (1.0)", "ulp": 1}
    tensors = [{"name": "model.layers.%d.self_attn.q_proj.lora_A.default.weight.a_very_long_suffix" % i,
                "shape": [4096, 4096], "dtype": "bfloat16", "elements": 4096 * 4096, "kind": "dense", "units": 8,
                "replay": side(i, first if i else None), "naive": side(2 * i, first if i else None)}
               for i in range(4)]
    tensors.append({"name": "steps", "shape": [3], "dtype": "float32", "elements": 3, "kind": "dense", "units": 1,
                    "replay": side(3, None, "the checkpoint's dtype float16 is not the replay's float32"),
                    "naive": side(3, None, "the checkpoint's dtype float16 is not the replay's float32")})
    return {"format": "esverify.replay.report/2", "verdict": "differs", "elements": 5 * 4096 * 4096,
            "mismatches": 9, "naive_mismatches": 15, "tensors": tensors, "base": "/b" * 80, "expect": "/e" * 80,
            "log": "/l" * 80, "units": 33, "resumed_units": 0, "state_dir": "/s" * 40,
            "model": {"profile": "es-awd", "noise": "contract", "iterations": 500, "population_size": 30},
            "notes": [WIDE["detail"], "the checkpoint depends on num_engines " + "n" * 200], "text": "t"}


def test_the_replay_page_names_its_sides_and_boxes_its_tables():
    from esverify.replay.report import render_html
    page = render_html(_replay_report(), 1)
    assert unboxed_tables(page) == 0
    header = re.search(r"<table id='s0-tensors'[^>]*><thead><tr>(.*?)</tr>", page)[1]
    columns = re.findall(r"<th>(.*?)</th>", header)
    assert {"replayed", "checkpoint", "ulp", "naive_differ"} <= set(columns) and "expected" not in page
    assert "the checkpoint under test" in page and "0x3f800000 (1.0)" in page
    assert page.index(">differs<") < page.index(">bit-equal<")   # the differing tensors first


@needs_browser
def test_a_replay_report_fits_the_window(tmp_path):
    from esverify.replay.report import render_html
    scroll, client = scroll_width(render_html(_replay_report(), 1), tmp_path)
    assert scroll <= WIDTH and scroll == client, (scroll, client)
