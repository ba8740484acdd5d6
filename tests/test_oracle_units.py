"""Unit tests of the oracle pieces that need no child: comparison (docs/numerics.md §7), clone
inspection (docs/references.md §4), the case matrix, statuses and exit codes, parameter
sets, and the child-side noise hook and draw accounting (docs/references.md §3), which
the test imports by path from oracles/ (the esverify package never does).
"""
from __future__ import annotations

import importlib.util
import shutil
import subprocess

import numpy as np
import pandas as pd
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from esverify import bits
from esverify import rng as es_rng
from esverify.oracle import cases, compare, paramsets
from esverify.oracle.clones import TARGETS, CloneError, inspect_clone
from esverify.oracle.runner import _post_process, exit_code, summary_pivot
from esverify.paths import oracles_dir
from standins.mutants import STANDINS


def _load_child_module():
    spec = importlib.util.spec_from_file_location("oracle_child_under_test", oracles_dir() / "oracle_child.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


child = _load_child_module()

# ------------------------------------------------------------------ compare


@given(st.lists(st.floats(-1e3, 1e3, width=32), min_size=1, max_size=50), st.data())
def test_one_flipped_bit_is_found_with_its_ulp_distance(values, data):
    ours = torch.tensor(values, dtype=torch.float32)
    raw = paramsets.bits_of(ours).copy()
    i = data.draw(st.integers(0, len(values) - 1))
    bit = data.draw(st.integers(0, 30))
    raw[i] ^= np.uint32(1 << bit)
    result = compare.compare([ours], [raw], ["f32"], ["w"])
    assert result.mismatches == 1 and result.elements == len(values)
    assert result.first_index == f"w[{i}]"
    expected = bits.ulp_distance(paramsets.bits_of(ours)[i:i + 1], raw[i:i + 1], "f32")[0]
    assert result.max_ulp_diff == expected
    assert result.first_theirs == bits.describe(int(raw[i]), "f32")


def test_identical_results_and_signed_zero():
    t = torch.tensor([0.0, 1.5, -2.0], dtype=torch.bfloat16)
    same = compare.compare([t], [paramsets.bits_of(t)], ["bf16"])
    assert (same.mismatches, same.max_ulp_diff, same.max_abs_diff) == (0, 0, 0.0)
    neg_zero = paramsets.bits_of(torch.tensor([-0.0, 1.5, -2.0], dtype=torch.bfloat16))
    diff = compare.compare([t], [neg_zero], ["bf16"])
    assert diff.mismatches == 1 and diff.max_ulp_diff == 0 and diff.first_index == "slot0[0]"


def test_nan_and_layout_are_reported_by_name():
    t = torch.tensor([1.0, 2.0], dtype=torch.float16)
    nan = paramsets.bits_of(torch.tensor([1.0, float("nan")], dtype=torch.float16))
    result = compare.compare([t], [nan], ["f16"])
    assert result.mismatches == 1 and "nan" in result.specials
    assert "ours is f16 (2,), theirs f32 (2,)" in compare.compare([t], [np.zeros(2, np.uint32)], ["f32"]).layout_error


def test_compare_rewards():
    assert compare.compare_rewards([[1.0, 2.0]], [[1.0, 2.0]]) == ""
    assert "iteration 0 member 1" in compare.compare_rewards([[1.0, 2.0]], [[1.0, 2.0000000000000004]])


# ------------------------------------------------------------------ clones


def test_clone_errors_and_missing_files(tmp_path):
    target = TARGETS["es-at-scale"]
    with pytest.raises(CloneError, match="does not exist"):
        inspect_clone(target, tmp_path / "nowhere")
    (tmp_path / "empty").mkdir()
    with pytest.raises(CloneError, match="not a clone of es-at-scale"):
        inspect_clone(target, tmp_path / "empty")
    partial = tmp_path / "partial"
    shutil.copytree(STANDINS / "es-at-scale", partial)
    (partial / "es_at_scale/utils/reward_shaping.py").unlink()
    (partial / "LICENSE.txt").unlink()
    info = inspect_clone(target, partial)
    assert info.missing == ["es_at_scale/utils/reward_shaping.py"]
    assert any("licence file LICENSE.txt not found" in w for w in info.warnings)
    assert info.commit is None and any("not a git checkout" in w for w in info.warnings)


def test_licence_hash_and_validated_commit_prefix(tmp_path):
    import hashlib
    info = inspect_clone(TARGETS["es-awd"], STANDINS / "es-awd")
    assert info.licence_file == "LICENCE"
    assert info.licence_sha256 == hashlib.sha256((STANDINS / "es-awd/LICENCE").read_bytes()).hexdigest()
    clone = tmp_path / "c"
    shutil.copytree(STANDINS / "es-awd", clone)
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@e", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@e",
           "PATH": "/usr/bin:/bin"}
    for args in (["init", "-q"], ["add", "."], ["commit", "-q", "-m", "x"]):
        subprocess.run(["git", "-C", str(clone), *args], check=True, env=env)
    info = inspect_clone(TARGETS["es-awd"], clone)
    assert info.commit and info.dirty is False
    assert any("f432ff8" in w for w in info.warnings)


