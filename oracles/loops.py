"""The reference training loops, driven in the parity child (docs/references.md §5; issue 9).

Runs ONLY in the child; the esverify package never imports it. It adds to
a driver:

- `start(clone, target)`: coverage.py limited to the clone (started before
  any reference file is imported, so module-level lines count too) and the
  stand-in modules of loop_stubs; `with_coverage(handlers)` saves the
  cumulative executed lines and the per-function table after every command
  to `coverage-<target>.json` in the run's work folder (`coverage_store`;
  a restarted child merges what its predecessor saved);
- `op_fit` (es-at-scale): `EvolutionStrategiesTrainer` built without its
  `__init__`, the attributes §5 lists set, then `fit()`;
- `op_main` (es-awd): `es.main(args)` with `launch_engines`/`cleanup`,
  `get_data` and `evaluate_reward` replaced by the child's.
Both record a tape of what the reference's own loop did (loop_stubs.Tape):
per iteration the members evaluated (seed, negate, per-prompt rewards), the
arguments of the update, the parameters after it (bit patterns, one .npz
per update), plus the files it saved with torch.save, and for es-awd its
iteration_updates/*.json records. The parent compares them with ours.
"""
from __future__ import annotations

import argparse
import ast
import importlib
import inspect
import json
import os
import platform
import sys
from pathlib import Path

import torch

import loop_stubs
import oracle_child
from oracle_child import (HOOK, DrawAudit, ReferenceLoadError, StandInModel, StandInModelRunner, expected_draws,
                          load_set, reward, save_results, syntax_error)

_STATE = {"cov": None, "clone": None, "target": None, "lines": {}}
#: torch.save as the child found it (the loops' saves are recorded, then delegated to it)
_TORCH_SAVE = torch.save


# ----------------------------------------------------------------- coverage

def start(clone: Path, target: str):
    """Start coverage of the clone (when coverage.py is importable) and install the stand-in modules."""
    loop_stubs.install()
    _STATE.update(clone=Path(clone).resolve(), target=target, merged=False)
    try:
        import coverage
    except ImportError:
        _STATE["cov_error"] = (f"coverage.py is not installed for the child Python {platform.python_version()} "
                               f"({sys.executable}): which reference functions ran is unknown")
        return
    cov = coverage.Coverage(data_file=None, source=[str(_STATE["clone"])], branch=False, config_file=False)
    cov.start()
    _STATE["cov"] = cov


def functions_of(path: Path) -> list[tuple[str, int, int, list]]:
    """(qualified name, first body line, last line, nested ranges) of every function in a Python file."""
    try:
        tree = ast.parse(path.read_text(), filename=str(path))
    except (OSError, SyntaxError, ValueError):
        return []
    found = []

    def walk(node, prefix):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                name = f"{prefix}{child.name}"
                nested = [(n.lineno, n.end_lineno) for n in ast.walk(child)
                          if n is not child and isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))]
                found.append((name, child.body[0].lineno, child.end_lineno, nested))
                walk(child, f"{name}.")
            elif isinstance(child, ast.ClassDef):
                walk(child, f"{prefix}{child.name}.")
            else:
                walk(child, prefix)
    walk(tree, "")
    return found


def coverage_table() -> dict:
    """{"files": {relpath: {"functions": {qualname: ran}, "lines": n}}, "error": str}: cumulative."""
    cov, clone = _STATE["cov"], _STATE["clone"]
    if cov is not None:
        data = cov.get_data()
        for path in data.measured_files():
            lines = data.lines(path) or []
            _STATE["lines"].setdefault(path, set()).update(lines)
    files = {}
    for path, lines in sorted(_STATE["lines"].items()):
        p = Path(path)
        try:
            rel = p.resolve().relative_to(clone).as_posix()
        except ValueError:
            continue
        table = {}
        for name, first, last, nested in functions_of(p):
            own = {ln for ln in lines if first <= ln <= last and not any(a <= ln <= b for a, b in nested)}
            table[name] = bool(own)
        files[rel] = {"functions": table, "lines": len(lines)}
    return {"files": files, "error": _STATE.get("cov_error", "")}


