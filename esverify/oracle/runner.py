"""The parity runner: clones -> children -> cases -> bitwise rows -> report (issue 4).

For each target whose clone is usable, ONE long-lived child runs the
target's driver (oracles/driver_*.py, by path) under `--python`; the
runner checks up front that the child has torch and numpy and which
devices it sees, then runs each case on our side (esverify.es, through
`ours`) and on the reference side (the child, same noise through the
hook, same backend), and compares the results bitwise (docs/numerics.md §7).

Statuses (STATUSES): pass, fail, error (the reference, the child or our
side could not run the case; timeouts and child deaths included: the child
is restarted and the run goes on), skipped (not checked here, with the
reason and how to check it: a device the child does not see, a reference
file that needs a newer child Python, a target whose clone was not given),
unverifiable (an iid row whose own draws were all attributed to one slot:
eager consumption, docs/references.md §3), artifact (an iid row where the
reference reused one slot's noise for another, as es-awd's `caching=True`
does, and ours with the same reuse agrees bit for bit), unsupported (a case
the `--impl` wrapper does not claim) and not-run (a row an interrupted run
did not reach). Each row's status and named diagnoses (advanced, eager,
skip, reuse, extra) come from its own comparison and draw accounting only
(compare.diagnose; docs/parity.md "Diagnoses").

Order of a run: the report destinations are checked and the report folder
claimed, then every setup fault is looked for (clones, the child Python,
the case selection, each child's start, the devices) and reported as ONE
line (SetupError/UsageError, exit 2) before any case runs (a child that
fails to start also leaves a report of error rows); then the cases, the two
targets side by side; then the report, which opens with the verdict.

Exit code: 0 when at least one row passed and every row is pass, skipped
or artifact; 1 on any fail, error or unverifiable row, when nothing passed,
or with `require_all` when a row was skipped; 2 on a usage or setup error;
128 + the signal number (130 SIGINT, 143 SIGTERM, 129 SIGHUP) when the run
was interrupted: the children are killed and the partial report is written
with the verdict `interrupted` (esverify.interrupt).
"""
from __future__ import annotations

import contextlib
import datetime as _dt
import math
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from .. import __version__, jsonin
from ..paths import checkout_root, oracles_dir
from ..interrupt import VERDICT as INTERRUPTED
from ..interrupt import Interrupted, catching
from ..numerics_probe import SETTINGS_HINT
from ..outputs import OutputError, check_file, claim_report_folder, missing_folders, remove_empty
from ..reportset import ReportSet
from ..report import (FORMATS, console_table, report_patterns, terminal_text, to_junit,
                      write_report)
from . import cases as _cases
from . import compare as _compare
from . import loop_report as _loop_report
from . import parity_report as _parity_report
from . import loops as _loops
from . import ours as _ours
from . import paramsets
from . import repeat as _repeat
from .child import DEFAULT_MAX_OUTPUT, Child, ChildError, ChildTimeout, default_max_memory
from .clones import TARGETS, CloneError, git_identity, inspect_clone

COLUMNS = ["target", "device", "dtype", "scheme", "noise", "op", "population", "case", "rule", "elements",
           "mismatches", "max_abs_diff", "max_ulp_diff", "first_mismatch_index", "first_mismatch_ours",
           "first_mismatch_theirs", "status", "diagnosis", "detail", "params", "reference_settings"]
#: every row status, in report order; "not-run" marks the rows an interrupted run did not reach
#: "unsupported": a case the --impl wrapper does not claim (never a pass)
STATUSES = ("pass", "fail", "error", "skipped", "unverifiable", "artifact", "unsupported", "not-run")
#: statuses that make the exit code 1 (with --require-all, "skipped" too)
FAILING = ("fail", "error", "unverifiable")
#: the files of one parity report in its folder (an earlier one is refused unless --overwrite)
REPORT_PATTERNS = report_patterns("parity") + ("child-*.log", "tensors")
NO_CUDA = ("not checked here: the child sees no CUDA device; to check it: run on a machine with a CUDA GPU "
           "and a CUDA build of torch (--devices cuda)")
_PROBE = ("import importlib.util as u, json, platform, sys; print(json.dumps({'python': platform.python_version(), "
          "'executable': sys.executable, 'torch': u.find_spec('torch') is not None, "
          "'numpy': u.find_spec('numpy') is not None}))")


class UsageError(ValueError):
    """Bad options or nothing to run: exit 2 without a report."""


class SetupError(UsageError):
    """The environment cannot run the matrix (clone, child Python, devices): exit 2, one line, no rows."""


class ChildStartError(SetupError):
    """A reference child that did not start (import failure, a broken hello): exit 2 after a report
    of error rows is written, so what the child said is kept (issue 13 item 2)."""


@dataclass
class Options:
    """Everything `esverify parity` takes (see docs/parity.md); defaults are the CLI's."""
    ref: str | None = None
    awd_ref: str | None = None
    target: str | None = None            #: "es-at-scale", "es-awd", "all" or None (every clone found)
    python: str = sys.executable
    python_explicit: bool = False        #: --python was given (then "pass --python" is no fix to suggest)
    dtypes: tuple = ("f32", "f16", "bf16")
    schemes: tuple = ("iid", "correlated")
    devices: tuple = ("cpu", "cuda")
    devices_explicit: bool = False
    mapping: str = "poly32"
    seed: int = 42
    population: int | None = None        #: None: drawn from case_seed (odd, not a multiple of 3)
    sigma: float | None = None           #: None: drawn per case from case_seed
    alpha: float | None = None           #: None: drawn per case from case_seed
    case_seed: int = _cases.DEFAULT_CASE_SEED
    noises: tuple = _cases.NOISES        #: "contract" and/or "native" (native: correlated rows only)
    case_json: str | None = None         #: run exactly this one case (cases.to_json), e.g. a shrunk fuzz case
    fuzz: int = 0                        #: run this many random cases instead of the matrix, shrink failures
    iterations: int = 3
    case: str | None = None
    keep_tensors: bool = False
    out: str | None = None
    formats: tuple = FORMATS
    junit: str | None = None
    summary: str | None = None           #: a short Markdown verdict + needs-attention block for a CI job page
    reports: str | None = None           #: the folder that holds the default report folders (default ./reports)
    settings: dict = field(default_factory=dict)   #: {setting: {"value", "source"}} (cliutil.Settings.metadata)
    timeout: float = 120.0
    max_memory: int | None = None        #: RLIMIT_DATA of each child in bytes; None: half the RAM; 0: none
    max_output: int = DEFAULT_MAX_OUTPUT  #: bytes of each child's output kept (head and tail); 0: all
    quiet: bool = False
    small: bool = False
    require_all: bool = False            #: a skipped row (not checked here) makes the exit code 1
    overwrite: bool = False              #: replace an earlier report in --out
    loops: bool = True                   #: the training-loop rows fit / main-* (esverify.oracle.loops)
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
    step_summary: str = ""   #: the --summary block (Markdown; parity_report.step_summary)


