"""A reference from outside the repository (CONTRIBUTING.md "Adding a reference", followed here).

The test writes a small reference package (`esverify-toy-es`: its REFERENCE record, its ReferenceSpec of
six fields and its child driver), installs it into a fresh virtual environment that sees this
environment's packages, writes a clone of a toy ES library (`toyes/core.py`: `perturb(params, seed,
sigma, negate=False)` adds sigma times the seeded Gaussian noise of torch's generator, the es-at-scale
numerics), and runs `esverify parity --ref CLONE` with this tree's esverify: the entry point makes the
toy reference known, its spec recognises the clone, and every row passes, without a line of esverify
changed. A mutant clone (noise scaled by 1.5) must fail,
so the pass is not vacuous.
"""
from __future__ import annotations

import json
import os
import site
import subprocess
import sys
import textwrap
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

PYPROJECT = """\
[build-system]
requires = ["setuptools>=77"]
build-backend = "setuptools.build_meta"

[project]
name = "esverify-toy-es"
version = "0.1.0"

[project.entry-points."esverify.references"]
toy-es = "esverify_toy_es:REFERENCE"

[tool.setuptools]
packages = ["esverify_toy_es"]

[tool.setuptools.package-data]
esverify_toy_es = ["child/*.py"]
"""

INIT = '''\
"""toy-es: a toy ES library, as a plug-in reference of esverify."""
from esverify.references import Reference

REFERENCE = Reference(name="toy-es", adapter="esverify_toy_es.adapter:ADAPTER",
                      profiles=(), golden_areas=())
'''

ADAPTER = '''\
"""The toy-es reference spec: perturb and restore of toyes/core.py on the core's generic single-op path."""
from pathlib import Path

from esverify.oracle.spec import CloneSpec, OpsSpec, ReferenceSpec, ReportTexts

ADAPTER = ReferenceSpec(
    name="toy-es",
    clone=CloneSpec(files={"core": "toyes/core.py"}, needs={"perturb": "core", "restore": "core"},
                    licence="LICENSE", env_var="ESVERIFY_TOY_ES_REF", default_path="refs/toy-es"),
    ops=OpsSpec(single=("perturb", "restore"), fuzz=("perturb", "restore")),
    driver=str(Path(__file__).with_name("child") / "driver.py"),
    profile="es-at-scale",          # its numerics are es-at-scale's: sigma * noise in the dtype, then add
    texts=ReportTexts(summary="toy-es: a toy ES library (perturb/restore)"),
)   # the default `cases`: each op once per cell, at the cell's population and set
'''

DRIVER = '''\
"""Child driver of toy-es, run by path in the child beside esverify's shared child code."""
from child_server import (HOOK, DrawAudit, StandInModel, expected_draws, load_module, load_set, load_ties,
                          module_or_raise, save_results, serve)
from child_server import ReferenceLoadError


def load_modules(clone):
    try:
        return {"core": load_module(clone, "toyes/core.py", "esverify_toy_es_core")}
    except ReferenceLoadError as exc:
        return {"core": exc}


def op_perturb(case, modules):
    core = module_or_raise(modules, "core")
    names, tensors = load_set(case["set"], case["device"])
    model = StandInModel(names, tensors, load_ties(case["set"]))
    table = {int(h): int(s, 16) for h, s in case["handles"].items()}
    HOOK.configure(model, table, case["scheme"], case["mapping"], case["backend"], case.get("noise", "contract"))
    audit = DrawAudit(model.names)
    h = case["member_handle"]
    # parameters as a lazy generator: the child attributes each draw to the slot being visited
    core.perturb((p for _, p in model.named_parameters()), h, case["sigma"])
    audit.check("perturb", expected_draws(model.tensors, [h]))
    if case["op"] == "restore":
        core.perturb((p for _, p in model.named_parameters()), h, case["sigma"], negate=True)
        audit.check("restore", expected_draws(model.tensors, [h]))
    save_results(case["out"] + "/theirs.npz", model.tensors)
    return {"results": case["out"] + "/theirs.npz", "attribution": audit.result()}


if __name__ == "__main__":
    serve("toy-es", load_modules, {"perturb": op_perturb, "restore": op_perturb}, threads=1)
'''

