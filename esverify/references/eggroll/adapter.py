"""The eggroll spec: EGGROLL's low-rank ES trainer for vLLM (eggroll-vllm), run through its `main` (docs/references.md §8).

Design record: a clone is a folder whose `es_lora_multinode.py` defines
the worker extension (`WorkerExtension`) and the engine (`ESNcclLLM`).
Each row runs the trainer's `main(args)` in the child
(child/driver.py: Ray, vLLM, peft and the task are stand-ins;
the engine's reward is a sum of squares of the adapted weights, see
`rows.engine_reward`) and our `esverify.references.eggroll.lowrank.run_lowrank_loop`
on the same initial weights, and compares bit for bit (rows.py). What
the stand-in engine cannot show (GPU kernels, vLLM's own LoRA scaling,
tensor parallel > 1, MoE weight mappings) is listed as never checked.
The trainer's documented defects (docs/references.md §8) are findings,
each with the reference's line where its source shows it.

Rows: a small set over the settings that change the numbers: dtype
(f32/f16/bf16), rank (1, 2 and 10, above 8), engines (1, 2, 4), std
normalisation, lr scaled in the gradient, contract and native noise,
every row crossing an adapter generation boundary (steps_per_adapter 2,
3 steps), and a resume from a checkpoint in the middle of a generation.
It is an esverify.oracle.spec.ReferenceSpec (`ADAPTER`): its clone's
recognition and its cases are its own (the spec's optional clone and ops
callables), its rows rows.run_row's.
"""
from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

from esverify import pyast
from esverify.oracle.case_model import Case
from esverify.oracle.spec import CloneSpec, OpsSpec, ReferenceSpec, ReportTexts

NAME = "eggroll"
OP = "eggroll-main"
TRAINER = "es_lora_multinode.py"
TASKS = "tasks.py"
#: the classes a trainer file must define for the driver to run it
NEEDS = ("WorkerExtension", "ESNcclLLM")
DTYPES = ("f32", "f16", "bf16")
ENV_VAR = "ESVERIFY_EGGROLL_REF"
SIGMA, LR, POPULATION, STEPS, STEPS_PER_ADAPTER, BASE_SEED = 0.01, 0.05, 4, 3, 2, 3

#: (dtype, noise, rank, engines, normalize_with_std, scale_lr_in_grad, resume): the rows, 14 in all
ROWS = (
    ("f32", "contract", 1, 1, False, False, False),
    ("f32", "native", 1, 1, False, False, False),
    ("f16", "contract", 1, 2, False, False, False),
    ("f16", "native", 2, 2, True, False, False),
    ("bf16", "contract", 2, 1, False, False, False),
    ("bf16", "native", 2, 2, True, False, False),
    ("f32", "contract", 2, 4, True, False, False),
    ("f32", "native", 10, 1, True, False, False),
    ("f16", "contract", 10, 2, False, True, False),
    ("f32", "native", 2, 2, False, True, False),
    ("bf16", "contract", 1, 4, True, True, False),
    ("f16", "native", 1, 4, True, False, False),
    ("f32", "contract", 2, 2, False, False, True),
    ("bf16", "native", 2, 2, True, False, True),
)
#: rows that reach the update's later chunks (docs/references.md §8: pairs in consecutive chunks of the
#: chunk size): (dtype, noise, rank, engines, normalize_with_std, scale_lr_in_grad, resume, chunk size,
#: population); 5 pairs in chunks of 2 is three chunks, the last one short, on the rank-1 path (one matrix
#: product per chunk) and the rank > 1 one (batched products summed per chunk)
CHUNK_ROWS = (
    ("f32", "contract", 1, 2, False, False, False, 2, 10),
    ("bf16", "native", 3, 2, True, False, False, 2, 10),
)
#: a row of a non-finite reward population: the first prompt's target NaN, so every member's reward on it is
#: NaN, the shaped fitnesses and the update too (docs/parity.md, "Reward populations"): (dtype, noise, rank,
#: engines, normalize_with_std, rewards)
NONFINITE_ROWS = (
    ("f32", "contract", 1, 2, True, "nan"),
)