def _validate(opts: Options) -> Options:
    if opts.target not in (None, "all", *TARGETS):
        raise UsageError(f"--target must be es-at-scale, es-awd or all, got {opts.target!r}")
    for name, values, known in (("--dtypes", opts.dtypes, paramsets.DTYPES), ("--schemes", opts.schemes,
                                ("iid", "correlated")), ("--devices", opts.devices, ("cpu", "cuda"))):
        if not values:
            raise UsageError(f"{name} is empty")
        bad = [v for v in values if v not in known]
        if bad:
            from ..cliutil import suggest
            raise UsageError(f"{name}: unknown {bad}; choose from {list(known)}{suggest(bad[0], known)}")
    if opts.mapping not in ("poly32", "libm64"):
        raise UsageError(f"--mapping must be poly32 or libm64, got {opts.mapping!r}")
    if not 0 <= int(opts.seed) < 1 << 64:
        raise UsageError(f"--seed must be in [0, 2**64), got {opts.seed}")
    if opts.population is not None and opts.population < 2:
        raise UsageError(f"--population must be >= 2 (z-scores of one member are zero), got {opts.population}")
    if opts.iterations < 1:
        raise UsageError(f"--iterations must be >= 1, got {opts.iterations}")
    if opts.sigma is not None and not 0 < opts.sigma < math.inf:
        raise UsageError(f"--sigma must be finite and > 0, got {opts.sigma}")
    bad = [n for n in opts.noises if n not in _cases.NOISES]
    if bad or not opts.noises:
        raise UsageError(f"--noise: unknown {bad or 'empty'}; choose from {list(_cases.NOISES)}")
    if not 0 <= int(opts.case_seed) < 1 << 64:
        raise UsageError(f"--case-seed must be in [0, 2**64), got {opts.case_seed}")
    if opts.fuzz < 0:
        raise UsageError(f"--fuzz must be >= 0, got {opts.fuzz}")
    if opts.case_json is not None:
        try:
            _cases.from_json(opts.case_json)
        except ValueError as exc:
            raise UsageError(str(exc)) from None
    if opts.alpha is not None and not 0 <= opts.alpha < math.inf:
        raise UsageError(f"--alpha must be finite and >= 0, got {opts.alpha}")
    if not opts.timeout > 0:
        raise UsageError(f"--timeout must be > 0 seconds, got {opts.timeout}")
    for name, value in (("--max-memory", opts.max_memory), ("--max-output", opts.max_output)):
        if value is not None and not (isinstance(value, int) and value >= 0):
            raise UsageError(f"{name} must be a size in bytes >= 0 (0: no limit), got {value!r}")
    bad = [f for f in opts.formats if f not in FORMATS]
    if bad:
        from ..cliutil import suggest
        raise UsageError(f"--format: unknown {bad}; choose from {list(FORMATS)}{suggest(bad[0], FORMATS)}")
    if not opts.formats:
        raise UsageError(f"--format is empty; choose from {list(FORMATS)}")
    # checked up front: a report that cannot be written must not cost a whole run (created in run())
    if opts.out and Path(opts.out).exists() and not Path(opts.out).is_dir():
        raise UsageError(f"--out {opts.out}: exists and is not a directory")
    if opts.junit and Path(opts.junit).is_dir():
        raise UsageError(f"--junit {opts.junit}: is a directory, not a file")
    from ..numerics_probe import flush_to_zero_status
    flush = flush_to_zero_status()
    if flush.flushing:   # before anything runs: our side's subnormal results would not be the contract's
        raise UsageError(f"parity: {flush.message()}")
    return opts


def _utc_now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def _not_given(target: str) -> str:
    option = "--ref" if target == "es-at-scale" else "--awd-ref"
    return (f"not checked here: no {target} clone was given; to check it: pass {option} PATH "
            "(docs/parity.md, 'The reference clones')")


def _clone_path(target, explicit: str | None) -> tuple[str, bool]:
    """(path, named_by_user): the option, then the environment variable, then ./refs/<target>."""
    if explicit:
        return explicit, True
    if os.environ.get(target.env_var):
        return os.environ[target.env_var], True
    return target.default_path, False


def _row(case, **fields) -> dict:
    row = {"target": case.target, "device": case.device, "dtype": case.dtype, "scheme": case.scheme,
           "noise": case.noise, "op": case.op, "population": case.population, "case": case.case_id,
           "rule": _ours.rule_for(case.target, case.device), "elements": None, "mismatches": None,
           "max_abs_diff": None, "max_ulp_diff": None, "first_mismatch_index": "",
           "first_mismatch_ours": "", "first_mismatch_theirs": "", "status": "error", "diagnosis": "",
           "detail": "", "params": case.params_text() if case.op != "zscore" else "", "reference_settings": ""}
    row.update(fields)
    return row


FLUSH_STATUSES = ("pass", "fail", "artifact", "unverifiable")   #: rows a flushing child turns into fail


def flush_row(row: dict, findings: list, target: str) -> dict:
    """`row`, failed with diagnosis `flush` when the child reported FTZ/DAZ after its case (`findings`,
    the probe's lines): a reference process that flushes subnormals to zero computes no IEEE results in
    the subnormal range, whether or not this case's values reached it (docs/parity.md "Subnormals").
    Rows that did not compare (error, skipped, unsupported, not-run) keep their status."""
    if not findings or row["status"] not in FLUSH_STATUSES:
        return row
    note = (f"the {target} child flushes subnormals to zero (FTZ/DAZ) after this case: {findings[0]}"
            + (f" (+{len(findings) - 1} more probe(s))" if len(findings) > 1 else "")
            + f"; usual causes: {SETTINGS_HINT}; its results in the subnormal range are not IEEE results")
    diagnosis = ",".join([d for d in row["diagnosis"].split(",") if d] + ["flush"])
    return dict(row, status="fail", diagnosis=diagnosis,
                detail=note + (f"; row before the probe: {row['status']}" + (f": {row['detail']}" if row["detail"]
                                                                             else "")))


def startup_timeout(timeout: float) -> float:
    """Seconds a child (or the interpreter probe) gets to start and send its hello: max(--timeout, 60),
    since importing torch and compiling the noise kernels can take longer than one case."""
    return max(float(timeout), 60.0)


def _git_commit(path: Path | None) -> str | None:
    """esverify's own commit, with "-dirty" when the checkout has changes; None outside a checkout."""
    commit, dirty = git_identity(path) if path is not None else (None, None)
    return commit + ("-dirty" if dirty else "") if commit else None


def _probe(python: str, timeout: float, explicit: bool = True) -> dict:
    """Interpreter facts without importing torch: version, has torch, has numpy. UsageError, one line
    each, for a folder, a file that is not executable, a missing one, a program that is not Python."""
    where = Path(python).expanduser()
    if where.is_dir():
        hint = next((str(where / c) for c in ("bin/python", "bin/python3", "python") if (where / c).is_file()),
                    None)
        raise UsageError(f"--python {python}: is a folder, not an interpreter; pass the interpreter itself"
                         + (f", e.g. --python {hint}" if hint else " (e.g. VENV/bin/python)"))
    if where.is_file() and not os.access(where, os.X_OK):
        raise UsageError(f"--python {python}: is not executable (chmod +x, or pass another interpreter)")
    try:
        out = subprocess.run([python, "-c", _PROBE], capture_output=True, text=True, timeout=timeout)
    except FileNotFoundError:
        raise UsageError(f"--python {python}: no such interpreter") from None
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise UsageError(f"--python {python}: cannot run it ({exc})") from None
    if out.returncode:
        said = " | ".join(line.strip() for line in out.stderr.splitlines() if line.strip())   # one line
        raise UsageError(f"--python {python}: the interpreter failed to start: {said[-500:]}")
    try:
        facts = jsonin.loads(out.stdout.strip().splitlines()[-1], "the interpreter probe's answer")
        if not isinstance(facts, dict) or not {"python", "torch", "numpy"} <= set(facts):
            raise ValueError(facts)
    except (IndexError, ValueError):
        printed = out.stdout.strip()[-200:]
        raise UsageError(f"--python {python}: is not a Python 3 interpreter (does not behave like a Python 3 "
                         f"interpreter: the probe printed {printed!r}); pass e.g. --python /usr/bin/python3") from None
    return facts


