"""`esverify parity --fuzz N`: random cases, and a failing one shrunk to a minimal case.

`draw_cases` draws N cases from `--case-seed` over ops, dtype sets,
schemes, noise sources, tensor shapes (custom parameter sets: 1-4
tensors, 0-dim to a few thousand elements, equal shapes sometimes),
populations and parameters (cases.random_case). They run like the matrix
(one child per target). `shrink_failures` then takes the first failing
row of each target and greedily shrinks its case (cases.shrink_candidates:
fewer tensors, smaller tensors, smaller population, fewer iterations, f32,
correlated, round parameters), keeping a candidate whenever it still gets
the same status, until no candidate does or the budget is spent; it
reports the minimal case as one `esverify parity ... --case-json` command
line and the throughput in cases/s.
"""
from __future__ import annotations

import shlex

import numpy as np

from . import cases as _cases
from .adapters import get

#: how many candidate runs one shrink may spend
SHRINK_BUDGET = 60
BAD = ("fail", "error", "unverifiable")


def draw_cases(targets, opts) -> list:
    """opts.fuzz random cases (ids made unique with a /fuzz<i> tag) for `targets` on the first device."""
    rng = np.random.default_rng([int(opts.case_seed), 0xF022])
    device = opts.devices[0]
    out = []
    for i in range(opts.fuzz):
        case = _cases.random_case(rng, targets, device, opts.noises, iterations=min(opts.iterations, 2))
        case.tag = f"fuzz{i}"
        out.append(case)
    return out


def command_line(opts, case, clone_path=None) -> str:
    """The one command line that reruns `case` alone (on the clone at `clone_path`, when given)."""
    argv = ["esverify", "parity"]
    if clone_path is not None:
        argv += get(case.target).rerun_args(clone_path)
    argv += ["--target", case.target, "--devices", case.device, "--seed", str(opts.seed), "--mapping",
             opts.mapping, "--case-json", _cases.to_json(case)]
    return " ".join(shlex.quote(a) for a in argv)


def shrink_failures(runner, clones, cases, frame, seconds: float) -> dict:
    """Shrink the first bad row of each reference; returns the report's `fuzz` metadata."""
    by_id = {c.case_id: c for c in cases}
    report = {"cases": len(frame), "seconds": round(seconds, 2),
              "cases_per_s": round(len(frame) / seconds, 2) if seconds > 0 else None,
              "failures": int(frame["status"].isin(BAD).sum()), "shrunk": []}
    for target in frame["target"].unique():
        bad = frame[(frame["target"] == target) & frame["status"].isin(BAD)]
        if bad.empty or target not in clones:
            continue
        row = bad.iloc[0]
        with runner.session(target, clones[target].path) as run:
            minimal, runs = shrink(run, by_id[row["case"]], row["status"], get(target).shrink_candidates)
        report["shrunk"].append({"case": row["case"], "status": row["status"], "runs": runs,
                                 "minimal": _cases.to_json(minimal),
                                 "command": command_line(runner.opts, minimal, clones[target].path)})
    return report


def shrink(run, case, status: str, candidates=None):
    """(the smallest variant of `case` whose row `run(case)` still gets `status`, candidate runs spent).

    run: case -> row dict; candidates: case -> simpler cases, simplest first (default: the case's
    adapter's `shrink_candidates`). Greedy, as Hypothesis's shrinker: the first candidate that keeps
    the status is kept, until none does or SHRINK_BUDGET runs are spent."""
    candidates = candidates or _cases.shrink_candidates
    runs = 0
    current = case
    progress = True
    while progress and runs < SHRINK_BUDGET:
        progress = False
        for candidate in candidates(current):
            if runs >= SHRINK_BUDGET:
                break
            runs += 1
            try:
                got = run(candidate)["status"]
            except Exception:  # noqa: BLE001 - a candidate the runner cannot finish is not kept
                continue
            if got == status:
                current, progress = candidate, True
                break
    return current, runs
