"""Kernels == the straight-line reference, bitwise ("What must hold", first item).

For random shapes (0-dim and odd sizes), dtypes, seeds, schemes, mappings,
profiles, shapings, antithetic pairs, anchored decay, chunk sizes and torch
thread counts, the trainer's perturb, restore and update give exactly the
bits of esverify.es.reference, which spells one rounding per docs/numerics.md line.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import example, given, settings
from hypothesis import strategies as st

from esverify.es import Config, Trainer, reference as R
from esverify.references.es_awd import model as awd_model
from esverify.references.es_awd.profile import scaled_add
from esverify.es.numerics import fma32
from test_es_helpers import examples, assert_bitwise, dtypes, make_param, seeds, shapes, to_np, to_torch


@st.composite
def cases(draw):
    profile = draw(st.sampled_from(["es-at-scale", "es-awd"]))
    antithetic = draw(st.booleans())
    population = draw(st.integers(1, 4)) * (2 if antithetic else 1)
    shaping = draw(st.sampled_from(["zscore", "none"] + (["centered_ranks"] if population >= 2 else [])))
    decay = draw(st.sampled_from(["none", "l1", "l2"]))
    cfg = Config(sigma=draw(st.sampled_from([0.001, 0.1, 0.75])), alpha=draw(st.sampled_from([None, 0.05, 0.3])),
                 population=population, antithetic=antithetic, scheme=draw(st.sampled_from(["iid", "correlated"])),
                 mapping=draw(st.sampled_from(["poly32", "libm64"])), shaping=shaping, profile=profile,
                 anchor_decay=decay, anchor_lambda=draw(st.sampled_from([0.0, 0.5, 2.0])) if decay != "none" else 0.0,
                 seed=draw(seeds), chunk_elements=draw(st.sampled_from([None, 1, 7, 32, 33])))
    slots = draw(st.lists(st.tuples(shapes, dtypes), min_size=1, max_size=3))
    rewards = draw(st.lists(st.floats(-10, 10, allow_nan=False, width=32), min_size=population, max_size=population))
    return cfg, slots, rewards, draw(st.sampled_from([1, 2])), draw(st.integers(0, 2**32 - 1))


def _build(slots, data_seed):
    rng = np.random.default_rng(data_seed)
    return [make_param(rng, shape, dt) for shape, dt in slots]


@settings(max_examples=examples(60))
@given(cases())
def test_trainer_equals_reference(case):
    cfg, slots, rewards, threads, data_seed = case
    init = _build(slots, data_seed)
    params = [to_torch(a) for a in init]
    old = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        tr = Trainer(params, cfg)
        c = cfg.to_dict()
        member = cfg.population - 1
        tr.perturb(member)
        want = R.perturb(c, init, 0, member)
        for k, p in enumerate(params):
            assert_bitwise(p, want[k], f"perturb slot {k}")
        tr.restore(member)
        want = init if cfg.restore == "snapshot" else R.perturb(c, want, 0, member, restore=True)
        for k, p in enumerate(params):
            assert_bitwise(p, want[k], f"restore slot {k}")
        cur = [to_np(p) for p in params]
        stats = tr.update(rewards)
        want, coeffs = R.update(c, cur, 0, rewards, anchor=init)
        np.testing.assert_array_equal(stats["coefficients"].view(np.uint64), coeffs.view(np.uint64))
        for k, p in enumerate(params):
            assert_bitwise(p, want[k], f"update slot {k}")
    finally:
        torch.set_num_threads(old)


@settings(max_examples=examples(30))
@given(st.integers(0, 100), dtypes, st.sampled_from(["cpu", "cuda"]), st.floats(-4, 4, allow_nan=False),
       st.integers(0, 2**32 - 1), st.sampled_from([1, 5, 32, 64]))
@example(95, "f16", "cpu", 0.6015625, 3, 32)
def test_awd_scaled_add_rules_chunked(n, dt, rule, a, data_seed, chunk):
    """es-awd's scaled add, both rules, computed chunk by chunk, equals the reference on the whole tensor."""
    rng = np.random.default_rng(data_seed)
    x, y = make_param(rng, (n,), dt), make_param(rng, (n,), dt, scale=2.0 ** -8)
    tx, ty = to_torch(x), to_torch(y)
    parts = [scaled_add(tx[s:s + chunk], ty[s:s + chunk], a, rule, s, n) for s in range(0, n, chunk)]
    got = torch.cat(parts) if parts else tx.clone()
    assert_bitwise(got, awd_model.scaled_add(x, y, a, rule), f"{rule} {dt}")