class _Target:
    """One target's run: its child, its sets, its rows."""

    def __init__(self, runner, target, clone):
        self.runner, self.target, self.clone = runner, target, clone
        opts = runner.opts
        self.child = Child(opts.python, oracles_dir() / target.driver, clone.path,
                           runner.work / f"child-{target.name}.log", env=opts.child_env, workdir=runner.work,
                           max_memory=opts.max_memory, max_output=opts.max_output, target=target.name)
        self.hello = None
        self.start_error = ""
        self.pool = ThreadPoolExecutor(max_workers=1)   #: waits for the child's reply beside our side
        self.variant_clone = None    #: Runner.session: the clone the next case runs on
        self.last_theirs = None      #: (case id, the reference's result bits) of the case just run

    def close(self):
        self.child.close()
        self.pool.shutdown(wait=True)

    def ensure_child(self) -> bool:
        if self.child.alive():
            return True
        if self.start_error and self.child.starts >= 3:
            return False
        try:
            self.hello = self.child.start(startup_timeout(self.runner.opts.timeout))
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
        self.alpha = opts.alpha
        self.rows: list[dict] = []
        self.setup_errors: list[str] = []
        self.sets: dict = {}
        self.kept: list = []
        self.notes: set = set()
        self.timing: dict = {}   #: target -> {"ours_s": ..., "reference_s": ...}
        self.row_seconds: dict = {}   #: case id -> wall seconds of its row (JUnit `time`)
        self.ulp_profiles: dict = {}  #: case id -> compare.Comparison.profile of a fail/artifact row (HTML plots)
        self.impl_side = None    #: esverify.oracle.impl_side.ImplSide under `parity --impl`, else ours.run
        self.targets: dict = {}  #: target name -> _Target, whose child is started before any case
        self._sets_lock = threading.Lock()
        self._stop = threading.Event()     #: set when the run is interrupted: the target threads stop
        self._live: list = []              #: the targets whose child is running

    def _setup_error(self, message: str):
        if message not in self.setup_errors:
            self.setup_errors.append(message)

    # -- sets
    def set_path(self, dtype: str, big: bool, variant: str, shapes=None, ties=()) -> Path:
        key = (dtype, big, variant, shapes, tuple(ties or ()))
        with self._sets_lock:   # targets run in parallel threads and share the base sets
            return self._set_path(key)

    def _set_path(self, key) -> Path:
        dtype, big, variant, shapes, ties = key
        if key not in self.sets:
            names, tensors = paramsets.build(dtype, big, variant, shapes)
            label = f"{dtype}-{'big' if big else 'small'}-{variant}" + (f"-{len(self.sets)}" if shapes else "")
            path = paramsets.write(self.work / "sets" / f"{label}.npz", names, tensors, ties)
            self.sets[key] = (path, names, tensors)
        return self.sets[key][0]

    def fresh(self, dtype: str, big: bool, variant: str, device: str, shapes=None, ties=()):
        self.set_path(dtype, big, variant, shapes, ties)
        with self._sets_lock:
            _, names, tensors = self.sets[(dtype, big, variant, shapes, tuple(ties or ()))]
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
        self.started_utc = _utc_now()
        # 1. where the report goes, before any work (issue 12 items 2 and 7); a run refused at setup
        # removes every folder it made for its reports again (issue 19 item 7)
        base = Path(opts.reports).expanduser() if opts.reports else Path("reports")
        made = missing_folders(opts.out or base, *(Path(p).expanduser().parent for p in (opts.junit, opts.summary)
                                                   if p))
        try:
            if opts.junit:
                check_file(opts.junit, "--junit")
            if opts.summary:
                check_file(opts.summary, "--summary")
            folder = claim_report_folder(opts.out, "parity", REPORT_PATTERNS, overwrite=opts.overwrite,
                                         base=base)
        except OutputError as exc:
            remove_empty(made)
            raise UsageError(str(exc)) from None
        out_dir = folder.path
        try:
            with catching():
                try:
                    return self._run_in(folder, started)
                except UsageError:
                    folder.release()
                    remove_empty([out_dir] if opts.out is None else [])   # the fresh folder of this run
                    remove_empty(made)
                    raise
        finally:
            folder.release()

    def _setup_checks(self):
        """Clones, the child Python, the case selection: every fault is a SetupError/UsageError, one
        line (what, why, the fix), before any case runs (issue 12 item 4)."""
        opts = self.opts
        wanted = list(TARGETS) if opts.target in (None, "all") else [opts.target]
        explicit_paths = {"es-at-scale": opts.ref, "es-awd": opts.awd_ref}
        options = {"es-at-scale": "--ref", "es-awd": "--awd-ref"}
        clones, not_given = {}, {}
        for name in wanted:
            target = TARGETS[name]
            path, named = _clone_path(target, explicit_paths[name])
            try:
                clones[name] = inspect_clone(target, path)
            except CloneError as exc:
                if not named and opts.target is None:
                    not_given[name] = str(exc)
                    continue
                if not named:   # the target was asked for by --target, and no clone was named
                    raise SetupError(f"--target {opts.target} needs the {name} clone: pass {options[name]} PATH "
                                     f"(or set ${target.env_var}); the default {path} does not exist. "
                                     "Where to get it: docs/parity.md, 'The reference clones'") from None
                source = options[name] if explicit_paths[name] else f"${target.env_var}"   # whence the path
                said = opts.settings.get({"es-at-scale": "ref", "es-awd": "awd_ref"}[name]) or {}
                if explicit_paths[name] and "[tool.esverify]" in str(said.get("source", "")):
                    source = said["source"]          # the path came from pyproject.toml, not the command line
                raise SetupError(f"{source} {path}: {exc}; fix: pass the top folder of your {name} "
                                 "clone (docs/parity.md, 'The reference clones')") from None
        if not clones:
            raise UsageError("no reference clone found: pass --ref PATH (es-at-scale) and/or --awd-ref PATH "
                             "(es-awd), or set $ESVERIFY_REF / $ESVERIFY_AWD_REF; tried: "
                             + "; ".join(not_given.values()))
        probe = _probe(opts.python, startup_timeout(opts.timeout), opts.python_explicit)
        missing_pkgs = [p for p in ("torch", "numpy") if not probe[p]]
        if missing_pkgs:
            what = " and ".join(missing_pkgs)
            pins = " ".join({"torch": "torch==2.13.0", "numpy": "numpy"}[p] for p in missing_pkgs)
            fix = f"install {'them' if len(missing_pkgs) > 1 else 'it'} there ({probe['executable']} -m pip " \
                  f"install {pins})"
            if not opts.python_explicit:   # with --python given, naming it again would not help
                fix += " or pass --python with an interpreter that has them"
            raise SetupError(f"the child Python {probe['executable']} ({probe['python']}) lacks {what}, which "
                             f"the reference needs; fix: {fix}")
        if opts.case_json is not None:
            all_cases = [_cases.from_json(opts.case_json)]
        elif opts.fuzz:
            from . import fuzz as _fuzz
            all_cases = _fuzz.draw_cases(wanted, opts)
        else:
            all_cases = _cases.build_matrix(wanted, opts.devices, opts.dtypes, opts.schemes, opts.population,
                                            opts.sigma, self.alpha, opts.iterations, opts.small, opts.noises,
                                            opts.case_seed, opts.loops)
        selected = _cases.select(all_cases, opts.case)
        if opts.case and not selected:
            raise UsageError(f"--case {opts.case!r} matches no case; case ids look like "
                             f"{all_cases[0].case_id if all_cases else 'es-at-scale/cpu/f32/iid/perturb/N6'}")
        return wanted, clones, not_given, probe, selected

    def _start_children(self, clones, selected) -> dict:
        """One child per target with cases, all started before any case runs; SetupError if one cannot."""
        opts = self.opts
        for name in dict.fromkeys(c.target for c in selected):
            if name not in clones:
                continue
            t = _Target(self, TARGETS[name], clones[name])
            self.targets[name] = t
            if not t.ensure_child():
                raise ChildStartError(f"the {name} child did not start under {opts.python}: {t.start_error}; "
                                 f"fix: the child's own last log lines are quoted here; check that {opts.python} "
                                 "runs `import torch, numpy`")
            env = t.hello.get("environment") or {}
            if opts.devices_explicit and "cuda" in opts.devices and not env.get("cuda"):
                raise SetupError("--devices names cuda but the child sees no CUDA device; fix: run on a machine "
                                 "with a CUDA GPU and a CUDA build of torch, or leave cuda out of --devices")
        return self.targets

    def _close_children(self, kill: bool = False):
        """Close every child (politely, or at once with `kill`: an interrupted op is not waited for)."""
        for t in self.targets.values():
            try:
                if kill:
                    t.child.kill()   # the whole process group
            finally:
                t.close()

    def _run_in(self, folder, started) -> RunResult:
        opts = self.opts
        out_dir = folder.path
        interrupted = None
        environments, selected, clones, not_given, probe, wanted = {}, [], {}, {}, {}, []
        with tempfile.TemporaryDirectory(prefix="esverify-parity-") as work:
            self.work = Path(work)
            progress = None
            start_error = None
            try:
                wanted, clones, not_given, probe, selected = self._setup_checks()
                for case in selected:
                    if case.target in not_given:
                        self.rows.append(_row(case, status="skipped", detail=_not_given(case.target)))
                try:
                    self._start_children(clones, selected)
                except ChildStartError as exc:   # a child that cannot start: one line, exit 2, and a report
                    start_error = exc
                    self.rows += [_row(c, status="error", detail=f"setup: {exc}") for c in selected
                                  if c.target not in not_given]
                if start_error is None:
                    progress = _progress(len(selected), opts.quiet)
                    progress.update(len(self.rows))
                    by_target = {}
                    for case in selected:
                        if case.target in self.targets:
                            by_target.setdefault(case.target, []).append(case)
                    # the targets run side by side: two children and our side busy at once (rows are
                    # put back in case order below)
                    with ThreadPoolExecutor(max_workers=max(1, len(by_target))) as pool:
                        futures = {name: pool.submit(self._run_target, self.targets[name], cs, progress)
                                   for name, cs in by_target.items()}
                        try:
                            for name, future in futures.items():
                                environments[name] = future.result()
                        except BaseException:   # Ctrl-C or a crash: stop the other target too, do not wait
                            self._stop.set()
                            for t in list(self.targets.values()):
                                t.child.kill()
                            raise
            except Interrupted as exc:
                interrupted = exc
            finally:
                if progress is not None:
                    progress.close()
                self._close_children(kill=interrupted is not None or start_error is not None)
            if interrupted is not None:
                done = {r["case"] for r in self.rows}
                reason = f"not run: the run was interrupted by {interrupted.signal_name}"
                self.rows += [_row(c, status="not-run", detail=reason) for c in selected if c.case_id not in done]
            for name, t in self.targets.items():
                environments.setdefault(name, dict((t.hello or {}).get("environment") or {}))
            order = {c.case_id: i for i, c in enumerate(selected)}
            self.rows.sort(key=lambda r: order.get(r["case"], len(order)))   # matrix order, whatever ran first
            frame = pd.DataFrame(self.rows, columns=COLUMNS)
            fuzz_report = None
            if opts.fuzz and interrupted is None and start_error is None:
                from . import fuzz as _fuzz
                fuzz_report = _fuzz.shrink_failures(self, clones, selected, frame, time.monotonic() - started)
            summary = summary_pivot(frame)
            code = interrupted.exit_code if interrupted else exit_code(frame, start_error is not None,
                                                                       opts.require_all)
            verdict = INTERRUPTED if interrupted else verdict_for(code, frame)
            wall = time.monotonic() - started
            metadata = self._metadata(clones, environments, probe, wall, list(not_given.values()))
            reason = verdict_reason(verdict, frame, interrupted.signal_name if interrupted else None)
            header = {"verdict": verdict, "exit_code": code, **({"reason": reason} if reason else {}),
                      "counts": status_counts(frame),
                      "started_utc": self.started_utc, "finished_utc": _utc_now(),
                      "command_line": " ".join(opts.argv)}
            metadata = {**header, **metadata}
            if interrupted:
                metadata["interrupted_by"] = interrupted.signal_name
            if fuzz_report is not None:
                metadata["fuzz"] = fuzz_report
            extra = _loop_report.report_sections(self, wanted, clones, [f"{n}: {m}" for n, m in not_given.items()],
                                                 {}, frame, metadata)
            report_set = ReportSet()   # the report, the child logs and the JUnit file: all written, or none
            layout = _parity_report.layout(frame, summary, extra, opts, selected, clones, self.ulp_profiles)
            written = write_report(out_dir, "parity", metadata=metadata, formats=opts.formats,
                                   title="esverify parity report", header=header, into=report_set, **layout)
            step_summary = _parity_report.step_summary(header, layout["sections"], out_dir)
            for name in self.targets:
                log = self.work / f"child-{name}.log"
                if log.is_file():   # streamed: the log is bounded by --max-output, but never read whole
                    written.append(report_set.add_copy(out_dir / f"child-{name}.log", log))
            for case_id, ours_path, theirs_path in self.kept:
                dest = out_dir / "tensors" / re.sub(r"[^A-Za-z0-9_.-]+", "_", case_id)
                dest.mkdir(parents=True, exist_ok=True)
                shutil.copy2(ours_path, dest / "ours.npz")
                if theirs_path and Path(theirs_path).is_file():
                    shutil.copy2(theirs_path, dest / "theirs.npz")
            if opts.junit:
                timed = frame.assign(seconds=frame["case"].map(self.row_seconds))
                written.append(report_set.add_text(opts.junit, to_junit(_loop_report.junit_frame(timed, extra),
                                                                         "esverify.parity", name_cols=["case"],
                                                                         failing=("fail",),
                                                                         erroring=("error", "unverifiable"),
                                                                         skipping=("skipped", "artifact", "unsupported",
                                                                                   "not-run"),
                                                                         time_col="seconds",
                                                                         suite_time=metadata["wall_time_s"],
                                                                         exit_code=code, verdict=verdict,
                                                                         reason=reason or verdict,
                                                                         timestamp=self.started_utc)))
            if opts.summary:
                written.append(report_set.add_text(opts.summary, step_summary))
            try:
                report_set.commit()
            except OSError as exc:   # exit 2, and no file of the set claims the verdict (esverify.reportset)
                raise SetupError(f"cannot write the report under {out_dir}: {exc}; no report file was left "
                                 f"there") from None
        if start_error is not None:   # one line for the console; the rows are in the report
            raise SetupError(f"{start_error}; report: {out_dir}")
        console = _console(frame, summary, metadata, out_dir, code, verdict, opts.require_all)
        return RunResult(frame, summary, metadata, code, out_dir, written, _loop_report.console_lines(extra, console),
                         step_summary)

    def _run_target(self, t, target_cases, progress) -> dict:
        """Run `target_cases` on the started target `t` (in a thread of its own: see _run_in)."""
        env = dict(t.hello["environment"])
        # the repeat check's cases, among those this child can run (no cuda rows without a GPU)
        runnable = [k for k, c in enumerate(target_cases) if c.device != "cuda" or env.get("cuda")]
        again = {runnable[k] for k in _repeat.choose([target_cases[k] for k in runnable],
                                                     exclude_ops=_loops.LOOP_OPS)} if not self.opts.fuzz else set()
        history = []
        for position, case in enumerate(target_cases, 1):
            if self._stop.is_set():
                break
            t.last_theirs = None
            mark = time.perf_counter()
            try:
                row = self._checked_case(t, case)
            except Exception as exc:  # noqa: BLE001 - one broken case must not hide the others' rows
                row = _row(case, status="error", detail=f"{case.op}: the runner failed on this case: "
                                                        f"{type(exc).__name__}: {exc}")
            self.row_seconds[case.case_id] = time.perf_counter() - mark
            if self._stop.is_set() and row["status"] == "error":
                break   # the interrupt killed its child mid-case: the row is not-run, not a child death
            self.rows.append(row)
            if position - 1 in again:
                history.append((position, case, row, t.last_theirs, None))
            progress.update(1)
        # the repeat check (esverify.oracle.repeat): some cases again, in the reverse order
        env["repeat"] = self._repeat(t, history[::-1], len(target_cases))
        env["restarts"] = max(0, t.child.starts - 1)
        env["coverage"] = _loop_report.read_coverage(self.work, t.target.name)
        return env

    def _repeat(self, t, history, done: int) -> list:
        """Run each (position, case, row, theirs, clone) of `history` again, in that order, after the
        `done` cases run so far; a row whose reference result differs from its first run's is failed
        with the diagnosis `state` (in place). Returns the report's record of the check."""
        record = []
        for position, case, row, theirs, clone in history:
            if self._stop.is_set():
                break
            if row["status"] not in _repeat.CHECKED or not theirs or theirs[0] != case.case_id:
                continue
            done += 1
            t.last_theirs = None
            t.variant_clone = clone
            try:
                again = self._checked_case(t, case)
            except Exception as exc:  # noqa: BLE001 - as in the matrix: noted, not a crash
                again = {"status": "error", "detail": f"{type(exc).__name__}: {exc}"}
            entry = {"case": case.case_id, "first": position, "again": done}
            if t.last_theirs is None or t.last_theirs[0] != case.case_id:
                entry["identical"] = None
                entry["note"] = f"not compared: the second run is {again['status']}: {again['detail'][:200]}"
            else:
                names = [n for n, _ in paramsets.shapes_of(case.big, case.shapes)] if case.op != "zscore" \
                    else ["coeffs"]
                text = _repeat.difference(theirs[1], t.last_theirs[1], names)
                entry["identical"] = not text
                if text:
                    _repeat.mark(row, position, done, text)
            record.append(entry)
        return record

    def _exchange(self, t, case, command: dict, compute=None):
        """Send `command` to the child of `t` and run `compute()` (our side; None when it already ran)
        while the child works: one request in flight per child. Returns (reply, computed, None), or
        (None, None, error row) when the child timed out, died or broke the protocol, or our side raised.
        The time of each side goes to the target's clock (metadata seconds_per_side)."""
        opts = self.opts
        clock = self.timing.setdefault(case.target, {"ours_s": 0.0, "reference_s": 0.0})
        started = time.perf_counter()
        pending = t.pool.submit(t.child.request, command, opts.timeout)
        computed = ours_error = None
        if compute is not None:
            mark = time.perf_counter()
            try:
                computed = compute()
            except Exception as exc:  # noqa: BLE001 - our side failing is a row, not a crash
                ours_error = exc
            clock["ours_s"] += time.perf_counter() - mark
        try:
            reply = pending.result()
        except ChildTimeout:
            return None, None, _row(case, status="error", detail=f"timeout: {case.op} did not finish within "
                                                                 f"{opts.timeout:g} s; the child's process group "
                                                                 "was killed and the child restarted")
        except ChildError as exc:   # died (its real exit status), or broke the protocol
            tail = " | ".join(exc.log_tail.strip().splitlines()[-2:])
            return None, None, _row(case, status="error", detail=f"{case.op}: {exc}; restarting it for the next "
                                                                 "case" + (f"; child log: {tail}" if tail else ""))
        finally:
            clock["reference_s"] += time.perf_counter() - started
        if ours_error is not None:
            return None, None, _row(case, status="error", detail=f"{case.op}: our side raised "
                                                                 f"{type(ours_error).__name__}: {ours_error}")
        return reply, computed, None

    @staticmethod
    def _reference_error_row(t, case, err: dict) -> dict:
        """The error row of a reply with status 'error': the reference's message, and the child's limit
        when it is what the reference ran into (--max-memory, --max-output)."""
        if err.get("kind") == "interface":   # esverify could not drive the clone: ours to say, not the reference's
            return _row(case, status="error", diagnosis="interface", detail=f"{case.op}: {err['message']}")
        hint = ""
        if err.get("kind") == "MemoryError" and t.child.max_memory:
            hint = f" (the child's memory is limited to {t.child.max_memory} bytes by --max-memory)"
        elif "[Errno 27]" in err["message"] and t.child.file_limit:     # EFBIG: over RLIMIT_FSIZE
            hint = f" (each file the child writes is limited to {t.child.file_limit} bytes, see --max-output)"
        return _row(case, status="error", detail=f"{case.op}: the reference side raised {err['message']}{hint}")

    def _checked_case(self, t, case) -> dict:
        """_run_case, then the child's float-environment probe of that case (flush_row)."""
        t.child.last_flush = []
        return flush_row(self._run_case(t, case), t.child.last_flush, t.target.name)

    def _run_case(self, t, case) -> dict:
        opts = self.opts
        env = t.hello["environment"] if t.hello else {}
        if case.device == "cuda" and not env.get("cuda"):
            return _row(case, status="skipped", detail=NO_CUDA)
        module_key = t.target.ops_need.get(case.kind) or t.target.ops_need[case.op.split("-")[0]]
        if not t.ensure_child():
            return _row(case, status="error", detail=f"the child could not be restarted: {t.start_error}")
        load_error = (t.hello.get("modules") or {}).get(module_key)
        if load_error and not getattr(t, "variant_clone", None):
            return too_old_python(case, load_error, env) or _row(case, status="error",
                                                                 detail=f"{case.op}: {load_error['message']}")
        if case.op in _loops.LOOP_OPS:   # the references' own training loops (issue 9)
            if self.impl_side is not None:
                return _row(case, status="unsupported", detail=f"{case.op}: unsupported by --impl: the "
                                                               "training-loop rows run the clean-room trainer only")
            return _loops.run_case(self, t, case)
        from ..rng import default_backend
        from ..rng.mappings import get_mapping
        backend = child_backend = default_backend(case.device)
        seen = (env.get("noise_backends") or {}).get("cpu", []) if case.device == "cpu" else ["torch"]
        if backend not in seen and case.noise == "contract":
            if not get_mapping(opts.mapping).bitwise_portable:
                return _row(case, status="error", detail=f"{case.op}: the child lacks the noise backend {backend!r} "
                                                         f"the parent uses, and {opts.mapping} is only bit-exact "
                                                         "within one backend (docs/CONTRACT.md §3a); install numba there")
            child_backend = None   # poly32 is bitwise identical on every backend (docs/CONTRACT.md §3b)
            self.notes.add(f"the child lacks noise backend {backend!r}; it used its own default "
                           f"({opts.mapping} is bitwise identical on every backend)")
        variant = "offset" if case.target == "es-awd" else "base"
        dtype = case.dtype if case.dtype in paramsets.DTYPES or case.dtype == paramsets.MIXED else "f32"
        names, tensors = self.fresh(dtype, case.big, variant, case.device, case.shapes, case.ties)
        inputs = [t.clone() for t in tensors]
        anchor = self.fresh(dtype, case.big, "base", case.device, case.shapes, case.ties)[1] \
            if case.kind in ("update", "decay") and case.target == "es-awd" else None
        clock = self.timing.setdefault(case.target, {"ours_s": 0.0, "reference_s": 0.0})
        started = time.perf_counter()
        try:
            if self.impl_side is not None:   # parity --impl: the wrapper is our side
                early, compute = None, None
                ours = self.impl_side.run(case, names, tensors, anchor, opts.seed, opts.mapping, backend)
            else:
                early, compute = _ours.prepare(case, names, tensors, anchor, opts.seed, opts.mapping, backend)
                ours = compute() if early is None else None      # the loop: its command needs our rewards
        except Exception as exc:  # noqa: BLE001 - our side failing is a row, not a crash
            return _row(case, status=getattr(exc, "status", "error"),   # impl_side: unsupported
                        detail=f"{case.op}: our side raised {type(exc).__name__}: {exc}")
        finally:
            clock["ours_s"] += time.perf_counter() - started
        out = self.work / "cases" / re.sub(r"[^A-Za-z0-9_.-]+", "_", case.case_id)
        out.mkdir(parents=True, exist_ok=True)
        command = {"op": case.kind, "case_id": case.case_id,
                   "device": case.device, "scheme": case.scheme, "mapping": opts.mapping,
                   "backend": child_backend, "noise": case.noise if case.op != "zscore" else "contract",
                   "set": str(self.set_path(dtype, case.big, variant, case.shapes, case.ties)), "sigma": case.sigma,
                   "alpha": case.alpha, "population": case.population, "out": str(out), "handles": {}}
        if getattr(t, "variant_clone", None):   # Runner.session: another clone of the same target
            command["clone"] = str(t.variant_clone)
        if anchor is not None:
            command["anchor_set"] = str(self.set_path(dtype, case.big, "base", case.shapes, case.ties))
        command.update(early if early is not None else ours.command)
        command["handles"] = {str(k): v for k, v in command["handles"].items()}
        if case.op == "loop":
            for it in command["iterations"]:
                it["handles"] = {str(k): v for k, v in it["handles"].items()}
        reply, computed, failed = self._exchange(t, case, command, compute if ours is None else None)
        if failed is not None:
            return failed
        ours = computed if ours is None else ours
        if reply["status"] != "ok":
            return self._reference_error_row(t, case, reply["error"])
        try:
            _, theirs, theirs_dtypes = paramsets.read(reply["results"])
        except Exception as exc:  # noqa: BLE001 - the child wrote the file: a bad one is its protocol error
            t.child.kill()
            return _row(case, status="error", detail=f"{case.op}: protocol violation by the child: its results "
                                                     f"file cannot be read ({type(exc).__name__}: {exc}); the "
                                                     "child was killed and restarted")
        t.last_theirs = (case.case_id, theirs)   # the repeat check compares a second run with these bits
        result_names = names if case.op != "zscore" else ["coeffs"]
        cmp = _compare.compare(ours.tensors, theirs, theirs_dtypes, result_names)
        if cmp.layout_error:
            return _row(case, status="error", detail=f"{case.op}: result layout differs: {cmp.layout_error}")
        reward_note = _compare.compare_rewards(ours.rewards, reply.get("rewards", [])) if case.op == "loop" else ""
        found = _compare.findings(reply.get("attribution"))
        untouched, sources, whatif = [], {}, None
        if found.missing:
            untouched = [k for k in found.missing
                         if np.array_equal(paramsets.bits_of(inputs[k]).reshape(-1), theirs[k].reshape(-1))]
            layout = [(paramsets.dtype_name(t), tuple(t.shape)) for t in inputs]
            sources = _compare.reuse_sources([k for k in found.missing if k not in untouched], layout)
            if case.scheme == "iid" and sources and (cmp.mismatches or reward_note) and not found.eager:
                whatif = self._whatif(case, dtype, variant, sources, theirs, theirs_dtypes, result_names)
        status, diagnoses, notes = _compare.diagnose(case.scheme, cmp, reward_note, found, untouched, sources,
                                                     whatif)
        if cmp.mismatches:
            notes.append(f"{case.op}{' (population %d)' % case.population if case.kind == 'update' else ''}: "
                         f"{cmp.summary()}")
            if cmp.specials:
                notes.append(cmp.specials)
        if reward_note:
            notes.insert(0, f"{case.op}: {reward_note}")
        if status in ("fail", "artifact") and cmp.profile:
            self.ulp_profiles[case.case_id] = cmp.profile
        if status == "fail" and self.opts.keep_tensors:
            ours_path = paramsets.write(out / "ours.npz", result_names, ours.tensors)
            self.kept.append((case.case_id, ours_path, reply["results"]))
        return _row(case, status=status, diagnosis=",".join(diagnoses), detail="; ".join(notes), **cmp.fields())

    @contextlib.contextmanager
    def session(self, target: str, clone_path):
        """One child for `target` on the clone at `clone_path`, to run cases one at a time (fuzz
        shrinking, mutant catalogs): yields run(case, clone=None) -> row dict (COLUMNS). `clone`, a
        path to another clone of the same target, switches the child to it for that case (its
        modules are loaded then; a load failure is that row's error). `run.repeat()` runs the
        cases run since the last repeat() or `run.forget()` again, in the reverse order (the repeat
        check: rows whose reference result changed are failed with `state`, in place) and returns
        its record. The child is closed at the end.
        """
        import torch
        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        clone = inspect_clone(TARGETS[target], clone_path)
        with tempfile.TemporaryDirectory(prefix="esverify-parity-") as work:
            self.work = Path(work)
            t = _Target(self, TARGETS[target], clone)

            history, count = [], [0]

            def run(case, clone=None):
                t.variant_clone = Path(clone).resolve() if clone else None
                t.last_theirs = None
                count[0] += 1
                try:
                    row = self._checked_case(t, case)
                except Exception as exc:  # noqa: BLE001 - as in the matrix: a row, not a crash
                    row = _row(case, status="error", detail=f"{case.op}: the runner failed on this case: "
                                                              f"{type(exc).__name__}: {exc}")
                history.append((count[0], case, row, t.last_theirs, t.variant_clone))
                return row

            def repeat():
                """The repeat check on every case run since the last call, in the reverse order: rows
                whose reference result changed are failed with `state` in place; returns the record."""
                done, todo = count[0], history[::-1]
                history.clear()
                record = self._repeat(t, todo, done)
                count[0] += len(record)
                return record
            run.repeat = repeat
            run.forget = history.clear   # the next repeat() covers only the cases run after this
            try:
                if not t.ensure_child():
                    raise UsageError(f"the {target} child did not start: {t.start_error}")
                yield run
            finally:
                t.close()
                torch.set_num_threads(threads)

    def _whatif(self, case, dtype, variant, sources, theirs, theirs_dtypes, result_names):
        """Ours re-run with the reference's noise reuse (slot k draws slot sources[k]'s noise),
        compared with theirs: the `reuse` diagnosis under iid (compare.diagnose)."""
        names, tensors = self.fresh(dtype, case.big, variant, case.device, case.shapes, case.ties)
        anchor = self.fresh(dtype, case.big, "base", case.device, case.shapes, case.ties)[1] \
            if case.kind in ("update", "decay") and case.target == "es-awd" else None
        from ..rng import default_backend
        try:
            again = _ours.run(case, names, tensors, anchor, self.opts.seed, self.opts.mapping,
                              default_backend(case.device), slot_map=sources)
        except Exception:  # noqa: BLE001 - no what-if, no artifact: the row stays a fail
            return None
        return _compare.compare(again.tensors, theirs, theirs_dtypes, result_names)

    def _metadata(self, clones, environments, probe, wall, skipped_targets) -> dict:
        import numpy
        import torch

        from ..rng import default_backend
        opts = self.opts
        root = checkout_root()
        warnings = [f"{name}: {w}" for name, c in clones.items() for w in c.warnings]
        for name, env in environments.items():   # the child's probe once the clone's modules had loaded
            flush = (env or {}).get("flush_to_zero") or []
            if isinstance(flush, list) and flush:
                warnings.append(f"{name}: the child flushes subnormals to zero (FTZ/DAZ) once the clone is loaded: "
                                f"{'; '.join(map(str, flush))}; usual causes: {SETTINGS_HINT}")
        return {
            "esverify_version": __version__, "esverify_commit": _git_commit(root),
            "parent_python": platform.python_version(), "parent_torch": torch.__version__,
            "parent_numpy": numpy.__version__, "platform": platform.platform(),
            "child_python": probe.get("python"), "child_executable": probe.get("executable"),
            "children": environments,
            "devices": list(opts.devices), "dtypes": list(opts.dtypes), "schemes": list(opts.schemes),
            "mapping": opts.mapping, "noise_backend": {d: default_backend(d) for d in opts.devices},
            "seed": f"0x{int(opts.seed):016x}",   # u64 as hex (docs/CONTRACT.md §5)
            "population": opts.population if opts.population is not None else _cases.main_population(opts.case_seed),
            "sigma": opts.sigma,
            "alpha": self.alpha, "iterations": opts.iterations, "case_pattern": opts.case,
            "case_seed": opts.case_seed, "noise": list(opts.noises), "case_json": opts.case_json,
            "small": opts.small, "timeout_s": opts.timeout, "startup_timeout_s": startup_timeout(opts.timeout),
            "child_limits": {"max_memory_bytes": default_max_memory() if opts.max_memory is None
                             else opts.max_memory, "max_output_bytes": opts.max_output},
            "clones": {name: c.metadata() for name, c in clones.items()},
            "warnings": warnings + sorted(self.notes),
            "targets_not_found": skipped_targets,
            "command_line": " ".join(opts.argv), "wall_time_s": round(wall, 2),
            "settings": opts.settings or {"note": "Options given directly (no command line)"},
            "seconds_per_side": {k: {n: round(v, 2) for n, v in d.items()} for k, d in self.timing.items()},
            "note": "contract rows substitute the RNG contract's noise for torch's: they certify the algebra "
                    "on identical noise; native rows let the reference draw torch's own noise and reproduce "
                    "it with the trainer's noise='torch': they certify runs made with torch's generator on "
                    "that device type, bitwise only with the same torch version "
                    f"({torch.__version__} here); native loop rows (fit, main*) let the reference's own loop "
                    "seed torch's generators with its 30-bit seeds, and our replicas seed theirs with the "
                    "same seeds: a pass speaks for checkpoints trained with torch's noise",
        }


