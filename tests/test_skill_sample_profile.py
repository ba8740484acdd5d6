"""The `skill-sample` profile and loop (docs/numerics.md §8): kernels against the reference and torch, noise, findings.

Run: ``python -m pytest -q tests/test_skill_sample_profile.py``.
"""
from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from esverify import rng
from esverify.bits import array_bits, ulp_distance
from esverify.references.skill_sample import model as R
from esverify.references.skill_sample import loop as S
from esverify.es.profiles import LOOP_PROFILES, PROFILES
from esverify.references.skill_sample import profile as P
from esverify.references.skill_sample import golden_area as skill_area

DTYPES = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}
SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def to_np(t: torch.Tensor) -> np.ndarray:
    """A torch tensor as a numpy array of the same float format (bfloat16 through ml_dtypes)."""
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().view(ml_dtypes.bfloat16).copy()
    return t.numpy().copy()


def from_np(a: np.ndarray) -> torch.Tensor:
    if a.dtype == ml_dtypes.bfloat16:
        return torch.from_numpy(a.view(np.int16).copy()).view(torch.bfloat16)
    return torch.from_numpy(a.copy())


def same_bits(a, b) -> bool:
    (ba, fa), (bb, fb) = array_bits(a), array_bits(b)
    return fa == fb and ba.shape == bb.shape and bool((ba == bb).all())


params_st = st.integers(1, 40).flatmap(lambda n: st.lists(
    st.floats(-1e4, 1e4, allow_nan=False, width=32) | st.sampled_from([0.0, -0.0, 1e-6, 65504.0, -3e-8]),
    min_size=n, max_size=n))
dtype_st = st.sampled_from(list(DTYPES))
sigma_st = st.floats(1e-4, 2.0, allow_nan=False) | st.sampled_from([0.017, 1.0, P.GLOBAL_POPULATION * 1e-3])


def _params(values, name) -> np.ndarray:
    return np.array(values, dtype=np.float32).astype(R.NP_DTYPES[name])


# -- registration and utilities -------------------------------------------------------------------------
def test_registered_as_a_loop_profile_not_a_trainer_profile():
    assert LOOP_PROFILES["skill-sample"] is P.PROFILE
    assert P.PROFILE.version == P.VERSION == 1
    assert "skill-sample" not in PROFILES              # the Trainer cannot run it: Config refuses the name


UTILITIES_HEX = ["0x3fc9ec9aaa815504", "0x3fc37173ffe0ffc3", "0x3fbf4dd2ef2ff98d", "0x3fb9ec9aaa815504",
                 "0x3fb5c059789ccf25", "0x3fb2578599ef4f0c", "0x3faeeb1d009e5aa4", "0x3fa9ec9aaa815506",
                 "0x3fa584e112ba9223", "0x3fa1941846b84941", "0x3f9c0713a5560076", "0x3f9584e112ba9223",
                 "0x3f8f104086bef021", "0x3f83fa0958741684", "0x3f734f712ca1ea91"]


def test_utilities_known_answer():
    u = P.utilities()
    assert u.dtype == np.float64 and u.shape == (30,)
    assert [f"0x{int(b):016x}" for b in u[:15].view(np.uint64)] == UTILITIES_HEX
    assert (u[15:] == 0).all() and not np.signbit(u[15:]).any()    # log(16) - log(16) = +0: members 15.. get nothing
    assert same_bits(u, R.utilities())
    assert P.UTILITY_LOG is math.log


def test_utilities_log_reading_is_one_constant(monkeypatch):
    """Changing the reading is one constant; a log off by one ulp at log(3) changes the weights' bits."""
    def off(x):
        return np.nextafter(math.log(x), np.inf) if x == 3 else math.log(x)
    monkeypatch.setattr(P, "UTILITY_LOG", off)
    assert not same_bits(P.utilities(), R.utilities())


# -- noise --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("seed,n", [(0, 1), (42, 17), (2**32 - 1, 5), (170, 64)])
def test_native_noise_is_the_legacy_global_stream_without_touching_it(seed, n):
    saved = np.random.get_state()
    try:
        _native_vs_global(seed, n)
    finally:
        np.random.set_state(saved)                  # this test's own use of the global generator leaves no trace


