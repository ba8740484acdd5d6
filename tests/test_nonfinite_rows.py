"""Rows with non-finite rewards (docs/parity.md, "Reward populations"): a NaN reward and an infinite one.

- the `nan` and `inf` populations: the `normal` draw with one member's reward not finite; z-scored as the
  references do (numpy's mean and std, then (r - mean) / (std + 1e-8)), every coefficient is NaN;
- our side's update with those coefficients follows the reference's own torch calls on whole tensors, and
  with finite coefficients those calls give the profile's bits (so they are the reference's arithmetic);
- the coefficients reach the child with their bits (JSON spells every NaN alike);
- (slow) the stand-ins pass every such row, the training loops' (fit with a NaN reward, main with an
  infinite one), the paper's countdown script's and EGGROLL's (NaN rewards) included, and an edit that maps
  non-finite coefficients (the paper's script: normalised rewards; EGGROLL: pair differences) to zero fails
  exactly those rows, in es-at-scale, es-awd, the paper's script and EGGROLL.
"""
from __future__ import annotations

import importlib
import sys

import numpy as np
import pytest
import torch

from esverify.es import Config
from esverify.oracle import adapters, cases, nonfinite, ours, rewards
from esverify.oracle.ours import SlotMappedTrainer
from esverify.paths import oracles_dir


def _bits(t: torch.Tensor) -> np.ndarray:
    width = torch.finfo(t.dtype).bits
    return t.contiguous().view({16: torch.int16, 32: torch.int32, 64: torch.int64}[width]).numpy().copy()


@pytest.mark.parametrize("shape", rewards.NONFINITE)
def test_nonfinite_populations_make_every_coefficient_nan(shape):
    r = rewards.draw(shape, 42, 30)
    normal = rewards.draw("normal", 42, 30)
    bad = ~np.isfinite(r)
    assert bad.sum() == 1 and (np.isnan(r[bad]).all() if shape == "nan" else (r[bad] == np.inf).all())
    assert np.array_equal(r[~bad], normal[~bad])                  # the normal draw otherwise
    assert np.array_equal(rewards.draw(shape, 42, 30), r, equal_nan=True)
    c, mean, std = nonfinite.zscore(r)
    assert np.isnan(c).all() and rewards.expectations(shape, r, c) == []
    assert np.isnan(std) and (np.isnan(mean) if shape == "nan" else mean == np.inf)
    # a shaping that guards against them (every coefficient zero) does not meet the expectation
    assert rewards.expectations(shape, r, np.zeros(30)) != []
    with pytest.raises(ValueError, match="rewards must be one of"):
        rewards.check_shape("nan!", 30)


def test_finite_populations_keep_their_z_scores():
    """The references' arithmetic is the trainer's z-score on finite rewards, bit for bit."""
    from esverify.es import shape_rewards
    for shape in rewards.SHAPES:
        r = rewards.draw(shape, 7, 30)
        assert np.array_equal(nonfinite.zscore(r)[0].view(np.uint64), shape_rewards(r, "zscore")[0].view(np.uint64))


def _trainer(target, dtype_set, coeff_count=6):
    torch.manual_seed(3)
    named = [("a", torch.randn(37, 3)), ("b", torch.randn(41).to(torch.bfloat16)), ("c", torch.randn(29, 2).half()),
             ("d", torch.randn(()))][: (4 if dtype_set == "mixed" else 1)]
    config = Config(sigma=0.01, alpha=0.003, population=coeff_count, scheme="iid", profile=adapters.get(target).profile,
                    seed=5, shaping="none")   # the coefficients as given, as the update rows hand them
    return SlotMappedTrainer(named, config), [t for _, t in named]


@pytest.mark.parametrize("target", ["es-at-scale", "es-awd"])
def test_the_update_as_written_is_the_profile_on_finite_coefficients(target):
    """The reference's own torch calls (its adapter's nonfinite_update) with finite coefficients give the bits
    of our profile's update: the transcription is the reference's arithmetic, so its NaN bits are too."""
    torch.set_num_threads(1)
    coeffs = np.random.default_rng(1).normal(size=6)
    t1, p1 = _trainer(target, "mixed")
    t2, p2 = _trainer(target, "mixed")
    t1.update(coeffs)
    nonfinite.update(t2, coeffs, adapters.get(target).nonfinite_update)
    for a, b in zip(p1, p2):
        assert np.array_equal(_bits(a), _bits(b)), (target, a.dtype)
    # the generic path (the profile's calls without the trainer's refusal) too
    t3, p3 = _trainer(target, "mixed")
    nonfinite.update(t3, coeffs)
    for a, b in zip(p1, p3):
        assert np.array_equal(_bits(a), _bits(b)), (target, a.dtype)