def coverage_store(command: dict) -> Path:
    """Where the cumulative coverage goes: the run's work folder (two levels above a case's `out`
    folder, work/cases/<case>), else the working folder; the parent reads it there."""
    out = command.get("out")
    folder = Path(out).resolve().parents[1] if out else Path.cwd()
    return folder / f"coverage-{_STATE['target']}.json"


def save_coverage(command: dict):
    target = _STATE["target"]
    if target is None:
        return
    store = coverage_store(command)
    if not _STATE["merged"]:   # a restarted child keeps what the previous one measured
        _STATE["merged"] = True
        try:
            for path, lines in json.loads(store.read_text()).get("lines", {}).items():
                _STATE["lines"].setdefault(path, set()).update(lines)
        except (OSError, ValueError):
            pass
    table = coverage_table()
    payload = {"lines": {k: sorted(v) for k, v in _STATE["lines"].items()}, **table}
    tmp = store.with_name(store.name + ".tmp")
    tmp.write_text(json.dumps(payload))
    os.replace(tmp, store)


def with_coverage(handlers: dict) -> dict:
    """The handlers, each followed by save_coverage (a failure to save never hides the reply)."""
    def wrap(fn):
        def run(command, modules):
            try:
                return fn(command, modules)
            finally:
                try:
                    save_coverage(command)
                except Exception as exc:  # noqa: BLE001 - coverage is a report section, not a verdict
                    _STATE["cov_error"] = f"saving coverage failed: {type(exc).__name__}: {exc}"
        return run
    return {op: wrap(fn) for op, fn in handlers.items()}


# ----------------------------------------------------------------- loading

def import_reference(dotted: str, relpath: str):
    """Import a reference module by its dotted name (clone root on sys.path); ReferenceLoadError on failure."""
    clone = _STATE["clone"]
    py = f"Python {platform.python_version()} ({sys.executable})"
    if clone is not None and not (clone / relpath).is_file():
        raise ReferenceLoadError({"kind": "missing", "file": relpath,
                                  "message": f"file missing in the clone: {relpath}"})
    try:
        return importlib.import_module(dotted)
    except SyntaxError as exc:
        where = exc.filename or relpath
        try:
            where = Path(where).resolve().relative_to(clone).as_posix()
        except (ValueError, TypeError):
            pass
        raise syntax_error(exc, where, imported_by=relpath) from None
    except ModuleNotFoundError as exc:
        raise ReferenceLoadError({
            "kind": "import", "file": relpath, "package": exc.name,
            "message": (f"{relpath} imports {exc.name!r}, which is not installed for the child {py}: install it "
                        "there or pass --python with an interpreter that has it (ray, vllm, transformers and wandb "
                        "need not be: the child serves stand-ins for them, docs/references.md §5)")}) from None
    except Exception as exc:  # noqa: BLE001 - any import-time failure is reported, not raised
        raise ReferenceLoadError({"kind": "import-error", "file": relpath,
                                  "message": f"importing {relpath} raised {type(exc).__name__}: {exc}"}) from None


def load_lazily(modules: dict, key: str, dotted: str, relpath: str):
    """modules[key], importing it on first use (a failure is kept and raised again for every case)."""
    if key not in modules:
        try:
            modules[key] = import_reference(dotted, relpath)
        except ReferenceLoadError as exc:
            modules[key] = exc
    if isinstance(modules[key], ReferenceLoadError):
        raise modules[key]
    return modules[key]


# ----------------------------------------------------------------- the tape

