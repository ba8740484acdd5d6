"""Report sections of the loop rows: findings, coverage, the paths reached, not checked.

- `findings`: documented reference quirks a loop row observed
  (each adapter's `findings`), with what was observed;
- `coverage`: per target, every function of the clone files the child
  loaded, whether it ran (recorded by the interpreter in the child,
  oracles/child_coverage.py), whether docs/references.md says a loop
  reaches it, and with --line-coverage its executed lines (coverage.py);
  the metadata keeps the percentage per target, and every reached function
  that did not run is a warning;
- `coverage_paths`: per target, the code paths its adapter lists by what
  selects them (esverify.oracle.run_paths: update chunks, rank, engines,
  mirroring, decay, resume, non-finite rewards, ...), whether a row that
  ran reached each and which; the metadata's `coverage_paths` names the
  reached and the unreached ones;
- `not_checked`: every target that did not run and why (no clone given,
  not selected, an unusable clone), and loop rows left out.
Each is a pandas frame, so every report format carries it.
"""
from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from .. import jsonin
from . import adapters as _adapters
from . import run_paths


def read_coverage(work, target: str) -> dict:
    """The child's cumulative coverage of the clone ({"files": ..., "error": ...}; see oracles/child_loops.py)."""
    path = Path(work) / f"coverage-{target}.json"
    try:
        data = jsonin.load_path(path, max_bytes=64 << 20, max_depth=16)   # the child wrote it: outside input
        if not isinstance(data, dict):
            raise ValueError(data)
    except (OSError, ValueError):
        return {"files": {}, "error": "no coverage data: the child saved none"}
    return {"files": data.get("files", {}), "error": data.get("error", ""), "how": data.get("how", ""),
            "interface": data.get("interface") or [], "interface_error": data.get("interface_error", "")}


def _coverage_frame(environments: dict):
    rows, summary = [], {}
    for target, env in environments.items():
        cov = (env or {}).get("coverage") or {"files": {}, "error": "no coverage data: the child did not start, "
                                                                     "or the run stopped before it reported"}
        reached = _adapters.get(target).reached if target in _adapters.names() else {}
        total = ran = 0
        lines = None   # executed lines, counted only under --line-coverage
        for rel, info in sorted(cov.get("files", {}).items()):
            counts = info.get("function_lines")
            counts = counts if isinstance(counts, dict) else {}
            if type(info.get("lines")) is int and info["lines"] >= 0:
                lines = (lines or 0) + info["lines"]
            for name, did in info["functions"].items():
                count = counts.get(name)   # the child wrote it: outside input, an int >= 0 or nothing
                count = count if type(count) is int and count >= 0 else None
                rows.append({"target": target, "file": rel, "function": name, "ran": bool(did),
                             "reached_by_loop": name in reached.get(rel, []), "lines": count})
                total += 1
                ran += bool(did)
        missing = [f"{rel}: {name}" for rel, names in reached.items() for name in names
                   if not cov.get("files", {}).get(rel, {}).get("functions", {}).get(name, False)]
        summary[target] = {"files": sorted(cov.get("files", {})), "functions": total, "functions_ran": ran,
                           "percent": round(100.0 * ran / total, 1) if total else None, "lines": lines,
                           "reached_not_run": missing, "error": cov.get("error", ""), "how": cov.get("how", ""),
                           "interface": cov.get("interface") or [],
                           "interface_error": cov.get("interface_error", "")}
    frame = pd.DataFrame(rows, columns=["target", "file", "function", "ran", "reached_by_loop", "lines"])
    frame["lines"] = frame["lines"].astype("Int64")   # blank where not counted (no --line-coverage)
    return frame, summary


