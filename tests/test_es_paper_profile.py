"""The `es-paper` profile, seed schedule and loop (docs/numerics.md §3 `es-paper`; docs/references.md §6).

Known answers (pinned bit patterns), the torch ops the scripts call against
the profile's kernels and against the straight-line numpy lines of
esverify.es.reference (hypothesis over bit patterns: subnormals, ties,
large N), the private RandomState against numpy's legacy global
generator, run_paper_loop against esverify.es.reference.paper_loop, and
the restore drift that gpu_threads > 1 makes visible.
"""
from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from esverify.es import Config, Trainer, get_profile
from esverify.es import reference as R
from esverify.es.kernels import update_tensor_
from esverify.es.numerics import NAME_DTYPES
from esverify.references.es_paper.loop import normalise, run_paper_loop
from esverify.references.es_paper import profile as es_paper
from esverify.es.schedule import SCHEDULES, reference_seeds
from esverify.references.es_paper import model as P
from esverify.references.es_paper.schedule import seed_stream as paper_seed_stream

NP = {"f32": np.float32, "f16": np.float16, "bf16": ml_dtypes.bfloat16}
UINT = {"f32": np.uint32, "f16": np.uint16, "bf16": np.uint16}
SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def bits(a) -> np.ndarray:
    """The bit patterns of a torch tensor or numpy array (f32/f16/bf16) as unsigned ints."""
    if isinstance(a, torch.Tensor):
        a = a.detach().view(torch.int32 if a.dtype == torch.float32 else torch.int16).numpy()
        return a.view(np.uint32 if a.dtype == np.int32 else np.uint16).reshape(-1)
    return np.asarray(a).view(np.uint32 if a.dtype.itemsize == 4 else np.uint16).reshape(-1)


def to_np(t: torch.Tensor, name: str) -> np.ndarray:
    return t.detach().to(torch.float32).numpy().astype(NP[name])


def to_t(a: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.asarray(a).astype(np.float32)).to(NAME_DTYPES[R.dtype_name(a)])


def ndiff(a, b) -> int:
    """How many elements differ in bits (the failure message of a bitwise assertion)."""
    return int((bits(a) != bits(b)).sum())


# -- strategies: finite bit patterns of a dtype (subnormals, zeros of both signs, ties) -----------
def finite_arrays(name: str, max_size: int = 300):
    def build(raw):
        a = np.asarray(raw, dtype=UINT[name]).view(NP[name])
        return np.where(np.isfinite(a.astype(np.float32)), a, NP[name](1.0)).astype(NP[name])
    top = (1 << 32) - 1 if name == "f32" else (1 << 16) - 1
    return st.lists(st.integers(0, top), min_size=1, max_size=max_size).map(build)


# scalars: plain floats, short (few significand bits: products land on ties) and subnormal-making ones
SCALARS = st.one_of(st.floats(-1e3, 1e3, allow_nan=False, allow_infinity=False, width=64),
                    st.builds(lambda m, e: math.ldexp(m, e), st.integers(-64, 64), st.integers(-30, 4)),
                    st.sampled_from([0.001, -0.001, 0.0005, 1 / 3, 1e-39, -1e-39, 2.5e-4, 0.0]))
DTYPE_NAMES = st.sampled_from(["f32", "f16", "bf16"])
# populations N of div_(N): small, any, and ones whose f32 reciprocal or quotient is delicate
DIVISORS = st.one_of(st.integers(1, 64), st.integers(1, 10 ** 7), st.sampled_from([30, 1000, 2 ** 24 + 1]))


# -- known answers ----------------------------------------------------------------------------------
def test_div_is_a_true_division_known_answer():
    """f32 3.0 / 30 is 0x3dcccccd; a multiply by rd32(1/30) gives 0x3dccccce (the naive reading)."""
    t = torch.tensor([3.0])
    assert bits(es_paper.div_int(t, 30))[0] == 0x3DCCCCCD
    assert bits(P.div(np.array([3.0], np.float32), 30))[0] == 0x3DCCCCCD
    assert bits(t.clone().div_(30))[0] == 0x3DCCCCCD
    assert np.float32(np.float32(3.0) * np.float32(1 / 30)).view(np.uint32) == 0x3DCCCCCE


