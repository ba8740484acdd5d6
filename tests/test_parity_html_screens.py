"""The HTML report reads from the top: the verdict, the causes, the findings, what was
not checked, then the grid and the cases, whose table shows the rows that are not pass or skipped (the
rest one click away). Checked in headless Chromium at 1,400 x 2,000 px: where each part of the page
lands (positions the browser computed), and a screenshot of each page to look at. Skipped where no
Chromium is installed (apt-get install chromium)."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

from esverify.cli import main
from standins.mutants import STANDINS, make_mutant

WIDTH, FOLD = 1400, 2000
BROWSER = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
#: written into a copy of the page: the top (px) of the verdict and of each section heading
_MEASURE = """<script>window.addEventListener('load',function(){var out={},wide={},at='top';
var v=document.querySelector('.verdict');if(v){out['verdict']=v.getBoundingClientRect().top;}
Array.prototype.slice.call(document.body.children).forEach(function(el){
if(el.tagName==='H2'){at=el.textContent;out[at]=el.getBoundingClientRect().top;}
var parts=[el].concat(Array.prototype.slice.call(el.querySelectorAll('table,p,pre,div,ul')));
parts.forEach(function(x){if(x.closest('details:not([open])')&&x.tagName!=='DETAILS'){return;}
wide[at]=Math.max(wide[at]||0,x.getBoundingClientRect().right);});});
out['_wide']=wide;var pre=document.createElement('pre');pre.id='esv-pos';pre.textContent=JSON.stringify(out);
document.body.appendChild(pre);});</script>"""


def _run(out, *args):
    result = CliRunner().invoke(main, ["parity", *args, "--small", "--quiet", "--no-loops", "--out", str(out)])
    assert result.exit_code in (0, 1), result.output
    return out


@pytest.fixture(scope="module")
def pages(tmp_path_factory):
    if BROWSER is None:
        pytest.skip("no chromium on this machine (apt-get install chromium)")
    tmp = tmp_path_factory.mktemp("screens")
    failing = _run(tmp / "failing", "--ref", str(make_mutant(tmp, "sigma-constant")), "--target", "es-at-scale",
                   "--case", "*/f32/*")
    passing = _run(tmp / "passing", "--ref", str(STANDINS / "es-awd"), "--dtypes", "f32")
    return {"failing": failing, "passing": passing}


def measure(report, tmp_path, name) -> dict:
    """{verdict or heading: its top in px} of the page at WIDTH x FOLD, and a screenshot `name`.png."""
    page = (report / "parity.html").read_text(encoding="utf-8")
    copy = tmp_path / f"{name}.html"
    copy.write_text(page.replace("</head>", _MEASURE + "</head>", 1), encoding="utf-8")
    common = [BROWSER, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", f"--window-size={WIDTH},{FOLD}"]
    dom = subprocess.run(common + ["--virtual-time-budget=5000", "--dump-dom", copy.as_uri()], capture_output=True,
                         text=True, timeout=180, check=True).stdout
    subprocess.run(common + [f"--screenshot={tmp_path / (name + '.png')}", (report / "parity.html").as_uri()],
                   capture_output=True, timeout=180, check=True)
    keep = os.environ.get("ESVERIFY_SCREENSHOTS")   # a folder to keep the pictures in, to look at them
    if keep:
        shutil.copy2(tmp_path / f"{name}.png", Path(keep) / f"{name}.png")
    match = re.search(r"<pre id=\"esv-pos\">(.*?)</pre>", dom, re.S)
    assert match, dom[-2000:]
    return json.loads(match.group(1).replace("&quot;", '"'))


@pytest.mark.parametrize("which", ["failing", "passing"])
def test_verdict_causes_and_findings_are_above_the_fold(pages, tmp_path, which):
    pos = measure(pages[which], tmp_path, which)
    order = ["verdict", "needs attention", "findings", "not checked here", "summary", "cases"]
    tops = [pos[k] for k in order]
    assert tops == sorted(tops), pos
    assert pos["verdict"] < FOLD and pos["needs attention"] < FOLD and pos["findings"] < FOLD, pos
    # nothing a person reads first is pushed off the right edge (the metadata's tables may scroll)
    wide = {k: w for k, w in pos["_wide"].items() if k in order[1:] + ["top"] and w > WIDTH}
    assert not wide, pos["_wide"]
    if which == "passing":   # a few screens before the case table
        assert pos["cases"] < 3 * FOLD, pos


def test_the_cases_table_shows_the_rows_that_are_not_pass_or_skipped(pages):
    page = (pages["failing"] / "parity.html").read_text(encoding="utf-8")
    cases = page[page.index(">cases</h2>"):]
    shown = cases[:cases.index("<details>")]
    assert re.search(r"<p>\d+ of \d+ rows: those that are not pass or skipped</p>", shown)
    assert "data-status='fail'" in shown and "data-status='pass'" not in shown
    assert "<summary>all " in cases
    ids = re.findall(r" id='(c-[^']+)'", page)
    assert len(ids) == len(set(ids))   # every case has one anchor
