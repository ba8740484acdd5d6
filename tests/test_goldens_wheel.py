"""A non-editable wheel install runs `goldens check` from its packaged goldens.

Builds a wheel from a copy of the tree (so the shared checkout gets no
build/ folder), installs it with --no-deps (this interpreter's pip, `pip --python`)
into a venv that sees the running interpreter's site-packages (numpy, torch, numba come from there, whether
the suite runs in a venv or not: tests/venvs.py), and runs the
venv's `esverify` from a folder outside any checkout: `goldens check`
passes on the shipped data, `goldens generate` without --out exits 2.
"""
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from test_goldens_support import COMMITTED, ROOT

SHIPPED = ["pyproject.toml", "setup.py", "MANIFEST.in", "README.md", "LICENSE", "CHANGELOG.md",
           "esverify", "goldens", "oracles"]


def sh(*args, cwd, env=None, check=True):
    result = subprocess.run([str(a) for a in args], cwd=cwd, env=env, capture_output=True, text=True)
    if check and result.returncode:
        raise AssertionError(f"{args} exited {result.returncode}\n{result.stdout}\n{result.stderr}")
    return result


@pytest.mark.slow
def test_wheel_install_checks_goldens_and_refuses_generate(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    for name in SHIPPED:
        path = ROOT / name
        if path.is_dir():
            shutil.copytree(path, src / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        elif path.is_file():
            shutil.copy2(path, src / name)
    sh(sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", tmp_path / "dist",
       src, cwd=tmp_path)
    (wheel,) = (tmp_path / "dist").glob("esverify-*.whl")
    from venvs import make_venv   # sees this interpreter's numpy, torch, pandas however it was installed
    # no pip of its own (ensurepip cost about 5 s of CPU): this interpreter's pip installs into it (--python)
    py = make_venv(tmp_path / "venv")
    sh(sys.executable, "-m", "pip", "--python", py, "install", "--no-deps", "--no-index", "-q", wheel, cwd=tmp_path)

    outside = tmp_path / "elsewhere"
    outside.mkdir()
    # the installed wheel alone: no goldens override, no PYTHONPATH pointing at a checkout
    env = {k: v for k, v in os.environ.items() if k not in ("ESVERIFY_GOLDENS_DIR", "PYTHONPATH")}
    where = sh(py, "-c", "import esverify, esverify.paths as p; print(esverify.__file__); "
                         "print(p.checkout_root()); print(p.goldens_dir())", cwd=outside, env=env).stdout.split()
    assert str(tmp_path / "venv") in where[0], where
    assert where[1] == "None"
    data = Path(where[2])
    assert (data / "rng.json").read_bytes() == (COMMITTED / "rng.json").read_bytes()
    assert (data / "schema.json").is_file()

    esverify = tmp_path / "venv" / "bin" / "esverify"
    # every area's shipped vectors, recomputed by the installed package on numpy; and the cheapest area on
    # every CPU backend, so that the installed numba kernels (compiled here from the wheel's files) and
    # torch paths run too. Every area on every backend is test_goldens_gate's, from the checkout: the same
    # modules, which the wheel only copies (a full gate here cost about 70 s of CPU, a third of it numba
    # compiling each kernel afresh for the new install)
    from esverify.goldens.areas import area_names
    for k, extra in enumerate((["--backend", "numpy"], ["--area", "skill-sample"])):
        report = tmp_path / f"check{k}.json"
        checked = sh(esverify, "goldens", "check", *extra, "--json", report, cwd=outside, env=env, check=False)
        assert checked.returncode == 0, checked.stdout + checked.stderr
        assert "goldens check: PASS" in checked.stdout + checked.stderr
        summary = json.loads(report.read_text())["sections"]["summary"]
        if extra[0] == "--backend":
            assert {row["area"] for row in summary} == set(area_names())
        else:
            assert {row["backend"] for row in summary} == {"numpy", "numba", "torch-cpu"}

    refused = sh(esverify, "goldens", "generate", "--area", "rng", cwd=outside, env=env, check=False)
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert "installed package" in refused.stderr

    out = tmp_path / "out"
    # skill-sample: the cheapest area (rng's digests take about half a minute of pure-Python reference here)
    written = sh(esverify, "goldens", "generate", "--area", "skill-sample", "--out", out, cwd=outside, env=env,
                 check=False)
    assert written.returncode == 0, written.stdout + written.stderr
    assert (out / "skill-sample.json").read_bytes() == (COMMITTED / "skill-sample.json").read_bytes()

    # the oracle drivers ship as data: parity runs from the wheel, outside any checkout
    parity = sh(esverify, "parity", "--ref", ROOT / "tests" / "standins" / "es-at-scale", "--target", "es-at-scale",
                "--small", "--devices", "cpu", "--case", "*/f32/iid/*", "--quiet", "--format", "json",
                "--out", tmp_path / "parity", cwd=outside, env=env, check=False)
    assert parity.returncode == 0, parity.stdout + parity.stderr
    rows = json.loads((tmp_path / "parity" / "parity.json").read_text())["sections"]["cases"]
    assert rows and {r["status"] for r in rows} == {"pass"}
    assert all("/f32/iid/" in r["case"] for r in rows)
