"""One es-paper row: a script's `main()` in the child, our `run_paper_loop`, compared (docs/references.md §6).

Design record: the child runs first (the conciseness scripts grade against
their own module-level dataset, whose size decides each member's reward
`sum(rewards) / len(dataset)`; the child reads it); then our side runs on
the same parameter set, seeds, constants and dataset size. The comparison
walks in time order and stops at the first difference, which names
itself: the seeds of iteration i (the numpy schedule), the number of
evaluations, a member's reward (f64 bits), the parameters of copy 0 when
iteration i starts (after i updates), the final parameters. A passing row
has all of them bit-equal. Draw accounting (contract noise): a draw past
position 0 of a generator, a slot drawn a number of times that is not a
multiple of three (perturb, restore, update), and a seed no member of the
schedule has are noted on the row.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from esverify.oracle.case_model import REWARD_TARGET
from esverify.oracle.verdict import Draws, NotDriven, OursRaised, Outcome, Unattributable

from .scripts import initial_seed as _initial_seed
from .scripts import iid as _iid
from .scripts import script_rel


def _hexf(x: float) -> str:
    return float(x).hex()


def _dataset_size(case, tape) -> int | None:
    """len(dataset) as the script divides by it: countdown keeps the first --data_sample items of our
    data file; conciseness has its own module-level list (the child reports its length)."""
    if "countdown" in case.op:
        return min(int(case.extra.get("data_sample", 3)), len(_data(case)))
    return tape.get("module_dataset")


def _data(case) -> list:
    """Countdown items (context, target) for the script's data/countdown.json: never graded (the seam
    returns the runner's reward), only counted."""
    return [{"context": f"esverify stand-in prompt {k}", "target": str(k)} for k in range(4)]


def _iid_table(seeds_per_iteration, count: int) -> tuple[list, str]:
    """[(seed + k, seed, k)] for the _iid scripts' per-parameter seeds, and a problem when two members'
    streams overlap (seed + k equal for two (member, slot) pairs: the hook could not tell them apart)."""
    table, seen = [], {}
    for seeds in seeds_per_iteration:
        for s in seeds:
            for k in range(count):
                h = int(s) + k
                if h in seen and seen[h] != (int(s), k):
                    return table, (f"seeds {seen[h][0]} and {s} give the same generator seed {h} to slots "
                                   f"{seen[h][1]} and {k} (the _iid scripts' seed + k overlap)")
                seen[h] = (int(s), k)
                table.append((h, int(s), k))
    return table, ""


def _first_member_difference(ours_rewards, members) -> str:
    theirs = {}
    for m in members:
        theirs.setdefault(m["iteration"], []).append(m)
    for i, rewards in enumerate(ours_rewards):
        got = sorted(theirs.get(i, []), key=lambda m: (m["seed_idx"] if m["seed_idx"] is not None else 0))
        if len(got) != len(rewards):
            return (f"iteration {i}: the script evaluated {len(got)} members, ours {len(rewards)} "
                    "(one evaluate_model call per member expected)")
        for member, (o, t) in enumerate(zip(rewards, got)):
            if _hexf(o) != _hexf(t["reward"]):
                return (f"iteration {i} member {member} (copy {t['copy']}): reward ours {_hexf(o)}, theirs "
                        f"{_hexf(t['reward'])}: the member's perturbed parameters differ")
    return ""


@dataclass
class _Plan:
    """What a row runs: the script (its path in the clone), its iterations and model copies, the numpy
    seed schedule, the _iid scripts' per-parameter seed table, the reward target."""
    rel: str
    iterations: int
    threads: int
    iid: bool
    initial_seed: int
    schedule: list
    table: list
    target: float


def run_row(session, case) -> Outcome:
    """The Outcome of one es-paper row (esverify.oracle.verdict judges it): the script's `main()` in the
    child first, then our `run_paper_loop` on the same set, seeds, constants and dataset size, compared in
    time order. Raises verdict.Unattributable when the _iid seeds overlap under contract noise,
    verdict.NotDriven when the script's dataset size is unknown, verdict.OursRaised when our side raises."""
    ours_backend, child_backend = session.backend(case)
    names, tensors = session.fresh(case.dtype, False, "base", case.device)
    plan = _plan(session, case, len(names))
    tools = session.tools
    reply, _ = tools.exchange(case, _command(session, case, plan, child_backend))
    tape = reply["tape"]
    size = _dataset_size(case, tape)
    if not size:
        raise NotDriven("the size of the script's dataset is unknown (no module-level `dataset` list)")
    prompts = max(tape.get("prompts") or [size])
    # a catalog's variant clones run the same cases: our side once per case and what else it reads
    ours, ours_rewards = session.ours_once(
        case, lambda: _ours(session, case, plan, names, tensors, ours_backend, size, prompts),
        backend=ours_backend, plan=plan, size=size, prompts=prompts)
    snapshots = ours["starts"]   # copy 0 when iteration k starts = after k updates (the child snapshots it)
    diff = _first_difference(tools, plan.iterations, tape, ours, snapshots, tensors, names) or \
        _first_member_difference(ours_rewards, tape.get("members") or [])
    _, final, final_dtypes = tools.read_set(reply["results"])
    cmp = tools.compare(ours["params"], final, final_dtypes, names)
    if cmp.mismatches and not diff:
        diff = f"final parameters of copy 0: {cmp.summary()}"
    layout = [(tools.dtype_name(t), tuple(t.shape)) for t in tensors]
    return Outcome(diff=diff, final=cmp, draws=Draws(tools.findings(reply.get("attribution")), layout),
                   keep=(names, ours["params"], reply["results"]),
                   findings=_findings(tools, case, plan, ours, snapshots, tensors, names),
                   ran=f"{plan.rel}, {plan.iterations} iterations, N={case.population}, gpu_threads={plan.threads}, "
                       f"dataset {size}")


