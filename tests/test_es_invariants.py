"""The trainer's invariants ("What must hold"), one test each, each stating its claim."""
from __future__ import annotations

import threading

import numpy as np
import pytest
import torch
from hypothesis import assume, example, given, settings
from hypothesis import strategies as st

from esverify.es import Config, Trainer, reference as R, shape_rewards, update_tensor_
from test_es_helpers import examples, TORCH, assert_bitwise, bits, dtypes, make_param, to_np, to_torch

PROFILES = ["es-at-scale", "es-awd"]


def _params(rng, dts=("f32", "f16", "bf16"), shapes=((33,), (4, 5), ())):
    return [to_torch(make_param(rng, s, d)) for s, d in zip(shapes, dts)]


def _same_values(a: torch.Tensor, b: torch.Tensor, what: str):
    """Equal values; the only allowed bit difference is -0 -> +0."""
    x, y = to_np(a).astype(np.float32), to_np(b).astype(np.float32)
    assert np.array_equal(x, y), f"{what}: values changed"
    xb, yb = bits(a), bits(b)
    diff = xb != yb
    assert np.all(x.reshape(-1)[diff] == 0) and np.all(np.signbit(y.reshape(-1)[diff]) == False), what


def _ulp(values: np.ndarray, dt: str) -> np.ndarray:
    """One ulp of `dt` at each value's magnitude (subnormal spacing at the bottom)."""
    mant, emin = {"f32": (23, -126), "f16": (10, -14), "bf16": (7, -126)}[dt]
    v = np.abs(values.astype(np.float64))
    e = np.floor(np.log2(np.where(v > 0, v, 2.0 ** emin)))
    return np.exp2(np.maximum(e, emin) - mant)


# -- constant rewards ----------------------------------------------------------
@pytest.mark.parametrize("n", [2, 4, 8, 16])
@pytest.mark.parametrize("profile", PROFILES)
def test_constant_rewards_zero_coefficients_change_nothing(n, profile):
    """Claim: N equal rewards (N a power of two) give z-score coefficients exactly 0,
    and such an update without anchored decay changes no value (-0 may become +0)."""
    rng = np.random.default_rng(n)
    params = _params(rng)
    params[0][:3] = torch.tensor([-0.0, 0.0, 1e-40])
    before = [p.clone() for p in params]
    for value in (0.1, -3.7, 1e300):
        stats = Trainer(params, Config(sigma=0.1, alpha=0.5, population=n, profile=profile)).update([value] * n)
        assert np.all(stats["coefficients"] == 0.0), stats["coefficients"]
        for k, (a, b) in enumerate(zip(before, params)):
            _same_values(a, b, f"slot {k}")


def test_constant_rewards_coefficients_as_described():
    """Claim (docs/numerics.md §2): at N = 30, R = 0.1 numpy's mean is inexact, so every coefficient is the
    same tiny value, (0.1 - mean) / (0 + 1e-8) with mean = numpy.mean, about -2.8e-9, not 0;
    centered ranks of equal rewards give the full spread by member index."""
    coeffs, stats = shape_rewards([0.1] * 30, "zscore")
    mean = np.mean(np.full(30, 0.1))
    assert stats["std"] == np.std(np.full(30, 0.1))
    assert np.all(coeffs == (0.1 - mean) / (stats["std"] + 1e-8))
    assert np.all(coeffs == coeffs[0]) and -3e-9 < coeffs[0] < -2.6e-9
    ranks, _ = shape_rewards([2.0] * 5, "centered_ranks")
    assert ranks.tolist() == [-0.5, -0.25, 0.0, 0.25, 0.5]


def test_centered_ranks_ties_and_monotone_invariance():
    """Claim: ties break by member index; any monotone transform of the rewards leaves the ranks."""
    r = [3.0, 1.0, 3.0, -2.0, 1.0]
    c, _ = shape_rewards(r, "centered_ranks")
    assert c.tolist() == [0.25, -0.25, 0.5, -0.5, 0.0]
    c2, _ = shape_rewards(np.exp(np.array(r)) * 7 - 1, "centered_ranks")
    assert c2.tolist() == c.tolist()
    c9, _ = shape_rewards(list(range(10)), "centered_ranks")
    assert c9.tolist() == [float(np.float32(np.float32(k / 9) - np.float32(0.5))) for k in range(10)]


