"""The reference training loops, driven in the parity child through their entry points
(docs/references.md §5).

Runs ONLY in the child; the esverify package never imports it. It adds to
a driver:

- `start(clone, target)`: function coverage of the clone (child_coverage:
  sys.monitoring or profile hooks, plus coverage.py lines under --line-coverage),
  started before any reference file is imported; the stand-in modules of
  loop_stubs; and the clone's interface compared with the manifest
  (interfaces.json beside this file, interface_drift) from its source,
  without running it. `with_coverage(handlers)` saves the cumulative
  record and the interface findings to `coverage-<target>.json` in the
  run's work folder after a command (at most once a second,
  child_coverage.SAVE_INTERVAL) and when child_server.serve leaves its
  command loop;
- what a driver's loop op needs (each reference's op lives in its driver,
  one file per reference): `STATE` (the clone and target of this child),
  `engines` (stand-in engines on a case's parameter set), `prompts`,
  `fresh_logs`, `Tape`, `load_lazily`, `run_op` (a failure at a name the
  driver supplies becomes an interface error), `reference_settings`, and
  `Noise` (contract or native noise for one loop).
Everything replaced is restored on exit, also when the reference raises
(loop_seams.Seams). A failure at a name the driver supplies becomes an
`interface` error (loop_errors); any other keeps the reference's message.
A loop op records a tape of what the reference's own loop did (Tape): per
iteration the members evaluated (seed, negate, per-prompt rewards), the
arguments of the update, the parameters after it (bit patterns, one .npz
per update), plus the files it saved with torch.save, and what else its
driver adds. The parent compares them with ours.
Each loop also gets a small evaluation set (its outputs are not compared;
its coverage shows).
"""
from __future__ import annotations

import collections
import importlib
import inspect
import os
import platform
import shutil
import struct
import sys
import weakref
from pathlib import Path

import torch

import child_coverage
import loop_errors
import loop_stubs
import child_server
from child_server import (HOOK, DrawAudit, ReferenceLoadError, StandInModel, StandInModelRunner, expected_draws,
                          load_set, reward, rewards, save_results, syntax_error)

STATE = {"clone": None, "target": None, "interface": [], "interface_error": ""}
#: torch.save as the child found it (the loops' saves are recorded, then delegated to it)
_TORCH_SAVE = torch.save
#: function -> {bound?: signature}, held weakly: a clone switched out (a mutant catalog) can still be collected
_SIGNATURES = weakref.WeakKeyDictionary()
MANIFEST = Path(__file__).resolve().with_name("interfaces.json")


def _signature(fn) -> inspect.Signature:
    """inspect.signature of an engine method, kept per (function, whether bound): every engine call of a
    loop bound its arguments, and computing the signature was 5% of a loop child's time. A callable that
    cannot be a weak key is computed each time."""
    func = getattr(fn, "__func__", fn)
    try:
        kept = _SIGNATURES.setdefault(func, {})
    except TypeError:
        return inspect.signature(fn)
    bound = hasattr(fn, "__self__")
    sig = kept.get(bound)
    if sig is None:
        sig = kept[bound] = inspect.signature(fn)
    return sig


# ----------------------------------------------------------------- start, coverage, interface

def start(clone: Path, target: str, manifest_key=None, base: str = "", only=None, also=()):
    """Coverage of the clone, the stand-in modules (and `also`, more names to stand in for), and the
    clone's interface against the manifest entry `manifest_key` (None: `target`; False: no entry, no
    check; `base`, `only`: see interface_drift.check_clone)."""
    loop_stubs.install(also)
    STATE.update(clone=Path(clone).resolve(), target=target)
    child_coverage.start(clone)
    if manifest_key is False:    # a reference with no manifest entry (the skill page's sample)
        STATE["interface"], STATE["interface_error"] = [], ""
        return
    STATE["interface"], STATE["interface_error"] = check_interface(Path(clone), manifest_key or target, base,
                                                                     only)


def check_interface(clone: Path, target: str, base: str = "", only=None) -> tuple[list, str]:
    """(findings, error): the clone's entry-point files compared with the manifest, from their source."""
    try:
        import interface_drift
        return interface_drift.check_clone(clone, target, MANIFEST, base, only), ""
    except Exception as exc:  # noqa: BLE001 - a broken comparison is reported, never a crash of the child
        return [], f"the interface check could not run: {type(exc).__name__}: {exc}"


