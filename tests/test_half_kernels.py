"""The f16/bf16 numba kernel of es-awd's scaled add (esverify.es.half_kernels) gives torch's bits.

Its conversions against torch's on every f16/bf16 pattern (widening) and on
every rounding decision (narrowing: each midpoint between two neighbouring
values and the f32 values beside it); the whole kernel against the torch
lines of the profile (esverify.references.es_awd.profile.scaled_add_torch),
special values and NaN fallbacks included.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import example, given, settings
from hypothesis import strategies as st

from esverify.es import cpu_kernels, half_kernels
from esverify.references.es_awd import profile
from test_es_helpers import assert_bitwise, examples

pytestmark = pytest.mark.skipif(not (cpu_kernels.ENABLED and cpu_kernels.FMA),
                                reason="the kernel needs numba and a CPU with a fused multiply-add")

HALF = {"f16": torch.float16, "bf16": torch.bfloat16}


def _torch_of_bits(bits: np.ndarray, dtype) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(bits, np.uint16).view(np.int16).copy()).view(dtype)


def _bits_of(t: torch.Tensor) -> np.ndarray:
    return t.contiguous().view(torch.int16).numpy().view(np.uint16).copy()


#: the conversions the kernel takes here, and f16's portable bit forms (the ones without F16C) on every CPU
FORMS = [("f16", False), ("f16", True), ("bf16", False)]


@pytest.mark.parametrize("name,portable", FORMS)
def test_widening_equals_torch_on_every_pattern(name, portable):
    """All 65,536 patterns widen to torch's f32 bits (NaN to a NaN)."""
    dtype = HALF[name]
    patterns = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)
    ours = half_kernels.widen(patterns, dtype, portable)
    theirs = _torch_of_bits(patterns, dtype).float().numpy()
    nan = np.isnan(theirs)
    assert np.array_equal(np.isnan(ours), nan)
    assert nan.sum() == {"f16": 2046, "bf16": 254}[name]     # every exponent-all-ones pattern but the two infinities
    assert np.array_equal(ours[~nan].view(np.uint32), theirs[~nan].view(np.uint32))


def _decision_points(dtype) -> np.ndarray:
    """Every f32 where round-to-nearest-even to `dtype` can change its answer: each midpoint between two
    neighbouring non-negative finite values of `dtype` (and between the largest and the next power of two,
    where rounding overflows to infinity), the f32 values one and two ulps beside it, the values
    themselves; both signs; zeros, infinities and f32's extremes."""
    finite = _torch_of_bits(np.arange(0, 0x7C00 if dtype == torch.float16 else 0x7F80, dtype=np.uint16), dtype)
    values = finite.double().numpy()
    top = 2.0 ** (16 if dtype == torch.float16 else 128)
    nxt = np.append(values[1:], top)
    mid = ((values + nxt) / 2).astype(np.float32)            # exact: one bit more than the format has
    assert np.array_equal(mid.astype(np.float64), (values + nxt) / 2)
    mid_bits = mid.view(np.uint32).astype(np.int64)
    near = np.concatenate([mid_bits + d for d in (-2, -1, 0, 1, 2)])
    near = near[(near >= 0) & (near <= 0x7F7FFFFF)].astype(np.uint32).view(np.float32)
    extra = np.array([0.0, np.inf, 3.4028235e38, 1e-45, 1.1754942e-38], np.float32)
    out = np.concatenate([near, values.astype(np.float32), extra])
    return np.concatenate([out, -out])