# -- duplication -----------------------------------------------------------------
@settings(max_examples=examples(20))
@given(dtypes, st.sampled_from(PROFILES), st.integers(1, 8), st.integers(0, 2**32 - 1),
       st.sampled_from(["zscore", "none"]))
def test_duplicating_members_moves_at_most_one_ulp(dt, profile, n, data_seed, shaping):
    """Claim: duplicating every member (same noise, same reward), parameters in [1, 2),
    changes the updated parameters by at most one ulp of their dtype per element.
    (Centered ranks of duplicated rewards are another spread by design: not this claim.)"""
    rng = np.random.default_rng(data_seed)
    size = 75
    mant = {"f32": 23, "f16": 10, "bf16": 7}[dt]
    theta = np.minimum(R.rd((1 + rng.random(size)).astype(np.float32), dt).astype(np.float32),
                       np.float32(2 - 2.0 ** -mant))
    noises = [torch.from_numpy(rng.standard_normal(size).astype(np.float32)) for _ in range(n)]
    rewards = rng.standard_normal(n).tolist()
    c1, _ = shape_rewards(rewards, shaping)
    c2, _ = shape_rewards([r for r in rewards for _ in (0, 1)], shaping)
    one = torch.from_numpy(theta).to(TORCH[dt])
    two = one.clone()
    update_tensor_(one, noises, c1, 0.05, n, profile)
    update_tensor_(two, [e for e in noises for _ in (0, 1)], c2, 0.05, 2 * n, profile)
    a, b = to_np(one).astype(np.float64), to_np(two).astype(np.float64)
    assert np.all(np.abs(a - b) <= _ulp(np.maximum(np.abs(a), np.abs(b)), dt)), np.max(np.abs(a - b))


# -- z-score under a shift ---------------------------------------------------------
@settings(max_examples=examples(80))
@given(st.lists(st.integers(-2**20, 2**20), min_size=2, max_size=40), st.floats(-1, 1), st.integers(-20, 20))
@example(ints=[0, 0, 1], shift_frac=0.99, exp=0)
def test_zscore_shift_moves_coefficients_at_most_16_ulps(ints, shift_frac, exp):
    """Claim: a reward shift exact in f64 moves every z-score coefficient by at most 16 ulps
    (f64) of max|C|, for rewards within 8 standard deviations of zero before and after the
    shift. (Scale is not invariant because of the 1e-8, so it is not tested.)

    The domain matters: numpy's mean of shifted rewards is rounded at the shifted magnitude,
    so the error grows like max|R| / std (see the next test)."""
    r = np.array(ints, dtype=np.float64) * 2.0 ** exp
    std = float(np.std(r))
    assume(std > 0)
    s = float(np.round(shift_frac * 8 * std / 2.0 ** exp)) * 2.0 ** exp
    assert np.all((r + s) - s == r)  # the shift is exact
    assume(max(np.max(np.abs(r)), np.max(np.abs(r + s))) <= 8 * std)
    c1, _ = shape_rewards(r, "zscore")
    c2, _ = shape_rewards(r + s, "zscore")
    assert np.max(np.abs(c1 - c2)) <= 16 * np.spacing(np.max(np.abs(c1)))


def test_zscore_shift_far_beyond_the_spread_exceeds_16_ulps():
    """Known answer for the limit of the claim above: rewards [0, 0, 1] shifted by 32 (exact)
    move the coefficients by 5.107e-15 = 23 ulps of max|C| = sqrt(2): numpy's mean 32.333...
    is rounded at magnitude 32, an error that the division by std (0.471) magnifies."""
    c1, _ = shape_rewards([0.0, 0.0, 1.0], "zscore")
    c2, _ = shape_rewards([32.0, 32.0, 33.0], "zscore")
    ulps = np.max(np.abs(c1 - c2)) / np.spacing(np.max(np.abs(c1)))
    assert ulps == 23.0


