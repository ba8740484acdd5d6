"""The es-paper adapter: the ES-at-scale paper's original single-file scripts (docs/references.md §6).

Design record: the code that produced the paper's published results is
four scripts (countdown and conciseness, each plain and `_iid`) in
`archive/` of an es-at-scale clone, or at the root of a clone or fork of
the repository's earlier name (es-fine-tuning-paper). One path can
therefore be both an es-at-scale clone and an es-paper clone. Each row
runs one script's `main()` in the child (child/driver.py) and
our side's `esverify.references.es_paper.loop.run_paper_loop` (profile `es-paper`,
docs/numerics.md) on the same parameter set, seeds and rewards, and
compares per iteration: the seeds the script's numpy schedule drew, the
reward each member was handed, the parameters of model copy 0 when each
iteration starts, and the final parameters. The vLLM script
(`es_fine-tuning_countdown_accl.py`) is listed as not checked.

Rows: f32/f16/bf16 x contract/native noise x the four scripts, with two
model copies (`--gpu_threads 2`, so the restore drift of each copy shows),
plus one single-copy row per script. Our side runs after the child (the
conciseness scripts' dataset size is the script's own, read in the child).
"""
from __future__ import annotations

import dataclasses
from pathlib import Path


from esverify.oracle.case_model import Case, whole_loop_shrink_candidates
from esverify.oracle.adapters.base import Adapter

SCRIPTS = {   # op -> (script file, iid, task)
    "main-countdown": ("es_fine-tuning_countdown.py", False, "countdown"),
    "main-countdown-iid": ("es_fine-tuning_countdown_iid.py", True, "countdown"),
    "main-conciseness": ("es_fine-tuning_conciseness.py", False, "conciseness"),
    "main-conciseness-iid": ("es_fine-tuning_conciseness_iid.py", True, "conciseness"),
}
NOT_CHECKED = "es_fine-tuning_countdown_accl.py"
PAPER_SIGMA, PAPER_ALPHA = 0.001, 0.0005
#: the rows set the scripts' initial_seed (33 in the scripts) to another value: a script that ignores its
#: constant shows in the seeds
INITIAL_SEED = 7
#: the loop rows: small, but with batches of two copies and more than one batch per iteration
POPULATION, ITERATIONS, GPU_THREADS, DATA_SAMPLE = 6, 2, 2, 3
DTYPES = ("f32", "f16", "bf16")


def script_rel(clone: Path, op: str) -> str:
    """The script of `op` relative to the clone: in archive/ (es-at-scale) or at the root (a fork)."""
    name = SCRIPTS[op][0]
    return f"archive/{name}" if (Path(clone) / "archive" / name).is_file() else name