# ------------------------------------------------------------------ cases, statuses


def test_matrix_ids_are_unique_and_cover_the_issue():
    matrix = cases.build_matrix(["es-at-scale", "es-awd"], ["cpu", "cuda"], ["f32", "f16", "bf16"],
                                ["iid", "correlated"], 6, 0.001, 0.0005, 3)
    ids = [c.case_id for c in matrix]
    assert len(ids) == len(set(ids)) == 2 * (1 + 4 * 2 * 5 + 4 * 2 * 9)
    paper = [c for c in matrix if c.op == "update" and c.population == 30]
    assert {(c.sigma, c.alpha) for c in paper} == {(0.001, 0.0005)}
    assert all(c.big for c in matrix if c.op not in ("loop", "zscore"))
    assert cases.select(matrix, "es-awd/cpu/bf16/iid/mirrored") == [
        c for c in matrix if c.case_id == "es-awd/cpu/bf16/iid/mirrored/N6"]
    assert len(cases.select(matrix, "*/cuda/*/update-l?/*")) == 2 * 4 * 2


def test_mirrored_population_is_even():
    matrix = cases.build_matrix(["es-awd"], ["cpu"], ["f32"], ["iid"], 5, 0.001, 0.0005, 1)
    assert {c.population for c in matrix if c.op == "mirrored"} == {6}


def _frame(rows):
    base = {"target": "es-awd", "dtype": "f32", "scheme": "iid", "op": "perturb", "case": "c", "detail": "",
            "eager": False}
    return pd.DataFrame([dict(base, **r) for r in rows])


@pytest.mark.parametrize("statuses, setup, code", [
    (["pass", "skipped", "artifact"], False, 0),
    (["pass", "fail"], False, 1), (["pass", "error"], False, 1), (["pass", "unverifiable"], False, 1),
    (["skipped", "artifact"], False, 1), ([], False, 1), (["pass"], True, 2)])
def test_exit_codes(statuses, setup, code):
    assert exit_code(pd.DataFrame({"status": statuses}, dtype=object), setup) == code


def test_eager_anywhere_makes_iid_rows_of_that_target_unverifiable():
    frame = _post_process(_frame([{"status": "pass", "case": "a"},
                                  {"status": "unverifiable", "case": "b", "eager": True},
                                  {"status": "pass", "scheme": "correlated", "case": "c"},
                                  {"status": "pass", "target": "es-at-scale", "case": "d"}]))
    assert list(frame["status"]) == ["unverifiable", "unverifiable", "pass", "pass"]
    assert "eager consumption" in frame["detail"][0] and "eager" not in frame.columns


def test_summary_pivot_counts_statuses():
    pivot = summary_pivot(_frame([{"status": "pass"}, {"status": "fail"}, {"status": "pass", "dtype": "bf16"}]))
    row = pivot[(pivot["op"] == "perturb")].iloc[0]
    assert row["f32/iid"] == "1 pass, 1 fail" and row["bf16/iid"] == "1 pass"


# ------------------------------------------------------------------ parameter sets


def test_parameter_sets_shapes_and_roundtrip(tmp_path):
    names, tensors = paramsets.build("mixed", big=True)
    shapes = [tuple(t.shape) for t in tensors]
    assert () in shapes and shapes.count((1001,)) == 2 and max(t.numel() for t in tensors) >= 1_000_000
    assert all(t.numel() % 32 for t in tensors if t.dim())
    assert {t.dtype for t in tensors} == {torch.float32, torch.float16, torch.bfloat16}
    path = paramsets.write(tmp_path / "s.npz", names, tensors)
    got_names, arrays, dtypes = paramsets.read(path)
    assert got_names == names and dtypes == [paramsets.dtype_name(t) for t in tensors]
    for t, a in zip(tensors, arrays):
        assert np.array_equal(paramsets.bits_of(t), a) and a.shape == tuple(t.shape)
    back = child.load_set(path, "cpu")[1]
    for b, t in zip(back, tensors):
        assert b.dtype == t.dtype and np.array_equal(paramsets.bits_of(b), paramsets.bits_of(t))
    offset = paramsets.build("f32", big=False, variant="offset")[1]
    assert not torch.equal(offset[0], paramsets.build("f32", big=False)[1][0])