def _native_vs_global(seed, n):
    np.random.seed(12345)
    before = np.random.get_state(legacy=False)
    got = S.native_noise(seed, n)
    after = np.random.get_state(legacy=False)
    assert before["state"]["key"].tolist() == after["state"]["key"].tolist() and before["state"]["pos"] == \
        after["state"]["pos"]
    np.random.seed(seed)
    want = np.random.randn(n)
    assert got.dtype == np.float64 and same_bits(got, want)


@pytest.mark.parametrize("seed", [0, 42, 71, 2**32 - 1])
def test_contract_noise_is_the_f32_stream_of_the_seed_widened(seed):
    got = S.contract_noise(seed, 23)
    assert got.dtype == np.float64
    assert same_bits(got.astype(np.float32), rng.gaussian(seed, 23, 0, "poly32"))
    assert same_bits(got.astype(np.float32).astype(np.float64), got)          # every value an exact f32
    assert same_bits(got, R.noise(seed, 23, "contract"))                       # the scalar reference
    assert rng.stream_seed(seed, 0, "correlated") == seed
    for backend in rng.available_backends("cpu"):
        assert same_bits(S.contract_noise(seed, 23, backend=backend), got)


@pytest.mark.parametrize("bad", [-1, 2**32, 2**40])
def test_seeds_outside_numpys_legacy_range_are_refused(bad):
    with pytest.raises(ValueError, match=r"outside \[0, 2\*\*32\).*np.random.seed"):
        S.native_noise(bad, 3)
    with pytest.raises(ValueError, match=r"outside \[0, 2\*\*32\)"):
        S.contract_noise(bad, 3)
    with pytest.raises(ValueError):
        np.random.RandomState(bad)                  # numpy's own refusal, which the page hits


def test_a_run_whose_last_seed_is_too_large_fails_before_any_reward():
    calls = []
    with pytest.raises(ValueError, match="4294967296 is outside"):
        S.run_skill_loop(torch.zeros(3), generations=2, population=5, sigma=0.1, lr=0.1,
                         seed_base=2**32 - 9, reward=lambda v: calls.append(1) or 0.0)
    assert calls == []


# -- the measured roundings, against torch itself -----------------------------------------------------
def page_perturb(params: torch.Tensor, noise: np.ndarray, sigma: float) -> torch.Tensor:
    """The page's two lines, literally (torch 2.13 CPU decides every rounding)."""
    return params + sigma * torch.tensor(noise, dtype=params.dtype)


def page_apply(params: torch.Tensor, acc: np.ndarray, lr: float, sigma: float) -> torch.Tensor:
    return params.cpu() + (lr / sigma) * torch.tensor(acc, dtype=params.dtype)


@pytest.mark.parametrize("name", ["f16", "bf16"])
def test_torch_rounds_f64_to_half_through_f32(name):
    """The measurement behind q = rd_dt(rd32(noise)): a double rounding, not numpy's direct one."""
    seed, elements = skill_area.NOISE_DOUBLE_ROUNDING[name]
    x = S.native_noise(seed, 64)
    torch_q = to_np(torch.tensor(x, dtype=DTYPES[name]))
    via32 = x.astype(np.float32).astype(R.NP_DTYPES[name])
    direct = x.astype(R.NP_DTYPES[name])
    assert same_bits(torch_q, via32)
    assert np.flatnonzero(array_bits(torch_q)[0] != array_bits(direct)[0]).tolist() == elements
    assert same_bits(P.noise_to_dtype(x, DTYPES[name]), torch_q)


@pytest.mark.parametrize("name", ["f16", "bf16"])
def test_torch_keeps_the_python_scalar_in_f32_and_rounds_the_product_twice(name):
    sigma = skill_area.SCALAR_DOUBLE_ROUNDING[name]
    q = torch.tensor(S.native_noise(46, 64), dtype=DTYPES[name])
    got = to_np(sigma * q)
    qn = to_np(q)
    twice = (qn.astype(np.float32) * np.float32(sigma)).astype(R.NP_DTYPES[name])
    once = (qn.astype(np.float64) * float(np.float32(sigma))).astype(R.NP_DTYPES[name])
    assert same_bits(got, twice)
    assert np.flatnonzero(array_bits(got)[0] != array_bits(once)[0]).tolist() == [29]


