"""The es-awd reference spec: weight_update_utils and the `es.main` loop, with anchored weight decay (docs/references.md §2, §5).

Design record: everything the oracle knows about es-awd is here and in its
child driver (child/driver.py): the clone layout, the single-op
cases (perturb, restore, update with decay none/l1/l2, the decay alone,
mirrored, caching), the seven `main*` loop rows, the functions they reach,
the offset parameter set its cases start from (theta != anchor, so decay
shows) and the anchor it is given, and the deprecated `--awd-ref` option
(an alias of `--ref` for one release). It is an esverify.oracle.spec.
ReferenceSpec (`ADAPTER`); what its loop does its own way is .loop.QUIRKS.
"""
from __future__ import annotations

from pathlib import Path

from esverify.oracle.spec import (ChildRequest, CloneSpec, LoopSpec, OpsSpec, OurSide, ReferenceSpec, ReportTexts,
                                  even)

from .loop import QUIRKS

#: the main loop's engines
MAIN_ENGINES = 4
#: decay strength of the loop rows: alpha * lambda = 1.5e-4 at the default alpha, the size of a loop
#: update, so l1 zeroes part of the deltas; 0.3 is not a power of two
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
MAIN_DATA = (0.01, -0.01, 0.02)
#: the --precision the child hands main per dtype set (the mixed set: float32), which main launches its
#: engines with (docs/references.md §5.2)
MAIN_PRECISION = {"f32": "float32", "f16": "float16", "bf16": "bfloat16"}
OPS = ("perturb", "restore", "update-none", "update-l1", "update-l2", "decay-l1", "decay-l2", "mirrored", "caching")


def nonfinite_update(params, noise, coeffs, alpha, population):
    """The update as the reference writes it, for the rows with non-finite rewards (.nonfinite)."""
    from .nonfinite import update
    update(params, noise, coeffs, alpha, population)


