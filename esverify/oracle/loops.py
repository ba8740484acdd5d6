"""Parity through the references' own training loops (REFERENCES.md §5; issue 9).

Two ops join the matrix, for every dtype set and scheme:

- `fit` (es-at-scale): `EvolutionStrategiesTrainer.fit` for `--iterations`
  K with FIT_ENGINES engines and a population that is not a multiple of
  them (N, or N + 1 when N is), on FIT_DATA in mini-batches of
  FIT_MINI_BATCH;
- `main` (es-awd): `es.main` plain, `main-mirror` (mirror_sampling),
  `main-caching`, `main-l1` / `main-l2` (anchored decay at LOOP_LAMBDA, not
  a power of two) and `main-l1-lambda0` / `main-l2-lambda0` (lambda 0).

The child (oracles/loops.py) runs the reference's loop on stand-in
engines and records a tape; our side (`run_ours`) runs the same loop with
esverify.es: the reference's seed schedule (`Config.seed_schedule`, the
30-bit seeds of numpy's default_rng; under contract noise each seed IS the
member seed, so the hook's table maps every drawn seed to itself), one
replica of theta per engine with the members assigned to engines exactly
as the reference groups them (a regenerate-restore is exact only up to
`(x + t) - t`, so which engine a member ran on shows in the bits), the
reward aggregation of esverify.es.schedule, and the update on replica 0
followed by the broadcast. es-at-scale's `fit` performs num_iterations + 1
updates (REFERENCES.md §5): ours does the same under that loop and the
report states it as a finding (`FINDINGS`).

`compare_tapes` walks both tapes in time order and names the first
quantity that differs ("iteration 2: coefficient of member 4: ours ...,
theirs ..."): per iteration the members evaluated (seed and sign), every
reward (f64 bits), es-at-scale's aggregated rewards and the mean/std
handed to z_score, the seeds, coefficients (f64 bits), alpha and divisor
handed to the update, the parameters after it (bit patterns, every slot),
es-awd's own iteration_updates/iteration_NNNNNN.json records; then the
number of updates, the final parameters and the state_dict saved with
torch.save.
"""
from __future__ import annotations

import re
import time

import numpy as np
import torch

from .. import bits
from ..es import Config, Trainer, shape_rewards
from ..es.schedule import (DEFAULT_GLOBAL_SEED, FIRST_ITERATION, SEED_BOUND, batch_weighted_mean, duplicate_seeds,
                           mean_reward)
from . import compare as _compare
from . import paramsets
from .cases import Case
from .ours import reward

FIT_ENGINES = 2
MAIN_ENGINES = 4
#: es-at-scale data: one dataloader batch of 5 prompts per iteration, mini-batches of 2, 2 and 1
FIT_DATA = (0.01, -0.02, 0.03, 0.0, -0.005)
FIT_MINI_BATCH = 2
MAIN_DATA = (0.01, -0.01, 0.02)
#: es-awd decay strength of the loop rows: alpha * lambda = 1.5e-4 at the default alpha, the size of a
#: loop update, so l1 zeroes part of the deltas; 0.3 is not a power of two
LOOP_LAMBDA = 0.3
MAIN_VARIANTS = {   # op -> (mirror_sampling, caching, decay type, lambda)
    "main": (False, False, "none", 0.0),
    "main-mirror": (True, False, "none", 0.0),
    "main-caching": (False, True, "none", 0.0),
    "main-l1": (False, False, "l1", LOOP_LAMBDA),
    "main-l2": (False, False, "l2", LOOP_LAMBDA),
    "main-l1-lambda0": (False, False, "l1", 0.0),
    "main-l2-lambda0": (False, False, "l2", 0.0),
}
LOOP_OPS = ("fit", *MAIN_VARIANTS)
#: what REFERENCES.md §5 (and §1, §2) say a loop reaches, per target and file
REACHED = {
    "es-at-scale": {"es_at_scale/trainer/es_trainer.py": ["EvolutionStrategiesTrainer.fit",
                                                          "EvolutionStrategiesTrainer.train_step",
                                                          "EvolutionStrategiesTrainer.evaluate_population_on_batch"],
                    "es_at_scale/utils/worker_extension.py": ["WorkerExtension.perturb_self_weights",
                                                              "WorkerExtension.restore_self_weights",
                                                              "WorkerExtension.update_weights_from_seeds"],
                    "es_at_scale/utils/reward_shaping.py": ["z_score"]},
    "es-awd": {"es.py": ["main"],
               "distributed_utils.py": ["WorkerExtension.update_weights_from_seeds",
                                        "WorkerExtension.snapshot_weights_to_cpu",
                                        "WorkerExtension.write_weights_to_disk"],
               "weight_update_utils.py": ["generate_noise", "apply_seeded_noise_to_parameters",
                                          "update_parameters_from_seeds", "apply_reference_weight_decay_"]},
}
FINDINGS = {
    "fit-extra-update": ("es-at-scale", "EvolutionStrategiesTrainer.fit performs num_iterations + 1 updates "
                                        "(REFERENCES.md §5): its counter is tested after the increment; our side "
                                        "reproduces it under the es-at-scale loop so that the rows compare like "
                                        "with like"),
}


