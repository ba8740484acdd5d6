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

from esverify.oracle.case_model import REWARD_TARGET
from esverify.oracle.verdict import Defect, OursRaised, Outcome

from .sample import MAX_POPULATION, sample_module


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


def run_row(session, case) -> Outcome:
    """The Outcome of one skill-sample row (esverify.oracle.verdict judges it): the page's `es_train_loop` in
    the child and our `run_skill_loop` beside it, compared in time order. The sample's documented defects
    are the first-result hook's `Defect`s; raises verdict.OursRaised when our side raises on what a fixed
    copy of the sample ran."""
    from . import loop as ours_loop
    ours_backend, child_backend = session.backend(case)
    names, tensors = session.fresh(case.dtype, case.big, "base", case.device)
    shapes = [tuple(t.shape) for t in tensors]
    flat = torch.nn.utils.parameters_to_vector(tensors).detach().clone()
    command = _command(session, case, child_backend)
    ours_rewards = []

    def our_reward(vector):
        value = session.tools.reward(_pieces(vector, shapes), command["reward_target"])
        ours_rewards.append(value)
        return value

    def fresh():
        return ours_loop.run_skill_loop(flat, generations=command["generations"], population=case.population,
                                        sigma=case.sigma, lr=case.alpha, seed_base=command["seed_base"],
                                        noise=case.noise, mapping=session.opts.mapping,
                                        backend=ours_backend if case.noise == "contract" else None,
                                        reward=our_reward), list(ours_rewards)

    def compute():   # a catalog's variant clones run the same cases: our side once per case
        ours, rewards = session.ours_once(case, fresh, backend=ours_backend, generations=command["generations"],
                                          seed_base=command["seed_base"], target=command["reward_target"])
        ours_rewards[:] = rewards
        return ours
    # the sample refuses bf16 and populations above its 30 utilities (its defects): nothing to compare with
    runnable = case.dtype != "bf16" and case.population <= MAX_POPULATION
    reply, ours = session.tools.exchange(case, command, compute if runnable else None,
                                         first_result=lambda err: _defect(err, case, MAX_POPULATION))
    notes = []
    if ours is None:   # the sample ran what its published version refuses (a fixed copy): compare it too
        ours = _compute_refused(case, compute)
        notes.append(f"note: this copy of the sample runs dtype {case.dtype} at population {case.population}, "
                     "which the published sample refuses (docs/references.md §7)")
    return _compared(session.tools, case, command, reply, ours, ours_rewards, flat, notes)


def _command(session, case, child_backend) -> dict:
    module = sample_module(session.clone_path)
    root = session.adapter.clone_root(session.clone_path)   # the folder the child starts in
    # a non-finite reward population: the target itself NaN, so every member's reward is NaN
    target = session.tools.with_nonfinite_target((REWARD_TARGET,), case.extra.get("rewards"))[0]
    return {"op": "skill-loop", "case_id": case.case_id, "device": case.device, "scheme": case.scheme,
            "mapping": session.opts.mapping, "backend": child_backend, "noise": case.noise,
            "set": str(session.set_path(case.dtype, case.big, "base")), "sigma": case.sigma, "lr": case.alpha,
            "population": case.population, "generations": case.iterations,
            "seed_base": int(case.extra.get("seed_base", 42)), "reward_target": target,
            "module": module.relative_to(root).as_posix() if module else "", "out": str(session.case_dir(case))}


def _defect(err: dict, case, max_population: int) -> Defect | None:
    """The first-result hook: the sample's documented defect an error reply shows, with its findings."""
    defect = defect_of(err, case, max_population)
    if not defect:
        return None
    findings = [("bf16-crash" if case.dtype == "bf16" else "population-cap", defect)]
    if case.dtype == "bf16" and err.get("line"):
        findings.append(("unused-accumulation", f"the bf16 crash is at that accumulation (line {err['line']})"))
    return Defect(defect, tuple(findings))


def _compute_refused(case, compute):
    try:
        return compute()
    except Exception as exc:  # noqa: BLE001 - our side failing is a row, not a crash
        raise OursRaised(exc, context=f"the sample ran dtype {case.dtype} at population {case.population}, "
                                      "which the published sample refuses; ") from exc


