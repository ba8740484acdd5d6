"""Parity through the references' own training loops (docs/references.md §5).

Design record: a loop row runs a reference's own training loop in the
child (oracles/child_loops.py, on stand-in engines, recording a tape) and
the same loop on our side (`run_ours`), then compares the two tapes
(loop_compare). Which loop, with which engines, data, sampling, decay,
seed schedule and quirks, is the adapter's `LoopSpec`
(esverify.oracle.adapters.base); nothing here names a reference. Loop
rows appear for every dtype set, scheme and noise source (native noise:
correlated only).

Our side runs the reference's seed schedule (`Config.seed_schedule`, the
30-bit seeds of numpy's default_rng; each seed IS the member seed: under
contract noise the hook's table maps every drawn seed to itself, under
native noise the trainer's torch backend seeds torch's generator with
it, as the reference's loop does), one replica of theta per engine with
the members assigned to engines exactly as the reference groups them (a
regenerate-restore is exact only up to `(x + t) - t`, so which engine a
member ran on shows in the bits), the reward aggregation of
esverify.es.schedule (`batched`: the batch-weighted mean over
mini-batches; `passes`: the mean over the data, one pass per sign), and
the update on replica 0 followed by the broadcast. The loop's global seed
is `loop_global_seed` (0 on the f32 rows, so the reference's `or 42`
fallback runs; a seed other than the fallback on the others). A loop
that does something its own way (one update more than num_iterations,
records numbered from 0, another final save) says so through its
`LoopSpec.quirks` (adapters.base.LoopQuirks), code of its own package.

`loop_compare.compare_tapes` walks both tapes in time order and names the
first quantity that differs ("iteration 2: coefficient of member 4: ours
..., theirs ..."): per iteration the members evaluated (seed and sign),
every reward (f64 bits), the aggregated rewards and the mean/std handed
to z_score (batched loops), the seeds, coefficients (f64 bits), alpha and
divisor handed to the update, the parameters after it (bit patterns,
every slot), the reference's own iteration records; then the number of
updates, the final parameters and the saved state. The report sections
(findings, coverage, not checked) are built by `loop_report`.
"""
from __future__ import annotations

import math
import sys

import numpy as np
import torch

from ..es import Config
from ..es.schedule import DEFAULT_GLOBAL_SEED, FIRST_ITERATION, SEED_BOUND, batch_weighted_mean, mean_reward
from . import paramsets
from . import compare as _compare
from . import nonfinite as _nonfinite
from . import ours_cache as _ours_cache
from . import verdict
from .cases import Case
from .loop_compare import compare_tapes
from .ours import SlotMappedTrainer
from .reuse_plan import ReusePlan
from .rows import too_old_python
from ..exactsum import loop_rewards
from .adapters import get, loop_spec

#: LoopSpec.engine_dtype -> the torch dtype our rewards are computed in (None: the weights' own)
ENGINE_DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32, "auto": None}

#: the small evaluation set each loop gets, so its evaluation path runs (the references' evaluation
#: steps); engine 0 generates on it unperturbed, and nothing of it is compared
EVAL_DATA = (0.005, -0.015)


# ----------------------------------------------------------------- our side

def _hexs(seed: int) -> str:
    return f"0x{seed:016x}"


class _Replicas:
    """One trainer per engine, each on its own copy of theta (docs/numerics.md §1: member-parallel replicas)."""

    def __init__(self, names, tensors, config, backend, engines, noise="contract", slot_map=None):
        self.tensors = [[t.clone() for t in tensors] for _ in range(engines)]
        # replica 0 is built on the initial weights: with decay on, that is the anchor (docs/numerics.md §6).
        # Native noise: torch's own generator seeded with the member seed, which under a numpy seed schedule
        # is the 30-bit seed the reference's loop hands to torch (esverify.es.noise.TorchNoise)
        kind = {"contract": {"backend": backend}, "native": {"noise": "torch"}}[noise]
        self.trainers = [SlotMappedTrainer(list(zip(names, ts)), config, **kind) for ts in self.tensors]
        for trainer in self.trainers:   # the reuse what-if: slot k draws slot slot_map[k]'s noise
            trainer.slot_map = dict(slot_map or {})

    def sync_iteration(self):
        for trainer in self.trainers[1:]:
            trainer.iteration = self.trainers[0].iteration

    def broadcast(self):
        with torch.no_grad():
            for replica in self.tensors[1:]:
                for mine, source in zip(replica, self.tensors[0]):
                    mine.copy_(source)


