"""The hyperscale-es spec without JAX: its cases, its contract noise, what its rows say they ran under
(docs/hyperscale.md §10). The rows themselves run in tests/test_hyperscale_parity.py (a jax child)."""
from __future__ import annotations

import numpy as np

from esverify.oracle import adapters
from esverify.references.hyperscale_es import jaxrandom as R
from esverify.references.hyperscale_es import noiser_ops
from esverify.references.hyperscale_es.adapter import TREES
from esverify.references.hyperscale_es.contract import contract_draw
from esverify.references.hyperscale_es.rows import host_fma, settings
from esverify.rng import gaussian, member_seed, stream_seed


def test_the_default_matrix_has_38_cpu_rows_in_one_scheme_cell():
    adapter = adapters.get("hyperscale-es")
    matrix = adapters.MatrixSpec(devices=("cpu", "cuda"), dtypes=("f32", "f16", "bf16"), schemes=("iid", "correlated"))
    cases = adapter.cases(matrix)
    loops = [c.case_id for c in cases if c.op == "loop-e2e"]   # a loop op: once, f32, native noise (§13)
    assert loops == ["hyperscale-es/cpu/f32/correlated/loop-e2e/N64/native"]
    cases = [c for c in cases if c.op != "loop-e2e"]
    trees = [c for c in cases if c.op in TREES]   # f32 only, N 4, contract and native (docs/hyperscale.md §10)
    assert sorted((c.op, c.dtype, c.noise, c.population) for c in trees) == sorted(
        (op, "f32", noise, 4) for op in TREES for noise in ("contract", "native"))
    cases = [c for c in cases if c.op not in TREES]
    # the other noisers (docs/hyperscale.md §14): forward rows in every dtype and noise, updates f32, sparse-batch
    # f32 native
    mine = sorted((c.op, c.dtype, c.noise, c.population) for c in cases if c.op in noiser_ops.OPS)
    assert mine == sorted([(op, d, nz, n) for op, n in noiser_ops.NOISE_OPS.items() for d in ("f32", "f16", "bf16")
                           for nz in ("contract", "native")]
                          + [(op, "f32", nz, n) for op, (_, _, n) in noiser_ops.UPDATE_OPS.items()
                             for nz in ("contract", "native")] + [("sparse-batch", "f32", "native", 2)])
    cases = [c for c in cases if c.op not in noiser_ops.OPS]
    assert len(cases) == 38 and {c.device for c in cases} == {"cpu"} and {c.scheme for c in cases} == {"correlated"}
    assert sorted(c.case_id for c in cases if c.op.startswith("shaping")) == [
        "hyperscale-es/cpu/f32/correlated/shaping-grouped/N32", "hyperscale-es/cpu/f32/correlated/shaping/N32"]
    noisy = [c for c in cases if not c.op.startswith("shaping")]
    assert {(c.dtype, c.noise) for c in noisy} == {(d, n) for d in ("f32", "f16", "bf16") for n in ("contract", "native")}
    assert {c.op: c.population for c in noisy} == {"perturb-eggroll": 4, "perturb-openes": 4, "update-jit": 8,
                                                   "update-eager": 8, "update-jit-r1": 16, "update-eager-r1": 16}
    assert adapter.child_needs == ("jax", "jaxlib", "optax", "numpy") and adapter.rule_for("cpu") == ""


def test_contract_draw_is_the_contract_stream_of_pair_and_leaf():
    """The pair is the member of epoch e', the leaf its slot; the draw is the stream's first rows*cols values
    row-major, rounded to the dtype."""
    stream = stream_seed(member_seed(42, 5, 4, 3), 1, "iid")
    want = np.asarray(gaussian(stream, 26), np.float32).reshape(13, 2)
    f32 = contract_draw(42, 5, 4, 1, 3, (13, 2), "f32")
    assert f32.dtype == np.float32 and f32.view(np.uint32).tolist() == want.view(np.uint32).tolist()
    bf16 = contract_draw(42, 5, 4, 1, 3, (13, 2), "bf16")
    assert bf16.view(np.uint32).tolist() == R.round_to(want, "bf16").view(np.uint32).tolist()
    assert (bf16.view(np.uint32) & 0xFFFF).max() == 0   # bf16 values held in f32
    f16 = contract_draw(42, 5, 4, 1, 3, (13, 2), "f16")
    assert f16.dtype == np.float16 and f16.tolist() == want.astype(np.float16).tolist()
    # every (epoch, pair, leaf) its own stream
    others = [contract_draw(42, e, 4, leaf, p, (13, 2), "f32") for e, leaf, p in ((6, 1, 3), (5, 0, 3), (5, 1, 2))]
    assert all(not np.array_equal(o, f32) for o in others)


def test_a_row_says_what_its_bits_depend_on_and_reads_the_child_s_fma():
    env = {"jax": "0.10.2", "jaxlib": "0.10.2", "cpu_fma": True, "XLA_FLAGS": "", "threefry_partitionable": True}
    assert settings(env) == ("jax 0.10.2 jaxlib 0.10.2; cpu fma True; XLA_FLAGS ''; "
                             "threefry_partitionable True")
    assert host_fma(env) and not host_fma(dict(env, cpu_fma=False))
    # XLA capped below AVX2 emits no fused multiply-adds even on a CPU that has them (docs/hyperscale.md §3)
    assert not host_fma(dict(env, XLA_FLAGS="--xla_cpu_max_isa=AVX"))
    assert not host_fma(dict(env, XLA_FLAGS="--xla_cpu_max_isa=SSE4_2"))
    assert host_fma(dict(env, XLA_FLAGS="--xla_cpu_max_isa=AVX2"))
