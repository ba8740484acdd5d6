"""Chained Monte Carlo ES vectors (docs/goldens.md, *Chained Monte Carlo vectors*).

One es-chain vector per profile of the registry, in the area of the same
name; the chain logic equals a loop over the straight-line reference
(esverify.es.reference) on short chains; a backend that differs in one
element is located at its first iteration and element; the counting
kernels change no bit.
"""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
import torch

from esverify.es import reference as R
from esverify.es.profiles import PROFILES, get_profile
from esverify.goldens import areas as area_mod
from esverify.goldens import chain, gate
from esverify.goldens.es_area import config_from_inputs

GOLDENS = Path(__file__).resolve().parents[1] / "goldens"


def _chain_vector(profile: str) -> dict:
    doc = json.loads((GOLDENS / f"{profile}.json").read_text())
    (v,) = [v for v in doc["vectors"] if v["inputs"]["kind"] == chain.KIND]
    return v


@pytest.mark.parametrize("profile", sorted(PROFILES))
def test_every_profile_has_a_long_chain_in_its_area(profile):
    v = _chain_vector(profile)
    x = v["inputs"]
    assert x["config"]["profile"] == profile and x["iterations"] >= 200
    assert {p["dtype"] for p in x["params"]} == {"f32", "f16", "bf16"}
    assert len(v["expected"]["trace"]["values"]) == x["iterations"]
    assert chain.check_sizes(v) == [] and area_mod.get_area(profile).check_sizes(v) == []
    assert "update f16:" in v["comment"]


def test_the_es_at_scale_chain_meets_the_1_in_14000_kind_many_times():
    comment = _chain_vector("es-at-scale")["comment"]
    counts = {k: int(n) for k, n in (part.rsplit(": ", 1) for part in comment.split("products): ")[1].split("; "))}
    assert counts["update f16"] >= 20 and counts["update bf16"] >= 20, counts


@pytest.mark.parametrize("profile", ["es-at-scale", "es-awd"])
def test_the_chain_equals_a_loop_over_the_straight_line_reference(profile):
    """Trainer-driven chain == the same chain computed with esverify.es.reference (numpy, ml_dtypes,
    the scalar RNG), on 3 iterations of a small layout: the chaining (rewards from the perturbed
    parameters, restore, update) and the recorded fields are the reference's."""
    layout = [("w32", (3, 5), "f32"), ("w16", (40,), "f16"), ("wb", (33,), "bf16")]
    x = chain.inputs(profile, iterations=3, layout=layout)
    got, _ = chain.run(x, "numpy", "cpu")
    cfg = config_from_inputs(x["config"])
    params = chain.initial_params(x)
    rec = chain.Recorder(x)
    for it in range(x["iterations"]):
        rewards = []
        for m in range(cfg["population"]):
            perturbed = R.perturb(cfg, params, it, m)
            rewards.append(chain.reward(perturbed))
            params = R.perturb(cfg, perturbed, it, m, restore=True)
        params, _ = R.update(cfg, params, it, rewards)
        rec.record(it, params)
    assert got == rec.result()


def test_the_counting_kernels_change_no_bit():
    x = chain.inputs("es-at-scale", iterations=4)
    counts = {}
    plain, _ = chain.run(x, "numpy", "cpu")
    counted, _ = chain.run(x, "numpy", "cpu", profile=chain.counting_profile(get_profile("es-at-scale"), counts))
    assert counted == plain and counts[("update", "products")] == 4 * 4096


@pytest.mark.slow   # 1 s (--durations, 2026-12-03): out of the fast tier
def test_a_backend_differing_in_one_element_is_located_at_its_iteration_and_element(monkeypatch):
    """The numpy backend's f16 update writes element 7 one ulp up from iteration 3 on: the gate names
    iteration 3, slot w16, element 7, both values and ulp 1 (located against a second backend)."""
    real = chain._trainer

    def faulty_trainer(x, noise_backend, device, profile=None):
        tr, tensors = real(x, noise_backend, device, profile)
        if noise_backend == "numpy":
            base = tr.profile

            def apply(theta, acc, scale, rule, first, numel, out):
                base.apply(theta, acc, scale, rule, first, numel, out)
                if theta.dtype == torch.float16 and first == 0 and tr.iteration >= 3:
                    out[7:8] = torch.from_numpy(np.nextafter(out[7:8].numpy(), np.float16(np.inf)))
            tr.profile = dataclasses.replace(base, apply=apply)
        return tr, tensors
    monkeypatch.setattr(chain, "_trainer", faulty_trainer)
    v = _chain_vector("es-at-scale")
    result = gate.CheckResult()
    gate._recompute_area(area_mod.get_area("es-at-scale"), {"vectors": [v]}, ["numpy"], result)
    (row,) = result.rows
    assert (row["field"], row["element"], row["status"]) == ("it3.w16", 7, "mismatch"), row
    assert row["ulp"] >= 1 and "first iteration and element" in row["detail"] and "torch-cpu" in row["detail"]
