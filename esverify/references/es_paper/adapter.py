"""The es-paper reference spec: the ES-at-scale paper's original single-file scripts (docs/references.md §6).

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
It is an esverify.oracle.spec.ReferenceSpec (`ADAPTER`): its clone's
layout and its cases are its own (the spec's optional clone and ops
callables), its rows rows.run_row's.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path

from esverify.oracle.case_model import Case, whole_loop_shrink_candidates
from esverify.oracle.spec import CloneSpec, OpsSpec, ReferenceSpec, ReportTexts

from .scripts import SCRIPTS, script_rel

NAME = "es-paper"
NOT_CHECKED = "es_fine-tuning_countdown_accl.py"
PAPER_SIGMA, PAPER_ALPHA = 0.001, 0.0005
#: the loop rows: small, but with batches of two copies and more than one batch per iteration
POPULATION, ITERATIONS, GPU_THREADS, DATA_SAMPLE = 6, 2, 2, 3
DTYPES = ("f32", "f16", "bf16")
ENV_VAR = "ESVERIFY_PAPER_REF"


# ------------------------------------------------------------- the clone

def layout(path: Path) -> dict:
    """The scripts as this clone has them (archive/ or the root)."""
    return {op: script_rel(path, op) for op in SCRIPTS}


def recognise(path: Path) -> str | None:
    """None when `path` holds one of the scripts in archive/ or at its root; else why it is no clone."""
    path = Path(path)
    if not path.is_dir():
        return f"{path} is not a directory"
    if any((path / rel).is_file() for rel in layout(path).values()):
        return None
    return f"{path} holds none of the paper's scripts ({', '.join(s[0] for s in SCRIPTS.values())}) in archive/ " \
           "or at its root"


# ------------------------------------------------------------- cases

def cases(matrix) -> list:
    """The rows of `matrix` (an esverify.oracle.adapters.MatrixSpec): per device, each script in each dtype and
    noise with two model copies, one single-copy row per script, and a NaN reward row; none without loops."""
    if not matrix.loops:
        return []
    sigma = PAPER_SIGMA if matrix.sigma is None else matrix.sigma
    alpha = PAPER_ALPHA if matrix.alpha is None else matrix.alpha
    out = []
    for device in matrix.devices:
        for noise in matrix.noises:
            for dtype in [d for d in DTYPES if d in matrix.dtypes]:
                for op, (_, is_iid, _) in SCRIPTS.items():
                    scheme = "iid" if is_iid else "correlated"
                    if scheme not in matrix.schemes:
                        continue
                    out.append(row_case(device, dtype, scheme, op, noise, sigma, alpha, matrix.iterations))
        for op, (_, is_iid, _) in SCRIPTS.items():   # one model copy: no drift carried between members
            scheme = "iid" if is_iid else "correlated"
            if "f32" in matrix.dtypes and scheme in matrix.schemes and "contract" in matrix.noises:
                out.append(row_case(device, "f32", scheme, op, "contract", sigma, alpha, matrix.iterations,
                                    threads=1))
        if "f32" in matrix.dtypes and "correlated" in matrix.schemes and "contract" in matrix.noises:
            # a NaN reward for every member (docs/parity.md, "Reward populations"): normalised to NaN, applied
            case = row_case(device, "f32", "correlated", "main-countdown", "contract", sigma, alpha,
                            matrix.iterations)
            out.append(dataclasses.replace(case, extra={**case.extra, "rewards": "nan"}, tag="nan"))
    return out


def row_case(device, dtype, scheme, op, noise, sigma, alpha, iterations, threads=GPU_THREADS,
             population=POPULATION) -> Case:
    """One row: the script of `op` for at most ITERATIONS iterations on `threads` model copies."""
    extra = {"iterations": min(int(iterations), ITERATIONS) if iterations else ITERATIONS,
             "gpu_threads": threads}
    return Case(NAME, device, dtype, scheme, op, population, sigma, alpha, False, extra,
                tag="" if threads == GPU_THREADS else f"threads{threads}", noise=noise)


def check_case(case) -> None:
    """ValueError when `case` is no row of a script: its op, the script's scheme, dtype, gpu_threads."""
    if case.op not in SCRIPTS:
        raise ValueError(f"case: op {case.op!r} is not an op of target {case.target!r} (one of {list(SCRIPTS)})")
    want = "iid" if SCRIPTS[case.op][1] else "correlated"
    if case.scheme != want:
        raise ValueError(f"case: {case.op} runs the scheme {want!r}, not {case.scheme!r}")
    if case.dtype not in DTYPES:
        raise ValueError(f"case: dtype {case.dtype!r}; the scripts run f32, f16 or bf16 (--precision)")
    if int(case.extra.get("gpu_threads", GPU_THREADS)) < 1:
        raise ValueError("case: gpu_threads must be >= 1")


