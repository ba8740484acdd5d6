"""The reference training loops, driven in the parity child through their entry points
(docs/references.md §5; issues 9 and 17).

Runs ONLY in the child; the esverify package never imports it. It adds to
a driver:

- `start(clone, target)`: function coverage of the clone (child_coverage:
  sys.monitoring or a trace hook, plus coverage.py lines where installed),
  started before any reference file is imported; the stand-in modules of
  loop_stubs; and the clone's interface compared with the manifest
  (interfaces.json beside this file, interface_drift) from its source,
  without running it. `with_coverage(handlers)` saves the cumulative
  record and the interface findings after every command to
  `coverage-<target>.json` in the run's work folder;
- `op_fit` (es-at-scale): the `EvolutionStrategiesTrainer` constructor with
  every parameter by name, then `fit()`; the seams replaced for the run are
  the module's `Pool`, `get_ip`, `get_open_port`, the class's
  `launch_engines`, and the SIGINT/SIGTERM handlers the constructor
  installs (restored right after construction);
- `op_main` (es-awd): `parse_args()` on a command line set in `sys.argv`,
  then `main(args)`, with `launch_engines`, `cleanup`, `get_data` and
  `evaluate_reward` as module globals of ours.
Everything replaced is restored on exit, also when the reference raises
(loop_seams.Seams). A failure at a name the driver supplies becomes an
`interface` error (loop_errors); any other keeps the reference's message.
Both record a tape of what the reference's own loop did (Tape): per
iteration the members evaluated (seed, negate, per-prompt rewards), the
arguments of the update, the parameters after it (bit patterns, one .npz
per update), plus the files it saved with torch.save, and for es-awd its
iteration_updates/*.json records. The parent compares them with ours.
Each loop also gets a small evaluation set (its outputs are not compared;
its coverage shows).
"""
from __future__ import annotations

import importlib
import inspect
import json
import os
import platform
import shutil
import sys
from pathlib import Path

import torch

import child_coverage
import loop_errors
import loop_stubs
import child_server
from loop_errors import Supplied
from loop_seams import Seams
from child_server import (HOOK, DrawAudit, ReferenceLoadError, StandInModel, StandInModelRunner, expected_draws,
                          load_set, reward, save_results, syntax_error)

_STATE = {"clone": None, "target": None, "interface": [], "interface_error": ""}
#: torch.save as the child found it (the loops' saves are recorded, then delegated to it)
_TORCH_SAVE = torch.save
MANIFEST = Path(__file__).resolve().with_name("interfaces.json")


# ----------------------------------------------------------------- start, coverage, interface

def start(clone: Path, target: str, manifest_key=None, base: str = "", only=None, also=()):
    """Coverage of the clone, the stand-in modules (and `also`, more names to stand in for), and the
    clone's interface against the manifest entry `manifest_key` (None: `target`; False: no entry, no
    check; `base`, `only`: see interface_drift.check_clone)."""
    loop_stubs.install(also)
    _STATE.update(clone=Path(clone).resolve(), target=target)
    child_coverage.start(clone)
    if manifest_key is False:    # a reference with no manifest entry (the skill page's sample)
        _STATE["interface"], _STATE["interface_error"] = [], ""
        return
    _STATE["interface"], _STATE["interface_error"] = check_interface(Path(clone), manifest_key or target, base,
                                                                     only)


def check_interface(clone: Path, target: str, base: str = "", only=None) -> tuple[list, str]:
    """(findings, error): the clone's entry-point files compared with the manifest, from their source."""
    try:
        import interface_drift
        return interface_drift.check_clone(clone, target, MANIFEST, base, only), ""
    except Exception as exc:  # noqa: BLE001 - a broken comparison is reported, never a crash of the child
        return [], f"the interface check could not run: {type(exc).__name__}: {exc}"


