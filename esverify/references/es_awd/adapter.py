"""The es-awd adapter: weight_update_utils and the `es.main` loop, with anchored weight decay (docs/references.md §2, §5).

Design record: everything the oracle knows about es-awd is here and in its
child driver (child/driver.py): the clone layout, the single-op
cases (perturb, restore, update with decay none/l1/l2, the decay alone,
mirrored, caching), the seven `main*` loop rows, the functions they reach,
the offset parameter set its cases start from (theta != anchor, so decay
shows) and the anchor it is given, the profile's cpu/cuda rules and the
deprecated `--awd-ref` option (an alias of `--ref` for one release).
"""
from __future__ import annotations

from pathlib import Path


from esverify.oracle.case_model import Case
from esverify.oracle.rewards import with_nonfinite_target
from esverify.oracle.adapters.base import Adapter, LoopSpec, even

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


class EsAwd(Adapter):
    name = "es-awd"
    summary = "es-awd: weight_update_utils (perturb/restore/update, anchored decay) and es.main's loop"
    env_var = "ESVERIFY_AWD_REF"
    default_path = "refs/es-awd"
    alias_flag = "--awd-ref"
    driver = str(Path(__file__).with_name("child") / "driver.py")
    licence = "LICENCE"
    validated_commit = "f432ff8"
    files = {"weight_update_utils": "weight_update_utils.py", "es_main": "es.py",
             "distributed_utils": "distributed_utils.py"}
    ops_need = {"perturb": "weight_update_utils", "restore": "weight_update_utils",
                "update": "weight_update_utils", "decay": "weight_update_utils", "main": "es_main"}
    identifying = ("weight_update_utils", "distributed_utils")   # es.py alone: many projects have one
    profile = "es-awd"

    @staticmethod
    def nonfinite_update(params, noise, coeffs, alpha, population):
        """The update as the reference writes it, for the rows with non-finite rewards (.nonfinite)."""
        from .nonfinite import update
        update(params, noise, coeffs, alpha, population)
    ops = OPS
    loop_ops = tuple(MAIN_VARIANTS)
    #: the code paths a run can reach, by what selects them (esverify.oracle.run_paths)
    paths = (
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
        ("the update with NaN coefficients", "rewards nan or inf", ("*/update-none/*/nan", "*/update-none/*/inf")),
    )
    layered_ops = ("perturb", "restore", "update-none", "update-l1", "caching")
    sweep_op = "update-none"
    fuzz_ops = OPS
    reached = {"es.py": ["parse_args", "main", "evaluate_model"],
               "distributed_utils.py": ["WorkerExtension.perturb_self_weights", "WorkerExtension.restore_self_weights",
                                        "WorkerExtension.update_weights_from_seeds",
                                        "WorkerExtension.snapshot_weights_to_cpu",
                                        "WorkerExtension.write_weights_to_disk"],
               "weight_update_utils.py": ["generate_noise", "apply_seeded_noise_to_parameters",
                                          "update_parameters_from_seeds", "apply_reference_weight_decay_"]}
    computes = {"perturb": ["weight_update_utils.py::apply_seeded_noise_to_parameters"],
                "restore": ["weight_update_utils.py::apply_seeded_noise_to_parameters"],
                "mirrored": ["weight_update_utils.py::update_parameters_from_seeds"],   # update calls, other
                "caching": ["weight_update_utils.py::update_parameters_from_seeds"],    # arguments
                "update": ["weight_update_utils.py::update_parameters_from_seeds",
                           "weight_update_utils.py::apply_reference_weight_decay_"],
                "decay": ["weight_update_utils.py::apply_reference_weight_decay_"],
                "main": ["es.py::main", "distributed_utils.py::WorkerExtension.update_weights_from_seeds",
                         "weight_update_utils.py::update_parameters_from_seeds"]}
    findings = {}

    def cell_cases(self, matrix, cell):
        n, big, add = cell.population, cell.big, cell.add
        for op in OPS:
            add(op, even(n) if op == "mirrored" else n, big)   # mirrored pairs (docs/numerics.md §4)
        add("update-l2", n, big, "lambda0")

    def loop_cases(self, device, dtype, scheme, population, sigma, alpha, iterations, noise="contract"):
        extra = {"iterations": iterations, "noise": noise}
        cases = []
        for op, (mirror, _, _, _) in MAIN_VARIANTS.items():
            n = even(population) if mirror else population
            if mirror and (n // 2) % MAIN_ENGINES == 0:
                # N/2 seeds not a multiple of the engines: a loop that batches its two passes together, or
                # splits them differently, puts another member on engine 0, which shows in its bits
                n += 2
            cases.append(Case(self.name, device, dtype, scheme, op, n, sigma, alpha, False, dict(extra), noise=noise))
        if (dtype, scheme, noise) == ("f32", "correlated", "contract"):
            # one prompt's reward -inf for every member: the loop z-scores and applies NaN (docs/parity.md); two
            # iterations, the second perturbing NaN weights
            cases.append(Case(self.name, device, dtype, scheme, "main", population, sigma, alpha, False,
                              {**extra, "iterations": min(2, int(iterations)), "rewards": "inf"}, tag="inf",
                              noise=noise))
        return cases

    def loop_spec(self, case) -> LoopSpec:
        mirror, caching, decay, lam = MAIN_VARIANTS[case.op]
        # perturb/restore pass caching through (caching=True reuses noise across equal-shaped slots: the hook
        # sees it, docs/references.md §2, §5); its determinism switch is .loop.QUIRKS
        data = with_nonfinite_target(MAIN_DATA, case.extra.get("rewards"))   # an infinite reward row: its first prompt
        return LoopSpec(style="passes", engines=MAIN_ENGINES, schedule="es-awd", data=data, mirror=mirror,
                        caching=caching, decay=decay, lam=lam, engine_dtype=MAIN_PRECISION.get(case.dtype, "float32"),
                        quirks=QUIRKS,
                        command={"op": "main", "engines": MAIN_ENGINES, "mirror": mirror, "caching": caching,
                                 "decay": decay, "lambda": lam,
                                 "precision": MAIN_PRECISION.get(case.dtype, "float32")})

    def set_variant(self, case) -> str:
        return "offset"   # theta != anchor: the decay has something to pull back (docs/numerics.md §5)

    def needs_anchor(self, case) -> bool:
        return case.kind in ("update", "decay")


ADAPTER = EsAwd()