def _evaluate(replicas, members, targets, engines, dtype=None, plan=None, iteration=0, first=0):
    """Perturb each member on its engine, score every target (the reward in the engines' documented
    precision `dtype`), restore; members: trainer member ids. plan: a reuse_plan.ReusePlan whose maps of
    iteration `iteration` each perturb and restore takes (evaluations numbered from `first`)."""
    records = []
    for start in range(0, len(members), engines):
        group = members[start:start + engines]
        for j, m in enumerate(group):
            if plan is not None:
                replicas.trainers[j].slot_map = plan.perturb(iteration, first + start + j)
            replicas.trainers[j].perturb(m)
        for j, m in enumerate(group):
            records.append({"member": m, "engine": j, "rewards": loop_rewards(replicas.tensors[j], targets, dtype)})
        for j, m in enumerate(group):
            if plan is not None:
                replicas.trainers[j].slot_map = plan.restore(iteration, first + start + j)
            replicas.trainers[j].restore(m)
    return records


def _as_read(reward: float) -> float:
    """A reward as the reference reads it: the stand-in engine answers with its repr, which the reference's
    reward function parses (docs/parity.md, "The training loops"): the same f64 for every finite value, a
    NaN without its sign or payload."""
    return reward if math.isfinite(reward) else float(repr(reward))


def _nonfinite_update(lead, rewards, order, target: str) -> dict:
    """The update of a non-finite reward population as the references compute it (esverify.oracle.nonfinite):
    z-scores with numpy's mean and std over the rewards in evaluation order (`order`, None: member order),
    then the reference's own update on replica 0 (its adapter's `nonfinite_update`); the trainer's iteration
    advances as its update would. Returns the stats the tape needs (mean, std, terms, iteration)."""
    r = np.asarray(rewards, dtype=np.float64)
    _, mean, std = _nonfinite.zscore(r if order is None else r[list(order)])
    with np.errstate(invalid="ignore", over="ignore"):
        coeffs = (r - mean) / (std + 1e-8)
    iteration = lead.iteration
    _nonfinite.update(lead, coeffs, getattr(get(target), "nonfinite_update", None))
    lead.iteration += 1
    return {"mean": mean, "std": std, "terms": coeffs, "iteration": iteration}