TOY_LIBRARY = '''\
"""A toy ES library (written for esverify's plug-in test): one perturbation, seeded by torch's generator."""
import torch


def perturb(params, seed, sigma, negate=False):
    scale = -sigma if negate else sigma
    for p in params:
        generator = torch.Generator(device=p.device)
        generator.manual_seed(seed)
        noise = torch.randn(p.shape, dtype=p.dtype, device=p.device, generator=generator)
        p.data.add_(scale * noise)
'''


def _write(root: Path, files: dict) -> Path:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text, encoding="utf-8")
    return root


@pytest.fixture(scope="module")
def toy_venv(tmp_path_factory):
    """A fresh venv seeing this environment's packages (torch is not reinstalled), with the plug-in installed."""
    base = tmp_path_factory.mktemp("plugin")
    plugin = _write(base / "esverify-toy-es", {"pyproject.toml": PYPROJECT, "esverify_toy_es/__init__.py": INIT,
                                                "esverify_toy_es/adapter.py": ADAPTER,
                                                "esverify_toy_es/child/driver.py": DRIVER})
    env_dir = base / "venv"
    venv.EnvBuilder(system_site_packages=False, with_pip=False).create(env_dir)
    python = env_dir / "bin" / "python"
    purelib = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                             capture_output=True, text=True, check=True).stdout.strip()
    # this environment's site-packages after the venv's own: the plug-in is the only package installed here
    Path(purelib, "outer.pth").write_text("\n".join(site.getsitepackages()) + "\n", encoding="utf-8")
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
                    "--no-index", "--target", purelib, str(plugin)], check=True, capture_output=True, text=True)
    return python


def _parity(python: Path, clone: Path, out: Path):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([str(python), "-m", "esverify", "parity", "--ref", str(clone), "--target", "toy-es",
                           "--devices", "cpu", "--dtypes", "f32", "--noise", "contract", "--small", "--no-loops",
                           "--population", "4", "--python", str(python), "--out", str(out), "--format", "json",
                           "--quiet"], capture_output=True, text=True, env=env, cwd=str(out.parent), timeout=600)


def _rows(out: Path) -> list:
    return json.loads((out / "parity.json").read_text(encoding="utf-8"))["sections"]["cases"]


@pytest.mark.slow
def test_an_installed_reference_package_is_found_and_its_clone_passes(toy_venv, tmp_path):
    listed = subprocess.run([str(toy_venv), "-c", "from esverify import registry; print(registry.names())"],
                            capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)}, check=True)
    assert "toy-es" in listed.stdout and "es-awd" in listed.stdout
    # the toy's whole interface is a ReferenceSpec: at most 12 members, and the core answers it with its Adapter
    members = subprocess.run([str(toy_venv), "-c", "import dataclasses; from esverify_toy_es.adapter import ADAPTER; "
                              "from esverify.oracle import adapters; "
                              "print(type(ADAPTER).__name__, len(dataclasses.fields(ADAPTER)), "
                              "type(adapters.get('toy-es')).__name__)"],
                             capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)}, check=True)
    kind, count, core_view = members.stdout.split()
    assert (kind, core_view) == ("ReferenceSpec", "SpecAdapter") and int(count) <= 12
    clone = _write(tmp_path / "toy-clone", {"toyes/__init__.py": "", "toyes/core.py": TOY_LIBRARY,
                                            "LICENSE": "written for esverify's tests\n"})
    run = _parity(toy_venv, clone, tmp_path / "report")
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    rows = _rows(tmp_path / "report")
    assert rows and {r["target"] for r in rows} == {"toy-es"}
    assert {r["op"] for r in rows} == {"perturb", "restore"}
    assert all(r["status"] == "pass" for r in rows), [(r["case"], r["status"], r["detail"]) for r in rows]


@pytest.mark.slow
def test_a_wrong_toy_library_fails(toy_venv, tmp_path):
    clone = _write(tmp_path / "toy-clone", {"toyes/__init__.py": "",
                                            "toyes/core.py": TOY_LIBRARY.replace("scale * noise", "1.5 * scale * noise"),
                                            "LICENSE": "written for esverify's tests\n"})
    run = _parity(toy_venv, clone, tmp_path / "report")
    assert run.returncode == 1, run.stdout[-3000:] + run.stderr[-3000:]
    assert {r["status"] for r in _rows(tmp_path / "report") if r["op"] == "perturb"} == {"fail"}