def _not_checked(runner, wanted, clones, skipped_targets, failed):
    rows = []
    for adapter in _adapters.all_adapters():
        name = adapter.name
        if name in clones:
            if not runner.opts.loops and adapter.loop_ops:
                rows.append({"target": name, "not_checked": adapter.not_checked(loops_left_out=True),
                             "why": "the training-loop rows were left out (--no-loops)"})
            for what, why in adapter.never_checked():
                rows.append({"target": name, "not_checked": what, "why": why})
            continue
        said = next((s.split(": ", 1)[1] for s in skipped_targets if s.startswith(f"{name}: ")), "")
        if said.startswith("not asked for"):   # --ref named other clones: the clones line says it, once
            continue
        if name not in wanted:
            why = f"not selected (--target {runner.opts.target})"
        elif name in failed:
            why = f"its clone is unusable: {failed[name]}"
        else:
            found = next((s.split(": ", 1)[1] for s in skipped_targets if s.startswith(f"{name}: ")), "")
            why = f"no clone given: pass {adapter.how_to_give()}" + (f"; {found}" if found else "")
        rows.append({"target": name, "not_checked": adapter.not_checked(), "why": why})
    return pd.DataFrame(rows, columns=["target", "not_checked", "why"])


#: the statuses of a row that ran (a skipped, unsupported or not-run row ran nothing in the child)
RAN = ("pass", "fail", "error", "unverifiable", "artifact", "defect")


def loop_rows_run(frame) -> set:
    """The targets with at least one training-loop row (`fit`, `main*`) that ran in the child."""
    if frame is None or frame.empty:
        return set()
    loop_ops = {op for a in _adapters.all_adapters() for op in a.loop_ops}
    return set(frame.loc[frame["op"].isin(loop_ops) & frame["status"].isin(RAN), "target"])


def report_sections(runner, wanted, clones, skipped_targets, failed, frame, metadata) -> dict:
    """Extra report sections (findings, coverage, not_checked); also fills `metadata` and its warnings."""
    findings = runner.findings_list()
    coverage_frame, coverage = _coverage_frame(metadata.get("children", {}))
    for target, info in coverage.items():
        findings += interface_findings(target, info["interface"])
        if info["interface_error"]:
            metadata["warnings"].append(f"{target}: interface: {info['interface_error']}")
    findings_frame = pd.DataFrame([{**f, "observed": "; ".join(f["observed"])} for f in findings],
                                  columns=["target", "finding", "description", "observed", "rows"])
    for env in metadata.get("children", {}).values():
        if isinstance(env, dict):
            env.pop("coverage", None)      # the table is its own section; metadata keeps the summary
    not_checked = _not_checked(runner, wanted, clones, skipped_targets, failed)
    metadata["findings"] = findings_frame.to_dict(orient="records")
    metadata["coverage"] = coverage
    metadata["not_checked"] = not_checked.to_dict(orient="records")
    looped = loop_rows_run(frame)
    for target, info in coverage.items():
        if target not in looped:   # no loop row ran: "did not run" per function would only repeat that
            if info["reached_not_run"] and runner.opts.loops:   # --no-loops: the not_checked line says it
                metadata["warnings"].append(f"{target}: coverage: no training-loop row ran in this selection, "
                                            f"so {len(info['reached_not_run'])} functions a loop reaches did not "
                                            "run (the coverage section names them)")
            continue
        if info["error"] and not info["files"]:   # nothing measured: whether they ran is unknown, not "no"
            metadata["warnings"].append(f"{target}: coverage: {info['error']}; unknown whether "
                                        f"{len(info['reached_not_run'])} functions a loop reaches ran")
            continue
        if info["error"]:
            metadata["warnings"].append(f"{target}: coverage: {info['error']}")
        for item in info["reached_not_run"]:
            metadata["warnings"].append(f"{target}: coverage: {item} did not run, although docs/references.md §5 says "
                                        "a training loop reaches it: a pass does not cover it")
    for row in not_checked.itertuples():
        metadata["warnings"].append(f"{row.target}: not checked ({row.why}): {row.not_checked}")
    # the code paths each reference's rows reached, by what selects them (function coverage cannot tell
    # one update chunk from three): the coverage section's second table, and per target in the metadata
    paths_frame, paths = run_paths.paths_frame(frame, set(clones))
    metadata["coverage_paths"] = paths
    return {"findings": findings_frame, "coverage": coverage_frame, "coverage_paths": paths_frame,
            "not_checked": not_checked}