def summary_pivot(frame: pd.DataFrame) -> pd.DataFrame:
    """Status counts per (target, device, op) x (dtype/scheme), e.g. "3 pass" or "1 fail, 2 pass"."""
    if frame.empty:
        return pd.DataFrame(columns=["target", "device", "op"])

    def cell(statuses):
        counts = statuses.value_counts()
        return ", ".join(f"{counts[s]} {s}" for s in STATUSES if s in counts)

    native = frame["noise"].eq("native") if "noise" in frame else False
    f = frame.assign(column=frame["dtype"] + "/" + frame["scheme"] + np.where(native, "/native", ""))
    index = [c for c in ("target", "device", "op") if c in f.columns]
    pivot = f.pivot_table(index=index, columns="column", values="status", aggfunc=cell, fill_value="",
                          sort=False)
    pivot.columns = [str(c) for c in pivot.columns]
    return pivot.reset_index()


def exit_code(frame: pd.DataFrame, setup_error: bool, require_all: bool = False) -> int:
    """0 when a row passed and every row is pass, skipped or artifact; 1 on any FAILING row, when
    nothing passed, or (require_all) when a row was skipped; 2 on a setup error."""
    if setup_error:
        return 2
    statuses = set(frame["status"]) if len(frame) else set()
    if statuses & set(FAILING) or "pass" not in statuses:
        return 1
    if require_all and statuses & {"skipped", "not-run", "unsupported"}:
        return 1
    return 0


