"""Unit tests of the oracle pieces that need no child: comparison (docs/numerics.md §7), clone
inspection (docs/references.md §4), the case matrix, statuses and exit codes, parameter
sets, and the child-side noise hook and draw accounting (docs/references.md §3), which
the test imports by path from oracles/ (the esverify package never does).
"""
from __future__ import annotations

import importlib.util
import math
import shutil
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from esverify import bits
from esverify import rng as es_rng
from esverify.oracle import cases, compare, paramsets
from esverify.oracle import adapters
from esverify.oracle.clones import CloneError, inspect_clone
from esverify.oracle.adapters import all_adapters

LOOP_OPS = tuple(op for a in all_adapters() for op in a.loop_ops)
from esverify.oracle.console import exit_code, summary_pivot
from esverify.paths import oracles_dir
from standins.mutants import STANDINS


def _load_child_module():
    # the child's modules import each other by plain name, as the child's sys.path lets them: without this
    # the file failed alone (it passed in the suite only when another file had added the folder first)
    if str(oracles_dir()) not in sys.path:
        sys.path.insert(0, str(oracles_dir()))
    spec = importlib.util.spec_from_file_location("child_server_under_test", oracles_dir() / "child_server.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


child = _load_child_module()

# ------------------------------------------------------------------ compare


@given(st.lists(st.floats(-1e3, 1e3, width=32), min_size=1, max_size=50), st.data())
def test_one_flipped_bit_is_found_with_its_ulp_distance(values, data):
    ours = torch.tensor(values, dtype=torch.float32)
    raw = paramsets.tensor_bits(ours).copy()
    i = data.draw(st.integers(0, len(values) - 1))
    bit = data.draw(st.integers(0, 30))
    raw[i] ^= np.uint32(1 << bit)
    result = compare.compare([ours], [raw], ["f32"], ["w"])
    assert result.mismatches == 1 and result.elements == len(values)
    assert result.first_index == f"w[{i}]"
    expected = bits.ulp_distance(paramsets.tensor_bits(ours)[i:i + 1], raw[i:i + 1], "f32")[0]
    assert result.max_ulp_diff == expected
    assert result.first_theirs == bits.describe(int(raw[i]), "f32")


def test_identical_results_and_signed_zero():
    t = torch.tensor([0.0, 1.5, -2.0], dtype=torch.bfloat16)
    same = compare.compare([t], [paramsets.tensor_bits(t)], ["bf16"])
    assert (same.mismatches, same.max_ulp_diff, same.max_abs_diff) == (0, 0, 0.0)
    neg_zero = paramsets.tensor_bits(torch.tensor([-0.0, 1.5, -2.0], dtype=torch.bfloat16))
    diff = compare.compare([t], [neg_zero], ["bf16"])
    assert diff.mismatches == 1 and diff.max_ulp_diff == 0 and diff.first_index == "slot0[0]"


def test_nan_and_layout_are_reported_by_name():
    t = torch.tensor([1.0, 2.0], dtype=torch.float16)
    nan = paramsets.tensor_bits(torch.tensor([1.0, float("nan")], dtype=torch.float16))
    result = compare.compare([t], [nan], ["f16"])
    assert result.mismatches == 1 and "nan" in result.specials
    assert "ours is f16 (2,), theirs f32 (2,)" in compare.compare([t], [np.zeros(2, np.uint32)], ["f32"]).layout_error


def test_compare_rewards():
    assert compare.compare_rewards([[1.0, 2.0]], [[1.0, 2.0]]) == ""
    assert "iteration 0 member 1" in compare.compare_rewards([[1.0, 2.0]], [[1.0, 2.0000000000000004]])


# ------------------------------------------------------------------ clones


def test_clone_errors_and_missing_files(tmp_path):
    target = adapters.get("es-at-scale")
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
    info = inspect_clone(adapters.get("es-awd"), STANDINS / "es-awd")
    assert info.licence_file == "LICENCE"
    assert info.licence_sha256 == hashlib.sha256((STANDINS / "es-awd/LICENCE").read_bytes()).hexdigest()
    clone = tmp_path / "c"
    shutil.copytree(STANDINS / "es-awd", clone)
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@e", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@e",
           "PATH": "/usr/bin:/bin"}
    for args in (["init", "-q"], ["add", "."], ["commit", "-q", "-m", "x"]):
        subprocess.run(["git", "-C", str(clone), *args], check=True, env=env)
    info = inspect_clone(adapters.get("es-awd"), clone)
    assert info.commit and info.dirty is False
    assert any("f432ff8" in w for w in info.warnings)


# ------------------------------------------------------------------ cases, statuses


