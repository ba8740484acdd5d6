"""One process's state as Linux's /proc/PID/stat gives it (the impl client's group scan, the warm start's
child poll).

The second field of that file is the command name in parentheses, and the name itself may hold spaces and
parentheses (a process can rename itself to anything), so the fields are read after the LAST ")". The
supervisor (esverify/oracle/supervise.py) reads the same file with its own three lines: it runs by path
on the standard library alone. This module imports no other esverify module.
"""
from __future__ import annotations

import os

#: the states of a process that has exited: zombie (not yet reaped) and dead
EXITED = (b"Z", b"X")


def state(pid: int) -> bytes | None:
    """The state letter of process `pid` (b"R", b"S", b"D", b"Z", ...), or None where /proc cannot be
    read: no such process, no /proc (not Linux), or a field missing."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            return fh.read().rsplit(b")", 1)[-1].split()[0]
    except (OSError, IndexError):
        return None


def running(pid: int, zombie_threads: bool = False) -> bool:
    """Whether /proc shows process `pid` not exited. False where /proc cannot tell (`state` is None).
    zombie_threads: also count a zombie whose other threads still run (its main thread exited: Linux
    shows Z while the rest run or die), as the impl client does to wait for a whole process group."""
    letter = state(pid)
    if letter is None:
        return False
    if letter not in EXITED:
        return True
    if not zombie_threads or letter != b"Z":
        return False
    try:
        return len(os.listdir(f"/proc/{pid}/task")) > 1
    except OSError:
        return False
