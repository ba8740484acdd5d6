"""The parity runner: clones -> children -> cases -> bitwise rows -> report (issue 4).

For each target whose clone is usable, ONE long-lived child runs the
target's driver (oracles/driver_*.py, by path) under `--python`; the
runner checks up front that the child has torch and numpy and which
devices it sees, then runs each case on our side (esverify.es, through
`ours`) and on the reference side (the child, same noise through the
hook, same backend), and compares the results bitwise (docs/numerics.md §7).

Statuses: pass, fail, error (the reference, the child or our side could
not run the case; timeouts and child deaths included: the child is
restarted and the run goes on), skipped (a device the child does not
see), unverifiable (iid results of a target whose draws could not be
attributed to slots: eager consumption, docs/references.md §3) and artifact
(es-awd `caching=True` under iid, a documented artefact of the reference,
when every mismatch lies in a slot whose noise the reference reused; a
mismatch anywhere else is a fail).

Exit code: 0 when at least one row passed and every row is pass, skipped
or artifact; 1 on any fail, error or unverifiable row or when nothing
passed; 2 on a usage or setup error (the partial report is still written).
"""
from __future__ import annotations

import datetime as _dt
import json
import math
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from .. import __version__
from ..paths import checkout_root, oracles_dir
from ..report import FORMATS, console_table, to_junit, write_atomic, write_report
from . import cases as _cases
from . import compare as _compare
from . import ours as _ours
from . import paramsets
from .child import Child, ChildDied, ChildError, ChildTimeout, package_root
from .clones import TARGETS, CloneError, git_identity, inspect_clone

COLUMNS = ["target", "device", "dtype", "scheme", "op", "population", "case", "rule", "elements", "mismatches",
           "max_abs_diff", "max_ulp_diff", "first_mismatch_index", "first_mismatch_ours",
           "first_mismatch_theirs", "status", "detail"]
STATUSES = ("pass", "fail", "error", "skipped", "unverifiable", "artifact")
CACHING_ARTIFACT = ("artefact of the reference: with caching=True it reuses the first tensor's noise for "
                    "tensors of equal (device, dtype, shape), which iid gives different noise (docs/references.md §2)")
_PROBE = ("import importlib.util as u, json, platform, sys; print(json.dumps({'python': platform.python_version(), "
          "'executable': sys.executable, 'torch': u.find_spec('torch') is not None, "
          "'numpy': u.find_spec('numpy') is not None}))")


class UsageError(ValueError):
    """Bad options or nothing to run: exit 2 without a report."""


@dataclass
class Options:
    """Everything `esverify parity` takes (see docs/parity.md); defaults are the CLI's."""
    ref: str | None = None
    awd_ref: str | None = None
    target: str | None = None            #: "es-at-scale", "es-awd", "all" or None (every clone found)
    python: str = sys.executable
    dtypes: tuple = ("f32", "f16", "bf16")
    schemes: tuple = ("iid", "correlated")
    devices: tuple = ("cpu", "cuda")
    devices_explicit: bool = False
    mapping: str = "poly32"
    seed: int = 42
    population: int = 6
    sigma: float = 0.001
    alpha: float | None = None
    iterations: int = 3
    case: str | None = None
    keep_tensors: bool = False
    out: str | None = None
    formats: tuple = FORMATS
    junit: str | None = None
    timeout: float = 120.0
    quiet: bool = False
    small: bool = False
    child_env: dict = field(default_factory=dict)   #: extra environment for the children (tests, diagnostics)
    argv: list = field(default_factory=lambda: list(sys.argv))


@dataclass
class RunResult:
    """A finished run: the rows (`frame`, columns COLUMNS), the summary pivot, the metadata dict,
    the exit code (0/1/2, see the module docstring), the report folder, the files written and the
    console text."""
    frame: pd.DataFrame
    summary: pd.DataFrame
    metadata: dict
    exit_code: int
    out_dir: Path
    written: list
    console: str