def test_matrix_ids_are_unique_and_cover_the_issue():
    matrix = cases.build_matrix(["es-at-scale", "es-awd"], ["cpu", "cuda"], ["f32", "f16", "bf16"],
                                ["iid", "correlated"], iterations=3)
    ids = [c.case_id for c in matrix]
    assert len(ids) == len(set(ids))
    paper = [c for c in matrix if c.tag == "paper"]
    assert paper and {(c.population, c.sigma, c.alpha) for c in paper} == {(30, 0.001, 0.0005)}
    others = [c for c in matrix if c.tag != "paper" and c.op != "zscore"]
    assert all(c.sigma != 0.001 and c.alpha not in (0.0005, c.sigma / 2) for c in others)
    assert len({(c.sigma, c.alpha) for c in others if c.device == "cpu"}) > 0.9 * len(others) / 2
    # native noise: correlated rows only, for every op of both targets
    native = [c for c in matrix if c.noise == "native"]
    assert native and {c.scheme for c in native} == {"correlated"}
    assert {c.op for c in native} == {op for a in adapters.all_adapters() if a.name in ("es-at-scale", "es-awd")
                                      for op in a.all_ops()} - {"zscore"}
    assert all(c.extra["noise"] == "native" for c in native if c.op in LOOP_OPS)   # what the child is told
    # decay: lambda never a power of two, plus a lambda-0 row
    lams = [c.lam for c in matrix if c.decay != "none" and c.tag != "lambda0"]
    assert lams and all(math.frexp(lam)[0] != 0.5 for lam in lams)
    assert {c.lam for c in matrix if c.tag == "lambda0"} == {0.0}
    # populations across numpy's pairwise-summation boundaries, 30 included, for zscore and update
    assert {8, 9, 16, 17, 30, 127, 128, 129} <= {c.population for c in matrix if c.op == "zscore"}
    assert {8, 9, 16, 17, 30, 127, 128, 129} <= {c.population for c in matrix if c.op == "update"}
    main = [c.population for c in matrix if c.op == "perturb"]
    assert len(set(main)) == 1 and main[0] % 2 and main[0] % 3
    # seed handles: unsorted, irregular, far apart, below 2**31; cpu and cuda rows share parameters
    for c in matrix:
        h = list(c.handles)
        assert len(h) == c.population * (c.iterations if c.op == "loop" else 1)
        gaps = np.diff(sorted(h))
        assert (gaps >= cases.HANDLE_GAP).all() and max(h) < 2 ** 31
        if len(h) > 2:
            assert h != sorted(h) and len(set(gaps.tolist())) > 1
    twins = {c.case_id.replace("/cuda/", "/cpu/"): c for c in matrix if c.device == "cuda"}
    for c in matrix:
        if c.device == "cpu":
            twin = twins[c.case_id]
            assert (twin.sigma, twin.alpha, twin.lam, twin.handles) == (c.sigma, c.alpha, c.lam, c.handles)
    assert all(c.big == (c.noise == "contract") for c in matrix          # the `layers` set is small on purpose
               if c.op not in ("loop", "zscore", *LOOP_OPS) and c.population == main[0] and c.tag != "layers")
    # the training-loop rows: small set, contract noise (both schemes) and native noise (correlated), fit's
    # population not a multiple of its 2 engines
    loop_rows = [c for c in matrix if c.op in LOOP_OPS]
    assert loop_rows and not any(c.big for c in loop_rows)
    assert {(c.noise, c.scheme) for c in loop_rows} == {("contract", "iid"), ("contract", "correlated"),
                                                        ("native", "correlated")}
    assert all(c.population % 2 for c in loop_rows if c.op == "fit")
    assert [c.case_id for c in cases.select(matrix, "es-awd/cpu/bf16/iid/mirrored")] == [
        f"es-awd/cpu/bf16/iid/mirrored/N{main[0] + 1}"]


def test_case_seed_decides_every_parameter():
    def params(seed):
        return [(c.case_id, c.sigma, c.alpha, c.lam, c.handles) for c in
                cases.build_matrix(["es-awd"], ["cpu"], ["f32"], ["iid"], 7, iterations=1, case_seed=seed)]
    assert params(5) == params(5)
    differ = [a != b for a, b in zip(params(5), params(6))]
    assert all(differ)
    fixed = cases.build_matrix(["es-at-scale"], ["cpu"], ["f32"], ["iid"], 9, 0.002, 0.003, 1, noises=["contract"])
    assert {(c.sigma, c.alpha) for c in fixed if c.op != "zscore"} == {(0.002, 0.003), (0.001, 0.0005)}


def test_mirrored_population_is_even():
    matrix = cases.build_matrix(["es-awd"], ["cpu"], ["f32"], ["iid"], 5, 0.001, 0.0005, 1)
    assert {c.population for c in matrix if c.op == "mirrored"} == {6}


