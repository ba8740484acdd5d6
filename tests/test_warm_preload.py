"""What a warm start server loads before it forks children (esverify/oracle/warm_server.py `_preload`): a
run's own server the noise kernels of the run's mapping and the loops' reward kernels, no kernel no child
calls (an uncached one is compiled there, at a cost in every run); a kept server every mapping's."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("numba")

ORACLE = Path(__file__).resolve().parents[1] / "esverify" / "oracle"

# in a fresh interpreter (numba's compiled signatures are per process): the server module as the server
# imports it (its folder first on sys.path), then which kernels have a compiled signature after _preload
PROBE = """
import json, sys
sys.path.insert(0, sys.argv[1])
import warm_server
warm_server._preload(sys.argv[2] == "kept", tuple(sys.argv[3].split(",")))
from esverify import exactsum
from esverify.rng import numba_backend as nb
kernels = {"poly32_pairs": nb.poly32_pairs, "poly32_range": nb.poly32_range, "libm64_pairs": nb.libm64_pairs,
           "libm64_range": nb.libm64_range, "squared_bins": exactsum._squared_bins_numba,
           "pieces": exactsum._pieces_numba, "array_bins": exactsum._bins_numba}
print(json.dumps(sorted(name for name, k in kernels.items() if k.signatures)))
"""


def _loaded(kind: str, mappings: str) -> list:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ORACLE.parents[1]), os.environ.get("PYTHONPATH", "")])}
    out = subprocess.run([sys.executable, "-c", PROBE, str(ORACLE), kind, mappings], capture_output=True, text=True,
                         env=env, timeout=300)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.splitlines()[-1])


def test_a_runs_server_loads_its_mappings_kernels_and_the_rewards_only():
    assert _loaded("run", "poly32") == ["pieces", "poly32_pairs", "poly32_range", "squared_bins"]
    assert _loaded("run", "libm64") == ["libm64_pairs", "libm64_range", "pieces", "squared_bins"]


def test_a_kept_server_loads_every_mapping():
    assert _loaded("kept", "poly32") == ["libm64_pairs", "libm64_range", "pieces", "poly32_pairs", "poly32_range",
                                         "squared_bins"]
