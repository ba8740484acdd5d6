"""The report of a finished parity run: metadata, sections, files, console (docs/parity.md, "The report").

Design record: `finish` turns the rows of a run into its
report set (written whole or not at all, esverify.reportset), the JUnit
and summary files, the kept tensors and child logs, and the console text;
the runner only hands over what the run produced. Nothing here names a
reference: per-reference sections come from the adapters (loop_report).
"""
from __future__ import annotations

import platform
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from .. import __version__
from ..interrupt import VERDICT as INTERRUPTED
from ..numerics_probe import what_is_off
from ..paths import checkout_root
from ..report import to_junit, utc_now, write_report
from ..reportset import ReportSet
from . import cases as _cases
from . import loop_report as _loop_report
from . import parity_report as _parity_report
from .child_process import default_max_memory
from .clones import git_identity
from .console import (accounting, accounting_line, console_text, exit_code, status_counts, summary_pivot,
                      verdict_for, verdict_reason)
from .options import SetupError
from .rows import COLUMNS
from .session import startup_timeout


@dataclass
class RunResult:
    """A finished run: the rows (`frame`, columns COLUMNS), the summary pivot, the metadata dict,
    the exit code (0/1/2, see esverify.oracle.runner), the report folder, the files written and the
    console text."""
    frame: pd.DataFrame
    summary: pd.DataFrame
    metadata: dict
    exit_code: int
    out_dir: Path
    written: list
    console: str
    step_summary: str = ""   #: the --summary block (Markdown; parity_report.step_summary)


def git_commit(path: Path | None) -> str | None:
    """esverify's own commit, with "-dirty" when the checkout has changes; None outside a checkout."""
    commit, dirty = git_identity(path) if path is not None else (None, None)
    return commit + ("-dirty" if dirty else "") if commit else None


def run_metadata(runner, clones, environments, probe, wall, skipped_targets) -> dict:
    """The report's metadata: versions, options, clones, children, warnings, timings, the note."""
    import numpy
    import torch

    from ..rng import default_backend
    opts = runner.opts
    root = checkout_root()
    warnings = [f"{name}: {w}" for name, c in clones.items() for w in c.warnings]
    from .. import registry
    warnings += registry.problems()   # a plug-in left out, a name claimed twice: in every report
    for name, env in environments.items():   # the child's probe once the clone's modules had loaded
        flush = (env or {}).get("flush_to_zero") or []
        if isinstance(flush, list) and flush:
            does, causes, _ = what_is_off(flush)   # FTZ/DAZ, or a rounding mode other than to nearest
            warnings.append(f"{name}: the child {does} once the clone is loaded: "
                            f"{'; '.join(map(str, flush))}; usual causes: {causes}")
    return {
        "esverify_version": __version__, "esverify_commit": git_commit(root),
        "parent_python": platform.python_version(), "parent_torch": torch.__version__,
        "parent_numpy": numpy.__version__, "platform": platform.platform(),
        "child_python": probe.get("python"), "child_executable": probe.get("executable"),
        # each reference's own (--python NAME=PATH; esverify.oracle.interpreters), probed before any row
        "child_interpreters": getattr(runner, "interpreters", {}),
        "children": environments,
        "devices": list(opts.devices), "dtypes": list(opts.dtypes), "schemes": list(opts.schemes),
        "mapping": opts.mapping, "noise_backend": {d: default_backend(d) for d in opts.devices},
        "seed": f"0x{int(opts.seed):016x}",   # u64 as hex (docs/CONTRACT.md §5)
        "population": opts.population if opts.population is not None else _cases.main_population(opts.case_seed),
        "sigma": opts.sigma,
        "alpha": runner.alpha, "iterations": opts.iterations, "case_pattern": opts.case,
        "case_seed": opts.case_seed, "noise": list(opts.noises), "case_json": opts.case_json,
        "small": opts.small, "timeout_s": opts.timeout, "startup_timeout_s": startup_timeout(opts.timeout),
        "child_limits": {"max_memory_bytes": default_max_memory() if opts.max_memory is None
                         else opts.max_memory, "max_output_bytes": opts.max_output},
        "clones": {name: c.metadata() for name, c in clones.items()},
        "warnings": warnings + sorted(runner.notes),
        "targets_not_found": skipped_targets,
        "command_line": " ".join(opts.argv), "wall_time_s": round(wall, 2),
        "settings": opts.settings or {"note": "Options given directly (no command line)"},
        "seconds_per_side": {k: {n: round(v, 2) for n, v in d.items()} for k, d in runner.timing.items()},
        "note": "contract rows substitute the RNG contract's noise for torch's: they certify the algebra "
                "on identical noise; native rows let the reference draw torch's own noise and reproduce "
                "it with the trainer's noise='torch': they certify runs made with torch's generator on "
                "that device type, bitwise only with the same torch version "
                f"({children_torch(environments, torch.__version__)}); native loop rows (fit, main*) let the "
                "reference's own loop seed torch's generators with its 30-bit seeds, and our replicas seed theirs "
                "with the same seeds: a pass speaks for checkpoints trained with torch's noise",
    }


def _device_of(env: dict) -> str:
    names = env.get("cuda_devices") or []
    return f"cuda ({', '.join(map(str, names))}) and cpu" if env.get("cuda") else "cpu"


def children_torch(environments: dict, parent_torch: str) -> str:
    """"the children: REF torch 2.14.1+cu130 on cuda (...) and cpu; ...; the parent (our side's native
    noise): torch 2.13.0+cpu": which torch drew each side's native noise."""
    said = [f"{name} torch {env.get('torch')} on {_device_of(env)}" for name, env in environments.items()
            if isinstance(env, dict) and env.get("torch")]
    return ("the children: " + "; ".join(said) + "; " if said else "") + \
        f"the parent (our side's native noise): torch {parent_torch}"


