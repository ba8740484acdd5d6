"""Contract noise for EGGROLL (esverify/references/eggroll/child/driver.py): the child's hook serves each generator the
reference seeds with `id = base_seed + P·L·s + L·k + l` the contract stream
lowrank_stream_seed(seed, s, P, L, k, l) = at(seed ^ "es_lowrk", (s·P + k)·L + l), read as a stream
(docs/references.md §3a): a = elements [0, r·in), b = [r·in, r·in + out·r), a reseed rewinds, a
generator reused without a reseed gets the continuation, an id outside the run is refused. Checked
against a slow splitmix64 written here, esverify.rng's gaussian streams, and a whole run through main
against the documented update fed the same streams."""
from __future__ import annotations

import math
import sys

import numpy as np
import pytest
import torch
from hypothesis import given, strategies as st

from esverify import rng as es_rng
from esverify.references.eggroll import tape_arrays
import child_files
from standins.mutants import STANDINS

driver = child_files.driver("eggroll")
import eggroll_stubs as stubs  # noqa: E402
from child_server import NoiseAttributionError  # noqa: E402

from test_eggroll_standin import (BASE_ARGS, DTYPES, documented_update, load_bits, run_case,  # noqa: E402
                                  same_bits)

CLONE = STANDINS / "eggroll-vllm"
M64 = (1 << 64) - 1


def slow_at(seed: int, index: int) -> int:
    """splitmix64's index-th output from `seed`, written out sequentially (Steele, Lea and Flood 2014)."""
    state = seed
    for _ in range(index + 1):
        state = (state + 0x9E3779B97F4A7C15) & M64
    z = state
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return z ^ (z >> 31)


def test_the_domain_is_ascii_es_lowrk():
    assert driver.LOWRANK_DOMAIN.to_bytes(8, "big") == b"es_lowrk"


@given(seed=st.integers(0, M64), s=st.integers(0, 6), P=st.integers(1, 9), L=st.integers(1, 30), data=st.data())
def test_stream_seed_is_the_formula(seed, s, P, L, data):
    k, l = data.draw(st.integers(0, P - 1)), data.draw(st.integers(0, L - 1))
    assert driver.lowrank_stream_seed(seed, s, P, L, k, l) == slow_at(seed ^ 0x65735F6C6F77726B, (s * P + k) * L + l)


@given(base=st.integers(0, 2**31), P=st.integers(1, 64), L=st.integers(1, 200), generations=st.integers(1, 8),
       data=st.data())
def test_decode_inverts_the_reference_id_and_refuses_ids_outside_the_run(base, P, L, generations, data):
    s, k, l = (data.draw(st.integers(0, generations - 1)), data.draw(st.integers(0, P - 1)),
               data.draw(st.integers(0, L - 1)))
    assert driver.decode_stream_id(base + P * L * s + L * k + l, base, P, L, generations) == (s, k, l)
    outside = data.draw(st.one_of(st.integers(0, base - 1) if base else st.nothing(),
                                  st.integers(base + P * L * generations, base + P * L * generations + 10**6)))
    with pytest.raises(NoiseAttributionError, match="no \\(generation, pair, weight\\) of this run"):
        driver.decode_stream_id(outside, base, P, L, generations)


def _resolver(base_seed=3, P=2, L=7, generations=2, seed=0xABCDEF):
    def resolve(handle):
        s, k, l = driver.decode_stream_id(handle, base_seed, P, L, generations)
        return driver.lowrank_stream_seed(seed, s, P, L, k, l), 0
    return resolve


def contract(stream_id, n, first, base_seed=3, P=2, L=7, seed=0xABCDEF):
    s, rest = divmod(stream_id - base_seed, P * L)
    k, l = divmod(rest, L)
    return torch.from_numpy(es_rng.gaussian(driver.lowrank_stream_seed(seed, s, P, L, k, l), n, first=first))


def test_the_hook_serves_a_then_b_from_one_stream_through_the_standin(tmp_path):
    row = driver.Row({"out": str(tmp_path)}, tmp_path)
    case = {"noise": "contract"}
    with driver.imported(CLONE, "es_lora_multinode.py", row) as module, driver._noise(case, _resolver()):
        # base_seed 3, P 2, L 7, generation 1, pair 1, weight 4 (gate: 6 x 4), r 2: id 3 + 14 + 7 + 4 = 28
        a, b = module.get_rng_noise(3, 2, 1, 7, 4, 1, [(2, 4), (6, 2)])
        with pytest.raises(NoiseAttributionError):
            module.get_rng_noise(3, 2, 1, 7, 4, 2, [(2, 4), (6, 2)])     # generation 2 is not in the run
        with pytest.raises(NoiseAttributionError):
            module.get_rng_noise(0, 2, 0, 7, 1, 0, [(2, 4), (6, 2)])     # id 1 < base_seed 3
    assert torch.normal is not driver.HOOK and torch.randn is not driver.HOOK   # put back
    assert same_bits(a, contract(28, 8, 0).reshape(2, 4))
    assert same_bits(b, contract(28, 12, 8).reshape(6, 2))


