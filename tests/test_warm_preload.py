"""What a warm start server loads before it forks children (esverify/oracle/warm_server.py `_preload`): a
run's own server the noise kernels of the run's mapping and the loops' reward kernels, no kernel no child
calls (an uncached one is compiled there, at a cost in every run); a kept server every mapping's. The kernels'
entry points are replaced by recorders here: the test is which ones `_preload` calls."""
from __future__ import annotations

import sys
import types
from pathlib import Path

import pytest

pytest.importorskip("numba")

ORACLE = Path(__file__).resolve().parents[1] / "esverify" / "oracle"


@pytest.fixture
def preload(monkeypatch):
    """preload(kept, mappings) -> the kernels _preload called, in order."""
    from esverify import exactsum, rng
    from esverify.rng import numba_backend
    monkeypatch.syspath_prepend(str(ORACLE))   # the server imports its folder's supervise, as under its own path
    import warm_server
    calls = []
    monkeypatch.setattr(rng, "gaussian", lambda *a, mapping, **k: calls.append(f"gaussian {mapping}"))
    for name in ("poly32_pairs", "libm64_pairs"):
        monkeypatch.setattr(numba_backend, name, lambda *a, name=name: calls.append(name))
    for name in ("array_fsum", "squared_distance_fsum"):
        monkeypatch.setattr(exactsum, name, lambda *a, name=name: calls.append(name))
    # a kept server imports the compiler's config first (1 s of CPU): a stand-in module here
    monkeypatch.setitem(sys.modules, "torch._inductor.config",
                        sys.modules.get("torch._inductor.config") or types.ModuleType("torch._inductor.config"))

    def run(kept, mappings):
        calls.clear()
        warm_server._preload(kept, mappings)
        return list(calls)
    return run


def test_a_runs_server_loads_its_mappings_kernels_and_the_rewards_only(preload):
    assert preload(False, ("poly32",)) == ["gaussian poly32", "poly32_pairs", "squared_distance_fsum"]
    assert preload(False, ("libm64",)) == ["gaussian libm64", "libm64_pairs", "squared_distance_fsum"]


def test_a_kept_server_loads_every_mapping(preload):
    assert preload(True, ("poly32",)) == ["gaussian poly32", "poly32_pairs", "gaussian libm64", "libm64_pairs",
                                          "squared_distance_fsum"]