def _validate(opts: Options) -> Options:
    if opts.target not in (None, "all", *TARGETS):
        raise UsageError(f"--target must be es-at-scale, es-awd or all, got {opts.target!r}")
    for name, values, known in (("--dtypes", opts.dtypes, paramsets.DTYPES), ("--schemes", opts.schemes,
                                ("iid", "correlated")), ("--devices", opts.devices, ("cpu", "cuda"))):
        if not values:
            raise UsageError(f"{name} is empty")
        bad = [v for v in values if v not in known]
        if bad:
            raise UsageError(f"{name}: unknown {bad}; choose from {list(known)}")
    if opts.mapping not in ("poly32", "libm64"):
        raise UsageError(f"--mapping must be poly32 or libm64, got {opts.mapping!r}")
    if not 0 <= int(opts.seed) < 1 << 64:
        raise UsageError(f"--seed must be in [0, 2**64), got {opts.seed}")
    if opts.population < 2:
        raise UsageError(f"--population must be >= 2 (z-scores of one member are zero), got {opts.population}")
    if opts.iterations < 1:
        raise UsageError(f"--iterations must be >= 1, got {opts.iterations}")
    if not 0 < opts.sigma < math.inf:
        raise UsageError(f"--sigma must be finite and > 0, got {opts.sigma}")
    if opts.alpha is not None and not 0 <= opts.alpha < math.inf:
        raise UsageError(f"--alpha must be finite and >= 0, got {opts.alpha}")
    if not opts.timeout > 0:
        raise UsageError(f"--timeout must be > 0 seconds, got {opts.timeout}")
    bad = [f for f in opts.formats if f not in FORMATS]
    if bad:
        raise UsageError(f"--format: unknown {bad}; choose from {list(FORMATS)}")
    if not opts.formats:
        raise UsageError(f"--format is empty; choose from {list(FORMATS)}")
    # checked up front: a report that cannot be written must not cost a whole run
    if opts.out and Path(opts.out).exists() and not Path(opts.out).is_dir():
        raise UsageError(f"--out {opts.out}: exists and is not a directory")
    if opts.junit and Path(opts.junit).is_dir():
        raise UsageError(f"--junit {opts.junit}: is a directory, not a file")
    return opts


def _clone_path(target, explicit: str | None) -> tuple[str, bool]:
    """(path, named_by_user): the option, then the environment variable, then ./refs/<target>."""
    if explicit:
        return explicit, True
    if os.environ.get(target.env_var):
        return os.environ[target.env_var], True
    return target.default_path, False


def _row(case, **fields) -> dict:
    row = {"target": case.target, "device": case.device, "dtype": case.dtype, "scheme": case.scheme,
           "op": case.op, "population": case.population, "case": case.case_id,
           "rule": _ours.rule_for(case.target, case.device), "elements": None, "mismatches": None,
           "max_abs_diff": None, "max_ulp_diff": None, "first_mismatch_index": "",
           "first_mismatch_ours": "", "first_mismatch_theirs": "", "status": "error", "detail": ""}
    row.update(fields)
    return row


def _git_commit(path: Path | None) -> str | None:
    """esverify's own commit, with "-dirty" when the checkout has changes; None outside a checkout."""
    commit, dirty = git_identity(path) if path is not None else (None, None)
    return commit + ("-dirty" if dirty else "") if commit else None


def _probe(python: str, timeout: float) -> dict:
    """Interpreter facts without importing torch: version, has torch, has numpy."""
    try:
        out = subprocess.run([python, "-c", _PROBE], capture_output=True, text=True, timeout=timeout)
    except FileNotFoundError:
        raise UsageError(f"--python {python}: no such interpreter") from None
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise UsageError(f"--python {python}: cannot run it ({exc})") from None
    if out.returncode:
        raise UsageError(f"--python {python}: the interpreter failed to start: {out.stderr.strip()[-500:]}")
    try:
        facts = json.loads(out.stdout.strip().splitlines()[-1])
        if not isinstance(facts, dict) or not {"python", "torch", "numpy"} <= set(facts):
            raise ValueError(facts)
    except (IndexError, ValueError):
        raise UsageError(f"--python {python}: does not behave like a Python 3 interpreter (the probe printed "
                         f"{out.stdout.strip()[-200:]!r})") from None
    return facts