def test_scalar_stays_f32_for_f16_known_answer():
    """f16 0.046875 * 0.001 is 0x0312 (a subnormal); rounding the scalar to f16 first gives 0x0313."""
    x = torch.tensor([0.046875], dtype=torch.float16)
    assert bits(x * 0.001)[0] == 0x0312
    assert bits(es_paper.mul_scalar(x, 0.001))[0] == 0x0312
    assert bits(P.mul(np.array([0.046875], np.float16), 0.001))[0] == 0x0312
    naive = (x.float() * torch.tensor(0.001, dtype=torch.float16).float()).half()
    assert bits(naive)[0] == 0x0313


def test_restore_drift_known_answer():
    """f16 theta = 1.0, noise f16(10/37): perturb by sigma 0.001 and restore gives 0x3bff, not 0x3c00."""
    theta, q = np.array([1.0], np.float16), np.array([10 / 37], np.float32).astype(np.float16)
    back = P.perturb(P.perturb(theta, q, 0.001), q, -0.001)
    assert bits(back)[0] == 0x3BFF
    t = torch.tensor([1.0], dtype=torch.float16)
    n = torch.from_numpy(q.copy())
    t.add_(0.001 * n)
    t.add_(-0.001 * n)
    assert bits(t)[0] == 0x3BFF


def test_normalise_equal_rewards_known_answer():
    """30 equal rewards 0.1: numpy's f32 mean is not exact, so every coefficient is 0.59841228 (0x3f1931c0)."""
    r, norm = normalise([0.1] * 30)
    assert r.dtype == norm.dtype == np.float32
    assert set(bits(r).tolist()) == {0x3DCCCCCD}
    assert set(bits(norm).tolist()) == {int(np.float32(0.598412275314331).view(np.uint32))}
    assert norm[0] == np.float32(0.598412275314331)
    r2, norm2 = normalise([0.5] * 32)       # an exact mean: zeros
    assert not norm2.any()


def test_normalise_is_numpys_f32_expression():
    rewards = [0.25, -1.5, 3.0000001, 7.0, 1e-3]
    r = np.array(rewards, dtype=np.float32)
    want = (r - r.mean()) / (r.std() + 1e-8)
    got_r, got = normalise(rewards)
    assert np.array_equal(bits(got_r), bits(r)) and np.array_equal(bits(got), bits(want.astype(np.float32)))
    assert np.array_equal(bits(got), bits(P.normalise(rewards)[1]))


def test_seed_schedule_known_answer():
    """The scripts' first five seeds at initial_seed 33 (numpy 2.4's legacy MT19937)."""
    assert next(paper_seed_stream(33, 5)) == [1067342868, 814680455, 858887896, 727056962, 691235474]
    assert "es-paper" in SCHEDULES


# -- the legacy-numpy equivalence ------------------------------------------------------------------
@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2 ** 32 - 1), count=st.integers(0, 40), iterations=st.integers(1, 4))
def test_private_randomstate_equals_numpys_global_generator(seed, count, iterations):
    state = np.random.get_state()
    try:
        np.random.seed(seed)
        want = [np.random.randint(0, 2 ** 30, size=count, dtype=np.int64).tolist() for _ in range(iterations)]
    finally:
        np.random.set_state(state)
    before = np.random.get_state()[1].copy()
    stream = paper_seed_stream(seed, count)
    got = [next(stream) for _ in range(iterations)]
    assert got == want
    assert got == P.seed_lists(seed, iterations, count)
    assert [reference_seeds("es-paper", seed, i, count) for i in range(iterations)] == want
    assert np.array_equal(np.random.get_state()[1], before)      # numpy's global state untouched


def test_seed_schedule_refuses_out_of_range_seeds():
    for bad in (-1, 2 ** 32, True):
        with pytest.raises(ValueError, match="initial_seed"):
            next(paper_seed_stream(bad, 3))


# -- each op: torch == the profile's kernel == the numpy reference, bitwise -------------------------
@SETTINGS
@given(data=st.data(), name=DTYPE_NAMES, c=SCALARS)
def test_mul_scalar_torch_kernel_reference(data, name, c):
    x = data.draw(finite_arrays(name))
    t = to_t(x)
    with np.errstate(all="ignore"):
        want = P.mul(x, c)
    assert np.array_equal(bits(t * c), bits(want))
    inplace = t.clone()
    inplace.mul_(c)
    assert np.array_equal(bits(inplace), bits(want))
    assert np.array_equal(bits(es_paper.mul_scalar(t, c)), bits(want))


