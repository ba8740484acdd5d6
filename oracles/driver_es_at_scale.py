"""Oracle driver for an es-at-scale clone (docs/references.md §1), run by path in the child.

Usage (by the runner only): `python driver_es_at_scale.py --clone PATH
--reply-fd N`. torch runs on one thread: this profile's separately rounded
elementwise ops do not depend on the thread count, and worker threads
spinning beside the parent's only slow both down. Loads `es_at_scale/utils/worker_extension.py` and
`es_at_scale/utils/reward_shaping.py` by path (a load failure of one only
fails the ops that need it), builds a `WorkerExtension` on the stand-in
model runner and answers the ops perturb, restore, update, zscore,
loop and fit (the reference's own training loop, oracles/child_loops.py, which
also measures coverage of the clone). Every reference call is followed by the draw accounting of
child_server (one draw per slot per seed). Never imported by esverify.
"""
from __future__ import annotations

from child_server import (HOOK, DrawAudit, ReferenceLoadError, StandInModel, StandInModelRunner,
                          expected_draws, load_module, load_set, load_ties, module_or_raise, reward, save_results,
                          serve)

import numpy as np

import child_loops as loops

WORKER = "es_at_scale/utils/worker_extension.py"
SHAPING = "es_at_scale/utils/reward_shaping.py"


def load_modules(clone):
    loops.start(clone, "es-at-scale")   # coverage and the stand-in modules first (docs/references.md §5)
    modules = {}
    for key, rel in (("worker_extension", WORKER), ("reward_shaping", SHAPING)):
        try:
            modules[key] = load_module(clone, rel, f"esverify_oracle_ref_{key}")
        except ReferenceLoadError as exc:
            modules[key] = exc
    return modules


def _setup(case, modules):
    worker = module_or_raise(modules, "worker_extension")
    names, tensors = load_set(case["set"], case["device"])
    model = StandInModel(names, tensors, load_ties(case["set"]))
    ext = worker.WorkerExtension()
    ext.model_runner = StandInModelRunner(model)
    table = {int(h): int(s, 16) for h, s in case["handles"].items()}
    HOOK.configure(model, table, case["scheme"], case["mapping"], case["backend"], case.get("noise", "contract"))
    return ext, model, model.tensors     # the Parameters the module holds (a reference may rebind .data)


def _finish(case, tensors, audit, **extra):
    save_results(case["out"] + "/theirs.npz", tensors)
    return {"results": case["out"] + "/theirs.npz", "attribution": audit.result(), **extra}


def op_perturb(case, modules):
    ext, model, tensors = _setup(case, modules)
    audit = DrawAudit(model.names)
    h = case["member_handle"]
    ext.perturb_self_weights(h, case["sigma"])
    audit.check("perturb_self_weights", expected_draws(tensors, [h]))
    extra = {}
    if case["op"] == "restore":   # the perturbed state, compared too (a slot never perturbed shows there)
        extra["perturbed"] = case["out"] + "/theirs-perturbed.npz"
        save_results(extra["perturbed"], tensors)
        ext.restore_self_weights(h, case["sigma"])
        audit.check("restore_self_weights", expected_draws(tensors, [h]))
    return _finish(case, tensors, audit, **extra)


def op_update(case, modules):
    ext, model, tensors = _setup(case, modules)
    audit = DrawAudit(model.names)
    ext.update_weights_from_seeds(case["seeds"], case["coeffs"], case["alpha"], case["population"])
    audit.check("update_weights_from_seeds", expected_draws(tensors, case["seeds"]))
    return _finish(case, tensors, audit)


def op_zscore(case, modules):
    shaping = module_or_raise(modules, "reward_shaping")
    perf = {h: {"avg_reward": r} for h, r in zip(case["seeds"], case["rewards"])}
    out = shaping.z_score(perf, case["mean"], case["std"])
    values = np.array([out[h]["norm_reward"] for h in case["seeds"]], dtype=np.float64)
    np.savez(case["out"] + "/theirs.npz", slot0=values.view(np.uint64), dtypes=np.array(["f64"]))
    return {"results": case["out"] + "/theirs.npz", "attribution": {"ok": True, "calls": []}}


def op_loop(case, modules):
    ext, model, tensors = _setup(case, modules)
    audit = DrawAudit(model.names)
    rewards = []
    for it in case["iterations"]:
        HOOK.table = {int(h): int(s, 16) for h, s in it["handles"].items()}
        row = []
        for h in it["seeds"]:
            ext.perturb_self_weights(h, case["sigma"])
            audit.check(f"iteration {it['index']} perturb_self_weights", expected_draws(tensors, [h]))
            row.append(reward(tensors, case["reward_target"]))
            ext.restore_self_weights(h, case["sigma"])
            audit.check(f"iteration {it['index']} restore_self_weights", expected_draws(tensors, [h]))
        rewards.append(row)
        ext.update_weights_from_seeds(it["seeds"], it["coeffs"], case["alpha"], case["population"])
        audit.check(f"iteration {it['index']} update_weights_from_seeds", expected_draws(tensors, it["seeds"]))
    return _finish(case, tensors, audit, rewards=rewards)


if __name__ == "__main__":
    serve("es-at-scale", load_modules, loops.with_coverage(
        {"perturb": op_perturb, "restore": op_perturb, "update": op_update, "zscore": op_zscore, "loop": op_loop,
         "fit": loops.op_fit}), threads=1)