def too_old_python(case, load_error: dict, env: dict) -> dict | None:
    """A `skipped` row when `load_error` (the child's diagnosis of a reference file) says the file
    needs a newer Python than the child's: the clone is fine, the row is not checked here. Else None."""
    needs = str(load_error.get("needs") or "")
    if load_error.get("kind") != "syntax" or not re.match(r"Python \d+\.\d+ or newer", needs):
        return None
    version = needs.split(" or newer")[0]
    return _row(case, status="skipped", detail=(
        f"not checked here: {load_error.get('file')} needs {needs}; the child is Python "
        f"{env.get('python') or '?'}; to check it: pass --python with a {version}+ interpreter that has "
        "torch and numpy"))


#: the statuses of a row that was checked (compared or tried); skipped, unsupported, not-run were not
CHECKED = ("pass", "fail", "error", "unverifiable", "artifact")
NOTHING_CHECKED = "nothing checked"


def verdict_for(code: int, frame: pd.DataFrame | None = None) -> str:
    """The report's verdict for an exit code (an interrupted run has its own, INTERRUPTED): "pass",
    "fail", "setup error", or NOTHING_CHECKED when exit 1 comes from a run in which no row was
    checked (every row skipped, unsupported or not run; docs/parity.md "Exit codes")."""
    if code == 1 and frame is not None and not frame["status"].isin(CHECKED).any():
        return NOTHING_CHECKED
    return {0: "pass", 1: "fail", 2: "setup error"}.get(code, INTERRUPTED)


