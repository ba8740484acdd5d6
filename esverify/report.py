"""Report tables and their writers, shared by goldens, parity and audit.

Every report is a set of named pandas DataFrames ("sections") plus a
metadata dict. Writers produce csv (one file per section), json (one
file), md and html (one file each) and JUnit XML. Every file is written
atomically: to a temporary file in the destination folder, fsynced, then
renamed over the target, so a crash never leaves a half-written report and
an older report is never truncated; the files of one report are one set,
written whole or not at all (`esverify.reportset`, the only esverify
module this one imports).
"""
from __future__ import annotations

import html
import json
import math
import os
import re
import tempfile
from pathlib import Path
from typing import Iterable, Mapping
from xml.etree import ElementTree as ET

# pandas is imported inside the functions that use it: `esverify parity --help` reads FORMATS from
# this module and must not pay for pandas

FORMATS = ("csv", "json", "md", "html")


def utc_now() -> str:
    """The current UTC time as ISO 8601 to the second ("2026-12-04T19:39:21+00:00"): report metadata's
    started_utc and finished_utc."""
    import datetime
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


# ----------------------------------------------------------------- escaping at the writer boundaries
# Report text comes from files and processes we did not write (a reference's error message, a file
# name in an audited tree): every writer escapes it for its own format. Controls are
# shown as visible escapes ("\x1b"), never dropped, so nothing of the evidence is lost.

_CONTROLS = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\ud800-\udfff]")  #: but \t \n \r; lone surrogates
_NOT_XML = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")  #: outside XML 1.0 Char
_NEWLINES = re.compile(r"\r\n|[\r\n\u2028\u2029]")
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def _visible(match) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def visible_controls(text: str) -> str:
    """Control characters (C0 but tab and newlines, DEL, C1) and lone surrogates (undecodable file
    names) as visible escapes such as "\\x1b"."""
    return _CONTROLS.sub(_visible, text)


def xml_text(text: str) -> str:
    """Text holding only XML 1.0 characters: every other one (NUL, ESC, lone surrogates...) escaped."""
    return _NOT_XML.sub(_visible, visible_controls(text))


def md_cell(text) -> str:
    """A Markdown table cell: controls escaped, '|' escaped, newlines as <br>, and '<' as '&lt;' so
    no raw HTML (<script>, <img onerror>) reaches a renderer; a non-string is `cell_text` first."""
    text = visible_controls(text if isinstance(text, str) else cell_text(text)).replace("\\", "\\\\").replace("|", "\\|").replace("<", "&lt;")
    return _NEWLINES.sub("<br>", text).replace("\t", " ")


def terminal_text(text: str) -> str:
    """One line for a terminal: controls (ANSI escapes included) and newlines shown as escapes."""
    text = visible_controls(text)
    return _NEWLINES.sub(lambda m: m.group().encode("unicode_escape").decode(), text).replace("\t", "\\t")


def csv_cell(text: str) -> str:
    """A CSV cell a spreadsheet will not run: text starting with = + - @ tab or CR gets a leading
    apostrophe (the OWASP CSV-injection rule); controls and carriage returns (which pandas leaves
    unquoted, splitting the row) are shown as escapes; everything else is unchanged."""
    text = "'" + text if text.startswith(_FORMULA_START) else text
    return visible_controls(text).replace("\r", "\\r")


def html_text(text) -> str:
    """The one HTML escaper of every cell and block of every report: XML 1.0 characters only (controls,
    ESC included, made visible as escapes), then &, <, >, quotes escaped (safe in text and attributes)."""
    return html.escape(xml_text(text if isinstance(text, str) else str(text)))


_esc = html_text


def escape_frame(frame: pd.DataFrame, escape) -> pd.DataFrame:
    """A copy of `frame` with `escape` applied to every text cell and column name."""
    import pandas as pd
    out = frame.copy()
    for col in out.columns:
        if out[col].dtype == object or pd.api.types.is_string_dtype(out[col]):
            out[col] = out[col].map(lambda v: escape(v) if isinstance(v, str) else v)
    out.columns = [escape(c) if isinstance(c, str) else c for c in out.columns]
    return out


