"""Runner.session computes our side of a case once and hands every later row of that case a copy
(esverify.oracle.ours_cache): the rows are the rows each variant would get computing its own, and nothing
our side reads is left out of the key."""
from __future__ import annotations

import dataclasses
import math
import struct

import pytest
import torch

from esverify.oracle import Options, Runner
from esverify.oracle import ours_cache
from esverify.oracle.options import validate
from esverify.oracle.setup import select_cases
from standins.mutants import STANDINS, make_mutant

TARGET = "es-at-scale"
#: one row of each path: zscore, perturb, restore, update (single-op), the in-process loop and fit (loop rows)
CASES = ("zscore/N7", "f32/iid/perturb/N7", "f32/iid/restore/N7", "f32/iid/update/N7", "f32/iid/loop/N7",
         "f32/iid/fit/N7")


def _cases():
    opts = validate(Options(target=TARGET, devices=("cpu",), dtypes=("f32",), schemes=("iid",), iterations=1,
                            small=True, quiet=True))
    picked = [c for c in select_cases(opts, [TARGET], opts.alpha) if c.case_id.split("/", 2)[2] in CASES
              or c.case_id.endswith("/" + CASES[0])]
    assert sorted(c.op for c in picked) == ["fit", "loop", "perturb", "restore", "update", "zscore"]
    return picked


def _runner():
    return Runner(Options(target=TARGET, devices=("cpu",), quiet=True, timeout=120))


@pytest.mark.slow
def test_cached_and_uncached_rows_are_identical(tmp_path):
    """A mutant's rows handed our side from an earlier variant's rows (cached) are the rows it gets computing
    its own (uncached), column for column: failing rows' first mismatches, the reuse what-if's artifact rows
    and the loop rows' first differences included."""
    cases = _cases()
    mutants = {name: make_mutant(tmp_path, name, git=True)
               for name in ("sigma-constant", "reuse-equal-size-every-draw")}
    with _runner().session(TARGET, STANDINS / TARGET) as run:
        cache = run.session.ours_cache
        base = [run(c) for c in cases]            # computes our side of every case, once
        assert [r["status"] for r in base] == ["pass"] * len(cases) and len(cache) == len(cases)
        cached = {name: [run(c, clone=clone) for c in cases] for name, clone in mutants.items()}
        assert cache.hits == 2 * len(cases) and len(cache) == len(cases)   # no row computed ours again
        run.session.ours_cache = None
        uncached = {name: [run(c, clone=clone) for c in cases] for name, clone in mutants.items()}
    for name in mutants:
        assert cached[name] == uncached[name], name
    statuses = {r["status"] for rows in cached.values() for r in rows}
    assert {"fail", "artifact"} <= statuses, statuses   # the rows compared are not all passes


@pytest.mark.slow
def test_seed_and_mapping_are_keys_of_the_cache():
    """Rows of the same case under another --seed or --mapping get their own entries (a key without them
    would hand the child the first run's handle table: every row a pass, for the wrong seeds), and each
    row is the one a session without the cache gives under those options."""
    cases = [c for c in _cases() if c.op in ("perturb", "fit")]
    runner = _runner()
    settings = [(42, "poly32"), (7, "poly32"), (7, "libm64")]
    rows = {}
    with runner.session(TARGET, STANDINS / TARGET) as run:
        cache = run.session.ours_cache
        for seed, mapping in settings:
            runner.opts = dataclasses.replace(runner.opts, seed=seed, mapping=mapping)
            rows[seed, mapping] = [run(c) for c in cases]
        # the f32 fit row hands its loop the global seed 0 whatever --seed (loop_global_seed): its rows under
        # seeds 42 and 7 share one entry; every other change is an entry of its own
        assert len(cache) == len(settings) * len(cases) - 1 and cache.hits == 1
        run.session.ours_cache = None
        for seed, mapping in settings:
            runner.opts = dataclasses.replace(runner.opts, seed=seed, mapping=mapping)
            assert [run(c) for c in cases] == rows[seed, mapping], (seed, mapping)