class _Target:
    """One target's run: its child, its sets, its rows."""

    def __init__(self, runner, target, clone):
        self.runner, self.target, self.clone = runner, target, clone
        self.child = Child(runner.opts.python, oracles_dir() / target.driver, clone.path,
                           runner.work / f"child-{target.name}.log", env=runner.opts.child_env,
                           pythonpath=package_root(runner.work))
        self.hello = None
        self.start_error = ""

    def ensure_child(self) -> bool:
        if self.child.alive():
            return True
        if self.start_error and self.child.starts >= 3:
            return False
        try:
            self.hello = self.child.start(max(self.runner.opts.timeout, 60.0))
            self.start_error = ""
            return True
        except ChildError as exc:
            tail = exc.log_tail.strip().splitlines()[-3:] if exc.log_tail else []
            self.start_error = f"{exc}; child log: {' | '.join(tail)}" if tail else str(exc)
            return False


class Runner:
    """Runs one parity matrix: `Runner(options).run()`; UsageError (exit 2, no report) on bad options."""

    def __init__(self, opts: Options):
        self.opts = _validate(opts)
        self.alpha = opts.sigma / 2 if opts.alpha is None else opts.alpha
        self.rows: list[dict] = []
        self.setup_errors: list[str] = []
        self.sets: dict = {}
        self.kept: list = []
        self.notes: set = set()
        self.timing: dict = {}   #: target -> {"ours_s": ..., "reference_s": ...}

    def _setup_error(self, message: str):
        if message not in self.setup_errors:
            self.setup_errors.append(message)

    # -- sets
    def set_path(self, dtype: str, big: bool, variant: str) -> Path:
        key = (dtype, big, variant)
        if key not in self.sets:
            names, tensors = paramsets.build(dtype, big, variant)
            path = paramsets.write(self.work / "sets" / f"{dtype}-{'big' if big else 'small'}-{variant}.npz",
                                   names, tensors)
            self.sets[key] = (path, names, tensors)
        return self.sets[key][0]

    def fresh(self, dtype: str, big: bool, variant: str, device: str):
        self.set_path(dtype, big, variant)
        _, names, tensors = self.sets[(dtype, big, variant)]
        return names, [t.clone().to(device) for t in tensors]

    # -- main
    def run(self) -> RunResult:
        import torch
        # Our side on one torch thread: the profiles are thread-count independent (docs/numerics.md §6), and
        # idle-spinning worker threads would compete with the child for the same cores.
        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            return self._run()
        finally:
            torch.set_num_threads(threads)

    def _run(self) -> RunResult:
        opts = self.opts
        started = time.monotonic()
        stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
        out_dir = Path(opts.out) if opts.out else Path("reports") / f"parity-{stamp}"
        wanted = list(TARGETS) if opts.target in (None, "all") else [opts.target]
        explicit_paths = {"es-at-scale": opts.ref, "es-awd": opts.awd_ref}
        clones, skipped_targets, failed = {}, [], {}
        for name in wanted:
            target = TARGETS[name]
            path, named = _clone_path(target, explicit_paths[name])
            try:
                clones[name] = inspect_clone(target, path)
            except CloneError as exc:
                if opts.target is None and not named:
                    skipped_targets.append(f"{name}: {exc}")
                    continue
                self.setup_errors.append(str(exc))
                failed[name] = str(exc)
        if not clones and not self.setup_errors:
            raise UsageError("no reference clone found: pass --ref PATH (es-at-scale) and/or --awd-ref PATH "
                             "(es-awd), or set $ESVERIFY_REF / $ESVERIFY_AWD_REF; tried: "
                             + "; ".join(skipped_targets))
        probe = _probe(opts.python, max(opts.timeout, 60.0))
        missing_pkgs = [p for p in ("torch", "numpy") if not probe[p]]
        all_cases = _cases.build_matrix([n for n in wanted if n in clones or n in failed], opts.devices,
                                        opts.dtypes, opts.schemes, opts.population, opts.sigma,
                                        self.alpha, opts.iterations, opts.small)
        selected = _cases.select(all_cases, opts.case)
        if opts.case and not selected:
            raise UsageError(f"--case {opts.case!r} matches no case; case ids look like "
                             f"{all_cases[0].case_id if all_cases else 'es-at-scale/cpu/f32/iid/perturb/N6'}")
        environments = {}
        with tempfile.TemporaryDirectory(prefix="esverify-parity-") as work:
            self.work = Path(work)
            by_target = {}
            for case in selected:
                by_target.setdefault(case.target, []).append(case)
            progress = _progress(len(selected), opts.quiet)
            try:
                for name, target_cases in by_target.items():
                    if name not in clones:
                        error = failed[name]
                        self.rows += [_row(c, status="error", detail=f"setup: {error}") for c in target_cases]
                        progress.update(len(target_cases))
                        continue
                    if missing_pkgs:
                        msg = (f"setup: the child Python {probe['executable']} ({probe['python']}) lacks "
                               f"{' and '.join(missing_pkgs)}: install it there or pass --python")
                        self._setup_error(msg)
                        self.rows += [_row(c, status="error", detail=msg) for c in target_cases]
                        progress.update(len(target_cases))
                        continue
                    environments[name] = self._run_target(TARGETS[name], clones[name], target_cases, progress)
            finally:
                progress.close()
            frame = _post_process(pd.DataFrame(self.rows, columns=COLUMNS + ["eager"]))
            summary = summary_pivot(frame)
            wall = time.monotonic() - started
            metadata = self._metadata(clones, environments, probe, wall, skipped_targets)
            written = write_report(out_dir, "parity", {"cases": frame, "summary": summary}, metadata,
                                   opts.formats, title="esverify parity report")
            for name in environments:
                log = self.work / f"child-{name}.log"
                if log.is_file():
                    written.append(write_atomic(out_dir / f"child-{name}.log", log.read_bytes()))
            for case_id, ours_path, theirs_path in self.kept:
                dest = out_dir / "tensors" / re.sub(r"[^A-Za-z0-9_.-]+", "_", case_id)
                dest.mkdir(parents=True, exist_ok=True)
                shutil.copy2(ours_path, dest / "ours.npz")
                if theirs_path and Path(theirs_path).is_file():
                    shutil.copy2(theirs_path, dest / "theirs.npz")
        if opts.junit:
            written.append(write_atomic(opts.junit, to_junit(frame, "esverify.parity", name_cols=["case"],
                                                             failing=("fail",),
                                                             erroring=("error", "unverifiable"),
                                                             skipping=("skipped", "artifact"))))
        code = exit_code(frame, bool(self.setup_errors))
        return RunResult(frame, summary, metadata, code, out_dir, written,
                         _console(frame, summary, metadata, out_dir, code))

    def _run_target(self, target, clone, target_cases, progress) -> dict:
        t = _Target(self, target, clone)
        opts = self.opts
        try:
            if not t.ensure_child():
                msg = f"setup: the {target.name} child did not start: {t.start_error}"
                self._setup_error(msg)
                self.rows += [_row(c, status="error", detail=msg) for c in target_cases]
                progress.update(len(target_cases))
                return {"start_error": t.start_error}
            env = dict(t.hello["environment"])
            if "cuda" in opts.devices and not env.get("cuda") and opts.devices_explicit:
                self._setup_error("setup: --devices names cuda but the child sees no CUDA device")
            for case in target_cases:
                try:
                    row = self._run_case(t, case)
                except Exception as exc:  # noqa: BLE001 - one broken case must not hide the others' rows
                    row = _row(case, status="error", detail=f"{case.op}: the runner failed on this case: "
                                                            f"{type(exc).__name__}: {exc}")
                self.rows.append(row)
                progress.update(1)
            env["restarts"] = max(0, t.child.starts - 1)
            return env
        finally:
            t.child.close()

    def _run_case(self, t, case) -> dict:
        opts = self.opts
        env = t.hello["environment"] if t.hello else {}
        if case.device == "cuda" and not env.get("cuda"):
            if opts.devices_explicit:
                return _row(case, status="error", detail="setup: --devices names cuda but the child sees no "
                                                         "CUDA device")
            return _row(case, status="skipped", detail="the child sees no CUDA device")
        module_key = t.target.ops_need[case.kind]
        if not t.ensure_child():
            return _row(case, status="error", detail=f"the child could not be restarted: {t.start_error}")
        load_error = (t.hello.get("modules") or {}).get(module_key)
        if load_error:
            return _row(case, status="error", detail=f"{case.op}: {load_error['message']}")
        from ..rng import default_backend
        from ..rng.mappings import get_mapping
        backend = child_backend = default_backend(case.device)
        seen = (env.get("noise_backends") or {}).get("cpu", []) if case.device == "cpu" else ["torch"]
        if backend not in seen:
            if not get_mapping(opts.mapping).bitwise_portable:
                return _row(case, status="error", detail=f"{case.op}: the child lacks the noise backend {backend!r} "
                                                         f"the parent uses, and {opts.mapping} is only bit-exact "
                                                         "within one backend (docs/CONTRACT.md §3a); install numba there")
            child_backend = None   # poly32 is bitwise identical on every backend (docs/CONTRACT.md §3b)
            self.notes.add(f"the child lacks noise backend {backend!r}; it used its own default "
                           f"({opts.mapping} is bitwise identical on every backend)")
        variant = "offset" if case.target == "es-awd" else "base"
        dtype = case.dtype if case.dtype in paramsets.DTYPES or case.dtype == paramsets.MIXED else "f32"
        names, tensors = self.fresh(dtype, case.big, variant, case.device)
        anchor = self.fresh(dtype, case.big, "base", case.device)[1] if case.kind in ("update", "decay") \
            and case.target == "es-awd" else None
        clock = self.timing.setdefault(case.target, {"ours_s": 0.0, "reference_s": 0.0})
        started = time.perf_counter()
        try:
            ours = _ours.run(case, names, tensors, anchor, opts.seed, opts.mapping, backend)
        except Exception as exc:  # noqa: BLE001 - our side failing is a row, not a crash
            return _row(case, status="error", detail=f"{case.op}: our side raised {type(exc).__name__}: {exc}")
        finally:
            clock["ours_s"] += time.perf_counter() - started
        out = self.work / "cases" / re.sub(r"[^A-Za-z0-9_.-]+", "_", case.case_id)
        out.mkdir(parents=True, exist_ok=True)
        command = {"op": case.kind, "case_id": case.case_id,
                   "device": case.device, "scheme": case.scheme, "mapping": opts.mapping,
                   "backend": child_backend,
                   "set": str(self.set_path(dtype, case.big, variant)), "sigma": case.sigma,
                   "alpha": case.alpha, "population": case.population, "out": str(out), "handles": {}}
        if anchor is not None:
            command["anchor_set"] = str(self.set_path(dtype, case.big, "base"))
        command.update(ours.command)
        command["handles"] = {str(k): v for k, v in command["handles"].items()}
        if case.op == "loop":
            for it in command["iterations"]:
                it["handles"] = {str(k): v for k, v in it["handles"].items()}
        started = time.perf_counter()
        try:
            reply = t.child.request(command, opts.timeout)
        except ChildTimeout:
            return _row(case, status="error", detail=f"timeout: {case.op} did not finish within "
                                                     f"{opts.timeout:g} s; the child was killed and restarted")
        except ChildDied as exc:
            tail = " | ".join(exc.log_tail.strip().splitlines()[-2:])
            return _row(case, status="error", detail=f"{case.op}: {exc}; restarting it for the next case"
                                                     + (f"; child log: {tail}" if tail else ""))
        finally:
            clock["reference_s"] += time.perf_counter() - started
        if reply.get("status") != "ok":
            err = reply.get("error") or {}
            return _row(case, status="error", detail=f"{case.op}: the reference side raised {err.get('message')}")
        _, theirs, theirs_dtypes = paramsets.read(reply["results"])
        cmp = _compare.compare(ours.tensors, theirs, theirs_dtypes, names if case.op != "zscore" else ["coeffs"])
        if cmp.layout_error:
            return _row(case, status="error", detail=f"{case.op}: result layout differs: {cmp.layout_error}")
        fields = cmp.fields()
        notes = []
        reward_note = _compare.compare_rewards(ours.rewards, reply.get("rewards", [])) if case.op == "loop" else ""
        attribution = reply.get("attribution", {"ok": True})
        if cmp.mismatches:
            where = ", ".join(cmp.mismatched_slots)
            notes.append(f"{case.op}{' (population %d)' % case.population if case.kind == 'update' else ''}: "
                         f"{cmp.mismatches} of {cmp.elements} elements differ (slots {where}); first at "
                         f"{cmp.first_index}, max {cmp.max_ulp_diff} ulp")
            if cmp.specials:
                notes.append(cmp.specials)
        if reward_note:
            notes.insert(0, f"{case.op}: {reward_note}")
        reused = reused_slots(names, tensors) if case.op == "caching" and case.scheme == "iid" else []
        if not attribution.get("ok", True) and case.scheme == "iid":
            status = "unverifiable"
            notes.insert(0, f"{case.op}: {attribution.get('detail')}: iid noise could not be attributed to slots")
        elif cmp.mismatches and reused and set(cmp.mismatched_slots) <= set(reused):
            status = "artifact"
            notes.insert(0, CACHING_ARTIFACT)
        elif cmp.mismatches or reward_note:
            if case.op == "caching" and case.scheme == "iid":
                notes.append(f"{case.op}: mismatches outside the slots where the reference reuses noise "
                             f"({', '.join(reused) or 'none in this set'}): not the caching artefact")
            status = "fail"
        else:
            status = "pass"
        if not attribution.get("ok", True) and case.scheme != "iid":
            notes.append(f"note: {attribution.get('detail')} (harmless under correlated: the noise does not "
                         "depend on the slot)")
        if status == "fail" and self.opts.keep_tensors:
            ours_path = paramsets.write(out / "ours.npz", names if case.op != "zscore" else ["coeffs"], ours.tensors)
            self.kept.append((case.case_id, ours_path, reply["results"]))
        row = _row(case, status=status, detail="; ".join(notes), **fields)
        row["eager"] = not attribution.get("ok", True)
        return row

    def _metadata(self, clones, environments, probe, wall, skipped_targets) -> dict:
        import numpy
        import torch

        from ..rng import default_backend
        opts = self.opts
        root = checkout_root()
        warnings = [f"{name}: {w}" for name, c in clones.items() for w in c.warnings]
        return {
            "esverify_version": __version__, "esverify_commit": _git_commit(root),
            "parent_python": platform.python_version(), "parent_torch": torch.__version__,
            "parent_numpy": numpy.__version__, "platform": platform.platform(),
            "child_python": probe.get("python"), "child_executable": probe.get("executable"),
            "children": environments,
            "devices": list(opts.devices), "dtypes": list(opts.dtypes), "schemes": list(opts.schemes),
            "mapping": opts.mapping, "noise_backend": {d: default_backend(d) for d in opts.devices},
            "seed": opts.seed, "population": opts.population, "sigma": opts.sigma,
            "alpha": self.alpha, "iterations": opts.iterations, "case_pattern": opts.case,
            "small": opts.small, "timeout_s": opts.timeout,
            "clones": {name: c.metadata() for name, c in clones.items()},
            "warnings": warnings + sorted(self.notes), "setup_errors": self.setup_errors,
            "targets_not_found": skipped_targets,
            "command_line": " ".join(opts.argv), "wall_time_s": round(wall, 2),
            "seconds_per_side": {k: {n: round(v, 2) for n, v in d.items()} for k, d in self.timing.items()},
            "note": "parity substitutes the RNG contract's noise for torch's: it certifies the algebra on "
                    "identical noise, not runs made with torch's own generator",
        }