@pytest.mark.parametrize("target", ["es-at-scale", "es-awd"])
@pytest.mark.parametrize("shape", rewards.NONFINITE)
def test_nan_coefficients_make_every_weight_nan_where_the_trainer_refuses(target, shape):
    coeffs = nonfinite.zscore(rewards.draw(shape, 42, 6))[0]
    trainer, params = _trainer(target, "mixed")
    with pytest.raises(ValueError, match="poison every coefficient; nothing was changed"):
        trainer.update(coeffs)
    nonfinite.update(trainer, coeffs, adapters.get(target).nonfinite_update)
    assert all(torch.isnan(p.float()).all() for p in params)


def test_the_child_gets_the_coefficients_bit_for_bit(monkeypatch):
    """JSON spells every NaN alike: the command carries the bit patterns of a list with a non-finite value
    (`exact`), and the child's drivers read them back with their sign and payload."""
    monkeypatch.syspath_prepend(str(oracles_dir()))
    child_loops = importlib.import_module("child_loops")
    values = [0.5, float(np.float64(-np.nan)), float("nan"), float("inf"), -0.0]
    assert np.float64(values[1]).view(np.uint64) >> np.uint64(63) == 1     # a negative NaN
    extra = ours.exact_floats(coeffs=values, fine=[1.0, 2.0])
    assert set(extra["exact"]) == {"coeffs"} and ours.exact_floats(fine=[1.0]) == {}
    import json
    case = json.loads(json.dumps({"coeffs": values, **extra}))
    back = child_loops.exact(case, "coeffs")
    assert np.array_equal(np.array(back).view(np.uint64), np.array(values).view(np.uint64))
    assert np.array(case["coeffs"]).view(np.uint64)[1] != np.array(values).view(np.uint64)[1]   # JSON lost it
    assert child_loops.exact({"mean": 1.5}, "mean", single=True) == 1.5
    case = json.loads(json.dumps({"mean": float("nan"), **ours.exact_floats(mean=[values[1]])}))
    assert np.float64(child_loops.exact(case, "mean", single=True)).view(np.uint64) == \
        np.float64(values[1]).view(np.uint64)


def test_the_matrix_has_the_nonfinite_rows_and_the_fuzzer_draws_none():
    matrix = cases.build_matrix(["es-at-scale", "es-awd"], ("cpu",), ("f32", "bf16", "mixed"),
                                ("iid", "correlated"), loops=False)
    ids = {c.case_id for c in matrix if c.rewards in rewards.NONFINITE}
    assert ids == {"es-at-scale/cpu/f64/-/zscore/N30/nan", "es-at-scale/cpu/f64/-/zscore/N30/inf",
                   "es-at-scale/cpu/mixed/correlated/update/N30/nan", "es-at-scale/cpu/mixed/correlated/update/N30/inf",
                   "es-awd/cpu/mixed/correlated/update-none/N30/nan", "es-awd/cpu/mixed/correlated/update-none/N30/inf"}
    rng = np.random.default_rng(0)
    drawn = {cases.random_case(rng, ["es-at-scale", "es-awd"]).rewards for _ in range(200)}
    assert not drawn & set(rewards.NONFINITE)