def _reason_words(detail: str) -> str:
    """"not checked here: the child sees no CUDA device; to check it: ..." -> "the child sees no CUDA device"."""
    text = str(detail or "").removeprefix("not checked here: ").removeprefix("not run: ")
    return text.split("; to check it:")[0].strip()


def nothing_checked_reasons(frame: pd.DataFrame) -> dict:
    """{target: "N rows (devices): reason; ..."} for the rows that were not checked."""
    reasons = {}
    rows = frame[~frame["status"].isin(CHECKED)]
    for target, part in rows.groupby("target", sort=False):
        said = []
        for words, group in part.groupby(part["detail"].map(_reason_words), sort=False):
            said.append(f"{len(group)} {group['status'].iloc[0]} ({', '.join(sorted(set(group['device'])))}): "
                        f"{words or group['status'].iloc[0]}")
        reasons[str(target)] = "; ".join(said)
    return reasons


def verdict_reason(verdict: str, frame: pd.DataFrame, signal_name: str | None = None) -> str:
    """The verdict in words for the report header and JUnit ("" for pass and fail, whose rows say it)."""
    if verdict == INTERRUPTED:
        return f"interrupted by {signal_name}: {int((frame['status'] == 'not-run').sum())} rows not run"
    if verdict == NOTHING_CHECKED:
        return "nothing checked: " + "; ".join(f"{t}: {r}" for t, r in nothing_checked_reasons(frame).items())
    return ""


