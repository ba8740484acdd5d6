"""One warm start server kept across parity runs: `keep_warm`, `not_kept`, `kept`.

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


_KEPT: list = []   #: (token, server or None) of the open `keep_warm` and `not_kept` blocks, innermost last


def kept() -> "WarmStart | None":
    """The warm start server the innermost `keep_warm` holds (None outside one, inside `not_kept`, or when
    it did not start)."""
    return _KEPT[-1][1] if _KEPT else None


@contextlib.contextmanager
def _holding(server):
    token = object()      # each block removes its own entry, whatever order blocks of other threads end in
    _KEPT.append((token, server))
    try:
        yield server
    finally:
        _KEPT[:] = [entry for entry in _KEPT if entry[0] is not token]


def not_kept():
    """Inside the block, runs do not use the server an outer `keep_warm` holds (they start their own, or
    fresh interpreters, as without it); the server keeps running for after the block."""
    return _holding(None)


@contextlib.contextmanager
def keep_warm(timeout: float = 120.0):
    """Keep one warm start server for every parity run made inside the block (a notebook, a script or a test
    session making many runs): the children of a run that use the parent's own interpreter (the path
    sys.executable), the default extra environment and the environment the server started with fork from
    this server, one reference or more, and leave it running; the run's other children (another
    interpreter, another environment) get their own server per interpreter (two children or more) or fresh
    interpreters, as without the block. The server starts now, in the calling thread, which must
    outlive the block (the server dies with it); it ends, with its private folder, when the block ends.
    A server that cannot start costs nothing but its attempt (its folder is removed at once): runs then
    behave as without the block. Yields the WarmStart, or None when it did not start."""
    work = warm = None
    try:
        work = Path(tempfile.mkdtemp(prefix="esverify-warm-kept-"))
        # this server forks many children, and so also imports what a driver imports at its start (the
        # module torch.use_deterministic_algorithms loads on its first call, 1 s of CPU a child); a run's
        # own server forks one child per reference and leaves that to the driver that needs it
        warm = warm_start_server(sys.executable, {}, work, work / "warm-start.log", kept=True)
        warm.start(timeout)
    except (WarmStartError, OSError, ImportError):
        if warm is not None:
            warm.close()
        if work is not None:
            remove_tree(work)
        work = warm = None
    try:
        with _holding(warm):
            yield warm
    finally:
        if warm is not None:
            warm.close()
        if work is not None:
            remove_tree(work)


def usable_for(opts, python=None) -> "WarmStart | None":
    """The kept server when the children of interpreter `python` (a path; None: the run's bare one,
    opts.python) in a run with parity Options `opts` may fork from it, else None: warm starts on, the
    server's interpreter (the parent's own), child environment and passed entries."""
    held = kept()
    if held is None or not opts.warm_start:
        return None
    return held if held.usable(opts.python if python is None else python, opts.child_env,
                               passed_environment()) else None