def run_ours(case: Case, names, tensors, seed, mapping: str, backend, slot_map=None, plan=None) -> dict:
    """Run the loop of `case` with esverify.es on copies of `tensors`; returns our tape (see compare_tapes).
    seed: the loop's global seed (`loop_global_seed`; 0 or None runs the schedule's `or 42` fallback);
    slot_map: {slot: noise slot} for the reuse what-if (every draw of slot k is slot slot_map[k]'s, as the
    single-op rows replay it, esverify.oracle.ours); plan: a reuse_plan.ReusePlan instead, each perturb,
    restore and update taking the map of the reference's own call (per iteration, per member evaluation)."""
    spec = loop_spec(case)
    updates = loop_updates(case)   # with an extra-update quirk, reproduced
    mirror, caching, decay, lam, engines = spec.mirror, bool(spec.caching), spec.decay, spec.lam, spec.engines
    config = Config(sigma=case.sigma, alpha=case.alpha, population=case.population, antithetic=mirror,
                    scheme=case.scheme, mapping=mapping, profile=get(case.target).profile, seed=int(seed or 0),
                    shaping="zscore", anchor_decay=decay, anchor_lambda=lam, seed_schedule=spec.schedule)
    replicas = _Replicas(names, tensors, config, backend, engines, case.extra.get("noise", "contract"), slot_map)
    dtype = ENGINE_DTYPES[spec.engine_dtype]   # the precision the reference documents for its engines
    lead = replicas.trainers[0]
    n = case.population
    # a row of a non-finite reward population: the references' arithmetic, which our trainer refuses
    nonfinite = case.extra.get("rewards") is not None
    tape = {"iterations": [], "updates": 0}
    for index in range(updates):
        replicas.sync_iteration()
        replay = {} if plan is None else {"plan": plan, "iteration": index}
        if spec.style == "batched":
            seeds = [lead.member_seed(m) for m in range(n)]
            evaluations, per_member = [], {m: [] for m in range(n)}
            for start in range(0, len(spec.data), spec.mini_batch):
                batch = spec.data[start:start + spec.mini_batch]
                for rec in _evaluate(replicas, list(range(n)), batch, engines, dtype, **replay,
                                     first=len(evaluations)):
                    evaluations.append(rec)
                    per_member[rec["member"]].append(rec["rewards"])
            rewards = [_nonfinite.batch_weighted_mean([[_as_read(v) for v in b] for b in per_member[m]]) if nonfinite
                       else batch_weighted_mean(per_member[m]) for m in range(n)]
            if plan is not None:
                lead.slot_map = plan.update(index)
            stats = _nonfinite_update(lead, rewards, None, case.target) if nonfinite else lead.update(rewards)
            zscore = {"avg_rewards": rewards, "mean": stats["mean"], "std": stats["std"]}
            update_seeds = seeds
        else:
            order = list(range(0, n, 2)) + list(range(1, n, 2)) if mirror else list(range(n))
            update_seeds = [lead.member_seed(m) for m in (range(0, n, 2) if mirror else range(n))]
            # one pass per sign, each in groups of the engines (docs/references.md §5.2): engine 0 runs the
            # seeds at positions 0, E, 2E, ... of each pass, which shows in its bits as (x + t) - t
            half = len(update_seeds)
            evaluations = (_evaluate(replicas, order[:half], spec.data, engines, dtype, **replay) +
                           _evaluate(replicas, order[half:], spec.data, engines, dtype, **replay, first=half)) \
                if mirror else _evaluate(replicas, order, spec.data, engines, dtype, **replay)
            rewards = np.empty(n)
            rewards[order] = [_nonfinite.mean_reward([_as_read(v) for v in rec["rewards"]]) if nonfinite
                              else mean_reward(rec["rewards"]) for rec in evaluations]
            if plan is not None:
                lead.slot_map = plan.update(index)
            # numpy mean/std over the evaluation order
            stats = _nonfinite_update(lead, rewards, order, case.target) if nonfinite else \
                lead.update(rewards, order=order)
            zscore = None
        replicas.broadcast()
        members = [{"seed": lead.member_seed(rec["member"], stats["iteration"]),
                    "negate": bool(mirror and rec["member"] % 2), "engine": rec["engine"], "rewards": rec["rewards"],
                    # a loop whose perturb and restore take caching passes it through (docs/references.md §5)
                    "caching": None if spec.caching is None else caching}
                   for rec in evaluations]
        tape["iterations"].append({
            "members": members, "zscore": zscore,
            "update": {"seeds": update_seeds, "coeffs": [float(c) for c in stats["terms"]], "alpha": case.alpha,
                       "population_size": n,
                       "extra": {} if spec.caching is None else {"caching": caching, "weight_decay_type": decay,
                                                                    "weight_decay_lambda": lam}},
            "params": [t.clone() for t in replicas.tensors[0]]})
        tape["updates"] += 1
    tape["final"] = replicas.tensors[0]
    tape["names"] = list(names)
    return tape


def loop_global_seed(case: Case, run_seed: int) -> int:
    """The global seed the loop of `case` is handed (an int >= 0).

    The reference's schedule is `default_rng((global_seed or 42) + i)`, and the run's --seed defaults to
    42: handing every row --seed would leave both the fallback and the use of a given seed unexercised
    (a loop with `or 43`, or one that ignores its global seed, would pass). So the f32 rows hand 0 (the
    fallback runs; 0 rather than None, since a loop may also hand its global seed to an API that needs an
    int) and the others a seed that is not the fallback: --seed, or 43 when --seed resolves to the
    fallback itself (42 or 0); a schedule that changes or drops the fallback, or ignores the seed it is
    given, shows as a seed difference (docs/parity.md, "The training loops")."""
    if case.dtype == "f32":
        return 0
    return int(run_seed) if (int(run_seed) or DEFAULT_GLOBAL_SEED) != DEFAULT_GLOBAL_SEED else DEFAULT_GLOBAL_SEED + 1


def loop_updates(case: Case) -> int:
    """How many updates the loop of `case` performs for --iterations (`LoopQuirks.updates`: one more for a
    counter tested after the increment, docs/references.md §5)."""
    return loop_spec(case).quirks.updates(int(case.extra.get("iterations", 3)))


