"""`ast.parse` for a parent that runs references in threads: one parse at a time.

CPython 3.11 keeps the AST converter's recursion depth in per-interpreter
state, not per thread. When two threads build ASTs at once (possible when
a garbage-collector finalizer or any Python code hands the GIL over mid
conversion), the count comes back wrong and `ast.parse` raises
`SystemError: AST constructor recursion depth mismatch (before=45, after=46)`.
That surfaced as an `error` row in a full test run here, in a skill-sample
row, while the other references' threads were running (blame, which
parses clone files, is the likely other parser). Every parent-side parse
goes through `parse` (tests/test_pyast.py enforces it).

The lock covers our own parses only. The stdlib still builds ASTs on its own
(3.11's traceback formatting, for one), and a CI-equivalent run after the
lock saw the same error once more in a skill-sample fuzz row
(before=48, after=43). The error comes after a complete conversion and
changes nothing, so `parse` tries again, a few times, when it is this
error; any other error is raised at once.
"""
from __future__ import annotations

import ast
import threading

_LOCK = threading.RLock()   # re-entrant: a finalizer that parses on the same thread must not deadlock
#: how many times `parse` tries when CPython reports the shared recursion count out of step
ATTEMPTS = 5
#: the message of that SystemError (CPython 3.11's Python/Python-ast.c)
MISMATCH = "recursion depth mismatch"


def parse(source: str, filename: str = "<unknown>") -> ast.Module:
    """`ast.parse(source, filename)` under a process-wide lock; raises what ast.parse raises (SyntaxError,
    ValueError for a NUL byte; the recursion-depth SystemError only when all ATTEMPTS hit it)."""
    with _LOCK:
        for attempt in range(ATTEMPTS):
            try:
                return ast.parse(source, filename=filename)
            except SystemError as exc:
                if MISMATCH not in str(exc) or attempt == ATTEMPTS - 1:
                    raise
    raise AssertionError("unreachable")   # pragma: no cover - the loop returns or raises