class EsPaper(Adapter):
    name = "es-paper"
    summary = "es-paper: the paper's original scripts (archive/ of es-at-scale, or an es-fine-tuning-paper fork)"
    env_var = "ESVERIFY_PAPER_REF"
    default_path = "refs/es-fine-tuning-paper"
    driver = str(Path(__file__).with_name("child") / "driver.py")
    licence = "LICENSE.txt"
    validated_commit = "574a9d1"
    files = {op: f"archive/{spec[0]}" for op, spec in SCRIPTS.items()}
    ops_need = {}
    profile = "es-paper"
    ops = ()
    loop_ops = tuple(SCRIPTS)
    #: the code paths a run can reach, by what selects them (esverify.oracle.run_paths)
    paths = (
        ("the countdown scripts", "main-countdown*", ("*/main-countdown*",)),
        ("the conciseness scripts", "main-conciseness*", ("*/main-conciseness*",)),
        ("a stream per tensor (the _iid scripts)", "scheme iid", ("*-iid/*",)),
        ("two model copies (each copy's restore drift)", "--gpu_threads 2", ("*/N6", "*/N6/native")),
        ("one model copy", "--gpu_threads 1", ("*/threads1",)),
        ("a NaN reward for every member (normalised to NaN, applied)", "rewards nan", ("*/nan",)),
        ("torch's own generator", "native noise", ("*/native",)),
        ("f16 weights", "dtype f16", ("*/f16/*",)),
        ("bf16 weights", "dtype bf16", ("*/bf16/*",)),
    )
    reached = {f"archive/{spec[0]}": ["main", "process_seed"] for spec in SCRIPTS.values()}
    computes = {op: [f"archive/{spec[0]}::main"] for op, spec in SCRIPTS.items()}
    findings = {
        "restore-drift": "the scripts restore a member with add_(-SIGMA * noise), which is not exact in the "
                         "parameter dtype: each model copy carries the rounding drift of the members it served "
                         "into the next member and into the update (copy 0)",
        "iid-overlap": "the _iid scripts seed parameter k with seed + k: two members whose seeds differ by less "
                       "than the parameter count share noise streams",
    }

    # ------------------------------------------------------------- the clone
    @staticmethod
    def initial_seed(case) -> int:
        """The `initial_seed` the row sets on the script (numpy's legacy seed of its schedule)."""
        return int(case.extra.get("initial_seed", INITIAL_SEED))

    @staticmethod
    def iid(op: str) -> bool:
        """Whether the script of `op` is an `_iid` one (seed + k per parameter)."""
        return SCRIPTS[op][1]

    def layout(self, path: Path) -> dict:
        """The scripts as this clone has them (archive/ or the root)."""
        return {op: script_rel(path, op) for op in SCRIPTS}

    def recognise(self, path: Path) -> str | None:
        path = Path(path)
        if not path.is_dir():
            return f"{path} is not a directory"
        if any((path / rel).is_file() for rel in self.layout(path).values()):
            return None
        return f"{path} holds none of the paper's scripts ({', '.join(s[0] for s in SCRIPTS.values())}) in archive/ " \
               "or at its root"

    def looks_for(self) -> str:
        return "the paper's scripts es_fine-tuning_*.py in archive/ or at the root"

    def module_key(self, case):
        return case.op      # the script of the row (its file key in `files`)

    def how_to_give(self) -> str:
        return f"--ref PATH (an es-at-scale clone or an es-fine-tuning-paper fork) or set ${self.env_var}"

    def not_checked(self, loops_left_out: bool = False) -> str:
        return ", ".join(self.loop_ops) + f" ({NOT_CHECKED}, the vLLM version, is never checked)"

    def never_checked(self) -> list[tuple[str, str]]:
        return [(NOT_CHECKED, "the vLLM version of the countdown script (with utils/worker_extn.py): esverify "
                              "drives the four plain scripts only (docs/references.md §6)")]

    # ------------------------------------------------------------- cases
    def cases(self, matrix) -> list:
        if not matrix.loops:
            return []
        sigma = PAPER_SIGMA if matrix.sigma is None else matrix.sigma
        alpha = PAPER_ALPHA if matrix.alpha is None else matrix.alpha
        out = []
        for device in matrix.devices:
            for noise in matrix.noises:
                for dtype in [d for d in DTYPES if d in matrix.dtypes]:
                    for op, (_, iid, _) in SCRIPTS.items():
                        scheme = "iid" if iid else "correlated"
                        if scheme not in matrix.schemes:
                            continue
                        out.append(self._case(device, dtype, scheme, op, noise, sigma, alpha, matrix.iterations))
            for op, (_, iid, _) in SCRIPTS.items():   # one model copy: no drift carried between members
                scheme = "iid" if iid else "correlated"
                if "f32" in matrix.dtypes and scheme in matrix.schemes and "contract" in matrix.noises:
                    out.append(self._case(device, "f32", scheme, op, "contract", sigma, alpha, matrix.iterations,
                                          threads=1))
            if "f32" in matrix.dtypes and "correlated" in matrix.schemes and "contract" in matrix.noises:
                # a NaN reward for every member (docs/parity.md, "Reward populations"): normalised to NaN, applied
                case = self._case(device, "f32", "correlated", "main-countdown", "contract", sigma, alpha,
                                  matrix.iterations)
                out.append(dataclasses.replace(case, extra={**case.extra, "rewards": "nan"}, tag="nan"))
        return out

    def _case(self, device, dtype, scheme, op, noise, sigma, alpha, iterations, threads=GPU_THREADS,
              population=POPULATION):
        extra = {"iterations": min(int(iterations), ITERATIONS) if iterations else ITERATIONS,
                 "gpu_threads": threads}
        return Case(self.name, device, dtype, scheme, op, population, sigma, alpha, False, extra,
                    tag="" if threads == GPU_THREADS else f"threads{threads}", noise=noise)

    def check_case(self, case) -> None:
        if case.op not in SCRIPTS:
            raise ValueError(f"case: op {case.op!r} is not an op of target {case.target!r} (one of {list(SCRIPTS)})")
        want = "iid" if SCRIPTS[case.op][1] else "correlated"
        if case.scheme != want:
            raise ValueError(f"case: {case.op} runs the scheme {want!r}, not {case.scheme!r}")
        if case.dtype not in DTYPES:
            raise ValueError(f"case: dtype {case.dtype!r}; the scripts run f32, f16 or bf16 (--precision)")
        if int(case.extra.get("gpu_threads", GPU_THREADS)) < 1:
            raise ValueError("case: gpu_threads must be >= 1")

    def random_case(self, rng, device: str, noises, iterations: int = 2):
        op = list(SCRIPTS)[int(rng.integers(len(SCRIPTS)))]
        dtype = DTYPES[int(rng.integers(len(DTYPES)))]
        noise = list(noises)[int(rng.integers(len(noises)))]
        return self._case(device, dtype, "iid" if SCRIPTS[op][1] else "correlated", op, noise, PAPER_SIGMA,
                          PAPER_ALPHA, iterations, threads=int(rng.integers(1, 4)),
                          population=int(rng.integers(2, 9)))

    def shrink_candidates(self, case) -> list:
        from dataclasses import replace
        out = whole_loop_shrink_candidates(case)
        if int(case.extra.get("gpu_threads", GPU_THREADS)) > 1:
            out.append(replace(case, extra={**case.extra, "gpu_threads": 1}, tag="threads1"))
        return out

    # ------------------------------------------------------------- a row
    def run_row(self, session, case):   # an Outcome: esverify.oracle.verdict judges it
        from . import rows as paper_rows
        return paper_rows.run_row(self, session, case)


ADAPTER = EsPaper()
