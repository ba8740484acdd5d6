"""The skill-sample adapter: the ES fine-tuning skill page's published `es_train_loop` (docs/references.md §7).

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
in the report's findings.
"""
from __future__ import annotations

import dataclasses
import ast
from pathlib import Path

from esverify import pyast
from esverify.oracle.case_model import Case, whole_loop_shrink_candidates
from esverify.oracle.adapters.base import Adapter

OP = "es_train_loop"
DTYPES = ("f32", "f16", "bf16")
SIGMA, LR, SEED_BASE, GENERATIONS = 0.017, 0.001, 42, 2
POPULATIONS = (5, 30, 40)   #: small, the page's own, above its utilities' size
MAX_POPULATION = 30


def defines_loop(path: Path) -> bool:
    """True when the Python file defines a top-level `es_train_loop` and assigns a top-level `utilities`."""
    try:
        tree = pyast.parse(Path(path).read_text(encoding="utf-8"))
    except (OSError, SyntaxError, ValueError, UnicodeDecodeError):
        return False
    funcs = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
    names = {t.id for n in tree.body if isinstance(n, (ast.Assign, ast.AnnAssign))
             for t in (n.targets if isinstance(n, ast.Assign) else [n.target]) if isinstance(t, ast.Name)}
    return "es_train_loop" in funcs and "utilities" in names


def sample_module(path: Path) -> Path | None:
    """The sample's file: `path` itself, or the first `.py` (sorted) in the folder `path` that defines it."""
    path = Path(path)
    if path.is_file():
        return path if path.suffix == ".py" and defines_loop(path) else None
    if path.is_dir():
        return next((p for p in sorted(path.glob("*.py")) if defines_loop(p)), None)
    return None


class SkillSample(Adapter):
    name = "skill-sample"
    summary = "skill-sample: the ES fine-tuning skill page's es_train_loop, one module (MIT)"
    env_var = "ESVERIFY_SKILL_REF"
    default_path = "refs/skill-sample"
    driver = str(Path(__file__).with_name("child") / "driver.py")
    licence = "LICENSE"
    validated_commit = ""
    files = {}
    ops_need = {}
    profile = "skill-sample"
    ops = ()
    loop_ops = (OP,)
    #: the code paths a run can reach, by what selects them (esverify.oracle.run_paths)
    paths = (
        ("a small population", "N 5", ("*/N5", "*/N5/*")),
        ("the page's population", "N 30", ("*/N30", "*/N30/*")),
        ("a population past the page's utilities (a defect)", "N 40", ("*/N40", "*/N40/*")),
        ("bf16 (a defect)", "dtype bf16", ("*/bf16/*",)),
        ("a 1M-element vector", "the big set", ("*/big",)),
        ("torch's own generator", "native noise", ("*/native",)),
        ("a NaN reward for every member (z-scored to NaN, applied)", "rewards nan", ("*/nan",)),
    )
    reached = {}
    computes = {OP: ["*::es_train_loop"]}   # the sample's file name is the user's
    findings = {
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
        "population-cap": "the global utilities has 30 entries: a population above 30 raises IndexError, one below "
                          "30 uses weights that no longer sum to 1",
        "numpy-global-reset": "np.random.seed(seed) per member resets numpy's process-wide generator",
    }

    max_population = MAX_POPULATION

    def rule_for(self, device: str) -> str:
        """The loop profile's rule for `device` (esverify.references.skill_sample.profile.RULES)."""
        from . import profile as P
        return P.RULES[1] if str(device).startswith("cuda") else P.RULE

    @staticmethod
    def sample_module(path: Path) -> Path | None:
        """The sample's file at `path` (module function `sample_module`)."""
        return sample_module(path)

    def recognise(self, path: Path) -> str | None:
        if sample_module(path) is not None:
            return None
        return f"{path} is not (and holds no) Python file defining es_train_loop and a global utilities"

    def looks_for(self) -> str:
        return "a .py file (or a folder holding one) that defines es_train_loop and a global utilities"

    def accepts_file(self) -> bool:
        return True

    def clone_root(self, path: Path) -> Path:
        """The folder the child is given (the sample's own folder when a file is named)."""
        path = Path(path)
        return path.parent if path.is_file() else path

    def module_key(self, case):
        return None

    def how_to_give(self) -> str:
        return f"--ref PATH (the sample's .py file or its folder) or set ${self.env_var}"

    def cases(self, matrix) -> list:
        if not matrix.loops or "correlated" not in matrix.schemes:   # one flat vector: the correlated scheme
            return []
        sigma = SIGMA if matrix.sigma is None else matrix.sigma
        lr = LR if matrix.alpha is None else matrix.alpha
        out = []
        for device in matrix.devices:
            for noise in matrix.noises:
                for dtype in [d for d in DTYPES if d in matrix.dtypes]:
                    out.append(self._case(device, dtype, noise, POPULATIONS[0], sigma, lr))
            for n in POPULATIONS[1:]:
                if "f32" in matrix.dtypes:
                    for noise in matrix.noises:
                        out.append(self._case(device, "f32", noise, n, sigma, lr))
            if not matrix.small and "f16" in matrix.dtypes and "contract" in matrix.noises:
                # the update's f64 -> f16 rounding (through f32, as torch does) differs from one direct
                # rounding on about 1 element in 14,000: the 1M-element set reaches it, the small set does not
                out.append(self._case(device, "f16", "contract", POPULATIONS[0], sigma, lr, big=True))
            if "f32" in matrix.dtypes and "contract" in matrix.noises:
                # a NaN reward for every member (docs/parity.md, "Reward populations")
                case = self._case(device, "f32", "contract", POPULATIONS[0], sigma, lr)
                out.append(dataclasses.replace(case, extra={**case.extra, "rewards": "nan"}, tag="nan"))
        return out

    def _case(self, device, dtype, noise, n, sigma, lr, generations=GENERATIONS, big=False):
        return Case(self.name, device, dtype, "correlated", OP, n, sigma, lr, big,
                    {"iterations": generations, "seed_base": SEED_BASE}, tag="big" if big else "", noise=noise)

    def check_case(self, case) -> None:
        if case.op != OP:
            raise ValueError(f"case: op {case.op!r} is not an op of target {case.target!r} (only {OP})")
        if case.scheme != "correlated":
            raise ValueError("case: the sample draws one flat vector per member: scheme 'correlated' only")
        if case.dtype not in DTYPES:
            raise ValueError(f"case: dtype {case.dtype!r}; the sample's parameters are f32, f16 or bf16")

    def random_case(self, rng, device: str, noises, iterations: int = 2):
        return self._case(device, DTYPES[int(rng.integers(2))], list(noises)[int(rng.integers(len(noises)))],
                          int(rng.integers(2, 31)), SIGMA, LR, generations=max(1, int(iterations)))

    def shrink_candidates(self, case) -> list:
        return whole_loop_shrink_candidates(case)

    def run_row(self, session, case):   # an Outcome: esverify.oracle.verdict judges it
        from . import rows as skill_rows
        return skill_rows.run_row(self, session, case)


ADAPTER = SkillSample()