@SETTINGS
@given(dtype_st, params_st, sigma_st, st.integers(0, 2**32 - 1))
def test_perturb_equals_the_page_expression_and_the_reference(name, values, sigma, seed):
    params = _params(values, name)
    noise = S.native_noise(seed, params.size) * (1 if seed % 3 else 1e3)     # some beyond f16's range
    ours = P.perturb(from_np(params), noise, sigma)
    assert ours.dtype == DTYPES[name]
    assert same_bits(ours, page_perturb(from_np(params), noise, sigma))
    assert same_bits(ours, R.perturb(params, noise, sigma))


@pytest.mark.cuda
@SETTINGS
@given(dtype_st, params_st, sigma_st, st.floats(1e-5, 1.0), st.integers(0, 2**32 - 1))
def test_on_cuda_tensors_perturb_and_apply_are_the_pages_lines_and_the_cpu_bits(name, values, sigma, lr, seed):
    """Rule `cuda`: perturb and apply on a CUDA vector give the page's own lines on CUDA (``params +
    sigma * torch.tensor(noise, dtype, device)``; the update on the CPU, moved back) and the CPU bits."""
    params = _params(values, name)
    noise = S.native_noise(seed, params.size) * (1 if seed % 3 else 1e3)
    gpu = from_np(params).cuda()
    ours = P.perturb(gpu, noise, sigma)
    page = gpu + sigma * torch.tensor(noise, dtype=gpu.dtype, device=gpu.device)
    assert ours.device.type == "cuda" and ours.dtype == DTYPES[name]
    assert same_bits(ours.cpu(), page.cpu()) and same_bits(ours.cpu(), R.perturb(params, noise, sigma))
    applied = P.apply(gpu, noise, lr, sigma)
    assert applied.device.type == "cuda"
    assert same_bits(applied.cpu(), page_apply(gpu, noise, lr, sigma)) and same_bits(
        applied.cpu(), P.apply(from_np(params), noise, lr, sigma))


@SETTINGS
# member m draws seed + m: the largest seed leaves room for 30 members below numpy's 2**32 (hypothesis found
# seed 4_294_967_267 with n = 30, whose last member is outside it: a fault of this test, kept as an example)
@given(dtype_st, params_st, st.floats(1e-5, 1.0), sigma_st, st.integers(0, 2**32 - 30), st.integers(1, 30))
@example("f32", [0.0], 1.0, 1.0, 2**32 - 30, 30)
def test_update_equals_the_page_expression_and_the_reference(name, values, lr, sigma, seed, n):
    params = _params(values, name)
    eps = [S.native_noise(seed + m, params.size) for m in range(n)]
    z = S.zscore(np.random.default_rng(seed).standard_normal(n))
    u = P.utilities()
    acc = np.zeros(params.size)
    for m in range(n):
        P.accumulate(acc, eps[m], u[m], z[m])
    page_acc = np.zeros(params.size)
    for m in range(n):
        page_acc += u[m] * eps[m] * z[m]                       # the page's line, literally
    assert same_bits(acc, page_acc)
    ours = P.apply(from_np(params), acc, lr, sigma)
    assert same_bits(ours, page_apply(from_np(params), page_acc, lr, sigma))
    assert same_bits(ours, R.update(params, eps, z, R.utilities(), lr, sigma))


@pytest.mark.parametrize("name", list(DTYPES))
def test_large_vectors_match_torch_too(name):
    """2**16 + 3 elements: torch's vectorised body and its tail, over its threads, round as the profile does."""
    n = (1 << 16) + 3
    params = torch.tensor(np.random.default_rng(1).standard_normal(n), dtype=DTYPES[name])
    noise = S.native_noise(7, n)
    assert same_bits(P.perturb(params, noise, 0.017), page_perturb(params, noise, 0.017))
    acc = noise * 0.3
    assert same_bits(P.apply(params, acc, 0.001, 0.017), page_apply(params, acc, 0.001, 0.017))


