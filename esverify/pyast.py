"""`ast.parse` for a parent that runs references in threads: one parse at a time.

CPython 3.11 keeps the AST converter's recursion depth in per-interpreter
state, not per thread. When two threads build ASTs at once (possible when
a garbage-collector finalizer or any Python code hands the GIL over mid
conversion), the count comes back wrong and `ast.parse` raises
`SystemError: AST constructor recursion depth mismatch (before=45, after=46)`.
That surfaced as an `error` row in a full test run here, in a skill-sample
row, while the other references' threads were running. Every parent-side
parse goes through `parse` (tests/test_pyast.py enforces it).

That lock alone did not end it: a CI-equivalent run saw the error again in
a skill-sample fuzz row (before=48, after=43). The other parser was numpy:
it reads every .npy header with `ast.literal_eval`, and the parent reads
thousands of .npz files in its reference threads (a spy on `ast.parse`
during one parity run: 8,976 header parses, against 15 of ours). Such
library calls hold the same lock through `exclusive` (every `np.load` of
the package: tests/test_pyast.py checks it).

The stdlib can still build ASTs outside the lock (3.11's traceback
formatting, for one). The error comes after a complete conversion and
changes nothing, so `parse` also tries again, a few times, when it is this
error; any other error is raised at once.
"""
from __future__ import annotations

import ast
import threading
from contextlib import contextmanager

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


@contextmanager
def exclusive():
    """Hold the parse lock around a library call that builds ASTs of its own (numpy's .npy header
    reader, `ast.literal_eval`), so that it never runs beside one of ours or another such call."""
    with _LOCK:
        yield
