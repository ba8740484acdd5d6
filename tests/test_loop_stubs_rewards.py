"""The loops' stand-in engine scores a request's prompts in one reward call (oracles/loop_stubs.py
StandInEngine, child_server.rewards): the same rewards, in the same order on the tape and in the outputs, as
one child_server.reward call per prompt; and where a prompt has no target mark or the batched call raises,
what the tape records and what is raised stay those of the per-prompt calls."""
from __future__ import annotations

import types

import pytest
import torch

import child_files

child_files.on_path()
import child_server  # noqa: E402
import loop_stubs  # noqa: E402


class _Tape:
    def __init__(self):
        self.rewards = []

    def reward(self, engine, value):
        self.rewards.append(value)


def _engine(rewards_fn, reward_fn=child_server.reward):
    gen = torch.Generator().manual_seed(5)
    model = types.SimpleNamespace(tensors=[torch.randn(s, generator=gen).to(dt) for s, dt in
                                           (((700,), torch.float32), ((3, 5), torch.bfloat16), ((), torch.float16))])
    tape = _Tape()
    engine = loop_stubs.StandInEngine(0, [], type("Worker", (), {}), model, lambda m: None, tape, reward_fn,
                                      rewards_fn=rewards_fn)
    return engine, tape


PROMPTS = ["q <target=0.25>", "q <target=-1.5>", "q <target=nan>", "q <target=3>"]


def _texts(outputs):
    return [[c.text for c in o.outputs] for o in outputs]


def test_one_call_per_request_gives_the_per_prompt_rewards():
    calls = []

    def counted(tensors, targets, dtype):
        calls.append(list(targets))
        return child_server.rewards(tensors, targets, dtype)
    batched, tape_b = _engine(counted)
    single, tape_s = _engine(None)
    out_b = batched.generate(PROMPTS, types.SimpleNamespace(n=2))
    out_s = single.generate(PROMPTS, types.SimpleNamespace(n=2))
    assert len(calls) == 1 and len(calls[0]) == 4 and [t for t in calls[0] if t == t] == [0.25, -1.5, 3.0]
    assert _texts(out_b) == _texts(out_s)
    assert [float(v).hex() for v in tape_b.rewards] == [float(v).hex() for v in tape_s.rewards]
    assert len(tape_b.rewards) == 4 and all(isinstance(v, float) for v in tape_b.rewards)


def test_a_prompt_without_a_mark_raises_after_the_earlier_prompts_are_recorded():
    batched, tape_b = _engine(child_server.rewards)
    single, tape_s = _engine(None)
    prompts = ["q <target=0.5>", "no mark here", "q <target=1>"]
    for engine in (batched, single):
        with pytest.raises(ValueError, match="carries no <target=...> mark"):
            engine.generate(prompts)
    assert len(tape_b.rewards) == 1 and tape_b.rewards == tape_s.rewards


def test_a_batched_call_that_raises_falls_back_to_one_call_per_prompt():
    seen = []

    def refuses(tensors, targets, dtype):
        raise OverflowError("intermediate overflow in fsum")

    def single(tensors, target, dtype):
        seen.append(target)
        if target == 3.0:
            raise OverflowError("intermediate overflow in fsum")
        return child_server.reward(tensors, target, dtype)
    engine, tape = _engine(refuses, reward_fn=single)
    with pytest.raises(OverflowError):
        engine.generate(PROMPTS)
    assert seen[:2] == [0.25, -1.5] and len(seen) == 4 and len(tape.rewards) == 3


@pytest.mark.parametrize("wrap", [iter, lambda p: (x for x in p)])
def test_prompts_given_as_an_iterator_are_each_scored_once(wrap):
    batched, tape_b = _engine(child_server.rewards)
    single, tape_s = _engine(None)
    out_b = batched.generate(wrap(PROMPTS))
    out_s = single.generate(list(PROMPTS))
    assert len(out_b) == len(PROMPTS) and _texts(out_b) == _texts(out_s)
    assert [float(v).hex() for v in tape_b.rewards] == [float(v).hex() for v in tape_s.rewards]
