"""The skill-sample reference spec: the ES fine-tuning skill page's published `es_train_loop` (docs/references.md §7).

Design record: people paste published snippets into notebooks; this
adapter takes the page's code as one module (a `.py` file, or a folder
holding one, that defines `es_train_loop` and the global `utilities`),
drives `es_train_loop` in the child (child/driver.py) with
the runner's reward, and runs our side's `esverify.references.skill_sample.loop.
run_skill_loop` (profile `skill-sample`, docs/numerics.md) on the same
flat parameter vector, seeds and rewards. Rows: f32/f16/bf16 x contract/
native noise at N = 5, the page's own N = 30, and N = 40 (above the
global `utilities`' 30 entries). The sample's own defects are findings and
`defect` rows, never our failures and never passes: the bf16 crash at
`noise.cpu().numpy()` and the IndexError above N = 30 name the line that
raised; utilities weighted by member number (with a demonstration that
swapping two members' rewards changes the update), the model left at the
last member's perturbation, the seeds two runs share, the unused first
accumulation and the reset of numpy's process-wide generator are stated
in the report's findings. It is an esverify.oracle.spec.ReferenceSpec
(`ADAPTER`): a clone of one file, cases of its own (the spec's optional
clone and ops callables), its rows rows.run_row's.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path

from esverify.oracle.case_model import Case, whole_loop_shrink_candidates
from esverify.oracle.spec import CloneSpec, OpsSpec, OurSide, ReferenceSpec, ReportTexts

from .sample import sample_module

NAME = "skill-sample"
OP = "es_train_loop"
DTYPES = ("f32", "f16", "bf16")
SIGMA, LR, SEED_BASE, GENERATIONS = 0.017, 0.001, 42, 2
POPULATIONS = (5, 30, 40)   #: small, the page's own, above its utilities' size
ENV_VAR = "ESVERIFY_SKILL_REF"


def recognise(path: Path) -> str | None:
    """None when `path` is (or holds) the sample's file; else why it is no clone."""
    if sample_module(path) is not None:
        return None
    return f"{path} is not (and holds no) Python file defining es_train_loop and a global utilities"


def rule_for(device: str) -> str:
    """The loop profile's rule for `device` (esverify.references.skill_sample.profile.RULES)."""
    from . import profile as P
    return P.RULES[1] if str(device).startswith("cuda") else P.RULE


def cases(matrix) -> list:
    """The rows of `matrix` (an esverify.oracle.adapters.MatrixSpec): per device each dtype and noise at N = 5,
    the page's N = 30 and N = 40 in f32, the 1M-element f16 row and a NaN reward row; none without loops or
    without the correlated scheme (one flat vector)."""
    if not matrix.loops or "correlated" not in matrix.schemes:
        return []
    sigma = SIGMA if matrix.sigma is None else matrix.sigma
    lr = LR if matrix.alpha is None else matrix.alpha
    out = []
    for device in matrix.devices:
        for noise in matrix.noises:
            for dtype in [d for d in DTYPES if d in matrix.dtypes]:
                out.append(row_case(device, dtype, noise, POPULATIONS[0], sigma, lr))
        for n in POPULATIONS[1:]:
            if "f32" in matrix.dtypes:
                for noise in matrix.noises:
                    out.append(row_case(device, "f32", noise, n, sigma, lr))
        if not matrix.small and "f16" in matrix.dtypes and "contract" in matrix.noises:
            # the update's f64 -> f16 rounding (through f32, as torch does) differs from one direct
            # rounding on about 1 element in 14,000: the 1M-element set reaches it, the small set does not
            out.append(row_case(device, "f16", "contract", POPULATIONS[0], sigma, lr, big=True))
        if "f32" in matrix.dtypes and "contract" in matrix.noises:
            # a NaN reward for every member (docs/parity.md, "Reward populations")
            case = row_case(device, "f32", "contract", POPULATIONS[0], sigma, lr)
            out.append(dataclasses.replace(case, extra={**case.extra, "rewards": "nan"}, tag="nan"))
    return out