def test_case_json_round_trip_and_refusals():
    rng = np.random.default_rng(3)
    for _ in range(40):
        case = cases.random_case(rng, ["es-at-scale", "es-awd"])
        back = cases.from_json(cases.to_json(case))
        assert back == case
        for smaller in cases.shrink_candidates(case):
            assert smaller != case and cases.check(smaller) is smaller
            assert (len(smaller.shapes or ()) <= len(case.shapes or ())
                    and smaller.population <= case.population)
    with pytest.raises(ValueError, match="unknown fields"):
        cases.from_json('{"nope": 1}')
    bad = cases.build_matrix(["es-awd"], ["cpu"], ["f32"], ["iid"], 5, iterations=1)[0]
    bad.handles = bad.handles[:1]
    with pytest.raises(ValueError, match="distinct seed handles"):
        cases.check(bad)
    decay = next(c for c in cases.build_matrix(["es-awd"], ["cpu"], ["f32"], ["iid"], 5, iterations=1)
                 if c.op == "decay-l1")
    decay.lam = 0.0       # the decay alone with lambda 0 is not the trainer's "no decay"
    with pytest.raises(ValueError, match="needs lambda > 0"):
        cases.check(decay)


# ------------------------------------------------------------------ diagnoses (compare.diagnose)


def _cmp(mismatches=0, slots=()):
    return compare.Comparison(elements=100, mismatches=mismatches, mismatched_slots=tuple(slots))


def _found(**calls):
    return compare.findings({"ok": False, "calls": [dict(call="update", **calls)]})


def test_skip_is_a_fail_naming_the_slot_never_harmless():
    found = _found(missing=[{"slot": 3, "name": "model.norm.weight"}])
    for scheme in ("iid", "correlated"):
        status, diagnoses, notes = compare.diagnose(scheme, _cmp(5, ["model.norm.weight"]), "", found,
                                                    untouched=[3], sources={})
        assert status == "fail" and diagnoses == ["skip"]
        assert "slot 3 (model.norm.weight) was never drawn" in notes[0]
        assert not any("harmless" in n for n in notes)


def test_bits_decide_accounting_is_never_a_verdict_over_equal_bits():
    """A slot the accounting saw no draw for fails only where bits differ; over equal bits the row passes
    and says that the accounting and the bits disagree (once seen: 0 of 10,827 elements differing)."""
    found = _found(missing=[{"slot": 40, "name": "model.norm.weight"}])
    for scheme in ("iid", "correlated"):
        status, diagnoses, notes = compare.diagnose(scheme, _cmp(0), "", found, untouched=[40], sources={})
        assert (status, diagnoses) == ("pass", [])
        assert "accounting and the bits disagree" in notes[0] and "slot 40 (model.norm.weight)" in notes[0]
        assert compare.diagnose(scheme, _cmp(0), "rewards first differ", found, [40], {})[:2] == ("fail", ["skip"])


def test_judge_reuse_is_one_rule():
    assert compare.judge_reuse("correlated", False, None, "slot 2 (k) <- slot 1")[0] == "pass"
    assert compare.judge_reuse("iid", False, None, "p")[0] == "pass"
    status, text = compare.judge_reuse("correlated", True, None, "p")
    assert status == "fail" and "not the reuse" in text
    assert compare.judge_reuse("iid", True, True, "p")[0] == "artifact"
    status, text = compare.judge_reuse("iid", True, False, "slot 2 (k) <- slot 1", 7)
    assert status == "fail" and "reused noise (slot 2 (k) <- slot 1" in text and "7 element(s) still differ" in text
    status, text = compare.judge_reuse("iid", True, False, "p", "iteration 1: reward of member 0")
    assert status == "fail" and "still differs (iteration 1: reward of member 0)" in text


def test_a_reuse_verdict_enters_every_row_kind_the_same_way():
    """record_reuse: the one place loop rows and the paper-script rows put judge_reuse into a row."""
    diagnoses, notes = ["skip"], ["earlier"]
    assert compare.record_reuse(("pass", "all agree"), "loop", "pass", diagnoses, notes) == "pass"
    assert (diagnoses, notes) == (["skip"], ["earlier", "note: loop: all agree"])
    assert compare.record_reuse(("artifact", "reused"), "fit", "fail", diagnoses, notes) == "artifact"
    assert (diagnoses, notes) == (["skip", "reuse"], ["fit: reused", "earlier", "note: loop: all agree"])


def test_reuse_sources_take_a_same_dtype_draw_of_equal_size_before_another_dtype_of_equal_shape():
    layout = [("f32", (6,)), ("bf16", (2, 3)), ("f32", (3, 2)), ("bf16", (3, 2))]
    assert compare.reuse_sources([2, 3], layout) == {2: 0, 3: 1}


def test_reuse_is_an_artifact_under_iid_only_when_ours_with_the_reuse_agrees():
    found = _found(missing=[{"slot": 2, "name": "k"}])
    status, diagnoses, notes = compare.diagnose("iid", _cmp(9, ["k"]), "", found, [], {2: 1}, whatif=_cmp(0))
    assert (status, diagnoses) == ("artifact", ["reuse"]) and "slot 2 (k) <- slot 1" in notes[0]
    status, _, notes = compare.diagnose("iid", _cmp(9, ["k", "q"]), "", found, [], {2: 1}, whatif=_cmp(4, ["q"]))
    assert status == "fail" and "not only the reuse" in notes[0]
    assert compare.diagnose("correlated", _cmp(0), "", found, [], {2: 1})[0] == "pass"
    assert compare.diagnose("correlated", _cmp(3, ["k"]), "", found, [], {2: 1})[0] == "fail"


