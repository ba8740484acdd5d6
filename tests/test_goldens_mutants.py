"""A mutation score for the gate itself.

Each kind of fault a porter makes is planted, one at a time, into a second
implementation behind the protocol: the C example built with a
compile-time fault flag (examples/impl_c/, `-DFAULT_...`), or a Python
wrapper written for the test (tests/mutant_wrappers.py,
tests/impl_wrappers.py). Every one must fail `goldens check --impl` (exit 1)
with its first differing value named (vector, field, element, expected,
got, ulp) or, for a shape or a protocol fault, the reason; the clean C
build and the clean wrappers pass.

The kinds: the f32 cosine half one ulp up in one value of 1000 and of 1500
(C and Python), the es-at-scale update step rounded once from f64 to the
dtype instead of through f32 (about one f16 step in 14,000), the z-score's
scalars sent as [1], bf16 rounding by truncation, a libm64 that rounds a
quarter of its values toward zero, a wrapper that dies, and one that writes
to stdout.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from esverify.goldens import gate
from esverify.goldens.impl_target import ImplTarget

ROOT = Path(__file__).resolve().parents[1]
SOURCES = sorted(str(p) for p in (ROOT / "examples" / "impl_c").glob("*.c"))
CC = shutil.which("cc")
ENV = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
needs_cc = pytest.mark.skipif(CC is None, reason="no C compiler: `cc` is not on PATH")


def build(tmp_path_factory, *flags) -> str:
    out = tmp_path_factory.mktemp("mutant") / "esimpl"
    cmd = [CC, "-std=c11", "-O2", *flags, *SOURCES, "-lm", "-o", str(out)]
    done = subprocess.run(cmd, capture_output=True, text=True)
    assert done.returncode == 0, f"{' '.join(cmd)} failed:\n{done.stderr}"
    return str(out)


def run(command: str, areas: list[str], tmp_path) -> gate.CheckResult:
    target = ImplTarget(command, log_path=tmp_path / "impl.log", deadline_s=60, env=ENV)
    try:
        return gate.check(ROOT / "goldens", areas, impl=target)
    finally:
        target.close()


def python_wrapper(script: str, mode: str) -> str:
    return f"{sys.executable} {ROOT / 'tests' / script} {mode}"


def first_values(result) -> list[dict]:
    """Failing rows that name a value: element, expected, got and ulp distance."""
    return [r for r in result.rows if r["status"] in ("mismatch", "libm-divergence") and r["element"] is not None
            and r["expected"] and r["got"] and r["ulp"] is not None]


#: (name, C flags, areas, a vector id that must fail)
C_MUTANTS = [
    ("cosine-1-in-1000", ["-DFAULT_COS_EVERY=500"], ["rng"], "gaussian-digest-poly32-2p20"),
    ("cosine-1-in-1500", ["-DFAULT_COS_EVERY=750"], ["rng"], "gaussian-digest-poly32-2p20"),
    ("update-step-rounded-once-from-f64", ["-DFAULT_UPDATE_F64"], ["es-at-scale"], "chain-es-at-scale-200-iterations"),
    ("bf16-truncation", ["-DPLANTED_FAULT"], ["es-at-scale"], "chain-es-at-scale-200-iterations"),
]


@needs_cc
@pytest.mark.parametrize("name,flags,areas,vid", C_MUTANTS, ids=[m[0] for m in C_MUTANTS])
@pytest.mark.slow   # 3 s (--durations, 2026-12-03): out of the fast tier
def test_every_planted_c_fault_fails_the_gate_with_its_first_value_named(name, flags, areas, vid, tmp_path,
                                                                         tmp_path_factory):
    result = run(build(tmp_path_factory, *flags), areas, tmp_path)
    assert result.exit_code(strict=False) == 1, result.verdict(False)
    named = [r for r in first_values(result) if r["vector"] == vid]
    assert named, [(r["vector"], r["field"], r["detail"]) for r in result.rows][:10]
    row = named[0]
    if vid.startswith("chain-"):   # located: the first iteration and element that differ
        assert row["field"].startswith("it") and "first iteration and element" in row["detail"], row
    else:                          # located: the first differing index of the stream
        assert row["field"] == "values" and row["ulp"] == 1 and "sub-range request" in row["detail"], row


@needs_cc
@pytest.mark.slow   # 2 s (--durations, 2026-12-03): out of the fast tier
def test_the_update_fault_is_caught_only_by_the_chain(tmp_path, tmp_path_factory):
    """The 1-in-14,000 kind: no short es-run vector meets it; the chain's f16/bf16 slots do, and the
    located element is one of those slots."""
    result = run(build(tmp_path_factory, "-DFAULT_UPDATE_F64"), ["es-at-scale"], tmp_path)
    failing = {r["vector"] for r in result.rows if r["status"] in ("mismatch", "error")}
    assert failing == {"chain-es-at-scale-200-iterations"}, failing
    (row,) = [r for r in result.rows if r["vector"] == "chain-es-at-scale-200-iterations"]
    assert row["field"].split(".")[1] in ("w16", "wb") and row["ulp"] == 1, row


@needs_cc
@pytest.mark.slow   # 2 s (--durations, 2026-12-03): out of the fast tier
def test_scalars_sent_as_shape_1_fail_every_zscore_shaping_vector(tmp_path, tmp_path_factory):
    result = run(build(tmp_path_factory, "-DFAULT_SCALAR_AS_1"), ["es-at-scale"], tmp_path)
    assert result.exit_code(strict=False) == 1
    rows = [r for r in result.rows if r["vector"].startswith("shaping-")]
    doc = json.loads((ROOT / "goldens" / "es-at-scale.json").read_text())
    assert {r["vector"] for r in rows} == {v["id"] for v in doc["vectors"] if v["inputs"]["kind"] == "shaping"}
    assert all(r["status"] == "mismatch" and "shape [1], the vector's shape is []" in r["detail"] for r in rows)


@needs_cc
@pytest.mark.slow   # 3 s (--durations, 2026-12-03): out of the fast tier
def test_the_clean_c_build_passes_every_area(tmp_path, tmp_path_factory):
    result = run(build(tmp_path_factory), None, tmp_path)
    assert result.exit_code(strict=True) == 0, result.verdict(True)
    assert not [r for r in result.rows if r["status"] != "unsupported"]


PY_MUTANTS = [
    ("cos1000", "mutant_wrappers.py", "mismatch"),
    ("cos1500", "mutant_wrappers.py", "mismatch"),
    ("libmdown", "mutant_wrappers.py", "systematic-divergence"),
    ("dies", "impl_wrappers.py", "error"),
    ("stray", "impl_wrappers.py", "error"),
]


@pytest.mark.parametrize("mode,script,status", PY_MUTANTS, ids=[m[0] for m in PY_MUTANTS])
@pytest.mark.slow   # 1 s (--durations, 2026-12-03): out of the fast tier
def test_every_planted_python_fault_fails_the_gate(mode, script, status, tmp_path):
    result = run(python_wrapper(script, mode), ["rng"], tmp_path)
    assert result.exit_code(strict=False) == 1, result.verdict(False)
    assert any(r["status"] == status for r in result.rows)
    if status != "error":    # a value fault: its first value is named, in a digest vector at least
        assert any(r["vector"].endswith("-2p20") for r in first_values(result))


def test_the_clean_python_wrapper_passes(tmp_path):
    result = run(python_wrapper("mutant_wrappers.py", "ok"), ["rng"], tmp_path)
    assert result.exit_code(strict=True) == 0, result.verdict(True)
