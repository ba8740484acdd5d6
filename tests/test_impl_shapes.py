"""Exact shapes through the protocol (docs/PROTOCOL.md §2).

A table over every operation: the clean-room handlers answer each golden
vector kind bit-equal; the same reply with one tensor reshaped (a scalar as
[1], a vector as a column, a parameter row with an extra axis) is a
`mismatch` naming both shapes, never accepted because the values agree.
The wrapper is the in-process handler table behind a fake process, so the
table costs no subprocess.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from esverify.goldens import compare
from esverify.impl import server
from esverify.goldens.impl_target import ImplTarget, ShapeMismatch
from esverify.impl.wire import Tensor

GOLDENS = Path(__file__).resolve().parents[1] / "goldens"


def _vector(area: str, vid: str) -> dict:
    doc = json.loads((GOLDENS / f"{area}.json").read_text())
    return next(v for v in doc["vectors"] if v["id"] == vid)


def _reshaped(t: Tensor, how: str) -> Tensor:
    if how == "scalar-as-[1]":
        assert t.shape == (), t.shape
        return Tensor(t.dtype, t.bits.reshape(1))
    if how == "row-as-column":
        return Tensor(t.dtype, t.bits.reshape(-1, 1))
    return Tensor(t.dtype, t.bits.reshape(t.shape + (1,)))    # an extra trailing axis


class FakeProcess:
    """The clean-room handlers in process; `fault` = (op, field, how) reshapes one reply tensor."""

    def __init__(self, fault=None):
        self.handlers = server.trainer_handlers("numpy")
        self.fault = fault
        self.restarts = 0
        self.log_path = "-"

    def call(self, op, args):
        result = self.handlers[op](args)
        if self.fault and self.fault[0] == op and self.fault[1] in result:
            _, field, how = self.fault
            if field == "params":
                result["params"] = [_reshaped(t, how) for t in result["params"]]
            else:
                result[field] = _reshaped(result[field], how)
        return result

    def close(self):
        pass


def _target(fault=None) -> ImplTarget:
    target = ImplTarget(["unused"])
    target.process.close()           # never started: removes its empty temporary log
    target.process = FakeProcess(fault)
    target.caps = server.trainer_capabilities()
    return target


#: op, reply field, how it is reshaped, a golden vector whose recomputation sends that op
CASES = [
    ("at", "outputs", "row-as-column", "rng", "splitmix64-counter-seed-0"),
    ("member_seed", "member_seeds", "row-as-column", "rng", "member-seed-seed-0-iter-0"),
    ("stream_seed", "stream_seeds", "row-as-column", "rng", "stream-seed-iid-member-0"),
    ("gaussian", "values", "row-as-column", "rng", "gaussian-poly32-seed-0-first-0-n-64"),
    ("shaping", "mean", "scalar-as-[1]", "es-at-scale", "shaping-n5-wide"),
    ("shaping", "std", "scalar-as-[1]", "es-at-scale", "shaping-n5-wide"),
    ("shaping", "coefficients", "row-as-column", "es-at-scale", "shaping-n5-wide"),
    ("perturb", "params", "extra-axis", "es-at-scale", "zscore-two-iterations-iid-poly32"),
    ("restore", "params", "extra-axis", "es-at-scale", "zscore-two-iterations-iid-poly32"),
    ("update", "params", "extra-axis", "es-at-scale", "zscore-two-iterations-iid-poly32"),
    ("update", "coefficients", "row-as-column", "es-at-scale", "zscore-two-iterations-iid-poly32"),
    ("decay", "params", "extra-axis", "es-at-scale", "decay-l1-lambda-0.5-f32"),
    ("step", "params", "extra-axis", "es-at-scale", "step-zscore"),
    ("step", "coefficients", "row-as-column", "es-at-scale", "step-zscore"),
]


@pytest.mark.parametrize("op,field,how,area,vid", CASES, ids=[f"{c[0]}-{c[1]}-{c[2]}" for c in CASES])
def test_a_reply_of_another_shape_is_a_mismatch_naming_both_shapes(op, field, how, area, vid):
    vector = _vector(area, vid)
    clean = _target().recompute(vector)
    assert compare.compare_vector(area, "impl", vector, clean) == []     # the clean replies: bit-equal
    with pytest.raises(ShapeMismatch) as info:
        _target((op, field, how)).recompute(vector)
    assert info.value.status == "mismatch" and info.value.status in compare.FAILING
    detail = info.value.detail
    assert op in detail and "the reply's tensor has shape" in detail and "the vector's shape is" in detail
    if how == "scalar-as-[1]":
        assert "shape [1], the vector's shape is []" in detail
    elif how == "row-as-column" and op in ("at", "gaussian"):
        n = len(next(iter(vector["expected"].values()))["values"])
        assert f"shape [{n}, 1], the vector's shape is [{n}]" in detail


def test_the_es_run_vectors_hold_a_0_dim_parameter_and_it_must_come_back_0_dim():
    """A 0-dim parameter sent back as [1] is caught (the row-of-one kind the issue names)."""
    vector = next(v for v in json.loads((GOLDENS / "es-at-scale.json").read_text())["vectors"]
                  if v["inputs"]["kind"] == "es-run" and any(p["shape"] == [] for p in v["inputs"]["params"]))

    class ZeroDimAsOne(FakeProcess):
        def call(self, op, args):
            result = super().call(op, args)
            if op == "update":
                result["params"] = [Tensor(t.dtype, t.bits.reshape(1)) if t.shape == () else t
                                    for t in result["params"]]
            return result

    target = _target()
    target.process = ZeroDimAsOne()
    with pytest.raises(ShapeMismatch, match=r"shape \[1\], the vector's shape is \[\]"):
        target.recompute(vector)


def test_the_clean_room_server_sends_the_zscore_scalars_as_0_dim():
    rewards = Tensor.of(np.array([1.0, 2.0, 4.0]))
    out = server.trainer_handlers("numpy")["shaping"]({"shaping": "zscore", "rewards": rewards})
    assert out["mean"].shape == () and out["std"].shape == ()
    assert out["mean"].values().item() == np.mean([1.0, 2.0, 4.0])
