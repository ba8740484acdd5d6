"""The replay's update that draws as it accumulates (esverify.es.cpu_kernels.accumulate_drawn, a profile's
`accumulate_drawn`; docs/replay.md §9): the same bits as drawing each member's noise into memory and
accumulating it, for both Trainer profiles, both mappings and schemes, odd and even unit starts."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from esverify import rng
from esverify.es import cpu_kernels
from esverify.es.profiles import get_profile
from esverify.replay import kernel
from esverify.replay.units import Unit

pytestmark = pytest.mark.skipif(not cpu_kernels.ENABLED, reason="numba is not installed")


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2 ** 64 - 1), st.integers(0, 2 ** 64 - 5000), st.integers(1, 4100),
       st.sampled_from(["poly32", "libm64"]), st.booleans(), st.floats(-1e3, 1e3, allow_nan=False, width=32))
def test_accumulate_drawn_is_the_draw_then_the_accumulate(seed, first, n, mapping, fused, coeff):
    """Element for element the bits of gaussian_into followed by accumulate (two roundings) or fma32 (one),
    from any first element, odd or even, of any stream."""
    if fused and not cpu_kernels.FMA:
        pytest.skip("no fused multiply-add on this CPU")
    acc = torch.from_numpy(np.random.default_rng(seed % 2 ** 32).standard_normal(n).astype(np.float32))
    want = acc.clone()
    eps = torch.empty(n)
    rng.gaussian_into(eps, seed, first, mapping)
    (cpu_kernels.fma32(want, eps, coeff, want) if fused else cpu_kernels.accumulate(want, eps, coeff))
    assert cpu_kernels.accumulate_drawn(acc, [seed], first, mapping, [coeff], fused) is True
    assert torch.equal(acc.view(torch.int32), want.view(torch.int32))


_f32 = st.floats(-1e3, 1e3, allow_nan=False, width=32)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 2 ** 64 - 1), _f32, st.lists(_f32, max_size=4)), max_size=5),
       st.integers(0, 2 ** 64 - 5000), st.integers(1, 5000), st.sampled_from(["poly32", "libm64"]), st.booleans())
def test_members_with_residue_steps_are_the_draw_then_perturb_and_accumulate(members, first, n, mapping, fused):
    """Several members in one call, each with 0-4 residue steps on theta: member by member in order, the bits of
    gaussian_into, then perturb (or fma32) of theta by each step, then accumulate (or fma32) of the coefficient;
    windows longer than the kernel's block (2048) and odd first elements included."""
    if fused and not cpu_kernels.FMA:
        pytest.skip("no fused multiply-add on this CPU")
    r = np.random.default_rng(n)
    acc = torch.from_numpy(r.standard_normal(n).astype(np.float32))
    theta = torch.from_numpy(r.standard_normal(n).astype(np.float32))
    want_acc, want_theta = acc.clone(), theta.clone()
    for seed, coeff, steps in members:
        eps = torch.empty(n)
        rng.gaussian_into(eps, seed, first, mapping)
        for s in steps:
            (cpu_kernels.fma32(want_theta, eps, s, want_theta) if fused
             else cpu_kernels.perturb(want_theta, eps, s, want_theta))
        (cpu_kernels.fma32(want_acc, eps, coeff, want_acc) if fused else cpu_kernels.accumulate(want_acc, eps, coeff))
    assert cpu_kernels.accumulate_drawn(acc, [m[0] for m in members], first, mapping, [m[1] for m in members],
                                        fused, theta, [m[2] for m in members]) is True
    assert torch.equal(acc.view(torch.int32), want_acc.view(torch.int32))
    assert torch.equal(theta.view(torch.int32), want_theta.view(torch.int32))


def test_accumulate_drawn_declines_what_it_cannot_do():
    acc = torch.zeros(8)
    assert cpu_kernels.accumulate_drawn(acc, [1], 0, "another-mapping", [0.5], False) is False
    assert cpu_kernels.accumulate_drawn(torch.zeros(8, dtype=torch.float16), [1], 0, "poly32", [0.5], False) is False
    assert cpu_kernels.accumulate_drawn(torch.zeros(16)[::2], [1], 0, "poly32", [0.5], False) is False
    theta = torch.zeros(16)
    assert cpu_kernels.accumulate_drawn(acc, [1], 0, "poly32", [0.5], False, theta[::2], [[0.25]]) is False
    assert torch.equal(acc, torch.zeros(8)) and torch.equal(theta, torch.zeros(16))
    assert get_profile("es-at-scale").accumulate_drawn(acc, [1], 0, "poly32", [0.5], torch.float16, "cpu") is False
    assert get_profile("es-awd").accumulate_drawn(acc, [1], 0, "poly32", [0.5], torch.float32, "tpu") is False
    assert torch.equal(acc, torch.zeros(8))


