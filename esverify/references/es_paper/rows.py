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

import numpy as np

from esverify.oracle import compare as _compare
from esverify.oracle import paramsets
from esverify.oracle.case_model import REWARD_TARGET
from esverify.oracle.rewards import loop_reward as reward
from esverify.oracle.rewards import with_nonfinite_target
from esverify.oracle.noise_policy import BackendRefused


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


def run_row(adapter, session, case) -> dict:
    from .loop import run_paper_loop
    from .schedule import seed_stream
    try:
        ours_backend, child_backend = session.backend(case)
    except BackendRefused as exc:
        return session.row(case, status="error", detail=f"{case.op}: {exc}")
    opts = session.opts
    names, tensors = session.fresh(case.dtype, False, "base", case.device)
    iterations, threads = case.iterations, int(case.extra.get("gpu_threads", 2))
    iid = adapter.iid(case.op)
    initial_seed = adapter.initial_seed(case)
    seeds = seed_stream(initial_seed, case.population)
    schedule = [next(seeds) for _ in range(iterations)]
    table, overlap = _iid_table(schedule, len(names)) if iid else ([], "")
    if overlap and case.noise == "contract":
        return session.row(case, status="unverifiable", detail=f"{case.op}: {overlap}; contract noise cannot "
                                                               "attribute those draws")
    out = session.case_dir(case)
    rel = adapter.layout(session.clone_path)[case.op]
    # a non-finite reward population: the target itself NaN or inf, so every member's reward is not finite
    target = with_nonfinite_target((REWARD_TARGET,), case.extra.get("rewards"))[0]
    command = {"op": "paper-main", "case_id": case.case_id, "device": case.device, "dtype": case.dtype,
               "scheme": case.scheme, "mapping": opts.mapping, "backend": child_backend, "noise": case.noise,
               "set": str(session.set_path(case.dtype, False, "base")), "sigma": case.sigma, "alpha": case.alpha,
               "population": case.population, "iterations": iterations, "initial_seed": initial_seed,
               "gpu_threads": threads, "data_sample": int(case.extra.get("data_sample", 3)), "data": _data(case),
               "reward_target": target, "script": rel, "out": str(out), "iid_table": table}
    reply, _, failed = session.exchange(case, command, None)
    if failed is not None:
        return failed
    if reply["status"] != "ok":
        return session.reference_error_row(case, reply["error"])
    tape = reply["tape"]
    size = _dataset_size(case, tape)
    if not size:
        return session.row(case, status="error", detail=f"{case.op}: esverify could not drive this clone: the "
                                                         "size of the script's dataset is unknown (no module-level "
                                                         "`dataset` list)")
    prompts = max(tape.get("prompts") or [size])
    ours_rewards = []

    def prompt_rewards(params):
        value = reward(params, target)
        if not ours_rewards or len(ours_rewards[-1]) == case.population:   # every `population` evaluations
            ours_rewards.append([])                                           # a new iteration starts
        ours_rewards[-1].append(value)
        return [value] * prompts

    clock, started = session.clock(case), time.perf_counter()
    try:
        ours = run_paper_loop(names, [t.clone() for t in tensors], iterations=iterations, population=case.population,
                              sigma=case.sigma, alpha=case.alpha, initial_seed=initial_seed, gpu_threads=threads,
                              iid=iid, noise=case.noise, mapping=opts.mapping,
                              backend=ours_backend if case.noise == "contract" else None,
                              prompt_rewards=prompt_rewards, dataset_size=size, record_copies=True,
                              record_starts=True)
        # copy 0 when iteration k starts = after k updates (the child snapshots it at each schedule draw)
        snapshots = ours["starts"]
    except Exception as exc:  # noqa: BLE001 - our side failing is a row, not a crash
        return session.row(case, status="error", detail=f"{case.op}: our side raised {type(exc).__name__}: {exc}")
    finally:
        clock["ours_s"] += time.perf_counter() - started
    ours_rewards = ours_rewards[:iterations]
    notes, diff = [], ""
    theirs_iterations = tape.get("iterations") or []
    if len(theirs_iterations) != iterations:
        diff = (f"the script ran {len(theirs_iterations)} iterations (numpy schedule draws), ours {iterations} "
                "(NUM_ITERATIONS)")
    for i in range(min(iterations, len(theirs_iterations))):
        if diff:
            break
        if [int(s) for s in theirs_iterations[i]["seeds"]] != [int(s) for s in ours["seeds"][i]]:
            diff = (f"iteration {i}: seeds ours {ours['seeds'][i][:4]}..., theirs "
                    f"{theirs_iterations[i]['seeds'][:4]}...: the numpy seed schedule differs")
            break
        if theirs_iterations[i].get("params"):
            _, arrays, dtypes = paramsets.read(theirs_iterations[i]["params"])
            cmp = _compare.compare(snapshots[i] if i < len(snapshots) else tensors, arrays, dtypes, names)
            if cmp.layout_error or cmp.mismatches:
                diff = f"parameters when iteration {i} starts: {cmp.layout_error or cmp.summary()}"
                break
    if not diff:
        diff = _first_member_difference(ours_rewards, tape.get("members") or [])
    _, final, final_dtypes = paramsets.read(reply["results"])
    cmp = _compare.compare(ours["params"], final, final_dtypes, names)
    if cmp.layout_error:
        return session.row(case, status="error", detail=f"{case.op}: result layout differs: {cmp.layout_error}")
    if cmp.mismatches and not diff:
        diff = f"final parameters of copy 0: {cmp.summary()}"
    found = _compare.findings(reply.get("attribution"))
    if found.advanced:
        notes.append(f"{case.op}: {found.advanced_count} draws started past position 0 of their generator "
                     "(a generator reused or not reseeded)")
    if found.extra:
        notes.append(f"{case.op}: slots drawn a number of times that is not perturb + restore + update: "
                     f"{sorted(found.extra)[:8]}")
    if found.foreign:
        notes.append(f"{case.op}: {len(found.foreign)} draws with seeds no member of the schedule has")
    if threads > 1 and iterations:
        drift = [k for k, copy in enumerate(ours["copies_before_update"])
                 if any(not np.array_equal(paramsets.tensor_bits(a), paramsets.tensor_bits(b))
                        for a, b in zip(copy, snapshots[-1] if snapshots else tensors))]
        if drift:
            session.record_finding("restore-drift", case, f"copies {drift} drifted in the last iteration")
    if iid and _iid_table(schedule, len(names))[1]:
        session.record_finding("iid-overlap", case, _iid_table(schedule, len(names))[1])
    status = "fail" if diff else "pass"
    if diff:
        notes.insert(0, f"{case.op}: {diff}")
    # slots never drawn: the one rule of every row kind (compare.judge_reuse; the bits decide). Ours has no
    # replay of a reuse for these scripts, so under iid a reuse that changes bits stays a fail, said as such
    reuse_diagnosis = []
    if found.missing:
        layout = [(paramsets.dtype_name(t), tuple(t.shape)) for t in tensors]
        sources = _compare.reuse_sources(list(found.missing), layout)
        skipped = [k for k in sorted(found.missing) if k not in sources]
        if skipped:
            text = "skip: " + ", ".join(f"slot {k} ({found.missing[k][0]}) never drawn" for k in skipped[:4])
            if diff:
                reuse_diagnosis.append("skip")
                notes.insert(0, f"{case.op}: {text}")
            else:
                notes.append(f"note: the draw accounting and the bits disagree: {text}, yet every compared "
                             "quantity agrees bit for bit, so the bits decide")
        elif sources:
            status = _compare.record_reuse(_compare.judge_reuse(case.scheme, bool(diff), None,
                                                                _compare.reuse_pairs(found, sources)),
                                           case.op, status, reuse_diagnosis, notes)
    if status == "fail" and opts.keep_tensors:
        ours_path = paramsets.write(out / "ours.npz", names, ours["params"])
        session.keep(case.case_id, ours_path, reply["results"])
    diagnoses = reuse_diagnosis + (["advanced"] if found.advanced else []) + (["extra"] if found.extra else [])
    notes.append(f"{case.op}: {rel}, {iterations} iterations, N={case.population}, gpu_threads={threads}, "
                 f"dataset {size}")
    return session.row(case, status=status, diagnosis=",".join(diagnoses), detail="; ".join(notes), **cmp.fields())
