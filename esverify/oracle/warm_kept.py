"""One warm start server kept across parity runs (issue 33 item 4): `keep_warm`, `not_kept`, `kept`.

A parity run starts its own warm start server (esverify.oracle.warm_start) only when it starts children
for two references or more, and ends it with the run. A program that makes many runs (a notebook, a
script, the test suite: tests/conftest.py) keeps one server for all of them inside `keep_warm()`,
single-reference runs and `Runner.session` included (docs/parity.md, "Warm starts").
"""
from __future__ import annotations

import contextlib
import sys
import tempfile
from pathlib import Path

from .child_process import passed_environment, remove_tree, warm_start_server
from .warm_start import WarmStart, WarmStartError   # noqa: F401 - WarmStart: the annotations' type


_KEPT: list = []   #: the servers `keep_warm` holds, innermost last


def kept() -> "WarmStart | None":
    """The warm start server the innermost `keep_warm` holds (None outside one, inside `not_kept`, or when
    it did not start)."""
    return _KEPT[-1] if _KEPT else None


@contextlib.contextmanager
def not_kept():
    """Inside the block, runs do not use the server an outer `keep_warm` holds (they start their own, or
    fresh interpreters, as without it); the server keeps running for after the block."""
    _KEPT.append(None)
    try:
        yield
    finally:
        _KEPT.pop()


@contextlib.contextmanager
def keep_warm(timeout: float = 120.0):
    """Keep one warm start server for every parity run made inside the block (a notebook, a script or a test
    session making many runs): each run whose children use the parent's own interpreter, the default
    extra environment and the environment the server started with forks them from this server, one
    reference or more, and leaves it running; other runs start their own (two references or more) or
    fresh interpreters, as without the block. The server starts now, in the calling thread, which must
    outlive the block (the server dies with it); it ends, with its private folder, when the block ends.
    A server that cannot start costs nothing but its attempt: runs then behave as without the block.
    Yields the WarmStart, or None when it did not start."""
    work = Path(tempfile.mkdtemp(prefix="esverify-warm-kept-"))
    warm = warm_start_server(sys.executable, {}, work, work / "warm-start.log")
    try:
        warm.start(timeout)
    except (WarmStartError, OSError):
        warm = None
    _KEPT.append(warm)
    try:
        yield warm
    finally:
        _KEPT.pop()
        if warm is not None:
            warm.close()
        remove_tree(work)


def usable_for(opts) -> "WarmStart | None":
    """The kept server when a run with parity Options `opts` may fork its children from it, else None: warm
    starts on, the parent's own interpreter, the server's child environment and passed entries."""
    held = kept()
    if held is None or not opts.warm_start or opts.python_explicit:
        return None
    return held if held.usable(opts.python, opts.child_env, passed_environment()) else None