def _seed_difference(ours: dict, tape: dict) -> str:
    """The first difference of the np.random.seed calls: per generation the sample seeds each member twice
    (to perturb, then to regenerate its noise); '' when none."""
    want_seeds = [s for g in ours["tape"] for s in (*g["seeds"], *g["seeds"])]
    got_seeds = [s for s in tape.get("seeds") or []]
    if got_seeds == want_seeds:
        return ""
    k = next((i for i, (a, b) in enumerate(zip(want_seeds, got_seeds)) if a != b), min(len(want_seeds),
                                                                                       len(got_seeds)))
    return (f"np.random.seed calls: {len(got_seeds)} (ours {len(want_seeds)}); first difference at call {k}: "
            f"ours {want_seeds[k] if k < len(want_seeds) else None}, theirs "
            f"{got_seeds[k] if k < len(got_seeds) else None}: the seed schedule differs")


def _reward_difference(case, ours_rewards, tape: dict) -> str:
    """The first member whose reward differs (f64 bits), or a different number of reward calls; '' when none."""
    theirs_rewards = [float(r) for r in tape.get("rewards") or []]
    if len(theirs_rewards) != len(ours_rewards):
        return f"the sample called reward_fn {len(theirs_rewards)} times, ours {len(ours_rewards)}"
    for k, (o, t) in enumerate(zip(ours_rewards, theirs_rewards)):
        if _hexf(o) != _hexf(t):
            g, m = divmod(k, case.population)
            return (f"generation {g} member {m}: reward ours {_hexf(o)}, theirs {_hexf(t)}: the member's "
                    "perturbed parameters differ")
    return ""


def _compared(tools, case, command: dict, reply: dict, ours: dict, ours_rewards, flat, notes: list) -> Outcome:
    """Both runs compared in time order: seeds, rewards, the returned params_current, the vector the model
    is left holding; the sample's findings when they agree."""
    from . import loop as ours_loop
    tape, generations = reply["tape"], command["generations"]
    diff = _seed_difference(ours, tape) or _reward_difference(case, ours_rewards, tape)
    _, final, final_dtypes = tools.read_set(reply["results"])
    cmp = tools.compare([ours["params"]], final, final_dtypes, ["params_current"])
    if cmp.layout_error:   # nothing more to compare (verdict.reference_row: an error row)
        return Outcome(diff=diff, final=cmp)
    if cmp.mismatches and not diff:
        diff = f"params_current: {cmp.summary()}"
    findings = []
    _, left, left_dtypes = tools.read_set(tape["model_after"])
    last_member = ours["tape"][-1]["model"] if ours["tape"] else flat
    left_cmp = tools.compare([last_member], left, left_dtypes, ["model"])
    if not left_cmp.layout_error and not left_cmp.mismatches and generations:
        params_cmp = tools.compare([ours["params"]], left, left_dtypes, ["model"])
        if params_cmp.mismatches:
            findings.append(("model-left-perturbed", "the model holds the last member's perturbed vector after the "
                                                     f"loop ({params_cmp.mismatches} of {params_cmp.elements} "
                                                     "elements differ from params_current)"))
    elif not diff and generations:
        diff = f"the model's parameters after the loop: {left_cmp.layout_error or left_cmp.summary()}"
    if not diff:
        seed_base, population = command["seed_base"], case.population
        findings.append(("utilities-by-member", ours_loop.utilities_by_member_demo()))
        findings.append(("numpy-global-reset", f"np.random.seed was called {len(tape.get('seeds') or [])} times"))
        overlap = ours_loop.seed_overlap_finding((seed_base, generations, population),
                                                 (seed_base + population, generations, population))
        if overlap:
            findings.append(("seed-overlap", overlap))
    return Outcome(diff=diff, final=cmp, notes=notes, findings=findings,
                   keep=(["params_current"], [ours["params"]], reply["results"]),
                   ran=f"{command['module']}, {generations} generations, N={case.population}, "
                       f"{flat.numel()} parameters")