@SETTINGS
@given(data=st.data(), name=DTYPE_NAMES)
def test_add_torch_kernel_reference(data, name):
    x = data.draw(finite_arrays(name))
    y = data.draw(finite_arrays(name, len(x)).filter(lambda a: len(a) == len(x))) if len(x) < 4 else \
        np.resize(data.draw(finite_arrays(name)), len(x)).astype(NP[name])
    t = to_t(x)
    with np.errstate(all="ignore"):
        want = P.add(x, y)
    t.add_(to_t(y))
    assert np.array_equal(bits(t), bits(want))
    assert np.array_equal(bits(es_paper.add(to_t(x), to_t(y))), bits(want))


@SETTINGS
@given(data=st.data(), name=DTYPE_NAMES, n=DIVISORS)
def test_div_torch_kernel_reference(data, name, n):
    x = data.draw(finite_arrays(name))
    t = to_t(x)
    with np.errstate(all="ignore"):
        want = P.div(x, n)
    t.div_(n)
    assert np.array_equal(bits(t), bits(want))
    assert np.array_equal(bits(es_paper.div_int(to_t(x), n)), bits(want))


def test_cuda_rule_divides_by_the_f32_reciprocal_known_answer():
    """Rule `cuda` (torch's CUDA div_ by an int, measured on an H200: a multiply by the f32 reciprocal):
    f32 3.0 / 30 is 3 * rd32(1/30) = 0x3dccccce, one ulp above the true division of rule `cpu`."""
    t = torch.tensor([3.0])
    assert bits(es_paper.div_int(t, 30, "cuda"))[0] == 0x3DCCCCCE
    assert bits(es_paper.div_int(t, 30, "cpu"))[0] == 0x3DCCCCCD
    assert bits(P.div(np.array([3.0], np.float32), 30, "cuda"))[0] == 0x3DCCCCCE
    assert es_paper.reciprocal32(30) == float(np.float32(1.0) / np.float32(30.0))
    assert (es_paper.rule_for("cuda:0"), es_paper.rule_for("cpu"), es_paper.PROFILE.rules) == ("cuda", "cpu",
                                                                                               ("cpu", "cuda"))
    with pytest.raises(ValueError, match="unknown es-paper rule"):
        es_paper.div_int(t, 30, "portable")


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.cuda)])
@SETTINGS
@given(data=st.data(), name=DTYPE_NAMES, n=DIVISORS)
def test_cuda_rule_div_equals_the_model_and_torchs_cuda_kernel(device, data, name, n):
    """The profile's `cuda` division equals the straight-line model's line, bit for bit, on either device;
    on a CUDA device torch's own ``div_(n)`` gives the same bits."""
    x = data.draw(finite_arrays(name))
    with np.errstate(all="ignore"):
        want = P.div(x, n, "cuda")
    t = to_t(x).to(device)
    assert np.array_equal(bits(es_paper.div_int(t, n, "cuda").cpu()), bits(want))
    if device == "cuda":
        t.div_(n)
        assert np.array_equal(bits(t.cpu()), bits(want))


def test_ops_on_large_tensors_and_every_tail():
    """Sizes 1..130 and 100003 with 1 and 2 torch threads: no per-thread tail as under es-awd."""
    rng = np.random.default_rng(5)
    threads = torch.get_num_threads()
    try:
        for nthreads in (1, 2):
            torch.set_num_threads(nthreads)
            for name in ("f32", "f16", "bf16"):
                for size in (*range(1, 131, 7), 100003):
                    x = rng.standard_normal(size).astype(np.float32).astype(NP[name])
                    y = rng.standard_normal(size).astype(np.float32).astype(NP[name])
                    t = to_t(x)
                    assert np.array_equal(bits(t * 0.001), bits(P.mul(x, 0.001)))
                    u = t.clone()
                    u.add_(to_t(y))
                    assert np.array_equal(bits(u), bits(P.add(x, y)))
                    u = t.clone()
                    u.div_(30)
                    assert np.array_equal(bits(u), bits(P.div(x, 30)))
    finally:
        torch.set_num_threads(threads)


