"""Oracle driver for an es-awd clone (docs/references.md §2), run by path in the child.

Usage (by the runner only): `python driver.py --clone PATH
--reply-fd N`. torch runs on ONE thread (docs/numerics.md §3, rule `cpu`: the
reference's bits depend on the thread count). Loads `weight_update_utils.py`
by path and answers perturb, restore, update (decay none/l1/l2, caching,
mirrored: all the same reference call with different arguments) and decay
(the decay alone), and main (`es.main`, the reference's own training loop:
`op_main` below: `parse_args()` on a command line set in `sys.argv`, then `main(args)`, with `launch_engines`,
`cleanup`, `get_data` and `evaluate_reward` as module globals of ours, and its iteration_updates/*.json records
added to the tape; oracles/child_loops.py measures coverage of the clone). Parameters are passed as the stand-in model's lazy
`parameters()` generator; the anchor as a plain generator that does not
move the slot. Never imported by esverify.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

from child_server import (HOOK, DrawAudit, ReferenceLoadError, StandInModel, expected_draws, load_module,
                          load_set, load_ties, module_or_raise, save_results, serve)

import child_loops as loops
import loop_stubs
import torch
from loop_errors import Supplied
from loop_seams import Seams
import loop_errors

loop_errors.claim(Path(__file__).stem)   # its loop op's objects are the driver's side, as in child_loops

UTILS = "weight_update_utils.py"


def load_modules(clone):
    # main's parse_args switches torch.use_deterministic_algorithms on (docs/references.md §5.2): within
    # the row's Seams, a function with torch's effects that does not import the compiler stack (1.2-1.4 s
    # of CPU) the way torch's own does (oracles/loop_seams.py)
    loops.start(clone, "es-awd")   # coverage and the stand-in modules first (docs/references.md §5)
    try:
        return {"weight_update_utils": load_module(clone, UTILS, "esverify_oracle_ref_weight_update_utils")}
    except ReferenceLoadError as exc:
        return {"weight_update_utils": exc}


def _setup(case, modules):
    utils = module_or_raise(modules, "weight_update_utils")
    names, tensors = load_set(case["set"], case["device"])
    model = StandInModel(names, tensors, load_ties(case["set"]))
    tensors = model.tensors     # the Parameters the module holds
    table = {int(h): int(s, 16) for h, s in case["handles"].items()}
    HOOK.configure(model, table, case["scheme"], case["mapping"], case["backend"], case.get("noise", "contract"))
    anchor = load_set(case["anchor_set"], case["device"])[1] if case.get("anchor_set") else None
    return utils, model, tensors, anchor


def _finish(case, tensors, audit, **extra):
    save_results(case["out"] + "/theirs.npz", tensors)
    return {"results": case["out"] + "/theirs.npz", "attribution": audit.result(), **extra}


def op_perturb(case, modules):
    utils, model, tensors, _ = _setup(case, modules)
    # each call's undrawn slots too: a restore may reuse where its perturb did not (loops.CallAudit)
    audit = loops.CallAudit(model.names)
    h, caching = case["member_handle"], case.get("caching", False)
    utils.apply_seeded_noise_to_parameters(model.parameters(), h, case["sigma"], caching=caching)
    audit.check("apply_seeded_noise_to_parameters(+sigma)", expected_draws(tensors, [h]))
    extra = {}
    if case["op"] == "restore":   # the perturbed state, compared too (a slot never perturbed shows there)
        extra["perturbed"] = case["out"] + "/theirs-perturbed.npz"
        save_results(extra["perturbed"], tensors)
        utils.apply_seeded_noise_to_parameters(model.parameters(), h, -case["sigma"], caching=caching)
        audit.check("apply_seeded_noise_to_parameters(-sigma)", expected_draws(tensors, [h]))
    extra["missing"] = audit.per_call
    return _finish(case, tensors, audit, **extra)


def op_update(case, modules):
    utils, model, tensors, anchor = _setup(case, modules)
    audit = DrawAudit(model.names)
    caching = case.get("caching", False)
    utils.update_parameters_from_seeds(
        model.parameters(), case["seeds"], loops.exact(case, "coeffs"), case["alpha"], case["population"],
        caching=caching, original_parameters=(t for t in anchor) if anchor is not None else None,
        weight_decay_type=case.get("decay", "none"), weight_decay_lambda=case.get("lambda", 0.0))
    audit.check("update_parameters_from_seeds", expected_draws(tensors, case["seeds"]))
    return _finish(case, tensors, audit)


def op_decay(case, modules):
    utils, model, tensors, anchor = _setup(case, modules)
    audit = DrawAudit(model.names)
    for param, ref in zip(model.parameters(), anchor):
        utils.apply_reference_weight_decay_(param, ref, case["decay"], case["lambda"], case["alpha"])
    audit.check("apply_reference_weight_decay_", expected_draws(tensors, []))
    return _finish(case, tensors, audit)


def evaluate_reward(output_text, data, *args, **kwargs):
    """es-awd's task reward (docs/references.md §5.2): (r, response) with r["reward"] a float."""
    value = float(output_text)
    return Supplied(reward=value, reward_info=Supplied(format_reward=1.0, answer_reward=value)), output_text


