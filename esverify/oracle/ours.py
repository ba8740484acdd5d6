"""The clean-room side of a parity case: esverify.es run in the parent.

This is the ONE adapter between the oracle and the trainer's API:
`Config`, `Trainer` (perturb / restore / update / step, `member_seed`),
`shape_rewards` and `apply_anchor_decay_`. It also produces what the child
needs to replay the case on the reference: the handle table (docs/references.md
§3: the case's seed handle of each member -> the trainer's u64 member
seed), the seed handles and coefficients of each update, all computed once
here and given to both sides.

Native-noise cases (docs/references.md §3a) run the trainer's `noise="torch"`
backend with `torch_seed` mapping each member's u64 seed to the handle the
reference received: both sides then draw torch's own noise. `slot_map`
(a what-if run for the `reuse` diagnosis) makes slot k draw slot j's
noise, as a reference that reuses noise would.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from ..es import Config, Trainer, apply_anchor_decay_, shape_rewards
from . import nonfinite as _nonfinite
from . import rewards as _rewards
from .cases import PERTURB_MEMBER, REWARD_TARGET, Case
from .noise_memo import memoized

def case_rewards(seed: int, n: int, shape: str = "normal") -> np.ndarray:
    """Fixed pseudo-random rewards (f64, shape (n,)) of the update and zscore cases: the reward
    population `shape` (esverify.oracle.rewards)."""
    return _rewards.draw(shape, seed, n)


def reward(tensors, target: float = REWARD_TARGET, dtype=None) -> float:
    """-fsum((f64(theta) - target)**2): the loop's reward, in precision `dtype` (None: the tensors'
    own); the child computes it the same way (esverify.oracle.rewards.loop_reward)."""
    return _rewards.loop_reward(tensors, target, dtype)


@dataclass
class OursResult:
    tensors: list                     #: result tensors in slot order (f64 coefficients for zscore)
    command: dict                     #: case fields the child needs (handles, seeds, coeffs, ...)
    rewards: list | None = None       #: loop: rewards per iteration, member order
    perturbed: list | None = None     #: restore: the perturbed state before the restore (copies)


def _hex(seed: int) -> str:
    return f"0x{seed:016x}"


def exact_floats(**values) -> dict:
    """{"exact": {name: [f64 bit patterns, hex]}} for the lists among `values` holding a NaN or an infinity,
    {} when every value is finite: JSON spells every NaN alike (its sign and payload lost), and the child
    must hand the reference the very NaN our side uses (the child drivers read "exact" first)."""
    exact = {name: [f"0x{int(v):016x}" for v in np.asarray(vals, dtype=np.float64).view(np.uint64)]
             for name, vals in values.items() if not np.isfinite(np.asarray(vals, dtype=np.float64)).all()}
    return {"exact": exact} if exact else {}


class SlotMappedTrainer(Trainer):
    """The trainer of our side: its noise comes through the run's noise memo (esverify.oracle.noise_memo:
    the same bits, drawn once for the rows that share them, inside a run or session), and an optional
    slot -> noise-slot map makes slot k draw slot j's noise (the `reuse` what-if; identity otherwise)."""
    slot_map: dict = {}
    #: a what-if replaying the reference's reuse call by call (esverify.oracle.reuse_plan): called before each
    #: perturb, restore and update, it returns that call's slot map (None: keep `slot_map`)
    call_maps = None

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.noise = memoized(self.noise, copies=False)   # the profiles only read their noise

    def _mapped(self, call: str) -> None:
        if self.call_maps is not None:
            self.slot_map = dict(self.call_maps(call) or {})

    def perturb(self, member: int) -> None:
        self._mapped("perturb")
        super().perturb(member)

    def restore(self, member: int) -> None:
        self._mapped("restore")
        super().restore(member)

    def update(self, rewards, *, order=None) -> dict:
        self._mapped("update")
        return super().update(rewards, order=order)

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)   # builds a new noise source for the loaded config
        self.noise = memoized(self.noise, copies=False)

    def stream_seed(self, member, slot, iteration=None):
        return super().stream_seed(member, self.slot_map.get(slot, slot), iteration)


