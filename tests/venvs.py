"""Nested virtual environments that see this interpreter's packages, however it was installed.

`python -m venv --system-site-packages`, run from inside a venv, sees the BASE
interpreter's packages, not the outer venv's: a suite run in a fresh venv
(as the README's set-up does) then finds no torch or pandas in the nested one
. Instead the nested venv gets a `.pth` file listing every
site-packages folder of the RUNNING interpreter (system, venv or user site:
`site.getsitepackages()`, the user site when enabled, sysconfig's
purelib/platlib, and any site-packages folder on its `sys.path`). Plain path lines are appended after the venv's own
site-packages, so what is installed into the nested venv wins, and the
outer folders' own `.pth` files (an editable esverify, for one) are not run.
"""
from __future__ import annotations

import site
import subprocess
import sys
import sysconfig
from pathlib import Path


def outer_site_dirs() -> list[str]:
    """Every site-packages folder of the running interpreter, in its own order."""
    dirs = list(site.getsitepackages())
    if site.ENABLE_USER_SITE:
        dirs.append(site.getusersitepackages())
    paths = sysconfig.get_paths()
    dirs += [paths["purelib"], paths["platlib"]]
    # folders a .pth put on the path (a venv made by make_venv, a --system-site-packages venv's base)
    dirs += [p for p in sys.path if Path(p).name in ("site-packages", "dist-packages")]
    in_path = [p for p in sys.path if p in dirs]          # the order the running interpreter uses
    ordered = list(dict.fromkeys(in_path + dirs))
    return [d for d in ordered if Path(d).is_dir()]


def make_venv(path: Path) -> Path:
    """Create a venv at `path`, without pip (`pip --python` installs into it), that also sees the running
    interpreter's packages; returns its python."""
    path = Path(path)
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(path)],
                   check=True, capture_output=True)
    python = path / "bin" / "python"
    purelib = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             check=True, capture_output=True, text=True).stdout.strip()
    Path(purelib).mkdir(parents=True, exist_ok=True)
    (Path(purelib) / "_esverify_outer_site.pth").write_text("\n".join(outer_site_dirs()) + "\n")
    return python