def loop_command(case: Case, seed) -> dict:
    """The case fields the child needs: loop settings and the hook table. Built from the seed schedule
    alone, so the child starts before our side has run: every drawn seed maps to itself (under a numpy
    seed schedule the 30-bit seed IS the member seed, esverify.es.schedule)."""
    # the schedule's draws of the loop's iterations and their neighbours, with N and N/2 seeds: an
    # off-by-one schedule or a wrong count is then named as a seed difference instead of stopping at an
    # unknown seed
    spec = loop_spec(case)
    seeds = set()
    base = (int(seed or 0) or DEFAULT_GLOBAL_SEED) + FIRST_ITERATION[spec.schedule]
    for b in range(base - 1, base + loop_updates(case) + 2):
        for count in {case.population, case.population // 2}:
            seeds.update(int(v) for v in np.random.default_rng(seed=b).integers(0, SEED_BOUND, size=count,
                                                                                    dtype=np.int64))
    command = {"handles": {str(s): _hexs(s) for s in sorted(seeds)}, "iterations": int(case.extra["iterations"]),
               "global_seed": seed, "noise": case.extra.get("noise", "contract"), "dtype": case.dtype,
               "data": [{"input": f"prompt {k}", "target": t}
                        for k, t in enumerate(spec.data)],
               # the evaluation paths run too (eval_step, evaluate_model): not compared, but covered
               "eval_data": [{"input": f"eval {k}", "target": t} for k, t in enumerate(EVAL_DATA)]}
    command.update(spec.command)
    return command


# ----------------------------------------------------------------- the runner's row

def run_loop_case(session, case: Case) -> dict:
    """One loop row on `session` (esverify.oracle.session.Session): our loop, the reference's loop in
    the child, the comparison of the two tapes, judged by esverify.oracle.verdict."""
    if not session.ensure_child():
        return verdict.error_row(session, case, f"the child could not be restarted: {session.start_error}")
    env = session.environment
    backend, child_backend = session.backend(case)   # BackendRefused: an error row (row_runner.run_case)
    side = _LoopSide(session, case, backend)
    command = {"case_id": case.case_id, "device": case.device, "scheme": case.scheme,
               "mapping": session.opts.mapping, "backend": child_backend,
               "set": str(session.set_path(case.dtype, False, "base")), "sigma": case.sigma, "alpha": case.alpha,
               "population": case.population, "out": str(session.case_dir(case))}
    command.update(loop_command(case, side.seed))
    compute, kept = side.run, None
    cache = getattr(session, "ours_cache", None)
    if cache is not None:   # Runner.session: our tape once per case, a copy for every variant clone
        key = _ours_cache.key("loop", case, seed=side.seed, mapping=session.opts.mapping, backend=backend,
                              deterministic=side.deterministic, profile=get(case.target).profile)
        kept = cache.get(key)
        compute = None if kept is not None else cache.storing(key, side.run)
    # the child runs its loop while ours runs, as for the single-op rows
    reply, ours = verdict.exchange(session, case, command, compute,
                                   first_result=lambda err: too_old_python(case, err, env))
    return _judged(session, case, side, reply, ours if kept is None else kept)


class _LoopSide:
    """Our side of a loop row: the case's parameter set, the loop's global seed and our loop, run under the
    determinism switch the reference's entry point sets (LoopQuirks.deterministic), so both sides of the
    row run under the same setting; the reply says what the reference really ran under."""

    def __init__(self, session, case: Case, backend):
        self.session, self.case, self.backend = session, case, backend
        self.names, self.tensors = session.fresh(case.dtype, False, "base", case.device)
        self.seed = loop_global_seed(case, session.opts.seed)
        self.spec = loop_spec(case)
        self.deterministic = self.spec.quirks.deterministic(self.seed)

    def run(self, slot_map=None, plan=None, tensors=None) -> dict:
        """Our tape (run_ours) on the case's set, or on `tensors` (a fresh copy for a what-if)."""
        return _deterministic(self.deterministic, lambda: run_ours(
            self.case, self.names, self.tensors if tensors is None else tensors, self.seed,
            self.session.opts.mapping, self.backend, slot_map=slot_map, plan=plan))

    def whatif(self, theirs: dict, results, layout: list, sources: dict) -> tuple:
        """(ours with the reference's reuse agrees, what still differs) for verdict.judge_loop: each call's
        own reuse as the single-op rows replay it (a perturb may reuse where the restore does not), else
        one map for the case."""
        plan = ReusePlan.from_tape(theirs, layout)
        try:
            again = self.run(slot_map=sources if plan is None else None, plan=plan,
                             tensors=self.session.fresh(self.case.dtype, False, "base", self.case.device)[1])
            _, diff_again = compare_tapes(self.case, again, theirs, results)
            return diff_again is None, (None if diff_again is None else str(diff_again))
        except Exception as exc:  # noqa: BLE001 - no what-if, no artifact: the row stays a fail
            return None, f"the what-if raised {type(exc).__name__}: {exc}"


def _judged(session, case: Case, side: _LoopSide, reply: dict, ours: dict) -> dict:
    """The loop row from the two tapes: the first difference, the draw accounting and reuse judgement
    (verdict.judge_loop), the settings each side ran under, the engines' precisions, the loop's quirks."""
    theirs = reply["tape"]
    settings, settings_note = settings_text(reply.get("settings") or {}, side.deterministic)
    cmp, diff = compare_tapes(case, ours, theirs, reply["results"])
    found = _compare.findings(reply.get("attribution"))
    # the reuse is established once for the case from what the hook saw (slots never drawn that an earlier
    # slot of equal size could have lent its draw) and judged by the one rule of every row kind
    layout = [(paramsets.dtype_name(t), tuple(t.shape)) for t in side.tensors]
    judged = verdict.judge_loop(case, diff, found, layout,
                                lambda sources: side.whatif(theirs, reply["results"], layout, sources))
    notes = judged[2]
    if settings_note:
        notes.append(settings_note)
    launched = list(theirs.get("engine_precisions") or [])
    if launched:   # the report names the precision each engine was launched with
        settings = (settings + " " if settings else "") + "engines=" + ",".join(launched)
        other = sorted({p for p in launched if p.split(" ")[0] != side.spec.engine_dtype})
        if other:
            notes.insert(0, f"engines: theirs launched in {', '.join(other)}, documented {side.spec.engine_dtype}: "
                            "the stand-in engines compute each reward in the precision they are launched with, "
                            "ours in the documented one")
    notes += side.spec.quirks.notes(session, case, ours, theirs)
    return verdict.loop_row(session, case, judged, found, cmp.fields() if cmp is not None else {}, settings,
                            (side.names, ours["final"], reply["results"]))   # engine 0's final parameters


def _deterministic(on: bool, fn):
    """fn() with torch.use_deterministic_algorithms(on), the previous setting restored after."""
    before = (torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled())
    if before == (on, False):
        return fn()
    _set_deterministic(on, False)
    try:
        return fn()
    finally:
        _set_deterministic(*before)


def _set_deterministic(mode: bool, warn_only: bool) -> None:
    """torch.use_deterministic_algorithms(mode, warn_only=warn_only) for our side. The public call first
    imports torch._inductor to copy the switch into the compiler's config (about 4 s of CPU in a parity
    run); our side compiles nothing, so while the compiler is not loaded only the switch the eager
    kernels read is set (torch._C._set_deterministic_algorithms, the call the public one ends with;
    are_deterministic_algorithms_enabled reads it back). Once something loaded the compiler, the public
    call keeps its config in step."""
    if "torch._inductor" in sys.modules or not hasattr(torch._C, "_set_deterministic_algorithms"):
        torch.use_deterministic_algorithms(mode, warn_only=warn_only)
    else:
        torch._C._set_deterministic_algorithms(mode, warn_only=warn_only)


def settings_text(theirs: dict, ours_deterministic: bool) -> tuple[str, str]:
    """(the row's reference_settings, a note when our side ran under another determinism setting)."""
    if not theirs:
        return "", ""
    changed = theirs.get("changed_by_reference") or []
    text = (f"deterministic_algorithms={theirs.get('deterministic_algorithms')} "
            f"cudnn_deterministic={theirs.get('cudnn_deterministic')} torch_threads={theirs.get('torch_threads')}")
    if changed:
        text += f" (set by the reference's entry point: {', '.join(changed)})"
    note = ""
    if bool(theirs.get("deterministic_algorithms")) != ours_deterministic:
        note = (f"note: the reference ran with torch.use_deterministic_algorithms({theirs.get('deterministic_algorithms')}), "
                f"our side with {ours_deterministic}: the CPU ops of this loop have no nondeterministic kernel, "
                "but the sides did not run under the same setting")
    return text, note