def status_counts(frame: pd.DataFrame) -> dict:
    """{status: rows} in STATUSES order, statuses with no rows left out."""
    counts = frame["status"].value_counts().to_dict() if len(frame) else {}
    return {s: int(counts[s]) for s in STATUSES if s in counts}


def _progress(total: int, quiet: bool):
    """The progress bar on stderr: drawn only when stderr is a terminal (cliutil.progress_enabled)."""
    from tqdm import tqdm

    from ..cliutil import progress_enabled
    return tqdm(total=total, file=sys.stderr, disable=not progress_enabled(quiet), desc="parity", unit="case",
                leave=False)


def _counts_line(frame) -> str:
    return ", ".join(f"{n} {s}" for s, n in status_counts(frame).items()) or "no rows"


def _wrap(text: str, indent: str = "    ", width: int = 100) -> list[str]:
    """A detail in full, wrapped at word boundaries (never cut mid-sentence)."""
    return textwrap.wrap(text, width=width, initial_indent=indent, subsequent_indent=indent,
                         break_long_words=False, break_on_hyphens=False) or [indent]


#: the widest console grid shown as is; a wider one (the default matrix: about 290 characters) is shown
#: as compact_summary, one line per (target, device, op)
CONSOLE_WIDTH = 120


def compact_summary(frame: pd.DataFrame) -> pd.DataFrame:
    """Per (target, device, op): the status counts over every dtype/scheme column ("12 pass", "9 pass,
    3 artifact") and, for each status other than pass that not every column has, the columns that have
    it ("artifact: f32/iid, f16/iid"); the console's summary when the full grid is too wide."""
    columns = ["target", "device", "op", "statuses", "where not pass"]
    if frame.empty:
        return pd.DataFrame(columns=columns)
    native = frame["noise"].eq("native") if "noise" in frame else False
    f = frame.assign(column=frame["dtype"] + "/" + frame["scheme"] + np.where(native, "/native", ""))
    rows = []
    for (target, device, op), group in f.groupby(["target", "device", "op"], sort=False):
        counts = group["status"].value_counts()
        every = set(group["column"])
        where = []
        for status in STATUSES:
            if status == "pass" or status not in counts:
                continue
            cols = list(dict.fromkeys(group.loc[group["status"] == status, "column"]))
            if set(cols) != every:
                where.append(f"{status}: {', '.join(cols)}")
        rows.append({"target": target, "device": device, "op": op,
                     "statuses": ", ".join(f"{counts[s]} {s}" for s in STATUSES if s in counts),
                     "where not pass": "; ".join(where)})
    return pd.DataFrame(rows, columns=columns)


