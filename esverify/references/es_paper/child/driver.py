"""Oracle driver for the ES-at-scale paper's original scripts (docs/references.md §6), run by path in the child.

Usage (by the runner only): `python driver.py --clone PATH --reply-fd N`. PATH is an
es-at-scale clone (the scripts in `archive/`) or a clone or fork of es-fine-tuning-paper (the
scripts at its root); each command names the script it runs (`script`, relative to the clone).

One op, `paper-main`: `main()` of one script, driven as a user runs it, with only the seams of
docs/references.md §6 replaced for the duration of the row:
- stand-in `transformers` (`AutoModelForCausalLM.from_pretrained` returns a stand-in model of the
  case's parameter set, one per call, each with `named_parameters()`, `parameters()`,
  `get_parameter(name)`, `eval()` and `save_pretrained(path)`; a tokenizer with `from_pretrained`
  and `save_pretrained`; `transformers.utils.logging`), stand-in `accelerate.Accelerator`
  (`process_index` 0, `num_processes` 1, `is_main_process` True, `device` cpu) and a stand-in
  `countdown_task` module (never asked to grade: `evaluate_model` is replaced);
- `sys.argv` set for the import (the scripts parse their command line at import time), the module
  constants (`NUM_ITERATIONS`, `POPULATION_SIZE`, `SIGMA`, `ALPHA`, `initial_seed`) set after it,
  `evaluate_model` replaced by the runner's reward of the model's current parameters (one value per
  prompt), the script's source executed with `__file__` in a scratch folder holding its own
  `data/countdown.json` and the working directory there (the scripts write their model folders
  relative to it). The code object keeps the clone's file name, so coverage and tracebacks name the
  clone's lines.
Noise: `native` leaves torch's generator alone (the scripts seed a new generator per parameter with
the 30-bit seeds their numpy schedule draws); `contract` maps the generator seed to the contract
stream of that u64 member seed (`correlated`: every parameter draws the member's stream; the `_iid`
scripts' `seed + k` is member `seed`'s iid stream of slot k, looked up in the table of the seeds the
parent's schedule expects; any other seed is taken as a member seed of its own and reported as
foreign). The members run in the script's own threads on several model copies at once, so the hook
is given a resolver instead of a slot cursor.

The reply's tape: per iteration the seeds drawn (np.random.randint, recorded and passed through),
the parameters of model copy 0 when the iteration starts (one .npz each), the rewards the seam
returned (copy, member index, reward, prompts); the final parameters of copy 0, and what
`save_pretrained` wrote. Never imported by esverify.
"""
from __future__ import annotations

import collections
import gc
import json
import os
import shutil
import sys
import threading
import types
from pathlib import Path

import numpy as np
import torch

from child_server import (HOOK, ReferenceLoadError, load_set, reward, save_results,
                          serve, syntax_error)

import child_loops as loops
import loop_stubs
from loop_seams import Seams

SCRIPTS = ("es_fine-tuning_countdown.py", "es_fine-tuning_countdown_iid.py", "es_fine-tuning_conciseness.py",
           "es_fine-tuning_conciseness_iid.py")
PRECISION = {"f32": "fp32", "f16": "fp16", "bf16": "bf16"}
DTYPES = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}
_LOADED = {"count": 0}


def layout_base(clone: Path) -> str:
    """The manifest's folder prefix this clone lacks: "" when the scripts sit in archive/ (an es-at-scale
    clone, as the manifest lists them), "archive/" when they are at the root (a fork)."""
    return "" if any((clone / "archive" / s).is_file() for s in SCRIPTS) else "archive/"


def load_modules(clone):
    base = layout_base(clone)
    loops.start(clone, "es-paper", base=base, also=("accelerate", "countdown_task"))
    return {}      # each row imports its script afresh: the scripts parse their command line at import


# ----------------------------------------------------------------- stand-ins of the row

class PaperModel(loops.LoopModel):
    """A stand-in causal LM: the case's parameter set as an nn.Module, plus what the scripts call."""

    def __init__(self, names, tensors, saves):
        super().__init__(names, tensors)
        self._saves = saves

    def save_pretrained(self, path, *args, **kwargs):
        folder = Path(path)
        folder.mkdir(parents=True, exist_ok=True)
        save_results(folder / "esverify-standin-weights.npz", self.tensors)
        self._saves.append(str(folder))


class PaperTokenizer(loop_stubs.Tokenizer):
    def save_pretrained(self, path, *args, **kwargs):
        Path(path).mkdir(parents=True, exist_ok=True)


class Accelerator(loop_stubs.Inert):
    """accelerate.Accelerator on one CPU process (docs/references.md §6)."""
    process_index = 0
    local_process_index = 0
    num_processes = 1
    is_main_process = True
    is_local_main_process = True
    device = torch.device("cpu")

    def wait_for_everyone(self, *args, **kwargs):
        return None