def reused_slots(names, tensors) -> list:
    """Names of the slots whose (device, dtype, shape) repeats an earlier slot's: where es-awd's
    `caching=True` reuses the earlier slot's noise (docs/references.md §2), so iid noise cannot agree."""
    seen, reused = set(), []
    for name, t in zip(names, tensors):
        key = (str(t.device), t.dtype, tuple(t.shape))
        if key in seen:
            reused.append(name)
        seen.add(key)
    return reused


def _post_process(frame: pd.DataFrame) -> pd.DataFrame:
    """Eager consumption seen anywhere in a target makes all its iid results unverifiable."""
    frame = frame.copy()
    eager = frame["eager"].eq(True)
    for target in frame.loc[eager, "target"].unique():
        first = frame.loc[(frame["target"] == target) & eager, "case"].iloc[0]
        hit = (frame["target"] == target) & (frame["scheme"] == "iid") & frame["status"].isin(["pass", "fail"])
        frame.loc[hit, "status"] = "unverifiable"
        frame.loc[hit, "detail"] = (f"eager consumption of the parameters detected ({first}): the {target} "
                                    "iid results cannot be attributed to slots; " + frame.loc[hit, "detail"])
    return frame.drop(columns=["eager"])


def summary_pivot(frame: pd.DataFrame) -> pd.DataFrame:
    """Status counts per (target, op) x (dtype/scheme), e.g. "3 pass" or "1 fail, 2 pass"."""
    if frame.empty:
        return pd.DataFrame(columns=["target", "op"])

    def cell(statuses):
        counts = statuses.value_counts()
        return ", ".join(f"{counts[s]} {s}" for s in STATUSES if s in counts)

    f = frame.assign(column=frame["dtype"] + "/" + frame["scheme"])
    pivot = f.pivot_table(index=["target", "op"], columns="column", values="status", aggfunc=cell, fill_value="",
                          sort=False)
    pivot.columns = [str(c) for c in pivot.columns]
    return pivot.reset_index()