# -- the profile's kernels as the scripts compose them ----------------------------------------------
def script_update(theta: torch.Tensor, noises, coeffs, alpha: float, population: int) -> torch.Tensor:
    """The scripts' update lines, written as they are (zeros_like, mul_, add_, div_, add_(ALPHA * u))."""
    update = torch.zeros_like(theta)
    for noise, c in zip(noises, coeffs):
        noise = noise.clone()
        noise.mul_(float(c))
        update.add_(noise)
    update.div_(population)
    out = theta.clone()
    out.add_(alpha * update)
    return out


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), name=DTYPE_NAMES, members=st.integers(1, 12), alpha=SCALARS, sigma=SCALARS)
def test_profile_update_and_perturb_equal_script_and_reference(data, name, members, alpha, sigma):
    theta = data.draw(finite_arrays(name, 80))
    rng = np.random.default_rng(len(theta) + members)
    qs = [rng.standard_normal(theta.shape).astype(np.float32).astype(NP[name]) for _ in range(members)]
    coeffs = [float(np.float32(c)) for c in rng.standard_normal(members)]
    with np.errstate(all="ignore"):
        want = P.update(theta, qs, coeffs, alpha, members)
        want_p = P.perturb(theta, qs[0], sigma)
    got = script_update(to_t(theta), [to_t(q) for q in qs], coeffs, alpha, members)
    assert np.array_equal(bits(got), bits(want)), ndiff(got, want)
    kern = to_t(theta)
    update_tensor_(kern, [to_t(q).float() for q in qs], coeffs, alpha, members, profile="es-paper",
                   chunk_elements=7)
    assert np.array_equal(bits(kern), bits(want))
    t = to_t(theta)
    t.add_(sigma * to_t(qs[0]))
    assert np.array_equal(bits(t), bits(want_p))
    k = to_t(theta)
    es_paper.perturb(k.view(-1), to_t(qs[0]).float().view(-1), sigma, "cpu", 0, k.numel(), k.view(-1))
    assert np.array_equal(bits(k), bits(want_p))


def test_profile_is_registered_and_trainer_uses_it():
    prof = get_profile("es-paper")
    assert prof.version == es_paper.VERSION == 2 and prof.rules == ("cpu", "cuda")
    assert prof.scale(0.0005, 30) == (0.0005, 30)
    assert get_profile("es-at-scale").scale(0.5, 4) == 0.125
    w = torch.tensor(np.linspace(-1, 1, 21, dtype=np.float32)).to(torch.float16)
    tr = Trainer([("w", w)], Config(profile="es-paper", population=4, sigma=0.01, alpha=0.1, scheme="iid"))
    before = to_np(w, "f16")
    rewards = [0.5, -1.0, 2.0, 0.25]
    stats = tr.update(rewards)
    cfg = tr.config.to_dict()
    qs = [R.noise(cfg, 0, m, 0, w.numel()).astype(np.float16) for m in range(4)]
    want = P.update(before, qs, stats["coefficients"].tolist(), 0.1, 4)
    assert np.array_equal(bits(w), bits(want))


# -- the loop ---------------------------------------------------------------------------------------
LAYOUT = [((5, 3), "f32"), ((), "f16"), ((9,), "bf16"), ((6,), "f16")]


def _params(seed=0):
    rng = np.random.default_rng(seed)
    return [np.asarray(rng.standard_normal(s)).astype(np.float32).astype(NP[d]) for s, d in LAYOUT]


def _rewards_fn(seed=1):
    total = sum(int(np.prod(s)) for s, _ in LAYOUT)
    weights = np.random.default_rng(seed).standard_normal((3, total))

    def rewards(arrays):
        x = np.concatenate([np.asarray(a.detach().float().numpy() if isinstance(a, torch.Tensor) else a)
                            .astype(np.float32).astype(np.float64).reshape(-1) for a in arrays])
        return [math.fsum(w * x) for w in weights]
    return rewards


def _draw(noise, iid):
    if noise == "contract":
        return lambda seed, slot, shape, name: P.contract_noise(seed, slot, int(np.prod(shape)), iid,
                                                                       "poly32", name).reshape(shape)

    def draw(seed, slot, shape, name):
        g = torch.Generator()
        g.manual_seed(seed + slot if iid else seed)
        return to_np(torch.randn(shape, generator=g, dtype=NAME_DTYPES[name]), name)
    return draw


