"""Every error of docs/numerics.md §6, with a message naming its cause; a failed update changes no byte."""
from __future__ import annotations

import copy
import math

import numpy as np
import pytest
import torch

from esverify.es import Config, Trainer, apply_anchor_decay_, shape_rewards
from test_es_helpers import assert_bitwise


@pytest.mark.parametrize("kwargs,field", [
    ({"sigma": 0.0}, "sigma"), ({"sigma": -1.0}, "sigma"), ({"sigma": math.nan}, "sigma"),
    ({"sigma": math.inf}, "sigma"), ({"alpha": -0.1}, "alpha"), ({"alpha": math.inf}, "alpha"),
    ({"alpha": math.nan}, "alpha"), ({"population": 0}, "population"),
    ({"population": 3, "antithetic": True}, "even"), ({"population": 1, "shaping": "centered_ranks"}, "population"),
    ({"scheme": "pairwise"}, "scheme"), ({"mapping": "box"}, "mapping"), ({"restore": "undo"}, "restore"),
    ({"shaping": "rank"}, "shaping"), ({"profile": "es-fast"}, "profile"), ({"profile": ["es-awd"]}, "profile"),
    ({"anchor_decay": "l3"}, "anchor_decay"),
    ({"anchor_lambda": -0.5, "anchor_decay": "l1"}, "anchor_lambda"), ({"anchor_lambda": math.nan}, "anchor_lambda"),
    ({"anchor_decay": "l2", "alpha": 0.5, "anchor_lambda": 2.0}, "alpha * anchor_lambda"),
    ({"seed": -1}, "seed"), ({"seed": 1 << 64}, "seed"), ({"chunk_elements": 0}, "chunk_elements"),
    # finite in f64 but infinite once rounded to f32, as every profile does (docs/numerics.md §3)
    ({"sigma": 1e300}, "sigma must stay finite when rounded to f32"),
    ({"sigma": 1.0, "alpha": 3.5e38}, "alpha must stay finite when rounded to f32"),
])
def test_config_errors_name_the_field(kwargs, field):
    with pytest.raises(ValueError, match=field.replace("*", r"\*")):
        Config(**kwargs)


def test_config_types_and_defaults():
    with pytest.raises(TypeError, match="population"):
        Config(population=2.0)
    with pytest.raises(TypeError, match="antithetic"):
        Config(antithetic=1)
    c = Config()
    assert (c.sigma, c.alpha, c.population, c.scheme, c.mapping, c.restore, c.shaping, c.profile) == \
        (0.001, 0.0005, 30, "correlated", "poly32", "regenerate", "zscore", "es-at-scale")
    assert Config(sigma=0.3).alpha == 0.3 / 2
    Config(anchor_decay="l2", alpha=0.5, anchor_lambda=1.999)  # a < 1 is fine


def test_registration_errors():
    w = torch.zeros(4, 4)
    with pytest.raises(ValueError, match="share storage"):
        Trainer([w, w], Config())
    with pytest.raises(ValueError, match="share storage"):
        Trainer([w, w[1]], Config())
    with pytest.raises(ValueError, match="not contiguous"):
        Trainer([w.t()], Config())
    with pytest.raises(ValueError, match="dtype"):
        Trainer([torch.zeros(3, dtype=torch.float64)], Config())
    with pytest.raises(TypeError, match="not a torch tensor"):
        Trainer([np.zeros(3)], Config())
    emb = torch.nn.Embedding(5, 3)
    head = torch.nn.Linear(3, 5, bias=False)
    head.weight = emb.weight  # tied weights
    model = torch.nn.ModuleDict({"emb": emb, "head": head})
    Trainer(model.named_parameters(), Config())  # named_parameters() lists a tied tensor once
    with pytest.raises(ValueError, match="share storage"):
        Trainer([("a", emb.weight), ("b", head.weight)], Config())
    Trainer([w[:2], w[2:]], Config())  # disjoint views are fine


