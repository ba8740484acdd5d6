"""What a parity report leads with (docs/parity.md "Reading the report").

The sections a person acts on, built from the rows (`runner.COLUMNS`) before the summary and the
cases:

- `attention`: one entry per kind of problem (status, target, op, diagnosis and the detail with its
  numbers blanked out): how many rows, an example case, the reason in words, the first differing
  quantity, and the exact command that re-runs only that example row;
- `not_checked_here`: the rows not checked on this machine, grouped by their reason (every CUDA row
  of a machine without a GPU is ONE line: the reason and how to check them), and the targets not
  checked at all, the same content as the console's "not checked here" block;
- `case_columns`: the cases table with the reason right after the row's identity;
- `md_sections`: the bounded Markdown versions (parity.md stays under MD_LIMIT characters whatever
  the matrix; the full tables live in the CSV, JSON and HTML files).

Each is a pandas frame, so every report format carries it. This module runs nothing.
"""
from __future__ import annotations

import re
import shlex

import pandas as pd

from .accounting import accounting

#: the largest parity.md, in characters: a pull-request comment holds 65,536
MD_LIMIT = 60_000
#: rows of the cases table parity.md shows (the worst first); every row is in CSV, JSON and HTML
MD_CASE_ROWS = 60
#: characters of one cell parity.md shows (a longer one is cut, marked, and whole in CSV/JSON/HTML)
MD_CELL = 300

ATTENTION = ("fail", "error", "unverifiable", "artifact", "defect")
NOT_CHECKED = ("skipped", "not-run", "unsupported")
ATTENTION_COLUMNS = ["status", "diagnosis", "target", "op", "rows", "spans", "example", "reason",
                     "first_difference", "code", "rerun", "other_cases"]
NOT_CHECKED_COLUMNS = ["rows", "devices", "targets", "reason", "how_to_check"]
#: the identity of a row, then why it has its status, then the numbers
IDENTITY = ["target", "device", "dtype", "scheme", "noise", "op", "population", "case"]
REASON = ["status", "diagnosis", "detail"]


def case_columns(frame: pd.DataFrame) -> pd.DataFrame:
    """`frame` with its columns reordered: identity, status/diagnosis/detail, then the rest."""
    first = [c for c in IDENTITY + REASON if c in frame.columns]
    return frame[first + [c for c in frame.columns if c not in first]]


def _kind(detail: str) -> str:
    """A detail with its numbers and hex patterns blanked: rows that differ only in counts share a kind."""
    return re.sub(r"0x[0-9a-fA-F]+|\d+(\.\d+)?(e[-+]?\d+)?", "#", str(detail or ""))


def first_difference(row: dict) -> str:
    """"update[12]: ours 0x3f800000 (1.0), theirs 0x3f800001 (1.0000001); max 1 ulp" or ""."""
    where = str(row.get("first_mismatch_index") or "")
    if not where:
        return ""
    text = f"{where}: ours {row.get('first_mismatch_ours')}, theirs {row.get('first_mismatch_theirs')}"
    ulp = row.get("max_ulp_diff")
    if ulp is not None and not (isinstance(ulp, float) and ulp != ulp):
        text += f"; max {int(ulp)} ulp"
    mismatches, elements = row.get("mismatches"), row.get("elements")
    if mismatches == mismatches and elements == elements and mismatches is not None and elements is not None:
        text += f"; {int(mismatches)} of {int(elements)} elements differ"
    return text


