"""What a parity run prints and the verdict it reaches (docs/parity.md, "Exit codes", "The console").

Design record: pure functions of the rows frame and the
metadata; nothing here runs a case or names a reference. The summary
grid, the exit code and verdict, the reasons of a "nothing checked" run,
and the console text (verdict, counts, grid or its compact form, the rows
that need attention, what was not checked, warnings).
"""
from __future__ import annotations

import sys
import textwrap

import numpy as np
import pandas as pd

from ..interrupt import VERDICT as INTERRUPTED
from ..report import console_table, terminal_text
from .accounting import ATTENTION, NOT_CHECKED, accounting, accounting_line, status_counts
from .rows import FAILING, STATUSES


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
    if not f[index + ["column", "status"]].isna().any(axis=None):
        return _counted_pivot(f, index)
    pivot = f.pivot_table(index=index, columns="column", values="status", aggfunc=cell, fill_value="",
                          sort=False)
    pivot.columns = [str(c) for c in pivot.columns]
    return pivot.reset_index()


def _counted_pivot(f: pd.DataFrame, index: list) -> pd.DataFrame:
    """summary_pivot's table counted in one pass over the rows (pivot_table called a Python function per cell:
    0.12-0.16 s of CPU for the default run's 843 rows, against 8-11 ms), the same frame: the rows in
    pivot_table's order without sorting (by the first key column's values in order of first appearance, then
    the next column's), the columns in order of first appearance. No key may be missing (NaN): pivot_table
    drops such rows, and summary_pivot leaves those frames to it. Source: docs/parity.md, "The report"."""
    cells, columns = {}, {}
    for *key, column, status in zip(*(f[c] for c in index), f["column"], f["status"]):
        columns[column] = None
        counts = cells.setdefault(tuple(key), {}).setdefault(column, {})
        counts[status] = counts.get(status, 0) + 1
    codes = [{v: k for k, v in enumerate(dict.fromkeys(f[c]))} for c in index]
    keys = sorted(cells, key=lambda key: tuple(code[v] for code, v in zip(codes, key)))
    rows = [[*key, *(", ".join(f"{counts[s]} {s}" for s in STATUSES if s in counts)
                     if (counts := cells[key].get(column)) else "" for column in columns)] for key in keys]
    out = pd.DataFrame(rows, columns=[*index, *map(str, columns)])
    # pivot_table's dtypes: a key or status column of a pandas string dtype keeps it, any other is inferred
    strings = {c: f[c].dtype for c in index if isinstance(f[c].dtype, pd.StringDtype)}
    if isinstance(f["status"].dtype, pd.StringDtype):
        strings.update({str(c): f["status"].dtype for c in columns})
    return out.astype(strings) if strings else out


def exit_code(frame: pd.DataFrame, setup_error: bool, require_all: bool = False) -> int:
    """0 when a row passed and every row is pass, skipped or artifact; 1 on any FAILING row, when
    nothing passed, or (require_all) when a row was skipped; 2 on a setup error."""
    if setup_error:
        return 2
    statuses = set(frame["status"]) if len(frame) else set()
    if statuses & set(FAILING) or "pass" not in statuses:
        return 1
    if require_all and statuses & {"skipped", "not-run", "unsupported", "defect"}:
        return 1
    return 0


#: the statuses of a row that was checked (compared or tried); skipped, unsupported, not-run were not
CHECKED = ("pass", "fail", "error", "unverifiable", "artifact", "defect")
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


def progress_bar(total: int, quiet: bool):
    """The progress bar on stderr: drawn only when stderr is a terminal (cliutil.progress_enabled)."""
    from tqdm import tqdm

    from ..cliutil import progress_enabled
    return tqdm(total=total, file=sys.stderr, disable=not progress_enabled(quiet), desc="parity", unit="case",
                leave=False)


def counts_line(frame) -> str:
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


def legend(grid) -> list[str]:
    """A few lines under the console grid saying what its columns are and what a pass certifies under
    each noise source (the report's metadata `note` says it at length; docs/parity.md)."""
    columns = [str(c) for c in grid.columns if "/" in str(c)]
    if not columns:
        return []
    said = []
    if any(not c.endswith(("/native", "/-")) for c in columns):
        said.append("dtype/scheme: on the contract's noise (a pass certifies the algebra)")
    from .adapters import all_adapters
    if any(c.endswith("/native") for c in columns):
        said.append(_native_line(grid, {a.name: getattr(a, "native", TORCH) for a in all_adapters()}))
    if any(c.endswith("/-") for c in columns):
        said.append("f64/-: z-score rows (no noise)")
    loop_ops = {op for a in all_adapters() for op in a.loop_ops}
    if "op" in grid and grid["op"].isin(loop_ops).any():
        said.append("fit, main*: the references' own training loops")
    return _wrap("; ".join(said) + "; see docs/parity.md, 'What a pass certifies'", indent="")


TORCH = "torch's"


