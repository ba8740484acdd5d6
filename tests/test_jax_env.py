"""HyperscaleES in a JAX user's own environment: an interpreter with jax and no torch (docs/parity.md,
"What each child needs"; esverify.oracle.interpreters).

- hyperscale-es's child speaks the child protocol itself (CloneSpec.standalone_child): its interpreter is
  asked for jax, jaxlib, optax and numpy only, never torch, and no warm start server (which imports torch)
  forks it; the torch references still need torch and numpy.
- a JAX environment without optax: the hyperscale-es rows are skipped, naming optax and the pip line.
- a bare `--python PATH` with jax and no torch: the torch references' rows are skipped naming torch, the
  hyperscale-es rows run.

The slow tests build a torch-free interpreter from this one's own installed jax, jaxlib, optax and numpy
(a venv without site-packages whose site folder links only those distributions): nothing is downloaded,
and they are skipped when this interpreter has no jax.
"""
from __future__ import annotations

import importlib.metadata
import json
import subprocess
import sys
import venv
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest

from esverify.oracle import Options, adapters
from esverify.oracle import interpreters as I
from standins.mutants import STANDINS

TARGET = "hyperscale-es"
#: the distributions a JAX environment for the hyperscale-es child holds (jax's and optax's own requirements)
JAX_ENV = ("jax", "jaxlib", "optax", "numpy", "ml_dtypes", "opt_einsum", "scipy", "absl-py")


def test_a_standalone_child_needs_its_own_modules_only_and_the_torch_ones_keep_torch():
    hyperscale = adapters.get(TARGET)
    assert I.standalone(hyperscale) and I.child_needs(hyperscale) == ("jax", "jaxlib", "optax", "numpy")
    for name in adapters.names():
        if name != TARGET:
            assert not I.standalone(adapters.get(name))
            assert I.child_needs(adapters.get(name))[:2] == ("torch", "numpy"), name
    assert I.child_needs(adapters.get("eggroll")) == ("torch", "numpy", "safetensors")


def _probe(found: dict):
    """A stand-in for setup.probe_python: an interpreter at /jax/bin/python that has exactly `found`."""
    asked = []

    def probe(python, timeout, explicit, modules):
        asked.append((python, tuple(modules)))
        return {"python": "3.11.7", "executable": python, "torch": found.get("torch", False),
                "numpy": found.get("numpy", False), "found": {m: found.get(m, False) for m in modules}}
    return probe, asked


def test_a_bare_jax_interpreter_without_torch_runs_hyperscale_and_skips_the_torch_references():
    probe, asked = _probe({"numpy": True, "jax": True, "jaxlib": True, "optax": True})
    opts = Options(python="/jax/bin/python", python_explicit=True)
    names = ["es-awd", "eggroll", TARGET]
    facts, lacking = I.check(opts, names, 10, probe=probe)
    assert set(facts) == set(names) and len(asked) == 1   # one interpreter, asked once
    assert asked[0][1] == ("safetensors", "jax", "jaxlib", "optax")   # torch and numpy: always in the probe
    assert TARGET not in lacking
    assert lacking["es-awd"] == ("the child Python /jax/bin/python (3.11.7) lacks torch, which es-awd needs; fix: "
                                 "install it there (/jax/bin/python -m pip install torch==2.13.0) or give --python "
                                 "es-awd=PATH with an interpreter that has it")
    assert "lacks torch and safetensors, which eggroll needs" in lacking["eggroll"]