class Tape:
    """What the reference's loop did, per iteration (see the module docstring)."""

    def __init__(self, out: Path, case: dict):
        self.out, self.case = Path(out), case
        self.out.mkdir(parents=True, exist_ok=True)
        self.audit = DrawAudit()
        self.iterations: list = []
        self.current = self._new()
        self.active: dict = {}
        self.events: list = []
        self.saved: list = []
        self.updates = 0
        # under native noise torch draws itself: there is nothing for the hook to count
        self.native = case.get("noise", "contract") == "native"
        # the loop's logging folder, and its files as the last update left them: what the loop wrote
        # after its last update is evidence of the final save (docs/references.md §5), however it saves
        self.logs = self.out / "theirs-logs"
        self.logs_at_update: dict = self._files()
        self.saved_at_update = 0

    def _files(self) -> dict:
        if not self.logs.is_dir():
            return {}
        return {str(p.relative_to(self.logs)): (p.stat().st_mtime_ns, p.stat().st_size)
                for p in self.logs.rglob("*") if p.is_file()}

    def _check(self, label, expected):
        if not self.native:
            self.audit.check(label, expected)

    @staticmethod
    def _new():
        return {"members": [], "update": None, "zscore": None, "unperturbed": []}

    def _bind(self, engine, method, args, kwargs) -> dict:
        fn = getattr(engine.ext, method)
        try:
            bound = inspect.signature(fn).bind(*args, **kwargs)
            bound.apply_defaults()
            return dict(bound.arguments)
        except (TypeError, ValueError):
            return {"args": list(args), **kwargs}

    def before(self, engine, method, args, kwargs):
        HOOK.model = engine.model
        HOOK.draws = []

    def after(self, engine, method, args, kwargs):
        call = self._bind(engine, method, args, kwargs)
        values = list(call.values())
        tensors = engine.model.tensors
        label = f"engine {engine.index} {method}"
        caching = bool(call.get("caching", False))
        if method in ("perturb_self_weights", "restore_self_weights"):
            seed = int(values[0])
            self._check(label, expected_draws(tensors, [seed], caching))
            # the caching flag each call got (None: the method has no such parameter, es-at-scale's)
            flag = caching if "caching" in call else None
            if method == "perturb_self_weights":
                record = {"seed": seed, "negate": bool(call.get("negate", False)), "engine": engine.index,
                          "rewards": [], "caching": flag, "restored": False}
                self.current["members"].append(record)
                self.active[engine.index] = record
            else:
                record = self.active.pop(engine.index, None)
                if record is not None:
                    record.update(restored=True, restore_caching=flag)
        elif method == "update_weights_from_seeds":
            seeds = [int(s) for s in values[0]]
            self._check(label, expected_draws(tensors, seeds, caching))
            self.updates += 1
            path = self.out / f"theirs-update-{self.updates:03d}.npz"
            save_results(path, tensors)
            update = {"engine": engine.index, "seeds": seeds, "coeffs": [float(c) for c in values[1]],
                      "alpha": float(values[2]), "population_size": values[3], "params": str(path),
                      "extra": {k: v for k, v in call.items() if k in ("caching", "weight_decay_type",
                                                                        "weight_decay_lambda")}}
            self.current["update"] = update
            self.iterations.append(self.current)
            self.current = self._new()
            self.logs_at_update, self.saved_at_update = self._files(), len(self.saved)
        else:
            HOOK.draws = []
        self.events.append(f"engine {engine.index}: {method}")

    def event(self, engine, method, args, kwargs):
        self.events.append(f"engine {engine.index}: {method}")

    def reward(self, engine, value):
        record = self.active.get(engine.index)
        if record is None:
            self.current["unperturbed"].append(value)
        else:
            record["rewards"].append(value)

    def wrap_zscore(self, original):
        def z_score(seeds_perf, mean_reward, std_reward):
            keys = list(seeds_perf)
            self.current["zscore"] = {"keys": [int(k) if isinstance(k, int) else str(k) for k in keys],
                                      "avg_rewards": [float(seeds_perf[k]["avg_reward"]) for k in keys],
                                      "mean": float(mean_reward), "std": float(std_reward)}
            return original(seeds_perf, mean_reward, std_reward)
        z_score.__wrapped__ = original
        return z_score

    def recording_save(self, obj, f, *args, **kwargs):
        _TORCH_SAVE(obj, f, *args, **kwargs)
        if isinstance(f, (str, os.PathLike)):
            self.saved.append(str(f))

    def finish(self, engines) -> dict:
        final = self.out / "theirs-final.npz"
        save_results(final, engines[0].model.tensors)
        saved = []
        for k, path in enumerate(self.saved):
            entry = {"path": path}
            try:
                state = torch.load(path, map_location="cpu", weights_only=True)
                names = list(state.keys())
                npz = self.out / f"theirs-saved-{k}.npz"
                save_results(npz, [state[n] for n in names])
                entry.update(names=names, results=str(npz))
            except Exception as exc:  # noqa: BLE001 - a file we cannot read is reported as such
                entry["error"] = f"{type(exc).__name__}: {exc}"
            saved.append(entry)
        if self.current["members"] or self.current["unperturbed"]:
            self.iterations.append(self.current)   # evaluations after the last update
        # what the loop did after its last update that saves weights: torch.save calls, worker methods
        # named *save*, files written or rewritten under its logging folder
        last = max((k for k, e in enumerate(self.events) if e.endswith(": update_weights_from_seeds")), default=-1)
        after = {"torch_save": self.saved[self.saved_at_update:],
                 "save_calls": [e for e in self.events[last + 1:] if "save" in e.rsplit(": ", 1)[-1].lower()],
                 "files": sorted(k for k, v in self._files().items() if self.logs_at_update.get(k) != v)}
        return {"results": str(final), "tape": {"iterations": self.iterations, "updates": self.updates,
                                                 "saved": saved, "events": self.events[-200:],
                                                 "after_last_update": after},
                "attribution": self.audit.result()}