# -- alpha = 0 ------------------------------------------------------------------
@pytest.mark.parametrize("profile", PROFILES)
@pytest.mark.parametrize("antithetic", [False, True])
def test_alpha_zero_changes_nothing(profile, antithetic):
    """Claim: alpha = 0 without anchored decay changes no value (a -0 may become +0)."""
    rng = np.random.default_rng(5)
    params = _params(rng)
    params[1].view(-1)[0] = -0.0
    before = [p.clone() for p in params]
    tr = Trainer(params, Config(sigma=0.5, alpha=0.0, population=6, antithetic=antithetic, profile=profile))
    tr.update(rng.standard_normal(6) * 100)
    for k, (a, b) in enumerate(zip(before, params)):
        _same_values(a, b, f"slot {k}")


# -- antithetic ------------------------------------------------------------------
@pytest.mark.parametrize("profile", PROFILES)
@pytest.mark.parametrize("scheme", ["iid", "correlated"])
def test_antithetic_members_are_exact_negations_on_zero_params(profile, scheme):
    """Claim: on zero parameters, member 2k+1's perturbed values are the exact negation of
    member 2k's: nonzero values bit for bit; where t underflows both are zero (+0 under
    es-at-scale, where theta + t adds a signed zero to +0; es-awd rounds the fused x + y*k
    once, so a negative underflow there is -0: equal in value)."""
    params = [torch.zeros(37), torch.zeros(4000, dtype=torch.float16), torch.zeros((), dtype=torch.bfloat16),
              torch.zeros(33, dtype=torch.bfloat16)]
    tr = Trainer(params, Config(sigma=1e-5, population=6, antithetic=True, profile=profile, scheme=scheme))
    underflows = 0
    for k in range(3):
        plus = [torch.empty_like(p) for p in params]
        minus = [torch.empty_like(p) for p in params]
        tr.materialize(2 * k, plus)
        tr.materialize(2 * k + 1, minus)
        for a, b in zip(plus, minus):
            x, y = to_np(a).astype(np.float32), to_np(b).astype(np.float32)
            assert np.array_equal(x, -y)
            zeros = x == 0
            underflows += int(zeros.sum())
            assert np.array_equal(np.signbit(x[~zeros]), ~np.signbit(y[~zeros]))
            if profile == "es-at-scale":
                assert not np.any(np.signbit(x[zeros]) | np.signbit(y[zeros]))
    assert underflows > 0  # the f16 slot at sigma 1e-5 exercises the underflow case


def test_antithetic_fold_regenerates_each_pair_once():
    """Claim: the antithetic update draws each pair's noise once: N/2 * P elements, half of
    the non-antithetic update's N * P."""
    params = [torch.zeros(37), torch.zeros(40, dtype=torch.float16)]
    p_count = 77
    for antithetic, per in ((True, 4), (False, 8)):
        tr = Trainer(params, Config(population=8, antithetic=antithetic, chunk_elements=16))
        before = tr.noise.elements
        tr.update(np.arange(8.0))
        assert tr.noise.elements - before == per * p_count


def test_antithetic_fold_is_the_difference_of_coefficients():
    """Claim (docs/numerics.md §4): the applied term of pair k is D_k = C_2k - C_2k+1 in f64, divisor N."""
    tr = Trainer([torch.zeros(5)], Config(population=6, antithetic=True))
    stats = tr.update([1.0, 4.0, 2.0, 2.0, -1.0, 7.5])
    c = stats["coefficients"]
    assert stats["terms"].tolist() == [c[0] - c[1], c[2] - c[3], c[4] - c[5]]


# -- restore ------------------------------------------------------------------------
@settings(max_examples=examples(20))
@given(dtypes, st.sampled_from(PROFILES), st.sampled_from([1e-3, 0.1, 3.0]), st.integers(0, 2**32 - 1),
       st.integers(0, 3))