def test_a_jax_environment_without_optax_skips_hyperscale_naming_optax_and_the_pip_line():
    probe, _ = _probe({"numpy": True, "jax": True, "jaxlib": True})
    opts = Options(pythons={TARGET: "/jax/bin/python"})
    _, lacking = I.check(opts, [TARGET, "es-awd"], 10, probe=lambda python, *a: (
        probe(python, *a) if python == "/jax/bin/python" else
        {"python": "3.11.7", "executable": python, "torch": True, "numpy": True, "found": {}}))
    assert lacking == {TARGET: "the child Python /jax/bin/python (3.11.7) lacks optax, which hyperscale-es needs; "
                               "fix: install it there (/jax/bin/python -m pip install optax)"}
    # alone, it is the setup error of a run in which no reference can run
    with pytest.raises(I.SetupError, match=r"lacks optax, which hyperscale-es needs; fix: install it there "
                                           r"\(/jax/bin/python -m pip install optax\)"):
        I.check(opts, [TARGET], 10, probe=probe)


def test_no_warm_start_server_forks_a_standalone_child(tmp_path):
    """The server imports torch before it forks (esverify/oracle/warm_server.py): a JAX child is started fresh
    under its own interpreter, while a torch reference's child is handed the run's servers."""
    from esverify.oracle.session import Session
    servers = object()
    runner = SimpleNamespace(opts=Options(), work=tmp_path, warm=servers)
    clone = SimpleNamespace(path=STANDINS / "hyperscale-es")
    assert Session(runner, adapters.get(TARGET), clone).child.warm is None
    clone = SimpleNamespace(path=STANDINS / "es-awd")
    assert Session(runner, adapters.get("es-awd"), clone).child.warm is servers


# ---------------------------------------------------------------- a real torch-free JAX interpreter (slow)

def _has_jax() -> bool:
    try:
        return all(importlib.metadata.version(d) for d in JAX_ENV)
    except importlib.metadata.PackageNotFoundError:
        return False


def jax_only_python(folder: Path, dists=JAX_ENV) -> str:
    """The interpreter of a fresh venv at `folder` (no pip, no site-packages of ours) whose site folder links
    the top-level packages of `dists` as this interpreter has them installed: jax without torch."""
    venv.EnvBuilder(with_pip=False, system_site_packages=False, symlinks=True).create(folder)
    python = folder / "bin" / "python"
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                               capture_output=True, text=True, check=True).stdout.strip())
    for name in dists:
        dist = importlib.metadata.distribution(name)
        for top in {f.parts[0] for f in dist.files or () if f.parts[0] not in ("..", "__pycache__")}:
            source = Path(dist.locate_file(top))
            if source.exists() and not top.endswith(".pth") and not (site / top).exists():
                (site / top).symlink_to(source)
    return str(python)


needs_jax = pytest.mark.skipif(not _has_jax(), reason="this interpreter has no jax, jaxlib and optax to link")


def _parity(out: Path, refs, *python) -> tuple[subprocess.CompletedProcess, pd.DataFrame]:
    refs = [a for ref in refs for a in ("--ref", str(STANDINS / ref))]
    done = subprocess.run([sys.executable, "-m", "esverify", "parity", *refs, *python, "--devices", "cpu",
                           "--dtypes", "f32", "--iterations", "1", "--small", "--case", "*/perturb*/N[47]",
                           "--out", str(out), "--format", "csv,json"],
                          capture_output=True, text=True, timeout=900)
    assert (out / "parity-cases.csv").is_file(), (done.stdout + done.stderr)[-3000:]
    return done, pd.read_csv(out / "parity-cases.csv", keep_default_na=False)


@pytest.mark.slow   # a jax child (and the report): 20-60 s on the development machine
@needs_jax
def test_a_bare_python_with_jax_and_no_torch_runs_hyperscale_and_names_torch_for_the_rest(tmp_path):
    python = jax_only_python(tmp_path / "jaxenv")
    assert subprocess.run([python, "-c", "import torch"], capture_output=True).returncode != 0
    done, cases = _parity(tmp_path / "report", ("es-awd", "hyperscale-es"), "--python", python)
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    ours = cases[cases["target"] == TARGET]
    assert len(ours) == 2 and set(ours["status"]) == {"pass"}, ours[["case", "status", "detail"]].to_string()
    awd = cases[cases["target"] == "es-awd"]
    assert len(awd) and set(awd["status"]) == {"skipped"}
    assert all(f"the child Python {python} (3." in d and "lacks torch, which es-awd needs" in d for d in awd["detail"])
    first = done.stdout.splitlines()[0]
    assert first.startswith("esverify parity: PASS") and "es-awd: " in first and "lacks torch" in first, first
    metadata = json.loads((tmp_path / "report" / "parity.json").read_text())["metadata"]
    assert metadata["child_interpreters"][TARGET]["executable"] == python
    assert metadata["children"][TARGET]["start"] == "fresh" and metadata["children"][TARGET]["jax"]