def test_a_reused_generator_gets_the_continuation_and_a_reseed_rewinds():
    with driver._noise({"noise": "contract"}, _resolver()):
        g = torch.Generator().manual_seed(10)
        first = torch.normal(mean=0.0, std=1.0, size=(3, 2), generator=g)
        second = torch.randn(5, generator=g)            # torch.randn on the same generator: the stream too
        third = torch.normal(0.0, 1.0, size=(4,), generator=g)
        g.manual_seed(10)
        again = torch.normal(0.0, 1.0, size=(6,), generator=g)
        fresh = torch.normal(0.0, 1.0, size=(6,), generator=torch.Generator().manual_seed(10))
        with pytest.raises(NoiseAttributionError):
            torch.normal(0.0, 1.0, size=(2,))          # no generator: never torch's own noise
    assert same_bits(first.reshape(-1), contract(10, 6, 0))
    assert same_bits(second, contract(10, 5, 6))
    assert same_bits(third, contract(10, 4, 11))
    assert same_bits(again, contract(10, 6, 0)) and same_bits(fresh, again)


def contract_noise(seed, base_seed, P, L):
    def noise(stream_id, r, i, o):
        s, rest = divmod(stream_id - base_seed, P * L)
        k, l = divmod(rest, L)
        stream = driver.lowrank_stream_seed(seed, s, P, L, k, l)
        a = torch.from_numpy(es_rng.gaussian(stream, r * i, first=0)).reshape(r, i)
        b = torch.from_numpy(es_rng.gaussian(stream, o * r, first=r * i)).reshape(o, r)
        return a, b
    return noise


@pytest.mark.parametrize("dtype,r,engines", [("f32", 2, 2), ("bf16", 1, 1)])
def test_a_whole_run_under_contract_noise_follows_the_documented_update(tmp_path, dtype, r, engines):
    args = {**BASE_ARGS, "population_size": 4, "num_iterations": 3, "lora_r": r, "steps_per_adapter": 2}
    seed = 0x1234_5678_9ABC_DEF0
    case, reply = run_case(tmp_path, dtype, engines, args, noise="contract", seed=hex(seed))
    tape = reply["tape"]
    P, L = 2, 7
    # adapters: N x L x 2 draws per generation written (2 generations); updates: P x L x 2 per step (3)
    assert tape["draws"] == {"draws": 4 * L * 2 * 2 + P * L * 2 * 3, "unexpected": [], "unexpected_count": 0}
    assert reply["attribution"] == {"ok": True, "calls": []}
    noise = contract_noise(seed, 3, P, L)
    weights = dict(zip(tape["names"], driver.Row(case, tmp_path).initial))
    for step in tape["steps"]:
        fitnesses = np.array([float.fromhex(v) for v in step["update"]["fitnesses"]])
        weights = documented_update(weights, fitnesses, args, step["es_step"], DTYPES[dtype], noise=noise)
        assert step["engines_identical"] is True
    for name, got in zip(tape["names"], load_bits(reply["results"])):
        assert same_bits(got, weights[name]), name
    # the adapters are the contract streams too: A = f16(sqrt(sigma) a) of pair 0, weight 0, generation 0
    lora_a = torch.from_numpy(tape_arrays.read(tape["steps"][0]["adapters"])["m0.l0.A"].astype(np.int16)).view(
        torch.float16)
    a, _ = noise(3, r, 4, 4)
    assert same_bits(lora_a, (math.sqrt(0.01) * a).half())


@pytest.mark.slow   # 1 s (--durations, 2026-12-03): out of the fast tier
def test_contract_noise_sees_a_restarted_stream_and_passes_a_reseeded_generator(tmp_path):
    """b drawn from a fresh generator reads its stream from 0 (the audit says where); one generator reseeded
    per call is the same noise (a reseed rewinds)."""
    from standins.eggroll_mutants import EQUIVALENTS, MUTANTS
    from standins.mutants import make_variant
    args = {**BASE_ARGS, "population_size": 4, "num_iterations": 1, "lora_r": 1}
    _, clean = run_case(tmp_path / "clean", "f32", 1, args, noise="contract")
    fresh = make_variant(tmp_path / "m", "eggroll-vllm", MUTANTS["b-from-a-fresh-generator"].edits)
    _, mutant = run_case(tmp_path / "mutant", "f32", 1, args, clone=fresh, noise="contract")
    draws = mutant["tape"]["draws"]
    # every b draw (out x 1 elements at position 0 instead of 1 x in): 4 members + 2 pairs, 7 weights each
    assert draws["unexpected_count"] == (4 + 2) * 7 and draws["unexpected"][0]["position"] == 0
    assert mutant["attribution"]["ok"] is False
    assert not _same(mutant["results"], clean["results"])
    reseeded = make_variant(tmp_path / "e", "eggroll-vllm", EQUIVALENTS["one-generator-reseeded"].edits)
    _, equivalent = run_case(tmp_path / "equivalent", "f32", 1, args, clone=reseeded, noise="contract")
    assert equivalent["tape"]["draws"]["unexpected_count"] == 0
    assert _same(equivalent["results"], clean["results"])


def _same(a, b) -> bool:
    return all(same_bits(x, y) for x, y in zip(load_bits(a), load_bits(b)))
