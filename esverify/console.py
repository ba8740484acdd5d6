"""Console streams that never raise on encoding, and console text that keeps to the console's width.

A report names paths and messages we did not write; a console whose
encoding cannot hold a character (``PYTHONIOENCODING=cp1252``, a Windows
code page, ``LANG=C`` on an old Python) made `print`/`click.echo` raise
UnicodeEncodeError *after* the report was written, so the process exited 1
while its report said 0. `harden()` switches stdout and stderr to the
``backslashreplace`` error handler: what the stream cannot encode is shown
as ``\\u65e5``-style escapes, every other character as it is. The exit
code then always equals the one in the report just written
(tests/test_console_encoding.py runs every command under cp1252).

`width()` is the console's width (the terminal's, 160 characters when
the output is no terminal); `fit` and `fit_table` keep a command's console
text to it: long detail is wrapped onto a few lines and otherwise left to
the written report, and a command line to copy is never cut.

This module imports no other esverify module.
"""
from __future__ import annotations

import io
import sys

ERRORS = "backslashreplace"


def harden(*streams) -> None:
    """Make each text stream (default: sys.stdout and sys.stderr) escape what it cannot encode.

    Streams that cannot be reconfigured (a test runner's capture buffer, an
    object without `reconfigure`) are left as they are; never raises.
    """
    for stream in streams or (sys.stdout, sys.stderr):
        if isinstance(stream, io.TextIOWrapper) and stream.errors in ("strict", "replace"):
            try:
                stream.reconfigure(errors=ERRORS)
            except (ValueError, OSError):   # closed, or detached: nothing to protect
                pass


#: the width of a console that is not a terminal (a CI log, a pipe, a file)
DEFAULT_WIDTH = 160
#: the narrowest width `width()` answers (a terminal narrower than this gets lines of this width)
MIN_WIDTH = 60
#: a long line is wrapped onto at most this many console lines; the rest is only in the written report
MAX_WRAPPED = 3


def width(stream=None) -> int:
    """The console's width in characters: $COLUMNS when it holds a number (the user's choice), else the
    terminal's when `stream` (default sys.stdout) is one, else DEFAULT_WIDTH; never below MIN_WIDTH."""
    import os
    columns = os.environ.get("COLUMNS", "")
    if columns.isdigit() and int(columns) > 0:
        return max(MIN_WIDTH, int(columns))
    stream = sys.stdout if stream is None else stream
    try:
        if stream.isatty():
            return max(MIN_WIDTH, os.get_terminal_size(stream.fileno()).columns)
    except (AttributeError, OSError, ValueError):   # a capture buffer, a closed or detached stream
        pass
    return DEFAULT_WIDTH


def _is_command(line: str) -> bool:
    # a command (alone or after a label such as "re-run:") is copied whole: a terminal wraps it, we never
    # cut or break it
    import re
    return re.match(r"\s*(\S+:\s+)?(esverify|python3?) ", line) is not None


def fit(text: str, columns: int | None = None, rest: str = "the report") -> str:
    """`text` with every line at most `columns` characters (default `width()`): a longer line is wrapped
    at spaces onto at most MAX_WRAPPED lines (continuations indented by two), and what does not fit then
    is cut, the last line ending with "... (whole in <rest>)". Command lines (`esverify ...`,
    `python ...`, also after a label: `re-run: esverify ...`) are left whole, to be copied. Empty text
    stays empty."""
    import textwrap
    columns = width() if columns is None else max(MIN_WIDTH, int(columns))
    out = []
    for line in text.split("\n"):
        if len(line) <= columns or _is_command(line):
            out.append(line)
            continue
        indent = " " * min(len(line) - len(line.lstrip()) + 2, columns // 4)
        wrapped = textwrap.wrap(line, columns, subsequent_indent=indent, break_on_hyphens=False,
                                drop_whitespace=True) or [line[:columns]]
        if len(wrapped) > MAX_WRAPPED:
            tail = f" ... (whole in {rest})"
            last = wrapped[MAX_WRAPPED - 1]
            kept = last[:columns - len(tail)]
            if " " in kept.strip() and last[len(kept):len(kept) + 1] not in ("", " "):
                kept = kept[:kept.rstrip().rindex(" ")]   # no word cut in two
            wrapped = wrapped[:MAX_WRAPPED - 1] + [kept.rstrip() + tail]
        out += wrapped
    return "\n".join(out)


def fit_table(text: str, columns: int | None = None, rest: str = "the report") -> str:
    """A plain-text table with every line at most `columns` characters (default `width()`): a wider line
    is cut (a wrapped row would no longer line up with its header), ending in "~", and one line more says
    that the cut columns are whole in `rest`."""
    columns = width() if columns is None else max(MIN_WIDTH, int(columns))
    lines = text.split("\n")
    cut = [line if len(line) <= columns else line[:columns - 1] + "~" for line in lines]
    if cut != lines:
        cut.append(f"(lines cut at {columns} characters; whole in {rest})")
    return "\n".join(cut)
