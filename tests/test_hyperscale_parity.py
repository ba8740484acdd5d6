"""Parity on the HyperscaleES stand-in (docs/hyperscale.md §10): the adapter's rows, its findings, its mutants.

The child runs under an interpreter with jax, jaxlib and optax: $ESVERIFY_JAX_PYTHON, else this one
when it has them (tests/test_hyperscale_child.py's `_python`); without one these tests are skipped.
"""
from __future__ import annotations

import importlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from test_hyperscale_child import MUTANTS, STANDIN, _python

from esverify.references.hyperscale_es import noiser_ops

#: each test starts a jax child (a parity run: 30-90 s with jax installed; skipped without it)
pytestmark = pytest.mark.slow

TARGET = "hyperscale-es"
SETTINGS = ("jax 0.10.2 jaxlib 0.10.2; cpu fma ", "; XLA_FLAGS '", "; threefry_partitionable True")


def _parity(out: Path, *extra) -> tuple[int, pd.DataFrame, pd.DataFrame, str]:
    done = subprocess.run([sys.executable, "-m", "esverify", "parity", "--ref", str(STANDIN), "--target", TARGET,
                           "--python", f"{TARGET}={_python()}", "--devices", "cpu", "--out", str(out),
                           "--format", "csv", *extra], capture_output=True, text=True, timeout=900)
    cases = pd.read_csv(out / "parity-cases.csv", keep_default_na=False)
    findings = pd.read_csv(out / "parity-findings.csv", keep_default_na=False)
    return done.returncode, cases, findings, done.stdout + done.stderr


def standin_report(tmp_path_factory) -> tuple[int, pd.DataFrame, pd.DataFrame, str]:
    """`_parity` of the default matrix in f32 and bf16 on the stand-in, run once per test session and read by
    every test that asserts on it (here and tests/test_hyperscale_noisers.py): a run costs a jax child's
    compilations of every row. The xdist workers share their base folders' parent; a lock lets the first
    one run it and the others wait for its report (a run that leaves no report is tried again)."""
    from filelock import FileLock   # torch's own dependency
    root = tmp_path_factory.getbasetemp()
    root = root.parent if os.environ.get("PYTEST_XDIST_WORKER") else root
    out, said = root / "hyperscale-standin-report", root / "hyperscale-standin-report.json"
    with FileLock(str(said) + ".lock"):
        if not said.is_file():
            code, _, _, text = _parity(out, "--dtypes", "f32,bf16")
            said.write_text(json.dumps({"code": code, "text": text}))
    run = json.loads(said.read_text())
    return (run["code"], pd.read_csv(out / "parity-cases.csv", keep_default_na=False),
            pd.read_csv(out / "parity-findings.csv", keep_default_na=False), run["text"])


def test_parity_on_the_stand_in_passes_every_row_and_names_the_findings(tmp_path_factory):
    code, cases, findings, text = standin_report(tmp_path_factory)
    assert code == 0, text[-3000:]
    assert set(cases["status"]) == {"pass"}, cases[cases["status"] != "pass"][["case", "detail"]].to_string()
    assert set(cases["op"]) == {"shaping", "shaping-grouped", "perturb-eggroll", "perturb-openes", "update-jit",
                                "update-eager", "update-jit-r1", "update-eager-r1", "loop-e2e",
                                "tree-sgd-jit", "tree-sgd-eager", "tree-adamw-jit", "tree-adamw-eager",
                                *noiser_ops.OPS}
    # contract and native noise for every noisy op, f32 and bf16
    noisy = cases[~cases["op"].str.startswith("shaping")]
    assert set(zip(noisy["dtype"], noisy["noise"])) == {(d, n) for d in ("f32", "bf16") for n in ("contract", "native")}
    assert (cases["mismatches"] == 0).all() and (cases["elements"] > 0).all()
    # every row names what its bits depend on: jax and jaxlib, the CPU's FMA, XLA_FLAGS
    assert all(all(s in detail for s in SETTINGS) for detail in cases["detail"]), cases["detail"].iloc[0]
    assert set(findings["finding"]) == {"frozen-noise", "grouped-shaping", "trace-print", "bf16-noise",
                                        "compilation-cache", "excluded-decay", "sparse-batch", "sparse-options",
                                        "eggrollbs-defaults", "eggrollbs-groups"} | (
        set() if hasattr(importlib.import_module("jax").lax, "pvary") else {"pvary-gone"})


