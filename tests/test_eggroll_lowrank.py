"""Our side of EGGROLL (docs/numerics.md §9, docs/CONTRACT.md §10): known answers G1-G4, properties, the loop.

G1-G4 were measured on the reference's real code with torch 2.13.0+cpu;
they must hold bit for bit (values compared as bit patterns, SHA-256
prefixes over the raw bytes).

Run: ``python -m pytest -q tests/test_eggroll_lowrank.py``.
"""
from __future__ import annotations

import hashlib
import math
import struct
from fractions import Fraction

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from esverify.references.eggroll import contract as C
from esverify.references.eggroll import lowrank as LR
from esverify.references.eggroll import shapes as S
from esverify.rng import scalar

TINY_PEFT, TINY_VLLM = S.tiny_model()
VLLM_ORDER = [f"model.layers.0.{p}.base_layer.weight"
              for p in ("self_attn.qkv_proj", "self_attn.o_proj", "mlp.gate_up_proj", "mlp.down_proj")]


def f32_bits(values) -> list[int]:
    return [struct.unpack("<I", struct.pack("<f", v))[0] for v in values]


def bits_of(t: torch.Tensor) -> list[int]:
    view = {torch.float32: torch.int32, torch.float16: torch.int16, torch.bfloat16: torch.int16}[t.dtype]
    return t.contiguous().view(view).reshape(-1).tolist()


def same_bits(x: torch.Tensor, y: torch.Tensor) -> bool:
    return x.dtype == y.dtype and x.shape == y.shape and bits_of(x) == bits_of(y)


def sha16(*tensors) -> str:
    return hashlib.sha256(b"".join(t.contiguous().numpy().tobytes() if t.dtype != torch.bfloat16 else
                                   t.contiguous().view(torch.int16).numpy().tobytes() for t in tensors)).hexdigest()[:16]


# ----------------------------------------------------------------------------- G1-G4 (known answers)

def test_g1_native_noise_id_17():
    assert C.native_id(0, 0, 4, 14, 1, 3) == 17
    a, b = C.native_factors(0, 0, 4, 14, 1, 3, 2, 16, 8)
    assert a.dtype == b.dtype == torch.float32 and a.shape == (2, 8) and b.shape == (16, 2)
    assert f32_bits(a[0, :4].tolist()) == f32_bits([-1.0461914539337158, 1.2305212020874023, 1.866212248802185,
                                                    -0.34353330731391907])
    assert f32_bits(b[:4, 0].tolist()) == f32_bits([0.004945157095789909, -1.1596639156341553, 0.35184893012046814,
                                                    0.9566794633865356])
    assert hashlib.sha256(a.numpy().tobytes()).hexdigest()[:16] == "675811b1cce88a80"
    assert hashlib.sha256(b.numpy().tobytes()).hexdigest()[:16] == "2bbb2311843dd7e5"


def test_native_noise_depends_on_the_draw_size():
    """An 8-element draw from id 17 (G2's a) is not the head of G1's 16-element draw: the sizes are the contract."""
    a16, _ = C.native_factors(0, 0, 4, 14, 1, 3, 2, 16, 8)
    a8, _ = C.native_factors(3, 1, 2, 7, 0, 0, 2, 4, 4)
    assert C.native_id(3, 1, 2, 7, 0, 0) == 17
    assert bits_of(a8.reshape(-1)) != bits_of(a16.reshape(-1)[:8])