def test_empty_tensors_with_steps_are_applied_as_nothing():
    """Empty acc and theta (an empty unit's window; both report data pointer 0) are not taken for one tensor."""
    acc, theta = torch.zeros(0), torch.zeros(0)
    assert cpu_kernels.accumulate_drawn(acc, [1, 2], 3, "poly32", [0.5, 0.25], False, theta, [[0.1, -0.1], []]) is True


def test_accumulate_drawn_refuses_steps_it_cannot_apply():
    """Steps need a theta of acc's length that is not acc, and one list of steps per seed: else ValueError,
    nothing changed."""
    acc = torch.zeros(8)
    for theta, steps, seeds, coeffs in [(None, [[0.5]], [1], [0.5]), (torch.zeros(7), [[0.5]], [1], [0.5]),
                                        (acc, [[0.5]], [1], [0.5]), (torch.zeros(8), [[0.5]], [1, 2], [0.5, 0.5]),
                                        (None, None, [1, 2], [0.5])]:
        with pytest.raises(ValueError, match="accumulate_drawn"):
            cpu_kernels.accumulate_drawn(acc, seeds, 0, "poly32", coeffs, False, theta, steps)
    assert torch.equal(acc, torch.zeros(8))


@pytest.mark.parametrize("profile", ["es-at-scale", "es-awd"])
@pytest.mark.parametrize("mapping,scheme", [("poly32", "correlated"), ("libm64", "iid")])
@pytest.mark.parametrize("start,end,chunk", [(0, 300, 128), (7, 263, 64), (1, 2, 1), (3, 5003, 4099),
                                             (5, 5, 64)])
@pytest.mark.parametrize("evaluated,whole", [(((0, 1), (3, -1)), True), (((0, 1), (0, -1), (5, 1)), True),
                                             (((3, -1), (0, 1)), False), (((0, 1), (3, -1), (0, -1)), False),
                                             ((), True)])
def test_the_replay_with_drawn_accumulation_equals_the_one_without(monkeypatch, profile, mapping, scheme, start,
                                                                    end, chunk, evaluated, whole):
    """replay_elements with the profile's accumulate_drawn, and with it taken away (every member drawn into
    memory first): bitwise equal, residue members and the others alike. A residue logged in member order
    (`whole`) runs with the update in one call per window and iteration (accumulate_drawn_apply's, which also
    applies the update), its steps inside the kernel; one logged out of member order keeps the logged order on
    theta: drawn into memory, the kernel called per other member."""
    r = np.random.default_rng(5)
    iterations = tuple((tuple(int(s) for s in r.integers(0, 2 ** 62, size=6)), tuple(r.standard_normal(6).tolist()),
                        evaluated) for _ in range(2))
    job = kernel.Job(base="-", expect="-", profile=profile, noise="contract", mapping=mapping, scheme=scheme,
                     slots=("a", "w"), sigma=0.01, alpha=0.02, population=6, decay="none", lam=0.0,
                     iterations=iterations, chunk=chunk)
    unit = Unit(index=0, name="w", start=start, end=end, numel=6000, shape=(6000,), dtype="float32", kind="replay")
    base = torch.from_numpy(r.standard_normal(end - start).astype(np.float32))
    calls = []
    prof = get_profile(profile)

    def counted(acc, seeds, *args, **kwargs):
        calls.append((len(seeds), args[6] if len(args) > 6 else kwargs.get("steps")))
        return prof.accumulate_drawn(acc, seeds, *args, **kwargs)

    def counted_apply(acc, seeds, *args):   # a whole iteration with the update applied in the kernel's last pass
        calls.append((len(seeds), args[6]))
        return prof.accumulate_drawn_apply(acc, seeds, *args)
    monkeypatch.setattr(kernel, "get_profile", lambda name: replace(prof, accumulate_drawn=counted,
                                                                    accumulate_drawn_apply=counted_apply))
    got, naive = kernel.replay_elements(job, unit, base)
    monkeypatch.setattr(kernel, "get_profile", lambda name: replace(prof, accumulate_drawn=None))
    want, naive_want = kernel.replay_elements(job, unit, base)
    if end == start:   # an empty unit (an empty tensor's): nothing to replay, and no error
        assert got.numel() == naive.numel() == want.numel() == 0
        return
    if whole:   # every call is a whole iteration: 6 members, with the residue's steps
        assert calls and all(k == 6 and steps is not None for k, steps in calls)
        assert sum(len(s) for s in calls[0][1]) == 2 * len(evaluated)
    else:       # one call per member the residue did not draw
        assert calls and all(k == 1 and steps is None for k, steps in calls)
        assert len(calls) == (6 - len({k for k, _ in evaluated})) * 2 * len(kernel._subs(end - start, chunk))
    assert torch.equal(got.view(torch.int32), want.view(torch.int32))
    assert torch.equal(naive.view(torch.int32), naive_want.view(torch.int32))
    if evaluated and end - start > 100:   # the residue changed bits: the comparison above saw it
        assert not torch.equal(got.view(torch.int32), naive.view(torch.int32))