# ----------------------------------------------------------------- cases

def loop_cases(target, device, dtype, scheme, population, sigma, alpha, iterations, noise="contract") -> list:
    """The loop rows of one (target, device, dtype set, scheme); small parameter sets only."""
    tag = "" if noise == "contract" else noise
    extra = {"iterations": iterations, "noise": noise}
    if target == "es-at-scale":
        n = population if population % FIT_ENGINES else population + 1   # not a multiple of the engines
        return [Case(target, device, dtype, scheme, "fit", n, sigma, alpha, False, dict(extra), tag=tag)]
    cases = []
    for op, (mirror, _, _, _) in MAIN_VARIANTS.items():
        n = population + population % 2 if mirror else population
        cases.append(Case(target, device, dtype, scheme, op, n, sigma, alpha, False, dict(extra), tag=tag))
    return cases


# ----------------------------------------------------------------- our side

def _hexs(seed: int) -> str:
    return f"0x{seed:016x}"


class _Replicas:
    """One trainer per engine, each on its own copy of theta (ES.md §1: member-parallel replicas)."""

    def __init__(self, names, tensors, config, backend, engines):
        self.tensors = [[t.clone() for t in tensors] for _ in range(engines)]
        # replica 0 is built on the initial weights: with decay on, that is the anchor (ES.md §6)
        self.trainers = [Trainer(list(zip(names, ts)), config, backend=backend) for ts in self.tensors]

    def sync_iteration(self):
        for trainer in self.trainers[1:]:
            trainer.iteration = self.trainers[0].iteration

    def broadcast(self):
        with torch.no_grad():
            for replica in self.tensors[1:]:
                for mine, source in zip(replica, self.tensors[0]):
                    mine.copy_(source)


def _evaluate(replicas, members, targets, engines):
    """Perturb each member on its engine, score every target, restore; members: trainer member ids."""
    records = []
    for start in range(0, len(members), engines):
        group = members[start:start + engines]
        for j, m in enumerate(group):
            replicas.trainers[j].perturb(m)
        for j, m in enumerate(group):
            records.append({"member": m, "engine": j, "rewards": [reward(replicas.tensors[j], t) for t in targets]})
        for j, m in enumerate(group):
            replicas.trainers[j].restore(m)
    return records


