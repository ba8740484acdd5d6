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
"""
from __future__ import annotations

import ast
import threading

_LOCK = threading.RLock()   # re-entrant: a finalizer that parses on the same thread must not deadlock


def parse(source: str, filename: str = "<unknown>") -> ast.Module:
    """`ast.parse(source, filename)` under a process-wide lock; raises what ast.parse raises (SyntaxError,
    ValueError for a NUL byte)."""
    with _LOCK:
        return ast.parse(source, filename=filename)