def rerun_command(opts, case, clone_paths: dict) -> str:
    """The `esverify parity` command line that re-runs only `case` with this run's settings.

    opts: runner.Options; case: cases.Case; clone_paths: {target: clone folder}. A matrix case is named
    by its exact id (`--case ID`, which selects that one case); a fuzz or --case-json case is given
    whole (`--case-json`). Settings that change the case's parameters (--seed, --case-seed, --mapping,
    --population, --sigma, --alpha, --iterations, --dtypes, --noise, --small) are kept."""
    from . import cases as _cases
    from .adapters import get
    args = ["esverify", "parity", *get(case.target).rerun_args(clone_paths.get(case.target, "PATH")),
            "--target", case.target]
    if opts.explicit_for(case.target):
        args += ["--python", opts.python_for(case.target)]
    if opts.fuzz or opts.case_json:
        args += ["--case-json", _cases.to_json(case)]
    else:
        args += ["--case", case.case_id, "--devices", case.device]
        defaults = {"dtypes": ("f32", "f16", "bf16"), "noises": _cases.NOISES, "iterations": 3,
                    "case_seed": _cases.DEFAULT_CASE_SEED}
        if tuple(opts.dtypes) != defaults["dtypes"]:
            args += ["--dtypes", ",".join(opts.dtypes)]
        if tuple(opts.noises) != defaults["noises"]:
            args += ["--noise", ",".join(opts.noises)]
        if opts.iterations != defaults["iterations"]:
            args += ["--iterations", str(opts.iterations)]
        if int(opts.case_seed) != defaults["case_seed"]:
            args += ["--case-seed", str(opts.case_seed)]
        for name in ("population", "sigma", "alpha"):
            if getattr(opts, name) is not None:
                args += [f"--{name}", repr(getattr(opts, name))]
        if opts.small:
            args.append("--small")
    if opts.mapping != "poly32":
        args += ["--mapping", opts.mapping]
    if int(opts.seed) != 42:
        args += ["--seed", str(opts.seed)]
    return shlex.join(args)


def cause_of(row: dict) -> str:
    """The cause a row needing attention shares with others: for a failing row with a
    blame, its diagnosis and blame (one changed hunk or function, whatever the dtype, scheme or op); an
    artifact or a defect, its target, op and diagnosis; else its target, op and detail with the numbers
    blanked out (rows that differ only in their counts)."""
    status, diagnosis = str(row.get("status")), str(row.get("diagnosis") or "")
    if status in ("artifact", "defect"):
        return f"{status}|{row.get('target')}|{row.get('op')}|{diagnosis}"
    blame = str(row.get("blame") or "")
    if blame and blame == blame:   # NaN-safe: a CSV's empty cell
        return f"{status}|{diagnosis}|{blame}"
    return f"{status}|{row.get('target')}|{row.get('op')}|{diagnosis}|{_kind(row.get('detail'))}"


def spans(group: pd.DataFrame) -> str:
    """"targets REF; dtypes f32, bf16; schemes iid, correlated; ops perturb, restore; noise contract":
    what the rows of one cause span."""
    parts = []
    for column, word in (("target", "targets"), ("device", "devices"), ("dtype", "dtypes"), ("scheme", "schemes"),
                         ("op", "ops"), ("noise", "noise")):
        if column in group:
            values = [str(v) for v in dict.fromkeys(group[column]) if str(v) not in ("", "nan", "None")]
            if values:
                parts.append(f"{word} {', '.join(values)}")
    return "; ".join(parts)


def attention(frame: pd.DataFrame, opts, cases_by_id: dict, clone_paths: dict) -> pd.DataFrame:
    """One row per cause among the rows needing attention (ATTENTION statuses; `cause_of`), the failing
    ones first, each with its count, what its rows span, an example and the command that re-runs it;
    see the module docstring."""
    rows = frame[frame["status"].isin(ATTENTION)]
    if rows.empty:
        return pd.DataFrame(columns=ATTENTION_COLUMNS)
    rank = {s: i for i, s in enumerate(ATTENTION)}
    records = rows.to_dict(orient="records")
    keyed = rows.assign(_cause=[cause_of(r) for r in records], _rank=rows["status"].map(rank))
    keyed = keyed.sort_values("_rank", kind="stable")     # the failing causes first, each in matrix order
    entries = []
    for _, group in keyed.groupby(["_rank", "_cause"], sort=False):
        example = group.iloc[0].to_dict()
        case = cases_by_id.get(example["case"])
        others = list(group["case"].iloc[1:])
        ops = list(dict.fromkeys(group["op"]))
        entries.append({
            "status": example["status"], "diagnosis": example["diagnosis"], "target": example["target"],
            "op": ", ".join(ops), "rows": len(group), "spans": spans(group), "example": example["case"],
            "reason": str(example["detail"] or example["status"]), "first_difference": first_difference(example),
            "code": str(example.get("blame") or "") if example.get("blame") == example.get("blame") else "",
            "rerun": rerun_command(opts, case, clone_paths) if case is not None and opts is not None else "",
            "other_cases": ", ".join(others[:5]) + (f" and {len(others) - 5} more" if len(others) > 5 else "")})
    return pd.DataFrame(entries, columns=ATTENTION_COLUMNS)