def row_case(device, dtype, noise, n, sigma, lr, generations=GENERATIONS, big=False) -> Case:
    """One row: es_train_loop for `generations` generations of population `n` from SEED_BASE."""
    return Case(NAME, device, dtype, "correlated", OP, n, sigma, lr, big,
                {"iterations": generations, "seed_base": SEED_BASE}, tag="big" if big else "", noise=noise)


def check_case(case) -> None:
    """ValueError when `case` is no row of the sample: its op, the correlated scheme, its dtype."""
    if case.op != OP:
        raise ValueError(f"case: op {case.op!r} is not an op of target {case.target!r} (only {OP})")
    if case.scheme != "correlated":
        raise ValueError("case: the sample draws one flat vector per member: scheme 'correlated' only")
    if case.dtype not in DTYPES:
        raise ValueError(f"case: dtype {case.dtype!r}; the sample's parameters are f32, f16 or bf16")


def random_case(rng, device: str, noises, iterations: int = 2) -> Case:
    """One random row for `--fuzz`: f32 or f16, a noise, N from 2 to 30."""
    return row_case(device, DTYPES[int(rng.integers(2))], list(noises)[int(rng.integers(len(noises)))],
                    int(rng.integers(2, 31)), SIGMA, LR, generations=max(1, int(iterations)))


def run_row(session, case):
    """An Outcome (esverify.oracle.verdict judges it): rows.run_row, imported when a row runs."""
    from . import rows
    return rows.run_row(session, case)


ADAPTER = ReferenceSpec(
    name=NAME,
    clone=CloneSpec(files={}, licence="LICENSE", env_var=ENV_VAR, default_path="refs/skill-sample",
                    recognise=recognise, single_file=True,
                    looks_for="a .py file (or a folder holding one) that defines es_train_loop and a global utilities",
                    how_to_give=f"--ref PATH (the sample's .py file or its folder) or set ${ENV_VAR}"),
    ops=OpsSpec(loops=(OP,), matrix=cases, check=check_case, draw=random_case, shrink=whole_loop_shrink_candidates),
    driver=str(Path(__file__).with_name("child") / "driver.py"),
    profile="skill-sample",
    texts=ReportTexts(
        summary="skill-sample: the ES fine-tuning skill page's es_train_loop, one module (MIT)",
        computes={OP: ["*::es_train_loop"]},   # the sample's file name is the user's
        findings={
            "utilities-by-member": "utilities is indexed by member number, never by reward rank (the page says it "
                                   "ranks members by reward): member 0 always gets the largest weight",
            "model-left-perturbed": "after every generation the model's parameters are the last member's perturbed "
                                    "vector, not params_current (only save_finetuned_model writes the result back)",
            "seed-overlap": "seeds are seed_base + generation * N + member: two runs with nearby seed_base share "
                            "members' noise",
            "unused-accumulation": "the member loop accumulates utilities[m] * noise into an f64 array that is never "
                                   "used (and is where bf16 parameters crash: numpy has no bfloat16)",
            "bf16-crash": "with bf16 parameters, the page's own default dtype, the loop raises TypeError at its first "
                          "noise.cpu().numpy() (numpy has no bfloat16): the sample cannot run its own default",
            "population-cap": "the global utilities has 30 entries: a population above 30 raises IndexError, one "
                              "below 30 uses weights that no longer sum to 1",
            "numpy-global-reset": "np.random.seed(seed) per member resets numpy's process-wide generator",
        },
        paths=(
            ("a small population", "N 5", ("*/N5", "*/N5/*")),
            ("the page's population", "N 30", ("*/N30", "*/N30/*")),
            ("a population past the page's utilities (a defect)", "N 40", ("*/N40", "*/N40/*")),
            ("bf16 (a defect)", "dtype bf16", ("*/bf16/*",)),
            ("a 1M-element vector", "the big set", ("*/big",)),
            ("torch's own generator", "native noise", ("*/native",)),
            ("a NaN reward for every member (z-scored to NaN, applied)", "rewards nan", ("*/nan",)),
        )),
    ours=OurSide(rule=rule_for),
    run_row=run_row,
)
