"""The es-at-scale reference spec: the library's WorkerExtension, z_score and trainer loop (docs/references.md §1, §5).

Design record: everything the oracle knows about es-at-scale is here and in
its child driver (child/driver.py): the clone layout, the
single-op cases (perturb, restore, update at the main N, the paper's N = 30
and the population sweep, the in-process `loop`, z-scores in f64), the
`fit` loop row, the functions that loop reaches and the fit quirk it
reports. Rows run on the core's generic single-op path; `fit` on the loop
path (esverify.oracle.loop_rows). It is an esverify.oracle.spec.
ReferenceSpec (`ADAPTER`); what fit does its own way is .loop.QUIRKS.
"""
from __future__ import annotations

from pathlib import Path

from esverify.oracle.case_model import CASE_POPULATION, POPULATIONS, REWARD_SHAPES
from esverify.oracle.spec import CloneSpec, LoopSpec, OpsSpec, OurSide, ReferenceSpec, ReportTexts

from .loop import EXTRA_UPDATE, QUIRKS

#: the trainer loop's engines: the population is made not a multiple of them
FIT_ENGINES = 2
#: one dataloader batch of 5 prompts per iteration, mini-batches of 2, 2 and 1
FIT_DATA = (0.01, -0.02, 0.03, 0.0, -0.005)
FIT_MINI_BATCH = 2
_WORKER = "es_at_scale/utils/worker_extension.py"
#: the precision fit's engines are launched with: launch_engines' default, bfloat16 (docs/references.md §5.1)
FIT_ENGINE_DTYPE = "bfloat16"
#: the non-finite reward populations (esverify.oracle.rewards.NONFINITE): z_score as it is, rows of their own
NONFINITE_REWARDS = ("nan", "inf")


def nonfinite_update(params, noise, coeffs, alpha, population):
    """The update as the reference writes it, for the rows with non-finite rewards (.nonfinite)."""
    from .nonfinite import update
    update(params, noise, coeffs, alpha, population)


def cases(matrix, cell) -> None:
    """The cases of one cell: without noise, the z-scores (f64) at each population and reward population;
    with noise, perturb, restore, update at the main N and the paper's N = 30, the in-process loop, and fit."""
    n, big, add = cell.population, cell.big, cell.add
    if cell.noise == "-":   # the cell of no noise, once per device
        for m in dict.fromkeys([n, *POPULATIONS, CASE_POPULATION]):
            add("zscore", m)
        for shape in REWARD_SHAPES + NONFINITE_REWARDS:
            add("zscore", CASE_POPULATION, rewards=shape)
        return
    add("perturb", n, big)
    add("restore", n, big)
    add("update", n, big)
    add("update", CASE_POPULATION, big, "paper")
    if n != CASE_POPULATION:
        add("update", CASE_POPULATION, big)
    add("loop", n, False, extra={"iterations": matrix.iterations})
    extra = {"iterations": matrix.iterations, "noise": cell.noise}
    m = n if n % FIT_ENGINES else n + 1   # not a multiple of the engines
    add("fit", m, extra=extra)
    if (cell.dtype, cell.scheme, cell.noise) == ("f32", "correlated", "contract"):
        # one prompt's reward NaN for every member: the loop z-scores and applies NaN (docs/parity.md); one
        # iteration is two updates here (the extra update), the second perturbing NaN weights
        add("fit", m, tag="nan", extra={**extra, "iterations": 1, "rewards": "nan"})


def loop(case) -> LoopSpec:
    """The fit row `case`: mini-batches over 2 engines launched in bfloat16 (its perturb/restore take no
    caching argument)."""
    return LoopSpec(style="batched", engines=FIT_ENGINES, schedule="es-at-scale", data=FIT_DATA,
                    mini_batch=FIT_MINI_BATCH, engine_dtype=FIT_ENGINE_DTYPE,
                    command={"op": "fit", "engines": FIT_ENGINES, "batch_size": len(FIT_DATA),
                             "mini_batch_size": FIT_MINI_BATCH})