def _run(noise, iid, gpu_threads, population=5, iterations=2, record_copies=True, **kw):
    params = _params()
    return run_paper_loop([f"p{k}" for k in range(len(params))], [to_t(p) for p in params],
                          iterations=iterations, population=population, sigma=0.01, alpha=0.05,
                          gpu_threads=gpu_threads, iid=iid, noise=noise, prompt_rewards=_rewards_fn(),
                          dataset_size=3, record_copies=record_copies, **kw)


@pytest.mark.parametrize("noise", ["contract", "native"])
@pytest.mark.parametrize("iid", [False, True])
@pytest.mark.parametrize("gpu_threads", [1, 2, 4])
def test_loop_equals_straight_line_reference(noise, iid, gpu_threads):
    got = _run(noise, iid, gpu_threads)
    want = P.loop(_params(), iterations=2, population=5, sigma=0.01, alpha=0.05, initial_seed=33,
                        gpu_threads=gpu_threads, prompt_rewards=_rewards_fn(), dataset_size=3,
                        draw=_draw(noise, iid))
    assert got["seeds"] == want["seeds"]
    for a, b in zip(got["rewards"] + got["normalised"], want["rewards"] + want["normalised"]):
        assert np.array_equal(bits(a), bits(b))
    for t, p in zip(got["params"], want["params"]):
        assert np.array_equal(bits(t), bits(p))
    for gc, wc in zip(got["copies_before_update"], want["copies_before_update"]):
        for t, p in zip(gc, wc):
            assert np.array_equal(bits(t), bits(p))
    assert got["profile"] == "es-paper" and got["scheme"] == ("iid" if iid else "correlated")


def test_final_copies_equal_copy_0_and_copies_are_recorded_only_when_asked():
    tape = _run("contract", True, 3, record_copies=False)
    assert "copies_before_update" not in tape and len(tape["copies"]) == 3
    for copy in tape["copies"]:
        assert all(np.array_equal(bits(a), bits(b)) for a, b in zip(copy, tape["params"]))


@pytest.mark.parametrize("noise", ["contract", "native"])
@pytest.mark.parametrize("gpu_threads", [1, 3])
def test_recorded_starts_are_the_shorter_runs_final_parameters(noise, gpu_threads):
    """starts[k] (record_starts) is copy 0 as iteration k starts: bit for bit what a run of k iterations
    returns as its params (what the parity row compared before, running the loop once per k); each a copy
    of its own, and the run's other results the same with and without the record."""
    tape = _run(noise, True, gpu_threads, iterations=3, population=4, record_starts=True)
    plain = _run(noise, True, gpu_threads, iterations=3, population=4)
    assert "starts" not in plain and len(tape["starts"]) == 3
    for k, start in enumerate(tape["starts"]):
        shorter = _run(noise, True, gpu_threads, iterations=k, population=4)["params"]
        assert [bits(t).tolist() for t in start] == [bits(t).tolist() for t in shorter]
    assert [bits(t).tolist() for t in tape["params"]] == [bits(t).tolist() for t in plain["params"]]
    assert tape["seeds"] == plain["seeds"]
    assert not any(t.data_ptr() == p.data_ptr() for start in tape["starts"] for t in start for p in tape["params"])
    assert _run(noise, True, gpu_threads, iterations=0, record_starts=True)["starts"] == []


def test_trainer_noise_seed_under_the_es_paper_schedule():
    from esverify.es import noise_seed
    cfg = Config(seed_schedule="es-paper", seed=33, population=5)
    stream = paper_seed_stream(33, 5)
    for it in range(3):
        assert [noise_seed(cfg, it, m) for m in range(5)] == next(stream)
    assert reference_seeds("es-paper", 0, 0, 3) == next(paper_seed_stream(0, 3))   # 0 is 0, not 42