def version_warnings(environments: dict, parent_torch: str, frame: pd.DataFrame) -> list[str]:
    """One warning per reference whose child ran another torch than the parent while native rows were
    compared: torch's generator of two versions is compared there (a fail may be the version)."""
    from .console import CHECKED
    out = []
    for name, env in environments.items():
        child = (env or {}).get("torch") if isinstance(env, dict) else None
        if not child or child == parent_torch or frame.empty:
            continue
        native = frame[(frame["target"] == name) & (frame["noise"] == "native") & frame["status"].isin(CHECKED)]
        if len(native):
            out.append(f"{name}: the child ran torch {child} on {_device_of(env)}, the parent torch {parent_torch}: "
                       f"its {len(native)} native rows compare torch's generator of two versions (a fail there may "
                       "be the version, not the code); fix: the same torch on both sides, or --noise contract")
    return out


def finish(runner, out_dir: Path, run: dict) -> RunResult:
    """Write the report of a run and return its RunResult. `run`: selected, wanted, clones, not_given,
    probe, environments, started (monotonic), wall (seconds), interrupted (esverify.interrupt.Interrupted
    or None), start_error (ChildStartError or None), fuzz (the fuzz metadata or None). Raises SetupError
    when the report cannot be written, or after writing it when a child did not start."""
    opts = runner.opts
    interrupted, start_error = run["interrupted"], run["start_error"]
    selected, clones, not_given = run["selected"], run["clones"], run["not_given"]
    order = {c.case_id: i for i, c in enumerate(selected)}
    runner.rows.sort(key=lambda r: order.get(r["case"], len(order)))   # matrix order, whatever ran first
    frame = pd.DataFrame(runner.rows, columns=COLUMNS)
    fuzz_report = run["fuzz"](frame) if run.get("fuzz") else None
    summary = summary_pivot(frame)
    code = interrupted.exit_code if interrupted else exit_code(frame, start_error is not None, opts.require_all)
    verdict = INTERRUPTED if interrupted else verdict_for(code, frame)
    metadata = run_metadata(runner, clones, run["environments"], run["probe"], run["wall"](),
                            list(not_given.values()))
    reason = verdict_reason(verdict, frame, interrupted.signal_name if interrupted else None)
    if not reason:   # a PASS never stands over rows an interpreter kept from running (interpreters.py)
        from .interpreters import interpreter_gaps
        reason = interpreter_gaps(frame)
    header = {"verdict": verdict, "exit_code": code, **({"reason": reason} if reason else {}),
              "counts": status_counts(frame), "accounted": accounting_line(accounting(frame)),
              **({"clones_run": run["clones_line"]} if run.get("clones_line") else {}),
              "started_utc": runner.started_utc, "finished_utc": utc_now(), "command_line": " ".join(opts.argv)}
    metadata = {**header, **metadata, "accounting": accounting(frame)}
    import torch
    metadata["warnings"] = list(metadata["warnings"]) + version_warnings(run["environments"], torch.__version__, frame)
    if interrupted:
        metadata["interrupted_by"] = interrupted.signal_name
    if fuzz_report is not None:
        metadata["fuzz"] = fuzz_report
    extra = _loop_report.report_sections(runner, run["wanted"], clones,
                                         [f"{n}: {m}" for n, m in not_given.items()], {}, frame, metadata)
    report_set = ReportSet()   # the report, the child logs and the JUnit file: all written, or none
    layout = _parity_report.layout(frame, summary, extra, opts, selected, clones, runner.ulp_profiles)
    written = write_report(out_dir, "parity", metadata=metadata, formats=opts.formats,
                           title="esverify parity report", header=header, into=report_set, **layout)
    step_summary = _parity_report.step_summary(header, layout["sections"], out_dir)
    for name in runner.sessions:
        log = runner.work / f"child-{name}.log"
        if log.is_file():   # streamed: the log is bounded by --max-output, but never read whole
            written.append(report_set.add_copy(out_dir / f"child-{name}.log", log))
    for case_id, ours_path, theirs_path in runner.kept:
        dest = out_dir / "tensors" / re.sub(r"[^A-Za-z0-9_.-]+", "_", case_id)
        dest.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ours_path, dest / "ours.npz")
        if theirs_path and Path(theirs_path).is_file():
            shutil.copy2(theirs_path, dest / "theirs.npz")
    if opts.junit:
        timed = frame.assign(seconds=frame["case"].map(runner.row_seconds))
        written.append(report_set.add_text(opts.junit, to_junit(
            _loop_report.junit_frame(timed, extra), "esverify.parity", name_cols=["case"], failing=("fail",),
            erroring=("error", "unverifiable"), skipping=("skipped", "artifact", "defect", "unsupported", "not-run"),
            time_col="seconds", suite_time=metadata["wall_time_s"], exit_code=code, verdict=verdict,
            reason=reason or verdict, timestamp=runner.started_utc)))
    if opts.summary:
        written.append(report_set.add_text(opts.summary, step_summary))
    try:
        report_set.commit()
    except OSError as exc:   # exit 2, and no file of the set claims the verdict (esverify.reportset)
        raise SetupError(f"cannot write the report under {out_dir}: {exc}; no report file was left there") from None
    if start_error is not None:   # one line for the console; the rows are in the report
        raise SetupError(f"{start_error}; report: {out_dir}")
    console = console_text(frame, summary, metadata, out_dir, code, verdict, opts.require_all,
                           entries=layout["sections"]["attention"])
    return RunResult(frame, summary, metadata, code, out_dir, written, _loop_report.console_lines(extra, console),
                     step_summary)
