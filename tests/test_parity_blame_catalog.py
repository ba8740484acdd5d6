"""Blame on a clean clone: a failure where the clone changed nothing names the function
that computes the first differing quantity.

The other half of the blame catalog's check, that every detected mutant's failing rows name the
patched file and function, is asserted where each catalog runs its mutants, on every failing row they
give (each mutant is a git checkout with its edit uncommitted): tests/test_parity_mutants.py (the
single-operation catalog; a row the repeat check fails included), test_parity_loops.py (the loop
catalog) and test_parity_new_refs.py (the paper's and the skill sample's). This file ran those catalogs'
rows a second time for it (92 s of the suite)."""
from __future__ import annotations

import pytest

from esverify.oracle import Options, Runner, cases
from standins.mutants import make_variant


@pytest.mark.slow
def test_a_clean_clone_failure_names_the_function_that_computes_it(tmp_path, monkeypatch):
    """A deliberately wrong profile: our side under es-awd's numerics for es-at-scale's update."""
    from esverify.oracle import adapters
    root = make_variant(tmp_path, "es-at-scale", [], git=True)
    monkeypatch.setattr(adapters.get("es-at-scale"), "profile", "es-awd")   # the one adapter every lookup returns
    matrix = cases.build_matrix(["es-at-scale"], ["cpu"], ("bf16",), ("correlated",), iterations=1, small=True,
                                noises=("contract",), loops=False)
    runner = Runner(Options(target="es-at-scale", devices=("cpu",), quiet=True, timeout=120))
    with runner.session("es-at-scale", root) as run:
        rows = [run(c) for c in cases.select(matrix, "*/update/N*")[:2]]
    failing = [r for r in rows if r["status"] == "fail"]
    assert failing, [(r["case"], r["status"]) for r in rows]
    for r in failing:
        assert r["blame"].startswith("the clone is clean at ") and r["blame"].endswith(
            "the first differing quantity is computed by WorkerExtension.update_weights_from_seeds "
            "(es_at_scale/utils/worker_extension.py)"), r["blame"]