def test_eager_is_unverifiable_only_for_iid_rows_and_advanced_is_named():
    found = _found(eager={"slot": 4, "name": "lm_head.weight"})
    assert compare.diagnose("iid", _cmp(7), "", found)[:2] == ("unverifiable", ["eager"])
    status, diagnoses, notes = compare.diagnose("correlated", _cmp(0), "", found)
    assert (status, diagnoses) == ("pass", ["eager"]) and "verified" in notes[0]
    found = _found(advanced=[{"slot": 1, "name": "q", "position": 8643}], advanced_count=1)
    status, diagnoses, notes = compare.diagnose("correlated", _cmp(12, ["q"]), "", found)
    assert status == "fail" and diagnoses == ["advanced"]
    assert notes[0] == ("advanced: slot 1 (q) drew from position 8643 of its stream in update: generator "
                        "reused or not reseeded")


def test_reuse_sources_prefer_the_same_dtype_and_shape():
    layout = [("f32", (13, 77)), ("bf16", (13, 77)), ("f32", (13, 77)), ("f32", (77, 13)), ("f32", (5,))]
    assert compare.reuse_sources([2, 3, 4], layout) == {2: 0, 3: 0}
    assert compare.reuse_sources([1], layout) == {1: 0}


def _frame(rows):
    base = {"target": "es-awd", "dtype": "f32", "scheme": "iid", "noise": "contract", "op": "perturb", "case": "c",
            "detail": ""}
    return pd.DataFrame([dict(base, **r) for r in rows])


@pytest.mark.parametrize("statuses, setup, code", [
    (["pass", "skipped", "artifact"], False, 0),
    (["pass", "fail"], False, 1), (["pass", "error"], False, 1), (["pass", "unverifiable"], False, 1),
    (["skipped", "artifact"], False, 1), ([], False, 1), (["pass"], True, 2)])
def test_exit_codes(statuses, setup, code):
    assert exit_code(pd.DataFrame({"status": statuses}, dtype=object), setup) == code


@pytest.mark.parametrize("statuses, code", [(["pass", "skipped"], 1), (["pass", "artifact"], 0),
                                            (["pass", "not-run"], 1), (["pass"], 0)])
def test_require_all_makes_any_row_not_checked_here_exit_1(statuses, code):
    frame = pd.DataFrame({"status": statuses}, dtype=object)
    assert exit_code(frame, False, require_all=True) == code
    assert exit_code(frame, False) == 0      # without --require-all a skip is no failure


def test_summary_pivot_counts_statuses():
    pivot = summary_pivot(_frame([{"status": "pass"}, {"status": "fail"}, {"status": "pass", "dtype": "bf16"}]))
    row = pivot[(pivot["op"] == "perturb")].iloc[0]
    assert row["f32/iid"] == "1 pass, 1 fail" and row["bf16/iid"] == "1 pass"
    # cpu and cuda are separate rows of the grid
    pivot = summary_pivot(_frame([{"status": "pass", "device": "cpu"}, {"status": "skipped", "device": "cuda"}]))
    assert list(pivot["device"]) == ["cpu", "cuda"] and list(pivot["f32/iid"]) == ["1 pass", "1 skipped"]


# ------------------------------------------------------------------ parameter sets


def test_parameter_sets_shapes_and_roundtrip(tmp_path):
    names, tensors = paramsets.build("mixed", big=True)
    shapes = [tuple(t.shape) for t in tensors]
    assert () in shapes and shapes.count((13, 77)) == 2 and max(t.numel() for t in tensors) >= 1_000_000
    assert {"model.embed_tokens.weight", "model.layers.0.self_attn.q_proj.weight",
            "model.layers.0.self_attn.q_proj.bias", "model.norm.weight", "lm_head.weight"} <= set(names)
    assert dict(zip(names, shapes))["lm_head.weight"] == (1031, 1019)
    assert all(t.numel() % 32 for t in tensors if t.dim())
    assert {t.dtype for t in tensors} == {torch.float32, torch.float16, torch.bfloat16}
    path = paramsets.write(tmp_path / "s.npz", names, tensors)
    got_names, arrays, dtypes = paramsets.read(path)
    assert got_names == names and dtypes == [paramsets.dtype_name(t) for t in tensors]
    for t, a in zip(tensors, arrays):
        assert np.array_equal(paramsets.tensor_bits(t), a) and a.shape == tuple(t.shape)
    back = child.load_set(path, "cpu")[1]
    for b, t in zip(back, tensors):
        assert b.dtype == t.dtype and np.array_equal(paramsets.tensor_bits(b), paramsets.tensor_bits(t))
    offset = paramsets.build("f32", big=False, variant="offset")[1]
    assert not torch.equal(offset[0], paramsets.build("f32", big=False)[1][0])