@pytest.mark.slow   # an es-awd child beside the probe of a jax interpreter
@needs_jax
def test_a_jax_environment_without_optax_skips_hyperscale_rows_in_a_run(tmp_path):
    python = jax_only_python(tmp_path / "jaxenv", [d for d in JAX_ENV if d not in ("optax", "absl-py")])
    done, cases = _parity(tmp_path / "report", ("es-awd", "hyperscale-es"), "--python", f"{TARGET}={python}")
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    ours = cases[cases["target"] == TARGET]
    assert len(ours) == 2 and set(ours["status"]) == {"skipped"}
    version = ".".join(map(str, sys.version_info[:3]))   # the venv's Python is this one's
    assert set(ours["detail"]) == {f"not checked here: the child Python {python} ({version}) lacks optax, which "
                                   f"hyperscale-es needs; fix: install it there ({python} -m pip install optax)"}
    assert set(cases.loc[cases["target"] == "es-awd", "status"]) == {"pass"}
    assert "hyperscale-es: 2 rows not run: the interpreter lacks optax" in done.stdout.splitlines()[0]


def _bench():
    sys.path.insert(0, str(Path(__file__).parent))
    from bench_scripts import load
    return load("bench_parity")


def test_bench_parity_runs_hyperscale_only_where_its_interpreter_has_jax(tmp_path):
    """benchmarks/bench_parity.py's default stand-ins: hyperscale-es's with jax, jaxlib and optax in its
    interpreter, else left out with one line naming the interpreter and the fix."""
    bench = _bench()
    bare = tmp_path / "bare"
    venv.EnvBuilder(with_pip=False, system_site_packages=False, symlinks=True).create(bare)
    python = str(bare / "bin" / "python")
    refs, line = bench.default_refs([f"{TARGET}={python}"])
    assert refs == bench.DEFAULT_REFS and bench.HYPERSCALE not in refs
    assert line == (f"hyperscale-es left out: {python} does not have jax, jaxlib, optax, numpy (give --python "
                    "hyperscale-es=PATH with a JAX environment)")
    assert bench.default_refs([python])[0] == bench.DEFAULT_REFS   # a bare --python is hyperscale-es's too
    if not _has_jax():
        pytest.skip("this interpreter has no jax: the run with hyperscale-es is not shown here")
    refs, line = bench.default_refs([])
    assert refs == [*bench.DEFAULT_REFS, bench.HYPERSCALE] and line == ""


def test_a_jax_users_xla_and_jax_settings_reach_the_child_and_nothing_else(tmp_path, monkeypatch):
    """XLA_FLAGS (which every hyperscale-es row records) and JAX_* reach a child; other variables do not."""
    from esverify.oracle.child_process import child_environment
    monkeypatch.setenv("XLA_FLAGS", "--xla_allow_excess_precision=false")
    monkeypatch.setenv("JAX_ENABLE_X64", "0")
    monkeypatch.setenv("ESVERIFY_JAX_SECRET", "s3cr3t")
    env = child_environment(None, tmp_path, tmp_path)
    assert env["XLA_FLAGS"] == "--xla_allow_excess_precision=false" and env["JAX_ENABLE_X64"] == "0"
    assert "ESVERIFY_JAX_SECRET" not in env
