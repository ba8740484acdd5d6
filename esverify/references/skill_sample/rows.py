"""One skill-sample row: the page's `es_train_loop` in the child, our `run_skill_loop`, compared (docs/references.md §7).

Design record: both sides start from the same flat vector
(`parameters_to_vector` of the case's parameter set, one dtype) and get
the same reward (the runner's, of the parameters as the reward function
sees them, per parameter tensor). Our side runs beside the child. The
comparison walks in time order: the seeds set (numpy's legacy `seed`),
each member's reward (f64 bits), the returned `params_current`, and the
vector the model is left holding. When the sample raises one of its
documented defects (bf16 parameters: numpy has no bfloat16; a population
above its 30 utilities), the row is `defect`: the sample's line and
message, and no comparison; any other exception is an `error` row.
"""
from __future__ import annotations

import numpy as np
import torch

from esverify.oracle import compare as _compare
from esverify.oracle import paramsets
from esverify.oracle.case_model import REWARD_TARGET
from esverify.oracle.rewards import loop_reward as reward
from esverify.oracle.rewards import with_nonfinite_target
from esverify.oracle.noise_policy import BackendRefused


def _hexf(x: float) -> str:
    return float(x).hex()


def defect_of(err: dict, case, max_population: int) -> str:
    """The documented defect an error reply shows, as one line; '' when it is not one. The child's
    message already names the sample's line and its source text."""
    message = err.get("message", "")
    if err.get("kind") == "TypeError" and "BFloat16" in message:
        return (f"the sample cannot run bf16 parameters, the page's own default dtype (numpy has no bfloat16): "
                f"{message}")
    if err.get("kind") == "IndexError" and case.population > max_population:
        return (f"the sample cannot run a population of {case.population}: its global utilities has "
                f"{max_population} entries (population_size = {max_population} at module level): {message}")
    return ""


def _pieces(flat: torch.Tensor, shapes) -> list:
    out, at = [], 0
    for shape in shapes:
        n = int(np.prod(shape)) if shape else 1
        out.append(flat[at:at + n].reshape(shape))
        at += n
    return out