class LoopModel(StandInModel):
    """The stand-in model of a loop engine: also `state_dict()` (name -> tensor, slot order), which the
    references save with torch.save (docs/references.md §5)."""

    def state_dict(self):
        return dict(zip(self.names, self.tensors))


def _engines(case, worker_cls, tape, count):
    names, tensors = load_set(case["set"], case["device"])
    engines: list = []
    for j in range(count):
        model = LoopModel(names, [t.clone() for t in tensors])
        engines.append(loop_stubs.StandInEngine(j, engines, worker_cls, model, StandInModelRunner, tape, reward))
    table = {int(h): int(s, 16) for h, s in case["handles"].items()}
    HOOK.configure(engines[0].model, table, case["scheme"], case["mapping"], case["backend"])
    return engines


def _dataset(case):
    items = case["data"]
    inputs = [f"{item['input']} <target={item['target']!r}>" for item in items]
    targets = [float(item["target"]) for item in items]
    return inputs, targets


class _Task:
    """The task stand-in: the reward callable on (response text, target) decodes the engine's reward."""

    def __call__(self, response, target, *args, **kwargs):
        return float(response)

    reward = __call__
    compute_reward = __call__


class _Noise:
    """Context of one loop: contract noise keeps the hook; native noise (docs/references.md §3a) lets the
    reference draw torch's own noise, with the 30-bit seeds its loop drew going straight to torch."""

    def __init__(self, case):
        self.noise = case.get("noise", "contract")
        if self.noise not in ("contract", "native"):
            raise ValueError(f"noise must be 'contract' or 'native', got {self.noise!r}")

    def __enter__(self):
        if self.noise == "native":   # every gaussian entry point is torch's own (docs/references.md §3b)
            oracle_child.uninstall_hook()
        return self

    def __exit__(self, *exc):
        if self.noise == "native":
            oracle_child.install_hook()
        return False


# ----------------------------------------------------------------- es-at-scale: fit

TRAINER = "es_at_scale/trainer/es_trainer.py"
WORKER = "es_at_scale/utils/worker_extension.py"


