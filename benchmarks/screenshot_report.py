"""Screenshots of a parity.html in a real browser (headless Chromium), to look at what a reader sees.

    python benchmarks/screenshot_report.py REPORT_DIR [--width 1400] [--out DIR]

writes DIR/parity-top.png (the page from its top: verdict, needs attention, plots) and
DIR/parity-<section>.png for the summary heatmap and the not-checked list: a copy of the page in a
temporary folder in which a script hides everything before that section, since headless Chromium
screenshots the top of a page only. Needs `chromium` on PATH (Debian: `apt-get install chromium`).
The report's own file is never changed. Used to check that a report is fully visible at 1400 px;
docs/parity.md, "Reading the report".
"""
from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

#: hides every element of <body> before the heading whose text is `name`
_SHOW_FROM = """<script>document.addEventListener('DOMContentLoaded',function(){var seen=false;
var kids=Array.prototype.slice.call(document.body.children);kids.forEach(function(el){
if(el.tagName==='H2'&&el.textContent===%r){seen=true;}if(!seen){el.style.display='none';}});});</script>"""


def shoot(page: Path, png: Path, width: int, height: int) -> None:
    browser = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    if browser is None:
        sys.exit("no chromium on PATH (apt-get install chromium)")
    subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                    f"--window-size={width},{height}", f"--screenshot={png}", page.as_uri()],
                   check=True, capture_output=True, timeout=120)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("report", type=Path, help="a parity report folder (holding parity.html)")
    parser.add_argument("--width", type=int, default=1400, help="window width in px (default 1400)")
    parser.add_argument("--out", type=Path, default=None, help="where the PNGs go (default: the report folder)")
    args = parser.parse_args()
    page = args.report / "parity.html"
    out = args.out or args.report
    out.mkdir(parents=True, exist_ok=True)
    shoot(page.resolve(), out / "parity-top.png", args.width, 1800)
    text = page.read_text(encoding="utf-8")
    with tempfile.TemporaryDirectory(prefix="esverify-shot-") as tmp:
        for section in ("summary", "not checked here"):
            copy = Path(tmp) / f"{section.replace(' ', '_')}.html"
            copy.write_text(text.replace("</head>", (_SHOW_FROM % section) + "</head>", 1), encoding="utf-8")
            shoot(copy, out / f"parity-{section.replace(' ', '_')}.png", args.width, 1100)
    print(f"screenshots in {out}")


if __name__ == "__main__":
    main()