def _legend(grid) -> list[str]:
    """A few lines under the console grid saying what its columns are and what a pass certifies under
    each noise source (the report's metadata `note` says it at length; docs/parity.md)."""
    columns = [str(c) for c in grid.columns if "/" in str(c)]
    if not columns:
        return []
    said = []
    if any(not c.endswith(("/native", "/-")) for c in columns):
        said.append("dtype/scheme: on the contract's noise (a pass certifies the algebra)")
    if any(c.endswith("/native") for c in columns):
        said.append(".../native: on torch's own generator, as checkpoints were trained (a pass holds for this "
                    "torch version and device type only)")
    if any(c.endswith("/-") for c in columns):
        said.append("f64/-: z-score rows (no noise)")
    if "op" in grid and grid["op"].isin(_loops.LOOP_OPS).any():
        said.append("fit, main*: the references' own training loops")
    return _wrap("; ".join(said) + "; see docs/parity.md, 'What a pass certifies'", indent="")


def _console(frame, summary, metadata, out_dir, code, verdict, require_all=False) -> str:
    """Verdict and counts (cpu and cuda apart), the summary grid, the rows that need attention grouped
    by their detail (each detail in full, wrapped), the 'not checked here' list, warnings, the report."""
    lines = [f"esverify parity: {verdict.upper()} (exit {code}): {len(frame)} cases: {_counts_line(frame)}"]
    if verdict == NOTHING_CHECKED:   # not "FAIL with 0 failed": what kept every row from being checked
        lines += [f"  nothing checked: {target}: {reason}" for target, reason in nothing_checked_reasons(frame).items()]
    for device in ("cpu", "cuda"):
        rows = frame[frame["device"] == device]
        if len(rows):
            lines.append(f"  {device}: {_counts_line(rows)}")
    # the grid of the devices where something ran; an all-skipped device is the line above
    ran = set(frame.loc[~frame["status"].isin(["skipped", "not-run"]), "device"])
    grid = summary[summary["device"].isin(ran)] if len(summary) else summary
    if len(grid):
        table = console_table(grid, max_rows=40)
        if max(map(len, table.split("\n"))) > CONSOLE_WIDTH:   # one column per dtype/scheme: too wide
            table = (console_table(compact_summary(frame[frame["device"].isin(ran)]), max_rows=60)
                     + "\n(the full grid, one column per dtype/scheme, is in the report's parity.md and "
                       "parity.html)")
        lines += ["", table, *_legend(grid)]
    attention = frame[frame["status"].isin([*FAILING, "artifact"])]
    if len(attention):
        lines += ["", "needs attention:"]
        rank = {s: i for i, s in enumerate([*FAILING, "artifact"])}
        # failing rows group by their whole detail; artifacts (documented reference behaviour, exit 0)
        # by target, op and diagnosis, whose details differ only in counts: one example each
        key = attention["detail"].where(attention["status"] != "artifact",
                                        attention["target"] + "/" + attention["op"] + "/"
                                        + attention["diagnosis"].fillna("").astype(str))
        grouped = attention.assign(_key=key).groupby(["status", "_key"], sort=False)
        groups = [((status, rows["detail"].iloc[0]), rows) for (status, _), rows in grouped]
        groups.sort(key=lambda g: rank[g[0][0]])
        for (status, detail), rows in groups[:12]:
            first = rows["case"].iloc[0]
            more = f" and {len(rows) - 1} more" if len(rows) > 1 else ""
            lines.append(f"  {status}: {first}{more}")
            lines += _wrap(terminal_text(str(detail or status)))
        if len(groups) > 12:
            lines.append(f"  ... {len(groups) - 12} more kinds of rows: see {out_dir / 'parity.md'}")
    skipped = frame[frame["status"].isin(["skipped", "not-run"])]
    if len(skipped):
        lines += ["", "not checked here" + (" (--require-all: exit 1):" if require_all else ":")]
        for detail, rows in skipped.groupby("detail", sort=False):
            lines.append(f"  {len(rows)} rows ({', '.join(sorted(set(rows['device'])))}):")
            lines += _wrap(terminal_text(str(detail).removeprefix("not checked here: ")))
    lines += [f"warning: {terminal_text(str(w))}" for w in metadata.get("warnings", [])]
    lines.append(f"report: {terminal_text(str(out_dir))} (wall time {metadata['wall_time_s']} s; exit {code})")
    return "\n".join(lines)
