"""The replay's fast path against the slow, obviously correct one, bit for bit (docs/replay.md §9).

The fast path: one kernel call per window and iteration that draws each member's noise as it perturbs,
restores and accumulates (a residue member of two or four steps in one pass, other step counts through a
block buffer), windows of `kernel.REPLAY_CHUNK` elements, the unit's own copy of its base taken over as
the replayed tensor, and an equality check before the comparison. The slow path: every member's noise
drawn into memory by `esverify.rng.gaussian_into`, then the profile's perturb, accumulate and apply per
chunk (the profile without `accumulate_drawn`). Seeded grids: both profiles and mappings, unit starts odd
and even, chunks of 1 element up to a whole unit, a population (7) that divides no chunk, residues of
zero to three evaluations per member, with and without the anchored decay.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import torch

from esverify import bitcompare, rng
from esverify.es import cpu_kernels
from esverify.es.profiles import get_profile
from esverify.replay import kernel
from esverify.replay.units import Unit

pytestmark = pytest.mark.skipif(not cpu_kernels.ENABLED, reason="numba is not installed")

POPULATION = 7   # divides none of the chunks below


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.view(torch.int32)


def _specials(n: int, seed: int) -> torch.Tensor:
    """Normal values with the awkward ones sprinkled in: signed zeros, a subnormal, infinities, a NaN."""
    x = np.random.default_rng(seed).standard_normal(n).astype(np.float32)
    for k, v in zip(range(0, n, 5), [-0.0, 0.0, 1e-40, np.inf, -np.inf, np.nan]):
        x[k] = v
    return torch.from_numpy(x)


@pytest.mark.parametrize("mapping", ["poly32", "libm64"])
@pytest.mark.parametrize("fused", [False, True])
@pytest.mark.parametrize("first", [0, 1, 2047, 2 ** 40 + 3])
@pytest.mark.parametrize("n", [1, 2, 3, 2048, 2049, 4101])
def test_the_kernel_is_the_draw_then_the_steps_then_the_accumulate(mapping, fused, first, n):
    """Member by member, cpu_kernels.accumulate_drawn equals gaussian_into followed by perturb (or fma32) of theta
    by each step, then accumulate (or fma32) of acc: members of 0, 2 and 4 steps (the one-pass loops) and of 1,
    3 and 6 (the block buffer) in one call, stepless members two in a row (the pass that draws two members at
    once: members 0-1 and 3-4), alone before a member with steps (5) and last (11), from odd and even first
    elements, lengths around the block."""
    if fused and not cpu_kernels.FMA:
        pytest.skip("no fused multiply-add on this CPU")
    r = np.random.default_rng(n + first % 97)
    counts = [0, 0, 2, 0, 0, 0, 4, 1, 3, 6, 2, 0]
    seeds = [int(s) for s in r.integers(0, 2 ** 63, size=len(counts), dtype=np.uint64)]
    coeffs = [float(np.float32(c)) for c in r.standard_normal(len(counts))]
    steps = [[float(np.float32(v)) for v in r.standard_normal(k) * 1e-3] for k in counts]
    steps[2][1] = -0.0   # a signed zero step: x + (-0 * e) keeps x's sign only in the right order
    theta, acc = _specials(n, 1), _specials(n, 2)
    want_theta, want_acc = theta.clone(), acc.clone()
    for seed, c, member in zip(seeds, coeffs, steps):
        eps = torch.empty(n)
        rng.gaussian_into(eps, seed, first, mapping)
        for s in member:
            (cpu_kernels.fma32(want_theta, eps, s, want_theta) if fused
             else cpu_kernels.perturb(want_theta, eps, s, want_theta))
        (cpu_kernels.fma32(want_acc, eps, c, want_acc) if fused else cpu_kernels.accumulate(want_acc, eps, c))
    assert cpu_kernels.accumulate_drawn(acc, seeds, first, mapping, coeffs, fused, theta, steps) is True
    assert torch.equal(_bits(theta), _bits(want_theta))
    assert torch.equal(_bits(acc), _bits(want_acc))


@pytest.mark.parametrize("mapping", ["poly32", "libm64"])
@pytest.mark.parametrize("fused", [False, True])
@pytest.mark.parametrize("first", [0, 2 ** 40 + 3])
@pytest.mark.parametrize("n", [1, 2, 4101])
@pytest.mark.parametrize("last", [0, 2, 3], ids=["last-stepless", "last-two-steps", "last-three-steps"])
def test_the_kernel_with_the_apply_is_the_kernel_then_the_apply(mapping, fused, first, n, last):
    """cpu_kernels.accumulate_drawn_apply equals accumulate_drawn followed by apply (or fma32) of theta and of naive
    by acc, bit for bit, acc included: the last member without steps (the apply in its pass), with two (the
    one-pass loop, then an apply pass) and with three (the block buffer, then the pass); stepless members
    before it in a pair and alone; odd and even first elements."""
    if fused and not cpu_kernels.FMA:
        pytest.skip("no fused multiply-add on this CPU")
    r = np.random.default_rng(n + first % 89 + last)
    counts = [0, 0, 2, 0, last]
    seeds = [int(s) for s in r.integers(0, 2 ** 63, size=len(counts), dtype=np.uint64)]
    coeffs = [float(np.float32(c)) for c in r.standard_normal(len(counts))]
    steps = [[float(np.float32(v)) for v in r.standard_normal(k) * 1e-3] for k in counts]
    scale = float(np.float32(0.37))
    theta, naive, acc = _specials(n, 1), _specials(n, 3), _specials(n, 2)
    want_theta, want_naive, want_acc = theta.clone(), naive.clone(), acc.clone()
    assert cpu_kernels.accumulate_drawn(want_acc, seeds, first, mapping, coeffs, fused, want_theta, steps) is True
    for target in (want_theta, want_naive):
        (cpu_kernels.fma32(target, want_acc, scale, target) if fused
         else cpu_kernels.apply(target, want_acc, scale, target))
    assert cpu_kernels.accumulate_drawn_apply(acc, seeds, first, mapping, coeffs, fused, theta, steps, scale,
                                              naive) is True
    for got, want in [(theta, want_theta), (naive, want_naive), (acc, want_acc)]:
        assert torch.equal(_bits(got), _bits(want))


def test_the_kernel_with_the_apply_refuses_what_does_not_fit():
    """accumulate_drawn_apply: a theta or naive missing, of another length, or the same tensor as acc or each
    other is a ValueError, nothing changed; a tensor that is not f32 is declined (False), nothing changed."""
    acc, theta = torch.zeros(8), torch.zeros(8)
    for t, nv in [(None, torch.zeros(8)), (theta, None), (theta, torch.zeros(7)), (torch.zeros(7), torch.zeros(8)),
                  (theta, theta), (theta, acc), (acc, torch.zeros(8))]:
        with pytest.raises(ValueError, match="accumulate_drawn_apply"):
            cpu_kernels.accumulate_drawn_apply(acc, [1], 0, "poly32", [0.5], False, t, None, 0.5, nv)
    half = torch.zeros(8, dtype=torch.float16)
    assert cpu_kernels.accumulate_drawn_apply(acc, [1], 0, "poly32", [0.5], False, theta, None, 0.5, half) is False
    assert torch.equal(acc, torch.zeros(8)) and torch.equal(theta, torch.zeros(8)) and torch.equal(half, 0 * half)


def _job(profile, mapping, scheme, evaluated, chunk, decay):
    r = np.random.default_rng(11)
    iterations = tuple((tuple(int(s) for s in r.integers(0, 2 ** 62, size=POPULATION)),
                        tuple(r.standard_normal(POPULATION).tolist()), evaluated) for _ in range(3))
    return kernel.Job(base="-", expect="-", profile=profile, noise="contract", mapping=mapping, scheme=scheme,
                      slots=("a", "w"), sigma=0.01, alpha=0.02, population=POPULATION, decay=decay,
                      lam=0.5 if decay != "none" else 0.0, iterations=iterations,
                      **({} if chunk is None else {"chunk": chunk}))


def _slow(job, unit, base):
    """The replay with every member's noise drawn into memory first (no accumulate_drawn), chunk by chunk."""
    prof = get_profile(job.profile)
    original = kernel.get_profile
    kernel.get_profile = lambda name: replace(prof, accumulate_drawn=None)
    try:
        return kernel.replay_elements(job, unit, base)
    finally:
        kernel.get_profile = original


