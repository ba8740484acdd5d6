"""Oracle driver for an es-at-scale clone (docs/references.md §1), run by path in the child.

Usage (by the runner only): `python driver.py --clone PATH
--reply-fd N`. torch runs on one thread: this profile's separately rounded
elementwise ops do not depend on the thread count, and worker threads
spinning beside the parent's only slow both down. Loads `es_at_scale/utils/worker_extension.py` and
`es_at_scale/utils/reward_shaping.py` by path (a load failure of one only
fails the ops that need it), builds a `WorkerExtension` on the stand-in
model runner and answers the ops perturb, restore, update, zscore,
loop and fit (the reference's own training loop: `op_fit` below, the
`EvolutionStrategiesTrainer` constructor with every parameter by name, then
`fit()`; the seams replaced for the run are the module's `Pool`, `get_ip`,
`get_open_port`, the class's `launch_engines`, and the SIGINT/SIGTERM
handlers the constructor installs, restored right after construction;
oracles/child_loops.py measures coverage of the clone). Every reference call is followed by the draw accounting of
child_server (one draw per slot per seed). Never imported by esverify.
"""
from __future__ import annotations

import sys
from pathlib import Path

from child_server import (HOOK, DrawAudit, ReferenceLoadError, StandInModel, StandInModelRunner,
                          expected_draws, load_module, load_set, load_ties, module_or_raise, reward, save_results,
                          serve)

import numpy as np

import child_loops as loops
import loop_stubs
import torch
from loop_seams import Seams
import loop_errors

loop_errors.claim(Path(__file__).stem)   # its loop op's objects are the driver's side, as in child_loops

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
    # each call's undrawn slots too: a restore may reuse where its perturb did not (loops.CallAudit)
    audit = loops.CallAudit(model.names)
    h = case["member_handle"]
    ext.perturb_self_weights(h, case["sigma"])
    audit.check("perturb_self_weights", expected_draws(tensors, [h]))
    extra = {}
    if case["op"] == "restore":   # the perturbed state, compared too (a slot never perturbed shows there)
        extra["perturbed"] = case["out"] + "/theirs-perturbed.npz"
        save_results(extra["perturbed"], tensors)
        ext.restore_self_weights(h, case["sigma"])
        audit.check("restore_self_weights", expected_draws(tensors, [h]))
    extra["missing"] = audit.per_call
    return _finish(case, tensors, audit, **extra)


def op_update(case, modules):
    ext, model, tensors = _setup(case, modules)
    audit = DrawAudit(model.names)
    ext.update_weights_from_seeds(case["seeds"], loops.exact(case, "coeffs"), case["alpha"], case["population"])
    audit.check("update_weights_from_seeds", expected_draws(tensors, case["seeds"]))
    return _finish(case, tensors, audit)


def op_zscore(case, modules):
    shaping = module_or_raise(modules, "reward_shaping")
    perf = {h: {"avg_reward": r} for h, r in zip(case["seeds"], loops.exact(case, "rewards"))}
    out = shaping.z_score(perf, loops.exact(case, "mean", single=True), loops.exact(case, "std", single=True))
    values = np.array([out[h]["norm_reward"] for h in case["seeds"]], dtype=np.float64)
    np.savez(case["out"] + "/theirs.npz", slot0=values.view(np.uint64), dtypes=np.array(["f64"]))
    return {"results": case["out"] + "/theirs.npz", "attribution": {"ok": True, "calls": []}}


def op_loop(case, modules):
    ext, model, tensors = _setup(case, modules)
    # every call's undrawn slots, in call order (per iteration: each member's perturb and restore, then the
    # update): our side replays a reuse call by call
    audit = loops.CallAudit(model.names)
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
    return _finish(case, tensors, audit, rewards=rewards, missing=audit.per_call)


def reward_pair(response_text, target, *args, **kwargs):
    """es-at-scale's reward function contract (docs/references.md §5.1): (label, reward); the response
    text is the repr of the f64 reward the engine computed, so float() recovers it exactly."""
    return ("stand-in", float(response_text))


