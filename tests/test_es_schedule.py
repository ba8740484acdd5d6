"""Seed schedules and reward aggregation of esverify.es.schedule (docs/references.md §5).

Known answers come from numpy's own generator (differential: the schedule
must equal `default_rng((seed or 42) + i + first).integers(0, 2**30, n)`),
the aggregation from exact rational arithmetic, and the trainer's use of a
schedule from its member seeds and its state round trip.
"""
from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from esverify.es import Config, Trainer
from esverify.es.schedule import (batch_weighted_mean, duplicate_seeds, mean_reward, reference_seeds,
                                  schedule_seed)


def test_known_first_seeds():
    # pinned: numpy's PCG64 stream is a documented compatibility promise (NEP 19)
    assert reference_seeds("es-at-scale", 42, 0, 7)[0] == 95832482
    assert reference_seeds("es-awd", 42, 0, 6)[0] == 542587408
    assert reference_seeds("es-at-scale", 42, 1, 3) == reference_seeds("es-awd", 42, 0, 3)


@given(seed=st.integers(0, 2 ** 40), iteration=st.integers(0, 50), count=st.integers(1, 40),
       schedule=st.sampled_from(["es-at-scale", "es-awd"]))
def test_schedule_is_numpy_default_rng(seed, iteration, count, schedule):
    first = {"es-at-scale": 0, "es-awd": 1}[schedule]
    want = np.random.default_rng((seed or 42) + iteration + first).integers(0, 2 ** 30, size=count, dtype=np.int64)
    got = reference_seeds(schedule, seed, iteration, count)
    assert got == [int(v) for v in want]
    assert all(0 <= s < 2 ** 30 for s in got)


def test_global_seed_zero_stands_for_42():
    assert reference_seeds("es-awd", 0, 2, 5) == reference_seeds("es-awd", 42, 2, 5)


def test_antithetic_pairs_share_one_draw_of_n_over_2():
    seeds = [schedule_seed("es-awd", 7, 3, 6, True, m) for m in range(6)]
    pairs = reference_seeds("es-awd", 7, 3, 3)
    assert seeds == [pairs[0], pairs[0], pairs[1], pairs[1], pairs[2], pairs[2]]


def test_trainer_uses_the_schedule_and_keeps_it_in_its_state():
    config = Config(population=4, seed=9, seed_schedule="es-at-scale")
    trainer = Trainer([torch.zeros(5)], config)
    assert [trainer.member_seed(m) for m in range(4)] == reference_seeds("es-at-scale", 9, 0, 4)
    trainer.update([0.1, 0.2, 0.3, 0.4])
    assert [trainer.member_seed(m) for m in range(4)] == reference_seeds("es-at-scale", 9, 1, 4)
    state = trainer.state_dict()
    assert state["config"]["seed_schedule"] == "es-at-scale"
    resumed = Trainer([torch.zeros(5)])
    resumed.load_state_dict(state)
    assert resumed.config.seed_schedule == "es-at-scale" and resumed.member_seed(0) == trainer.member_seed(0)


def test_default_schedule_leaves_state_and_goldens_unchanged():
    assert "seed_schedule" not in Config().to_dict()        # states and goldens written before it stay valid
    state = Trainer([torch.zeros(3)]).state_dict()
    resumed = Trainer([torch.zeros(3)])
    resumed.load_state_dict(state)
    assert resumed.config.seed_schedule == "contract"


def test_unknown_schedule_is_refused_naming_the_field():
    with pytest.raises(ValueError, match="seed_schedule"):
        Config(seed_schedule="numpy")


def test_duplicates_are_named():
    assert duplicate_seeds([5, 3, 5, 9, 3]) == {5: [0, 2], 3: [1, 4]}
    assert duplicate_seeds(reference_seeds("es-at-scale", 42, 0, 30)) == {}


def test_batch_weighted_mean_known_answer():
    assert batch_weighted_mean([[1.0, 2.0], [3.0]]) == 2.0
    assert batch_weighted_mean([[0.5]]) == 0.5


@given(st.lists(st.lists(st.floats(-1e3, 1e3), min_size=1, max_size=5), min_size=1, max_size=4))
def test_batch_weighted_mean_is_the_documented_expression(batches):
    total, count = 0.0, 0
    for batch in batches:
        total += float(np.mean(np.array(batch, dtype=np.float64))) * len(batch)
        count += len(batch)
    assert np.float64(batch_weighted_mean(batches)).view(np.uint64) == np.float64(total / count).view(np.uint64)
    exact = sum(Fraction(v) for b in batches for v in b) / count
    assert abs(Fraction(batch_weighted_mean(batches)) - exact) <= Fraction(1, 10 ** 6) * (1 + abs(exact))


def test_mean_reward_is_numpys_mean_and_refuses_bad_input():
    values = [0.1] * 30
    assert mean_reward(values) == float(np.mean(np.array(values)))
    with pytest.raises(ValueError, match="not finite"):
        mean_reward([1.0, float("nan")])
    with pytest.raises(ValueError, match="no rewards"):
        batch_weighted_mean([[1.0], []])
    with pytest.raises(ValueError, match="no mini-batches"):
        batch_weighted_mean([])


# ---------------------------------------------------------------- evaluation order of the statistics

def _rewards_where_order_matters():
    # numpy's mean of these 6 values differs in its last bit between two summation orders
    rng = np.random.default_rng(3)
    while True:
        r = rng.normal(0.5, 0.2, 6)
        order = [0, 2, 4, 1, 3, 5]
        if np.mean(r) != np.mean(r[order]) or np.std(r) != np.std(r[order]):
            return r, order


