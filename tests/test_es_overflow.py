"""Shaping when an f64 intermediate overflows (docs/numerics.md §2, *Overflow*).

Finite rewards can overflow f64 inside numpy: [1e200, -1e200, 0, 1] has a finite true std (7.07e199)
but numpy squares the deviations first, so its std is inf, every z-score coefficient +-0, and the
step was a silent no-op that still advanced the iteration counter. Every shaping now refuses (nothing
changed, an error naming the intermediate) or computes correctly.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

from esverify.es import Config, Trainer, reference, schedule, shape_rewards
from esverify.es.shaping import RewardOverflowError

STD_OVERFLOW = [1e200, -1e200, 0.0, 1.0]
MEAN_OVERFLOW = [1.7e308, 1.7e308, 1.0, 2.0]


def test_the_values_really_overflow_in_numpy():
    with np.errstate(all="ignore"):
        assert np.std(np.array(STD_OVERFLOW)) == np.inf and np.isfinite(np.mean(np.array(STD_OVERFLOW)))
        assert np.mean(np.array(MEAN_OVERFLOW)) == np.inf
        coeffs = (np.array(STD_OVERFLOW) - 0.25) / (np.inf + 1e-8)
    assert not coeffs.any()                                  # the silent no-op: every coefficient is +-0


@pytest.mark.parametrize("rewards, what", [(STD_OVERFLOW, "the standard deviation"), (MEAN_OVERFLOW, "the mean")])
def test_zscore_refuses_naming_the_intermediate(rewards, what):
    with pytest.raises(RewardOverflowError, match=f"z-score shaping: {what} .*overflows f64.*nothing was changed"):
        shape_rewards(rewards, "zscore")
    with pytest.raises(RewardOverflowError):                 # the straight-line reference agrees
        reference.shape(rewards, "zscore")


@pytest.mark.parametrize("rewards", [STD_OVERFLOW, MEAN_OVERFLOW])
def test_the_other_shapings_compute_and_report_finite_statistics(rewards):
    coeffs, stats = shape_rewards(rewards, "centered_ranks")
    order = np.argsort(np.argsort(rewards, kind="stable"), kind="stable")
    assert coeffs.tolist() == [float(np.float32(np.float32(k / 3) - np.float32(0.5))) for k in order]
    _, none_stats = shape_rewards(rewards, "none")
    for s in (stats, none_stats):
        assert np.isfinite(s["mean"]) and np.isfinite(s["std"])
    if rewards is STD_OVERFLOW:   # the true values: mean 0.25, std = sqrt(2e400 / 4) = 7.0710678118654755e199
        assert stats["mean"] == 0.25 and stats["std"] == pytest.approx(7.0710678118654755e199, rel=1e-15)
    else:
        assert stats["mean"] == pytest.approx(8.5e307, rel=1e-15)


def _trainer(shaping):
    torch.manual_seed(0)
    w = torch.randn(37)
    return w, Trainer([w], Config(population=4, shaping=shaping, sigma=0.01, restore="snapshot"))   # bitwise restore


@pytest.mark.parametrize("shaping, rewards", [("zscore", STD_OVERFLOW), ("zscore", MEAN_OVERFLOW),
                                              ("none", [1e39, 0.0, 1.0, 2.0])])
def test_a_refused_update_changes_nothing(shaping, rewards):
    """zscore's overflow, and `none` with a coefficient beyond f32 (rd32(1e39) = inf), are refused."""
    w, trainer = _trainer(shaping)
    before, it = w.clone(), trainer.iteration
    with pytest.raises(ValueError, match="nothing was changed"):
        trainer.update(rewards)
    assert torch.equal(w.view(torch.int32), before.view(torch.int32)) and trainer.iteration == it
    with pytest.raises(ValueError):                          # step: the weights are put back, no update
        trainer.step(lambda m: rewards[m])
    assert torch.equal(w.view(torch.int32), before.view(torch.int32)) and trainer.iteration == it


def test_centered_ranks_steps_on_overflowing_rewards():
    w, trainer = _trainer("centered_ranks")
    before = w.clone()
    stats = trainer.update(STD_OVERFLOW)
    assert not torch.equal(w, before) and trainer.iteration == 1 and np.isfinite(stats["std"])


def test_member_rewards_that_overflow_are_refused():
    with pytest.raises(ValueError, match="mean_reward: numpy's mean .* overflows f64"):
        schedule.mean_reward([1.7e308, 1.7e308])
    with pytest.raises(ValueError, match="batch_weighted_mean: the running total after mini-batch 1 overflows"):
        schedule.batch_weighted_mean([[1.7e308], [1.7e308]])
    assert schedule.mean_reward([1e308, -1e308, 3.0]) == 1.0