def test_restore_modes(dt, profile, sigma, data_seed, member):
    """Claim: `snapshot` restore is bitwise; `regenerate` leaves each element within one ulp
    of its dtype at the perturbed value's magnitude."""
    rng = np.random.default_rng(data_seed)
    init = to_torch(make_param(rng, (70,), dt, scale=float(rng.choice([1e-3, 1.0, 100.0]))))
    for restore in ("snapshot", "regenerate"):
        p = init.clone()
        tr = Trainer([p], Config(sigma=sigma, population=4, restore=restore, profile=profile, chunk_elements=9))
        tr.perturb(member)
        perturbed = to_np(p).astype(np.float64)
        tr.restore(member)
        if restore == "snapshot":
            assert_bitwise(p, init, "snapshot")
        else:
            err = np.abs(to_np(p).astype(np.float64) - to_np(init).astype(np.float64))
            assert np.all(err <= _ulp(perturbed, dt)), np.max(err)


# -- materialize -------------------------------------------------------------------
@pytest.mark.parametrize("profile", PROFILES)
def test_materialize_equals_perturb_from_threads(profile):
    """Claim: materialize(m) writes exactly perturb(m)'s bits, also when 4 threads call it at once,
    and leaves theta untouched."""
    rng = np.random.default_rng(11)
    params = _params(rng, shapes=((101,), (3, 11), ()))
    init = [p.clone() for p in params]
    tr = Trainer(params, Config(sigma=0.1, population=8, antithetic=True, profile=profile, chunk_elements=10,
                                restore="snapshot"))  # regenerate would move theta by an ulp between members
    outs = {m: [torch.empty_like(p) for p in params] for m in range(8)}
    threads = [threading.Thread(target=lambda m=m: tr.materialize(m, outs[m])) for m in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for p, q in zip(params, init):
        assert_bitwise(p, q, "theta touched")
    for m in range(8):
        tr.perturb(m)
        for k, p in enumerate(params):
            assert_bitwise(outs[m][k], p, f"member {m} slot {k}")
        tr.restore(m)
    named = {f"slot{k}": torch.empty_like(p) for k, p in enumerate(params)}
    tr.materialize(3, named)
    assert_bitwise(named["slot0"], outs[3][0], "dict out")


# -- resume ----------------------------------------------------------------------------
@pytest.mark.parametrize("profile,decay", [("es-at-scale", "none"), ("es-awd", "l2"), ("es-at-scale", "l1"),
                                           ("es-awd", "none")])
def test_resume_is_bitwise(profile, decay):
    """Claim: K iterations in one trainer equal k iterations, state_dict, a fresh trainer on the
    initial weights, load_state_dict, the checkpointed weights copied in, K-k more, bitwise."""
    rng = np.random.default_rng(21)
    init = _params(rng, shapes=((45,), (2, 9), ()))
    cfg = Config(sigma=0.05, alpha=0.2, population=4, profile=profile, anchor_decay=decay,
                 anchor_lambda=0.3 if decay != "none" else 0.0, scheme="iid", shaping="centered_ranks")
    target = [torch.full_like(p, 0.5) for p in init]

    def evaluate(params):
        return lambda m: -float(sum(((p.float() - t.float()) ** 2).sum() for p, t in zip(params, target)))

    k_total, k = 5, 2
    full = [p.clone() for p in init]
    tr = Trainer(full, cfg)
    for _ in range(k_total):
        tr.step(evaluate(full))
    part = [p.clone() for p in init]
    tr1 = Trainer(part, cfg)
    for _ in range(k):
        tr1.step(evaluate(part))
    state, weights = tr1.state_dict(), [p.clone() for p in part]
    import json
    state = json.loads(json.dumps(state))  # holds no tensors: survives JSON
    fresh = [p.clone() for p in init]
    tr2 = Trainer(fresh, Config(profile=profile, anchor_decay=decay, anchor_lambda=0.3 if decay != "none" else 0.0,
                                chunk_elements=7))
    tr2.load_state_dict(state)
    for p, w in zip(fresh, weights):
        p.copy_(w)
    assert tr2.iteration == k
    for _ in range(k_total - k):
        tr2.step(evaluate(fresh))
    for i, (a, b) in enumerate(zip(full, fresh)):
        assert_bitwise(b, a, f"slot {i}")