def test_update_order_shapes_over_the_collection_order():
    r, order = _rewards_where_order_matters()
    names = [torch.linspace(-1, 1, 37)]
    base = Trainer([names[0].clone()], Config(population=6, antithetic=True, seed=5))
    ordered = Trainer([names[0].clone()], Config(population=6, antithetic=True, seed=5))
    manual = Trainer([names[0].clone()], Config(population=6, antithetic=True, seed=5, shaping="none"))
    coeffs_eval = (r[order] - np.mean(r[order])) / (np.std(r[order]) + 1e-8)     # docs/numerics.md §2 in that order
    coeffs = np.empty(6)
    coeffs[order] = coeffs_eval
    got = ordered.update(r, order=order)
    want = manual.update(coeffs)
    assert np.array_equal(got["coefficients"].view(np.uint64), coeffs.view(np.uint64))
    assert np.array_equal(got["terms"].view(np.uint64), want["terms"].view(np.uint64))
    assert torch.equal(ordered.params[0].view(torch.int32), manual.params[0].view(torch.int32))
    plain = base.update(r)
    assert not np.array_equal(plain["coefficients"].view(np.uint64), got["coefficients"].view(np.uint64))


def test_identity_order_changes_nothing():
    r, _ = _rewards_where_order_matters()
    a = Trainer([torch.ones(9)], Config(population=6, seed=1))
    b = Trainer([torch.ones(9)], Config(population=6, seed=1))
    sa, sb = a.update(r), b.update(r, order=range(6))
    assert np.array_equal(sa["coefficients"].view(np.uint64), sb["coefficients"].view(np.uint64))
    assert torch.equal(a.params[0], b.params[0])


@pytest.mark.parametrize("order", [[0, 1, 2, 3, 4], [0, 1, 2, 3, 4, 4], [0.0, 1, 2, 3, 4, 5], [[0, 1, 2, 3, 4, 5]]])
def test_bad_order_is_refused_and_changes_nothing(order):
    t = torch.ones(9)
    trainer = Trainer([t], Config(population=6, seed=1))
    with pytest.raises(ValueError, match="permutation of range"):
        trainer.update([0.1, 0.2, 0.3, 0.4, 0.5, 0.6], order=order)
    assert torch.equal(t, torch.ones(9)) and trainer.iteration == 0


def test_the_schedules_and_their_messages_come_from_the_registry():
    """The values (config and run logs) stay what they were; the names are the references' own."""
    from esverify import registry
    from esverify.es import schedule
    assert schedule.SCHEDULES == ("contract", "es-at-scale", "es-awd", "es-paper")
    assert schedule.SCHEDULES == ("contract", *registry.seed_schedules())
    assert dict(schedule.FIRST_ITERATION) == {"es-at-scale": 0, "es-awd": 1}
    with pytest.raises(ValueError, match=r"^seed_schedule: unknown value 'es-paper2'; known: \('contract', "
                                         r"'es-at-scale', 'es-awd', 'es-paper'\)$"):
        Config(seed_schedule="es-paper2")
    for bad in ("contract", "skill-sample"):
        with pytest.raises(ValueError, match=rf"^seed_schedule '{bad}' has no numpy draw; use 'es-at-scale', "
                                             r"'es-awd' or 'es-paper'$"):
            reference_seeds(bad, 42, 0, 3)
    with pytest.raises(ValueError, match=r"^iteration and count must be >= 0, got -1, 3$"):
        reference_seeds("es-paper", 42, -1, 3)


def test_the_default_profile_is_the_one_flagged():
    from esverify.es.profiles import PROFILES, default_profile
    assert [name for name, p in PROFILES.items() if p.default] == ["es-at-scale"] == [default_profile()]
    assert Config().profile == "es-at-scale" and Config().to_dict()["profile"] == "es-at-scale"
    assert Config() == Config(profile="es-at-scale")


@pytest.mark.parametrize("schedule", ["contract", "es-at-scale", "es-awd", "es-paper"])
def test_member_seeds_kept_by_the_trainer_are_the_schedules_own(schedule):
    """Trainer.member_seed keeps its answers per config object: every (iteration, member) equals
    noise_seed's fresh computation, asked twice, in any order; a new config object (load_state, a test's
    replacement) is never answered from the old one's."""
    from esverify.es import noise as es_noise
    config = Config(population=6, antithetic=True, seed=9, seed_schedule=schedule)
    tr = Trainer([torch.zeros(3)], config)
    asks = [(it, m) for it in (2, 0, 1) for m in (5, 0, 3, 1)] * 2
    for it, m in asks:
        assert tr.member_seed(m, iteration=it) == es_noise.noise_seed(config, it, m)
    assert tr.member_seed(4) == es_noise.noise_seed(config, 0, 4)
    other = Config(population=6, antithetic=True, seed=10, seed_schedule=schedule)
    tr.config = other
    assert [tr.member_seed(m, iteration=2) for m in range(6)] == [es_noise.noise_seed(other, 2, m) for m in range(6)]
    assert tr.member_seed(0, iteration=2) != es_noise.noise_seed(config, 2, 0)
    with pytest.raises(ValueError, match="member 6"):
        tr.member_seed(6)
    def outcome(fn):
        try:
            return fn()
        except Exception as exc:  # noqa: BLE001 - the kind of refusal is what is compared
            return type(exc)
    for odd in (2.0, True, 1.0):   # kept answers never stand in: what noise_seed says, value or refusal
        assert outcome(lambda: tr.member_seed(1, iteration=odd)) == outcome(lambda: es_noise.noise_seed(other, odd, 1))
    assert tr.member_seed(1, iteration=np.int64(2)) == es_noise.noise_seed(other, 2, 1)