@settings(max_examples=examples(30))
@given(st.integers(0, 2**32 - 1), st.integers(-60, 60))
def test_fma32_equals_exact_rationals(data_seed, shift):
    """The round-to-odd fma32 equals exact rational arithmetic rounded once to f32."""
    rng = np.random.default_rng(data_seed)
    x = (rng.standard_normal(300) * 2.0 ** shift).astype(np.float32)
    x[:5] = [0.0, -0.0, 1.0, -1.0, 2.0 ** -149]
    y = rng.standard_normal(300).astype(np.float32)
    y[:5] = [-0.0, 0.0, 2.0 ** -24, -(2.0 ** -25), 1.0]
    k = np.float32(rng.standard_normal())
    got = fma32(torch.from_numpy(x), torch.from_numpy(y), float(k)).numpy()
    assert_bitwise(got, R.fma32(x, y, k), "fma32")


@pytest.mark.parametrize("dt", ["f16", "bf16", "f32"])
def test_awd_cpu_rule_matches_torch_add_single_thread(dt):
    """Differential against torch's own add_(alpha=) on one CPU thread (the rule's source, docs/numerics.md §3).

    The rule was measured on AVX2 and re-measured here under AVX-512 (both
    agree); under another capability the body/tail split may differ, so only
    the f32 path and tensors below 32 elements (all tail) are compared there.
    """
    rng = np.random.default_rng(7)
    cap = torch.backends.cpu.get_cpu_capability()
    sizes = [0, 1, 31, 33, 95, 1000] if cap in ("AVX2", "AVX512") else [0, 1, 5, 31]
    if dt == "f32":
        sizes = [0, 1, 31, 33, 95, 1000]
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        for n in sizes:
            for a in (0.6015625, -0.3, 1e-3, 17.0):
                x = (1 + rng.random(n)).astype(np.float32).astype(R.NP_DTYPES[dt])
                y = (rng.uniform(2 ** -12, 2 ** -7, n) * rng.choice([-1, 1], n)).astype(np.float32).astype(R.NP_DTYPES[dt])
                tx, ty = to_torch(x), to_torch(y)
                ours = scaled_add(tx, ty, a, "cpu", 0, n)
                tx.add_(ty, alpha=a)
                assert_bitwise(ours, tx, f"{dt} n={n} a={a}")
    finally:
        torch.set_num_threads(old)


@pytest.mark.cuda
@pytest.mark.parametrize("profile", ["es-at-scale", "es-awd"])
def test_cuda_trainer_equals_reference(profile):
    """On CUDA the trainer equals the reference (es-awd under its `cuda` rule)."""
    rng = np.random.default_rng(3)
    init = [make_param(rng, (37,), "f32"), make_param(rng, (5, 7), "f16"), make_param(rng, (), "bf16"),
            make_param(rng, (70,), "bf16")]
    cfg = Config(sigma=0.1, alpha=0.05, population=4, profile=profile, scheme="iid", anchor_decay="l1",
                 anchor_lambda=0.5, chunk_elements=16)
    params = [to_torch(a).cuda() for a in init]
    tr = Trainer(params, cfg)
    c = cfg.to_dict()
    tr.perturb(2)
    want = R.perturb(c, init, 0, 2, rule="cuda")
    for k, p in enumerate(params):
        assert_bitwise(p, want[k], f"perturb {k}")
    tr.restore(2)
    cur = [to_np(p) for p in params]
    stats = tr.update([0.5, 1.0, -2.0, 3.0])
    assert stats["rule"] == ("cuda" if profile == "es-awd" else "portable")
    want, _ = R.update(c, cur, 0, [0.5, 1.0, -2.0, 3.0], anchor=init, rule="cuda")
    for k, p in enumerate(params):
        assert_bitwise(p, want[k], f"update {k}")