@pytest.mark.parametrize("name,portable", FORMS)
def test_narrowing_equals_torch_at_every_rounding_decision(name, portable):
    """Round-to-nearest-even f32 -> f16/bf16 gives the bits of torch's vector conversion and of its
    scalar one, at every midpoint and beside it (subnormals, ties to even, overflow to infinity)."""
    dtype = HALF[name]
    points = _decision_points(dtype)
    assert points.size > {"f16": 300_000, "bf16": 300_000}[name]
    ours = half_kernels.narrow(points, dtype, portable)
    vector = _bits_of(torch.from_numpy(points).to(dtype))
    assert np.array_equal(ours, vector)
    sample = points[:: max(1, points.size // 4000)]
    scalar = np.array([_bits_of(torch.tensor(float(v), dtype=torch.float32).to(dtype).reshape(1))[0]
                       for v in sample], np.uint16)
    assert np.array_equal(half_kernels.narrow(sample, dtype, portable), scalar)


@pytest.mark.parametrize("portable", [False, True])
def test_narrowing_known_answers(portable):
    """A few answers worked by hand: ties go to the even neighbour, 65520 overflows f16, the smallest
    f16 subnormal's half rounds to zero (even) and anything above it to 2**-24."""
    f16 = half_kernels.narrow(np.array([1 + 2 ** -11, 1 + 3 * 2 ** -11, 65519.996, 65520.0, 2.0 ** -25,
                                        2.0 ** -25 * 1.0000001, -0.0], np.float32), torch.float16, portable)
    assert f16.tolist() == [0x3C00, 0x3C02, 0x7BFF, 0x7C00, 0x0000, 0x0001, 0x8000]
    bf16 = half_kernels.narrow(np.array([1 + 2 ** -8, 1 + 3 * 2 ** -8, 3.4028235e38, -(2.0 ** -133)], np.float32),
                               torch.bfloat16)
    assert bf16.tolist() == [0x3F80, 0x3F82, 0x7F80, 0x8001]


SPECIALS = [0.0, -0.0, np.inf, -np.inf, 65504.0, -65504.0, 2.0 ** -24, -(2.0 ** -14), 6e-8, 3e38, 1e-40]


def _operands(rng, n, name, y_f32, specials):
    dtype = HALF[name]
    scale = 2.0 ** rng.integers(-30, 16, n) if name == "f16" else 2.0 ** rng.integers(-140, 120, n)
    x = torch.from_numpy((rng.standard_normal(n) * scale).astype(np.float32)).to(dtype)
    y = torch.from_numpy((rng.standard_normal(n) * 4).astype(np.float32))
    if specials and n:
        picks = rng.choice(SPECIALS, size=min(n, 6))
        x[: picks.size] = torch.from_numpy(picks.astype(np.float32)).to(dtype)
        y[-picks.size:] = torch.from_numpy(rng.permutation(picks).astype(np.float32))
    return x, (y if y_f32 else y.to(dtype))


@settings(max_examples=examples(80))
@given(st.integers(0, 200), st.sampled_from(list(HALF)), st.sampled_from(["cpu", "cuda"]), st.booleans(),
       st.one_of(st.sampled_from([0.6015625, -0.3, 1e-3, 0.1]), st.floats(-70000, 70000, allow_nan=False)),
       st.integers(0, 2**32 - 1), st.integers(0, 70), st.booleans())
@example(95, "f16", "cpu", False, 0.6015625, 3, 0, False)
@example(33, "bf16", "cpu", True, 1e-3, 1, 31, True)
@example(6, "f16", "cpu", False, 0.0, 0, 0, True)   # inf * 0 in the tail line: a NaN before the last rounding
def test_kernel_equals_the_torch_lines(n, name, rule, y_f32, a, data_seed, first, specials):
    """The kernel's result (body, tail, the chunk's offset in a longer tensor, noise given in f32 and rounded
    first) is the torch lines' bits, infinities and overflow included; it applies whenever no NaN appears."""
    rng = np.random.default_rng(data_seed)
    x, y = _operands(rng, n, name, y_f32, specials)
    numel = first + n + int(rng.integers(0, 40))
    ours = profile._half(x, y, a, rule, first, numel)
    theirs = profile.scaled_add_torch(x, y.to(x.dtype), a, rule, first, numel)
    if bool(torch.isnan(theirs.float()).any()) or (y_f32 and bool(torch.isnan(y).any())):
        assert ours is None                   # the torch lines decide NaN bits
        return
    assert ours is not None, "the kernel must apply to NaN-free CPU f16/bf16 chunks"
    assert ours.dtype == x.dtype and ours.shape == x.shape
    assert_bitwise(ours, theirs, f"{name} {rule} n={n} first={first}")


@pytest.mark.parametrize("name", HALF)
@pytest.mark.parametrize("y_f32", [False, True])
def test_body_and_tail_lines_each_match_where_they_disagree(name, y_f32):
    """On data where the body line (one fma, then rd_dt) and the tail line (rd_dt(y * k) first) give
    different bits for a quarter of the elements, the kernel gives each line's bits where asked: split = n
    (all body), split = 0 (all tail), and a split inside, against the torch lines."""
    dtype = HALF[name]
    rng = np.random.default_rng(11)
    n = 4096
    x = torch.from_numpy(rng.standard_normal(n).astype(np.float32)).to(dtype)
    y = torch.from_numpy(rng.standard_normal(n).astype(np.float32))
    y = y if y_f32 else y.to(dtype)
    a = 0.6015625
    k = profile.rd_dt32(a, dtype)
    body = profile.scaled_add_torch(x, y.to(dtype), a, "cpu", 0, n)                       # n % 32 == 0: no tail
    tail = torch.cat([profile.scaled_add_torch(x[s:s + 16], y[s:s + 16].to(dtype), a, "cpu", 0, 16)
                      for s in range(0, n, 16)])                                          # 16 < 32: all tail
    differ = int((_bits_of(body) != _bits_of(tail)).sum())
    assert differ > n // 8
    assert_bitwise(half_kernels.scaled_add(x, y, k, n), body, "all body")
    assert_bitwise(half_kernels.scaled_add(x, y, k, 0), tail, "all tail")
    assert_bitwise(half_kernels.scaled_add(x, y, k, 1000), torch.cat([body[:1000], tail[1000:]]), "split 1000")


@pytest.mark.parametrize("name", HALF)
@pytest.mark.parametrize("where", ["x", "y", "result", "x in the tail", "y in the tail", "result in the tail"])
def test_a_nan_anywhere_hands_the_call_to_the_torch_lines(name, where):
    """A NaN in x, in the noise, or made by inf - inf (in the body or in the tail, elements 64..69 here)
    returns None from the kernel, and the profile's scaled_add, perturb and accumulate then give exactly the
    torch lines' bits (NaN payloads included)."""
    dtype = HALF[name]
    x = torch.linspace(-3, 3, 70).to(dtype)
    eps = torch.linspace(1, 2, 70)
    a = 0.75
    at = 66 if where.endswith("tail") else 40
    if where.startswith("x"):
        x[at] = float("nan")
    elif where.startswith("y"):
        eps[at] = float("nan")
    else:
        x[at], eps[at], a = float("inf"), float("-inf"), 2.0
    assert half_kernels.scaled_add(x, eps, a, 64) is None
    assert half_kernels.scaled_add(x, eps.to(dtype), a, 64) is None
    want = profile.scaled_add_torch(x, eps.to(dtype), a, "cpu", 0, 70)
    assert_bitwise(profile.scaled_add(x, eps.to(dtype), a, "cpu", 0, 70), want, "scaled_add")
    out = torch.empty_like(x)
    profile.perturb(x, eps, a, "cpu", 0, 70, out)
    assert_bitwise(out, want, "perturb")
    assert_bitwise(profile.accumulate(x.clone(), eps, a, dtype, "cpu", 0, 70), want, "accumulate")


def test_the_kernel_refuses_what_it_cannot_take():
    """Not f16/bf16, not contiguous, y of a third dtype, lengths that differ: None, nothing written."""
    x = torch.ones(8, dtype=torch.float16)
    assert half_kernels.scaled_add(torch.ones(8), torch.ones(8), 1.0, 8) is None
    assert half_kernels.scaled_add(torch.ones(16, dtype=torch.float16)[::2], torch.ones(8), 1.0, 8) is None
    assert half_kernels.scaled_add(x, torch.ones(8, dtype=torch.bfloat16), 1.0, 8) is None
    assert half_kernels.scaled_add(x, torch.ones(7), 1.0, 8) is None
    assert _bits_of(x).tolist() == [0x3C00] * 8


@pytest.mark.parametrize("name", HALF)
@pytest.mark.parametrize("rule", ["cpu", "cuda"])
def test_the_profile_entry_points_chunk_by_chunk_equal_the_torch_lines(name, rule):
    """scaled_add, perturb and accumulate of the profile, called chunk by chunk as the trainer calls them
    (each chunk's first element and the tensor's element count deciding where the 32-element tail starts),
    give the torch lines' bits, on data where the body and tail lines disagree for a quarter of the
    elements (so an off-by-one tail start, a chunk offset dropped or the wrong rule shows)."""
    dtype = HALF[name]
    rng = np.random.default_rng(23)
    numel = 1000 + 27                       # tail: elements 992 .. 1026
    x = torch.from_numpy(rng.standard_normal(numel).astype(np.float32)).to(dtype)
    eps = torch.from_numpy(rng.standard_normal(numel).astype(np.float32))
    a = 0.6015625
    for chunk in (1027, 500, 33, 31):
        for first in range(0, numel, chunk):
            sl = slice(first, min(first + chunk, numel))
            xs, ys = x[sl].contiguous(), eps[sl].contiguous()
            want = profile.scaled_add_torch(xs, ys.to(dtype), a, rule, first, numel)
            where = f"{name} {rule} chunk {chunk} first {first}"
            assert profile._half(xs, ys, a, rule, first, numel) is not None, where
            assert_bitwise(profile.scaled_add(xs, ys.to(dtype), a, rule, first, numel), want, "scaled_add " + where)
            out = torch.empty_like(xs)
            profile.perturb(xs, ys, a, rule, first, numel, out)
            assert_bitwise(out, want, "perturb " + where)
            assert_bitwise(profile.accumulate(xs.clone(), ys, a, dtype, rule, first, numel), want, "accumulate " + where)


def test_noise_of_another_dtype_is_never_rounded_behind_the_callers_back():
    """The profile's scaled_add takes y of x's dtype; given f32 y it must compute what the torch lines do
    with it (no rounding of y to the dtype first), and accumulate with a dtype other than acc's likewise."""
    x = torch.zeros(1, dtype=torch.float16)
    y = torch.tensor([1.0004])
    want = profile.scaled_add_torch(x, y, 1.5, "cpu", 0, 1)
    assert_bitwise(profile.scaled_add(x, y, 1.5, "cpu", 0, 1), want, "scaled_add, f32 y")
    assert _bits_of(want).tolist() == [0x3E01]
    got = profile.accumulate(x.clone(), y, 1.5, torch.float32, "cpu", 0, 1)
    assert_bitwise(got, profile.scaled_add_torch(x, y, 1.5, "cpu", 0, 1), "accumulate, dtype f32")


def test_a_split_past_the_chunk_is_clamped():
    """split beyond the chunk means all body (the loops never index past the buffers)."""
    x = torch.linspace(-1, 1, 8).to(torch.float16)
    y = torch.linspace(0.5, 2, 8).to(torch.float16)
    assert_bitwise(half_kernels.scaled_add(x, y, 0.3, 100_000), half_kernels.scaled_add(x, y, 0.3, 8), "clamped")
    assert_bitwise(half_kernels.scaled_add(x, y, 0.3, -5), half_kernels.scaled_add(x, y, 0.3, 0), "clamped at 0")
    assert half_kernels.scaled_add(x, y.reshape(2, 4), 0.3, 8) is None


@settings(max_examples=examples(60))
@given(st.integers(0, 300), st.sampled_from(list(HALF)), st.sampled_from(["es-at-scale", "es-paper"]),
       st.one_of(st.sampled_from([0.001, -0.001, 0.37, 1e-30]), st.floats(-70000, 70000, allow_nan=False)),
       st.integers(0, 2**32 - 1), st.booleans(), st.booleans())
@example(64, "bf16", "es-at-scale", 0.0, 7, True, False)      # inf * 0: a NaN, the torch lines decide its bits
@example(64, "f16", "es-paper", 70000.0, 3, True, True)       # overflow to infinity, in place
def test_es_at_scale_perturb_on_f16_bf16_is_its_torch_lines(n, name, profile_name, s, data_seed, specials,
                                                              in_place):
    """es-at-scale's perturb on f16/bf16 (es-paper's is the same lines), which takes the kernel's tail line
    (scaled_add with split 0) where no NaN appears, gives the bits of its torch lines (perturb_torch): signed
    zeros, subnormals, infinities, overflow and NaN included, into `out` or in place; the noise unchanged."""
    from esverify.es.profiles import get_profile
    from esverify.references.es_at_scale import profile as es_at_scale
    rng = np.random.default_rng(data_seed)
    theta, eps = _operands(rng, n, name, True, specials)
    eps_bits = eps.numpy().view(np.uint32).copy()
    want = torch.empty_like(theta)
    es_at_scale.perturb_torch(theta, eps, s, want)
    got = theta.clone() if in_place else torch.empty_like(theta)
    get_profile(profile_name).perturb(got if in_place else theta, eps, s, "cpu", 0, n, got)
    assert_bitwise(got, want, f"{profile_name} {name} n={n} s={s}")
    assert eps.numpy().view(np.uint32).tolist() == eps_bits.tolist()
    if not bool(torch.isnan(want.float()).any()):
        assert half_kernels.scaled_add(theta, eps, es_at_scale.rd32(s), 0) is not None   # the kernel applied


@settings(max_examples=examples(60))
@given(st.integers(0, 300), st.sampled_from(list(HALF)), st.sampled_from(["es-paper accumulate", "skill perturb"]),
       st.one_of(st.sampled_from([0.001, -1.25, 0.37, 1e-30]), st.floats(-70000, 70000, allow_nan=False)),
       st.integers(0, 2**32 - 1), st.booleans())
@example(64, "bf16", "es-paper accumulate", 0.0, 7, True)     # inf * 0: a NaN, the torch lines decide its bits
@example(64, "f16", "skill perturb", 70000.0, 3, True)        # overflow to infinity
def test_the_other_tail_lines_on_f16_bf16_are_their_torch_lines(n, name, entry, k, data_seed, specials):
    """es-paper's accumulate (acc in the dtype) and the skill sample's perturb (f64 noise, rounded to f32 and
    then to the dtype) on f16/bf16 take the kernel's tail line where no NaN appears and give the bits of their
    torch lines, special values, overflow and NaN included; inputs unchanged."""
    from esverify.references.es_paper import profile as es_paper
    from esverify.references.skill_sample import profile as skill
    rng = np.random.default_rng(data_seed)
    x, eps = _operands(rng, n, name, True, specials)
    dtype = HALF[name]
    before = (_bits_of(x).tolist(), eps.numpy().view(np.uint32).tolist())
    if entry == "es-paper accumulate":
        want = es_paper.add(x, es_paper.mul_scalar(es_paper.round_to(eps, dtype), k))
        got = es_paper.accumulate(x, eps, k, dtype, "cpu", 0, n)
    else:
        noise = eps.double().numpy() * (1 + 2.0 ** -30)      # f64 noise: its rounding to f32 matters
        want = skill.perturb_torch(x, noise, k)
        got = skill.perturb(x, noise, k)
    assert_bitwise(got, want, f"{entry} {name} n={n} k={k}")
    assert (_bits_of(x).tolist(), eps.numpy().view(np.uint32).tolist()) == before
    assert got.data_ptr() != x.data_ptr() or n == 0
    if not bool(torch.isnan(want.float()).any()):   # the kernel applied
        y = eps if entry == "es-paper accumulate" else skill.noise_to_dtype(noise, dtype)
        assert half_kernels.scaled_add(x, y, es_paper.rd32(k), 0) is not None


@pytest.mark.parametrize("name,noise,want", [("f16", 1 + 2.0 ** -11 + 2.0 ** -40, 0x3C00),
                                             ("bf16", 1 + 2.0 ** -8 + 2.0 ** -40, 0x3F80)])
def test_the_skill_samples_noise_is_rounded_twice_on_the_kernels_path(name, noise, want):
    """f64 noise just above a midpoint of the dtype: rounded to f32 first it IS the midpoint, which rounds
    to even (down); rounded once it would round up. The page's torch.tensor(noise, dtype) rounds twice,
    and so does the skill sample's perturb, on the kernel's path as on the torch lines."""
    from esverify.references.skill_sample import profile as skill
    x = torch.zeros(4, dtype=HALF[name])
    noise = np.full(4, noise)
    got = skill.perturb(x, noise, 1.0)
    assert _bits_of(got).tolist() == [want] * 4
    assert_bitwise(got, skill.perturb_torch(x, noise, 1.0), name)


def test_f16c_is_used_only_where_numba_targets_it(monkeypatch):
    """The F16C conversions only when the features numba's JIT compiles with have it: NUMBA_CPU_FEATURES when
    set (NUMBA_CPU_NAME=generic sets it to ""), else the host's, whatever the CPU name."""
    import llvmlite.binding as llvm
    from numba.core import config
    monkeypatch.setattr(config, "CPU_FEATURES", "+avx2,+f16c,+fma")
    assert half_kernels._targets_f16c() is True
    monkeypatch.setattr(config, "CPU_FEATURES", "+avx2,-f16c,+fma")
    assert half_kernels._targets_f16c() is False
    monkeypatch.setattr(config, "CPU_FEATURES", "+avx512fp16,+f16c-x")  # no feature named exactly f16c
    assert half_kernels._targets_f16c() is False
    monkeypatch.setattr(config, "CPU_FEATURES", "")                 # generic
    assert half_kernels._targets_f16c() is False
    monkeypatch.setattr(config, "CPU_FEATURES", None)
    monkeypatch.setattr(config, "CPU_NAME", "znver4")
    assert half_kernels._targets_f16c() is bool(llvm.get_host_cpu_features().get("f16c", False))


def test_no_jit_takes_the_torch_lines():
    """Under NUMBA_DISABLE_JIT the kernel's intrinsics cannot run as Python: `usable` says no, so every caller
    takes its torch lines (a subprocess: the switch is read at import)."""
    import os
    import subprocess
    import sys
    script = ("import torch\nfrom esverify.es import half_kernels as H\n"
              "from esverify.references.es_at_scale import profile as P\n"
              "x = torch.linspace(-3, 3, 40).to(torch.float16); e = torch.linspace(1, 2, 40)\n"
              "o = torch.empty_like(x); w = torch.empty_like(x)\n"
              "P.perturb(x, e, 0.37, 'portable', 0, 40, o); P.perturb_torch(x, e, 0.37, w)\n"
              "print(H.usable(x, e), bool(torch.equal(o.view(torch.int16), w.view(torch.int16))))\n")
    done = subprocess.run([sys.executable, "-c", script], env={**os.environ, "NUMBA_DISABLE_JIT": "1"},
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["False", "True"]


@pytest.mark.slow
def test_the_portable_forms_compile_and_agree_for_a_cpu_without_f16c(tmp_path):
    """In a process whose numba targets a generic x86-64 (no F16C), the module takes the portable forms,
    its kernel compiles and links, and gives the bits the kernel gives here."""
    import json
    import subprocess
    import sys
    script = (
        "import json, numpy as np, torch\n"
        "from esverify.es import half_kernels as H\n"
        "x = torch.linspace(-3, 3, 301).to(torch.float16); y = torch.linspace(1, 2, 301)\n"
        "r = H.scaled_add(x, y, 0.6015625, 200)\n"
        "print(json.dumps({'f16c': H.F16C, 'bits': r.view(torch.int16).tolist()}))\n")
    env = {**__import__("os").environ, "NUMBA_CPU_NAME": "generic", "NUMBA_CACHE_DIR": str(tmp_path)}
    env.pop("NUMBA_CPU_FEATURES", None)     # generic: numba compiles with no features at all
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    x = torch.linspace(-3, 3, 301).to(torch.float16)
    here = half_kernels.scaled_add(x, torch.linspace(1, 2, 301), 0.6015625, 200)
    assert got["f16c"] is False
    assert got["bits"] == here.view(torch.int16).tolist()
