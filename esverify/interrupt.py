"""SIGINT, SIGTERM and SIGHUP end a run with a marked partial report.

`catching()` installs handlers that raise `Interrupted` (a BaseException,
so that the `except Exception` guards that turn one failing case into one
error row never swallow it). The caller stops its children, writes the
partial report with the verdict `interrupted` and exits with
`Interrupted.exit_code`: 128 + the signal number, the shell's own
convention: 130 for SIGINT (Ctrl-C), 143 for SIGTERM, 129 for SIGHUP.
Once one signal has been seen, later ones are recorded and ignored so
that the partial report is not cut short by a second Ctrl-C.

`deferred()` marks a stretch where an exception raised at an arbitrary
bytecode would corrupt state that outlives it: `concurrent.futures.wait`
acquires the condition lock of every pending future one by one, and a
signal raised in that loop leaves some of them held for ever, so the
pool's manager thread blocks on the next result and the interpreter hangs
at exit after the partial report is written (seen with 3,000 pending replay
units). Inside it, a signal is only recorded, and `check()`, called by the
loop at a safe point, raises it.
"""
from __future__ import annotations

import contextlib
import signal
import threading

SIGNALS = tuple(s for s in (getattr(signal, n, None) for n in ("SIGINT", "SIGTERM", "SIGHUP")) if s is not None)
VERDICT = "interrupted"


class Interrupted(BaseException):
    """Raised in the main thread when one of SIGNALS arrives."""

    def __init__(self, signum: int):
        self.signum = int(signum)
        super().__init__(f"interrupted by {self.signal_name}")

    @property
    def signal_name(self) -> str:
        try:
            return signal.Signals(self.signum).name
        except ValueError:
            return f"signal {self.signum}"

    @property
    def exit_code(self) -> int:
        return 128 + self.signum


def exit_code_for(signum: int) -> int:
    return 128 + int(signum)


@contextlib.contextmanager
def catching():
    """Within the block, SIGINT/SIGTERM/SIGHUP raise Interrupted once; old handlers come back after.

    Outside the main thread (where Python cannot install handlers) it does nothing.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    seen = []
    _pending.clear()

    def handler(signum, frame):
        if seen:           # a second signal while the partial report is written: keep writing
            return
        seen.append(signum)
        if _deferring:
            _pending.append(signum)
            return
        raise Interrupted(signum)

    previous = {}
    for sig in SIGNALS:
        try:
            previous[sig] = signal.signal(sig, handler)
        except (ValueError, OSError):
            pass
    try:
        yield
    finally:
        for sig, old in previous.items():
            try:
                signal.signal(sig, old if old is not None else signal.SIG_DFL)
            except (ValueError, OSError):
                pass


_deferring: list = []   # one entry per open deferred() block
_pending: list = []     # a signal seen inside one, not raised yet


def check() -> None:
    """Raise the signal recorded inside `deferred()`, if any (call it where raising is safe)."""
    if _pending:
        raise Interrupted(_pending.pop())


@contextlib.contextmanager
def deferred():
    """Within the block, a signal that `catching()` would raise is recorded for `check()` instead.

    Leaving the block raises it, in place of any error the block raised: a signal sent to the whole
    process group also kills pool workers, and the user asked to stop, not about a broken pool. The caller
    must call `check()` often enough (a wait with a timeout) for a signal to stop it promptly.
    """
    _deferring.append(True)
    try:
        yield
    finally:
        _deferring.pop()
        check()