@settings(max_examples=examples(30))
@given(st.integers(0, 300), st.integers(0, 2**32 - 1), st.floats(-1e3, 1e3, allow_nan=False),
       st.sampled_from([1, 7, 64, 1 << 18]))
def test_numba_cpu_path_equals_torch_path(n, data_seed, coeff, chunk):
    """The numba f32 loops (esverify.es.cpu_kernels) give the torch path's bits, special values included."""
    from esverify.es import cpu_kernels, perturb_tensor_, update_tensor_
    rng = np.random.default_rng(data_seed)
    theta = (rng.standard_normal(n) * 2.0 ** rng.integers(-140, 100, n)).astype(np.float32)
    specials = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45, -1e-45, 3.4e38], np.float32)
    theta[: min(n, 8)] = specials[: min(n, 8)]
    noises = [torch.from_numpy((rng.standard_normal(n) * 4).astype(np.float32)) for _ in range(3)]
    coeffs = [coeff, -coeff * 0.5, 1e-30]
    results = []
    for enabled in (True, False):
        old = cpu_kernels.ENABLED
        cpu_kernels.ENABLED = enabled
        try:
            t = torch.from_numpy(theta.copy())
            perturb_tensor_(t, noises[0], 0.37, chunk_elements=chunk)
            update_tensor_(t, noises, coeffs, 0.05, 3, chunk_elements=chunk)
            results.append(t)
        finally:
            cpu_kernels.ENABLED = old
    assert_bitwise(results[0], results[1], "numba vs torch")


@settings(max_examples=examples(20))
@given(dtypes, st.sampled_from(["l1", "l2"]), st.sampled_from([0.0, 0.01, 0.5, 0.9]), st.integers(0, 2**32 - 1),
       st.integers(0, 80), st.sampled_from([None, "cpu", "cuda"]))
def test_anchor_decay_alone_equals_reference(dt, kind, a_step, data_seed, n, rule):
    """apply_anchor_decay_ (the public decay-only entry point) equals docs/numerics.md §5 line by line,
    including the l1 zeros of small deltas and signed zeros, under es-awd's CPU rule and its `cuda` rule
    (computed here on CPU tensors: the rule, not the device, picks the l1 step's rounding)."""
    from esverify.es import apply_anchor_decay_
    rng = np.random.default_rng(data_seed)
    anchor = make_param(rng, (n,), dt)
    theta = (anchor.astype(np.float32) + make_param(rng, (n,), "f32", scale=0.05)).astype(anchor.dtype)
    if n > 3:
        theta[:2] = anchor[:2]
        theta[2] = -0.0
        anchor[2] = 0.0
    t, q = to_torch(theta), to_torch(anchor)
    apply_anchor_decay_([t], [q], kind, lam=a_step / 0.1 if a_step else 1.0, alpha=0.1 if a_step else 0.0,
                        profile="es-awd", rule=rule, chunk_elements=13)
    assert_bitwise(t, R.anchor_decay(theta, anchor, kind, 0.1 * (a_step / 0.1) if a_step else 0.0, rule),
                   f"{kind} {dt} {rule}")