def _trainer(case: Case, named, config: Config, backend, table: dict, slot_map=None) -> SlotMappedTrainer:
    """A trainer for `case`: contract noise, or torch noise seeded with the handles of `table`
    (u64 member seed -> handle, filled by the caller before any draw)."""
    if case.noise == "native":
        def torch_seed(member_seed, table=table):
            return table[member_seed]
        trainer = SlotMappedTrainer(named, config, noise="torch", torch_seed=torch_seed)
    else:
        trainer = SlotMappedTrainer(named, config, backend=backend)
    if hasattr(slot_map, "next"):   # a reuse_plan.CallOrderPlan: each call takes the reference's call's own map
        trainer.call_maps = lambda call, plan=slot_map: plan.next()
    else:
        trainer.slot_map = dict(slot_map or {})
    return trainer


def profile_of(case: Case) -> str:
    """Our numerics profile for `case`: its adapter's (esverify.oracle.adapters)."""
    from .adapters import get
    return get(case.target).profile


def _config(case: Case, seed: int, mapping: str, **overrides) -> Config:
    fields = dict(sigma=case.sigma, alpha=case.alpha, population=case.population, scheme=case.scheme,
                  mapping=mapping, profile=profile_of(case), seed=seed, shaping="none")
    fields.update(overrides)
    return Config(**fields)


def run(case: Case, names, tensors, anchor, seed: int, mapping: str, backend: str | None,
        slot_map=None, loop_coeffs=None) -> OursResult:
    """Run `case` on `tensors` (modified in place) with esverify.es; see OursResult.

    slot_map: {slot: noise slot} for a what-if run (the reference reused another slot's noise); for the
    perturb, restore and the loop, also a reuse_plan.CallOrderPlan (each call's own map, in the child's call
    order);
    loop_coeffs: the in-process loop's coefficients per iteration as the child was handed them (a
    what-if replays the child's run, whose updates used our first run's coefficients)."""
    _, compute = prepare(case, names, tensors, anchor, seed, mapping, backend, slot_map, loop_coeffs)
    return compute()


def prepare(case: Case, names, tensors, anchor, seed: int, mapping: str, backend: str | None, slot_map=None,
            loop_coeffs=None):
    """(command, compute): the child's command, known before our side computes (None for the loop,
    whose coefficients come from its own rewards), and compute() -> OursResult doing the work. The
    runner sends the command first, so the child and our side work at the same time."""
    named = list(zip(names, tensors))
    if case.op == "zscore":
        r = case_rewards(seed, case.population, case.rewards)
        if case.rewards in _rewards.NONFINITE:   # the references' arithmetic, NaN kept (oracle.nonfinite)
            c, mean, std = _nonfinite.zscore(r)
            coeffs, stats = c, {"mean": mean, "std": std}
        else:
            coeffs, stats = shape_rewards(r, "zscore")
        result = OursResult([torch.from_numpy(np.asarray(coeffs, dtype=np.float64))],
                            {"seeds": [case.handle(m) for m in range(case.population)], "rewards": r.tolist(),
                             "mean": stats["mean"], "std": stats["std"]})   # the parent's mean/std, computed once
        result.command.update(exact_floats(rewards=r, mean=[stats["mean"]], std=[stats["std"]]))
        return result.command, lambda: result
    if case.op in ("perturb", "restore"):
        table = {}
        trainer = _trainer(case, named, _config(case, seed, mapping), backend, table, slot_map)
        m = PERTURB_MEMBER
        table[trainer.member_seed(m)] = case.handle(m)
        command = {"member_handle": case.handle(m), "handles": {case.handle(m): _hex(trainer.member_seed(m))}}

        def compute():
            trainer.perturb(m)
            perturbed = None
            if case.op == "restore":   # the perturbed state is compared too: a slot never perturbed shows there
                perturbed = [t.clone() for t in tensors]
                trainer.restore(m)
            return OursResult(tensors, command, perturbed=perturbed)
        return command, compute
    if case.kind == "decay":
        command = {"handles": {}, "decay": case.decay, "lambda": case.lam}

        def compute():
            apply_anchor_decay_(tensors, anchor, case.decay, case.lam, case.alpha, profile=profile_of(case))
            return OursResult(tensors, command)
        return command, compute
    if case.kind == "update":
        return _update(case, names, tensors, anchor, seed, mapping, backend, slot_map)
    if case.op == "loop":
        return None, lambda: _loop(case, named, seed, mapping, backend, slot_map, loop_coeffs)
    raise ValueError(f"unknown op {case.op!r}")