def exit_code(frame: pd.DataFrame, setup_error: bool) -> int:
    if setup_error:
        return 2
    statuses = set(frame["status"]) if len(frame) else set()
    if statuses & {"fail", "error", "unverifiable"} or "pass" not in statuses:
        return 1
    return 0


def _progress(total: int, quiet: bool):
    from tqdm import tqdm
    return tqdm(total=total, file=sys.stderr, disable=quiet, desc="parity", unit="case", leave=False)


def _console(frame, summary, metadata, out_dir, code) -> str:
    counts = frame["status"].value_counts().to_dict() if len(frame) else {}
    lines = [f"esverify parity: {len(frame)} cases: " + ", ".join(f"{counts[s]} {s}" for s in STATUSES
                                                                if s in counts),
             console_table(summary, max_rows=30)]
    bad = frame[~frame["status"].isin(["pass", "skipped"])]
    if len(bad):
        shown = bad[["case", "status", "detail"]].copy()
        shown["detail"] = shown["detail"].str.slice(0, 110)
        lines += ["", console_table(shown, max_rows=20)]
    lines += [f"warning: {w}" for w in metadata.get("warnings", [])]
    lines += [f"error: {e}" for e in metadata.get("setup_errors", [])]
    lines.append(f"report: {out_dir} (wall time {metadata['wall_time_s']} s; exit {code})")
    return "\n".join(lines)