# residues: none; members evaluated once (2 steps) in member order; both signs on engine 0 (4 steps: mirrored
# sampling); a member evaluated three times (6 steps, the block buffer) beside a once-evaluated one
EVALUATED = [(), ((0, 1), (3, -1), (6, 1)), ((0, 1), (0, -1), (4, 1), (4, -1)),
             ((1, 1), (1, -1), (1, 1), (5, -1))]


@pytest.mark.parametrize("profile", ["es-at-scale", "es-awd"])
@pytest.mark.parametrize("mapping,scheme", [("poly32", "correlated"), ("libm64", "iid")])
@pytest.mark.parametrize("evaluated", EVALUATED, ids=["none", "once", "mirrored", "thrice"])
# (3, 114, 7): an odd start, windows of 7 whose firsts alternate odd and even, then a remainder of 6 at an even
# first; an odd number of whole windows (15) gives that, as (3, 4104, 7) did with 585 windows at 37x the cost
@pytest.mark.parametrize("start,end,chunk", [(0, 9, 1), (3, 114, 7), (1, 6001, 2048), (2, 6000, 4099),
                                             (5, 8200, None)])
@pytest.mark.parametrize("decay", ["none", "l2"])
def test_the_replay_equals_the_slow_path(profile, mapping, scheme, evaluated, start, end, chunk, decay):
    """replay_elements (fast path, and with the base handed over as `owned`) equals the slow path bit for bit,
    replayed and naive; chunk None is the replay's default window (REPLAY_CHUNK, the whole unit here); a
    handed-over base with the decay on is the decay's anchor, so it must come back unchanged."""
    job = _job(profile, mapping, scheme, evaluated, chunk, decay)
    unit = Unit(index=0, name="w", start=start, end=end, numel=9000, shape=(9000,), dtype="float32", kind="replay")
    base = _specials(end - start, start + 7)
    want, naive_want = _slow(job, unit, base)
    got, naive = kernel.replay_elements(job, unit, base)
    assert torch.equal(_bits(got), _bits(want)) and torch.equal(_bits(naive), _bits(naive_want))
    owned = base.clone()
    got, naive = kernel.replay_elements(job, unit, owned, True)
    assert torch.equal(_bits(got), _bits(want)) and torch.equal(_bits(naive), _bits(naive_want))
    assert (got is owned) == (decay == "none")
    if decay != "none":
        assert torch.equal(_bits(owned), _bits(base))
    if evaluated and end - start > 100:   # the residue changed bits: the comparisons above could see it
        assert not torch.equal(_bits(got), _bits(naive))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int8,
                                   torch.bool, torch.complex64])