# -- the loop -----------------------------------------------------------------------------------------
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(dtype_st, st.integers(1, 12), st.integers(1, 30), st.integers(1, 2), st.sampled_from(["native", "contract"]),
       st.integers(0, 10**6), st.sampled_from([(0.017, 0.001), (0.05, 0.02), (1.0, 0.5)]))
def test_loop_equals_the_reference(name, numel, n, generations, noise, seed_base, sl):
    sigma, lr = sl
    params = _params(np.random.default_rng(numel).standard_normal(numel), name)
    rewards = np.random.default_rng([seed_base, n]).standard_normal((generations, n)).round(3).tolist()
    calls = iter([r for gen in rewards for r in gen])
    out = S.run_skill_loop(from_np(params), generations=generations, population=n, sigma=sigma, lr=lr,
                           seed_base=seed_base, noise=noise, reward=lambda v: next(calls))
    want = R.run(params, rewards, n, sigma, lr, seed_base, noise)
    assert len(out["tape"]) == generations
    for rec, ref in zip(out["tape"], want):
        assert same_bits(rec["model"], ref["model"])
        assert same_bits(rec["z"], ref["z"])
        assert same_bits(rec["params"], ref["params"])
    assert same_bits(out["params"], want[-1]["params"])


def test_tape_reward_calls_and_noise_draws(monkeypatch):
    flat = torch.linspace(-1, 1, 9)
    original = flat.clone()
    seen, draws = [], []
    real = S.native_noise
    monkeypatch.setattr(S, "native_noise", lambda seed, n: draws.append(seed) or real(seed, n))
    out = S.run_skill_loop(flat, generations=2, population=3, sigma=0.1, lr=0.05, seed_base=10,
                           reward=lambda v: seen.append(v.clone()) or float(v.sum()))
    assert torch.equal(flat, original)                         # the caller's vector is not modified
    assert [t["seeds"] for t in out["tape"]] == [[10, 11, 12], [13, 14, 15]]
    assert draws == [10, 11, 12] * 2 + [13, 14, 15] * 2       # each member drawn once to perturb, once to update
    assert len(seen) == 6
    for g, rec in enumerate(out["tape"]):
        assert rec["model"] is not rec["params"]
        assert torch.equal(rec["model"], seen[3 * g + 2])      # the model holds the LAST member's vector
        assert same_bits(rec["rewards"], np.array([float(v.sum()) for v in seen[3 * g:3 * g + 3]]))
        start = flat if g == 0 else out["tape"][g - 1]["params"]
        for m in range(3):
            assert torch.equal(seen[3 * g + m], P.perturb(start, real(rec["seeds"][m], 9), 0.1))
    assert torch.equal(out["params"], out["tape"][-1]["params"])
    assert out["utilities"].shape == (3,) and same_bits(out["utilities"], P.utilities()[:3])
    assert (out["profile"], out["version"], out["noise"], out["mapping"]) == ("skill-sample", 1, "native", None)


def test_equal_rewards_zscore():
    assert same_bits(S.zscore([0.1] * 5), np.zeros(5))
    assert same_bits(S.zscore([0.1] * 30), np.full(30, -2.7755575538591714e-09))
    assert same_bits(S.zscore([0.1] * 30), R.zscore([0.1] * 30))


def test_zero_weight_members_do_not_move_the_parameters():
    """At N = 30 only members 0..14 have weight: rewards of members 15..29 alone change nothing but z."""
    flat = torch.zeros(5)
    a = S.run_skill_loop(flat, generations=1, population=30, sigma=0.1, lr=0.1,
                         reward=lambda v, it=iter([0.0] * 15 + [1.0] * 15): next(it))
    step = P.apply(flat, sum((P.utilities()[m] * S.native_noise(42 + m, 5)) * a["tape"][0]["z"][m]
                             for m in range(15)), 0.1, 0.1)
    assert same_bits(a["params"], step)


