"""Report tables and their writers, shared by goldens, parity and audit.

Every report is a set of named pandas DataFrames ("sections") plus a
metadata dict. Writers produce csv (one file per section), json (one
file), md and html (one file each) and JUnit XML. Every file is written
atomically: to a temporary file in the destination folder, fsynced, then
renamed over the target, so a crash never leaves a half-written report and
an older report is never truncated. This module imports none of the other
esverify modules.
"""
from __future__ import annotations

import json
import math
import os
import re
import tempfile
from pathlib import Path
from typing import Iterable, Mapping
from xml.etree import ElementTree as ET

import pandas as pd

FORMATS = ("csv", "json", "md", "html")


# ----------------------------------------------------------------- escaping at the writer boundaries
# Report text comes from files and processes we did not write (a reference's error message, a file
# name in an audited tree): every writer escapes it for its own format (issue 13 item 7). Controls are
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


def md_cell(text: str) -> str:
    """A Markdown table cell: controls escaped, '|' escaped, newlines as <br>, and '<' as '&lt;' so
    no raw HTML (<script>, <img onerror>) reaches a renderer."""
    text = visible_controls(text).replace("\\", "\\\\").replace("|", "\\|").replace("<", "&lt;")
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


def escape_frame(frame: pd.DataFrame, escape) -> pd.DataFrame:
    """A copy of `frame` with `escape` applied to every text cell and column name."""
    out = frame.copy()
    for col in out.columns:
        if out[col].dtype == object or pd.api.types.is_string_dtype(out[col]):
            out[col] = out[col].map(lambda v: escape(v) if isinstance(v, str) else v)
    out.columns = [escape(c) if isinstance(c, str) else c for c in out.columns]
    return out


def write_atomic(path: str | os.PathLike, data: str | bytes) -> Path:
    """Write `data` to `path` atomically (temp file + fsync + rename).

    Creates missing parent folders. Raises OSError when the folder cannot
    be written; the previous file, if any, is then left untouched.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    # lone surrogates (a file name that is not UTF-8) are written as visible escapes, never refused
    raw = data.encode("utf-8", "backslashreplace") if isinstance(data, str) else data
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        # mkstemp creates 0600; a report is an ordinary file, so honour the umask
        umask = os.umask(0)
        os.umask(umask)
        os.fchmod(fd, 0o666 & ~umask)
        with os.fdopen(fd, "wb") as fh:
            fh.write(raw)
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


def copy_atomic(src: str | os.PathLike, path: str | os.PathLike) -> Path:
    """Copy the file `src` to `path` atomically, streaming (never holding the file in memory)."""
    import shutil
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        umask = os.umask(0)
        os.umask(umask)
        os.fchmod(fd, 0o666 & ~umask)
        with os.fdopen(fd, "wb") as fh, open(src, "rb") as source:
            shutil.copyfileobj(source, fh, 1 << 20)
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


def frame_records(frame: pd.DataFrame) -> list[dict]:
    """Rows of a frame as JSON-ready dicts (NaN becomes null)."""
    frame = frame.astype(object).where(pd.notna(frame), None)
    return [_jsonable(r) for r in frame.to_dict(orient="records")]


def to_json(sections: Mapping[str, pd.DataFrame], metadata: Mapping) -> str:
    """One JSON document: {"metadata": ..., "sections": {name: [rows]}}."""
    doc = {"metadata": _jsonable(dict(metadata)),
           "sections": {name: frame_records(df) for name, df in sections.items()}}
    return json.dumps(doc, indent=2, sort_keys=True) + "\n"


def to_markdown(sections: Mapping[str, pd.DataFrame], metadata: Mapping, title: str) -> str:
    """A Markdown document: title, metadata table, one table per section."""
    parts = [f"# {title}", "", "## Metadata", ""]
    meta = pd.DataFrame([(k, json.dumps(_jsonable(v)) if isinstance(v, (dict, list)) else v)
                         for k, v in metadata.items()], columns=["key", "value"])
    parts += [escape_frame(meta, md_cell).to_markdown(index=False), ""]
    for name, df in sections.items():
        parts += [f"## {md_cell(name)}", "", escape_frame(df, md_cell).to_markdown(index=False) if len(df)
                  else "_no rows_", ""]
    return "\n".join(parts) + "\n"


def to_html(sections: Mapping[str, pd.DataFrame], metadata: Mapping, title: str) -> str:
    """A standalone HTML page with the same content as the Markdown report."""
    import html
    meta = pd.DataFrame([(k, json.dumps(_jsonable(v)) if isinstance(v, (dict, list)) else v)
                         for k, v in metadata.items()], columns=["key", "value"])
    # pandas escapes &, < and >; the controls are made visible here
    body = [f"<h1>{html.escape(title)}</h1>", "<h2>Metadata</h2>",
            escape_frame(meta, xml_text).to_html(index=False)]
    for name, df in sections.items():
        body += [f"<h2>{html.escape(xml_text(name))}</h2>",
                 escape_frame(df, xml_text).to_html(index=False) if len(df) else "<p>no rows</p>"]
    return ("<!doctype html><html><head><meta charset='utf-8'><title>" + html.escape(title)
            + "</title></head><body>" + "\n".join(body) + "</body></html>\n")


def to_junit(frame: pd.DataFrame, suite: str, *, name_cols: Iterable[str], status_col: str = "status",
             detail_col: str = "detail", failing: Iterable[str] = ("fail", "mismatch"),
             erroring: Iterable[str] = ("error", "unverifiable"), skipping: Iterable[str] = ("skipped",)) -> str:
    """JUnit XML with one testcase per row; the row's status decides its outcome."""
    failing, erroring, skipping = set(failing), set(erroring), set(skipping)
    name_cols = list(name_cols)
    cases = []
    counts = {"failures": 0, "errors": 0, "skipped": 0}
    for row in frame_records(frame):
        case = ET.Element("testcase", classname=xml_text(suite),
                          name=xml_text("/".join(str(row.get(c)) for c in name_cols)))
        status = str(row.get(status_col))
        detail = xml_text(str(row.get(detail_col) or status))
        if status in failing:
            ET.SubElement(case, "failure", message=detail[:500]).text = json.dumps(row, sort_keys=True)
            counts["failures"] += 1
        elif status in erroring:
            ET.SubElement(case, "error", message=detail[:500]).text = json.dumps(row, sort_keys=True)
            counts["errors"] += 1
        elif status in skipping:
            ET.SubElement(case, "skipped", message=detail[:500])
            counts["skipped"] += 1
        cases.append(case)
    root = ET.Element("testsuite", name=suite, tests=str(len(cases)),
                      **{k: str(v) for k, v in counts.items()})
    root.extend(cases)
    return ET.tostring(root, encoding="unicode", xml_declaration=True) + "\n"


