"""The supervisor that runs each parity child (esverify/oracle/supervise.py):
it passes on the child's real exit status, kills what the child leaves behind and applies the
resource limits to the child."""
from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from esverify.oracle import child_process as child_mod

SUPERVISE = Path(child_mod.__file__).with_name("supervise.py")
pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux: /proc and subreapers")


def supervise(code: str, *limits: str, timeout: float = 30) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-I", str(SUPERVISE), *limits, "--", sys.executable, "-c", code],
                          capture_output=True, text=True, timeout=timeout, start_new_session=True)


@pytest.mark.parametrize("code, status", [("raise SystemExit(7)", 7), ("pass", 0),
                                          ("import os; os.kill(os.getpid(), 11)", -signal.SIGSEGV),
                                          ("import os; os.kill(os.getpid(), 9)", -signal.SIGKILL)])
def test_the_childs_real_exit_status_is_passed_on(code, status):
    assert supervise(code).returncode == status


def test_what_the_child_leaves_behind_is_killed(tmp_path):
    pids = tmp_path / "pids"
    code = (f"import os, subprocess, sys, time\n"
            f"a = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
            f"b = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'], start_new_session=True)\n"
            f"open({str(pids)!r}, 'w').write(f'{{a.pid}} {{b.pid}}')\n"
            f"if os.fork() == 0:\n    time.sleep(60)\n"
            f"os._exit(4)\n")
    started = time.monotonic()
    result = supervise(code)
    assert result.returncode == 4
    assert time.monotonic() - started < 30      # not the sleepers' 60 s
    assert "left 3 process(es) running" in result.stderr
    for pid in map(int, pids.read_text().split()):
        assert not Path(f"/proc/{pid}").exists() or \
            Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] in "ZX"


def test_file_size_limit_applies_to_the_child(tmp_path):
    result = supervise(f"open({str(tmp_path / 'big')!r}, 'wb').write(b'x' * 100000)", "--max-file=1000")
    # Python ignores SIGXFSZ: the write fails with EFBIG instead (other programs die of the signal)
    assert result.returncode == 1 and "File too large" in result.stderr
    assert (tmp_path / "big").stat().st_size <= 1000
    assert "--max-output" in child_mod._describe_exit(-signal.SIGXFSZ)


def test_memory_limit_applies_to_the_child():
    result = supervise("bytearray(1 << 30)", f"--max-memory={256 << 20}")
    assert result.returncode == 1 and "MemoryError" in result.stderr
    assert supervise("bytearray(1 << 20)", f"--max-memory={256 << 20}").returncode == 0


def test_sigterm_kills_the_child_and_its_orphans(tmp_path):
    pidfile = tmp_path / "pid"
    proc = subprocess.Popen([sys.executable, "-I", str(SUPERVISE), "--", sys.executable, "-c",
                             f"import subprocess, sys, time\n"
                             f"b = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'], "
                             f"start_new_session=True)\nopen({str(pidfile)!r}, 'w').write(str(b.pid))\n"
                             f"time.sleep(60)\n"], start_new_session=True)
    deadline = time.monotonic() + 20
    while not (pidfile.is_file() and pidfile.read_text()) and time.monotonic() < deadline:
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=20) == 128 + signal.SIGTERM
    pid = int(pidfile.read_text())
    assert not Path(f"/proc/{pid}").exists() or \
        Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] in "ZX"
