"""The trainer's `noise="torch"` backend (esverify.es.noise.TorchNoise; docs/references.md §1-§2, §3a).

Known answers: the trainer with torch's own noise computes, bit for bit,
what the references' published interface computes with it (a new
torch.Generator on the tensor's device seeded with the member's seed,
torch.randn in the tensor's shape and dtype, the same seed for every
tensor), written out here in plain torch as docs/references.md §1 describes
es-at-scale. Plus its limits: correlated only, no contract backend, a
state that records the noise.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

from esverify.es import Config, Trainer
from esverify.es.shaping import shape_rewards


def _params():
    g = np.random.default_rng(4)
    return [("w", torch.from_numpy(g.normal(0, 0.05, (37, 29))).float()),
            ("b", torch.from_numpy(g.normal(0, 0.05, (29,))).to(torch.bfloat16)),
            ("h", torch.from_numpy(g.normal(0, 0.05, (41,))).to(torch.float16)),
            ("s", torch.tensor(0.25, dtype=torch.bfloat16))]


def _randn(t, seed):
    g = torch.Generator(device=t.device)
    g.manual_seed(seed)
    return torch.randn(t.shape, dtype=t.dtype, device=t.device, generator=g)


def _seeds(trainer, members, handles):
    table = {trainer.member_seed(m): h for m, h in zip(members, handles)}
    return table


@pytest.mark.parametrize("member", [0, 3])
def test_perturb_and_restore_draw_torchs_noise_like_the_reference(member):
    params = _params()
    theirs = [t.clone() for _, t in params]
    table = {}
    trainer = Trainer(params, Config(sigma=0.00731, population=5, profile="es-at-scale"), noise="torch",
                      torch_seed=lambda s: table[s])
    table.update({trainer.member_seed(m): 1000 + 7919 * m for m in range(5)})
    handle = 1000 + 7919 * member
    trainer.perturb(member)
    for t in theirs:                       # docs/references.md §1: param.data.add_(sigma * noise)
        t.add_(0.00731 * _randn(t, handle))
    for (_, ours), t in zip(params, theirs):
        assert torch.equal(ours.view(-1).view(torch.int16 if ours.element_size() == 2 else torch.int32),
                           t.view(-1).view(torch.int16 if t.element_size() == 2 else torch.int32))
    trainer.restore(member)
    for t in theirs:
        t.add_(-0.00731 * _randn(t, handle))
    for (_, ours), t in zip(params, theirs):
        assert torch.equal(ours, t) and torch.equal(torch.signbit(ours), torch.signbit(t))


def test_update_accumulates_torchs_noise_like_the_reference():
    params = _params()
    theirs = [t.clone() for _, t in params]
    rewards = [0.3, -1.25, 0.7, 0.05, 2.0, -0.4, 0.9]
    trainer = Trainer(params, Config(sigma=0.01, alpha=0.00317, population=7), noise="torch")
    seeds = [trainer.member_seed(m) for m in range(7)]     # default torch_seed: the u64 member seed itself
    coeffs, _ = shape_rewards(np.array(rewards), "zscore")
    trainer.update(rewards)
    for t in theirs:                       # docs/references.md §1, update_weights_from_seeds
        acc = torch.zeros(t.shape, dtype=torch.float32)
        for seed, c in zip(seeds, coeffs):
            acc.add_(_randn(t, seed).to(torch.float32) * float(c))
        acc.mul_(0.00317 / 7)
        t.add_(acc.to(t.dtype))
    for (_, ours), t in zip(params, theirs):
        assert torch.equal(ours, t)


def test_draws_in_the_parameter_dtype_not_f32_then_cast():
    """The detail contract noise cannot show: torch's bf16 draw is not the f32 draw rounded."""
    t = torch.zeros(4099, dtype=torch.bfloat16)      # not a multiple of 16: torch draws its tail otherwise
    trainer = Trainer([t], Config(sigma=1.0, population=2), noise="torch", torch_seed=lambda s: 77)
    trainer.perturb(0)
    assert torch.equal(t, _randn(t, 77))
    cast = torch.randn(4099, generator=torch.Generator().manual_seed(77)).to(torch.bfloat16)
    assert 0 < int((t != cast).sum()) <= 16      # measured on torch 2.13 CPU: 16 tail elements differ


def test_limits_are_refused_with_the_field_named():
    with pytest.raises(ValueError, match="correlated"):
        Trainer([torch.zeros(3)], Config(scheme="iid"), noise="torch")
    with pytest.raises(ValueError, match="noise: unknown value 'philox'"):
        Trainer([torch.zeros(3)], Config(), noise="philox")
    with pytest.raises(ValueError, match="backend"):
        Trainer([torch.zeros(3)], Config(), noise="torch", backend="numpy")
    with pytest.raises(ValueError, match="torch_seed"):
        Trainer([torch.zeros(3)], Config(), torch_seed=lambda s: 1)
    bad = Trainer([torch.zeros(3)], Config(population=2), noise="torch", torch_seed=lambda s: -1)
    with pytest.raises(ValueError, match="not an int in"):
        bad.perturb(0)


def test_state_records_the_noise_and_load_refuses_another():
    torch_trainer = Trainer([torch.zeros(3)], Config(population=2), noise="torch")
    state = torch_trainer.state_dict()
    assert state["noise"] == "torch"
    contract = Trainer([torch.zeros(3)], Config(population=2))
    assert contract.state_dict()["noise"] == "contract"
    with pytest.raises(ValueError, match="state noise"):
        contract.load_state_dict(state)
    resumed = Trainer([torch.zeros(3)], Config(population=2), noise="torch")
    resumed.load_state_dict(state)
    assert resumed.noise.kind == "torch"