def test_the_child_reads_a_set_again_from_its_bytes_and_hands_out_new_tensors(tmp_path, monkeypatch):
    """load_set keeps what it parsed, by path, for a file whose bytes are all the same: each call gives new
    tensors (a reference changing one in place changes no later row's set), and a file rewritten with other
    bytes of the same size (the case a size-and-time check would miss) is parsed again."""
    names, tensors = paramsets.build("f16", big=False)[:2]
    path = paramsets.write(tmp_path / "s.npz", names, tensors)
    first = child.load_set(path, "cpu")[1]
    first[0].add_(1.0)
    second = child.load_set(path, "cpu")[1]
    assert all(np.array_equal(paramsets.tensor_bits(a), paramsets.tensor_bits(b)) for a, b in zip(second, tensors))
    assert second[0].data_ptr() != first[0].data_ptr()
    monkeypatch.setattr(child, "SETS_BYTES", 1)                      # over the budget: the newest kept alone
    small = paramsets.write(tmp_path / "t.npz", names[:2], tensors[:2])
    assert len(child.load_set(small, "cpu")[1]) == 2 and list(child._SETS) == [str(small)]
    monkeypatch.undo()
    other = [t.neg() for t in tensors]
    size = path.stat().st_size
    paramsets.write(path, names, other)
    assert path.stat().st_size == size
    again = child.load_set(path, "cpu")[1]
    assert all(np.array_equal(paramsets.tensor_bits(a), paramsets.tensor_bits(b)) for a, b in zip(again, other))


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
        assert np.array_equal(paramsets.tensor_bits(d), paramsets.tensor_bits(want))
    assert h.draws == [(2000, 0, 0, 15), (2000, 1, 0, 7)]      # (handle, slot, position, elements)


def test_hook_refuses_unattributable_draws(hook):
    h, model, tensors = hook
    with pytest.raises(child.NoiseAttributionError, match="before any parameter"):
        h((3,), generator=_gen(1000))
    next(model.parameters())
    with pytest.raises(child.NoiseAttributionError, match="without a generator"):
        h((3,))
    with pytest.raises(child.NoiseAttributionError, match="unknown seed 1001"):
        h((3,), generator=_gen(1001))


def test_a_generator_is_a_stream_that_draws_advance_and_reseeding_rewinds(hook):
    """docs/references.md §3a: a reused generator continues its stream, exactly as torch would."""
    h, model, tensors = hook
    h.scheme = "correlated"
    params = model.parameters()
    next(params)
    g = _gen(2000)
    first = h((4,), generator=g)
    second = h((6,), generator=g)                 # continues: elements 4 .. 9
    whole = es_rng.gaussian(0x5678, 10, mapping="poly32")
    assert np.array_equal(torch.cat([first, second]).numpy(), whole)
    g.manual_seed(2000)                           # rewinds
    again = h((4,), generator=g)
    torch.manual_seed(1)                          # another generator's reseed changes nothing here
    assert np.array_equal(again.numpy(), whole[:4])
    fresh = h((4,), generator=_gen(2000))         # a new generator starts at 0
    assert np.array_equal(fresh.numpy(), whole[:4])
    assert [(d[2], d[3]) for d in h.draws] == [(0, 4), (4, 6), (0, 4), (0, 4)]


def test_the_hook_keeps_drawn_ranges_within_its_byte_budget_and_hands_out_copies(hook):
    """A range drawn again (a member's restore and update after its perturb) comes from the cache with the
    same bits, never as the cached tensor itself; the least recently used range leaves first once the
    cache passes its budget (NOISE_CACHE_BYTES), and the newest is always kept."""
    h, model, tensors = hook
    h.cache.budget = 2 * 4 * 41                                      # two f32 ranges of 40 or 41 elements
    next(model.parameters())
    want = {seed: es_rng.gaussian(es_rng.stream_seed(member, 0, "iid"), 40, mapping="poly32")
            for seed, member in ((1000, 0x1234), (2000, 0x5678))}
    first = h((40,), generator=_gen(1000))
    again = h((40,), generator=_gen(1000))
    assert np.array_equal(first.numpy(), want[1000]) and np.array_equal(again.numpy(), want[1000])
    again.add_(1.0)                                                  # the caller's copy, not the cache's
    assert np.array_equal(h((40,), generator=_gen(1000)).numpy(), want[1000])
    assert len(h.cache) == 1 and h.cache.bytes == 160
    assert np.array_equal(h((40,), generator=_gen(2000)).numpy(), want[2000])
    assert len(h.cache) == 2 and h.cache.bytes == 320
    stream_1000 = es_rng.stream_seed(0x1234, 0, "iid")
    h((40,), generator=_gen(1000))                                   # used again: now the most recent
    h((41,), generator=_gen(2000))                                   # a third range: the least recent leaves
    assert h.cache.keys() == [("poly32", None, stream_1000, 0, 40, "cpu"),       # mapping, backend, stream,
                              ("poly32", None, es_rng.stream_seed(0x5678, 0, "iid"), 0, 41, "cpu")]   # first, n
    assert h.cache.bytes == 4 * 81
    h.cache.budget = 8
    assert np.array_equal(h((39,), generator=_gen(1000)).numpy(), want[1000][:39])   # over the budget: kept alone
    assert len(h.cache) == 1 and h.cache.bytes == 4 * 39