@pytest.mark.slow
def test_stand_ins_pass_the_nonfinite_rows_and_a_nan_to_zero_mapping_fails_them(tmp_path):
    """Every nan/inf row of the unchanged stand-ins passes bit for bit (NaN weights included); an update
    that maps a non-finite coefficient to zero (bit-identical on finite ones) fails exactly those rows."""
    sys.path.insert(0, str(oracles_dir().parent / "tests"))
    from esverify.oracle import Options, run_parity
    from standins.mutants import STANDINS, make_mutant, make_variant
    for target, op, loop, mutant in (("es-at-scale", "update", "*/fit/N7/nan", "update-nonfinite-coeff-zero"),
                                     ("es-awd", "update-none", "*/main/N7/inf", "awd-update-nonfinite-coeff-zero")):
        for clone, want in ((STANDINS / target, "pass"), (make_mutant(tmp_path / mutant, mutant), "fail")):
            result = run_parity(Options(ref=str(clone), target=target, devices=("cpu",), dtypes=("f32",),
                                        case=f"*/{op}/N30/*", out=str(tmp_path / f"{mutant}-{want}"), quiet=True))
            frame = result.frame
            odd = frame["case"].str.endswith(("/nan", "/inf"))
            assert odd.sum() == 2 and (frame.loc[odd, "status"] == want).all(), frame[["case", "status"]]
            assert (frame.loc[~odd, "status"] == "pass").all() and (~odd).sum() >= 5
            if want == "fail":
                assert all("elements differ" in d for d in frame.loc[odd, "detail"])
            # the training loop with one prompt's reward NaN (-inf for es-awd) for every member: every
            # coefficient NaN, the parameters after each update compared from their files, NaN bits included
            looped = run_parity(Options(ref=str(clone), target=target, devices=("cpu",), dtypes=("f32",),
                                        schemes=("correlated",), case=loop,
                                        out=str(tmp_path / f"{mutant}-{want}-loop"), quiet=True)).frame
            assert len(looped) == 1 and looped["status"].iloc[0] == want, looped[["case", "status", "detail"]]
            if want == "fail":
                assert "parameters after the update" in looped["detail"].iloc[0]
    # the paper's countdown script: the reward target NaN, so every member's reward is NaN; its normalised
    # rewards mapped to zero (a nan_to_num after the normalisation) fail the row, and only it
    line = "        rewards_normalized = (rewards - rewards.mean()) / (rewards.std() + 1e-8)\n"
    paper = make_variant(tmp_path / "paper", "es-at-scale", [(
        "archive/es_fine-tuning_countdown.py", line,
        line + "        rewards_normalized = np.nan_to_num(rewards_normalized, nan=0.0, posinf=0.0, neginf=0.0)\n")])
    for clone, want in ((STANDINS / "es-at-scale", "pass"), (paper, "fail")):
        frame = run_parity(Options(ref=str(clone), target="es-paper", devices=("cpu",), dtypes=("f32",),
                                   case="*/main-countdown/N6*", out=str(tmp_path / f"paper-{want}"),
                                   quiet=True)).frame
        nan = frame["case"].str.endswith("/nan")
        assert nan.sum() == 1 and frame.loc[nan, "status"].iloc[0] == want, frame[["case", "status", "detail"]]
        assert (frame.loc[~nan, "status"] == "pass").all() and (~nan).sum() >= 2
    # the skill page's sample: the reward target NaN; z-scores mapped to zero fail the row, and only it
    line = "        rewards_normalized = (rewards - rewards.mean()) / (rewards.std() + 1e-8)\n"
    sample = make_variant(tmp_path / "skill", "skill-sample", [(
        "es_finetuning_skill.py", line,
        line + "        rewards_normalized = np.nan_to_num(rewards_normalized, nan=0.0, posinf=0.0, neginf=0.0)\n")])
    for clone, want in ((STANDINS / "skill-sample", "pass"), (sample, "fail")):
        frame = run_parity(Options(ref=str(clone), target="skill-sample", devices=("cpu",), dtypes=("f32",),
                                   noises=("contract",), case="*/N5*", out=str(tmp_path / f"skill-{want}"),
                                   quiet=True)).frame
        nan = frame["case"].str.endswith("/nan")
        assert nan.sum() == 1 and frame.loc[nan, "status"].iloc[0] == want, frame[["case", "status", "detail"]]
        assert (frame.loc[~nan, "status"] == "pass").all() and (~nan).sum() >= 1
    # EGGROLL: the first prompt's reward NaN for every member; pair differences mapped to zero fail the row
    from standins.eggroll_mutants import MUTANTS
    mutant = make_variant(tmp_path / "egg", "eggroll-vllm", MUTANTS["nan-pair-differences-to-zero"].edits)
    for clone, want in ((STANDINS / "eggroll-vllm", "pass"), (mutant, "fail")):
        frame = run_parity(Options(ref=[str(clone)], target="eggroll", devices=("cpu",), case="*-nan",
                                   out=str(tmp_path / f"egg-{want}"), quiet=True)).frame
        assert list(frame["status"]) == [want], frame[["case", "status", "detail"]]
        if want == "fail":
            assert "engine 0 after the update" in frame["detail"].iloc[0]