def test_member_state_errors():
    p = torch.zeros(5)
    tr = Trainer([p], Config(population=4))
    with pytest.raises(ValueError, match="member 4"):
        tr.perturb(4)
    tr.perturb(1)
    with pytest.raises(RuntimeError, match="member 1 is still active"):
        tr.perturb(2)
    with pytest.raises(RuntimeError, match="active member is 1"):
        tr.restore(0)
    with pytest.raises(RuntimeError, match="still active"):
        tr.update([1.0, 2.0, 3.0, 4.0])
    with pytest.raises(RuntimeError, match="active"):
        tr.materialize(0, [torch.empty(5)])
    tr.restore(1)
    with pytest.raises(RuntimeError, match="active member is None"):
        tr.restore(1)
    with pytest.raises(ValueError, match=r"out\[0\]"):
        tr.materialize(0, [torch.empty(5, dtype=torch.float16)])


@pytest.mark.parametrize("bad,cause", [
    ([1.0, math.nan, 2.0, 3.0], "member 1"), ([1.0, 2.0, 3.0, -math.inf], "member 3"),
    ([1.0, 2.0, 3.0], "3 entries but the population is 4"), ([[1.0, 2.0], [3.0, 4.0]], "1-D"),
])
@pytest.mark.parametrize("profile", ["es-at-scale", "es-awd"])
def test_failed_update_changes_no_byte(bad, cause, profile):
    params = [torch.randn(40), torch.randn(3, dtype=torch.bfloat16)]
    before = [p.clone() for p in params]
    tr = Trainer(params, Config(population=4, profile=profile, anchor_decay="l1", anchor_lambda=1.0))
    with pytest.raises(ValueError, match=cause):
        tr.update(bad)
    assert tr.iteration == 0
    for a, b in zip(before, params):
        assert_bitwise(b, a, "failed update")
    tr.update([1.0, 2.0, 3.0, 4.0])
    assert tr.iteration == 1


def test_step_restores_when_evaluate_raises():
    p = torch.randn(10)
    before = p.clone()
    tr = Trainer([p], Config(population=4, restore="snapshot"))

    def evaluate(member):
        if member == 2:
            raise KeyError("boom")
        return float(member)

    with pytest.raises(KeyError, match="boom"):
        tr.step(evaluate)
    assert tr.active_member is None and tr.iteration == 0
    assert_bitwise(p, before, "after failed step")


def test_shape_rewards_errors():
    with pytest.raises(ValueError, match="member 0"):
        shape_rewards([math.inf], "none")
    with pytest.raises(ValueError, match="unknown shaping"):
        shape_rewards([1.0], "ranks")
    with pytest.raises(ValueError, match="at least 2"):
        shape_rewards([1.0], "centered_ranks")


def test_state_dict_refusals():
    tr = Trainer([("w", torch.zeros(3)), ("b", torch.zeros((), dtype=torch.float16))], Config(population=2))
    tr.update([0.0, 1.0])
    state = tr.state_dict()
    assert state["slots"] == [{"name": "w", "shape": [3], "dtype": "f32"}, {"name": "b", "shape": [], "dtype": "f16"}]
    assert state["iteration"] == "0x0000000000000001" and state["profile_version"] == 1 and state["rng_contract"] == 1
    other = Trainer([("w", torch.zeros(4)), ("b", torch.zeros((), dtype=torch.float16))], Config(population=2))
    with pytest.raises(ValueError, match="slots"):
        other.load_state_dict(state)
    fresh = Trainer([("w", torch.zeros(3)), ("b", torch.zeros((), dtype=torch.float16))], Config(population=2))
    for key, value, cause in [("profile_version", 99, "profile_version"), ("rng_contract", 2, "rng_contract"),
                              ("format", "other/1", "format")]:
        bad = copy.deepcopy(state)
        bad[key] = value
        with pytest.raises(ValueError, match=cause):
            fresh.load_state_dict(bad)
    fresh.load_state_dict(state)
    assert fresh.iteration == 1


def test_anchor_decay_alone_errors():
    p, q = [torch.zeros(3)], [torch.zeros(3)]
    with pytest.raises(ValueError, match="anchor_lambda"):
        apply_anchor_decay_(p, q, "l1", -1.0, 0.1)
    with pytest.raises(ValueError, match="alpha \\* anchor_lambda"):
        apply_anchor_decay_(p, q, "l2", 20.0, 0.1)
    with pytest.raises(ValueError, match="unknown"):
        apply_anchor_decay_(p, q, "l0", 1.0, 0.1)
    with pytest.raises(ValueError, match=r"anchors\[0\]"):
        apply_anchor_decay_(p, [torch.zeros(4)], "l1", 1.0, 0.1)