def test_the_hook_keeps_its_ranges_across_cases_under_their_mapping(hook):
    """The cases of a run share member seeds, so the cache outlives a case (configure); its key holds the
    mapping and the backend, so a case on the other mapping draws its own bits, never the kept ones."""
    h, model, tensors = hook
    next(model.parameters())
    stream = es_rng.stream_seed(0x1234, 0, "iid")
    poly = h((40,), generator=_gen(1000))
    h.configure(model, {1000: 0x1234}, "iid", "libm64", None)
    next(model.parameters())
    libm = h((40,), generator=_gen(1000))
    assert np.array_equal(libm.numpy(), es_rng.gaussian(stream, 40, mapping="libm64"))
    assert not np.array_equal(libm.numpy(), poly.numpy())
    assert [k[:3] for k in h.cache.keys()] == [("poly32", None, stream), ("libm64", None, stream)]


@given(st.lists(st.tuples(st.integers(0, 40), st.booleans()), min_size=1, max_size=8),
       st.sampled_from(["iid", "correlated"]))
def test_any_sequence_of_draws_and_reseeds_reads_the_stream_like_torch(steps, scheme):
    """Property (docs/references.md §3a): whatever the draw sizes and reseeds, each draw returns elements
    p .. p+n of its slot's stream, p being what the generator delivered since its last seed."""
    h = child.NoiseHook()
    tensors = [torch.zeros(3), torch.zeros(5)]
    model = child.StandInModel(["a", "b"], tensors)
    h.configure(model, {1000: 0x1234}, scheme, "poly32", None)
    params = model.parameters()
    next(params)
    g, position = _gen(1000), 0
    for k, (n, reseed) in enumerate(steps):
        if k == len(steps) // 2:
            next(params)                           # the second half draws for slot 1
        if reseed:
            g.manual_seed(1000)
            position = 0
        got = h((n,), generator=g)
        stream = es_rng.stream_seed(0x1234, model.current, scheme)
        assert np.array_equal(got.numpy(), es_rng.gaussian(stream, n, first=position, mapping="poly32"))
        assert h.draws[-1] == (1000, model.current, position, n)
        position += n


def test_a_generator_of_another_device_is_refused_like_torch(hook):
    h, model, tensors = hook
    next(model.parameters())
    with pytest.raises(child.GeneratorDeviceError, match="generator on 'cpu'"):
        h((3,), generator=_gen(1000), device="meta")
    assert h.draws == []


def test_native_noise_is_torchs_own_and_still_positioned(hook):
    h, model, tensors = hook
    h.noise = "native"
    next(model.parameters())
    g = _gen(1000)
    a, b = h((40,), generator=g, dtype=torch.bfloat16), h((40,), generator=g, dtype=torch.bfloat16)
    want = torch.randn((80,), dtype=torch.bfloat16, generator=_gen(1000))
    assert torch.equal(a, torch.randn((40,), dtype=torch.bfloat16, generator=_gen(1000)))
    assert not torch.equal(a, b) and [d[2] for d in h.draws] == [0, 40]
    assert want.shape == (80,)


def test_draw_audit_names_eager_missing_extra_and_advanced(hook):
    h, model, tensors = hook
    child.HOOK = h
    try:
        audit = child.DrawAudit(model.names)
        params = list(model.parameters())          # eager: every draw lands on the last slot
        for t in params:
            h(t.shape, dtype=t.dtype, generator=_gen(1000))
        audit.check("eager call", child.expected_draws(tensors, [1000]))
        assert audit.calls[-1]["eager"] == {"slot": 1, "name": "b"}
        g = _gen(1000)
        for t in model.parameters():               # one generator for both tensors: slot 1 is advanced
            h(t.shape, dtype=t.dtype, generator=g)
        audit.check("shared generator", child.expected_draws(tensors, [1000]))
        assert audit.calls[-1]["advanced"] == [{"slot": 1, "name": "b", "position": 15}]
        it = model.parameters()
        t = next(it)
        h(t.shape, dtype=t.dtype, generator=_gen(1000))
        h(t.shape, dtype=t.dtype, generator=_gen(1000))
        next(it)                                   # slot 1 never drawn, slot 0 twice
        audit.check("skip", child.expected_draws(tensors, [1000]))
        assert audit.calls[-1]["missing"] == [{"slot": 1, "name": "b"}]
        assert audit.calls[-1]["extra"] == [{"slot": 0, "name": "a"}]
        lazy = child.DrawAudit(model.names)
        for t in model.parameters():
            h(t.shape, dtype=t.dtype, generator=_gen(1000))
        lazy.check("lazy call", child.expected_draws(tensors, [1000]))
        assert lazy.result() == {"ok": True, "calls": []}
    finally:
        child.HOOK = child.NoiseHook()


