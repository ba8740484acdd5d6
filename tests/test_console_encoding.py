"""Console encoding and exit-code parity (esverify/console.py).

Each command runs in a subprocess whose console is cp1252 (PYTHONIOENCODING=cp1252), on paths holding
characters cp1252 cannot encode (U+65E5 U+672C). Before the fix, audit and parity wrote their reports
(verdict pass, exit 0) and then crashed while printing the path: exit 1, against the report's 0. Now
the path is printed escaped, and the process exit code equals `exit_code` in the JSON report just
written, for parity, audit and goldens check.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NAME = "r\u00e9-\u65e5\u672c"        # é is in cp1252; the two CJK characters are not
ESCAPED = "\\u65e5\\u672c"


def _run(args, cwd, timeout=300):
    env = {**os.environ, "PYTHONIOENCODING": "cp1252", "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "esverify", *args], cwd=cwd, env=env, capture_output=True,
                          timeout=timeout)


def _check(proc, report: Path, printed_path: bool = True):
    out = proc.stdout.decode("cp1252") + proc.stderr.decode("cp1252")
    assert "Traceback" not in out and "UnicodeEncodeError" not in out, out[-2000:]
    assert ESCAPED in out or not printed_path, out[-2000:]          # the path, escaped, not dropped
    written = json.loads(report.read_text(encoding="utf-8"))
    assert proc.returncode == written["exit_code"], (proc.returncode, written["exit_code"], out[-2000:])
    return written


def test_the_stream_escapes_what_it_cannot_encode():
    code = ("from esverify.console import harden; import sys; harden(); print('a\\u65e5b'); "
            "print('c\\u672c', file=sys.stderr)")
    proc = subprocess.run([sys.executable, "-c", code], env={**os.environ, "PYTHONIOENCODING": "cp1252",
                                                              "PYTHONPATH": str(ROOT)}, capture_output=True)
    assert proc.returncode == 0 and proc.stdout == b"a\\u65e5b\n" and proc.stderr == b"c\\u672c\n"
    unprotected = subprocess.run([sys.executable, "-c", "print('a\\u65e5b')"],
                                 env={**os.environ, "PYTHONIOENCODING": "cp1252"}, capture_output=True)
    assert unprotected.returncode == 1 and b"UnicodeEncodeError" in unprotected.stderr   # the hazard is real


@pytest.mark.slow   # 2 s (--durations, 2026-12-03): out of the fast tier
def test_audit_under_cp1252(tmp_path):
    tree = tmp_path / NAME / "tree"
    tree.mkdir(parents=True)
    shutil.copy(ROOT / "esverify" / "bits.py", tree / "bits.py")
    out = tmp_path / NAME / "out"
    proc = _run(["audit", "--tree", str(tree), "--ref", str(ROOT / "tests" / "fixtures"), "--out", str(out)],
                tmp_path)
    assert _check(proc, out / "audit.json")["exit_code"] == 0


@pytest.mark.slow   # 4 s (--durations, 2026-12-03): out of the fast tier
def test_goldens_check_under_cp1252(tmp_path):
    goldens = tmp_path / NAME / "goldens"
    shutil.copytree(ROOT / "goldens", goldens)
    report = tmp_path / NAME / "gate.json"
    proc = _run(["goldens", "check", "--area", "rng", "--backend", "numpy", "--goldens-dir", str(goldens),
                 "--json", str(report), "--junit", str(tmp_path / NAME / "gate.xml")], tmp_path)
    assert _check(proc, report, printed_path=False)["exit_code"] == 0


@pytest.mark.slow   # 7 s (--durations, 2026-12-03): out of the fast tier
def test_parity_under_cp1252(tmp_path):
    ref = tmp_path / NAME / "es-at-scale"
    shutil.copytree(ROOT / "tests" / "standins" / "es-at-scale", ref)
    out = tmp_path / NAME / "out"
    proc = _run(["parity", "--ref", str(ref), "--target", "es-at-scale", "--devices", "cpu", "--small",
                 "--dtypes", "f32", "--schemes", "iid", "--iterations", "1", "--quiet", "--no-loops",
                 "--case", "*/f32/iid/p*", "--out", str(out)], tmp_path)
    assert _check(proc, out / "parity.json")["exit_code"] == 0
