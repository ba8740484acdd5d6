"""The committed es-at-scale / es-awd goldens (goldens/*.json) against the trainer and the reference.

Walks every vector of both files: the Trainer recomputes it bit for bit on
the default CPU noise backend, and the vectors cover what the trainer's contract lists
(z-score over two iterations, both schemes and mappings, centered ranks
with ties, antithetic, raw rewards, AWD l1 and l2).
"""
from __future__ import annotations

import json

import pytest

from esverify.goldens.areas import get_area
from esverify.goldens.compare import compare_vector
from esverify.paths import goldens_dir

AREAS = ["es-at-scale", "es-awd"]


def _load(name):
    return json.loads((goldens_dir() / f"{name}.json").read_text())


@pytest.mark.parametrize("name", AREAS)
def test_goldens_recompute_bitwise(name):
    area = get_area(name)
    data = _load(name)
    assert data["contract"] == {"name": name, "version": area.version}
    backend = "numba" if "numba" in area.backends() else area.backends()[0]
    for vector in data["vectors"]:
        rows = compare_vector(name, backend, vector, area.recompute(vector, backend))
        assert rows == [], f"{vector['id']}: {rows[:3]}"


@pytest.mark.parametrize("name", AREAS)
def test_goldens_cover_the_issue(name):
    ids = {v["id"] for v in _load(name)["vectors"]}
    for scheme in ("iid", "correlated"):
        for mapping in ("poly32", "libm64"):
            assert f"zscore-two-iterations-{scheme}-{mapping}" in ids
    assert {"centered-ranks-ties", "antithetic-zscore", "raw-rewards", "anchor-decay-l1", "anchor-decay-l2"} <= ids
    vec = next(v for v in _load(name)["vectors"] if v["id"] == "zscore-two-iterations-iid-poly32")
    assert {p["dtype"] for p in vec["inputs"]["params"]} == {"f32", "f16", "bf16"}
    assert {f"it{i}.{op}.w" for i in (0, 1) for op in ("perturb", "restore", "update")} <= set(vec["expected"])


@pytest.mark.slow   # 2 s (--durations, 2026-12-03): out of the fast tier
def test_goldens_regenerate_identically():
    """The generator (straight-line reference) reproduces the committed expected values."""
    area = get_area("es-awd")
    fresh = {v["id"]: v for v in area.generate()}
    for vector in _load("es-awd")["vectors"]:
        assert fresh[vector["id"]] == vector, vector["id"]