def run_ours(case: Case, names, tensors, seed: int, mapping: str, backend) -> dict:
    """Run the loop of `case` with esverify.es on copies of `tensors`; returns our tape (see compare_tapes)."""
    iterations = int(case.extra.get("iterations", 3))
    if case.op == "fit":
        mirror, caching, decay, lam = False, False, "none", 0.0
        engines, schedule, updates = FIT_ENGINES, "es-at-scale", iterations + 1   # the fit quirk, reproduced
        shaping = "zscore"
    else:
        mirror, caching, decay, lam = MAIN_VARIANTS[case.op]
        engines, schedule, updates = MAIN_ENGINES, "es-awd", iterations
        shaping = "none"   # es-awd's loop shapes over the evaluation order itself (below)
    config = Config(sigma=case.sigma, alpha=case.alpha, population=case.population, antithetic=mirror,
                    scheme=case.scheme, mapping=mapping, profile=case.target, seed=seed, shaping=shaping,
                    anchor_decay=decay, anchor_lambda=lam, seed_schedule=schedule)
    replicas = _Replicas(names, tensors, config, backend, engines)
    lead = replicas.trainers[0]
    n = case.population
    tape = {"iterations": [], "updates": 0}
    for _ in range(updates):
        replicas.sync_iteration()
        if case.op == "fit":
            seeds = [lead.member_seed(m) for m in range(n)]
            evaluations, per_member = [], {m: [] for m in range(n)}
            for start in range(0, len(FIT_DATA), FIT_MINI_BATCH):
                batch = FIT_DATA[start:start + FIT_MINI_BATCH]
                for rec in _evaluate(replicas, list(range(n)), batch, engines):
                    evaluations.append(rec)
                    per_member[rec["member"]].append(rec["rewards"])
            rewards = [batch_weighted_mean(per_member[m]) for m in range(n)]
            stats = lead.update(rewards)
            zscore = {"avg_rewards": rewards, "mean": stats["mean"], "std": stats["std"]}
            update_seeds = seeds
        else:
            order = list(range(0, n, 2)) + list(range(1, n, 2)) if mirror else list(range(n))
            update_seeds = [lead.member_seed(m) for m in (range(0, n, 2) if mirror else range(n))]
            evaluations = _evaluate(replicas, order, MAIN_DATA, engines)
            member_rewards = np.array([mean_reward(rec["rewards"]) for rec in evaluations])
            coeffs_eval, _ = shape_rewards(member_rewards, "zscore")   # numpy mean/std in evaluation order
            coeffs = np.empty(n)
            coeffs[order] = coeffs_eval
            stats = lead.update(coeffs)                                 # shaping "none": C_n as computed
            zscore = None
        replicas.broadcast()
        members = [{"seed": lead.member_seed(rec["member"], stats["iteration"]),
                    "negate": bool(mirror and rec["member"] % 2), "engine": rec["engine"], "rewards": rec["rewards"]}
                   for rec in evaluations]
        tape["iterations"].append({
            "members": members, "zscore": zscore,
            "update": {"seeds": update_seeds, "coeffs": [float(c) for c in stats["terms"]], "alpha": case.alpha,
                       "population_size": n,
                       "extra": {} if case.op == "fit" else {"caching": caching, "weight_decay_type": decay,
                                                               "weight_decay_lambda": lam}},
            "params": [t.clone() for t in replicas.tensors[0]]})
        tape["updates"] += 1
    tape["final"] = replicas.tensors[0]
    tape["names"] = list(names)
    return tape