def test_l1_step_rounding_by_rule_known_answer():
    """bf16 l1 decay with step 0.01 of d = +-0.010009765625 (= bf16(0.01)) toward 0: the CPU rule subtracts
    the step rounded to bf16 and reaches 0; the `cuda` rule (torch's CUDA kernel keeps the Python scalar in
    f32, measured on an H200) subtracts rd32(0.01) = 0.0099999998 and leaves +-bf16(9.766e-6) = 0x3724."""
    from esverify.es.decay import decay_chunk
    theta = torch.tensor([0.010009765625, -0.010009765625], dtype=torch.bfloat16)
    anchor = torch.zeros(2, dtype=torch.bfloat16)
    patterns = {rule: [v & 0xFFFF for v in decay_chunk(theta, anchor, "l1", 0.01, rule).view(torch.int16).tolist()]
                for rule in (None, "cpu", "portable", "cuda")}
    assert patterns == {None: [0, 0], "cpu": [0, 0], "portable": [0, 0], "cuda": [0x3724, 0xB724]}
    want = R.anchor_decay(to_np(theta), to_np(anchor), "l1", 0.01, "cuda")
    assert [int(v) for v in want.view(np.uint16)] == [0x3724, 0xB724]


@pytest.mark.cuda
@settings(max_examples=examples(30))
@given(st.sampled_from(["f32", "f16", "bf16"]), st.sampled_from(["l1", "l2"]), st.sampled_from([1e-5, 0.01, 0.5]),
       st.integers(0, 2**32 - 1), st.integers(1, 5000))
def test_cuda_decay_is_torchs_own_lines(dt, kind, step, data_seed, n):
    """On CUDA, es-awd's decay lines in torch itself (delta = p - ref; l1: sign(delta) * clamp(|delta| - step,
    min=0); l2: delta * (1 - step); p = delta + ref) give the `cuda` rule's bits."""
    from esverify.es.decay import decay_chunk
    rng = np.random.default_rng(data_seed)
    anchor = make_param(rng, (n,), dt)
    theta = (anchor.astype(np.float32) + make_param(rng, (n,), "f32", scale=2 * step)).astype(anchor.dtype)
    p, ref = to_torch(theta).cuda(), to_torch(anchor).cuda()
    delta = p - ref
    delta = delta * (1 - step) if kind == "l2" else torch.sign(delta) * torch.clamp(delta.abs() - step, min=0)
    theirs = (delta + ref).cpu()
    assert_bitwise(decay_chunk(p, ref, kind, step, "cuda").cpu(), to_np(theirs), f"{kind} {dt} step={step}")
    assert_bitwise(theirs, R.anchor_decay(theta, anchor, kind, step, "cuda"), f"{kind} {dt} step={step}")


@pytest.mark.parametrize("profile", ["es-at-scale", "es-awd"])
def test_large_tensors_invariant_to_threads_and_chunks(profile):
    """Tensors big enough for torch to split ops across threads (> 32768 elements) give the same
    bits for any torch thread count and chunk size (the hypothesis test above pins small ones to
    the reference; the kernels are elementwise, es-awd's tail is defined on the whole tensor)."""
    rng = np.random.default_rng(17)
    init = [make_param(rng, (70001,), "f32"), make_param(rng, (257, 129), "f16"), make_param(rng, (40003,), "bf16")]
    results = []
    old = torch.get_num_threads()
    try:
        for threads, chunk in ((1, None), (2, 12345), (3, 40000), (2, None)):
            torch.set_num_threads(threads)
            params = [to_torch(a) for a in init]
            tr = Trainer(params, Config(sigma=0.01, alpha=0.1, population=4, profile=profile, scheme="iid",
                                        anchor_decay="l1", anchor_lambda=0.2, chunk_elements=chunk))
            tr.perturb(3)
            snap = [p.clone() for p in params]
            tr.restore(3)
            tr.update([0.3, -1.0, 2.0, 0.5])
            results.append(snap + params)
    finally:
        torch.set_num_threads(old)
    for other in results[1:]:
        for k, (a, b) in enumerate(zip(results[0], other)):
            assert_bitwise(b, a, f"tensor {k}")