def _native_line(grid, natives: dict) -> str:
    """What a native column certifies, naming the generator of each reference in the grid (a JAX
    reference's native noise is not torch's)."""
    targets = [str(t) for t in dict.fromkeys(grid["target"])] if "target" in grid else []
    if {natives.get(t, TORCH) for t in targets} <= {TORCH}:
        return (".../native: on torch's own generator, as checkpoints were trained (a pass holds for this "
                "torch version and device type only)")
    by_kind: dict = {}
    for t in targets:
        by_kind.setdefault(natives.get(t, TORCH), []).append(t)
    own = "; ".join(f"{kind} for {', '.join(names)}" for kind, names in by_kind.items())
    return (f".../native: on each reference's own generator ({own}), as checkpoints were trained (a pass "
            "holds for that library's version and device type only)")


#: console lines one cause of needing attention may take (its code line is cut to fit)
CAUSE_LINES = 8


def _cut_lines(lines: list[str], most: int) -> list[str]:
    """At most `most` lines, the last one marked when some were left out (the report has them whole)."""
    return lines if len(lines) <= most else lines[:most - 1] + [lines[most - 1] + " \u2026"]


def _cause_lines(e: dict) -> list[str]:
    """One cause of needing attention on the console: status, count, what it spans; the code it
    involves; an example with its detail; the re-run command. At most CAUSE_LINES lines."""
    spans = f"; {e['spans']}" if e.get("spans") else ""
    diagnosis = f", diagnosis {e['diagnosis']}" if e.get("diagnosis") else ""
    lines = _wrap(terminal_text(f"{e['status']} ({e['rows']} row{'s' if e['rows'] != 1 else ''}{diagnosis}{spans})"),
                  indent="  ", width=110)[:2]
    if e.get("code"):
        lines += _cut_lines(_wrap("code: " + terminal_text(str(e["code"])), width=110), 3)
    example = f"e.g. {e['example']}: {e['reason']}"
    lines += _cut_lines(_wrap(terminal_text(example), width=110), 3)
    if e.get("rerun"):
        lines.append("    re-run: " + terminal_text(str(e["rerun"])))
    return lines[:CAUSE_LINES + 1] if e.get("rerun") else lines[:CAUSE_LINES]


def console_text(frame, summary, metadata, out_dir, code, verdict, require_all=False, entries=None) -> str:
    """Verdict, which clones ran, counts (cpu and cuda apart), the accounting line, then every cause of
    needing attention (`entries`: parity_report.attention's, computed here without re-run commands when
    not given; each cause is one block, so they all fit the first screen), then the summary
    grid, the 'not checked here' list, warnings, the report."""
    from .parity_report import attention as _attention
    lines = [f"esverify parity: {verdict.upper()} (exit {code}): {len(frame)} cases: {counts_line(frame)}"]
    if verdict in ("pass", "fail") and metadata.get("reason"):   # rows an interpreter kept from running
        lines[0] += f"; but {metadata['reason']}"
    if metadata.get("clones_run"):   # which clones ran, from where
        lines += _wrap(terminal_text(str(metadata["clones_run"])), indent="  ", width=110)
    if verdict == NOTHING_CHECKED:   # not "FAIL with 0 failed": what kept every row from being checked
        lines += [f"  nothing checked: {target}: {reason}" for target, reason in nothing_checked_reasons(frame).items()]
    for device in ("cpu", "cuda"):
        rows = frame[frame["device"] == device]
        if len(rows):
            lines.append(f"  {device}: {counts_line(rows)}")
    lines += ["", accounting_line(accounting(frame))]
    if entries is None:
        entries = _attention(frame, None, {}, {})
    if len(entries):
        records = entries.to_dict(orient="records")
        lines += [f"needs attention: {len(records)} cause{'s' if len(records) != 1 else ''}"]
        # every cause on the first screen: fewer lines per cause when there are many
        budget = max(1, 30 // max(1, len(records)))
        for e in records:
            block = _cause_lines(e)
            lines += block if len(block) <= budget else block[:max(1, budget)]
    # the grid of the devices where something ran; an all-skipped device is the line above
    ran = set(frame.loc[~frame["status"].isin(["skipped", "not-run"]), "device"])
    grid = summary[summary["device"].isin(ran)] if len(summary) else summary
    if len(grid):
        table = console_table(grid, max_rows=40)
        if max(map(len, table.split("\n"))) > CONSOLE_WIDTH:   # one column per dtype/scheme: too wide
            table = (console_table(compact_summary(frame[frame["device"].isin(ran)]), max_rows=60)
                     + "\n(the full grid, one column per dtype/scheme, is in the report's parity.md and "
                       "parity.html)")
        lines += ["", table, *legend(grid)]
    skipped = frame[frame["status"].isin(NOT_CHECKED)]
    if len(skipped):
        lines += ["", "not checked here" + (" (--require-all: exit 1):" if require_all else ":")]
        for detail, rows in skipped.groupby("detail", sort=False):
            lines.append(f"  {len(rows)} rows ({', '.join(sorted(set(rows['device'])))}):")
            lines += _wrap(terminal_text(str(detail).removeprefix("not checked here: ")))
    lines += [f"warning: {terminal_text(str(w))}" for w in metadata.get("warnings", [])]
    lines.append(f"report: {terminal_text(str(out_dir))} (wall time {metadata['wall_time_s']} s; exit {code})")
    return "\n".join(lines)