def defines(path: Path, names=NEEDS) -> list[str]:
    """The names of `names` that the Python file `path` defines at top level (class or function); [] when it
    cannot be read or parsed."""
    try:
        tree = pyast.parse(Path(path).read_text(encoding="utf-8"))
    except (OSError, SyntaxError, ValueError, UnicodeDecodeError):
        return []
    top = {n.name for n in tree.body if isinstance(n, (ast.ClassDef, ast.FunctionDef))}
    return [n for n in names if n in top]


def row_tag(rank, engines, std, scale_lr, resume, chunk=None, rewards=None) -> str:
    """The case id's tag of one row: r<rank>-e<engines>[-std][-lrgrad][-resume][-chunk<c>][-<rewards>]."""
    return f"r{rank}-e{engines}" + ("-std" if std else "") + ("-lrgrad" if scale_lr else "") + \
        ("-resume" if resume else "") + (f"-chunk{chunk}" if chunk is not None else "") + \
        (f"-{rewards}" if rewards else "")


def recognise(path: Path) -> str | None:
    """None when the folder `path` has a trainer file defining the classes the driver runs; else why not."""
    path = Path(path)
    if not path.is_dir():
        return f"{path} is not a directory"
    trainer = path / TRAINER
    if not trainer.is_file():
        has = [p.name for p in (path / TASKS, path / "es_lora_multinode_moe.py") if p.is_file()]
        if has:
            return f"{path} has {', '.join(has)} but no {TRAINER}: not an eggroll-vllm clone"
        return f"{path} is not a clone of eggroll: no {TRAINER} there"
    lacks = [n for n in NEEDS if n not in defines(trainer)]
    if lacks:
        return f"{path / TRAINER} defines no {' and no '.join(lacks)}: not an eggroll-vllm trainer"
    return None


# ------------------------------------------------------------- cases

def cases(matrix) -> list:
    """The rows of `matrix` (an esverify.oracle.adapters.MatrixSpec) on the CPU (the stand-in engines run
    there): ROWS, CHUNK_ROWS and NONFINITE_ROWS in the matrix's dtypes and noises; none without loops or
    without the correlated scheme."""
    if not matrix.loops or "correlated" not in matrix.schemes:
        return []
    sigma = SIGMA if matrix.sigma is None else matrix.sigma
    lr = LR if matrix.alpha is None else matrix.alpha
    out = []
    for device in [d for d in matrix.devices if d == "cpu"]:   # the stand-in engines run on the CPU
        for dtype, noise, rank, engines, std, scale_lr, resume in ROWS:
            if dtype in matrix.dtypes and noise in matrix.noises:
                out.append(row_case(device, dtype, noise, rank, engines, std, scale_lr, resume, sigma, lr))
        for dtype, noise, rank, engines, std, scale_lr, resume, chunk, population in CHUNK_ROWS:
            if dtype in matrix.dtypes and noise in matrix.noises:
                out.append(row_case(device, dtype, noise, rank, engines, std, scale_lr, resume, sigma, lr,
                                    population=population, chunk_size=chunk))
        for dtype, noise, rank, engines, std, rewards in NONFINITE_ROWS:
            if dtype in matrix.dtypes and noise in matrix.noises:
                out.append(row_case(device, dtype, noise, rank, engines, std, False, False, sigma, lr,
                                    rewards=rewards))
    return out


