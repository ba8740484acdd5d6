"""The session-end leak check of tests/conftest.py sees what a hostile test would leave: an orphan
that left its process group, and an esverify temp folder ("Done when")."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time

import pytest

import conftest


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="needs /proc and a child subreaper")
def test_the_leak_check_sees_an_orphan_and_a_temp_folder():
    baseline = set(conftest._children_of(os.getpid()))
    # a child that starts a setsid() grandchild and exits: the grandchild is an orphan
    subprocess.run([sys.executable, "-c", "import subprocess, sys; print(subprocess.Popen([sys.executable, '-c', "
                    "'import time; time.sleep(60)'], start_new_session=True, stdout=subprocess.DEVNULL, "
                    "stderr=subprocess.DEVNULL).pid)"], check=True,
                   capture_output=True, text=True)
    folder = tempfile.mkdtemp(prefix="esverify-leak-probe-")
    try:
        procs, folders = conftest.leftovers(baseline, grace=0.5)
        assert len(procs) == 1 and "time.sleep(60)" in procs[0]
        assert os.path.basename(folder) in folders
    finally:
        for entry in conftest.leftovers(baseline, grace=0)[0]:
            os.kill(int(entry.split(":", 1)[0]), signal.SIGKILL)
        os.rmdir(folder)
    time.sleep(0.1)
    assert conftest.leftovers(baseline, grace=2.0) == ([], [])


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="needs /proc and a child subreaper")
@pytest.mark.slow   # 2 s (--durations, 2026-12-03): out of the fast tier
def test_the_interpreters_resource_tracker_is_stopped_but_a_tests_own_process_is_still_seen():
    """CI failed once on multiprocessing's resource tracker (started by a replay test's spawn pool):
    pytest's own helper, stopped at session end; a process a test starts is still a leak."""
    from multiprocessing import resource_tracker
    conftest._stop_resource_tracker()           # an earlier test may have started it already
    baseline = set(conftest._children_of(os.getpid()))
    resource_tracker.ensure_running()
    tracker = resource_tracker._resource_tracker._pid
    own = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        before = conftest.leftovers(baseline, grace=0)[0]
        assert {int(e.split(":", 1)[0]) for e in before} == {tracker, own.pid}
        conftest._stop_resource_tracker()
        after = conftest.leftovers(baseline, grace=2.0)[0]
        assert [int(e.split(":", 1)[0]) for e in after] == [own.pid]
    finally:
        own.kill()
        own.wait()
    assert conftest.leftovers(baseline, grace=2.0) == ([], [])


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="needs /proc and a child subreaper")
@pytest.mark.slow   # starts two pytest sessions of two xdist workers each
@pytest.mark.parametrize("leaks", [True, False])
def test_under_xdist_a_workers_leak_fails_the_session_and_its_workers_are_not_leaks(tmp_path, leaks):
    """The README's test command runs the suite on one xdist worker per core: a leak inside a worker
    must reach the controller's exit code (a worker's own session status does not), and the workers
    themselves, children of the controller for the whole session, are not a test's leak. A worker's
    private temp folder sits beside the controller's, not inside it (Ray's socket paths under it
    must stay within AF_UNIX's 107 bytes)."""
    pytest.importorskip("xdist")
    (tmp_path / "conftest.py").write_text(open(conftest.__file__).read())
    base = tmp_path / "base"
    base.mkdir()
    leak = "tempfile.mkdtemp(prefix='esverify-probe-')" if leaks else "pass"
    (tmp_path / "test_probe.py").write_text(
        "import tempfile\n\n"
        f"def test_a():\n    {leak}\n\n"
        "def test_b():\n"
        "    import os\n"
        "    assert os.path.dirname(tempfile.gettempdir()) == os.environ['PROBE_BASE']\n")
    # ESVERIFY_TEST_FRESH: the probe tests make no parity run, so the workers keep no warm start server (each
    # would import torch, numpy and numba for nothing: 2-3 s of CPU, four times); the leak check with a kept
    # server is every suite session's own, and test_the_leak_check_sees_what_the_kept_warm_start_server_forked's
    out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-n", "2", "--dist", "loadfile",
                          "-p", "no:cacheprovider", str(tmp_path)],
                         cwd=tmp_path, capture_output=True, text=True, timeout=300,
                         env={**os.environ, "TMPDIR": str(base), "PROBE_BASE": str(base), "ESVERIFY_TEST_FRESH": "1"})
    text = out.stdout + out.stderr
    lines = [ln for ln in text.splitlines() if "leak check:" in ln]
    if leaks:
        assert out.returncode == 1, text
        assert len(lines) == 1 and lines[0].startswith("[gw") and "esverify-probe-" in lines[0], text
    else:
        assert out.returncode == 0 and lines == [], text
    assert "2 passed" in text


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="needs /proc")
def test_the_leak_check_sees_what_the_kept_warm_start_server_forked(monkeypatch):
    """Processes forked by the test process's kept warm start server (conftest._warm_children) are its
    children, not pytest's: the leak check looks at them too. Here a stand-in 'server' with one child."""
    server = subprocess.Popen([sys.executable, "-c", "import subprocess, sys, time; print(subprocess.Popen("
                               "[sys.executable, '-c', 'import time; time.sleep(60)']).pid, flush=True); "
                               "time.sleep(60)"], stdout=subprocess.PIPE, text=True)
    try:
        forked = int(server.stdout.readline())
        baseline = set(conftest._children_of(os.getpid()))
        assert server.pid in baseline and forked not in baseline
        assert conftest.leftovers(baseline, grace=0)[0] == []            # not seen: not pytest's child
        with monkeypatch.context() as patch:
            patch.setitem(conftest._LEAK, "kept", (conftest._LEAK.get("kept") or ("",))[:1] + (server.pid,))
            procs, _ = conftest.leftovers(baseline, grace=0)
        assert [int(e.split(":", 1)[0]) for e in procs] == [forked] and "time.sleep(60)" in procs[0]
    finally:
        os.kill(forked, signal.SIGKILL)
        server.kill()
        server.wait()
    time.sleep(0.1)
    assert conftest.leftovers(baseline, grace=2.0) == ([], [])