def test_g2_adapters_rank_2():
    # tiny model, N 4 (P 2), L 7, base_seed 3, es_step 5, steps_per_adapter 4: generation 1, id 17 + 7k + l
    assert C.native_id(3, 5 // 4, 2, 7, 0, 0) == 17
    a, b = C.native_factors(3, 1, 2, 7, 0, 0, 2, 4, 4)
    A1, B1 = LR.adapter_factors(a, b, 0.01, 2, 1)
    A0, B0 = LR.adapter_factors(a, b, 0.01, 2, 0)
    assert A1.dtype == B1.dtype == torch.float16
    assert A1[0, :4].tolist() == [-0.141357421875, 0.0233612060546875, 0.0034027099609375, 0.035003662109375]
    assert B1[:4, 0].tolist() == [-0.1273193359375, -0.0108489990234375, 0.1011962890625, -0.022857666015625]
    assert B0[:4, 0].tolist() == [0.1273193359375, 0.0108489990234375, -0.1011962890625, 0.022857666015625]
    assert same_bits(A0, A1) and same_bits(B0, -B1)


def test_g3_shaping():
    F = [[1, 2, 0.5], [0, 3, 0.25], [2, -1, 1], [0.5, 0.5, 0.5]]
    f, std = LR.shape_fitness(F, False)
    assert f.tolist() == [0.3125, 0.22916666666666666, -0.1875, -0.3541666666666667]
    assert std == 0.27873100333874273
    g, std2 = LR.shape_fitness(F, True)
    assert g.tolist() == [1.1211525989044417, 0.8221785725299239, -0.672691559342665, -1.2706396120917005]
    assert std2 == std
    d = LR.pair_differences(f)
    assert d.dtype == np.float32 and d.tolist() == [0.0833333358168602, 0.1666666716337204]


G4 = {  # (rank, dtype, value) -> (Δ qkv[0, :4], Δ down[0, :2], sha256[:16] of qkv|o|gate_up|down, unchanged of 120)
    (2, torch.float32, 0.0): ([-0.0409858413040638, -0.0017031237948685884, 0.0031810239888727665,
                               0.03768603503704071], [0.014257130213081837, 0.020656032487750053],
                              "e9c4a2f22f38b4cc", 0),
    (2, torch.bfloat16, 0.0625): ([-0.041015625, -0.001708984375, 0.0029296875, 0.03759765625],
                                  [0.01416015625, 0.0205078125], "735e31d2cce5ba31", 0),
    (1, torch.float32, 0.0): ([-0.009314854629337788, -0.008729638531804085, 0.002021677093580365,
                               0.01464730966836214], [0.015476924367249012, 0.015683121979236603],
                              "ee6e67784077b158", 0),
    (1, torch.bfloat16, 0.0625): ([-0.00927734375, -0.0087890625, 0.001953125, 0.0146484375],
                                  [0.015625, 0.015625], "91e48cade328d286", 3),
}


@pytest.mark.parametrize("case", list(G4), ids=lambda c: f"r{c[0]}-{str(c[1])[6:]}")
def test_g4_one_update_on_the_tiny_model(case):
    rank, dtype, value = case
    want_q, want_down, want_sha, want_unchanged = G4[case]
    w = S.filled(TINY_VLLM, dtype, value)
    before = {n: t.clone() for n, t in w.items()}
    source = C.factor_source("native", 3, 2, 7)
    LR.apply_update_(w, TINY_PEFT, np.array([0.5, -1.25, 2.0, 0.75]), sigma=0.01, lr=0.05, rank=rank,
                     generation=5 // 4, source=source)
    qkv, down = VLLM_ORDER[0], VLLM_ORDER[3]
    dq = (w[qkv].float() - before[qkv].float())[0, :4].tolist()
    dd = (w[down].float() - before[down].float())[0, :2].tolist()
    assert f32_bits(dq) == f32_bits(want_q) and f32_bits(dd) == f32_bits(want_down)
    assert sha16(*(w[n] for n in VLLM_ORDER)) == want_sha
    unchanged = sum(int((torch.tensor(bits_of(w[n])) == torch.tensor(bits_of(before[n]))).sum()) for n in VLLM_ORDER)
    assert unchanged == want_unchanged


# ----------------------------------------------------------------------------- the contract streams

@given(seed=st.integers(0, 2**64 - 1), s=st.integers(0, 2**40), pairs=st.integers(1, 2**20),
       layers=st.integers(1, 2**12), data=st.data())
def test_stream_seed_is_the_documented_formula(seed, s, pairs, layers, data):
    k, l = data.draw(st.integers(0, pairs - 1)), data.draw(st.integers(0, layers - 1))
    want = scalar.at(seed ^ 0x65735F6C6F77726B, ((s * pairs + k) * layers + l) % 2**64)
    assert C.lowrank_stream_seed(seed, s, pairs, layers, k, l) == want


def test_domain_is_ascii_es_lowrk():
    assert C.LOWRANK_DOMAIN.to_bytes(8, "big") == b"es_lowrk"


def test_stream_seed_refuses_bad_input():
    with pytest.raises(ValueError, match="seed"):
        C.lowrank_stream_seed(-1, 0, 1, 1, 0, 0)
    with pytest.raises(TypeError, match="layer"):
        C.lowrank_stream_seed(0, 0, 1, 1, 0, 0.5)


@given(seed=st.integers(0, 2**64 - 1), rank=st.integers(1, 4), out_f=st.integers(1, 5), in_f=st.integers(1, 5),
       mapping=st.sampled_from(["poly32", "libm64"]))
def test_factors_are_slices_of_one_stream(seed, rank, out_f, in_f, mapping):
    a, b = C.lowrank_factors(seed, 2, 3, 7, 1, 4, rank, out_f, in_f, mapping, backend="numpy")
    stream = C.lowrank_stream_seed(seed, 2, 3, 7, 1, 4)
    want = scalar.gaussian(stream, rank * in_f + out_f * rank, 0, mapping)
    assert f32_bits(a.reshape(-1).tolist()) == f32_bits(want[:rank * in_f])
    assert f32_bits(b.reshape(-1).tolist()) == f32_bits(want[rank * in_f:])
    assert a.shape == (rank, in_f) and b.shape == (out_f, rank) and a.dtype == b.dtype == torch.float32


@given(base=st.integers(0, 2**31), pairs=st.integers(1, 64), layers=st.integers(1, 64), data=st.data())
def test_decode_native_id_inverts_native_id(base, pairs, layers, data):
    s, k = data.draw(st.integers(0, 1000)), data.draw(st.integers(0, pairs - 1))
    l = data.draw(st.integers(0, layers - 1))
    assert C.decode_native_id(C.native_id(base, s, pairs, layers, k, l), base, pairs, layers) == (s, k, l)


def test_native_streams_overlap_across_base_seeds():
    """The reference's seed formula (a finding, docs/numerics.md §9.1): base_seed b + 1, weight l is b's l + 1."""
    assert C.native_id(1, 0, 4, 14, 0, 3) == C.native_id(0, 0, 4, 14, 0, 4)
    assert C.native_id(14, 0, 4, 14, 0, 3) == C.native_id(0, 0, 4, 14, 1, 3)


def test_factor_source_refuses_bad_names():
    with pytest.raises(ValueError, match="noise"):
        C.factor_source("gaussian", 0, 2, 7)
    with pytest.raises(ValueError, match="mapping"):
        C.factor_source("contract", 0, 2, 7, mapping="libm32")
    with pytest.raises(ValueError, match="backend"):
        C.factor_source("native", 0, 2, 7, backend="numpy")


# ----------------------------------------------------------------------------- adapters and B·A

f16s = st.integers(0, 0xFFFF).filter(lambda x: (x & 0x7C00) != 0x7C00).map(
    lambda x: np.array([x], dtype=np.uint16).view(np.float16)[0])


@given(rank=st.integers(1, 5), data=st.data())
def test_evaluated_perturbation_is_the_exact_products_summed_in_f64_then_rounded(rank, data):
    out_f, in_f = data.draw(st.integers(1, 4)), data.draw(st.integers(1, 4))
    A = np.array(data.draw(st.lists(f16s, min_size=rank * in_f, max_size=rank * in_f)), np.float16).reshape(rank, in_f)
    B = np.array(data.draw(st.lists(f16s, min_size=out_f * rank, max_size=out_f * rank)),
                 np.float16).reshape(out_f, rank)
    got = LR.evaluated_perturbation(torch.from_numpy(A), torch.from_numpy(B)).numpy()
    for i in range(out_f):
        for k in range(in_f):
            acc = None
            for j in range(rank):
                p = Fraction(float(B[i, j])) * Fraction(float(A[j, k]))
                assert float(p) == Fraction(float(p))          # the f64 product is exact
                signed = float(B[i, j]) * float(A[j, k])      # the same value, with IEEE's sign of a zero
                acc = signed if acc is None else acc + signed   # from the first product: -0.0 stays -0.0
            with np.errstate(over="ignore"):
                assert got[i, k].view(np.uint16) == np.float16(acc).view(np.uint16)
    if rank == 1:   # one product: exact in f32 too, so torch's widen-multiply-round agrees
        torch_ba = (torch.from_numpy(B).float() @ torch.from_numpy(A).float()).half()
        assert bits_of(torch_ba) == bits_of(torch.from_numpy(got))


def test_evaluated_perturbation_keeps_the_sign_of_a_zero_sum():
    """IEEE signs of zero in B·A (found by the property above): a single product -0.0 stays -0.0, as torch's
    B @ A gives; a sum of two -0.0 stays -0.0; -0.0 + 0.0 is +0.0."""
    A = torch.tensor([[0.0, 0.0]], dtype=torch.float16)
    B = torch.tensor([[0.0], [-0.0]], dtype=torch.float16)
    got = LR.evaluated_perturbation(A, B)
    assert bits_of(got) == [0, 0, -32768, -32768]
    assert bits_of((B.float() @ A.float()).half()) == bits_of(got)
    A2 = torch.tensor([[1.0], [0.0]], dtype=torch.float16)             # r 2, in 1
    assert bits_of(LR.evaluated_perturbation(A2, torch.tensor([[-0.0, -1.0]], dtype=torch.float16))) == [-32768]
    assert bits_of(LR.evaluated_perturbation(A2, torch.tensor([[-0.0, 1.0]], dtype=torch.float16))) == [0]


@given(seed=st.integers(0, 2**32), rank=st.integers(1, 9), member=st.integers(0, 7))
def test_sign_on_a_or_b_evaluates_the_same_member(seed, rank, member):
    a, b = C.lowrank_factors(seed, 0, 4, 7, member // 2, 0, rank, 3, 5)
    A, B = LR.adapter_factors(a, b, 0.001, rank, member)
    assert same_bits(LR.evaluated_perturbation(A, B), LR.evaluated_perturbation(-A, -B))
    twin = member ^ 1
    A2, B2 = LR.adapter_factors(a, b, 0.001, rank, twin)
    assert same_bits(A, A2) and same_bits(B, -B2)
    assert same_bits(LR.evaluated_perturbation(A, B), LR.evaluated_perturbation(-A2, B2))


def test_adapters_round_the_f32_products_once_to_f16():
    a, b = C.native_factors(3, 1, 2, 7, 0, 0, 2, 4, 4)
    A, B = LR.adapter_factors(a, b, 0.01, 2, 0)
    sa, sb = np.float32(math.sqrt(0.01)), np.float32(math.sqrt(0.01 / 2))
    assert (A.numpy() == (a.numpy() * sa).astype(np.float16)).all()
    assert (B.numpy() == (b.numpy() * sb).astype(np.float16)).all()


# ----------------------------------------------------------------------------- the update

def dyadic_factors(rng, pairs, rank, out_f, in_f):
    """Small integers as f32 factors: with σ = 0.25 every product and sum of the update is exact."""
    return [(torch.tensor(rng.integers(-8, 9, (rank, in_f)), dtype=torch.float32),
             torch.tensor(rng.integers(-8, 9, (out_f, rank)), dtype=torch.float32)) for _ in range(pairs)]


@given(rank=st.sampled_from([1, 4]), pairs=st.integers(1, 9), chunk=st.integers(1, 10), seed=st.integers(0, 2**32),
       scale=st.booleans())
def test_update_equals_the_exact_sum_and_does_not_depend_on_the_chunk_when_exact(rank, pairs, chunk, seed, scale):
    rng = np.random.default_rng(seed)
    out_f, in_f = 3, 5
    fac = dyadic_factors(rng, pairs, rank, out_f, in_f)
    d = (rng.integers(-16, 17, pairs) / 4).astype(np.float32)
    sigma, lr, n = 0.25, 0.375, 2 * pairs
    got = LR.update_delta(lambda k: fac[k], out_f, in_f, rank, d, sigma, lr, n, chunk, scale)
    # exact: a·√σ = a/2, b·√(σ/r) = b/(2√r) (√(σ/r) = 0.25 for r = 4, 0.5 for r = 1)
    sb = {1: 0.5, 4: 0.25}[rank]
    G = np.zeros((out_f, in_f))
    for k, (a, b) in enumerate(fac):
        G += float(d[k]) * ((b.numpy().astype(np.float64) * sb) @ (a.numpy().astype(np.float64) * 0.5))
    want = np.float32(G) * np.float32(1.0 / (n * sigma + 1e-8))
    want = want.astype(np.float32) * np.float32(lr)
    if scale:
        want = want.astype(np.float32) * np.float32(math.sqrt(n))
    assert bits_of(got) == bits_of(torch.from_numpy(want.astype(np.float32)))
    other = LR.update_delta(lambda k: fac[k], out_f, in_f, rank, d, sigma, lr, n, max(1, pairs - chunk + 1), scale)
    assert same_bits(got, other)


def test_default_chunk_by_rank():
    assert [LR.default_chunk(r, 1000) for r in (1, 2, 3, 8, 9, 16)] == [128, 128, 64, 64, 32, 32]
    assert LR.default_chunk(1, 5) == 5 and LR.default_chunk(16, 5) == 5
    assert LR.default_chunk(4, 100, 3) == 3 and LR.default_chunk(4, 2, 3) == 2
    with pytest.raises(ValueError, match="chunk_size"):
        LR.default_chunk(4, 10, 0)


def test_the_rank_one_path_and_the_chunking_decide_bits():
    """Why the profile calls torch.mm for r = 1 and keeps the reference's chunk size (docs/numerics.md §9.4): on
    64 pairs of 64 x 64 native noise the batched path, or chunks of 3 pairs, change thousands of f32 bits."""
    fac = [C.native_factors(3, 1, 64, 7, k, 0, 1, 64, 64) for k in range(64)]
    d = np.linspace(-1, 1, 64).astype(np.float32)
    mm = LR.update_delta(lambda k: fac[k], 64, 64, 1, d, 0.01, 0.05, 128, 64)
    A = torch.stack([f[0] for f in fac]) * math.sqrt(0.01)
    B = torch.stack([f[1] for f in fac]) * math.sqrt(0.01)
    batched = (torch.bmm(B, A) * torch.from_numpy(d).view(-1, 1, 1)).sum(0)
    batched = (batched * (1.0 / (128 * 0.01 + 1e-8))) * 0.05
    chunked = LR.update_delta(lambda k: fac[k], 64, 64, 1, d, 0.01, 0.05, 128, 3)
    differ = lambda x, y: int((x.view(torch.int32) != y.view(torch.int32)).sum())   # noqa: E731
    assert differ(mm, batched) > 1000 and differ(mm, chunked) > 1000


def test_two_roundings_into_the_parameter_dtype():
    # at 1.0 a bf16 ulp is 2**-7: Δ = 2**-8 + 2**-20 rounds to 2**-8 first, and 1 + 2**-8 is a tie kept at 1.0;
    # one rounding of the f32 sum would give 1 + 2**-7
    w = torch.full((1, 2), 1.0, dtype=torch.bfloat16)
    delta = torch.tensor([[2.0**-8 + 2.0**-20, 3 * 2.0**-9]], dtype=torch.float32)
    LR.apply_delta_(w, delta)
    once = (torch.full((1, 2), 1.0) + delta).to(torch.bfloat16)
    twice = (torch.full((1, 2), 1.0) + delta.to(torch.bfloat16).float()).to(torch.bfloat16)
    assert w[0, 0].item() == 1.0 and once[0, 0].item() == 1.0 + 2.0**-7
    assert same_bits(w, twice) and not same_bits(w, once)


def test_slice_map_of_the_tiny_model():
    t = LR.slice_map(TINY_PEFT)
    got = [(t[n].name.split(".")[-3], t[n].row_start, t[n].row_stop) for n, _ in TINY_PEFT]
    assert got == [("qkv_proj", 0, 4), ("qkv_proj", 4, 6), ("qkv_proj", 6, 8), ("o_proj", 0, 4),
                   ("gate_up_proj", 0, 6), ("gate_up_proj", 6, 12), ("down_proj", 0, 4)]
    assert {x.name for x in t.values()} == set(TINY_VLLM)
    with pytest.raises(ValueError, match="peft name"):
        LR.slice_map([("model.layers.0.self_attn.q_proj.weight", (4, 4))])


# ----------------------------------------------------------------------------- the loop

def prompt_reward(prompts=3):
    """A reward that reads the member's B·A and the engine's weights (as the stand-in engine does)."""
    def reward(step, member, weights, deltas):
        base = sum(float(t.float().sum()) for t in weights.values())
        return [base + (j + 1) * sum(float(d.float()[0].sum()) for d in deltas.values()) + 0.01 * member * j
                for j in range(prompts)]
    return reward


def run(**kw):
    args = dict(population=8, sigma=0.01, lr=0.05, rank=2, steps=3, reward=prompt_reward(), steps_per_adapter=2,
                base_seed=3)
    args.update(kw)
    weights = args.pop("weights", None) or S.filled(TINY_VLLM, args.pop("dtype", torch.float32), 0.0625)
    return LR.run_lowrank_loop(weights, TINY_PEFT, **args)


def test_loop_reuses_noise_within_a_generation_and_counts_updates():
    r = run()
    assert r.updates == 3 and r.steps == [0, 1, 2] and sorted(r.perturbations) == [0, 1]
    assert len(r.rewards) == 3 and r.rewards[0].shape == (8, 3)
    assert not same_bits(r.perturbations[0][0][TINY_PEFT[0][0]], r.perturbations[1][0][TINY_PEFT[0][0]])
    # the first update equals one apply_update_ on the initial weights with that step's shaping
    w = S.filled(TINY_VLLM, torch.float32, 0.0625)
    d = LR.apply_update_(w, TINY_PEFT, r.shaped[0], sigma=0.01, lr=0.05, rank=2, generation=0,
                         source=C.factor_source("native", 3, 4, 7))
    assert d.tolist() == r.differences[0].tolist()
    assert all(same_bits(w[n], r.weights[0][n]) for n in w)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_engines_do_not_change_a_bit(dtype):
    one, four = run(dtype=dtype), run(dtype=dtype, engines=4)
    for a, b in zip(one.weights, four.weights):
        assert all(same_bits(a[n], b[n]) for n in a)


def test_resume_from_a_checkpoint_ends_bit_identical():
    whole = run(steps=4, normalize_with_std=True)
    first = run(steps=2, normalize_with_std=True)
    rest = run(steps=4, normalize_with_std=True, start_step=2, weights=first.weights[-1])
    assert rest.steps == [2, 3] and rest.updates == 2
    assert all(same_bits(whole.weights[-1][n], rest.weights[-1][n]) for n in TINY_VLLM)


def test_contract_noise_feeds_the_members_from_the_contract_streams():
    r = run(noise="contract", seed=99, mapping="poly32", steps=1)
    a, b = C.lowrank_factors(99, 0, 4, 7, 2, 5, 2, 6, 4)
    A, B = LR.adapter_factors(a, b, 0.01, 2, 5)
    assert same_bits(r.perturbations[0][5][TINY_PEFT[5][0]], LR.evaluated_perturbation(A, B))


def test_loop_refuses_bad_arguments_before_any_work():
    calls = []

    def reward(*args):
        calls.append(args)
        return [0.0]
    for kw, word in ((dict(population=7), "population"), (dict(engines=3), "divisible"), (dict(sigma=0.0), "sigma"),
                     (dict(rank=0), "rank"), (dict(noise="x"), "noise"), (dict(start_step=5), "start_step")):
        with pytest.raises(ValueError, match=word):
            run(reward=reward, **kw)
    assert not calls
    with pytest.raises(ValueError, match="member 1"):
        run(reward=lambda s, m, w, d: [float("nan")] if m == 1 else [0.0])


# ----------------------------------------------------------------------------- the golden area

def _golden():
    import json
    from pathlib import Path
    doc = json.loads((Path(__file__).resolve().parents[1] / "goldens" / "eggroll.json").read_text())
    return {v["id"]: v for v in doc["vectors"]}


def test_the_goldens_hold_the_known_answers_of_the_real_code():
    """G4's SHA-256 prefixes over the committed expected bits, G1's and G2's values: the file pins the real code."""
    from esverify.goldens.compare import decode
    vectors = _golden()
    for (rank, dtype, _), (_, _, sha, _) in G4.items():
        exp = vectors[f"update-g4-r{rank}-{'f32' if dtype == torch.float32 else 'bf16'}"]["expected"]
        width = np.uint32 if dtype == torch.float32 else np.uint16
        raw = b"".join(decode(exp[f"w.{n}"]).astype(width).tobytes() for n in VLLM_ORDER)
        assert hashlib.sha256(raw).hexdigest()[:16] == sha
    g1 = vectors["factors-native-g1"]["expected"]
    assert hashlib.sha256(decode(g1["a"]).astype(np.uint32).tobytes()).hexdigest()[:16] == "675811b1cce88a80"
    assert hashlib.sha256(decode(g1["b"]).astype(np.uint32).tobytes()).hexdigest()[:16] == "2bbb2311843dd7e5"
    g2 = vectors["adapters-native-g2"]["expected"]
    assert g2["m1.A"]["values"][:4] == [f"0x{int(np.float16(v).view(np.uint16)):04x}" for v in
                                         (-0.141357421875, 0.0233612060546875, 0.0034027099609375, 0.035003662109375)]


def test_the_area_refuses_inconsistent_sizes_before_computing():
    from esverify.references.eggroll import golden_area as area
    v = dict(_golden()["update-g4-r2-f32"])
    v["inputs"] = dict(v["inputs"], model=dict(v["inputs"]["model"], hidden=4096))
    assert area.check_sizes(v)
    with pytest.raises(ValueError, match="inconsistent"):
        area.recompute(v, "numpy")
    assert area.check_sizes(_golden()["loop-native-spa2-3steps-std"]) == []


# ----------------------------------------------------------------------------- replay of our low-rank runs

def _logged_run(tmp_path, dtype=torch.bfloat16, **kw):
    from esverify.replay.weights import save_weights
    base = S.filled(TINY_VLLM, dtype, 0.0625)
    base["model.embed_tokens.weight"] = torch.arange(12, dtype=torch.float32).reshape(3, 4).to(dtype)
    r = run(weights=base, steps=3, normalize_with_std=True, run_log=tmp_path / "log", **kw)
    save_weights(tmp_path / "base.safetensors", base)
    save_weights(tmp_path / "final.safetensors", r.weights[-1])
    return r


@pytest.mark.parametrize("noise", ["native", "contract"])
def test_replay_of_a_logged_low_rank_run_is_bit_equal(tmp_path, noise):
    from esverify.replay.api import replay
    _logged_run(tmp_path, noise=noise, seed=77 if noise == "contract" else None)
    report, code = replay(tmp_path / "base.safetensors", tmp_path / "log", tmp_path / "final.safetensors",
                          state_dir=tmp_path / "state")
    assert code == 0 and report["verdict"] == "bit-equal" and report["model"]["iterations"] == 3
    assert report["elements"] == 120 + 12 and (tmp_path / "state" / "report.json").is_file()


def test_the_core_puts_the_registrys_problems_last_in_the_low_rank_replays_notes(tmp_path, monkeypatch):
    """The package's own replay never asks the registry (which loads it by name): the core hands it the
    registry's problems, which end the report's notes as in every other report, on disk too."""
    import json

    from esverify import registry
    from esverify.replay.api import replay
    line = "plug-in entry point toy = toy:REFERENCE (distribution toy, group esverify.references) is left out"
    monkeypatch.setattr(registry, "problems", lambda: [line])
    _logged_run(tmp_path)
    report, code = replay(tmp_path / "base.safetensors", tmp_path / "log", tmp_path / "final.safetensors",
                          state_dir=tmp_path / "state")
    assert code == 0 and report["notes"][-1] == line and report["notes"][-2].startswith("numerics profile 'lowrank'")
    assert json.loads((tmp_path / "state" / "report.json").read_text())["notes"] == report["notes"]


def test_replay_names_the_first_tampered_element(tmp_path):
    from esverify.replay.api import replay
    from esverify.replay.weights import save_weights
    r = _logged_run(tmp_path)
    bad = {n: t.clone() for n, t in r.weights[-1].items()}
    qkv = VLLM_ORDER[0]
    bad[qkv].view(-1)[5] = bad[qkv].view(-1)[5] + 0.5
    save_weights(tmp_path / "bad.safetensors", bad)
    report, code = replay(tmp_path / "base.safetensors", tmp_path / "log", tmp_path / "bad.safetensors",
                          state_dir=tmp_path / "state")
    assert code == 1 and report["mismatches"] == 1
    (entry,) = [t for t in report["tensors"] if t["replay"]["mismatches"]]
    assert entry["name"] == qkv and entry["replay"]["first"]["index"] == 5


def test_replay_refuses_a_broken_low_rank_log(tmp_path):
    import json
    from esverify.replay.api import ReplayError, replay
    _logged_run(tmp_path)
    (tmp_path / "log" / "iteration_updates" / "iteration_000001.json").unlink()
    with pytest.raises(ReplayError, match="iteration_000002.json: expected iteration_000001.json"):
        replay(tmp_path / "base.safetensors", tmp_path / "log", tmp_path / "final.safetensors")
    path = tmp_path / "log" / "iteration_updates" / "iteration_000002.json"
    path.rename(tmp_path / "log" / "iteration_updates" / "iteration_000001.json")
    doc = json.loads((tmp_path / "log" / "iteration_updates" / "iteration_000001.json").read_text())
    assert doc["iteration"] == 2
    with pytest.raises(ReplayError, match="its iteration is 2"):
        replay(tmp_path / "base.safetensors", tmp_path / "log", tmp_path / "final.safetensors")
    with pytest.raises(ReplayError, match="fixes its profile"):
        replay(tmp_path / "base.safetensors", tmp_path / "log", tmp_path / "final.safetensors", profile="es-awd")


@pytest.mark.slow   # 2 s (--durations, 2026-12-03): out of the fast tier
def test_replay_command_line_exit_codes(tmp_path):
    import subprocess
    import sys
    from pathlib import Path
    _logged_run(tmp_path)
    root = Path(__file__).resolve().parents[1]
    cmd = [sys.executable, "-m", "esverify", "replay", "--base", str(tmp_path / "base.safetensors"),
           "--log", str(tmp_path / "log"), "--expect", str(tmp_path / "final.safetensors"),
           "--state-dir", str(tmp_path / "state")]
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path, env={"PYTHONPATH": str(root),
                          "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr
    assert "verdict: BIT-EQUAL: 0 of 132 elements differ" in done.stdout


def _batched_for_rank_one(factors, out_f, in_f, rank, d, sigma, lr, n, chunk, scale=False):
    d = torch.from_numpy(np.asarray(d, np.float32))
    G = torch.zeros((out_f, in_f))
    for k0 in range(0, d.shape[0], chunk):
        drawn = [factors(k) for k in range(k0, min(k0 + chunk, d.shape[0]))]
        a = torch.stack([x[0] for x in drawn]) * math.sqrt(sigma)
        b = torch.stack([x[1] for x in drawn]) * math.sqrt(sigma / rank)
        G += (torch.bmm(b, a) * d[k0:k0 + len(drawn)].view(-1, 1, 1)).sum(0)
    delta = (G * (1.0 / (n * sigma + 1e-8))) * lr
    return delta * math.sqrt(n) if scale else delta


_SHAPE_FITNESS = LR.shape_fitness


def _ddof_one(F, normalize_with_std, nonfinite=False):
    f, std = _SHAPE_FITNESS(F, False, nonfinite)
    return (f / (float(np.std(f, ddof=1)) + 1e-8) if normalize_with_std else f), std


MUTANTS = {   # name -> (attribute of lowrank, replacement, vectors that must fail)
    "no-epsilon": ("UPDATE_EPS", 0.0, {"update-g4-r2-f32", "update-g4-r1-f32"}),
    "batched-rank-one": ("update_delta", _batched_for_rank_one, {"update-g4-r1-f32", "update-r1-chunk3-n16"}),
    "std-ddof-one": ("shape_fitness", _ddof_one, {"shaping-g3-std", "loop-native-spa2-3steps-std"}),
}


@pytest.mark.parametrize("name", list(MUTANTS))
def test_the_goldens_fail_mutants_of_the_profile(name, monkeypatch):
    from pathlib import Path

    from esverify.goldens import gate
    attribute, replacement, must_fail = MUTANTS[name]
    monkeypatch.setattr(LR, attribute, replacement)
    result = gate.check(Path(__file__).resolve().parents[1] / "goldens", areas=["eggroll"], backends=["numpy"])
    failing = {r["vector"] for r in result.rows if r["status"] == "mismatch"}
    assert must_fail <= failing, failing


def test_adapter_perturbations_read_an_adapter_file_as_the_loop_keys_them(tmp_path):
    """A member's adapter written as safetensors under the peft lora names gives the loop's B·A, bit for bit."""
    from safetensors.torch import load_file, save_file
    r = run(steps=1)
    source = C.factor_source("native", 3, 4, 7)
    member, tensors = 3, {}
    for l, (name, (out_f, in_f)) in enumerate(TINY_PEFT):
        A, B = LR.adapter_factors(*source(0, member // 2, l, 2, out_f, in_f), 0.01, 2, member)
        stem = name[: -len(".base_layer.weight")]
        tensors[f"{stem}.lora_A.weight"], tensors[f"{stem}.lora_B.weight"] = A, B
    save_file(tensors, tmp_path / "adapter_model.safetensors")
    got = LR.adapter_perturbations(load_file(tmp_path / "adapter_model.safetensors"))
    assert set(got) == {n for n, _ in TINY_PEFT}
    assert all(same_bits(got[n], r.perturbations[0][member][n]) for n in got)
    with pytest.raises(ValueError, match="both factors"):
        LR.adapter_perturbations({k: v for k, v in tensors.items() if "q_proj.lora_B" not in k})