def _update(case, names, tensors, anchor, seed, mapping, backend, slot_map):
    mirrored = case.op == "mirrored"
    decay = case.decay
    overrides = {"antithetic": mirrored}
    if decay != "none":
        overrides.update(anchor_decay=decay, anchor_lambda=case.lam)
    nonfinite = case.rewards in _rewards.NONFINITE
    r = case_rewards(seed, case.population, case.rewards)
    # a non-finite population: the references' own arithmetic (every coefficient NaN), which our trainer
    # refuses (esverify.oracle.nonfinite)
    coeffs = _nonfinite.zscore(r)[0] if nonfinite else shape_rewards(r, "zscore")[0]
    table = {}
    config = _config(case, seed, mapping, **overrides)
    if config.decay_on:
        # the anchor is captured at construction: build on the anchor, then load theta (docs/numerics.md §6)
        current = [t.clone() for t in tensors]
        with torch.no_grad():
            for t, a in zip(tensors, anchor):
                t.copy_(a)
        trainer = _trainer(case, list(zip(names, tensors)), config, backend, table, slot_map)
        with torch.no_grad():
            for t, c in zip(tensors, current):
                t.copy_(c)
    else:
        trainer = _trainer(case, list(zip(names, tensors)), config, backend, table, slot_map)
    if mirrored:
        members = list(range(0, case.population, 2))
        # the reference's training script folds pairs itself: D_k = C_2k - C_2k+1 in f64 (docs/references.md §2)
        with np.errstate(invalid="ignore"):
            sent = [float(coeffs[2 * k] - coeffs[2 * k + 1]) for k in range(case.population // 2)]
    else:
        members = list(range(case.population))
        sent = [float(c) for c in coeffs]
    for m in members:
        table[trainer.member_seed(m)] = case.handle(m)
    command = {"seeds": [case.handle(m) for m in members], "coeffs": sent,
               "handles": {case.handle(m): _hex(trainer.member_seed(m)) for m in members},
               "decay": decay, "lambda": case.lam if decay != "none" else 0.0,
               "caching": case.op == "caching"}
    command.update(exact_floats(coeffs=sent))

    def compute():
        if nonfinite:   # the reference's update as written, where its adapter gives it (oracle.nonfinite)
            from .adapters import get
            _nonfinite.update(trainer, coeffs, getattr(get(case.target), "nonfinite_update", None))
        else:
            trainer.update(coeffs)
        return OursResult(tensors, command)
    return command, compute


def _loop(case, named, seed, mapping, backend, slot_map, loop_coeffs=None) -> OursResult:
    tensors = [t for _, t in named]
    table = {}
    # given coefficients are applied as they are (shaping none); else the z-scores of our own rewards
    shaping = "none" if loop_coeffs is not None else "zscore"
    trainer = _trainer(case, named, _config(case, seed, mapping, shaping=shaping), backend, table, slot_map)
    iterations, rewards = [], []
    for index in range(case.iterations):
        members = list(range(case.population))
        handles = {}
        for m in members:
            table[trainer.member_seed(m)] = case.handle(m, index)
            handles[case.handle(m, index)] = _hex(trainer.member_seed(m))
        row = []

        def evaluate(member, row=row, index=index):
            row.append(reward(tensors))
            return row[-1] if loop_coeffs is None else loop_coeffs[index][member]

        stats = trainer.step(evaluate)
        iterations.append({"index": index, "handles": handles, "seeds": [case.handle(m, index) for m in members],
                           "coeffs": [float(c) for c in stats["coefficients"]]})
        rewards.append(row)
    return OursResult(tensors, {"iterations": iterations, "reward_target": REWARD_TARGET}, rewards=rewards)