def _plan(session, case, slots: int) -> _Plan:
    """The row's _Plan; raises verdict.Unattributable when two members' _iid streams overlap under contract
    noise (the hook could not tell their draws apart)."""
    from .schedule import seed_stream
    iterations, iid = case.iterations, _iid(case.op)
    initial_seed = _initial_seed(case)
    seeds = seed_stream(initial_seed, case.population)
    schedule = [next(seeds) for _ in range(iterations)]
    table, overlap = _iid_table(schedule, slots) if iid else ([], "")
    if overlap and case.noise == "contract":
        raise Unattributable(f"{overlap}; contract noise cannot attribute those draws")
    # a non-finite reward population: the target itself NaN or inf, so every member's reward is not finite
    target = session.tools.with_nonfinite_target((REWARD_TARGET,), case.extra.get("rewards"))[0]
    return _Plan(script_rel(session.clone_path, case.op), iterations, int(case.extra.get("gpu_threads", 2)),
                 iid, initial_seed, schedule, table, target)


def _command(session, case, plan: _Plan, child_backend) -> dict:
    opts = session.opts
    return {"op": "paper-main", "case_id": case.case_id, "device": case.device, "dtype": case.dtype,
            "scheme": case.scheme, "mapping": opts.mapping, "backend": child_backend, "noise": case.noise,
            "set": str(session.set_path(case.dtype, False, "base")), "sigma": case.sigma, "alpha": case.alpha,
            "population": case.population, "iterations": plan.iterations, "initial_seed": plan.initial_seed,
            "gpu_threads": plan.threads, "data_sample": int(case.extra.get("data_sample", 3)), "data": _data(case),
            "reward_target": plan.target, "script": plan.rel, "out": str(session.case_dir(case)),
            "iid_table": plan.table}


def _ours(session, case, plan: _Plan, names, tensors, ours_backend, size: int, prompts: int) -> tuple:
    """(our tape, our member rewards per iteration) of run_paper_loop on copies of `tensors`; raises
    verdict.OursRaised when our side raises."""
    from .loop import run_paper_loop
    ours_rewards = []

    def prompt_rewards(params):
        value = session.tools.reward(params, plan.target)
        if not ours_rewards or len(ours_rewards[-1]) == case.population:   # every `population` evaluations
            ours_rewards.append([])                                           # a new iteration starts
        ours_rewards[-1].append(value)
        return [value] * prompts

    clock, started = session.clock(case), time.perf_counter()
    try:
        ours = run_paper_loop(names, [t.clone() for t in tensors], iterations=plan.iterations,
                              population=case.population, sigma=case.sigma, alpha=case.alpha,
                              initial_seed=plan.initial_seed, gpu_threads=plan.threads, iid=plan.iid,
                              noise=case.noise, mapping=session.opts.mapping,
                              backend=ours_backend if case.noise == "contract" else None,
                              prompt_rewards=prompt_rewards, dataset_size=size, record_copies=True,
                              record_starts=True)
    except Exception as exc:  # noqa: BLE001 - our side failing is a row, not a crash
        raise OursRaised(exc) from exc
    finally:
        clock["ours_s"] += time.perf_counter() - started
    return ours, ours_rewards[:plan.iterations]


def _first_difference(tools, iterations: int, tape: dict, ours: dict, snapshots, tensors, names) -> str:
    """The first difference in the iterations' order: their count, then per iteration the seeds of the
    numpy schedule and the parameters of copy 0 as it starts; '' when none."""
    theirs_iterations = tape.get("iterations") or []
    if len(theirs_iterations) != iterations:
        return (f"the script ran {len(theirs_iterations)} iterations (numpy schedule draws), ours {iterations} "
                "(NUM_ITERATIONS)")
    for i in range(iterations):
        if [int(s) for s in theirs_iterations[i]["seeds"]] != [int(s) for s in ours["seeds"][i]]:
            return (f"iteration {i}: seeds ours {ours['seeds'][i][:4]}..., theirs "
                    f"{theirs_iterations[i]['seeds'][:4]}...: the numpy seed schedule differs")
        if theirs_iterations[i].get("params"):
            _, arrays, dtypes = tools.read_set(theirs_iterations[i]["params"])
            cmp = tools.compare(snapshots[i] if i < len(snapshots) else tensors, arrays, dtypes, names)
            if cmp.layout_error or cmp.mismatches:
                return f"parameters when iteration {i} starts: {cmp.layout_error or cmp.summary()}"
    return ""


def _findings(tools, case, plan: _Plan, ours: dict, snapshots, tensors, names) -> list:
    """[(key, observed)]: the model copies that drifted from copy 0 in the last iteration (the restore is
    not exact), and the _iid scripts' overlapping seed streams."""
    out = []
    if plan.threads > 1 and plan.iterations:
        drift = [k for k, copy in enumerate(ours["copies_before_update"])
                 if any(not np.array_equal(tools.tensor_bits(a), tools.tensor_bits(b))
                        for a, b in zip(copy, snapshots[-1] if snapshots else tensors))]
        if drift:
            out.append(("restore-drift", f"copies {drift} drifted in the last iteration"))
    if plan.iid and _iid_table(plan.schedule, len(names))[1]:
        out.append(("iid-overlap", _iid_table(plan.schedule, len(names))[1]))
    return out
