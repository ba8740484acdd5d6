"""The parity case matrix (issue 4 item 4).

For each target x device x dtype set x scheme, the ops below, each one
`Case` with a stable id `target/device/dtype/scheme/op[/N<population>]`
that `--case PATTERN` matches against:

- es-at-scale: perturb, restore, update at population N (`--population`)
  and at 30 with the paper's sigma 0.001 / alpha 0.0005, loop (perturb,
  score, restore every member, update; `--iterations` times); plus one
  zscore case per device (f64, no dtype or scheme: the reference's z_score
  against ours on the parent's mean/std).
- es-awd: perturb, restore, update-none / update-l1 / update-l2, decay-l1 /
  decay-l2 (the decay alone), mirrored (docs/numerics.md §4 fold) and caching
  (`caching=True`; under iid an artefact of the reference).

Single-operation cases use the set with the >= 1M-element tensor (unless
`small`); the loop uses the small set. Ids are unique: repeated dtypes,
schemes or devices count once, and with `--population 30` the update case
that would repeat the paper's one is left out (same sigma and alpha) or the paper's
gets the id suffix `/paper` (another sigma or alpha).
"""
from __future__ import annotations

import fnmatch
from dataclasses import dataclass, field

PAPER_SIGMA = 0.001
PAPER_ALPHA = 0.0005
PAPER_POPULATION = 30
#: es-awd decay strength: alpha * lambda = 0.002 zeroes part of the +-0.004 deltas under l1.
DECAY_LAMBDA = 4.0
#: reward of the loop: -fsum((theta - REWARD_TARGET)**2)
REWARD_TARGET = 0.01

AT_SCALE_OPS = ("perturb", "restore", "update", "loop")
AWD_OPS = ("perturb", "restore", "update-none", "update-l1", "update-l2", "decay-l1", "decay-l2",
           "mirrored", "caching")


@dataclass
class Case:
    """One parity case: which reference call (`op`) on which parameter set (`dtype`, `big`), device
    and noise scheme, with its population, sigma and alpha (Python floats, as the CLI took them)."""
    target: str
    device: str
    dtype: str           #: "f32", "f16", "bf16", "mixed", or "f64" for zscore
    scheme: str          #: "iid", "correlated", or "-" for zscore
    op: str
    population: int
    sigma: float
    alpha: float
    big: bool = False
    extra: dict = field(default_factory=dict)
    tag: str = ""        #: id suffix that keeps ids unique ("paper" when --population 30 has another alpha)

    @property
    def case_id(self) -> str:
        base = f"{self.target}/{self.device}/{self.dtype}/{self.scheme}/{self.op}/N{self.population}"
        return f"{base}/{self.tag}" if self.tag else base

    @property
    def kind(self) -> str:
        """The reference call family: perturb, restore, update, decay, zscore or loop."""
        return self.op.split("-")[0] if self.op.startswith(("update", "decay")) else (
            "update" if self.op in ("mirrored", "caching") else self.op)

    @property
    def decay(self) -> str:
        return self.op.split("-")[1] if self.op.startswith(("update-", "decay-")) else "none"


def build_matrix(targets, devices, dtypes, schemes, population, sigma, alpha, iterations, small=False):
    """All cases, in a stable order (target, device, dtype, scheme, op), with unique ids."""
    cases = []
    targets, devices, dtypes, schemes = (list(dict.fromkeys(v)) for v in (targets, devices, dtypes, schemes))
    sets = list(dtypes) + (["mixed"] if len(dtypes) > 1 else [])
    # the paper's N = 30 update is fixed; --population 30 must not repeat its id
    same_as_paper = population == PAPER_POPULATION and (sigma, alpha) == (PAPER_SIGMA, PAPER_ALPHA)
    paper_tag = "paper" if population == PAPER_POPULATION and not same_as_paper else ""
    for target in targets:
        for device in devices:
            if target == "es-at-scale":
                cases.append(Case(target, device, "f64", "-", "zscore", population, sigma, alpha))
            for dtype in sets:
                for scheme in schemes:
                    if target == "es-at-scale":
                        cases += [Case(target, device, dtype, scheme, "perturb", population, sigma, alpha, not small),
                                  Case(target, device, dtype, scheme, "restore", population, sigma, alpha, not small),
                                  Case(target, device, dtype, scheme, "update", population, sigma, alpha, not small),
                                  Case(target, device, dtype, scheme, "update", PAPER_POPULATION, PAPER_SIGMA,
                                       PAPER_ALPHA, not small, tag=paper_tag),
                                  Case(target, device, dtype, scheme, "loop", population, sigma, alpha, False,
                                       {"iterations": iterations})]
                        if same_as_paper:
                            del cases[-3]
                    else:
                        for op in AWD_OPS:
                            # mirrored pairs need an even population (docs/numerics.md §4)
                            n = population + population % 2 if op == "mirrored" else population
                            cases.append(Case(target, device, dtype, scheme, op, n, sigma, alpha, not small))
    return cases


def select(cases, pattern: str | None):
    """Cases whose id matches `pattern` (fnmatch; without wildcards, a substring)."""
    if not pattern:
        return list(cases)
    if not any(ch in pattern for ch in "*?["):
        return [c for c in cases if pattern in c.case_id]
    return [c for c in cases if fnmatch.fnmatchcase(c.case_id, pattern)]