@settings(max_examples=examples(30))
@given(st.integers(0, 2**32 - 1), st.integers(-140, 120), st.integers(-30, 30))
def test_fma32_numba_path_equals_torch_path(data_seed, shift, kshift):
    """The numba fma32 (CPU f32) is bitwise the torch-ops fma32 it replaces, zeros, subnormals, overflow
    to inf, inf and NaN inputs included (the replay and es-awd f32 updates run on it)."""
    from esverify.es import cpu_kernels
    from esverify.es.numerics import fma32_torch
    if not cpu_kernels.ENABLED:
        pytest.skip("numba is not installed")
    rng = np.random.default_rng(data_seed)
    with np.errstate(over="ignore"):
        x = (rng.standard_normal(517) * 2.0 ** shift).astype(np.float32)
        y = (rng.standard_normal(517) * 2.0 ** (shift // 2)).astype(np.float32)
    x[:8] = [0.0, -0.0, np.inf, -np.inf, np.nan, 2.0 ** -149, -(2.0 ** -149), 3.4e38]
    y[:8] = [-0.0, 0.0, 1.0, np.inf, 1.0, 2.0 ** -149, 2.0 ** -24, 3.4e38]
    k = float(np.float32(rng.standard_normal() * 2.0 ** kshift))
    tx, ty = torch.from_numpy(x), torch.from_numpy(y)
    got = fma32(tx, ty, k)
    assert got.dtype == torch.float32
    assert torch.equal(got.view(torch.int32), fma32_torch(tx, ty, k).view(torch.int32))
    assert torch.equal(fma32(tx[3], ty[3], k).view(torch.int32), fma32_torch(tx[3], ty[3], k).view(torch.int32))


@pytest.mark.parametrize("k", [0.013517158105969429, 1.0, -2.5, 2.0 ** -149, -1e-40, 1.1754944e-38, 3e38, -3.4e38,
                               0.0, -0.0, float("inf"), float("-inf"), float("nan")])
@pytest.mark.parametrize("fma", [True, False], ids=["fma-unit", "no-fma-unit"])
def test_fma32_numba_path_equals_torch_path_on_random_bit_patterns(k, fma, monkeypatch):
    """The numba fma32 is the CPU's fused multiply-add (llvm.fma.f32): bitwise the torch-ops round-to-odd
    fma32 on 2**16 random f32 bit patterns of x and y (every class: NaN payloads, infinities, subnormals,
    signed zeros), for scales k of every class, the es-awd double-rounding sigma first; on a CPU without
    a fused multiply-add (cpu_kernels.FMA false) the same call runs the torch lines."""
    from esverify.es import cpu_kernels
    from esverify.es.numerics import fma32_torch
    if not cpu_kernels.ENABLED or (fma and not cpu_kernels.FMA):
        pytest.skip("numba is not installed, or this CPU has no fused multiply-add")
    monkeypatch.setattr(cpu_kernels, "FMA", fma)
    rng = np.random.default_rng(2026)
    x, y = (torch.from_numpy(rng.integers(0, 2 ** 32, 1 << 16, dtype=np.uint64).astype(np.uint32).view(np.float32))
            for _ in range(2))
    k = float(np.float32(k))
    assert cpu_kernels.fma_usable(x, y) is fma
    if fma:   # the numba kernel itself
        got = torch.empty_like(x)
        cpu_kernels.fma32(x, y, k, got)
    else:     # the dispatch of every caller: the torch lines
        got = fma32(x, y, k)
    want = fma32_torch(x, y, k)
    differ = (got.view(torch.int32) != want.view(torch.int32)).nonzero().flatten()
    assert differ.numel() == 0, (f"{differ.numel()} elements differ, first x={x[differ[0]].item()!r} "
                                 f"y={y[differ[0]].item()!r}: {got[differ[0]].item()!r} vs {want[differ[0]].item()!r}")


def test_fma32_numba_path_rounds_once_on_the_double_rounding_vector():
    """The es-awd golden's double-rounding element (esverify.references.es_awd.golden_area): one rounding
    gives 0x482aaaad; rounding to f64 first, then to f32, gives 0x482aaaac."""
    from esverify.es import cpu_kernels
    from esverify.references.es_awd.golden_area import FMA_SIGMA, FMA_THETA
    if not cpu_kernels.ENABLED:
        pytest.skip("numba is not installed")
    eps = 2.889845609664917   # member 1's eps_0 of that vector (seed 20, iid, poly32)
    x, y = torch.tensor([FMA_THETA], dtype=torch.float32), torch.tensor([eps], dtype=torch.float32)
    k = float(np.float32(FMA_SIGMA))
    got = torch.empty(1)
    cpu_kernels.fma32(x, y, k, got)
    assert hex(got.view(torch.int32).item()) == "0x482aaaad"
    twice = np.float32(np.float64(np.float32(FMA_THETA)) + np.float64(np.float32(eps)) * k)
    assert hex(twice.view(np.int32).item()) == "0x482aaaac"


@settings(max_examples=examples(15))
@given(st.integers(0, 2**32 - 1), st.integers(-140, 120), st.floats(-1e3, 1e3, allow_nan=False),
       st.sampled_from([0, 1, 4095, 4096, 4097, 3 * 4096 + 517]))
def test_es_awd_f32_in_place_path_equals_torch_path(data_seed, shift, coeff, n):
    """es-awd's f32 CPU kernels write the numba fma32 straight into their output (in place for the
    accumulator, `out` = theta for perturb and apply): the bits of the torch path (scaled_add), across
    lengths around 4096, special values included (the replay and the trainer run on it)."""
    from esverify.es import cpu_kernels
    from esverify.es.profiles import get_profile
    if not cpu_kernels.ENABLED:
        pytest.skip("numba is not installed")
    prof = get_profile("es-awd")
    rng = np.random.default_rng(data_seed)
    with np.errstate(over="ignore"):
        theta = (rng.standard_normal(n) * 2.0 ** shift).astype(np.float32)
    theta[: min(n, 8)] = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 2.0 ** -149, -(2.0 ** -149), 3.4e38],
                                  np.float32)[: min(n, 8)]
    noises = [torch.from_numpy((rng.standard_normal(n) * 4).astype(np.float32)) for _ in range(3)]
    results = []
    for enabled in (True, False):
        old = cpu_kernels.ENABLED
        cpu_kernels.ENABLED = enabled
        try:
            t = torch.from_numpy(theta.copy())
            prof.perturb(t, noises[0], 0.37, "cpu", 0, n, t)
            perturbed = t.clone()
            acc = prof.new_acc(n, torch.float32, "cpu")
            for e, c in zip(noises, (coeff, -coeff * 0.5, 1e-30)):
                acc = prof.accumulate(acc, e, c, torch.float32, "cpu", 0, n)
            prof.apply(t, acc, 0.05 / 3, "cpu", 0, n, t)
            results.append((perturbed, acc.clone(), t))
        finally:
            cpu_kernels.ENABLED = old
    for name, a, b in zip(("perturb", "accumulate", "apply"), results[0], results[1]):
        assert_bitwise(a, b, f"es-awd {name} numba vs torch")


def test_the_straight_line_models_come_from_the_registry():
    """esverify.es.reference runs the model its reference registers for cfg["profile"]; a profile with none
    (es-paper's own lines are its model module's, driven by its loop) is a one-line ValueError."""
    from esverify import registry
    assert sorted(registry.models()) == ["es-at-scale", "es-awd"]
    assert {m.name: m.cpu_rule for m in registry.models().values()} == {"es-at-scale": "portable", "es-awd": "cpu"}
    with pytest.raises(ValueError, match=r"^no straight-line model for profile 'es-paper'; known: "
                                         r"\['es-at-scale', 'es-awd'\]$"):
        R.perturb(Config(profile="es-paper").to_dict(), [np.zeros(3, np.float32)], 0, 0)
