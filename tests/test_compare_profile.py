"""compare.compare's per-slot ulp profile and largest distance, taken from the comparator's distance
arrays (not a Python list per mismatch): the values of docs/numerics.md §7 for hand-made slots, and
the same Comparison as the per-element definition on random bit patterns of every float format."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from esverify import bitcompare, bits
from esverify.oracle import compare

_UINT = {"f64": np.uint64, "f32": np.uint32, "f16": np.uint16, "bf16": np.uint16}
_TORCH = {"f64": torch.float64, "f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}
_INT = {"f64": torch.int64, "f32": torch.int32, "f16": torch.int16, "bf16": torch.int16}


def _bits(t):
    return bits.array_bits(t)[0].reshape(t.shape)


def _tensor(raw: np.ndarray, fmt: str) -> torch.Tensor:
    return torch.from_numpy(raw.astype(_UINT[fmt]).view(np.dtype(_UINT[fmt]).str.replace("u", "i")).copy()) \
        .view(_TORCH[fmt])


def _by_definition(ours, theirs, fmts):
    """(profile, max_ulp_diff) element by element from BitDiff.ulps(), as docs/numerics.md §7 words them:
    each bin the largest distance of its run (capped at 2**62), -1 where a NaN/inf mismatch lies in a run
    without a finite one."""
    profile, top = [], None
    for k, (o, t, fmt) in enumerate(zip(ours, theirs, fmts)):
        o_bits, _ = bits.array_bits(o)
        found = bitcompare.compare(bitcompare.of_format(o_bits, fmt, tuple(o.shape)), bitcompare.of_format(t, fmt))
        if not found.index.size:
            continue
        ulps = found.ulps()
        bins = [0] * min(compare.PROFILE_BINS, o_bits.size)
        for i, u in zip(found.index.tolist(), ulps):
            b = i * len(bins) // o_bits.size
            bins[b] = max(bins[b], -1 if u is None else min(u, 2 ** 62))
            if u is None and bins[b] == 0:
                bins[b] = -1
        profile.append({"slot": f"s{k}", "elements": int(o_bits.size), "mismatches": len(ulps), "bins": bins})
        finite = [u for u in ulps if u is not None]
        if finite:
            top = max(finite) if top is None else max(top, max(finite))
    return profile, top


def test_profile_bins_and_largest_distance_of_hand_made_slots():
    ours = torch.tensor([1.0, 2.0, float("nan"), 4.0], dtype=torch.float32)
    theirs = _bits(torch.tensor([1.0, float(np.nextafter(np.float32(2), np.float32(3))), 3.0, 4.0 + 2 ** -20],
                                dtype=torch.float32))
    cmp = compare.compare([ours], [theirs], ["f32"], ["w"])
    # 4 elements, 4 bins: 1 ulp at index 1, NaN against 3.0 at index 2 (no distance), 2**-20 / 2**-21 = 2 ulp
    assert cmp.profile == [{"slot": "w", "elements": 4, "mismatches": 3, "bins": [0, 1, -1, 2]}]
    assert (cmp.max_ulp_diff, cmp.special_count) == (2, 1)


def test_profile_caps_an_f64_distance_past_2_62_and_keeps_the_exact_largest():
    big = np.finfo(np.float64).max
    ours = torch.tensor([big, 1.0], dtype=torch.float64)
    theirs = _bits(torch.tensor([-big, 1.0], dtype=torch.float64))
    cmp = compare.compare([ours], [theirs], ["f64"], ["w"])
    distance = 2 * int(np.float64(big).view(np.int64))   # +max to -max: both ordinals from zero
    assert distance > 2 ** 63 and cmp.max_ulp_diff == distance
    assert cmp.profile[0]["bins"] == [2 ** 62, 0]


@pytest.mark.parametrize("fmt", ["f64", "f32", "f16", "bf16"])
def test_random_patterns_match_the_per_element_definition(fmt):
    rng = np.random.default_rng(54)
    width = np.dtype(_UINT[fmt]).itemsize * 8
    for n, share in ((1, 1.0), (65, 0.3), (1000, 1.0), (4099, 0.02)):
        raw = rng.integers(0, 1 << width, n, dtype=np.uint64) if width < 64 else \
            rng.integers(0, np.iinfo(np.uint64).max, n, dtype=np.uint64, endpoint=True)
        other = raw.copy()
        flip = rng.random(n) < share
        other[flip] = rng.permutation(raw)[flip]
        ours, theirs = _tensor(raw, fmt), other.astype(_UINT[fmt])
        second = _tensor(raw[::-1].copy(), fmt)
        cmp = compare.compare([ours, second], [theirs, theirs[::-1].copy()], [fmt, fmt], ["s0", "s1"])
        profile, top = _by_definition([ours, second], [theirs, theirs[::-1].copy()], [fmt, fmt])
        assert cmp.profile == profile
        expected_top = top if top is not None else (0 if not cmp.mismatches else None)
        assert cmp.max_ulp_diff == expected_top
        assert dataclasses.asdict(cmp)["mismatches"] == sum(p["mismatches"] for p in profile)
