"""tests/venvs.py: a nested venv sees the packages of the interpreter that made it, even when that
interpreter is itself a venv (`--system-site-packages` from inside a venv sees the
base interpreter's packages instead, so the suite failed in a fresh venv)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from venvs import make_venv

TESTS = Path(__file__).resolve().parent


def _purelib(python: Path) -> Path:
    return Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               check=True, capture_output=True, text=True).stdout.strip())


def _imports(python: Path, module: str) -> bool:
    return subprocess.run([str(python), "-c", f"import {module}"], capture_output=True).returncode == 0


def test_venv_made_from_inside_a_venv_sees_the_outer_venvs_packages(tmp_path):
    outer = make_venv(tmp_path / "outer")                   # stands for a newcomer's fresh venv
    (_purelib(outer) / "esverify_only_in_outer.py").write_text("VALUE = 1\n")
    assert _imports(outer, "esverify_only_in_outer") and _imports(outer, "numpy")
    # the old way: --system-site-packages from inside the outer venv sees the BASE interpreter only
    subprocess.run([str(outer), "-m", "venv", "--without-pip", "--system-site-packages", str(tmp_path / "old")],
                   check=True)
    assert not _imports(tmp_path / "old" / "bin" / "python", "esverify_only_in_outer")
    # tests/venvs.py, run BY the outer venv's interpreter, as the suite is when run inside a venv
    code = f"import sys; sys.path.insert(0, {str(TESTS)!r}); from venvs import make_venv; " \
           f"print(make_venv(__import__('pathlib').Path({str(tmp_path / 'nested')!r})))"
    nested = Path(subprocess.run([str(outer), "-c", code], check=True, capture_output=True,
                                 text=True).stdout.strip())
    assert _imports(nested, "esverify_only_in_outer") and _imports(nested, "numpy")
    # what is installed into the nested venv itself comes first
    (_purelib(nested) / "esverify_only_in_outer.py").write_text("VALUE = 2\n")
    value = subprocess.run([str(nested), "-c", "import esverify_only_in_outer as m; print(m.VALUE)"],
                           check=True, capture_output=True, text=True).stdout.strip()
    assert value == "2"
    assert sys.prefix != str(tmp_path)   # the running interpreter was not touched