# ------------------------------------------------------------------ noise hook (child side)


@pytest.fixture
def hook():
    h = child.NoiseHook()
    tensors = [torch.zeros(3, 5, dtype=torch.bfloat16), torch.zeros(7, dtype=torch.float32)]
    model = child.StandInModel(["a", "b"], tensors)
    h.configure(model, {1000: 0x1234, 2000: 0x5678}, "iid", "poly32", None)
    return h, model, tensors


def _gen(seed):
    g = torch.Generator()
    g.manual_seed(seed)
    return g


def test_hook_draws_the_contract_stream_of_the_current_slot(hook):
    h, model, tensors = hook
    drawn = []
    for slot, t in enumerate(model.parameters()):
        drawn.append(h(t.shape, dtype=t.dtype, generator=_gen(2000)))
    for slot, (t, d) in enumerate(zip(tensors, drawn)):
        stream = es_rng.stream_seed(0x5678, slot, "iid")
        want = torch.from_numpy(es_rng.gaussian(stream, t.numel(), mapping="poly32")).to(t.dtype).reshape(t.shape)
        assert d.dtype == t.dtype and d.shape == t.shape
        assert np.array_equal(paramsets.bits_of(d), paramsets.bits_of(want))
    assert h.draws == [(2000, 0), (2000, 1)]


def test_hook_refuses_unattributable_draws(hook):
    h, model, tensors = hook
    with pytest.raises(child.NoiseAttributionError, match="before any parameter"):
        h((3,), generator=_gen(1000))
    next(model.parameters())
    with pytest.raises(child.NoiseAttributionError, match="without a generator"):
        h((3,))
    with pytest.raises(child.NoiseAttributionError, match="unknown seed 1001"):
        h((3,), generator=_gen(1001))


def test_draw_audit_detects_eager_consumption(hook):
    h, model, tensors = hook
    child.HOOK = h
    try:
        audit = child.DrawAudit()
        params = list(model.parameters())          # eager: every draw lands on the last slot
        for t in params:
            h(t.shape, dtype=t.dtype, generator=_gen(1000))
        audit.check("eager call", child.expected_draws(tensors, [1000]))
        assert not audit.result()["ok"] and "slot 0: 0 (expected 1)" in audit.result()["detail"]
        lazy = child.DrawAudit()
        for t in model.parameters():
            h(t.shape, dtype=t.dtype, generator=_gen(1000))
        lazy.check("lazy call", child.expected_draws(tensors, [1000]))
        assert lazy.result()["ok"]
    finally:
        child.HOOK = child.NoiseHook()


def test_expected_draws_with_caching():
    tensors = [torch.zeros(4), torch.zeros(4), torch.zeros(2, 2), torch.zeros(4, dtype=torch.float16)]
    assert child.expected_draws(tensors, [7], caching=True) == {(7, 0): 1, (7, 2): 1, (7, 3): 1}
    assert sum(child.expected_draws(tensors, [7, 8]).values()) == 8


@given(st.integers(2, 40), st.lists(st.sampled_from(["f32", "f16", "bf16"]), min_size=1, max_size=4),
       st.sampled_from([0.0005, 0.001]))
def test_case_ids_stay_unique_with_population_30_and_repeated_options(population, dtypes, alpha):
    matrix = cases.build_matrix(["es-at-scale", "es-awd", "es-awd"], ["cpu", "cpu"], dtypes, ["iid", "iid"],
                                population, 0.001, alpha, 1)
    ids = [c.case_id for c in matrix]
    assert len(ids) == len(set(ids))
    paper = [c for c in matrix if c.op == "update" and (c.population, c.alpha) == (30, 0.0005)]
    assert len(paper) == len(set(dtypes)) + (len(set(dtypes)) > 1)      # the paper's case is always there, once
    if population == 30 and alpha != 0.0005:   # the user's N = 30 update with its own alpha is kept too
        assert any(c.op == "update" and c.population == 30 and c.alpha == alpha for c in matrix)


def test_reused_slots_follow_device_dtype_and_shape():
    from esverify.oracle.runner import reused_slots
    names, tensors = paramsets.build("f32", big=False)
    assert reused_slots(names, tensors) == ["w_pair_b"]          # w_reshaped: same size, another shape
    names, tensors = paramsets.build("mixed", big=False)
    assert reused_slots(names, tensors) == []                     # the pair has two dtypes in the mixed set