def _other(value):
    """A value of the same type that differs from `value`."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, (int, float)):
        return value + 1
    if isinstance(value, str):
        return value + "x"
    if isinstance(value, dict):
        return {**value, "iterations": 9}
    if isinstance(value, tuple):
        return value + (1,)
    return ((("w", (2, 2)),))   # shapes: None -> a custom set


def test_every_case_field_and_read_is_in_the_key():
    """Changing any one field of the Case, or any one value our side reads, gives another key."""
    case = next(c for c in _cases() if c.op == "perturb")
    reads = dict(seed=42, mapping="poly32", backend="numba", dtype="f32", variant="base", anchored=False,
                 profile="es-at-scale")
    first = ours_cache.key("single", case, **reads)
    keys = {first, ours_cache.key("loop", case, **reads)}
    for f in dataclasses.fields(case):
        keys.add(ours_cache.key("single", dataclasses.replace(case, **{f.name: _other(getattr(case, f.name))}),
                                **reads))
    for name, value in reads.items():
        keys.add(ours_cache.key("single", case, **{**reads, name: _other(value)}))
    assert None not in keys and len(keys) == 2 + len(dataclasses.fields(case)) + len(reads)
    assert ours_cache.key("single", dataclasses.replace(case), **reads) == first   # equal cases share it


def test_floats_are_keyed_by_their_bits_and_unknown_values_are_not_kept():
    case = _cases()[0]
    nan = struct.unpack("<d", struct.pack("<Q", 0x7FF8000000000001))[0]
    sigmas = (0.0, -0.0, math.nan, -math.nan, nan, 1.0, 1)
    assert len({ours_cache.key("single", dataclasses.replace(case, sigma=s)) for s in sigmas}) == len(sigmas)
    assert ours_cache.key("single", case, extra=object()) is None


def test_a_hit_is_a_copy_that_changes_nothing_kept():
    cache = ours_cache.OursCache()
    result = {"tensors": [torch.ones(3)], "command": {"handles": {1: "0x1"}}}
    cache.put("k", result)
    result["tensors"][0].add_(1)                         # the row that computed it goes on with its own
    first = cache.get("k")
    first["tensors"][0].mul_(5)
    first["command"]["handles"]["1"] = "0x1"
    again = cache.get("k")
    assert torch.equal(again["tensors"][0], torch.ones(3)) and again["command"] == {"handles": {1: "0x1"}}
    assert cache.get("other") is None and cache.get(None) is None and (cache.hits, cache.misses) == (2, 2)
    small = ours_cache.OursCache(budget_bytes=8)        # over the budget: computed every time, not kept
    small.put("k", result)
    assert small.get("k") is None and len(small) == 0


def test_a_references_own_rows_share_our_side_through_ours_once():
    """Session.ours_once (the paper's and the skill sample's rows): computed once per case, adapter, seed,
    mapping and reads; computed every time outside Runner.session or under --impl."""
    from types import SimpleNamespace

    from esverify.oracle.session import Session
    case = _cases()[0]
    session = Session.__new__(Session)
    session.runner = SimpleNamespace(opts=validate(Options(quiet=True)), impl_side=None)
    session.adapter = SimpleNamespace(name=TARGET)
    calls = []

    def compute():
        calls.append(1)
        return {"params": torch.arange(3.0), "rewards": [0.5]}
    session.ours_cache = None
    session.ours_once(case, compute, backend="numba")
    session.ours_cache = ours_cache.OursCache()
    first = session.ours_once(case, compute, backend="numba")
    first["params"].add_(1)
    again = session.ours_once(case, compute, backend="numba")
    assert len(calls) == 2 and torch.equal(again["params"], torch.arange(3.0)) and again["rewards"] == [0.5]
    session.ours_once(case, compute, backend="numpy")                       # another read
    session.ours_once(dataclasses.replace(case, sigma=case.sigma * 2), compute, backend="numba")
    session.runner.opts = dataclasses.replace(session.runner.opts, seed=7)
    session.ours_once(case, compute, backend="numba")
    session.adapter = SimpleNamespace(name="es-awd")
    session.ours_once(case, compute, backend="numba")
    session.runner.impl_side = object()                                     # --impl: never kept
    session.ours_once(case, compute, backend="numba")
    assert len(calls) == 7 and len(session.ours_cache) == 5