def _split_reason(detail: str) -> tuple[str, str]:
    text = str(detail or "").removeprefix("not checked here: ")
    reason, _, how = text.partition("; to check it: ")
    return reason.strip(), how.strip()


def not_checked_here(frame: pd.DataFrame, targets_not_checked: pd.DataFrame | None = None) -> pd.DataFrame:
    """The rows not checked here grouped by their detail (one line per reason), then one line per
    target not checked at all (loop_report's not_checked section)."""
    rows = frame[frame["status"].isin(NOT_CHECKED)]
    entries = []
    for detail, group in rows.groupby("detail", sort=False):
        reason, how = _split_reason(detail)
        entries.append({"rows": len(group), "devices": ", ".join(sorted(set(group["device"]))),
                        "targets": ", ".join(dict.fromkeys(group["target"])),
                        "reason": reason or str(group["status"].iloc[0]), "how_to_check": how})
    if targets_not_checked is not None:
        for r in targets_not_checked.to_dict(orient="records"):
            why, _, how = str(r["why"]).partition(": pass ")
            entries.append({"rows": None, "devices": "", "targets": r["target"],
                            "reason": f"{r['target']} not checked ({why}): {r['not_checked']}",
                            "how_to_check": f"pass {how}" if how else ""})
    return pd.DataFrame(entries, columns=NOT_CHECKED_COLUMNS)


def ran_summary(summary: pd.DataFrame, frame: pd.DataFrame) -> pd.DataFrame:
    """The summary grid without the devices on which no row ran (they are one not-checked line)."""
    if summary.empty or "device" not in summary:
        return summary
    ran = set(frame.loc[~frame["status"].isin(NOT_CHECKED), "device"])
    return summary[summary["device"].isin(ran)].reset_index(drop=True) if ran else summary


def _cut(value, limit: int = MD_CELL):
    text = "" if value is None else str(value)
    return text if len(text) <= limit else text[:limit - 1] + "\u2026"


def md_sections(sections: dict, frame: pd.DataFrame, limit: int = MD_LIMIT) -> dict:
    """The sections as parity.md shows them: the cases table holds the rows that are not a pass (the
    worst first, at most MD_CASE_ROWS) in a few columns, long cells are cut, the coverage table is one
    line per target; a note says where the whole of each is. Sized so that the page stays under
    `limit` characters (see `bounded_markdown`)."""
    from ..report import SEVERITY
    rank = {s: i for i, s in enumerate(SEVERITY)}
    out = {}
    for name, section in sections.items():
        if not isinstance(section, pd.DataFrame):
            out[name] = section
        elif name == "cases":
            bad = section[section["status"].isin(ATTENTION)]
            bad = bad.assign(_r=bad["status"].map(lambda s: rank.get(s, len(rank)))).sort_values("_r", kind="stable")
            cols = [c for c in ("case", "status", "diagnosis", "detail", "mismatches", "elements", "max_ulp_diff")
                    if c in section.columns]
            shown = bad[cols].head(MD_CASE_ROWS).copy()
            shown["detail"] = shown["detail"].map(_cut)
            passed = int((section["status"] == "pass").sum())
            unchecked = int(section["status"].isin(NOT_CHECKED).sum())
            out[name] = (shown, f"{len(section)} rows: {passed} pass and {unchecked} not checked here (neither "
                                f"listed here), {len(bad)} needing attention"
                                + (f", the {len(shown)} most alarming listed" if len(shown) < len(bad) else "")
                                + "; every row with every column: parity-cases.csv, parity.json, parity.html")
        elif name == "coverage" and len(section):
            per = section.groupby("target", sort=False).agg(functions=("function", "size"), ran=("ran", "sum"),
                                                             files=("file", "nunique")).reset_index()
            out[name] = (per, "one line per target; every function: parity-coverage.csv, parity.json, parity.html")
        else:
            shown = section.copy()
            for col in shown.columns:
                if shown[col].dtype == object:
                    shown[col] = shown[col].map(lambda v: _cut(v) if isinstance(v, str) else v)
            out[name] = shown
    return out