def _reward_function(*args, **kwargs):
    raise RuntimeError("the stand-in countdown_task.reward_function was called: esverify replaces "
                       "evaluate_model, which is expected to be the only grader (docs/references.md §6)")


class Row:
    """What one paper-main row shares between its seams (models made, rewards given, seeds drawn)."""

    def __init__(self, case, out: Path):
        self.case, self.out = case, out
        self.names, self.tensors = load_set(case["set"], case["device"])
        self.models: list = []
        self.saves: list = []
        self.members: list = []
        self.iterations: list = []
        self.notes: list = []
        self.lock = threading.Lock()

    def from_pretrained(self, model_name=None, *args, torch_dtype=None, **kwargs):
        tensors = [t.clone() for t in self.tensors]
        if torch_dtype is not None and any(t.dtype != torch_dtype for t in tensors):
            self.notes.append(f"from_pretrained asked for {torch_dtype}; the set's tensors were converted")
            tensors = [t.to(torch_dtype) for t in tensors]
        model = PaperModel(self.names, tensors, self.saves)
        with self.lock:
            self.models.append(model)
        return model

    def evaluate_model(self, model, tokenizer, input_text, target_text, accelerator, seed_idx=None,
                       thread_id=None, verbose=False, return_text=False):
        prompts = list(input_text) if isinstance(input_text, (list, tuple)) else [input_text]
        value = reward(model.tensors, float(self.case["reward_target"]))
        copy = next((k for k, m in enumerate(self.models) if m is model), None)
        with self.lock:
            self.members.append({"copy": copy, "seed_idx": None if seed_idx is None else int(seed_idx),
                                 "thread_id": None if thread_id is None else int(thread_id), "reward": value,
                                 "prompts": len(prompts), "iteration": len(self.iterations) - 1})
        rewards = [value] * len(prompts)
        return (rewards, [repr(value)] * len(prompts)) if return_text else rewards

    def recording_randint(self, original):
        def randint(*args, **kwargs):
            drawn = original(*args, **kwargs)
            number = len(self.iterations)
            path = self.out / f"theirs-iteration-{number:03d}.npz"
            if self.models:
                save_results(path, self.models[0].tensors)
            self.iterations.append({"seeds": [int(v) for v in np.asarray(drawn).reshape(-1)],
                                    "params": str(path) if self.models else None})
            return drawn
        return randint


def _resolver(case):
    """handle -> (member seed, slot) for contract noise (see the module docstring)."""
    iid = case["scheme"] == "iid"
    table = {int(h): (int(s), int(k)) for h, s, k in case.get("iid_table", [])} if iid else {}
    foreign = []

    def resolve(handle):
        if not iid:
            return handle, 0
        if handle in table:
            return table[handle]
        foreign.append(handle)
        return handle, 0
    resolve.foreign = foreign
    return resolve


def _load_script(clone: Path, rel: str, scratch: Path, name: str):
    """Execute the clone's script as a module whose __file__ is in the scratch folder."""
    path = clone / rel
    if not path.is_file():
        raise ReferenceLoadError({"kind": "missing", "file": rel, "message": f"file missing in the clone: {rel}"})
    source = path.read_text(encoding="utf-8")
    try:
        code = compile(source, str(path), "exec")
    except SyntaxError as exc:
        raise syntax_error(exc, rel) from None
    module = types.ModuleType(name)
    # __file__ in the scratch folder (the script finds its data file there); a symbolic link to the clone's
    # file, so that coverage.py, which resolves __file__, counts the clone's own lines
    shown = scratch / path.name
    try:
        shown.symlink_to(path)
    except OSError:
        shown.write_text(source, encoding="utf-8")
    module.__file__ = str(shown)
    sys.modules[name] = module
    try:
        exec(code, module.__dict__)
    except SystemExit as exc:
        raise RuntimeError(f"{rel}: its argument parser exited with status {exc.code} on the command line "
                           f"{' '.join(sys.argv[1:])} (its message is in the child's log)") from None
    return module


def _audit(case, draws, resolve) -> dict:
    """Per seed: draws per slot against perturb + restore + update (three per parameter per member)."""
    if case.get("noise") == "native":
        return {"ok": True, "calls": []}
    expected_per = 3     # perturb, restore, update
    counts = collections.Counter((h, s) for h, s, _, _ in draws)
    calls = []
    advanced = [{"slot": s, "name": f"slot{s}", "position": p} for _, s, p, _ in draws if p]
    odd = sorted({s for (h, s), c in counts.items() if c % expected_per})
    finding = {"call": "main()", "draws": len(draws), "expected": sum(counts.values())}
    if advanced:
        finding["advanced"], finding["advanced_count"] = advanced[:8], len(advanced)
    if odd:
        finding["extra"] = [{"slot": s, "name": f"slot{s}"} for s in odd]
    if resolve.foreign:
        finding["foreign"] = [{"entry": "torch.randn", "seed": h, "slot": None, "name": ""}
                              for h in sorted(set(resolve.foreign))[:8]]
        finding["foreign_count"] = len(resolve.foreign)
    if len(finding) > 3:
        calls.append(finding)
    return {"ok": not calls, "calls": calls}