def save_coverage(command: dict):
    target = _STATE["target"]
    if target is None:
        return
    child_coverage.save(command, target, {"interface": _STATE["interface"],
                                          "interface_error": _STATE["interface_error"]})


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
                    child_coverage.note_error(f"saving coverage failed: {type(exc).__name__}: {exc}")
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
        self.engines: list = []   # the precision each engine was launched with, by engine
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
            # one draw per (seed, slot), caching or not: a slot that reuses another's draw is then seen as
            # never drawn, and the parent judges that reuse by the one rule of every row (compare.judge_reuse)
            self._check(label, expected_draws(tensors, [seed]))
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
            self._check(label, expected_draws(tensors, seeds))
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
                                                 "engine_precisions": self.engines,
                                                 "after_last_update": after},
                "attribution": self.audit.result()}


class LoopModel(StandInModel):
    """The stand-in model of a loop engine: also `state_dict()` (name -> tensor, slot order), which the
    references save with torch.save (docs/references.md §5)."""

    def state_dict(self):
        return dict(zip(self.names, self.tensors))


def _engines(case, worker_cls, tape, count, precision=None):
    """`count` stand-in engines on copies of the case's set, launched with `precision` (recorded on the
    tape: the report names it, and each engine computes its rewards in it)."""
    names, tensors = load_set(case["set"], case["device"])
    engines: list = []
    tape.audit.names = list(names)   # the accounting names its slots
    tape.engines.extend(loop_stubs.precision_name(precision) for _ in range(count))
    for j in range(count):
        model = LoopModel(names, [t.clone() for t in tensors])
        engines.append(loop_stubs.StandInEngine(j, engines, worker_cls, model, StandInModelRunner, tape, reward,
                                                precision))
    table = {int(h): int(s, 16) for h, s in case["handles"].items()}
    HOOK.configure(engines[0].model, table, case["scheme"], case["mapping"], case["backend"])
    return engines


def _prompts(items) -> tuple[list, list]:
    """(prompts, targets) of a case's data items: each prompt carries its target as a <target=...> mark,
    which the stand-in engine reads to score the engine's current parameters."""
    return [f"{item['input']} <target={item['target']!r}>" for item in items], [float(item["target"]) for item in items]


def reward_pair(response_text, target, *args, **kwargs):
    """es-at-scale's reward function contract (docs/references.md §5.1): (label, reward); the response
    text is the repr of the f64 reward the engine computed, so float() recovers it exactly."""
    return ("stand-in", float(response_text))


def evaluate_reward(output_text, data, *args, **kwargs):
    """es-awd's task reward (docs/references.md §5.2): (r, response) with r["reward"] a float."""
    value = float(output_text)
    return Supplied(reward=value, reward_info=Supplied(format_reward=1.0, answer_reward=value)), output_text


def template(prompt):
    """es-at-scale's template function: the prompt unchanged (its <target=...> mark must survive)."""
    return prompt


loop_errors.SUPPLIED_CALLABLES.update({"reward_pair", "evaluate_reward", "template", "get_data", "launch_engines",
                                       "cleanup", "get_ip", "get_open_port", "remote", "generate", "collective_rpc",
                                       "_rpc", "_generate", "apply_async", "get", "decode", "apply_chat_template",
                                       "from_pretrained", "ImmediatePool", "Pool"})
loop_errors.SUPPLIED_CLASSES.update({"ImmediatePool", "_Method", "_RequestOutput", "_Completion", "_WandbRun",
                                     "StubModule"})


def _fresh_logs(out: Path) -> Path:
    """The loop's logging folder, absent before the run: es-awd creates it with exist_ok=False, and a
    retried case must not find its predecessor's files."""
    logs = out / "theirs-logs"
    if logs.exists():
        shutil.rmtree(logs)
    return logs


def _run(op: str, fn, callee=None):
    """fn(), with a failure at a name the driver supplies turned into an interface error (`callee`: the
    reference's entry point fn calls, named when the call itself fails)."""
    try:
        return fn()
    except (AttributeError, KeyError, TypeError) as exc:
        raised = loop_errors.interface_error(exc, _STATE["clone"], op, callee=callee)
        if raised is exc:
            raise
        raise raised from exc