@pytest.mark.parametrize("rewards,shaping,cause", [
    ([1e308, 1e308, -1e308, 0.0], "zscore", "the mean .* overflows f64"),   # numpy's mean overflows
    ([1e308, -1e308, 0.0, 0.0], "none", "not finite"),          # antithetic D_0 = 1e308 - (-1e308) = inf
])
def test_update_with_non_finite_coefficients_changes_no_byte(rewards, shaping, cause):
    """Finite rewards whose shaped (or folded) coefficients are NaN/inf would poison theta like a
    NaN reward (docs/numerics.md §2, §6): the update must refuse, naming the members, and change no byte."""
    params = [torch.randn(40), torch.randn(3, dtype=torch.float16)]
    before = [p.clone() for p in params]
    tr = Trainer(params, Config(population=4, shaping=shaping, antithetic=shaping == "none"))
    with pytest.raises(ValueError, match=cause):
        tr.update(rewards)
    assert tr.iteration == 0
    for a, b in zip(before, params):
        assert_bitwise(b, a, "refused update")


def test_load_state_dict_refuses_a_missing_or_partial_config():
    """A state without its config (or with fields missing or unknown) must be refused, naming the
    field, not silently replaced by defaults: the config decides every later iteration's noise."""
    tr = Trainer([torch.zeros(3)], Config(population=2, seed=7))
    state = tr.state_dict()
    for mutate, cause in [(lambda s: s.pop("config"), "config"),
                          (lambda s: s["config"].pop("seed"), r"missing fields \['seed'\]"),
                          (lambda s: s["config"].update(bogus=1), r"unknown fields \['bogus'\]")]:
        bad = copy.deepcopy(state)
        mutate(bad)
        fresh = Trainer([torch.zeros(3)], Config(population=2))
        with pytest.raises(ValueError, match=cause):
            fresh.load_state_dict(bad)
        assert fresh.config == Config(population=2) and fresh.iteration == 0


def test_state_dict_is_json_with_numpy_integer_config():
    """state_dict holds plain JSON values even when the Config was given numpy integers."""
    import json
    cfg = Config(population=np.int64(4), seed=np.uint64(5), chunk_elements=np.int64(16))
    state = json.loads(json.dumps(Trainer([torch.zeros(3)], cfg).state_dict()))
    assert state["config"]["chunk_elements"] == 16 and type(cfg.chunk_elements) is int


def test_materialize_refuses_out_tensors_that_alias_theta():
    """materialize writes 'without touching theta' (docs/numerics.md §6): an out tensor sharing memory with a
    parameter (or another out) is refused before anything is written; a dict must name every slot."""
    p, q = torch.randn(5), torch.randn(3, dtype=torch.float16)
    before = [p.clone(), q.clone()]
    tr = Trainer([("w", p), ("b", q)], Config(population=2))
    shared = torch.empty(5)
    for out, cause in [([p, torch.empty_like(q)], "share storage"), ([shared, shared.view(torch.float16)[:3]],
                                                                    "share storage"),
                       ({"w": torch.empty(5)}, r"no tensor for slot\(s\) \['b'\]")]:
        with pytest.raises(ValueError, match=cause):
            tr.materialize(1, out)
    assert_bitwise(p, before[0], "theta w")
    assert_bitwise(q, before[1], "theta b")


def test_unknown_noise_backend_is_refused_at_construction():
    """A misspelt noise backend is a registration error naming `backend`, not a failure at the first draw."""
    with pytest.raises(ValueError, match="backend"):
        Trainer([torch.zeros(3)], Config(population=2), backend="jax")


def test_load_state_dict_refuses_an_iteration_beyond_the_u64_counter():
    tr = Trainer([torch.zeros(3)], Config(population=2))
    state = tr.state_dict()
    state["iteration"] = 1 << 64
    with pytest.raises(ValueError, match=r"state iteration must be a u64: .* an int in \[0, 2\*\*64\)"):
        tr.load_state_dict(state)
    assert tr.iteration == 0
