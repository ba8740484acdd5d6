"""esverify.procstat: a process's state from /proc/PID/stat (Linux only), on real processes.

Run: ``python -m pytest -q tests/test_procstat.py``.
"""
from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time

import pytest

from esverify import procstat

pytestmark = pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="reads Linux's /proc")


def _wait_state(pid: int, letters: tuple, seconds: float = 30.0) -> bytes | None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        letter = procstat.state(pid)
        if letter in letters:
            return letter
        time.sleep(0.01)
    return procstat.state(pid)


def test_this_process_runs():
    assert procstat.state(os.getpid()) == b"R"        # reading its own stat, it is on a CPU
    assert procstat.running(os.getpid()) and procstat.running(os.getpid(), zombie_threads=True)


def test_no_such_process_is_none_and_not_running():
    with open("/proc/sys/kernel/pid_max") as fh:
        beyond = int(fh.read()) + 1                     # no pid can be this large
    assert procstat.state(beyond) is None
    assert not procstat.running(beyond) and not procstat.running(beyond, zombie_threads=True)


def test_an_unreaped_child_is_a_zombie_and_not_running():
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    try:
        assert _wait_state(child.pid, (b"Z",)) == b"Z"
        assert not procstat.running(child.pid)
        assert not procstat.running(child.pid, zombie_threads=True)   # one thread, and it is gone
    finally:
        child.wait()


@contextlib.contextmanager
def _child(code: str):
    """A Python child running `code`, once it has printed its first line; killed and reaped after."""
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "ready"
        yield child.pid
    finally:
        child.kill()
        child.wait()


def test_a_command_name_with_parentheses_and_spaces_is_read_past_the_last_parenthesis():
    # the name "x) Z (y" would read as state "Z" if the fields were split after the FIRST ")"
    with _child("import ctypes, time; ctypes.CDLL(None).prctl(15, b'x) Z (y', 0, 0, 0); "
                "print('ready', flush=True); time.sleep(60)") as pid:
        with open(f"/proc/{pid}/comm") as fh:
            assert fh.read().strip() == "x) Z (y"
        assert _wait_state(pid, (b"S",)) == b"S"
        assert procstat.running(pid)


def test_a_zombie_leader_with_a_live_thread_counts_only_with_zombie_threads():
    # the main thread calls pthread_exit while another thread sleeps: Linux shows the process as Z
    with _child("import ctypes, threading, time; threading.Thread(target=time.sleep, args=(60,)).start(); "
                "print('ready', flush=True); ctypes.CDLL(None).pthread_exit(None)") as pid:
        assert _wait_state(pid, (b"Z",)) == b"Z"
        assert len(os.listdir(f"/proc/{pid}/task")) > 1
        assert not procstat.running(pid)
        assert procstat.running(pid, zombie_threads=True)