@pytest.mark.parametrize("profile", ["es-at-scale", "es-awd"])
@pytest.mark.parametrize("antithetic,scheme", [(False, "iid"), (True, "correlated")])
def test_the_trainer_update_with_drawn_accumulation_equals_the_one_without(profile, antithetic, scheme):
    """Trainer.update takes the profile's accumulate_drawn for its f32 CPU chunks: the same parameters, bit for
    bit, and the same count of elements drawn as with every member's noise drawn into memory first (odd chunk
    starts, an f16 slot between two f32 ones that keeps the old path, two iterations)."""
    from esverify.es import Config, Trainer
    prof = get_profile(profile)
    calls = []

    def counted(*args):
        taken = prof.accumulate_drawn(*args)
        calls.append(taken)
        return taken

    def run(drawn):
        params = [torch.from_numpy(np.random.default_rng(1).standard_normal(101).astype(np.float32)),
                  torch.from_numpy(np.random.default_rng(2).standard_normal(37).astype(np.float16)),
                  torch.from_numpy(np.random.default_rng(3).standard_normal(40).astype(np.float32))]
        tr = Trainer(params, Config(population=6, antithetic=antithetic, chunk_elements=33, profile=profile,
                                    scheme=scheme))
        tr.profile = replace(prof, accumulate_drawn=drawn)
        for it in range(2):
            tr.update(np.random.default_rng(10 + it).standard_normal(6))
        return [p.clone() for p in params], tr.noise.elements

    (got, elements), (want, elements_want) = run(counted), run(None)
    assert True in calls and False in calls   # the f32 chunks took it, the f16 slot did not
    assert elements == elements_want > 0
    for a, b in zip(got, want):
        assert torch.equal(a.view(torch.int16 if a.dtype == torch.float16 else torch.int32),
                           b.view(torch.int16 if b.dtype == torch.float16 else torch.int32))



@pytest.mark.parametrize("profile", ["es-at-scale", "es-awd"])
@pytest.mark.parametrize("mapping", ["poly32", "libm64"])
def test_another_registered_numba_kernel_takes_the_drawing_path(monkeypatch, profile, mapping):
    """The inline noise is numba_backend's pair kernel: with another numba kernel registered for the mapping
    (a plug-in's, or the deliberate fault of tests/test_parity_rng_fault.py) accumulate_drawn declines, so
    the trainer's update follows the registered kernel: bit for bit the update with no drawn path at all,
    and not the update along the stock kernel's noise."""
    from esverify.es import Config, Trainer
    from esverify.rng import numba_backend
    from esverify.rng.mappings import _KERNEL_CACHE, MAPPINGS

    def run(drawn=True):
        params = [torch.from_numpy(np.random.default_rng(1).standard_normal(70).astype(np.float32))]
        tr = Trainer(params, Config(population=4, chunk_elements=16, profile=profile, scheme="iid",
                                    mapping=mapping))
        if not drawn:
            tr.profile = replace(tr.profile, accumulate_drawn=None)
        tr.update(np.array([0.5, -1.0, 2.0, 0.25]))
        return params[0].view(torch.int32).clone()

    stock = run()

    def negated(out, seed, first):
        getattr(numba_backend, mapping)(out, seed, first)
        out *= -1

    monkeypatch.setattr(numba_backend, "esverify_test_negated", negated, raising=False)
    monkeypatch.setitem(MAPPINGS[mapping].kernels, "numba", "esverify.rng.numba_backend:esverify_test_negated")
    monkeypatch.setattr("esverify.rng.mappings._KERNEL_CACHE", dict(_KERNEL_CACHE))
    acc = torch.zeros(9)
    assert cpu_kernels.accumulate_drawn(acc, [7], 1, mapping, [0.5], False) is False
    assert torch.equal(acc, torch.zeros(9))
    faulty = run()
    assert torch.equal(faulty, run(drawn=False))
    assert not torch.equal(faulty, stock)