def _settings(seams, before: dict) -> dict:
    """What the reference process ran under (the row's reference_settings): after its entry point ran."""
    during = seams.settings()
    return {**during, "changed_by_reference": sorted(k for k, v in during.items() if before.get(k) != v)}


class _Noise:
    """Context of one loop: contract noise keeps the hook; native noise (docs/references.md §3a) lets the
    reference draw torch's own noise, with the 30-bit seeds its loop drew going straight to torch."""

    def __init__(self, case):
        self.noise = case.get("noise", "contract")
        if self.noise not in ("contract", "native"):
            raise ValueError(f"noise must be 'contract' or 'native', got {self.noise!r}")

    def __enter__(self):
        if self.noise == "native":   # every gaussian entry point is torch's own (docs/references.md §3b)
            child_server.uninstall_hook()
        return self

    def __exit__(self, *exc):
        if self.noise == "native":
            child_server.install_hook()
        return False


# ----------------------------------------------------------------- es-at-scale: fit

TRAINER = "es_at_scale/trainer/es_trainer.py"
WORKER = "es_at_scale/utils/worker_extension.py"
#: eval_step after an iteration only when (i + 1) % eval_freq == 0: never, within a parity row (the
#: eval_step(0) that fit runs first still reaches the evaluation path)
FIT_EVAL_FREQ = 10 ** 9


def op_fit(case, modules):
    trainer_mod = load_lazily(modules, "es_trainer", "es_at_scale.trainer.es_trainer", TRAINER)
    worker_mod = load_lazily(modules, "loop_worker", "es_at_scale.utils.worker_extension", WORKER)
    out = Path(case["out"])
    logs = _fresh_logs(out)
    tape = Tape(out, case)
    inputs, targets = _prompts(case["data"])
    size = case["batch_size"]
    loader = [(inputs[k:k + size], targets[k:k + size]) for k in range(0, len(inputs), size)]
    eval_inputs, eval_targets = _prompts(case.get("eval_data") or [])
    evals = {"stand-in": [(eval_inputs, eval_targets)]} if eval_inputs else {}
    cls = trainer_mod.EvolutionStrategiesTrainer

    # the precision the reference launches with: what its call passes, else its own launch_engines' default
    own = _default_of(cls.launch_engines, "precision")
    launched = {}

    def launch_engines(self, num_engines=4, n_gpu_per_vllm_engine=1, model_name=None, precision=own, **kwargs):
        if not launched:
            launched["engines"] = _engines(case, worker_mod.WorkerExtension, tape, case["engines"], precision)
        return launched["engines"][:int(num_engines)], []

    shaping = sys.modules.get("es_at_scale.utils.reward_shaping")
    settings = {}
    with Seams() as seams:
        before = seams.settings()
        seams.set(trainer_mod, "Pool", loop_stubs.Pool)
        seams.set(trainer_mod, "get_ip", lambda *a, **k: "127.0.0.1")
        seams.set(trainer_mod, "get_open_port", lambda *a, **k: 29500)
        seams.set(cls, "launch_engines", launch_engines)
        seams.set(torch, "save", tape.recording_save)
        for owner in (trainer_mod, shaping):
            if owner is not None and hasattr(owner, "z_score"):
                seams.set(owner, "z_score", tape.wrap_zscore(owner.z_score))
        with _Noise(case):
            trainer = _run("fit", lambda: cls(
                model_name="stand-in", checkpoint=None, sigma=case["sigma"], alpha=case["alpha"],
                population_size=case["population"], reward_shaping="z-scores", num_iterations=case["iterations"],
                max_tokens=16, batch_size=size, mini_batch_size=case["mini_batch_size"], reward_function=reward_pair,
                template_function=template, train_dataloader=loader, eval_dataloader_dict=evals,
                eval_freq=FIT_EVAL_FREQ, n_vllm_engines=case["engines"], n_gpu_per_vllm_engine=1, logging="none",
                use_gpus="", global_seed=case["global_seed"], output_directory=str(out),
                save_best_models=False, experiment_name=logs.name, wandb_project=None, reward_function_timeout=60),
                callee=cls)
            seams.restore_signals()   # its handlers would exit the child on SIGINT/SIGTERM (docs/references.md §5.1)
            settings = _settings(seams, before)
            _run("fit", trainer.fit, callee=cls.fit)
    if not launched:
        raise RuntimeError("fit never called launch_engines: no engine ran")
    reply = tape.finish(launched["engines"])
    reply["settings"] = settings
    return reply