def test_expected_draws_with_caching():
    tensors = [torch.zeros(4), torch.zeros(4), torch.zeros(2, 2), torch.zeros(4, dtype=torch.float16)]
    assert child.expected_draws(tensors, [7], caching=True) == {(7, 0): 1, (7, 2): 1, (7, 3): 1}
    assert sum(child.expected_draws(tensors, [7, 8]).values()) == 8


@given(st.one_of(st.none(), st.integers(2, 40)), st.lists(st.sampled_from(["f32", "f16", "bf16"]), min_size=1,
                                                            max_size=4), st.integers(0, 2 ** 32))
@pytest.mark.slow   # 2 s (--durations, 2026-12-03): out of the fast tier
def test_case_ids_stay_unique_with_population_30_and_repeated_options(population, dtypes, case_seed):
    matrix = cases.build_matrix(["es-at-scale", "es-awd", "es-awd"], ["cpu", "cpu"], dtypes,
                                ["iid", "correlated", "iid"], population, iterations=1, case_seed=case_seed)
    ids = [c.case_id for c in matrix]
    assert len(ids) == len(set(ids))
    paper = [c for c in matrix if c.tag == "paper"]
    sets = len(set(dtypes)) + (len(set(dtypes)) > 1)
    assert len(paper) == 3 * sets      # contract iid and correlated, native correlated, once per set
    iid_only = cases.build_matrix(["es-at-scale"], ["cpu"], dtypes, ["iid"], population, iterations=1,
                                  case_seed=case_seed)
    assert not [c for c in iid_only if c.noise == "native"]   # native noise is correlated only
    assert all((c.population, c.sigma, c.alpha) == (30, 0.001, 0.0005) for c in paper)


@pytest.mark.parametrize("start", [(False, False), (True, False), (True, True)])
@pytest.mark.parametrize("on", [False, True])
def test_our_side_runs_under_the_asked_determinism_and_restores_the_previous(start, on):
    """loop_rows._deterministic: fn sees torch's switch as asked (set without loading the compiler when
    it is not loaded), and the previous switch, warn_only included, is back afterwards."""
    import torch

    from esverify.oracle import loop_rows
    saved = (torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled())
    try:
        torch.use_deterministic_algorithms(start[0], warn_only=start[1])
        seen = loop_rows._deterministic(on, lambda: (torch.are_deterministic_algorithms_enabled(),
                                                     torch.is_deterministic_algorithms_warn_only_enabled()))
        assert seen == (on, False)
        assert (torch.are_deterministic_algorithms_enabled(),
                torch.is_deterministic_algorithms_warn_only_enabled()) == start
    finally:
        torch.use_deterministic_algorithms(saved[0], warn_only=saved[1])