def cases(matrix, cell) -> None:
    """The cases of one cell: every single op (mirrored at an even population, docs/numerics.md §4), update-l2
    at lambda 0, and the main loop rows."""
    n, big, add = cell.population, cell.big, cell.add
    for op in OPS:
        add(op, even(n) if op == "mirrored" else n, big)
    add("update-l2", n, big, "lambda0")
    extra = {"iterations": matrix.iterations, "noise": cell.noise}
    for op, (mirror, _, _, _) in MAIN_VARIANTS.items():
        m = even(n) if mirror else n
        if mirror and (m // 2) % MAIN_ENGINES == 0:
            # N/2 seeds not a multiple of the engines: a loop that batches its two passes together, or
            # splits them differently, puts another member on engine 0, which shows in its bits
            m += 2
        add(op, m, extra=extra)
    if (cell.dtype, cell.scheme, cell.noise) == ("f32", "correlated", "contract"):
        # one prompt's reward -inf for every member: the loop z-scores and applies NaN (docs/parity.md); two
        # iterations, the second perturbing NaN weights
        add("main", n, tag="inf", extra={**extra, "iterations": min(2, int(matrix.iterations)), "rewards": "inf"})


def request(case) -> ChildRequest:
    """Every case starts from the offset set (theta != anchor: the decay has something to pull back,
    docs/numerics.md §5); the update and decay cases also get the anchor."""
    return ChildRequest(variant="offset", anchor=case.kind in ("update", "decay"))


def loop(case) -> LoopSpec:
    """The main loop row `case`: its passes over 4 engines, the variant's sampling and decay."""
    mirror, caching, decay, lam = MAIN_VARIANTS[case.op]
    # perturb/restore pass caching through (caching=True reuses noise across equal-shaped slots: the hook
    # sees it, docs/references.md §2, §5)
    precision = MAIN_PRECISION.get(case.dtype, "float32")
    return LoopSpec(style="passes", engines=MAIN_ENGINES, schedule="es-awd", data=MAIN_DATA, mirror=mirror,
                    caching=caching, decay=decay, lam=lam, engine_dtype=precision,
                    command={"op": "main", "engines": MAIN_ENGINES, "mirror": mirror, "caching": caching,
                             "decay": decay, "lambda": lam, "precision": precision})


ADAPTER = ReferenceSpec(
    name="es-awd",
    clone=CloneSpec(files={"weight_update_utils": "weight_update_utils.py", "es_main": "es.py",
                           "distributed_utils": "distributed_utils.py"},
                    needs={"perturb": "weight_update_utils", "restore": "weight_update_utils",
                           "update": "weight_update_utils", "decay": "weight_update_utils", "main": "es_main"},
                    identifying=("weight_update_utils", "distributed_utils"),   # es.py alone: many projects have one
                    licence="LICENCE", validated_commit="f432ff8", env_var="ESVERIFY_AWD_REF",
                    default_path="refs/es-awd", alias_flag="--awd-ref"),
    ops=OpsSpec(single=OPS, loops=tuple(MAIN_VARIANTS), layered=("perturb", "restore", "update-none", "update-l1",
                                                                  "caching"),
                sweep="update-none", fuzz=OPS),
    driver=str(Path(__file__).with_name("child") / "driver.py"),
    profile="es-awd",   # its rules cpu and cuda: the profile's own rule_for
    texts=ReportTexts(
        summary="es-awd: weight_update_utils (perturb/restore/update, anchored decay) and es.main's loop",
        reached={"es.py": ["parse_args", "main", "evaluate_model"],
                 "distributed_utils.py": ["WorkerExtension.perturb_self_weights",
                                          "WorkerExtension.restore_self_weights",
                                          "WorkerExtension.update_weights_from_seeds",
                                          "WorkerExtension.snapshot_weights_to_cpu",
                                          "WorkerExtension.write_weights_to_disk"],
                 "weight_update_utils.py": ["generate_noise", "apply_seeded_noise_to_parameters",
                                            "update_parameters_from_seeds", "apply_reference_weight_decay_"]},
        computes={"perturb": ["weight_update_utils.py::apply_seeded_noise_to_parameters"],
                  "restore": ["weight_update_utils.py::apply_seeded_noise_to_parameters"],
                  "mirrored": ["weight_update_utils.py::update_parameters_from_seeds"],   # update calls, other
                  "caching": ["weight_update_utils.py::update_parameters_from_seeds"],    # arguments
                  "update": ["weight_update_utils.py::update_parameters_from_seeds",
                             "weight_update_utils.py::apply_reference_weight_decay_"],
                  "decay": ["weight_update_utils.py::apply_reference_weight_decay_"],
                  "main": ["es.py::main", "distributed_utils.py::WorkerExtension.update_weights_from_seeds",
                           "weight_update_utils.py::update_parameters_from_seeds"]},
        paths=(
            ("iid noise (a stream per tensor)", "scheme iid", ("*/iid/*",)),
            ("correlated noise (one stream per member)", "scheme correlated", ("*/correlated/*",)),
            ("torch's own generator", "native noise", ("*/native", "*/native/*")),
            ("no decay", "weight_decay_type none", ("*/update-none/*", "*/main/*")),
            ("anchored decay l1", "weight_decay_type l1", ("*/update-l1/*", "*/decay-l1/*", "*/main-l1/*")),
            ("anchored decay l2", "weight_decay_type l2", ("*/update-l2/*", "*/decay-l2/*", "*/main-l2/*")),
            ("lambda 0 (no decay although a type is given)", "weight_decay_lambda 0", ("*lambda0", "*lambda0/*")),
            ("mirrored sampling (N/2 seeds, divisor N)", "mirror_sampling", ("*/mirrored/*", "*/main-mirror/*")),
            ("noise reused for equal-shape tensors", "caching", ("*/caching/*", "*/main-caching/*")),
            ("main on 4 engines", "the main rows", ("*/main*",)),
            ("main with an infinite reward (every coefficient NaN)", "op main, rewards inf", ("*/main/*/inf",)),
            ("the update of zero coefficients", "every reward tied (rewards equal)", ("*/update-none/*/equal",)),
            ("the update with NaN coefficients", "rewards nan or inf",
             ("*/update-none/*/nan", "*/update-none/*/inf")),
        )),
    cases=cases,
    request=request,
    ours=OurSide(nonfinite_update=nonfinite_update),
    loop=loop,
    quirks=QUIRKS,   # main switches deterministic algorithms on for a global seed
)
