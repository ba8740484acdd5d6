"""RNG-side faults are invisible to parity by design; the goldens gate catches them.

Parity feeds BOTH sides the contract's noise, so a fault in the RNG itself
(here: the sine and cosine halves of each Box-Muller pair swapped in the
numba poly32 kernel) changes both sides alike and every row still passes.
This test is the parity half of that claim: the fault is injected in the
parent (monkeypatch) and in the child (a sitecustomize on the child's
PYTHONPATH). The gate half is tests/test_goldens_gate.py::
test_swapped_sine_cosine_in_a_backend_is_caught; here `esverify goldens
check --area rng --backend numba` is also run with the same fault to show it fails.
"""
from __future__ import annotations

import numpy as np
import pytest
from click.testing import CliRunner

from esverify.cli import main
from esverify.oracle import Options, run_parity
from esverify.rng import gaussian, scalar
from esverify.rng.mappings import MAPPINGS
from standins.mutants import STANDINS

FAULT = '''"""A deliberately faulty poly32 kernel for a test: each pair's halves swapped."""
import numpy as np
from esverify.rng import numba_backend


def swapped(out, seed, first):
    n = out.shape[0]
    start = first - first % 2
    stop = first + n + (first + n) % 2
    buf = np.empty(stop - start, dtype=np.float32)
    numba_backend.poly32(buf, seed, start)
    buf = np.ascontiguousarray(buf.reshape(-1, 2)[:, ::-1]).reshape(-1)
    out[:] = buf[first - start:first - start + n]
'''
SITE = '''from esverify.rng.mappings import MAPPINGS
MAPPINGS["poly32"].kernels["numba"] = "esverify_test_fault_rng:swapped"
'''


def _fault_dir(tmp_path):
    folder = tmp_path / "fault"
    folder.mkdir()
    (folder / "esverify_test_fault_rng.py").write_text(FAULT)
    (folder / "sitecustomize.py").write_text(SITE)
    return folder


def _run(tmp_path, name, child_env, case):
    return run_parity(Options(ref=(str(STANDINS / "es-at-scale"), str(STANDINS / "es-awd")),
                              devices=("cpu",), dtypes=("f32", "bf16"), schemes=("iid",), iterations=1, small=True,
                              case=case, child_env=child_env, out=str(tmp_path / name), quiet=True))


@pytest.mark.slow   # 23 s (--durations, 2026-12-03): out of the fast tier
def test_shared_faulty_rng_passes_parity_but_fails_the_goldens_gate(tmp_path, monkeypatch):
    folder = _fault_dir(tmp_path)
    monkeypatch.syspath_prepend(str(folder))
    monkeypatch.setitem(MAPPINGS["poly32"].kernels, "numba", "esverify_test_fault_rng:swapped")
    faulty = gaussian(12345, 4, backend="numba")
    right = np.array(scalar.gaussian(12345, 4), dtype=np.float32)
    assert np.array_equal(faulty, right[[1, 0, 3, 2]]) and not np.array_equal(faulty, right)

    # the fault in the parent only: parity sees different noise and fails
    alone = _run(tmp_path, "alone", {}, "*/f32/iid/perturb*")
    assert set(alone.frame["status"]) == {"fail"} and alone.exit_code == 1

    # the same fault in both parent and child: parity cannot see it
    both = _run(tmp_path, "both", {"PYTHONPATH": str(folder)}, None)
    statuses = set(both.frame["status"])
    assert statuses == {"pass", "artifact"}, both.frame[both.frame["status"] != "pass"]
    assert both.exit_code == 0

    # ... while the goldens gate fails on the faulty backend
    gate = CliRunner().invoke(main, ["goldens", "check", "--area", "rng", "--backend", "numba"])
    assert gate.exit_code == 1, gate.output