def _default_of(fn, parameter):
    """The default of `parameter` in fn's signature (None when it has none or cannot be read)."""
    try:
        value = inspect.signature(fn).parameters[parameter].default
    except (KeyError, TypeError, ValueError):
        return None
    return None if value is inspect.Parameter.empty else value


# ----------------------------------------------------------------- es-awd: main

ES = "es.py"
PRECISION = {"f32": "float32", "f16": "float16", "bf16": "bfloat16"}


def main_argv(case, experiment_dir: Path, run_name: str) -> list:
    """The command line es-awd's parse_args reads (docs/references.md §5.2): every setting of the case
    as a flag; the periodic evaluation off (--eval_interval 0: it still evaluates before the loop and
    after the last iteration), wandb disabled, no GPU named."""
    argv = ["es.py", "--model_name", "stand-in", "--task", "countdown", "--sigma", repr(float(case["sigma"])),
            "--alpha", repr(float(case["alpha"])), "--population_size", str(case["population"]),
            "--num_engines", str(case["engines"]), "--num_iterations", str(case["iterations"]),
            "--experiment_dir", str(experiment_dir), "--run_name", run_name, "--cuda_devices", "",
            "--precision", case.get("precision") or PRECISION.get(case.get("dtype", ""), "float32"),
            "--weight_decay_type", case["decay"], "--weight_decay_lambda", repr(float(case["lambda"])),
            "--eval_interval", "0", "--wandb_project", "esverify-parity", "--wandb_mode", "disabled"]
    if case["mirror"]:
        argv.append("--mirror_sampling")
    if case["caching"]:
        argv.append("--caching")
    if case["global_seed"] is not None:
        argv += ["--global_seed", str(int(case["global_seed"]))]
    return argv


def op_main(case, modules):
    es = load_lazily(modules, "es_main", "es", ES)
    worker_mod = sys.modules.get("distributed_utils") or load_lazily(modules, "distributed_utils",
                                                                      "distributed_utils", "distributed_utils.py")
    out = Path(case["out"])
    logs = _fresh_logs(out)
    tape = Tape(out, case)
    launched: list = []

    # the precision the reference launches with: what its call passes, else its launch_engines' default
    own = _default_of(getattr(es, "launch_engines", None), "precision")

    def launch_engines(num_engines, model_name=None, precision=own, *args, **kwargs):
        launched.extend(_engines(case, worker_mod.WorkerExtension, tape, int(num_engines), precision))
        return launched, [loop_stubs.Inert() for _ in launched]

    def get_data(tokenizer, *args, **kwargs):
        return ([Supplied(context=p, target=t) for p, t in zip(*_prompts(case["data"]))],
                [Supplied(context=p, target=t) for p, t in zip(*_prompts(case.get("eval_data") or []))])

    settings = {}
    with Seams() as seams:
        before = seams.settings()
        for name, value in (("launch_engines", launch_engines), ("cleanup", lambda *a, **k: None),
                            ("get_data", get_data), ("evaluate_reward", evaluate_reward)):
            seams.set(es, name, value)
        seams.set(torch, "save", tape.recording_save)
        sys.argv[:] = main_argv(case, out, logs.name)
        try:
            args = es.parse_args()
        except SystemExit as exc:   # argparse's own refusal: an error row, not the end of the child
            raise RuntimeError(f"es.parse_args() exited with status {exc.code} on the command line "
                               f"{' '.join(sys.argv[1:])} (its message is in the child's log)") from None
        settings = _settings(seams, before)
        with _Noise(case):
            _run("main", lambda: es.main(args), callee=es.main)
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
    reply["settings"] = settings
    return reply
