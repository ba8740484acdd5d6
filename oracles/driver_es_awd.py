"""Oracle driver for an es-awd clone (docs/references.md §2), run by path in the child.

Usage (by the runner only): `python driver_es_awd.py --clone PATH
--reply-fd N`. torch runs on ONE thread (docs/numerics.md §3, rule `cpu`: the
reference's bits depend on the thread count). Loads `weight_update_utils.py`
by path and answers perturb, restore, update (decay none/l1/l2, caching,
mirrored: all the same reference call with different arguments) and decay
(the decay alone), and main (`es.main`, the reference's own training loop:
oracles/child_loops.py, which also measures coverage of the clone). Parameters are passed as the stand-in model's lazy
`parameters()` generator; the anchor as a plain generator that does not
move the slot. Never imported by esverify.
"""
from __future__ import annotations

from child_server import (HOOK, DrawAudit, ReferenceLoadError, StandInModel, expected_draws, load_module,
                          load_set, load_ties, module_or_raise, save_results, serve)

import child_loops as loops

UTILS = "weight_update_utils.py"


def load_modules(clone):
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
    audit = DrawAudit(model.names)
    h, caching = case["member_handle"], case.get("caching", False)
    utils.apply_seeded_noise_to_parameters(model.parameters(), h, case["sigma"], caching=caching)
    audit.check("apply_seeded_noise_to_parameters(+sigma)", expected_draws(tensors, [h]))
    extra = {}
    if case["op"] == "restore":   # the perturbed state, compared too (a slot never perturbed shows there)
        extra["perturbed"] = case["out"] + "/theirs-perturbed.npz"
        save_results(extra["perturbed"], tensors)
        utils.apply_seeded_noise_to_parameters(model.parameters(), h, -case["sigma"], caching=caching)
        audit.check("apply_seeded_noise_to_parameters(-sigma)", expected_draws(tensors, [h]))
    return _finish(case, tensors, audit, **extra)


def op_update(case, modules):
    utils, model, tensors, anchor = _setup(case, modules)
    audit = DrawAudit(model.names)
    caching = case.get("caching", False)
    utils.update_parameters_from_seeds(
        model.parameters(), case["seeds"], case["coeffs"], case["alpha"], case["population"],
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


if __name__ == "__main__":
    serve("es-awd", load_modules, loops.with_coverage(
        {"perturb": op_perturb, "restore": op_perturb, "update": op_update, "decay": op_decay,
         "main": loops.op_main}), threads=1)
