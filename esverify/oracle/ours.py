"""The clean-room side of a parity case: esverify.es run in the parent.

This is the ONE adapter between the oracle and the trainer (issue 3 API):
`Config`, `Trainer` (perturb / restore / update / step, `member_seed`),
`shape_rewards` and `apply_anchor_decay_`. It also produces what the child
needs to replay the case on the reference: the handle table (docs/references.md
§3: handle 1000 * (member + 1) -> the trainer's u64 member seed), the
seed handles and coefficients of each update, all computed once here and
given to both sides (issue 4 item 4).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from ..es import Config, Trainer, apply_anchor_decay_, get_profile, shape_rewards
from .cases import DECAY_LAMBDA, REWARD_TARGET, Case

HANDLE_SPACING = 1000
#: the member perturbed by the single perturb/restore cases
PERTURB_MEMBER = 1


def handle(member: int) -> int:
    """The small seed handle the reference sees for `member` (spaced so seed + offset is unknown)."""
    return HANDLE_SPACING * (member + 1)


def case_rewards(seed: int, n: int) -> np.ndarray:
    """Fixed pseudo-random rewards of a population of n (f64), for the update and zscore cases."""
    return np.random.Generator(np.random.PCG64([seed, n, 7])).normal(0.5, 0.2, n)


def reward(tensors, target: float = REWARD_TARGET) -> float:
    """-fsum((f64(theta) - target)**2): the loop's reward; the child computes it the same way."""
    total = []
    for t in tensors:
        d = t.detach().to("cpu").double().numpy().reshape(-1) - target
        total.append(math.fsum((d * d).tolist()))
    return -math.fsum(total)


@dataclass
class OursResult:
    tensors: list                     #: result tensors in slot order (f64 coefficients for zscore)
    command: dict                     #: case fields the child needs (handles, seeds, coeffs, ...)
    rewards: list | None = None       #: loop: rewards per iteration, member order


def _hex(seed: int) -> str:
    return f"0x{seed:016x}"


def _config(case: Case, seed: int, mapping: str, **overrides) -> Config:
    fields = dict(sigma=case.sigma, alpha=case.alpha, population=case.population, scheme=case.scheme,
                  mapping=mapping, profile=case.target, seed=seed, shaping="none")
    fields.update(overrides)
    return Config(**fields)


def rule_for(target: str, device: str) -> str:
    """The profile rule a case runs under (es-awd: cpu/cuda; es-at-scale has one rule)."""
    if target != "es-awd":
        return ""
    return get_profile(target).rule_for(torch.device(device))


def run(case: Case, names, tensors, anchor, seed: int, mapping: str, backend: str | None) -> OursResult:
    """Run `case` on `tensors` (modified in place) with esverify.es; see OursResult."""
    named = list(zip(names, tensors))
    if case.op == "zscore":
        r = case_rewards(seed, case.population)
        coeffs, stats = shape_rewards(r, "zscore")
        return OursResult([torch.from_numpy(np.asarray(coeffs, dtype=np.float64))],
                          {"seeds": [handle(m) for m in range(case.population)], "rewards": r.tolist(),
                           "mean": stats["mean"], "std": stats["std"]})   # the parent's mean/std, computed once
    if case.op in ("perturb", "restore"):
        trainer = Trainer(named, _config(case, seed, mapping), backend=backend)
        m = PERTURB_MEMBER
        trainer.perturb(m)
        if case.op == "restore":
            trainer.restore(m)
        return OursResult(tensors, {"member_handle": handle(m), "handles": {handle(m): _hex(trainer.member_seed(m))}})
    if case.kind == "decay":
        apply_anchor_decay_(tensors, anchor, case.decay, DECAY_LAMBDA, case.alpha, profile=case.target)
        return OursResult(tensors, {"handles": {}, "decay": case.decay, "lambda": DECAY_LAMBDA})
    if case.kind == "update":
        return _update(case, names, tensors, anchor, seed, mapping, backend)
    if case.op == "loop":
        return _loop(case, named, seed, mapping, backend)
    raise ValueError(f"unknown op {case.op!r}")


def _update(case, names, tensors, anchor, seed, mapping, backend) -> OursResult:
    mirrored = case.op == "mirrored"
    decay = case.decay
    overrides = {"antithetic": mirrored}
    if decay != "none":
        overrides.update(anchor_decay=decay, anchor_lambda=DECAY_LAMBDA)
    coeffs, _ = shape_rewards(case_rewards(seed, case.population), "zscore")
    if decay != "none":
        # the anchor is captured at construction: build on the anchor, then load theta (docs/numerics.md §6)
        current = [t.clone() for t in tensors]
        with torch.no_grad():
            for t, a in zip(tensors, anchor):
                t.copy_(a)
        trainer = Trainer(list(zip(names, tensors)), _config(case, seed, mapping, **overrides), backend=backend)
        with torch.no_grad():
            for t, c in zip(tensors, current):
                t.copy_(c)
    else:
        trainer = Trainer(list(zip(names, tensors)), _config(case, seed, mapping, **overrides), backend=backend)
    if mirrored:
        members = list(range(0, case.population, 2))
        # the reference's training script folds pairs itself: D_k = C_2k - C_2k+1 in f64 (docs/references.md §2)
        sent = [float(coeffs[2 * k] - coeffs[2 * k + 1]) for k in range(case.population // 2)]
    else:
        members = list(range(case.population))
        sent = [float(c) for c in coeffs]
    command = {"seeds": [handle(m) for m in members], "coeffs": sent,
               "handles": {handle(m): _hex(trainer.member_seed(m)) for m in members},
               "decay": decay, "lambda": DECAY_LAMBDA if decay != "none" else 0.0,
               "caching": case.op == "caching"}
    trainer.update(coeffs)
    return OursResult(tensors, command)


def _loop(case, named, seed, mapping, backend) -> OursResult:
    tensors = [t for _, t in named]
    trainer = Trainer(named, _config(case, seed, mapping, shaping="zscore"), backend=backend)
    iterations, rewards = [], []
    for index in range(case.extra.get("iterations", 3)):
        members = list(range(case.population))
        handles = {handle(m): _hex(trainer.member_seed(m)) for m in members}
        row = []

        def evaluate(member, row=row):
            row.append(reward(tensors))
            return row[-1]

        stats = trainer.step(evaluate)
        iterations.append({"index": index, "handles": handles, "seeds": [handle(m) for m in members],
                           "coeffs": [float(c) for c in stats["coefficients"]]})
        rewards.append(row)
    return OursResult(tensors, {"iterations": iterations, "reward_target": REWARD_TARGET}, rewards=rewards)