def template(prompt):
    """es-at-scale's template function: the prompt unchanged (its <target=...> mark must survive)."""
    return prompt


# ----------------------------------------------------------------- es-at-scale: fit

TRAINER = "es_at_scale/trainer/es_trainer.py"
WORKER = "es_at_scale/utils/worker_extension.py"
#: eval_step after an iteration only when (i + 1) % eval_freq == 0: never, within a parity row (the
#: eval_step(0) that fit runs first still reaches the evaluation path)
FIT_EVAL_FREQ = 10 ** 9


def op_fit(case, modules):
    trainer_mod = loops.load_lazily(modules, "es_trainer", "es_at_scale.trainer.es_trainer", TRAINER)
    worker_mod = loops.load_lazily(modules, "loop_worker", "es_at_scale.utils.worker_extension", WORKER)
    out = Path(case["out"])
    logs = loops.fresh_logs(out)
    tape = loops.Tape(out, case)
    inputs, targets = loops.prompts(case["data"])
    size = case["batch_size"]
    loader = [(inputs[k:k + size], targets[k:k + size]) for k in range(0, len(inputs), size)]
    eval_inputs, eval_targets = loops.prompts(case.get("eval_data") or [])
    evals = {"stand-in": [(eval_inputs, eval_targets)]} if eval_inputs else {}
    cls = trainer_mod.EvolutionStrategiesTrainer

    # the precision the reference launches with: what its call passes, else its own launch_engines' default
    own = loops.default_of(cls.launch_engines, "precision")
    launched = {}

    def launch_engines(self, num_engines=4, n_gpu_per_vllm_engine=1, model_name=None, precision=own, **kwargs):
        if not launched:
            launched["engines"] = loops.engines(case, worker_mod.WorkerExtension, tape, case["engines"], precision)
        return launched["engines"][:int(num_engines)], []

    shaping = sys.modules.get("es_at_scale.utils.reward_shaping")
    settings = {}
    with Seams() as seams:
        before = seams.settings()
        seams.set(trainer_mod, "Pool", loop_stubs.Pool)
        seams.set(trainer_mod, "get_ip", lambda *a, **k: "127.0.0.1")
        seams.set(trainer_mod, "get_open_port", lambda *a, **k: 29500)
        seams.set(cls, "launch_engines", launch_engines)
        seams.set(torch, "save", tape.recording_save)
        for owner in (trainer_mod, shaping):
            if owner is not None and hasattr(owner, "z_score"):
                seams.set(owner, "z_score", tape.wrap_zscore(owner.z_score))
        with loops.Noise(case):
            trainer = loops.run_op("fit", lambda: cls(
                model_name="stand-in", checkpoint=None, sigma=case["sigma"], alpha=case["alpha"],
                population_size=case["population"], reward_shaping="z-scores", num_iterations=case["iterations"],
                max_tokens=16, batch_size=size, mini_batch_size=case["mini_batch_size"], reward_function=reward_pair,
                template_function=template, train_dataloader=loader, eval_dataloader_dict=evals,
                eval_freq=FIT_EVAL_FREQ, n_vllm_engines=case["engines"], n_gpu_per_vllm_engine=1, logging="none",
                use_gpus="", global_seed=case["global_seed"], output_directory=str(out),
                save_best_models=False, experiment_name=logs.name, wandb_project=None, reward_function_timeout=60),
                callee=cls)
            seams.restore_signals()   # its handlers would exit the child on SIGINT/SIGTERM (docs/references.md §5.1)
            settings = loops.reference_settings(seams, before)
            loops.run_op("fit", trainer.fit, callee=cls.fit)
    if not launched:
        raise RuntimeError("fit never called launch_engines: no engine ran")
    reply = tape.finish(launched["engines"])
    reply["settings"] = settings
    return reply


if __name__ == "__main__":
    serve("es-at-scale", load_modules, loops.with_coverage(
        {"perturb": op_perturb, "restore": op_perturb, "update": op_update, "zscore": op_zscore, "loop": op_loop,
         "fit": op_fit}), threads=1)
