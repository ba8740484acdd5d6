"""NaN and infinities from a reference: the mismatch note counts every special
mismatch over all slots and names only real kinds; the row detail never reads "max None ulp"."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from esverify import bits
from esverify.oracle import compare
from test_hostile_parity import detail, hostile, run, status


def _bits(t):
    return bits.array_bits(t)[0].reshape(t.shape)


def test_all_nan_mismatch_counts_every_slot_and_names_only_nan():
    ours = [torch.ones(3), torch.ones(2)]
    theirs = [_bits(torch.full((3,), float("nan"))), _bits(torch.full((2,), float("nan")))]
    cmp = compare.compare(ours, theirs, ["f32", "f32"], ["a", "b"])
    assert (cmp.mismatches, cmp.special_count, cmp.special_kinds) == (5, 5, ("nan",))
    assert cmp.specials == "5 mismatches involve nan"
    assert cmp.max_ulp_diff is None and np.isnan(cmp.max_abs_diff)
    assert "None" not in cmp.summary() and "no ulp distance" in cmp.summary()


def test_specials_mixed_with_finite_mismatches_across_slots():
    ours = [torch.tensor([1.0, 2.0, 3.0]), torch.tensor([1.0, float("inf")])]
    theirs = [_bits(torch.tensor([float("-inf"), 2.0, 3.5])), _bits(torch.tensor([float("nan"), float("inf")]))]
    cmp = compare.compare(ours, theirs, ["f32", "f32"], ["a", "b"])
    assert (cmp.mismatches, cmp.special_count, cmp.special_kinds) == (3, 2, ("-inf", "nan"))
    assert cmp.specials == "2 mismatches involve -inf, nan"
    assert cmp.max_ulp_diff == 1 << 21          # 3.0 -> 3.5 in f32: 0.5 / 2**-22 (the ulp in [2, 4))
    assert "max 2097152 ulp" in cmp.summary()


@pytest.mark.slow   # 3 s (--durations, 2026-12-03): out of the fast tier
def test_a_reference_returning_nan_gets_a_readable_row(tmp_path):
    clone = hostile(tmp_path, "", at="perturb")
    worker = clone / "es_at_scale/utils/worker_extension.py"
    text = worker.read_text()
    anchor = "            param.data.add_(scale * noise)\n"
    assert text.count(anchor) == 1
    worker.write_text(text.replace(anchor, anchor + "            param.data.fill_(float('nan'))\n"))
    code, output, frame, _, _ = run(tmp_path, clone, "--case", "*/f32/iid/perturb*")
    assert code == 1 and status(frame, "perturb") == "fail"
    d = detail(frame, "perturb")
    elements = int(frame["elements"].iloc[0])
    assert f"{elements} mismatches involve nan" in d and "None" not in d and "involve ," not in d, d