#: what esverify does about each kind of interface difference (docs/references.md §5, "Interface drift")
DRIFT_ACTIONS = {
    "missing-file": "the rows that need this file error",
    "missing-function": "a loop that reaches it errors with diagnosis interface",
    "missing-class": "a loop that reaches it errors with diagnosis interface",
    "missing-method": "a loop that reaches it errors with diagnosis interface",
    "signature": "esverify passes the documented parameters by name; a new required one makes the loop row error "
                 "with diagnosis interface",
    "missing-import": "a module-level name the driver replaces may be missing: its loop row may error",
    "flag-missing": "esverify still passes the flag; argparse refuses it and the main rows error",
    "flag-default": "esverify passes every flag it relies on explicitly: the changed default is not used",
    "flag-new": "esverify does not pass it: the loop runs with the clone's default",
    "constant": "esverify passes the value of every setting explicitly: the changed default is not used",
}


def _shown(value) -> str:
    """A manifest value in words: a parameter list as a signature, anything else as text."""
    if isinstance(value, list) and all(isinstance(v, dict) and "name" in v for v in value):
        return "(" + ", ".join(v["name"] + (f"={v['default']}" if v.get("default") is not None else "")
                               for v in value) + ")"
    if value is None:
        return "nothing"
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True)


def interface_findings(target: str, items: list) -> list:
    """One finding per interface difference between the clone and the manifest the driver was written
    for: file, name, expected/found, and what esverify does about it."""
    out = []
    for item in items:
        kind = str(item.get("kind", ""))
        action = DRIFT_ACTIONS.get(kind, "esverify drives the documented interface regardless")
        description = (f"{item.get('file', '')}: {item.get('name', '')}: esverify's driver expects "
                       f"{_shown(item.get('expected'))}, the clone has {_shown(item.get('found'))}")
        if kind == "needs-python":   # the child's interpreter, not the clone (oracles/interface_drift.py)
            description = (f"{item.get('file', '')}: its interface is not checked here: the file needs "
                           f"{_shown(item.get('expected'))} and the child is {_shown(item.get('found'))}")
            action = f"give --python {target}=PATH with such an interpreter to check it and run its rows"
        out.append({"target": target, "finding": f"interface: {kind}", "description": description,
                    "observed": [action], "rows": 0})
    return out


#: the longest "paths (...)" console line that lists the paths not reached by name (the parity console's width)
PATHS_LINE_WIDTH = 120


def console_lines(extra: dict, console: str) -> str:
    """The runner's console text with findings and coverage lines before its last ("report:") line."""
    lines = console.split("\n")
    added = []
    for f in extra["findings"].itertuples():
        added.append(f"finding ({f.target}): {f.description}; observed: {f.observed}")
    cov = extra["coverage"]
    for target in dict.fromkeys(cov["target"]):
        part = cov[cov["target"] == target]
        loop = part[part["reached_by_loop"]]
        added.append(f"coverage ({target}): {int(part['ran'].sum())} of {len(part)} functions ran "
                     f"({100.0 * part['ran'].mean():.0f}%) in {part['file'].nunique()} files; loop interface: "
                     f"{int(loop['ran'].sum())} of {len(loop)} ran"
                     + (f"; {int(part['lines'].sum())} lines ran in its functions" if part["lines"].notna().any()
                        else ""))
    paths = extra.get("coverage_paths")
    for target in ([] if paths is None else dict.fromkeys(paths["target"])):
        part = paths[paths["target"] == target]
        missed = list(part.loc[~part["reached"].astype(bool), "path"])
        head = f"paths ({target}): {int(part['reached'].sum())} of {len(part)} reached"
        named = head + (f"; not reached: {'; '.join(missed)}" if missed else "")
        # the names are long: a line that would pass the console's width gives the count and the table
        added.append(named if len(named) <= PATHS_LINE_WIDTH
                     else f"{head}; {len(missed)} not reached (listed in the report's coverage_paths table)")
    return "\n".join(lines[:-1] + added + lines[-1:])


def junit_frame(frame, extra: dict):
    """The rows for JUnit: the cases, plus one skipped testcase per target that was not checked."""
    rows = [{"case": f"{r.target}/not-checked", "status": "skipped",
             "detail": f"not checked ({r.why}): {r.not_checked}"} for r in extra["not_checked"].itertuples()]
    return pd.concat([frame, pd.DataFrame(rows, columns=["case", "status", "detail"])], ignore_index=True) \
        if rows else frame