@pytest.mark.parametrize("kwargs,match", [
    ({"population": 31}, r"population 31 > 30.*IndexError: index 30 is out of bounds"),
    ({"population": 0}, "population must be an int >= 1"),
    ({"sigma": 0.0}, "sigma must be non-zero"),
    ({"lr": float("nan")}, "lr must be a finite float"),
    ({"generations": -1}, "generations must be an int >= 0"),
    ({"noise": "torch"}, "noise: unknown value 'torch'"),
    ({"noise": "contract", "mapping": "libm32"}, "libm32"),
    ({"noise": "native", "backend": "numba"}, "applies only to noise='contract'"),
])
def test_bad_arguments_name_the_field(kwargs, match):
    args = {"generations": 1, "population": 4, "sigma": 0.1, "lr": 0.1, **kwargs}
    with pytest.raises(ValueError, match=match):
        S.run_skill_loop(torch.zeros(3), reward=lambda v: 0.0, **args)


@pytest.mark.parametrize("flat,match", [(torch.zeros(2, 2), "flat 1-D"), (torch.zeros(3, dtype=torch.float64),
                                                                         "float64")])
def test_the_flat_vector_is_checked(flat, match):
    with pytest.raises(ValueError, match=match):
        S.run_skill_loop(flat, generations=1, population=2, sigma=0.1, lr=0.1, reward=lambda v: 0.0)


def test_bf16_runs_on_our_side():
    """The page crashes on bf16 (numpy has no bfloat16); our side computes what its lines would."""
    out = S.run_skill_loop(torch.ones(6, dtype=torch.bfloat16), generations=1, population=2, sigma=0.5, lr=0.5,
                           reward=lambda v, it=iter([1.0, 0.0]): next(it))
    want = R.run(np.ones(6, dtype=ml_dtypes.bfloat16), [[1.0, 0.0]], 2, 0.5, 0.5, 42, "native")
    assert same_bits(out["params"], want[0]["params"]) and not torch.equal(out["params"], torch.ones(6).bfloat16())


# -- findings helpers ---------------------------------------------------------------------------------
def test_utilities_by_member_demo_text():
    assert S.utilities_by_member_demo() == (
        "utilities are indexed by member number, not by reward rank: members 0 and 1 share one noise vector "
        "and swapping their rewards (1, 0) -> (0, 1) changes the update in 4 of 4 f32 elements (largest "
        "distance 1999194466 ulp; it flips sign); weights by reward rank change 0 of 4")
    assert S.utilities_by_member_demo(rewards=(2.0, 2.0)).endswith(
        "changes the update in 0 of 4 f32 elements (largest distance 0 ulp); weights by reward rank change 0 of 4")


def test_demo_distance_is_the_ulp_distance():
    eps = S.native_noise(42, 4)
    a = S._update(torch.zeros(4), [eps, eps], [1.0, 0.0], 0.001, 0.017)
    b = S._update(torch.zeros(4), [eps, eps], [0.0, 1.0], 0.001, 0.017)
    assert torch.equal(a, -b)
    d = ulp_distance(array_bits(a)[0], array_bits(b)[0], "f32")
    assert max(d) == 1999194466


def test_seed_overlaps():
    shared = S.seed_overlaps((42, 2, 30), (72, 2, 30))
    assert shared == [(72 + k, 1, k, 0, k) for k in range(30)]
    assert len(S.seed_overlaps((42, 100, 30), (72, 100, 30))) == 99 * 30
    assert S.seed_overlaps((42, 1, 30), (72, 5, 30)) == []
    assert S.seed_overlaps((0, 2, 5), (3, 1, 4)) == [(3, 0, 3, 0, 0), (4, 0, 4, 0, 1), (5, 1, 0, 0, 2),
                                                    (6, 1, 1, 0, 3)]
    assert S.seed_overlap_finding((42, 100, 30), (72, 100, 30)) == (
        "runs seed_base=42 (100 generation(s) x 30 members) and seed_base=72 (100 generation(s) x 30 members) "
        "draw 2970 seeds in common, so the same noise: seed 72 is generation 1 member 0 of the first and "
        "generation 0 member 0 of the second")
    assert S.seed_overlap_finding((42, 1, 30), (72, 1, 30)).endswith("draw no seed in common")