def op_paper_main(case, modules):
    clone = loops.STATE["clone"]
    rel = case["script"]
    out = Path(case["out"])
    scratch = out / "scratch"
    if scratch.exists():
        shutil.rmtree(scratch)
    (scratch / "data").mkdir(parents=True)
    (scratch / "data" / "countdown.json").write_text(json.dumps(case.get("data") or []))
    row = Row(case, out)
    _LOADED["count"] += 1
    name = f"esverify_paper_script_{_LOADED['count']}"
    transformers = __import__("transformers")
    utils_logging = __import__("transformers.utils.logging", fromlist=["logging"])
    accelerate = __import__("accelerate")
    countdown_task = __import__("countdown_task")
    resolve = _resolver(case)
    settings = {}
    cwd = os.getcwd()
    with Seams() as seams:
        before = seams.settings()
        seams.set(transformers, "AutoModelForCausalLM", types.SimpleNamespace(from_pretrained=row.from_pretrained))
        seams.set(transformers, "AutoTokenizer", types.SimpleNamespace(
            from_pretrained=lambda *a, **k: PaperTokenizer()))
        seams.set(utils_logging, "set_verbosity_error", lambda *a, **k: None)
        seams.set(accelerate, "Accelerator", Accelerator)
        seams.set(countdown_task, "reward_function", _reward_function)
        seams.set(np.random, "randint", row.recording_randint(np.random.randint))
        sys.argv[:] = [Path(rel).name, "--model_name", "stand-in", "--hf_cache_dir", str(scratch / "hf_cache"),
                       "--precision", PRECISION[case["dtype"]], "--gpu_threads", str(int(case["gpu_threads"]))]
        if "countdown" in Path(rel).name:
            sys.argv += ["--data_sample", str(int(case["data_sample"]))]
        HOOK.configure(None, {}, case["scheme"], case["mapping"], case["backend"], case.get("noise", "contract"),
                       resolver=resolve)
        HOOK.draws = []
        os.chdir(scratch)
        try:
            with loops.Noise(case):
                module = loops.run_op("paper-main", lambda: _load_script(clone, rel, scratch, name))
                for constant, value in (("NUM_ITERATIONS", case["iterations"]), ("POPULATION_SIZE", case["population"]),
                                        ("SIGMA", case["sigma"]), ("ALPHA", case["alpha"]),
                                        ("initial_seed", case["initial_seed"])):
                    if not hasattr(module, constant):
                        raise RuntimeError(f"esverify could not drive this clone: {rel} has no module constant "
                                           f"{constant}, which esverify sets before calling main() "
                                           "(docs/references.md §6)")
                    setattr(module, constant, value)
                if not hasattr(module, "evaluate_model"):
                    raise RuntimeError(f"esverify could not drive this clone: {rel} has no evaluate_model, "
                                       "which esverify replaces with the runner's reward (docs/references.md §6)")
                module.evaluate_model = row.evaluate_model
                settings = loops.reference_settings(seams, before)
                # the scripts collect garbage per member (force_memory_cleanup); the child's own heap (torch,
                # numpy, esverify) is moved out of the collector's reach so each collection only scans what
                # the script made since: same behaviour, a fraction of the time
                gc.freeze()
                loops.run_op("paper-main", module.main, callee=getattr(module, "main", None))
        finally:
            os.chdir(cwd)
            sys.modules.pop(name, None)
    draws, HOOK.draws = HOOK.draws, []
    if not row.models:
        raise RuntimeError(f"{rel}: main() never called AutoModelForCausalLM.from_pretrained: no model ran")
    final = out / "theirs-final.npz"
    save_results(final, row.models[0].tensors)
    dataset_sizes = sorted({m["prompts"] for m in row.members})
    tape = {"iterations": row.iterations, "members": row.members, "copies": len(row.models),
            "saved": row.saves, "prompts": dataset_sizes, "notes": row.notes,
            "module_dataset": len(module.dataset) if isinstance(getattr(module, "dataset", None), list) else None}
    return {"results": str(final), "tape": tape, "attribution": _audit(case, draws, resolve), "settings": settings}


if __name__ == "__main__":
    serve("es-paper", load_modules, loops.with_coverage({"paper-main": op_paper_main}), threads=1)