def row_case(device, dtype, noise, rank, engines, std, scale_lr, resume, sigma=SIGMA, lr=LR,
             population=POPULATION, steps=STEPS, steps_per_adapter=STEPS_PER_ADAPTER, chunk_size=None,
             rewards=None) -> Case:
    """One row of the trainer's settings (a resume row: 4 steps per adapter, so the checkpoint falls inside a
    generation)."""
    extra = {"iterations": steps, "rank": rank, "engines": engines, "normalize_with_std": std,
             "scale_lr_in_grad": scale_lr, "steps_per_adapter": 4 if resume else steps_per_adapter,
             "resume": resume, "base_seed": BASE_SEED}
    if chunk_size is not None:   # the trainer's --es-update-chunk-size (None: its default by rank)
        extra["chunk_size"] = int(chunk_size)
    if rewards is not None:      # a non-finite reward population (esverify.oracle.rewards.NONFINITE)
        extra["rewards"] = rewards
    return Case(NAME, device, dtype, "correlated", OP, population, float(sigma), float(lr), False, extra,
                tag=row_tag(rank, engines, std, scale_lr, resume, chunk_size, rewards), noise=noise)


def check_case(case) -> None:
    """ValueError when `case` is no row of the trainer: its op, the correlated scheme, its dtype, a population
    the engines divide into pairs."""
    if case.op != OP:
        raise ValueError(f"case: op {case.op!r} is not an op of target {case.target!r} (only {OP})")
    if case.scheme != "correlated":
        raise ValueError("case: the trainer draws one low-rank pair per weight: scheme 'correlated' only")
    if case.dtype not in DTYPES:
        raise ValueError(f"case: dtype {case.dtype!r}; the trainer's weights are f32, f16 or bf16")
    if case.population % 2 or case.population % int(case.extra.get("engines", 1)):
        raise ValueError(f"case: population {case.population} must be even and divisible by the engine count")


def random_case(rng, device: str, noises, iterations: int = 2) -> Case:
    """One random row for `--fuzz`, on the CPU: engines, noise, dtype, rank 1 to 4, std and lr-in-grad."""
    engines = (1, 2, 4)[int(rng.integers(3))]
    noise = list(noises)[int(rng.integers(len(noises)))]
    return row_case("cpu", DTYPES[int(rng.integers(3))], noise, int(rng.integers(1, 5)), engines,
                    bool(rng.integers(2)), bool(rng.integers(2)), False, steps=max(1, int(iterations)))


def shrink_candidates(case) -> list:
    """One step fewer, and rank 1."""
    out = []
    if case.iterations > 1:
        out.append(dataclasses.replace(case, extra={**case.extra, "iterations": case.iterations - 1}))
    if int(case.extra.get("rank", 1)) > 1:
        out.append(dataclasses.replace(case, extra={**case.extra, "rank": 1},
                                       tag=row_tag(1, case.extra.get("engines", 1),
                                                   case.extra.get("normalize_with_std"),
                                                   case.extra.get("scale_lr_in_grad"), case.extra.get("resume"),
                                                   case.extra.get("chunk_size"))))
    return out


def run_row(session, case):
    """An Outcome (esverify.oracle.verdict judges it): rows.run_row, imported when a row runs."""
    from . import rows
    return rows.run_row(session, case)