# -- the golden vectors pin the measured roundings ----------------------------------------------------
def _golden(id_: str) -> dict:
    return next(v for v in skill_area.generate() if v["id"] == id_)


@pytest.mark.parametrize("name", ["f16", "bf16"])
def test_noise_double_rounding_vector_fails_a_direct_rounding(monkeypatch, name):
    vector = _golden(f"noise-double-rounding-{name}")
    assert skill_area.recompute(vector, "numpy") == vector["expected"]
    monkeypatch.setattr(P, "noise_to_dtype", lambda noise, dtype: from_np(
        np.asarray(noise, np.float64).astype(R.NP_DTYPES[name])))
    got = skill_area.recompute(vector, "numpy")["g0.model"]["values"]
    bad = [i for i, (a, b) in enumerate(zip(got, vector["expected"]["g0.model"]["values"])) if a != b]
    assert bad == skill_area.NOISE_DOUBLE_ROUNDING[name][1]


@pytest.mark.parametrize("name", ["f16", "bf16"])
def test_scalar_double_rounding_vector_fails_a_single_rounding(monkeypatch, name):
    vector = _golden(f"scalar-double-rounding-{name}")

    def once(params, noise, sigma):
        q = to_np(P.noise_to_dtype(noise, params.dtype)).astype(np.float64)
        t = from_np((q * float(np.float32(sigma))).astype(R.NP_DTYPES[name]))   # exact f64 product, ONE rounding
        return (params.float() + t.float()).to(params.dtype)
    monkeypatch.setattr(P, "perturb", once)
    got = skill_area.recompute(vector, "numpy")["g0.model"]["values"]
    bad = [i for i, (a, b) in enumerate(zip(got, vector["expected"]["g0.model"]["values"])) if a != b]
    assert bad == [29]


def test_contract_libm64_noise_runs_too():
    """The loop takes either mapping; libm64 values are bit-exact per backend (numpy here, as the scalar reference)."""
    params = _params(np.linspace(-2, 2, 11), "f16")
    rewards = [[0.5, -1.0, 2.0]]
    out = S.run_skill_loop(from_np(params), generations=1, population=3, sigma=0.05, lr=0.02, noise="contract",
                           mapping="libm64", backend="numpy", reward=lambda v, it=iter(rewards[0]): next(it))
    want = R.run(params, rewards, 3, 0.05, 0.02, 42, "contract", mapping="libm64")
    assert same_bits(out["params"], want[0]["params"]) and out["mapping"] == "libm64"
    assert not same_bits(S.contract_noise(42, 11, "libm64"), S.contract_noise(42, 11, "poly32"))


@pytest.mark.parametrize("name", ["f16", "bf16"])
def test_update_double_rounding_vector_fails_a_direct_rounding(monkeypatch, name):
    vector = _golden(f"update-double-rounding-{name}")
    assert skill_area.recompute(vector, "numpy") == vector["expected"]
    real = P.noise_to_dtype

    def direct_for_acc(x, dtype):                 # the update's conversion only: its input is not a noise draw
        return real(x, dtype) if x is not acc_seen[-1] else from_np(np.asarray(x).astype(R.NP_DTYPES[name]))
    acc_seen = [None]
    real_apply = P.apply

    def apply(params, acc, lr, sigma):
        acc_seen.append(acc)
        return real_apply(params, acc, lr, sigma)
    monkeypatch.setattr(P, "noise_to_dtype", direct_for_acc)
    monkeypatch.setattr(P, "apply", apply)
    got = skill_area.recompute(vector, "numpy")
    assert got["g0.model"] == vector["expected"]["g0.model"]
    bad = [i for i, (a, b) in enumerate(zip(got["g0.params"]["values"], vector["expected"]["g0.params"]["values"]))
           if a != b]
    assert bad == [skill_area.UPDATE_DOUBLE_ROUNDING[name][1]]