def random_case(rng, device: str, noises, iterations: int = 2) -> Case:
    """One random row for `--fuzz`: a script, dtype, noise, 1 to 3 model copies, N from 2 to 8."""
    op = list(SCRIPTS)[int(rng.integers(len(SCRIPTS)))]
    dtype = DTYPES[int(rng.integers(len(DTYPES)))]
    noise = list(noises)[int(rng.integers(len(noises)))]
    return row_case(device, dtype, "iid" if SCRIPTS[op][1] else "correlated", op, noise, PAPER_SIGMA,
                    PAPER_ALPHA, iterations, threads=int(rng.integers(1, 4)), population=int(rng.integers(2, 9)))


def shrink_candidates(case) -> list:
    """The whole-loop shrinks, and one model copy instead of several."""
    out = whole_loop_shrink_candidates(case)
    if int(case.extra.get("gpu_threads", GPU_THREADS)) > 1:
        out.append(dataclasses.replace(case, extra={**case.extra, "gpu_threads": 1}, tag="threads1"))
    return out


def run_row(session, case):
    """An Outcome (esverify.oracle.verdict judges it): rows.run_row, imported when a row runs."""
    from . import rows
    return rows.run_row(session, case)


ADAPTER = ReferenceSpec(
    name=NAME,
    clone=CloneSpec(files={op: f"archive/{spec[0]}" for op, spec in SCRIPTS.items()},
                    needs={op: op for op in SCRIPTS},   # each row needs its own script
                    licence="LICENSE.txt", validated_commit="574a9d1", env_var=ENV_VAR,
                    default_path="refs/es-fine-tuning-paper", recognise=recognise, layout=layout,
                    looks_for="the paper's scripts es_fine-tuning_*.py in archive/ or at the root",
                    how_to_give=f"--ref PATH (an es-at-scale clone or an es-fine-tuning-paper fork) or set ${ENV_VAR}"),
    ops=OpsSpec(loops=tuple(SCRIPTS), matrix=cases, check=check_case, draw=random_case, shrink=shrink_candidates),
    driver=str(Path(__file__).with_name("child") / "driver.py"),
    profile="es-paper",
    texts=ReportTexts(
        summary="es-paper: the paper's original scripts (archive/ of es-at-scale, or an es-fine-tuning-paper fork)",
        reached={f"archive/{spec[0]}": ["main", "process_seed"] for spec in SCRIPTS.values()},
        computes={op: [f"archive/{spec[0]}::main"] for op, spec in SCRIPTS.items()},
        findings={
            "restore-drift": "the scripts restore a member with add_(-SIGMA * noise), which is not exact in the "
                             "parameter dtype: each model copy carries the rounding drift of the members it served "
                             "into the next member and into the update (copy 0)",
            "iid-overlap": "the _iid scripts seed parameter k with seed + k: two members whose seeds differ by less "
                           "than the parameter count share noise streams",
        },
        never_checked=((NOT_CHECKED, "the vLLM version of the countdown script (with utils/worker_extn.py): "
                                     "esverify drives the four plain scripts only (docs/references.md §6)"),),
        not_checked=f"{NOT_CHECKED}, the vLLM version, is never checked",
        paths=(
            ("the countdown scripts", "main-countdown*", ("*/main-countdown*",)),
            ("the conciseness scripts", "main-conciseness*", ("*/main-conciseness*",)),
            ("a stream per tensor (the _iid scripts)", "scheme iid", ("*-iid/*",)),
            ("two model copies (each copy's restore drift)", "--gpu_threads 2", ("*/N6", "*/N6/native")),
            ("one model copy", "--gpu_threads 1", ("*/threads1",)),
            ("a NaN reward for every member (normalised to NaN, applied)", "rewards nan", ("*/nan",)),
            ("torch's own generator", "native noise", ("*/native",)),
            ("f16 weights", "dtype f16", ("*/f16/*",)),
            ("bf16 weights", "dtype bf16", ("*/bf16/*",)),
        )),
    run_row=run_row,
)