def loop_command(case: Case, tape: dict, seed: int) -> dict:
    """The case fields the child needs: loop settings and the hook table (every drawn seed maps to itself:
    under a numpy seed schedule the 30-bit seed IS the member seed, esverify.es.schedule)."""
    seeds = {s for it in tape["iterations"] for s in it["update"]["seeds"]}
    # the schedule's draws of the neighbouring iterations too, with N and N/2 seeds: an off-by-one schedule
    # or a wrong count is then named as a seed difference instead of stopping at an unknown seed
    base = (int(seed) or DEFAULT_GLOBAL_SEED) + FIRST_ITERATION["es-at-scale" if case.op == "fit" else "es-awd"]
    for b in range(base - 1, base + tape["updates"] + 2):
        for count in {case.population, case.population // 2}:
            seeds.update(int(v) for v in np.random.default_rng(seed=b).integers(0, SEED_BOUND, size=count,
                                                                                    dtype=np.int64))
    command = {"handles": {str(s): _hexs(s) for s in sorted(seeds)}, "iterations": int(case.extra["iterations"]),
               "global_seed": seed, "noise": case.extra.get("noise", "contract"),
               "data": [{"input": f"prompt {k}", "target": t}
                        for k, t in enumerate(FIT_DATA if case.op == "fit" else MAIN_DATA)]}
    if case.op == "fit":
        command.update(op="fit", engines=FIT_ENGINES, batch_size=len(FIT_DATA), mini_batch_size=FIT_MINI_BATCH)
    else:
        mirror, caching, decay, lam = MAIN_VARIANTS[case.op]
        command.update(op="main", engines=MAIN_ENGINES, mirror=mirror, caching=caching, decay=decay,
                       **{"lambda": lam})
    return command


# ----------------------------------------------------------------- comparison

def _f64(value) -> str:
    return bits.describe(int(np.float64(value).view(np.uint64)), "f64")


def _same(a, b) -> bool:
    return np.float64(a).view(np.uint64) == np.float64(b).view(np.uint64)


class Difference(Exception):
    """The first differing quantity; `kind` says which family it belongs to (for the caching artefact)."""

    def __init__(self, message: str, kind: str, cmp=None):
        super().__init__(message)
        self.kind, self.cmp = kind, cmp


def _sign(negate: bool) -> str:
    return "-sigma" if negate else "+sigma"


def _compare_members(label, ours, theirs, member_of):
    # the common prefix first: a missing or extra evaluation is named after what precedes it
    for p, (o, t) in enumerate(zip(ours, theirs)):
        k = member_of(o)
        if (o["seed"], o["negate"]) != (t["seed"], t["negate"]):
            raise Difference(f"{label}: seed of member {k} (evaluation {p}): ours {o['seed']} ({_sign(o['negate'])}), "
                             f"theirs {t['seed']} ({_sign(t['negate'])})", "seeds")
        if o["engine"] != t["engine"]:
            raise Difference(f"{label}: member {k} (evaluation {p}) ran on engine {t['engine']} in theirs, "
                             f"{o['engine']} in ours", "seeds")
        if len(o["rewards"]) != len(t["rewards"]):
            raise Difference(f"{label}: member {k} (evaluation {p}) was scored on {len(t['rewards'])} prompts "
                             f"by theirs, {len(o['rewards'])} by ours", "seeds")
        for q, (a, b) in enumerate(zip(o["rewards"], t["rewards"])):
            if not _same(a, b):
                raise Difference(f"{label}: reward of member {k} (seed {o['seed']}, {_sign(o['negate'])}, "
                                 f"evaluation {p}, prompt {q}): ours {_f64(a)}, theirs {_f64(b)}", "values")
    if len(ours) != len(theirs):
        raise Difference(f"{label}: ours evaluated {len(ours)} members, theirs {len(theirs)}", "seeds")


def _compare_update(label, o, t, index):
    if o["seeds"] != t["seeds"]:
        if len(o["seeds"]) != len(t["seeds"]):
            raise Difference(f"{label}: the update got {len(t['seeds'])} seeds from theirs, {len(o['seeds'])} "
                             "from ours", "seeds")
        k = next(k for k, (a, b) in enumerate(zip(o["seeds"], t["seeds"])) if a != b)
        raise Difference(f"{label}: seed of member {k} handed to the update: ours {o['seeds'][k]}, "
                         f"theirs {t['seeds'][k]}", "seeds")
    if len(o["coeffs"]) != len(t["coeffs"]):
        raise Difference(f"{label}: the update got {len(t['coeffs'])} coefficients from theirs, "
                         f"{len(o['coeffs'])} from ours", "seeds")
    for k, (a, b) in enumerate(zip(o["coeffs"], t["coeffs"])):
        if not _same(a, b):
            raise Difference(f"{label}: coefficient of member {k}: ours {_f64(a)}, theirs {_f64(b)}", "values")
    if not _same(o["alpha"], t["alpha"]):
        raise Difference(f"{label}: alpha handed to the update: ours {o['alpha']!r}, theirs {t['alpha']!r}", "args")
    if o["population_size"] != t["population_size"]:
        raise Difference(f"{label}: divisor (population_size) handed to the update: ours {o['population_size']}, "
                         f"theirs {t['population_size']}", "args")
    for key, value in o["extra"].items():
        if key in t["extra"] and t["extra"][key] != value:
            raise Difference(f"{label}: {key} handed to the update: ours {value!r}, theirs {t['extra'][key]!r}",
                             "args")


def _compare_params(label, ours_tensors, theirs_path, names):
    _, theirs, dtypes = paramsets.read(theirs_path)
    cmp = _compare.compare(ours_tensors, theirs, dtypes, names)
    if cmp.layout_error:
        raise Difference(f"{label}: layout differs: {cmp.layout_error}", "layout", cmp)
    if cmp.mismatches:
        raise Difference(f"{label}: {cmp.mismatches} of {cmp.elements} elements differ (slots "
                         f"{', '.join(cmp.mismatched_slots)}), first at {cmp.first_index}: ours {cmp.first_ours}, "
                         f"theirs {cmp.first_theirs}, max {cmp.max_ulp_diff} ulp", "values", cmp)
    return cmp


def _compare_record(label, number, update, record):
    if "error" in record:
        raise Difference(f"{label}: its record {record['file']} is unreadable: {record['error']}", "records")
    rec = record["record"]
    if rec.get("iteration") != number:
        raise Difference(f"{label}: its record {record['file']} names iteration {rec.get('iteration')!r}",
                         "records")
    if [int(s) for s in rec.get("seeds", [])] != update["seeds"]:
        raise Difference(f"{label}: seeds in its record {record['file']}: ours {update['seeds']}, "
                         f"theirs {rec.get('seeds')}", "seeds")
    coeffs = rec.get("update_coefficients", [])
    if len(coeffs) != len(update["coeffs"]):
        raise Difference(f"{label}: its record {record['file']} holds {len(coeffs)} coefficients, ours "
                         f"{len(update['coeffs'])}", "records")
    for k, (a, b) in enumerate(zip(update["coeffs"], coeffs)):
        if not _same(a, b):
            raise Difference(f"{label}: coefficient of member {k} in its record {record['file']}: ours {_f64(a)}, "
                             f"theirs {_f64(b)}", "values")


def compare_tapes(case: Case, ours: dict, theirs: dict, final_path: str):
    """(Comparison of the final parameters, first Difference or None) for one loop case."""
    names = ours["names"]
    first_number = 0 if case.op == "fit" else 1
    records = theirs.get("records")
    theirs_iterations = [it for it in theirs["iterations"] if it.get("update")]
    try:
        for i, (o, t) in enumerate(zip(ours["iterations"], theirs_iterations)):
            number = first_number + i
            label = f"iteration {number}"
            member_of = _member_index(o)
            _compare_members(label, o["members"], t["members"], member_of)
            if o["zscore"] is not None:
                z = t.get("zscore")
                if z is None:
                    raise Difference(f"{label}: theirs never called z_score", "args")
                for k, (a, b) in enumerate(zip(o["zscore"]["avg_rewards"], z["avg_rewards"])):
                    if not _same(a, b):
                        raise Difference(f"{label}: aggregated reward of member {k} (seed {o['update']['seeds'][k]}): "
                                         f"ours {_f64(a)}, theirs {_f64(b)}", "values")
                if len(z["avg_rewards"]) != len(o["zscore"]["avg_rewards"]):
                    raise Difference(f"{label}: z_score got {len(z['avg_rewards'])} members from theirs, "
                                     f"{len(o['zscore']['avg_rewards'])} from ours", "seeds")
                for key in ("mean", "std"):
                    if not _same(o["zscore"][key], z[key]):
                        raise Difference(f"{label}: {key}_reward handed to z_score: ours {_f64(o['zscore'][key])}, "
                                         f"theirs {_f64(z[key])}", "values")
            _compare_update(label, o["update"], t["update"], i)
            if records is not None:   # written before the update; compared after it, so a wrong
                if i >= len(records):  # coefficient is named as what the update got
                    raise Difference(f"{label}: theirs wrote no iteration_updates/iteration_{number:06d}.json "
                                     "before its update", "records")
                _compare_record(label, number, o["update"], records[i])
            _compare_params(f"{label}: parameters after the update", o["params"], t["update"]["params"], names)
        if ours["updates"] != theirs["updates"]:
            raise Difference(f"number of updates: ours {ours['updates']}, theirs {theirs['updates']} "
                             f"(num_iterations {case.extra['iterations']})", "count")
        if records is not None and len(records) != ours["updates"]:
            raise Difference(f"iteration records: theirs wrote {len(records)} iteration_updates files, "
                             f"ours {ours['updates']}", "records")
        cmp = _compare_params("final parameters of engine 0", ours["final"], final_path, names)
        saved = theirs.get("saved", [])
        if case.op != "fit" and not saved:
            raise Difference("final state_dict: theirs saved none with torch.save", "records")
        for entry in saved:
            label = f"final state_dict {entry['path'].rsplit('/', 1)[-1]}"
            if "error" in entry:
                raise Difference(f"{label}: unreadable with torch.load: {entry['error']}", "records")
            if entry["names"] != names:
                raise Difference(f"{label}: names {entry['names']}, ours {names}", "layout")
            _compare_params(label, ours["final"], entry["results"], names)
        return cmp, None
    except Difference as diff:
        return diff.cmp, diff


def _member_index(iteration: dict):
    seeds = iteration["update"]["seeds"]
    where = {s: k for k, s in reversed(list(enumerate(seeds)))}
    return lambda rec: where.get(rec["seed"], "?")


# ----------------------------------------------------------------- the runner's row

def run_case(runner, t, case: Case) -> dict:
    """One loop row: our loop, the reference's loop in the child, the comparison (runner._run_case's job)."""
    from . import runner as _runner   # the runner imports this module: import back at call time
    from .child import ChildDied, ChildTimeout
    opts = runner.opts
    if not t.ensure_child():
        return _runner._row(case, status="error", detail=f"the child could not be restarted: {t.start_error}")
    if case.extra.get("noise", "contract") != "contract":
        return _runner._row(case, status="error", detail=f"{case.op}: noise {case.extra['noise']!r} is not wired "
                                                           "into the loop rows yet (contract noise only)")
    from ..rng import default_backend
    env = t.hello["environment"] if t.hello else {}
    backend = child_backend = default_backend(case.device)
    if case.device == "cpu" and backend not in (env.get("noise_backends") or {}).get("cpu", []):
        child_backend = None
    dtype = case.dtype
    names, tensors = runner.fresh(dtype, False, "base", case.device)
    clock = runner.timing.setdefault(case.target, {"ours_s": 0.0, "reference_s": 0.0})
    started = time.perf_counter()
    try:
        ours = run_ours(case, names, tensors, opts.seed, opts.mapping, backend)
    except Exception as exc:  # noqa: BLE001 - our side failing is a row, not a crash
        return _runner._row(case, status="error", detail=f"{case.op}: our side raised {type(exc).__name__}: {exc}")
    finally:
        clock["ours_s"] += time.perf_counter() - started
    out = runner.work / "cases" / re.sub(r"[^A-Za-z0-9_.-]+", "_", case.case_id)
    out.mkdir(parents=True, exist_ok=True)
    command = {"case_id": case.case_id, "device": case.device, "scheme": case.scheme, "mapping": opts.mapping,
               "backend": child_backend, "set": str(runner.set_path(dtype, False, "base")), "sigma": case.sigma,
               "alpha": case.alpha, "population": case.population, "out": str(out)}
    command.update(loop_command(case, ours, opts.seed))
    started = time.perf_counter()
    try:
        reply = t.child.request(command, opts.timeout)
    except ChildTimeout:
        return _runner._row(case, status="error", detail=f"timeout: {case.op} did not finish within "
                                                          f"{opts.timeout:g} s; the child was killed and restarted")
    except ChildDied as exc:
        tail = " | ".join(exc.log_tail.strip().splitlines()[-2:])
        return _runner._row(case, status="error", detail=f"{case.op}: {exc}; restarting it for the next case"
                                                          + (f"; child log: {tail}" if tail else ""))
    finally:
        clock["reference_s"] += time.perf_counter() - started
    if reply.get("status") != "ok":
        err = reply.get("error") or {}
        return _runner._row(case, status="error", detail=f"{case.op}: the reference side raised {err.get('message')}")
    theirs = reply["tape"]
    cmp, diff = compare_tapes(case, ours, theirs, reply["results"])
    fields = cmp.fields() if cmp is not None else {}
    attribution = reply.get("attribution", {"ok": True})
    notes = []
    reused = _runner.reused_slots(names, tensors) if case.op == "main-caching" and case.scheme == "iid" else []
    if case.op == "fit":
        record_finding(runner, "fit-extra-update", case, theirs["updates"], int(case.extra["iterations"]))
    if not attribution.get("ok", True) and case.scheme == "iid":
        status = "unverifiable"
        notes.append(f"{case.op}: {attribution.get('detail')}: iid noise could not be attributed to slots")
    elif diff is not None and reused and diff.kind in ("values", "records"):
        status = "artifact"
        notes += [_runner.CACHING_ARTIFACT + f"; slots reusing noise: {', '.join(reused)}", f"{case.op}: {diff}"]
    elif diff is not None:
        status = "fail"
        notes.append(f"{case.op}: {diff}")
    else:
        status = "pass"
    if not attribution.get("ok", True) and case.scheme != "iid":
        notes.append(f"note: {attribution.get('detail')} (harmless under correlated: the noise does not "
                     "depend on the slot)")
    for i, it in enumerate(ours["iterations"]):
        repeated = duplicate_seeds(it["update"]["seeds"])
        if repeated and case.op == "fit":   # es-at-scale keys members by seed value (REFERENCES.md §5)
            notes.append(f"note: iteration {i} drew equal seeds {sorted(repeated)}: es-at-scale's loop merges "
                         "them into one member (a quirk of the reference)")
    if status == "fail" and opts.keep_tensors:
        ours_path = paramsets.write(out / "ours.npz", names, ours["final"])
        runner.kept.append((case.case_id, ours_path, reply["results"]))   # engine 0's final parameters
    row = _runner._row(case, status=status, detail="; ".join(notes), **fields)
    row["eager"] = not attribution.get("ok", True)
    return row


def record_finding(runner, key: str, case: Case, theirs_updates: int, iterations: int):
    """Note what a loop row showed about a documented reference quirk (kept on the runner)."""
    findings = runner.__dict__.setdefault("loop_findings", {})
    entry = findings.setdefault(key, {"target": FINDINGS[key][0], "finding": key, "description": FINDINGS[key][1],
                                      "observed": [], "rows": 0})
    entry["rows"] += 1
    seen = f"{theirs_updates} updates for num_iterations {iterations}"
    if seen not in entry["observed"]:
        entry["observed"].append(seen)


# ----------------------------------------------------------------- report sections

def read_coverage(work, target: str) -> dict:
    """The child's cumulative coverage of the clone ({"files": ..., "error": ...}; see oracles/loops.py)."""
    import json
    from pathlib import Path
    path = Path(work) / f"coverage-{target}.json"
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {"files": {}, "error": "no coverage data: the child saved none"}
    return {"files": data.get("files", {}), "error": data.get("error", "")}


def _coverage_frame(environments: dict):
    import pandas as pd
    rows, summary = [], {}
    for target, env in environments.items():
        cov = (env or {}).get("coverage") or {"files": {}, "error": "no coverage data: the child did not start"}
        reached = REACHED.get(target, {})
        total = ran = 0
        for rel, info in sorted(cov.get("files", {}).items()):
            for name, did in info["functions"].items():
                rows.append({"target": target, "file": rel, "function": name, "ran": bool(did),
                             "reached_by_loop": name in reached.get(rel, [])})
                total += 1
                ran += bool(did)
        missing = [f"{rel}: {name}" for rel, names in reached.items() for name in names
                   if not cov.get("files", {}).get(rel, {}).get("functions", {}).get(name, False)]
        summary[target] = {"files": sorted(cov.get("files", {})), "functions": total, "functions_ran": ran,
                           "percent": round(100.0 * ran / total, 1) if total else None,
                           "reached_not_run": missing, "error": cov.get("error", "")}
    frame = pd.DataFrame(rows, columns=["target", "file", "function", "ran", "reached_by_loop"])
    return frame, summary


def _not_checked(runner, wanted, clones, skipped_targets, failed):
    import pandas as pd

    from .cases import AT_SCALE_OPS, AWD_OPS
    from .clones import TARGETS
    ops = {"es-at-scale": ["zscore", *AT_SCALE_OPS, "fit"], "es-awd": [*AWD_OPS, *MAIN_VARIANTS]}
    flags = {"es-at-scale": "--ref PATH (or $ESVERIFY_REF)", "es-awd": "--awd-ref PATH (or $ESVERIFY_AWD_REF)"}
    rows = []
    for name in TARGETS:
        if name in clones:
            if not runner.opts.loops:
                rows.append({"target": name, "not_checked": ", ".join(LOOP_OPS if name == "es-awd" else ["fit"]),
                             "why": "the training-loop rows were left out (--no-loops)"})
            continue
        if name not in wanted:
            why = f"not selected (--target {runner.opts.target})"
        elif name in failed:
            why = f"its clone is unusable: {failed[name]}"
        else:
            found = next((s.split(": ", 1)[1] for s in skipped_targets if s.startswith(f"{name}: ")), "")
            why = f"no clone given: pass {flags[name]}" + (f" ({found})" if found else "")
        rows.append({"target": name, "not_checked": ", ".join(ops[name]), "why": why})
    return pd.DataFrame(rows, columns=["target", "not_checked", "why"])


def report_sections(runner, wanted, clones, skipped_targets, failed, frame, metadata) -> dict:
    """Extra report sections (findings, coverage, not_checked); also fills `metadata` and its warnings."""
    import pandas as pd
    findings = list(runner.__dict__.get("loop_findings", {}).values())
    findings_frame = pd.DataFrame([{**f, "observed": "; ".join(f["observed"])} for f in findings],
                                  columns=["target", "finding", "description", "observed", "rows"])
    coverage_frame, coverage = _coverage_frame(metadata.get("children", {}))
    for env in metadata.get("children", {}).values():
        if isinstance(env, dict):
            env.pop("coverage", None)      # the table is its own section; metadata keeps the summary
    not_checked = _not_checked(runner, wanted, clones, skipped_targets, failed)
    metadata["findings"] = findings_frame.to_dict(orient="records")
    metadata["coverage"] = coverage
    metadata["not_checked"] = not_checked.to_dict(orient="records")
    for target, info in coverage.items():
        if info["error"]:
            metadata["warnings"].append(f"{target}: coverage: {info['error']}")
        for item in info["reached_not_run"]:
            metadata["warnings"].append(f"{target}: coverage: {item} did not run, although REFERENCES.md §5 says "
                                        "a training loop reaches it: a pass does not cover it")
    for row in not_checked.itertuples():
        metadata["warnings"].append(f"{row.target}: not checked ({row.why}): {row.not_checked}")
    return {"findings": findings_frame, "coverage": coverage_frame, "not_checked": not_checked}


def console_lines(extra: dict, console: str) -> str:
    """The runner's console text with findings and coverage lines before its last ("report:") line."""
    lines = console.split("\n")
    added = []
    for f in extra["findings"].itertuples():
        added.append(f"finding ({f.target}): {f.description}; observed: {f.observed}")
    cov = extra["coverage"]
    for target in dict.fromkeys(cov["target"]):
        part = cov[cov["target"] == target]
        loop = part[part["reached_by_loop"]]
        added.append(f"coverage ({target}): {int(part['ran'].sum())} of {len(part)} functions ran "
                     f"({100.0 * part['ran'].mean():.0f}%) in {part['file'].nunique()} files; loop interface: "
                     f"{int(loop['ran'].sum())} of {len(loop)} ran")
    return "\n".join(lines[:-1] + added + lines[-1:])