def test_compare_agrees_with_bitcompare(dtype):
    """kernel.compare's equality check answers what bitcompare answers: equal tensors, and tensors that differ
    in one element only in the sign of a zero or in a NaN's payload (which a value comparison calls equal or
    never equal) are told apart by their bits."""
    x = torch.tensor([0.0, 1.5, -2.0, 0.0, 3.0, 0.0]).to(dtype)
    variants = [x.clone()]
    if dtype.is_floating_point:
        y = x.clone()
        y[3] = -0.0
        nan = x.clone()
        nan[5] = float("nan")
        variants += [y, nan, nan.clone()]
    for other in variants:
        for got, expected in [(other, x), (x, other), (other, other.clone())]:
            diff = bitcompare.compare(expected, got)
            want = {"mismatches": diff.mismatches, "first": diff.first(10), "max_ulp": diff.max_ulp}
            assert kernel.compare(got, expected, 10) == want
    assert kernel.compare(x[::2], x[::2].clone(), 0)["mismatches"] == 0   # not contiguous: bitcompare's path


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64, torch.int8])
def test_compare_of_a_unit_that_differs_here_and_there_agrees_with_bitcompare(dtype):
    """kernel.compare finds the differing elements in its own pass and lets bitcompare measure only those: the
    count, the first difference (its index in the whole tensor, both patterns, its ulp) and the largest ulp are
    bitcompare's over the whole unit, for a few percent of scattered differences with a signed zero, NaNs of two
    payloads and an infinity among them, the first one late in the unit, and for no difference at all."""
    r = np.random.default_rng(4)
    n = 10007
    x = torch.from_numpy(r.standard_normal(n) * 100).to(dtype)
    y = x.clone()
    where = np.sort(r.choice(np.arange(700, n), 300, replace=False))
    y[torch.from_numpy(where)] += torch.ones(300, dtype=dtype) if dtype == torch.int8 else \
        torch.from_numpy(r.standard_normal(300)).to(dtype)
    if dtype.is_floating_point:
        x[800], y[800] = 0.0, -0.0
        x[900], y[900] = float("nan"), float("inf")
        width = {2: torch.int16, 4: torch.int32, 8: torch.int64}[dtype.itemsize]
        x.view(width)[1000] = torch.tensor(float("nan"), dtype=dtype).view(width)
        y.view(width)[1000] = x.view(width)[1000] + 1   # another NaN payload
    for got, expected in [(y, x), (x, y), (x, x.clone())]:
        diff = bitcompare.compare(expected, got)
        want = {"mismatches": diff.mismatches, "first": diff.first(123), "max_ulp": diff.max_ulp}
        assert kernel.compare(got, expected, 123) == want
    assert kernel.compare(y, x, 0)["mismatches"] >= 200   # scattered differences (bf16 rounds some away)