# ----------------------------------------------------------------- es-awd: main

ES = "es.py"
PRECISION = {"f32": "float32", "f16": "float16", "bf16": "bfloat16"}


def main_argv(case, experiment_dir: Path, run_name: str) -> list:
    """The command line es-awd's parse_args reads (docs/references.md §5.2): every setting of the case
    as a flag; the periodic evaluation off (--eval_interval 0: it still evaluates before the loop and
    after the last iteration), wandb disabled, no GPU named."""
    argv = ["es.py", "--model_name", "stand-in", "--task", "countdown", "--sigma", repr(float(case["sigma"])),
            "--alpha", repr(float(case["alpha"])), "--population_size", str(case["population"]),
            "--num_engines", str(case["engines"]), "--num_iterations", str(case["iterations"]),
            "--experiment_dir", str(experiment_dir), "--run_name", run_name, "--cuda_devices", "",
            "--precision", case.get("precision") or PRECISION.get(case.get("dtype", ""), "float32"),
            "--weight_decay_type", case["decay"], "--weight_decay_lambda", repr(float(case["lambda"])),
            "--eval_interval", "0", "--wandb_project", "esverify-parity", "--wandb_mode", "disabled"]
    if case["mirror"]:
        argv.append("--mirror_sampling")
    if case["caching"]:
        argv.append("--caching")
    if case["global_seed"] is not None:
        argv += ["--global_seed", str(int(case["global_seed"]))]
    return argv


def op_main(case, modules):
    es = loops.load_lazily(modules, "es_main", "es", ES)
    worker_mod = sys.modules.get("distributed_utils") or loops.load_lazily(modules, "distributed_utils",
                                                                      "distributed_utils", "distributed_utils.py")
    out = Path(case["out"])
    logs = loops.fresh_logs(out)
    tape = loops.Tape(out, case)
    launched: list = []

    # the precision the reference launches with: what its call passes, else its launch_engines' default
    own = loops.default_of(getattr(es, "launch_engines", None), "precision")

    def launch_engines(num_engines, model_name=None, precision=own, *args, **kwargs):
        launched.extend(loops.engines(case, worker_mod.WorkerExtension, tape, int(num_engines), precision))
        return launched, [loop_stubs.Inert() for _ in launched]

    def get_data(tokenizer, *args, **kwargs):
        return ([Supplied(context=p, target=t) for p, t in zip(*loops.prompts(case["data"]))],
                [Supplied(context=p, target=t) for p, t in zip(*loops.prompts(case.get("eval_data") or []))])

    settings = {}
    with Seams() as seams:
        before = seams.settings()
        for name, value in (("launch_engines", launch_engines), ("cleanup", lambda *a, **k: None),
                            ("get_data", get_data), ("evaluate_reward", evaluate_reward)):
            seams.set(es, name, value)
        seams.set(torch, "save", tape.recording_save)
        sys.argv[:] = main_argv(case, out, logs.name)
        try:
            args = es.parse_args()
        except SystemExit as exc:   # argparse's own refusal: an error row, not the end of the child
            raise RuntimeError(f"es.parse_args() exited with status {exc.code} on the command line "
                               f"{' '.join(sys.argv[1:])} (its message is in the child's log)") from None
        settings = loops.reference_settings(seams, before)
        with loops.Noise(case):
            loops.run_op("main", lambda: es.main(args), callee=es.main)
    if not launched:
        raise RuntimeError("es.main never called launch_engines: no engine ran")
    reply = tape.finish(launched)
    records = []
    for path in sorted((logs / "iteration_updates").glob("iteration_*.json")):
        try:
            records.append({"file": path.name, "record": json.loads(path.read_text())})
        except (OSError, ValueError) as exc:
            records.append({"file": path.name, "error": f"{type(exc).__name__}: {exc}"})
    reply["tape"]["records"] = records
    reply["settings"] = settings
    return reply


if __name__ == "__main__":
    serve("es-awd", load_modules, loops.with_coverage(
        {"perturb": op_perturb, "restore": op_perturb, "update": op_update, "decay": op_decay,
         "main": op_main}), threads=1)