ADAPTER = ReferenceSpec(
    name=NAME,
    clone=CloneSpec(files={"trainer": TRAINER}, needs={OP: "trainer"}, licence="LICENSE",
                    # docs/references.md §8: the authors' "Create LICENSE" commit; HEAD 15cc51c leaves the ES
                    # code unchanged
                    validated_commit="bcc215e", env_var=ENV_VAR, default_path="refs/eggroll-vllm",
                    # the child reads and writes the adapter and checkpoint files with safetensors (docs/parity.md)
                    child_needs=("safetensors",),
                    recognise=recognise, looks_for=f"{TRAINER} defining {' and '.join(NEEDS)}",
                    how_to_give=f"--ref PATH (an eggroll-vllm clone) or set ${ENV_VAR}"),
    ops=OpsSpec(loops=(OP,), matrix=cases, check=check_case, draw=random_case, shrink=shrink_candidates),
    driver=str(Path(__file__).with_name("child") / "driver.py"),
    profile="lowrank",
    texts=ReportTexts(
        summary="eggroll: EGGROLL's low-rank ES trainer for vLLM (es_lora_multinode.py), driven through main()",
        reached={TRAINER: ["main", "get_rng_noise", "ESNcclLLM.generate_local_adapters",
                           "WorkerExtension.apply_lora_es_update", "load_checkpoint"]},
        findings={
            "get-fitness-signature": "the loop calls get_fitness with four arguments, but tasks.py defines task "
                                     "classes whose get_fitness takes fewer: those tasks raise TypeError at their "
                                     "first scored request",
            "tasks-import": "tasks.py imports, at its top, modules that neither the clone ships nor this interpreter "
                            "has (egg_img among them): importing the trainer fails before any step unless they "
                            "are installed",
            "shared-seed-streams": "noise generator seeds are base_seed + P·L·s + L·k + l: two runs whose base_seed "
                                   "values differ by less than the number of seeds a run uses share noise streams",
            "adapters-in-dev-shm": "adapters are written to /dev/shm by default (a module-level path): a machine "
                                   "with a small /dev/shm fails, and two runs on one machine overwrite each other's "
                                   "adapters",
            "f16-adapters-f32-update": "members are evaluated with f16 adapter factors (B·A in f16), but the update "
                                       "uses the f32 noise: the step follows noise the members were not evaluated "
                                       "with (the f16 rounding of A and B)",
            "failing-add-skipped": "an update whose add fails on an engine prints 'ERROR updating' and goes on: that "
                                   "weight keeps its old value and the run reports no error",
        },
        never_checked=(
            ("GPU kernels", "the rows run the trainer on CPU with stand-in engines: the GPU's matmul and add kernels "
                            "are never executed"),
            ("vLLM's LoRA scaling", "the stand-in engine adds B·A once, unscaled; how real vLLM scales and applies "
                                    "the adapter (alpha / r, punica kernels) is not executed"),
            ("vLLM's adapter dtype", "the stand-in engine serves an adapter in the dtype its file holds; real vLLM "
                                     "casts it to its own LoRA dtype (the model's by default): what it does with an "
                                     "adapter of another dtype than f16 is not executed"),
            ("tensor parallel > 1", "every row runs tensor parallel size 1 (one weight shard per engine)"),
            ("MoE mappings", "es_lora_multinode_moe.py's expert weight mappings are not driven by any row")),
        paths=(
            ("rank-1 update (one matrix product per chunk)", "lora_r 1", ("*/r1-*",)),
            ("rank > 1 update (batched products summed per chunk)", "lora_r 2, 3, 10",
             ("*/r[2-9]-*", "*/r1[0-9]-*")),
            ("one update chunk", "2 pairs, the chunk size from the rank", ("*/N4/*",)),
            ("several update chunks, the last one short", "--es-update-chunk-size 2 at 5 pairs", ("*-chunk*",)),
            ("NaN rewards (every shaped fitness and the update NaN)", "rewards nan", ("*-nan",)),
            ("1 engine", "engines 1", ("*-e1", "*-e1-*")),
            ("2 engines", "engines 2", ("*-e2", "*-e2-*")),
            ("4 engines", "engines 4", ("*-e4", "*-e4-*")),
            ("fitnesses normalised by their std", "--normalize-with-std", ("*-std*",)),
            ("lr scaled in the gradient", "--scale-lr-in-grad", ("*-lrgrad*",)),
            ("resume mid-generation from a checkpoint", "--resume-from", ("*-resume*",)),
            ("contract noise through the hook", "contract noise", ("*/eggroll-main/N[0-9]/r*",
                                                                   "*/eggroll-main/N[0-9][0-9]/r*")),
            ("torch's own generator", "native noise", ("*/native/*",)),
            ("f16 weights", "dtype f16", ("*/f16/*",)),
            ("bf16 weights", "dtype bf16", ("*/bf16/*",)),
        )),
    run_row=run_row,
)