#: kinds of problem parity.md lists in full (every kind is in the CSV, JSON and HTML)
MD_ATTENTION = 15


def attention_markdown(entries: pd.DataFrame, max_entries: int | None = None) -> str:
    """The `attention` entries as a Markdown list: what, the reason, the first difference, and the
    command that re-runs only the example row (a code span); at most `max_entries` (default
    MD_ATTENTION) entries, the rest counted."""
    from ..report import md_cell
    if entries.empty:
        return "_nothing: every row checked here passed_"
    cap = min(MD_ATTENTION, max_entries or MD_ATTENTION)
    lines = []
    for e in entries.head(cap).to_dict(orient="records"):
        diagnosis = f", diagnosis `{md_cell(e['diagnosis'])}`" if e["diagnosis"] else ""
        more = f" (and {e['rows'] - 1} more like it: {md_cell(e['other_cases'])})" if e["rows"] > 1 else ""
        lines.append(f"- **{md_cell(e['status'])}** {md_cell(e['target'])} `{md_cell(e['op'])}`{diagnosis}: "
                     f"{e['rows']} row(s), e.g. `{md_cell(e['example'])}`{more}")
        if e.get("spans") and e["rows"] > 1:
            lines.append(f"  - spans: {md_cell(e['spans'])}")
        lines.append(f"  - reason: {md_cell(_cut(e['reason'], 500))}")
        if e["first_difference"]:
            lines.append(f"  - first difference: {md_cell(e['first_difference'])}")
        if e.get("code"):
            lines.append(f"  - code: {md_cell(_cut(e['code'], 500))}")
        if e["rerun"]:
            lines.append(f"  - re-run only this row: ``{e['rerun'].replace('`', chr(39))}``")
    if len(entries) > cap:
        lines.append(f"- ... and {len(entries) - cap} more kinds of problem ({int(entries['rows'].iloc[cap:].sum())} "
                     "rows): every kind is in parity.html, parity-attention.csv and parity.json")
    return "\n".join(lines)


def grid_links(summary: pd.DataFrame, frame: pd.DataFrame) -> dict:
    """{(row position, column): first case id} for the summary grid's cells (see summary_pivot)."""
    if summary.empty or frame.empty:
        return {}
    native = frame["noise"].eq("native")
    column = frame["dtype"] + "/" + frame["scheme"] + native.map({True: "/native", False: ""})
    first = {}
    for key, case in zip(zip(frame["target"], frame["device"], frame["op"], column), frame["case"]):
        first.setdefault(key, case)
    links = {}
    for position, row in enumerate(summary.to_dict(orient="records")):
        for col in summary.columns:
            case = first.get((row.get("target"), row.get("device"), row.get("op"), col))
            if case is not None:
                links[(position, col)] = case
    return links