def op_fit(case, modules):
    trainer_mod = load_lazily(modules, "es_trainer", "es_at_scale.trainer.es_trainer", TRAINER)
    worker_mod = load_lazily(modules, "loop_worker", "es_at_scale.utils.worker_extension", WORKER)
    out = Path(case["out"])
    tape = Tape(out, case)
    engines = _engines(case, worker_mod.WorkerExtension, tape, case["engines"])
    inputs, targets = _dataset(case)
    size = case["batch_size"]
    loader = [(inputs[k:k + size], targets[k:k + size]) for k in range(0, len(inputs), size)]
    trainer = object.__new__(trainer_mod.EvolutionStrategiesTrainer)
    fields = dict(sigma=case["sigma"], alpha=case["alpha"], population_size=case["population"],
                  num_iterations=case["iterations"], global_seed=case["global_seed"],
                  mini_batch_size=case["mini_batch_size"], n_vllm_engines=case["engines"], engines=engines,
                  logging="none", n_samples=1, train_temperature=0.0, train_top_p=1.0, max_tokens=16,
                  reward_function_timeout=60, rollout_reduce="mean", task=_Task(), template=lambda x: x,
                  tokenizer=loop_stubs.Tokenizer(), process_pool=loop_stubs.ImmediatePool(),
                  train_dataloader=loader, logging_dir=str(out / "theirs-logs"))
    for key, value in fields.items():
        setattr(trainer, key, value)
    shaping = sys.modules.get("es_at_scale.utils.reward_shaping")
    patched = [(m, "z_score", m.z_score) for m in (trainer_mod, shaping) if m is not None and hasattr(m, "z_score")]
    torch.save = tape.recording_save
    try:
        for owner, name, original in patched:
            setattr(owner, name, tape.wrap_zscore(original))
        with _Noise(case):
            trainer.fit()
    finally:
        torch.save = _TORCH_SAVE
        for owner, name, original in patched:
            setattr(owner, name, original)
    return tape.finish(engines)


# ----------------------------------------------------------------- es-awd: main

ES = "es.py"


def op_main(case, modules):
    es = load_lazily(modules, "es_main", "es", ES)
    worker_mod = sys.modules.get("distributed_utils") or load_lazily(modules, "distributed_utils",
                                                                      "distributed_utils", "distributed_utils.py")
    out = Path(case["out"])
    tape = Tape(out, case)
    inputs, targets = _dataset(case)
    launched: list = []

    def launch_engines(num_engines, *args, **kwargs):
        launched.extend(_engines(case, worker_mod.WorkerExtension, tape, int(num_engines)))
        return launched, [loop_stubs.Inert() for _ in launched]

    replaced = {"launch_engines": launch_engines, "cleanup": lambda *a, **k: None,
                "get_data": lambda *a, **k: (list(inputs), list(targets)),
                "evaluate_reward": _Task()}
    saved = {k: getattr(es, k) for k in replaced if hasattr(es, k)}
    logs = out / "theirs-logs"
    args = argparse.Namespace(
        model_name="stand-in", sigma=case["sigma"], alpha=case["alpha"], population_size=case["population"],
        num_iterations=case["iterations"], num_engines=case["engines"], global_seed=case["global_seed"],
        mirror_sampling=case["mirror"], caching=case["caching"], weight_decay_type=case["decay"],
        weight_decay_lambda=case["lambda"], temperature=0.0, max_tokens=16, logging_dir=str(logs),
        wandb_project="esverify-parity")
    torch.save = tape.recording_save
    try:
        for key, value in replaced.items():
            setattr(es, key, value)
        with _Noise(case):
            es.main(args)
    finally:
        torch.save = _TORCH_SAVE
        for key in replaced:
            if key in saved:
                setattr(es, key, saved[key])
            else:
                delattr(es, key)
    if not launched:
        raise RuntimeError("es.main never called launch_engines: no engine ran")
    reply = tape.finish(launched)
    records = []
    for path in sorted((logs / "iteration_updates").glob("iteration_*.json")):
        try:
            records.append({"file": path.name, "record": json.loads(path.read_text())})
        except (OSError, ValueError) as exc:
            records.append({"file": path.name, "error": f"{type(exc).__name__}: {exc}"})
    reply["tape"]["records"] = records
    return reply