def save_coverage(command: dict):
    target = STATE["target"]
    if target is None:
        return
    child_coverage.save(command, target, {"interface": STATE["interface"],
                                          "interface_error": STATE["interface_error"]})


def _reply_ran(answer: dict):
    answer["ran"] = child_coverage.last_row()


def with_coverage(handlers: dict) -> dict:
    """The handlers, each run under per-row function recording (the reply's `ran`: {clone file:
    [functions]}) and followed by save_coverage (a failure to save never hides the reply)."""
    if _reply_ran not in child_server.ANSWER_HOOKS:
        child_server.ANSWER_HOOKS.append(_reply_ran)
    def wrap(fn):
        def run(command, modules):
            child_coverage.row_start()   # the functions this command runs: the reply's `ran` (blame)
            try:
                return fn(command, modules)
            finally:
                try:
                    child_coverage.row_end()
                except Exception as exc:  # noqa: BLE001 - coverage is a report section, not a verdict
                    child_coverage.note_error(f"per-row coverage failed: {type(exc).__name__}: {exc}")
                try:
                    save_coverage(command)
                except Exception as exc:  # noqa: BLE001 - coverage is a report section, not a verdict
                    child_coverage.note_error(f"saving coverage failed: {type(exc).__name__}: {exc}")
        return run
    return {op: wrap(fn) for op, fn in handlers.items()}


# ----------------------------------------------------------------- loading

def import_reference(dotted: str, relpath: str):
    """Import a reference module by its dotted name (clone root on sys.path); ReferenceLoadError on failure."""
    clone = STATE["clone"]
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

def exact(case: dict, key: str, single: bool = False):
    """The command's floats `key` with their bits: the parent's "exact" bit patterns where it sent them (a
    NaN's sign and payload, which JSON loses; esverify.oracle.ours.exact_floats), else the plain field.
    single: the field is one float (sent as a one-element list of bits)."""
    bits = (case.get("exact") or {}).get(key)
    if bits is None:
        return case[key]
    values = [struct.unpack("<d", int(b, 16).to_bytes(8, "little"))[0] for b in bits]
    return values[0] if single else values


def missing_slots(draws, expected) -> list:
    """The slots of `expected` ({(seed, slot): count}) that `draws` (the hook's (seed, slot, position,
    numel) records of one call) drew fewer times than expected: the ones a reuse (or a skip) left out."""
    got = collections.Counter((h, s) for h, s, _, _ in draws)
    return sorted({s for key, s in expected if got[(key, s)] < expected[(key, s)]})


class CallAudit(DrawAudit):
    """DrawAudit that also keeps, for EVERY call in order, the slots it left undrawn (`per_call`:
    [missing slots]), beyond the few calls `result()` reports: a loop's reuse may differ from call to
    call (perturb reusing, restore not), and our side replays it call by call (docs/parity.md,
    "Diagnoses")."""

    def __init__(self, names=None):
        super().__init__(names)
        self.per_call: list = []

    def check(self, call: str, expected):
        self.per_call.append(missing_slots(HOOK.draws, expected) if not HOOK.foreign else [])
        super().check(call, expected)

    def last_missing(self) -> list:
        return self.per_call[-1] if self.per_call else []