def params_of(text) -> dict:
    """"sigma=0.001956 alpha=0.002143 lambda=0.5" -> {"sigma": 0.001956, "alpha": 0.002143, "lambda": 0.5};
    {} for an empty text. A value that is not a number stays text."""
    out = {}
    for part in str(text or "").split():
        name, sep, value = part.partition("=")
        if not sep:
            continue
        try:
            out[name] = int(value) if re.fullmatch(r"-?\d+", value) else float(value)
        except ValueError:
            out[name] = value
    return out


def summary_counts(frame: pd.DataFrame) -> pd.DataFrame:
    """The summary grid in long form with numbers: one row per (target, device, op, dtype, scheme,
    noise) and one integer column per status (parity.json's `summary`)."""
    from .rows import STATUSES
    keys = ["target", "device", "op", "dtype", "scheme", "noise"]
    if frame.empty:
        return pd.DataFrame(columns=keys + list(STATUSES) + ["rows"])
    counts = frame.groupby(keys, sort=False)["status"].value_counts().unstack(fill_value=0)
    for status in STATUSES:
        if status not in counts:
            counts[status] = 0
    counts = counts[list(STATUSES)].astype(int)
    counts["rows"] = counts.sum(axis=1)
    return counts.reset_index()


def json_cases(frame: pd.DataFrame) -> pd.DataFrame:
    """The cases as parity.json holds them: `params` a {name: number} object, not a text."""
    out = case_columns(frame).copy()
    out["params"] = out["params"].map(params_of).astype(object)
    return out


#: parity.json's `schema_version` (docs/parity.schema.json); bumped on any change a reader must know
SCHEMA_VERSION = 1
TITLES = {"attention": "needs attention", "not_checked_here": "not checked here", "summary": "summary",
          "cases": "cases", "coverage_paths": "coverage: the code paths reached", "not_checked": "targets not checked"}


def layout(frame: pd.DataFrame, summary: pd.DataFrame, extra: dict, opts, selected, clones,
           profiles: dict | None = None) -> dict:
    """write_report's keyword arguments for a parity report: the sections in the order a person acts
    on them (needs attention, not checked here, summary, cases, then loop_report's sections), their
    bounded Markdown versions, the heatmap's links, the HTML's ulp plots of the failing and artifact
    rows (`profiles`: {case id: compare.Comparison.profile}) and the JSON's own forms (schema_version,
    numeric summary counts, structured params)."""
    cases_by_id = {c.case_id: c for c in selected}
    clone_paths = {name: c.path for name, c in clones.items()}
    entries = attention(frame, opts, cases_by_id, clone_paths)
    grid = ran_summary(summary, frame)
    sections = {"attention": entries, "not_checked_here": not_checked_here(frame, extra.get("not_checked")),
                "summary": grid, "cases": case_columns(frame), **extra}
    md = md_sections({**sections, "attention": lambda cap: attention_markdown(entries, cap)}, frame)
    json_sections = {**sections, "summary": summary_counts(frame), "cases": json_cases(frame)}
    return {"sections": sections, "titles": TITLES, "md_sections": md, "md_limit": MD_LIMIT,
            "grid_links": grid_links(grid, frame), "json_sections": json_sections,
            "html_after": {"attention": ulp_plots(frame, profiles or {})},
            "html_instead": {"attention": attention_html(entries)},
            "html_focus": {"cases": (focus_cases, "those that are not pass or skipped")},
            "html_order": HTML_ORDER, "html_omit": HTML_OMIT,
            "json_extra": {"schema_version": SCHEMA_VERSION, "accounting": accounting(frame)}}


#: the HTML reads from the top: the causes, the findings, what was not checked, then
#: the grid and the cases
HTML_ORDER = ("attention", "findings", "not_checked_here", "summary", "cases")
#: every row of "targets not checked" is also a line of "not checked here" (not_checked_here folds them in):
#: the page shows them once; csv, json and md keep the section
HTML_OMIT = ("not_checked",)
#: the columns of the HTML's shown cases (the rows that are not pass or skipped): fit 1,400 px
FOCUS_COLUMNS = ("case", "status", "diagnosis", "detail", "blame", "max_ulp_diff")


