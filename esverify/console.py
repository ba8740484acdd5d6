"""Console streams that never raise on encoding (issue 20 item 2).

A report names paths and messages we did not write; a console whose
encoding cannot hold a character (``PYTHONIOENCODING=cp1252``, a Windows
code page, ``LANG=C`` on an old Python) made `print`/`click.echo` raise
UnicodeEncodeError *after* the report was written, so the process exited 1
while its report said 0. `harden()` switches stdout and stderr to the
``backslashreplace`` error handler: what the stream cannot encode is shown
as ``\\u65e5``-style escapes, every other character as it is. The exit
code then always equals the one in the report just written
(tests/test_console_encoding.py runs every command under cp1252).

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