class Tape:
    """What the reference's loop did, per iteration (see the module docstring)."""

    def __init__(self, out: Path, case: dict):
        self.out, self.case = Path(out), case
        self.out.mkdir(parents=True, exist_ok=True)
        self.audit = CallAudit()
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

    def _check(self, label, expected) -> list:
        """The draw accounting of one call; returns the slots it left undrawn ([] under native noise)."""
        if self.native:
            return []
        self.audit.check(label, expected)
        return self.audit.last_missing()

    @staticmethod
    def _new():
        return {"members": [], "update": None, "zscore": None, "unperturbed": []}

    def _bind(self, engine, method, args, kwargs) -> dict:
        fn = getattr(engine.ext, method)
        try:
            bound = _signature(fn).bind(*args, **kwargs)
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
            missing = self._check(label, expected_draws(tensors, [seed]))
            # the caching flag each call got (None: the method has no such parameter, es-at-scale's)
            flag = caching if "caching" in call else None
            if method == "perturb_self_weights":
                # `missing`: the slots this call left undrawn, so our side can replay a reuse call by call
                record = {"seed": seed, "negate": bool(call.get("negate", False)), "engine": engine.index,
                          "rewards": [], "caching": flag, "restored": False, "missing": missing}
                self.current["members"].append(record)
                self.active[engine.index] = record
            else:
                record = self.active.pop(engine.index, None)
                if record is not None:
                    record.update(restored=True, restore_caching=flag, restore_missing=missing)
        elif method == "update_weights_from_seeds":
            seeds = [int(s) for s in values[0]]
            missing = self._check(label, expected_draws(tensors, seeds))
            self.updates += 1
            path = self.out / f"theirs-update-{self.updates:03d}.npz"
            save_results(path, tensors)
            update = {"engine": engine.index, "seeds": seeds, "coeffs": [float(c) for c in values[1]],
                      "alpha": float(values[2]), "population_size": values[3], "params": str(path),
                      "missing": missing,
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


def engines(case, worker_cls, tape, count, precision=None):
    """`count` stand-in engines on copies of the case's set, launched with `precision` (recorded on the
    tape: the report names it, and each engine computes its rewards in it)."""
    names, tensors = load_set(case["set"], case["device"])
    engines: list = []
    tape.audit.names = list(names)   # the accounting names its slots
    tape.engines.extend(loop_stubs.precision_name(precision) for _ in range(count))
    for j in range(count):
        model = LoopModel(names, [t.clone() for t in tensors])
        engines.append(loop_stubs.StandInEngine(j, engines, worker_cls, model, StandInModelRunner, tape, reward,
                                                precision, rewards_fn=rewards))
    table = {int(h): int(s, 16) for h, s in case["handles"].items()}
    HOOK.configure(engines[0].model, table, case["scheme"], case["mapping"], case["backend"])
    return engines


def prompts(items) -> tuple[list, list]:
    """(prompts, targets) of a case's data items: each prompt carries its target as a <target=...> mark,
    which the stand-in engine reads to score the engine's current parameters."""
    return [f"{item['input']} <target={item['target']!r}>" for item in items], [float(item["target"]) for item in items]


loop_errors.SUPPLIED_CALLABLES.update({"reward_pair", "evaluate_reward", "template", "get_data", "launch_engines",
                                       "cleanup", "get_ip", "get_open_port", "remote", "generate", "collective_rpc",
                                       "_rpc", "_generate", "apply_async", "get", "decode", "apply_chat_template",
                                       "from_pretrained", "ImmediatePool", "Pool"})
loop_errors.SUPPLIED_CLASSES.update({"ImmediatePool", "_Method", "RequestOutput", "Completion", "_WandbRun",
                                     "StubModule"})


def fresh_logs(out: Path) -> Path:
    """The loop's logging folder, absent before the run: es-awd creates it with exist_ok=False, and a
    retried case must not find its predecessor's files."""
    logs = out / "theirs-logs"
    if logs.exists():
        shutil.rmtree(logs)
    return logs


def run_op(op: str, fn, callee=None):
    """fn(), with a failure at a name the driver supplies turned into an interface error (`callee`: the
    reference's entry point fn calls, named when the call itself fails)."""
    try:
        return fn()
    except (AttributeError, KeyError, TypeError) as exc:
        raised = loop_errors.interface_error(exc, STATE["clone"], op, callee=callee)
        if raised is exc:
            raise
        raise raised from exc


def reference_settings(seams, before: dict) -> dict:
    """What the reference process ran under (the row's reference_settings): after its entry point ran."""
    during = seams.settings()
    return {**during, "changed_by_reference": sorted(k for k, v in during.items() if before.get(k) != v)}


class Noise:
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


def default_of(fn, parameter):
    """The default of `parameter` in fn's signature (None when it has none or cannot be read): the
    precision a loop's own launch_engines launches with when its caller passes none."""
    try:
        value = inspect.signature(fn).parameters[parameter].default
    except (KeyError, TypeError, ValueError):
        return None
    return None if value is inspect.Parameter.empty else value