def focus_cases(cases: pd.DataFrame) -> pd.DataFrame:
    """The cases the HTML shows open: every row that is not a pass or skipped, in a few columns."""
    rows = cases[~cases["status"].isin(["pass", "skipped"])]
    return rows[[c for c in FOCUS_COLUMNS if c in rows.columns]]


def step_summary(header: dict, sections: dict, out_dir) -> str:
    """A short Markdown block for a CI job page (--summary FILE, $GITHUB_STEP_SUMMARY): the verdict,
    the counts, the needs-attention list (at most 10 kinds), the not-checked reasons, the report."""
    from ..report import counts_text, md_cell
    verdict, code = header["verdict"], header["exit_code"]
    lines = [f"### esverify parity: {md_cell(str(verdict).upper())} (exit {code})", "",
             f"{md_cell(counts_text(header.get('counts') or {}))}" + (f"; {md_cell(header['reason'])}"
                                                                     if header.get("reason") else ""), ""]
    entries = sections["attention"]
    if len(entries):
        lines += ["**Needs attention**", "", attention_markdown(entries, 10), ""]
    unchecked = sections["not_checked_here"]
    if len(unchecked):
        lines += ["**Not checked here**", ""]
        for r in unchecked.to_dict(orient="records"):
            count = f"{int(r['rows'])} rows ({r['devices']}): " if r["rows"] == r["rows"] and r["rows"] is not None else ""
            how = f"; to check: {r['how_to_check']}" if r["how_to_check"] else ""
            lines.append(f"- {md_cell(count + r['reason'] + how)}")
        lines.append("")
    lines += [f"Report: `{md_cell(str(out_dir))}` (parity.md, parity.html, parity.json)", ""]
    return "\n".join(lines)


#: rows the HTML plots (the failing ones first); the others are counted under the plots
MAX_PLOTS = 60
_BAR_W, _BAR_H, _LABEL_W = 5, 22, 300


def _slot_svg(slot: dict, top: int) -> str:
    """One slot's strip: a bar per run of elements, its height log2(1 + largest ulp distance) scaled to
    the row's largest; a NaN/inf mismatch (no distance) is a full-height purple bar."""
    import math

    from ..report import html_text
    bars = []
    scale = math.log2(1 + top) if top > 0 else 1.0
    for i, ulp in enumerate(slot["bins"]):
        if ulp == 0:
            continue
        h = _BAR_H if ulp < 0 else max(2.0, _BAR_H * math.log2(1 + ulp) / scale)
        colour = "#7b3fa0" if ulp < 0 else "#c0392b"
        title = "NaN/inf mismatch" if ulp < 0 else f"max {ulp} ulp"
        bars.append(f"<rect x='{_LABEL_W + i * _BAR_W}' y='{_BAR_H - h:.1f}' width='{_BAR_W - 1}' height='{h:.1f}' "
                    f"fill='{colour}'><title>elements {i * slot['elements'] // len(slot['bins'])}-"
                    f"{(i + 1) * slot['elements'] // len(slot['bins']) - 1}: {title}</title></rect>")
    label = html_text(f"{slot['slot']}: {slot['mismatches']} of {slot['elements']}")
    width = _LABEL_W + len(slot["bins"]) * _BAR_W
    return (f"<svg class='ulp' width='{width}' height='{_BAR_H + 2}' role='img' aria-label='{label}'>"
            f"<rect x='{_LABEL_W}' y='0' width='{len(slot['bins']) * _BAR_W}' height='{_BAR_H}' fill='#f4f4f4'/>"
            f"<text x='0' y='{_BAR_H - 6}'>{label[:52]}</text>{''.join(bars)}</svg>")