def write_report(out_dir: str | os.PathLike, stem: str, sections: Mapping[str, pd.DataFrame],
                 metadata: Mapping, formats: Iterable[str] = FORMATS, title: str | None = None) -> list[Path]:
    """Write a report in the chosen formats under `out_dir`; returns the paths.

    csv writes `<stem>-<section>.csv` per section plus `<stem>-metadata.json`;
    json, md and html write `<stem>.<ext>`. Raises ValueError on an unknown
    format (before anything is written).
    """
    formats = list(dict.fromkeys(formats))
    unknown = [f for f in formats if f not in FORMATS]
    if unknown:
        raise ValueError(f"unknown report format(s) {unknown}; choose from {list(FORMATS)}")
    out = Path(out_dir)
    title = title or stem
    written = []
    for fmt in formats:
        if fmt == "csv":
            for name, df in sections.items():
                written.append(write_atomic(out / f"{stem}-{name}.csv",
                                            escape_frame(df, csv_cell).to_csv(index=False)))
            written.append(write_atomic(out / f"{stem}-metadata.json",
                                        json.dumps(_jsonable(dict(metadata)), indent=2, sort_keys=True) + "\n"))
        elif fmt == "json":
            written.append(write_atomic(out / f"{stem}.json", to_json(sections, metadata)))
        elif fmt == "md":
            written.append(write_atomic(out / f"{stem}.md", to_markdown(sections, metadata, title)))
        elif fmt == "html":
            written.append(write_atomic(out / f"{stem}.html", to_html(sections, metadata, title)))
    return written


def console_table(frame: pd.DataFrame, max_rows: int = 40) -> str:
    """A compact plain-text table for the terminal (tabulate via pandas)."""
    if not len(frame):
        return "(no rows)"
    shown = escape_frame(frame.head(max_rows), terminal_text)
    text = shown.to_markdown(index=False, tablefmt="simple")
    if len(frame) > max_rows:
        text += f"\n... {len(frame) - max_rows} more rows in the written report"
    return text