def atomic_file(path: str | os.PathLike, fill, prefix: str | None = None) -> Path:
    """Write `path` atomically: `fill(fh)` writes into a temp file (binary) in the same folder, which
    is fsynced and renamed over `path`. Creates missing parent folders; `prefix` names the temp file
    (default ".<name>."). Raises OSError when the folder cannot be written; the previous file, if
    any, is then left untouched and the temp file removed."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=prefix or f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        # mkstemp creates 0600; a report is an ordinary file, so honour the umask
        umask = os.umask(0)
        os.umask(umask)
        os.fchmod(fd, 0o666 & ~umask)
        with os.fdopen(fd, "wb") as fh:
            fill(fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    return path


def write_atomic(path: str | os.PathLike, data: str | bytes) -> Path:
    """Write `data` to `path` atomically (temp file + fsync + rename; see atomic_file)."""
    # lone surrogates (a file name that is not UTF-8) are written as visible escapes, never refused
    raw = data.encode("utf-8", "backslashreplace") if isinstance(data, str) else data
    return atomic_file(path, lambda fh: fh.write(raw))


def copy_atomic(src: str | os.PathLike, path: str | os.PathLike) -> Path:
    """Copy the file `src` to `path` atomically, streaming (never holding the file in memory)."""
    import shutil

    def fill(fh):
        with open(src, "rb") as source:
            shutil.copyfileobj(source, fh, 1 << 20)
    return atomic_file(path, fill)


def _jsonable(value):
    if isinstance(value, float) and not math.isfinite(value):
        return repr(value)
    if hasattr(value, "item") and not isinstance(value, (list, dict, str)):
        try:
            return _jsonable(value.item())
        except (ValueError, AttributeError):
            pass
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, Path):
        return str(value)
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return str(value)


#: the facts a report opens with, in this order
HEADER_KEYS = ("verdict", "exit_code", "reason", "counts", "started_utc", "finished_utc", "command_line")
#: statuses from the most to the least alarming: the colour of a summary cell is its worst status
SEVERITY = ("fail", "mismatch", "error", "unverifiable", "finding", "changed-without-bump", "removed-without-bump",
            "version-backwards", "defect", "interrupted", "not-run", "libm-divergence", "artifact", "review",
            "unsupported", "skipped",
            "info", "listed", "interface", "trivial", "below threshold", "pass", "ok")


def tidy(frame: pd.DataFrame) -> pd.DataFrame:
    """A copy for writing: integer-valued columns become nullable integers (no `6.0`), so that
    missing cells stay empty instead of turning a whole integer column into floats."""
    import pandas as pd
    frame = frame.copy()
    for col in frame.columns:
        series = frame[col]
        values = series.dropna()
        if not len(values) or series.dtype == bool:
            continue
        if series.dtype == object:
            if all(isinstance(v, int) and not isinstance(v, bool) for v in values):
                frame[col] = series.astype("Int64")
        elif pd.api.types.is_float_dtype(series) and series.isna().any():
            if values.map(lambda v: float(v).is_integer() and abs(v) < 2 ** 53).all():
                frame[col] = series.astype("Int64")
    return frame


def cell_text(value) -> str:
    """One value as report text: empty for None/NaN/NA, integers as integers, floats round-trip exact."""
    import pandas as pd
    if value is None or value is pd.NA:
        return ""
    if isinstance(value, float):
        if math.isnan(value):
            return ""
        return repr(value)
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):
        try:
            return cell_text(value.item())
        except (ValueError, AttributeError):
            pass
    if isinstance(value, (dict, list, tuple)):
        return json.dumps(_jsonable(value), sort_keys=True)
    return str(value)


def frame_records(frame: pd.DataFrame) -> list[dict]:
    """Rows of a frame as JSON-ready dicts (NaN becomes null, integer columns ints)."""
    import pandas as pd
    frame = tidy(frame)
    frame = frame.astype(object).where(pd.notna(frame), None)
    return [_jsonable(r) for r in frame.to_dict(orient="records")]


def split_header(metadata: Mapping, header: Mapping | None = None) -> tuple[dict, dict]:
    """(header, rest): the lead facts (HEADER_KEYS, from `header` or else from `metadata`) and the
    remaining metadata."""
    header = dict(header or {k: metadata[k] for k in HEADER_KEYS if k in metadata})
    rest = {k: v for k, v in metadata.items() if k not in header}
    return header, rest


def counts_text(counts) -> str:
    if isinstance(counts, Mapping):
        return ", ".join(f"{v} {k}" for k, v in counts.items()) or "no rows"
    return cell_text(counts)


def _header_rows(header: Mapping) -> list[tuple[str, str]]:
    names = {"verdict": "verdict", "exit_code": "exit code", "reason": "reason", "counts": "counts", "started_utc": "started (UTC)",
             "finished_utc": "finished (UTC)", "command_line": "command line"}
    rows = []
    for key, value in header.items():
        rows.append((names.get(key, key), counts_text(value) if key == "counts" else cell_text(value)))
    return rows


def to_json(sections: Mapping[str, pd.DataFrame], metadata: Mapping, header: Mapping | None = None,
            extra: Mapping | None = None) -> str:
    """One JSON document opening with the verdict: {verdict, exit_code, counts, started_utc,
    finished_utc, command_line, **extra, "sections": {name: [rows]}, "metadata": {...}}."""
    head, _ = split_header(metadata, header)
    doc = dict(_jsonable(head))
    doc.update(_jsonable(dict(extra or {})))
    doc["sections"] = {name: frame_records(df) for name, df in sections.items()}
    doc["metadata"] = _jsonable(dict(metadata))
    return json.dumps(doc, indent=2) + "\n"


def md_table(frame: pd.DataFrame) -> str:
    """A GitHub Markdown table whose cells are `cell_text`, never re-formatted by tabulate."""
    frame = tidy(frame)
    head = "| " + " | ".join(md_cell(str(c)) for c in frame.columns) + " |"
    rule = "| " + " | ".join("---" for _ in frame.columns) + " |"
    body = ["| " + " | ".join(md_cell(cell_text(v)) for v in row) + " |"
            for row in frame.itertuples(index=False, name=None)]
    return "\n".join([head, rule, *body])


def _md_meta(metadata: Mapping, level: int = 2) -> list[str]:
    """Scalars in one key/value table; each dict or list of dicts as its own small table."""
    import pandas as pd
    scalars, nested = [], []
    for key, value in metadata.items():
        if isinstance(value, Mapping) and value:
            nested.append((key, value))
        elif isinstance(value, (list, tuple)) and value and all(isinstance(v, Mapping) for v in value):
            nested.append((key, value))
        elif isinstance(value, (list, tuple)):
            scalars.append((key, "<br>".join(md_cell(cell_text(v)) for v in value)))
        else:
            scalars.append((key, md_cell(cell_text(value))))
    parts = []
    if scalars:
        parts += ["| key | value |", "| --- | --- |"] + [f"| {md_cell(str(k))} | {v} |" for k, v in scalars] + [""]
    for key, value in nested:
        parts += [f"{'#' * min(level + 1, 6)} {md_cell(str(key))}", ""]
        if isinstance(value, Mapping) and all(isinstance(v, Mapping) for v in value.values()):
            frame = pd.DataFrame([{"name": k, **{str(a): b for a, b in v.items()}} for k, v in value.items()])
            parts += [md_table(frame), ""]
        elif isinstance(value, Mapping):
            parts += _md_meta(value, level + 1)
        else:
            parts += [md_table(pd.DataFrame(list(value))), ""]
    return parts


def _md_section(name: str, section, heading: str, max_rows: int | None) -> list[str]:
    """One `## heading` and its body: a frame as a table (at most `max_rows` rows, the cut said), a
    (frame, note) pair with the note in italics under it, or a str of Markdown written as is."""
    parts = [f"## {md_cell(heading)}", ""]
    note = ""
    if isinstance(section, tuple):
        section, note = section
    if callable(section):   # Markdown made to fit: given the row cap of this attempt (None: no cap)
        section = section(max_rows)
    if isinstance(section, str):
        return parts + [section or "_nothing_", ""]
    if not len(section):
        return parts + ["_no rows_", ""]
    shown = section if max_rows is None else section.head(max_rows)
    parts.append(md_table(shown))
    if len(shown) < len(section):
        note = f"{len(shown)} of {len(section)} rows shown" + (f"; {note}" if note else "")
    return parts + ([""] + [f"_{md_cell(note)}_"] if note else []) + [""]


def to_markdown(sections: Mapping[str, pd.DataFrame], metadata: Mapping, title: str,
                header: Mapping | None = None, titles: Mapping[str, str] | None = None,
                limit: int | None = None, full_names: str = "the JSON report") -> str:
    """A Markdown document: title, the verdict block, one section per entry (in the given order; a
    frame, a (frame, note) pair, a str of Markdown or a callable max_rows -> str of Markdown; `titles`
    maps a section name to its heading),
    then the metadata (nested values as small tables).

    limit: the most characters the document may have (e.g. a pull-request comment's); over it, the
    nested metadata is left to `full_names` first, then every table is cut to fewer rows (each cut
    said under its table) until it fits."""
    head, rest = split_header(metadata, header)
    titles = dict(titles or {})
    lead = [f"# {md_cell(title)}", ""]
    if head:
        verdict = head.get("verdict")
        if verdict is not None:
            lead += [f"**Verdict: {md_cell(cell_text(verdict))}**"
                     + (f" (exit {cell_text(head['exit_code'])})" if "exit_code" in head else ""), ""]
        lead += ["| | |", "| --- | --- |"] + [f"| {k} | {md_cell(v)} |" for k, v in _header_rows(head)] + [""]
    scalars = {k: v for k, v in rest.items() if not isinstance(v, (Mapping, list, tuple))}
    attempts = [(None, rest), (None, scalars)] + [(n, scalars) for n in (200, 100, 50, 20, 10, 5, 2)]
    text = ""
    for max_rows, meta in attempts if limit else attempts[:1]:
        parts = list(lead)
        for name, section in sections.items():
            parts += _md_section(name, section, titles.get(name, name), max_rows)
        parts += ["## Metadata", ""] + _md_meta(meta)
        if meta is not rest:
            parts += [f"_The nested metadata (environments, clones, limits...) is in {md_cell(full_names)}._", ""]
        text = "\n".join(parts) + "\n"
        if not limit or len(text) <= limit:
            break
    return text


#: the page fits its window (docs/parity.md, "Reading the report": 1,400 px without a horizontal scrollbar):
#: every table sits in its own scrolling box (div.scroll), prose and commands wrap, and no rule sets a width
#: in px or em that could pass the window (tests/test_report_width.py checks these rules)
_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,sans-serif;margin:1.5em;color:#222}
h1{margin-bottom:.2em}h2{margin-top:1.6em;border-bottom:1px solid #ddd}
h1,h2,p,li,summary,label{overflow-wrap:anywhere}
div.scroll{max-width:100%;overflow-x:auto;margin:.4em 0 1.2em}div.scroll table{margin:0}
table{border-collapse:collapse;margin:.4em 0 1.2em;font-size:.9em}
th,td{border:1px solid #ccc;padding:.2em .5em;text-align:left;vertical-align:top}
th{background:#f2f2f2}
td{white-space:nowrap}td.long{white-space:normal;min-width:20em;max-width:50em;overflow-wrap:anywhere}
td.num{text-align:right;font-variant-numeric:tabular-nums}
.verdict{display:inline-block;font-size:1.3em;font-weight:bold;padding:.3em .8em;border-radius:.3em}
.filter{margin:.3em 0}.filter label{margin-right:1em;cursor:pointer;display:inline-block}
.st-pass,.st-ok{background:#d5f5d5}.st-fail,.st-mismatch,.st-finding,.st-changed-without-bump,
.st-removed-without-bump,.st-version-backwards{background:#f7c5c5}.st-error{background:#f5b27a}
.st-unverifiable{background:#e3d0f5}.st-interrupted,.st-not-run{background:#cfd8e3}
.st-skipped,.st-info,.st-listed,.st-trivial,.st-below-threshold{background:#ececec}
.st-artifact,.st-libm-divergence,.st-review{background:#fff0a8}.st-defect{background:#e8c39e}
.st-unsupported{background:#dcdcf0}
table.grid{font-size:.8em}table.grid td,table.grid th{padding:.15em .3em}
table.grid td{white-space:normal;max-width:7em}table.grid td a{color:inherit;display:block}
table.grid th{max-width:7em;white-space:normal}
table.grid td:nth-child(-n+3),table.grid th:nth-child(-n+3){white-space:nowrap;max-width:none}
details{margin:.4em 0 1em}summary{cursor:pointer}
table.focus{table-layout:fixed;width:100%}table.focus td,table.focus th{white-space:normal;overflow-wrap:anywhere;
min-width:0;max-width:none}table.focus th:nth-child(1){width:7%}table.focus th:nth-child(2){width:20%}
table.focus th:nth-child(3){width:7%}table.focus th:nth-child(4){width:33%}table.focus th:nth-child(5){width:25%}
table.focus th:nth-child(6){width:8%}
svg.ulp{display:block;margin:.2em 0 .8em}svg.ulp text{font:11px sans-serif}
div.entry{max-width:100%;border-left:4px solid #ddd;padding:.1em .8em;margin:.6em 0;box-sizing:border-box}
div.entry p{margin:.3em 0}
pre{white-space:pre-wrap;overflow-wrap:anywhere}
pre.cmd{background:#f6f6f6;padding:.3em .6em;word-break:break-all;margin:.2em 0}
"""

_JS = """
function esvFilter(box){var rows=document.querySelectorAll('#'+box.dataset.table+' tbody tr');
for(var i=0;i<rows.length;i++){if(rows[i].dataset.status===box.dataset.status){
rows[i].style.display=box.checked?'':'none';}}}
"""


def status_class(text) -> str:
    """CSS class of the worst status named in `text` ("" when it names none)."""
    text = cell_text(text).lower()
    for status in SEVERITY:
        if re.search(rf"(^|[^a-z-]){re.escape(status)}($|[^a-z-])", text):
            return "st-" + re.sub(r"[^a-z0-9]+", "-", status)
    return ""


def anchor_id(case) -> str:
    """The HTML id of a case's row in the cases table (a summary cell links to it)."""
    return "c-" + re.sub(r"[^A-Za-z0-9_-]+", "_", str(case))


def _html_table(frame: pd.DataFrame, table_id: str, grid: bool = False, links: Mapping | None = None,
                no_ids: Iterable = (), css: str = "") -> str:
    """An escaped HTML table; status cells (and every cell of a summary grid, a heatmap) carry status
    classes, and a table with a status column gets a filter (one checkbox per status). A table with a
    `case` column gives each row the id `anchor_id(case)`; `links` {(row position, column): case}
    turns a grid cell into a link to that case's row; cases in `no_ids` get no id (another table
    holds it: an id is unique in a page)."""
    import pandas as pd
    frame = tidy(frame)
    no_ids = set(no_ids)
    esc = _esc
    status_cols = [c for c in frame.columns if str(c) in ("status", "verdict")]
    if status_cols and not grid:   # a reader scans the status first; the wide numbers can scroll
        frame = frame[[status_cols[0], *[c for c in frame.columns if c != status_cols[0]]]]
    parts = []
    if status_cols and len(frame):
        counts = frame[status_cols[0]].map(cell_text).value_counts()
        boxes = [f"<label><input type='checkbox' checked data-table='{esc(table_id)}' "
                 f"data-status='{esc(s)}' onchange='esvFilter(this)'> <span class='{status_class(s)}'>"
                 f"{esc(s)}</span> ({n})</label>" for s, n in counts.items()]
        parts.append("<div class='filter'>show: " + "".join(boxes) + "</div>")
    css = "grid" if grid else css
    parts.append(f"<div class='scroll'><table id='{esc(table_id)}'" + (f" class='{esc(css)}'" if css else "") + "><thead><tr>"
                 + "".join(f"<th>{esc(str(c)).replace('/', '/<wbr>') if grid else esc(str(c))}</th>"
                           for c in frame.columns) + "</tr></thead><tbody>")
    numeric = {c for c in frame.columns if pd.api.types.is_numeric_dtype(frame[c]) and frame[c].dtype != bool}
    links = links or {}
    for position, row in enumerate(frame.to_dict(orient="records")):
        attrs = f" data-status='{esc(cell_text(row[status_cols[0]]))}'" if status_cols else ""
        if "case" in row and not grid and row["case"] not in no_ids:
            attrs += f" id='{esc(anchor_id(row['case']))}'"
        cells = []
        for col, value in row.items():
            text = cell_text(value)
            cls = status_class(text) if (grid or col in status_cols) else ""
            cls = " ".join(x for x in (cls, "num" if col in numeric else "",
                                       "long" if len(text) > 60 and not grid else "") if x)
            shown = esc(text)
            target = links.get((position, col))
            if target is not None and text:
                shown = f"<a href='#{esc(anchor_id(target))}' title='{esc(text)}: go to its first row'>{shown}</a>"
            cells.append(f"<td class='{cls}'>{shown}</td>" if cls else f"<td>{shown}</td>")
        parts.append(f"<tr{attrs}>" + "".join(cells) + "</tr>")
    parts.append("</tbody></table></div>")
    return "".join(parts)


def _html_value(value, boxed: bool = True) -> str:
    """Metadata value: dicts as small nested tables, lists as lists, scalars escaped. `boxed`: the outermost
    table sits in a scrolling box (div.scroll); the tables nested in it scroll with it."""
    import pandas as pd
    esc = _esc
    if isinstance(value, Mapping):
        if not value:
            return ""
        table = "<table>" + "".join(f"<tr><th>{esc(str(k))}</th><td>{_html_value(v, False)}</td></tr>"
                                    for k, v in value.items()) + "</table>"
        return f"<div class='scroll'>{table}</div>" if boxed else table
    if isinstance(value, (list, tuple)):
        if not value:
            return ""
        if all(isinstance(v, Mapping) for v in value):
            # no anchors: a case's id belongs to its row in the cases table (ids are unique in a page)
            return _html_table(pd.DataFrame(list(value)), f"t{id(value)}", no_ids=[v.get("case") for v in value])
        return "<ul>" + "".join(f"<li>{_html_value(v, boxed)}</li>" for v in value) + "</ul>"
    return esc(cell_text(value))


def to_html(sections: Mapping[str, pd.DataFrame], metadata: Mapping, title: str,
            header: Mapping | None = None, titles: Mapping[str, str] | None = None,
            grid_links: Mapping | None = None, html_after: Mapping[str, str] | None = None,
            collapsed: Iterable[str] = (), html_instead: Mapping[str, str] | None = None,
            html_focus: Mapping | None = None) -> str:
    """A standalone HTML page: the verdict block, then the sections in order (`titles` names their
    headings; the `summary` grid is a heatmap coloured by status whose cells link to their rows,
    `grid_links` {(row position, column): case}); rows filterable by status; then the metadata as
    small tables. `html_after` {section: HTML made by esverify} is put after a section (e.g. plots),
    `html_instead` {section: HTML made by esverify} shows a section (its table then follows in a closed
    <details>); sections named in `collapsed` are in a closed <details>; `html_focus` {section:
    (frame -> the rows to show, what they are)} shows those rows and puts the whole table in a closed
    <details>. Every value from a frame is escaped; the HTML blocks are made by esverify, which escapes
    what they quote."""
    esc = _esc
    titles, html_after, collapsed = dict(titles or {}), dict(html_after or {}), set(collapsed)
    html_instead, html_focus = dict(html_instead or {}), dict(html_focus or {})
    head, rest = split_header(metadata, header)
    body = [f"<h1>{esc(title)}</h1>"]
    if head:
        verdict = cell_text(head.get("verdict", ""))
        if verdict:
            body.append(f"<p><span class='verdict {status_class(verdict)}'>{esc(verdict)}</span>"
                        + (f" exit {esc(cell_text(head['exit_code']))}" if "exit_code" in head else "") + "</p>")
        body.append("<div class='scroll'><table>" + "".join(f"<tr><th>{esc(k)}</th><td class='long'>{esc(v)}</td></tr>"
                                                            for k, v in _header_rows(head)) + "</table></div>")
    for i, (name, df) in enumerate(sections.items()):
        if isinstance(df, tuple):
            df = df[0]
        table_id = "s%d-%s" % (i, re.sub(r"[^A-Za-z0-9_-]+", "-", str(name)))
        heading = titles.get(name, name)
        focus, focus_ids = None, ()
        if name in html_focus and len(df):
            pick, words = html_focus[name]
            focus = pick(df)
            focus_ids = set(focus["case"]) if "case" in focus else ()
        table = (_html_table(df, table_id, grid=(name == "summary"), links=grid_links if name == "summary" else None,
                             no_ids=focus_ids)
                 if len(df) else "<p>no rows</p>")
        if focus is not None:
            shown = _html_table(focus, table_id + "-focus", css="focus") if len(focus) else "<p>none</p>"
            table = (f"<p>{len(focus)} of {len(df)} rows: {esc(words)}</p>{shown}<details><summary>all {len(df)} "
                     f"rows (click to show)</summary>{table}</details>")
        elif (name in collapsed or name in html_instead) and len(df):
            table = f"<details><summary>{len(df)} rows as a table (click to show)</summary>{table}</details>"
        table = html_instead.get(name, "") + table
        after = html_after.get(name, "")
        body += [f"<h2 id='{esc(table_id)}-h'>{esc(str(heading))}</h2>", table,
                 f"<div class='scroll'>{after}</div>" if after else ""]
    body += ["<h2>Metadata</h2>", _html_value(dict(rest)) or "<p>none</p>"]
    return ("<!doctype html><html><head><meta charset='utf-8'><title>" + esc(title) + "</title><style>" + _CSS
            + "</style><script>" + _JS + "</script></head><body>" + "\n".join(body) + "</body></html>\n")


def _seconds(value) -> str:
    """A JUnit `time` (seconds, 3 decimals); 0 when unknown."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        return "0.000"
    return f"{number:.3f}" if math.isfinite(number) and number >= 0 else "0.000"


def to_junit(frame: pd.DataFrame, suite: str, *, name_cols: Iterable[str], status_col: str = "status",
             detail_col: str = "detail", failing: Iterable[str] = ("fail", "mismatch"),
             erroring: Iterable[str] = ("error", "unverifiable"), skipping: Iterable[str] = ("skipped",),
             time_col: str | None = None, suite_time: float | None = None, exit_code: int | None = None,
             verdict: str | None = None, reason: str | None = None, timestamp: str | None = None) -> str:
    """JUnit XML (the common Jenkins/Surefire schema) with one testcase per row of `frame`.

    A row whose status is in `failing` gets a <failure>, `erroring` an <error> (both with `type` = the
    status and `message` = the row's detail), `skipping` a <skipped>; every testcase and the suite carry
    `time` (seconds: `time_col` of the row, `suite_time`; 0.000 when unknown). So that the counts agree
    with the exit code, a run whose `exit_code` is not 0 but whose rows hold no failure or error (nothing
    checked, --require-all with skipped rows), and every interrupted run, gets one more testcase named
    "verdict" failing with type `verdict` and message `reason` (docs/parity.md "JUnit").
    """
    failing, erroring, skipping = set(failing), set(erroring), set(skipping)
    name_cols = list(name_cols)
    cases = []
    counts = {"failures": 0, "errors": 0, "skipped": 0}
    for row in frame_records(frame):
        seconds = _seconds(row.get(time_col)) if time_col else "0.000"
        case = ET.Element("testcase", classname=xml_text(suite),
                          name=xml_text("/".join(str(row.get(c)) for c in name_cols)), time=seconds)
        status = str(row.get(status_col))
        detail = xml_text(str(row.get(detail_col) or status))
        if status in failing:
            ET.SubElement(case, "failure", type=xml_text(status), message=detail[:500]).text = \
                xml_text(json.dumps(row, sort_keys=True))
            counts["failures"] += 1
        elif status in erroring:
            ET.SubElement(case, "error", type=xml_text(status), message=detail[:500]).text = \
                xml_text(json.dumps(row, sort_keys=True))
            counts["errors"] += 1
        elif status in skipping:
            ET.SubElement(case, "skipped", message=detail[:500])
            counts["skipped"] += 1
        cases.append(case)
    interrupted = verdict is not None and str(verdict).startswith("interrupted")
    if (exit_code not in (None, 0) and counts["failures"] + counts["errors"] == 0) or interrupted:
        said = xml_text(str(reason or verdict or f"exit {exit_code}"))
        case = ET.Element("testcase", classname=xml_text(suite), name="verdict", time="0.000")
        ET.SubElement(case, "failure", type="verdict", message=said[:500]).text = \
            xml_text(f"verdict: {verdict}; exit code {exit_code}; {said}")
        counts["failures"] += 1
        cases.append(case)
    attrs = {"name": xml_text(suite), "tests": str(len(cases)), **{k: str(v) for k, v in counts.items()},
             "time": _seconds(suite_time)}
    if timestamp:   # the schema's xs:dateTime without a zone: "2026-12-01T21:00:00" (UTC)
        attrs["timestamp"] = xml_text(str(timestamp).replace("+00:00", "").removesuffix("Z"))
    root = ET.Element("testsuite", **attrs)
    root.extend(cases)
    return ET.tostring(root, encoding="unicode", xml_declaration=True) + "\n"


def write_report(out_dir: str | os.PathLike, stem: str, sections: Mapping[str, pd.DataFrame],
                 metadata: Mapping, formats: Iterable[str] = FORMATS, title: str | None = None,
                 header: Mapping | None = None, titles: Mapping[str, str] | None = None,
                 md_sections: Mapping | None = None, md_limit: int | None = None, grid_links: Mapping | None = None,
                 html_after: Mapping[str, str] | None = None, collapsed: Iterable[str] = (),
                 html_instead: Mapping[str, str] | None = None, html_focus: Mapping | None = None,
                 html_order: Iterable[str] | None = None, html_omit: Iterable[str] = (),
                 json_extra: Mapping | None = None, json_sections: Mapping | None = None, into=None) -> list[Path]:
    """Write a report in the chosen formats under `out_dir`; returns the paths.

    Every format opens with the header (HEADER_KEYS: verdict, exit code,
    counts, start and finish times, command line; from `header` or else from
    `metadata`), then the sections in the given order (the summary grid
    first), then the metadata. csv writes `<stem>-verdict.csv` (the header,
    key,value) when there is a header, `<stem>-<section>.csv` per section
    and `<stem>-metadata.json`; json, md and html write `<stem>.<ext>`.
    titles: headings of the sections in md/html; md_sections: the sections as the Markdown shows them
    (default `sections`), kept under `md_limit` characters (to_markdown); grid_links, html_after,
    collapsed, html_instead, html_focus: see to_html; html_order: the section names in the order the HTML
    shows them (default the given order; a section not named follows in the given order); html_omit:
    sections the HTML leaves out because another section already shows their rows (a page shows nothing
    twice; the csv, json and md keep them); json_extra: top-level keys of the JSON document after the header (e.g.
    "schema_version"); json_sections: the sections as the JSON holds them (default `sections`).
    Raises ValueError on an unknown format (before anything is written).
    The files are one `esverify.reportset.ReportSet`: all written or none
    (OSError); with `into` (a ReportSet) they join that set instead, and
    are written by its commit().
    """
    import pandas as pd
    from .reportset import ReportSet
    whole = into if into is not None else ReportSet()

    def queue(path, text):   # added to the set, which is committed as a whole below
        return whole.add_text(path, text)

    formats = list(dict.fromkeys(formats))
    unknown = [f for f in formats if f not in FORMATS]
    if unknown:
        raise ValueError(f"unknown report format(s) {unknown}; choose from {list(FORMATS)}")
    out = Path(out_dir)
    title = title or stem
    head, _ = split_header(metadata, header)
    written = []
    for fmt in formats:
        if fmt == "csv":
            if head:
                verdict = pd.DataFrame(_header_rows(head), columns=["key", "value"])
                written.append(queue(out / f"{stem}-verdict.csv",
                                     escape_frame(verdict, csv_cell).to_csv(index=False)))
            for name, df in sections.items():
                written.append(queue(out / f"{stem}-{name}.csv",
                                     escape_frame(tidy(df), csv_cell).to_csv(index=False)))
            written.append(queue(out / f"{stem}-metadata.json",
                                 json.dumps(_jsonable(dict(metadata)), indent=2, sort_keys=True) + "\n"))
        elif fmt == "json":
            written.append(queue(out / f"{stem}.json", to_json(
                json_sections if json_sections is not None else sections, metadata, head, json_extra)))
        elif fmt == "md":
            written.append(queue(out / f"{stem}.md", to_markdown(
                md_sections if md_sections is not None else sections, metadata, title, head, titles, md_limit,
                full_names=f"{stem}.json and {stem}.html")))
        elif fmt == "html":
            omit = set(html_omit)
            order = [n for n in (html_order or ()) if n in sections and n not in omit]
            ordered = {n: sections[n] for n in [*order, *(n for n in sections if n not in order and n not in omit)]}
            written.append(queue(out / f"{stem}.html", to_html(ordered, metadata, title, head, titles,
                                                               grid_links, html_after, collapsed,
                                                               html_instead, html_focus)))
    if into is None:
        whole.commit()
    return written


def report_patterns(stem: str) -> tuple[str, ...]:
    """fnmatch patterns of the files `write_report(..., stem, ...)` writes (for --overwrite)."""
    return (f"{stem}.json", f"{stem}.md", f"{stem}.html", f"{stem}-*.csv", f"{stem}-metadata.json")


def console_table(frame: pd.DataFrame, max_rows: int = 40) -> str:
    """A compact plain-text table for the terminal: cells as in the reports (no `6.0`, no `nan`)."""
    if not len(frame):
        return "(no rows)"
    shown = tidy(frame.head(max_rows))
    shown = escape_frame(shown.astype(object).apply(lambda col: col.map(cell_text)), terminal_text)
    text = shown.to_markdown(index=False, tablefmt="simple", disable_numparse=True)
    if len(frame) > max_rows:
        text += f"\n... {len(frame) - max_rows} more rows in the written report"
    return text