def _int_text(value) -> str:
    """2007721360.0 -> "2007721360" (a column with empty cells is float); "" for None/NaN."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        return ""
    return str(int(number)) if number == number and number not in (float("inf"), float("-inf")) else ""


def ulp_plots(frame: pd.DataFrame, profiles: dict) -> str:
    """HTML (inline SVG, made here: every name escaped) of where the two sides differ for each failing
    or artifact row with tensor results: per mismatching slot, the largest ulp distance along its
    elements (compare.PROFILE_BINS runs). At most MAX_PLOTS rows, the failing ones first."""
    from ..report import anchor_id
    from ..report import html_text as esc
    rows = frame[frame["case"].isin(list(profiles)) & frame["status"].isin(["fail", "artifact"])]
    if rows.empty:
        return ""
    rows = rows.assign(_r=rows["status"].map({"fail": 0, "artifact": 1})).sort_values("_r", kind="stable")
    # closed: the page reads verdict, causes, findings first; the plots are one click away
    parts = [f"<details class='plots'><summary><b>Where the two sides differ</b>: {min(len(rows), MAX_PLOTS)} "
             "row(s) plotted (click to show)</summary><p>Per slot that differs: the largest ulp distance along its "
             "elements (64 runs of equal length; bar height log2(1 + ulp), red; purple: NaN or infinity). "
             "Hover a bar for its elements.</p>"]
    for r in rows.head(MAX_PLOTS).to_dict(orient="records"):
        profile = profiles[r["case"]]
        top = max([b for s in profile for b in s["bins"]] + [1])
        strips = "".join(_slot_svg(s, top) for s in profile[:8])
        more = f"<p>and {len(profile) - 8} more slots</p>" if len(profile) > 8 else ""
        parts.append(f"<details open><summary><span class='{'st-fail' if r['status'] == 'fail' else 'st-artifact'}'>"
                     f"{esc(str(r['status']))}</span> <a href='#{esc(anchor_id(r['case']))}'>"
                     f"{esc(str(r['case']))}</a> (max {esc(_int_text(r.get('max_ulp_diff')))} ulp)"
                     f"</summary>{strips}{more}</details>")
    if len(rows) > MAX_PLOTS:
        parts.append(f"<p>{len(rows) - MAX_PLOTS} more rows differ; their numbers are in the cases table.</p>")
    return "".join(parts) + "</details>"



def attention_html(entries: pd.DataFrame) -> str:
    """The `attention` entries as HTML blocks that fit a 1400 px window (a wide table does not): the
    status and what, the reason, the first difference, and the re-run command in a copyable box."""
    from ..report import anchor_id, status_class
    from ..report import html_text as esc   # the shared escaper: a reference's ESC bytes shown, not sent
    if entries.empty:
        return "<p>nothing: every row checked here passed</p>"
    parts = []
    for e in entries.to_dict(orient="records"):
        diagnosis = f", diagnosis <code>{esc(str(e['diagnosis']))}</code>" if e["diagnosis"] else ""
        more = f" and {e['rows'] - 1} more like it ({esc(str(e['other_cases']))})" if e["rows"] > 1 else ""
        parts.append(
            f"<div class='entry'><p><span class='verdict {status_class(e['status'])}' style='font-size:1em'>"
            f"{esc(str(e['status']))}</span> <b>{esc(str(e['target']))} {esc(str(e['op']))}</b>{diagnosis}: "
            f"{e['rows']} row(s), e.g. <a href='#{esc(anchor_id(e['example']))}'>{esc(str(e['example']))}</a>{more}</p>"
            + (f"<p>spans: {esc(str(e['spans']))}</p>" if e.get("spans") and e["rows"] > 1 else "")
            + f"<p>reason: {esc(str(e['reason']))}</p>"
            + (f"<p>first difference: {esc(str(e['first_difference']))}</p>" if e["first_difference"] else "")
            + (f"<p>code: {esc(str(e['code']))}</p>" if e.get("code") else "")
            + (f"<p>re-run only this row:</p><pre class='cmd'>{esc(str(e['rerun']))}</pre>" if e["rerun"] else "")
            + "</div>")
    return "".join(parts)