ADAPTER = ReferenceSpec(
    name="es-at-scale",
    clone=CloneSpec(files={"worker_extension": _WORKER, "reward_shaping": "es_at_scale/utils/reward_shaping.py",
                           "es_trainer": "es_at_scale/trainer/es_trainer.py"},
                    needs={"perturb": "worker_extension", "restore": "worker_extension", "update": "worker_extension",
                           "loop": "worker_extension", "zscore": "reward_shaping", "fit": "es_trainer"},
                    licence="LICENSE.txt", validated_commit="574a9d1", env_var="ESVERIFY_REF",
                    default_path="refs/es-at-scale"),
    ops=OpsSpec(single=("zscore", "perturb", "restore", "update", "loop"), loops=("fit",),
                layered=("perturb", "restore", "update"), sweep="update",
                fuzz=("perturb", "restore", "update", "update", "loop", "zscore"), noiseless=("zscore",)),
    driver=str(Path(__file__).with_name("child") / "driver.py"),
    profile="es-at-scale",
    texts=ReportTexts(
        summary="es-at-scale: the library (WorkerExtension perturb/restore/update, z_score, the trainer's fit loop)",
        reached={"es_at_scale/trainer/es_trainer.py": ["EvolutionStrategiesTrainer.__init__",
                                                       "EvolutionStrategiesTrainer.fit",
                                                       "EvolutionStrategiesTrainer.train_step",
                                                       "EvolutionStrategiesTrainer.evaluate_population_on_batch",
                                                       "EvolutionStrategiesTrainer.evaluate_handle",
                                                       "EvolutionStrategiesTrainer.eval_step",
                                                       "EvolutionStrategiesTrainer.cleanup"],
                 _WORKER: ["WorkerExtension.init_inter_engine_group", "WorkerExtension.perturb_self_weights",
                           "WorkerExtension.restore_self_weights", "WorkerExtension.update_weights_from_seeds",
                           "WorkerExtension.save_self_weights_to_disk"],
                 "es_at_scale/utils/reward_shaping.py": ["z_score"]},
        findings={EXTRA_UPDATE: "EvolutionStrategiesTrainer.fit performs num_iterations + 1 updates "
                                "(docs/references.md §5): its counter is tested after the increment; our side "
                                "reproduces it under the es-at-scale loop so that the rows compare like with like"},
        computes={"perturb": [f"{_WORKER}::WorkerExtension.perturb_self_weights"],
                  "restore": [f"{_WORKER}::WorkerExtension.restore_self_weights"],
                  "update": [f"{_WORKER}::WorkerExtension.update_weights_from_seeds"],
                  "loop": [f"{_WORKER}::WorkerExtension.{m}" for m in ("perturb_self_weights", "restore_self_weights",
                                                                       "update_weights_from_seeds")],
                  "zscore": ["es_at_scale/utils/reward_shaping.py::z_score"],
                  "fit": ["es_at_scale/trainer/es_trainer.py::EvolutionStrategiesTrainer.train_step",
                          f"{_WORKER}::WorkerExtension.update_weights_from_seeds"]},
        paths=(
            ("iid noise (a stream per tensor)", "scheme iid", ("*/iid/*",)),
            ("correlated noise (one stream per member)", "scheme correlated", ("*/correlated/*",)),
            ("torch's own generator", "native noise", ("*/native", "*/native/*")),
            ("f32 tensors", "dtype f32", ("*/f32/*",)),
            ("bf16 tensors", "dtype bf16", ("*/bf16/*",)),
            ("f32, f16 and bf16 tensors in one model", "the mixed set", ("*/mixed/*",)),
            ("several decoder layers and a tied head", "the layers set", ("*/layers",)),
            ("z_score with a zero std", "every reward tied (rewards equal)", ("*/zscore/*/equal",)),
            ("the update of zero coefficients", "every reward tied (rewards equal)", ("*/update/*/equal",)),
            ("z_score of a NaN reward", "rewards nan", ("*/zscore/*/nan",)),
            ("z_score of an infinite reward", "rewards inf", ("*/zscore/*/inf",)),
            ("the update with NaN coefficients", "rewards nan or inf", ("*/update/*/nan", "*/update/*/inf")),
            ("fit: 2 engines, a population not a multiple of them, a short last mini-batch", "op fit",
             ("*/fit/*",)),
            ("fit under torch's own generator", "op fit, native noise", ("*/fit/*/native",)),
            ("fit with a NaN reward (every coefficient NaN)", "op fit, rewards nan", ("*/fit/*/nan",)),
        )),
    cases=cases,
    ours=OurSide(nonfinite_update=nonfinite_update),
    loop=loop,
    quirks=QUIRKS,   # fit's extra update, records from 0, its final save, seeds merged by value
)