def run_row(adapter, session, case) -> dict:
    from . import loop as ours_loop
    try:
        ours_backend, child_backend = session.backend(case)
    except BackendRefused as exc:
        return session.row(case, status="error", detail=f"{case.op}: {exc}")
    opts = session.opts
    names, tensors = session.fresh(case.dtype, case.big, "base", case.device)
    shapes = [tuple(t.shape) for t in tensors]
    flat = torch.nn.utils.parameters_to_vector(tensors).detach().clone()
    module = adapter.sample_module(session.clone_path)
    root = adapter.clone_root(session.clone_path)
    out = session.case_dir(case)
    seed_base, generations = int(case.extra.get("seed_base", 42)), case.iterations
    # a non-finite reward population: the target itself NaN, so every member's reward is NaN
    target = with_nonfinite_target((REWARD_TARGET,), case.extra.get("rewards"))[0]
    command = {"op": "skill-loop", "case_id": case.case_id, "device": case.device, "scheme": case.scheme,
               "mapping": opts.mapping, "backend": child_backend, "noise": case.noise,
               "set": str(session.set_path(case.dtype, case.big, "base")), "sigma": case.sigma, "lr": case.alpha,
               "population": case.population, "generations": generations, "seed_base": seed_base,
               "reward_target": target, "module": module.relative_to(root).as_posix() if module else "",
               "out": str(out)}
    ours_rewards = []

    def our_reward(vector):
        value = reward(_pieces(vector, shapes), target)
        ours_rewards.append(value)
        return value

    # the sample refuses bf16 and populations above its 30 utilities (its defects): nothing to compare with
    runnable = case.dtype != "bf16" and case.population <= adapter.max_population

    def compute():
        return ours_loop.run_skill_loop(flat, generations=generations, population=case.population,
                                        sigma=case.sigma, lr=case.alpha, seed_base=seed_base, noise=case.noise,
                                        mapping=opts.mapping,
                                        backend=ours_backend if case.noise == "contract" else None,
                                        reward=our_reward)
    notes, diff = [], ""
    reply, ours, failed = session.exchange(case, command, compute if runnable else None)
    if failed is not None:
        return failed
    if reply["status"] != "ok":
        defect = defect_of(reply["error"], case, adapter.max_population)
        if defect:
            session.record_finding("bf16-crash" if case.dtype == "bf16" else "population-cap", case, defect)
            if case.dtype == "bf16" and reply["error"].get("line"):
                session.record_finding("unused-accumulation", case, f"the bf16 crash is at that accumulation "
                                                                    f"(line {reply['error']['line']})")
            return session.row(case, status="defect", diagnosis="reference-defect", detail=f"{case.op}: {defect}")
        return session.reference_error_row(case, reply["error"])
    if ours is None:   # the sample ran what its published version refuses (a fixed copy): compare it too
        try:
            ours = compute()
        except Exception as exc:  # noqa: BLE001 - our side failing is a row, not a crash
            return session.row(case, status="error", detail=f"{case.op}: the sample ran dtype {case.dtype} at "
                                                             f"population {case.population}, which the published "
                                                             f"sample refuses; our side raised "
                                                             f"{type(exc).__name__}: {exc}")
        notes.append(f"note: this copy of the sample runs dtype {case.dtype} at population {case.population}, "
                     "which the published sample refuses (docs/references.md §7)")
    tape = reply["tape"]
    # per generation the sample seeds each member twice: to perturb, then to regenerate its noise
    want_seeds = [s for g in ours["tape"] for s in (*g["seeds"], *g["seeds"])]
    got_seeds = [s for s in tape.get("seeds") or []]
    if got_seeds != want_seeds:
        k = next((i for i, (a, b) in enumerate(zip(want_seeds, got_seeds)) if a != b), min(len(want_seeds),
                                                                                           len(got_seeds)))
        diff = (f"np.random.seed calls: {len(got_seeds)} (ours {len(want_seeds)}); first difference at call {k}: "
                f"ours {want_seeds[k] if k < len(want_seeds) else None}, theirs "
                f"{got_seeds[k] if k < len(got_seeds) else None}: the seed schedule differs")
    theirs_rewards = [float(r) for r in tape.get("rewards") or []]
    if not diff:
        if len(theirs_rewards) != len(ours_rewards):
            diff = f"the sample called reward_fn {len(theirs_rewards)} times, ours {len(ours_rewards)}"
        else:
            for k, (o, t) in enumerate(zip(ours_rewards, theirs_rewards)):
                if _hexf(o) != _hexf(t):
                    g, m = divmod(k, case.population)
                    diff = (f"generation {g} member {m}: reward ours {_hexf(o)}, theirs {_hexf(t)}: the member's "
                            "perturbed parameters differ")
                    break
    _, final, final_dtypes = paramsets.read(reply["results"])
    cmp = _compare.compare([ours["params"]], final, final_dtypes, ["params_current"])
    if cmp.layout_error:
        return session.row(case, status="error", detail=f"{case.op}: result layout differs: {cmp.layout_error}")
    if cmp.mismatches and not diff:
        diff = f"params_current: {cmp.summary()}"
    _, left, left_dtypes = paramsets.read(tape["model_after"])
    last_member = ours["tape"][-1]["model"] if ours["tape"] else flat
    left_cmp = _compare.compare([last_member], left, left_dtypes, ["model"])
    if not left_cmp.layout_error and not left_cmp.mismatches and generations:
        params_cmp = _compare.compare([ours["params"]], left, left_dtypes, ["model"])
        if params_cmp.mismatches:
            session.record_finding("model-left-perturbed", case,
                                   "the model holds the last member's perturbed vector after the loop "
                                   f"({params_cmp.mismatches} of {params_cmp.elements} elements differ from "
                                   "params_current)")
    elif not diff and generations:
        diff = f"the model's parameters after the loop: {left_cmp.layout_error or left_cmp.summary()}"
    if not diff:
        session.record_finding("utilities-by-member", case, ours_loop.utilities_by_member_demo())
        session.record_finding("numpy-global-reset", case, f"np.random.seed was called {len(got_seeds)} times")
        overlap = ours_loop.seed_overlap_finding((seed_base, generations, case.population),
                                                 (seed_base + case.population, generations, case.population))
        if overlap:
            session.record_finding("seed-overlap", case, overlap)
    status = "fail" if diff else "pass"
    if diff:
        notes.insert(0, f"{case.op}: {diff}")
    if status == "fail" and opts.keep_tensors:
        ours_path = paramsets.write(out / "ours.npz", ["params_current"], [ours["params"]])
        session.keep(case.case_id, ours_path, reply["results"])
    notes.append(f"{case.op}: {command['module']}, {generations} generations, N={case.population}, "
                 f"{flat.numel()} parameters")
    return session.row(case, status=status, detail="; ".join(notes), **cmp.fields())