def _mutant(tmp_path, name) -> Path:
    rel, text, replacement, _ = MUTANTS[name]
    clone = tmp_path / name
    shutil.copytree(STANDIN, clone, ignore=shutil.ignore_patterns("__pycache__"))
    src = (clone / rel).read_text(encoding="utf-8")
    assert src.count(text) == 1, (rel, text)
    (clone / rel).write_text(src.replace(text, replacement), encoding="utf-8")
    return clone


def test_each_mutant_of_the_stand_in_fails_parity_and_equivalent_edits_pass(tmp_path):
    """One child for every clone (Runner.session, as a mutant catalog runs): the jitted rank-2 update in f32
    and bf16 on contract and native noise catches each kind of fault; the equivalent edits pass."""
    from esverify.oracle import cases as _cases
    from esverify.oracle.options import Options
    from esverify.oracle.runner import Runner
    matrix = _cases.build_matrix([TARGET], ["cpu"], ("f32", "bf16"), ("iid", "correlated"), iterations=1,
                                 small=True, noises=("contract", "native"), loops=False)
    chosen = _cases.select(matrix, "update-jit/N8")
    assert len(chosen) == 4
    runner = Runner(Options(target=TARGET, devices=("cpu",), quiet=True, timeout=300, pythons={TARGET: _python()}))
    statuses = {}
    with runner.session(TARGET, STANDIN) as run:
        statuses["stand-in"] = [run(c)["status"] for c in chosen]
        for name in sorted(MUTANTS):
            clone = _mutant(tmp_path, name)
            statuses[name] = [run(c, clone=clone)["status"] for c in chosen]
    assert statuses.pop("stand-in") == ["pass"] * 4
    for name, got in statuses.items():
        # an f32 draw in an f32 update changes nothing: the noise-dtype mutant shows in the bf16 rows only
        hit = [MUTANTS[name][3] and (name != "noise-dtype" or c.dtype == "bf16") for c in chosen]
        assert [s != "pass" for s in got] == hit, (name, got)


def test_a_key_the_runner_cannot_attribute_is_the_reference_s_error_naming_it(tmp_path):
    """Contract noise: the fold_in mutant asks for keys no (epoch, pair, leaf) has; the serving callback refuses
    them, and the row is an error naming the key (the stand-in's row passes: the first test)."""
    clone = _mutant(tmp_path, "fold-in-order")
    done = subprocess.run([sys.executable, "-m", "esverify", "parity", "--ref", str(clone), "--target", TARGET,
                           "--python", f"{TARGET}={_python()}", "--devices", "cpu", "--out", str(tmp_path / "m"),
                           "--format", "csv", "--dtypes", "f32", "--noise", "contract", "--case", "update-eager/N8"],
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 1
    rows = pd.read_csv(tmp_path / "m" / "parity-cases.csv", keep_default_na=False)
    assert list(rows["status"]) == ["error"]
    # one line: the callback's refusal, not the traceback jax's runtime error wraps it in
    assert rows["detail"][0].startswith("update-eager: the reference side raised JaxRuntimeError: LookupError: "
                                        "served noise: key [") and "\n" not in rows["detail"][0], rows["detail"][0]
    assert rows["detail"][0].endswith("] is not one the runner can attribute"), rows["detail"][0]
    assert json.loads((tmp_path / "m" / "parity-metadata.json").read_text())["children"][TARGET]["jax"] == "0.10.2"