@pytest.mark.parametrize("recorder", ["cProfile", "python hook"])
def test_the_row_record_names_the_clone_functions_a_command_ran(tmp_path, monkeypatch, recorder):
    """child_coverage.row_start/row_end: the clone's functions the command ran, in the calling thread
    (cProfile's recorder, or the Python hook where there is none) and in a thread it started; code run
    under `unprofiled` (the child's own machinery) is left out, and recording resumes after it."""
    import threading

    import child_coverage as cc
    clone = tmp_path / "clone"
    clone.mkdir()
    (clone / "mod.py").write_text(
        "def used():\n    return helper()\n\n\ndef helper():\n    return 1\n\n\ndef unused():\n    return 2\n\n\n"
        "def after():\n    return 3\n\n\nclass K:\n    def m(self):\n        return 4\n")
    spec = importlib.util.spec_from_file_location("clone_mod_under_test", clone / "mod.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    monkeypatch.setitem(cc._STATE, "clone", clone.resolve())
    monkeypatch.setitem(cc._STATE, "prefix", str(clone.resolve()) + "/")
    if recorder == "python hook":
        monkeypatch.setattr(cc, "_profiler", lambda: None)
    cc.row_start()
    try:
        mod.used()
        cc.unprofiled(mod.unused)()
        mod.after()
        worker = threading.Thread(target=lambda: mod.K().m())
        worker.start()
        worker.join()
    finally:
        ran = cc.row_end()
    assert ran == {"mod.py": ["K.m", "after", "helper", "used"]}
    assert sys.getprofile() is None


def test_the_row_record_falls_back_to_the_python_hook(monkeypatch):
    """No cProfile recorder on Python 3.12 and newer (there it sees every thread and cannot be paused), and
    none when it will not start (another profiler active): the Python hook records instead."""
    import child_coverage as cc

    class Refuses:
        def enable(self):
            raise ValueError("Another profiling tool is already active")
    monkeypatch.setitem(cc._STATE, "prefix", "/nowhere-at-all/")
    monkeypatch.setattr(cc, "_profiler", lambda: Refuses())
    cc.row_start()
    try:
        assert sys.getprofile() is cc._on_profile and cc._ROW["profiler"] is None
    finally:
        cc.row_end()
    monkeypatch.undo()
    monkeypatch.setattr(cc.sys, "version_info", (3, 12, 0))
    assert cc._profiler() is None


def test_a_run_computes_on_one_torch_thread_and_one_noise_thread_and_gives_the_counts_back(monkeypatch):
    """Runner.run: once _our_side ran (a run imports torch there), our side runs with one torch thread and
    one noise-drawing thread (the children run beside it; the values depend on neither), and both counts
    are as before once the run returns or raises."""
    from esverify.oracle.runner import Runner
    from esverify.rng import numba_backend
    seen = []

    def fake_run(self):
        self._our_side()
        seen.append((torch.get_num_threads(), numba_backend.threads()))
        if len(seen) == 2:
            raise RuntimeError("a failing run")
        return "done"
    monkeypatch.setattr(Runner, "_run", fake_run)
    before = (torch.get_num_threads(), numba_backend.threads())
    numba_backend.set_threads(3)
    try:
        runner = Runner.__new__(Runner)
        assert runner.run() == "done"
        with pytest.raises(RuntimeError, match="a failing run"):
            runner.run()
        assert seen == [(1, 1), (1, 1)]
        assert (torch.get_num_threads(), numba_backend.threads()) == (before[0], 3)
        from esverify.rng import backends        # a parent whose numba does not import: runs all the same
        monkeypatch.setattr(backends, "numba_available", lambda: False)
        monkeypatch.setattr(Runner, "_run", lambda self: (self._our_side(), "ran without numba")[1])
        assert runner.run() == "ran without numba" and numba_backend.threads() == 3
    finally:
        numba_backend.set_threads(before[1])


def test_the_hooks_noise_cache_serves_threads_drawing_at_once(hook):
    """A reference may draw from several threads: with a cache of two ranges and a thread switch every
    microsecond, every draw still returns its range's bits and the cache's byte count stays its contents'."""
    import threading
    h, model, tensors = hook
    h.cache.budget = 2 * 4 * 7
    next(model.parameters())
    want = {seed: es_rng.gaussian(es_rng.stream_seed(member, 0, "iid"), 7, mapping="poly32")
            for seed, member in ((1000, 0x1234), (2000, 0x5678))}
    errors = []

    def draw_many(k):
        try:
            for i in range(1500):
                seed = (1000, 2000)[(i + k) % 2]
                n = 4 + (i + k) % 4
                got = h((n,), generator=_gen(seed))
                assert np.array_equal(got.numpy(), want[seed][:n])
        except Exception as exc:  # noqa: BLE001 - reported below, with the thread
            errors.append(f"thread {k}: {type(exc).__name__}: {exc}")
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        workers = [threading.Thread(target=draw_many, args=(k,)) for k in range(3)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
    finally:
        sys.setswitchinterval(old)
    assert errors == []
    assert h.cache.bytes == sum(4 * n for _, _, _, _, n, _ in h.cache.keys()) and len(h.cache) <= 2


def test_all_of_waits_for_every_future_then_raises_the_first_error():
    """runner._all_of (the children's starts and closes side by side): the results in order; a failing
    call does not stop the others, its exception comes once all are done."""
    import threading
    import time as _time
    from concurrent.futures import ThreadPoolExecutor

    from esverify.oracle.runner import _all_of
    done = []

    def slow(k):
        _time.sleep(0.05 * k)
        done.append(k)
        if k == 1:
            raise ValueError("start 1 failed")
        return k * 10
    with ThreadPoolExecutor(3) as pool:
        assert _all_of([pool.submit(slow, k) for k in (2, 0, 3)]) == [20, 0, 30]
        with pytest.raises(ValueError, match="start 1 failed"):
            _all_of([pool.submit(slow, k) for k in (1, 3)])
    assert sorted(done[3:]) == [1, 3]          # the slower call ran to its end before the error came
    # an exception while waiting (Ctrl-C): on_interrupt before and after the calls end, then it goes on
    calls, release = [], threading.Event()

    class Waiting:
        def __init__(self):
            self.polls = 0

        def exception(self):
            self.polls += 1
            if self.polls == 1:
                raise KeyboardInterrupt
            release.set()

    waiting = Waiting()
    with pytest.raises(KeyboardInterrupt):
        _all_of([waiting], on_interrupt=lambda: calls.append(release.is_set()))
    assert calls == [False, True] and waiting.polls == 2


def test_the_matrix_dtype_names_are_the_parameter_sets():
    """case_model.MATRIX_DTYPES (read by the option checks, which import no torch) names paramsets.DTYPES."""
    from esverify.oracle import paramsets
    from esverify.oracle.case_model import MATRIX_DTYPES
    assert MATRIX_DTYPES == tuple(paramsets.DTYPES) == ("f32", "f16", "bf16")