def test_gpu_threads_drift_changes_bits():
    """With one copy, members 3 and 4 run on copy 0 drifted by members 0-2; with three, on copies 0 and
    1 drifted by one member each; the update runs on copy 0 with its own drift: final parameters
    differ (a value test of the drift), while the seeds are the same."""
    one, three = _run("contract", False, 1), _run("contract", False, 3)
    assert one["seeds"] == three["seeds"]
    assert np.array_equal(bits(one["rewards"][0][:1]), bits(three["rewards"][0][:1]))   # member 0: no drift yet
    diff = sum(int((bits(a) != bits(b)).sum()) for a, b in zip(one["params"], three["params"]))
    assert diff > 0
    # copy 0 drifted away from copy 1 during the last iteration's members
    c0, c1 = three["copies_before_update"][0], three["copies_before_update"][1]
    assert any(not np.array_equal(bits(a), bits(b)) for a, b in zip(c0, c1))


def test_loop_does_not_touch_inputs_or_numpy_global_state():
    params = [to_t(p) for p in _params()]
    before = [bits(t).copy() for t in params]
    state = np.random.get_state()[1].copy()
    run_paper_loop(["a", "b", "c", "d"], params, iterations=1, population=3, gpu_threads=2, noise="contract",
                   prompt_rewards=_rewards_fn(), dataset_size=3)
    assert all(np.array_equal(b, bits(t)) for b, t in zip(before, params))
    assert np.array_equal(np.random.get_state()[1], state)


def test_loop_refuses_bad_arguments():
    params = [to_t(p) for p in _params()]
    kw = dict(iterations=1, prompt_rewards=_rewards_fn(), dataset_size=3)
    with pytest.raises(ValueError, match="noise"):
        run_paper_loop(["a", "b", "c", "d"], params, noise="torch", **kw)
    with pytest.raises(ValueError, match="gpu_threads"):
        run_paper_loop(["a", "b", "c", "d"], params, gpu_threads=0, **kw)
    with pytest.raises(ValueError, match="names"):
        run_paper_loop(["a"], params, **kw)
    with pytest.raises(ValueError, match="backend"):
        run_paper_loop(["a", "b", "c", "d"], params, noise="native", backend="numpy", **kw)
    with pytest.raises(ValueError, match="initial_seed"):
        run_paper_loop(["a", "b", "c", "d"], params, initial_seed=2 ** 32, **kw)


@pytest.mark.slow   # 7 s (--durations, 2026-12-03): out of the fast tier
def test_goldens_catch_a_reciprocal_division(monkeypatch, tmp_path):
    """The es-paper goldens fail when div_ is read as a multiply by 1/N (the naive reading).

    Without the area's es-chain vector, half the area's cost on torch-cpu: it runs the es trainer, which
    this plant does not reach (the vector passes under it, measured 2026-12-08), and the chain is checked
    on every backend by test_goldens_gate.py."""
    import shutil
    from pathlib import Path
    from esverify.goldens import gate
    from test_goldens_support import copy_goldens, without_kind
    copy_goldens(tmp_path, areas=("es-paper",), keep=without_kind("es-chain"))
    shutil.copy(Path(__file__).resolve().parents[1] / "goldens" / "schema.json", tmp_path / "schema.json")
    assert gate.check(tmp_path, areas=["es-paper"], backends=["torch-cpu"]).exit_code(strict=True) == 0
    monkeypatch.setattr(es_paper, "div_int", lambda x, n, rule="cpu": es_paper.mul_scalar(x, 1.0 / n))
    result = gate.check(tmp_path, areas=["es-paper"], backends=["torch-cpu"])
    assert result.exit_code(strict=True) == 1
    statuses = {r["status"] for r in result.rows if r["status"] != "pass"}
    assert statuses == {"mismatch"}, statuses   # caught by its bits, not by an error of the recompute


def test_protocol_wrapper_claims_only_the_profiles_its_wire_config_carries():
    import json
    from pathlib import Path
    from esverify.impl import server
    schema = json.loads((Path(server.__file__).parent / "protocol.schema.json").read_text())

    def enums(node):
        if isinstance(node, dict):
            if "profile" in node.get("properties", {}):
                yield node["properties"]["profile"].get("enum")
            for v in node.values():
                yield from enums(v)
        elif isinstance(node, list):
            for v in node:
                yield from enums(v)
    wire = {tuple(e) for e in enums(schema) if e}
    assert wire == {server.WIRE_PROFILES}
    assert set(server.trainer_capabilities()["profiles"]) == set(server.WIRE_PROFILES)