def test_run_unit_reuses_its_buffers_without_carrying_values(tmp_path):
    """run_unit in one process reuses its buffers (base, checkpoint, naive, accumulator: replay/scratch.py) from
    unit to unit: each unit's result is the result of a fresh process-free replay of it alone (replay_elements with
    new tensors, compared by bitcompare), a small unit after a large one and the large one again included, with
    the buffers held between them; Weights.read into a buffer equals the plain read. Then release() frees them."""
    from esverify.replay import scratch
    from esverify.replay.weights import open_weights, save_weights
    r = np.random.default_rng(8)
    base, expect = tmp_path / "base.safetensors", tmp_path / "expect.safetensors"
    b = torch.from_numpy(r.standard_normal(9001).astype(np.float32))
    save_weights(base, {"w": b})
    job = replace(_job("es-at-scale", "poly32", "correlated", EVALUATED[1], None, "none"), base=str(base),
                  expect=str(expect))
    whole = Unit(index=0, name="w", start=0, end=9001, numel=9001, shape=(9001,), dtype="float32", kind="replay")
    genuine = kernel.replay_elements(job, whole, b)[0]
    genuine[[20, 4000, 8999]] += 1.0   # a checkpoint that differs from the replay in three elements
    save_weights(expect, {"w": genuine})
    units = [Unit(index=k, name="w", start=s, end=e, numel=9001, shape=(9001,), dtype="float32", kind="replay")
             for k, (s, e) in enumerate([(0, 9001), (3, 40), (0, 9001), (101, 5000)])]
    w, x = open_weights(base), open_weights(expect)
    scratch.release()
    for unit in units:
        got = kernel.run_unit(job, unit)
        mine, naive = kernel.replay_elements(job, unit, w.read("w", unit.start, unit.end))
        want = x.read("w", unit.start, unit.end)
        assert got["replay"] == kernel.compare(mine, want, unit.start)
        assert got["naive"] == kernel.compare(naive, want, unit.start)
        assert got["replay"]["mismatches"] == sum(unit.start <= i < unit.end for i in (20, 4000, 8999))
        assert got["naive"]["mismatches"] > got["replay"]["mismatches"]   # the residue changed bits the naive lacks
    assert scratch.scratch().held() >= 4 * 9001 * 4   # the largest unit's base, checkpoint, naive and accumulator
    into = w.read("w", 5, 700, into=lambda n, dtype: scratch.scratch().take("test", n, dtype))
    assert torch.equal(into.view(torch.int32), w.read("w", 5, 700).view(torch.int32))
    scratch.release()
    assert scratch.scratch().held() == 0
