"""Warm starts (esverify.oracle.warm_start): a child forked from the warm start server is
the child a fresh interpreter would be (differential: the same facts, read by one probe driver, in both),
its supervisor does the classic supervisor's job, and the server leaves nothing behind."""
from __future__ import annotations

import signal
import sys
import textwrap
import time
from pathlib import Path

import pytest

from esverify.oracle.child_process import Child, ChildDied, passed_environment, warm_start_server

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux: /proc, fork, subreapers")

#: a driver that reports what it finds about its own process, with the child roots replaced by ROOT
FACTS_DRIVER = textwrap.dedent(r'''
    import argparse, atexit, gc, json, os, random, resource, signal, sys, tempfile, threading
    import numpy as np
    import torch

    p = argparse.ArgumentParser()
    p.add_argument("--clone")
    p.add_argument("--reply-fd", type=int)
    a = p.parse_args()
    os.set_inheritable(a.reply_fd, False)
    reply = os.fdopen(a.reply_fd, "w", buffering=1)
    reply.write(json.dumps({"hello": "facts", "environment": {}, "modules": {}}) + "\n")
    ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))   # <root>/drivers/facts.py

    def rel(x):
        return x.replace(ROOT, "ROOT") if isinstance(x, str) else x

    def facts():
        fds = sorted(int(f) for f in os.listdir("/proc/self/fd"))
        open_fds = [f for f in fds if os.path.exists(f"/proc/self/fd/{f}") and f != a.reply_fd]
        return {
            "env": {k: rel(v) for k, v in os.environ.items()},
            "path": [rel(x) for x in sys.path],
            "cwd": rel(os.getcwd()), "tempdir": rel(tempfile.gettempdir()),
            "argv": [rel(x) for x in sys.argv[:3]], "reply_fd_open": a.reply_fd in fds,
            "other_fds": [f for f in open_fds if f > 2],
            "stdio": [os.readlink(f"/proc/self/fd/{f}").split(":")[0] for f in (0, 1, 2)],
            "limits": {n: resource.getrlimit(getattr(resource, n)) for n in ("RLIMIT_DATA", "RLIMIT_FSIZE",
                                                                             "RLIMIT_CORE")},
            "signals": {n: repr(signal.getsignal(getattr(signal, n)))
                        for n in ("SIGINT", "SIGTERM", "SIGHUP", "SIGPIPE", "SIGXFSZ", "SIGCHLD", "SIGUSR1")},
            "group_is_supervisor": os.getpgid(0) == os.getppid() == os.getsid(0),
            "dont_write_bytecode": sys.dont_write_bytecode, "write_through": sys.stdout.write_through,
            "main": sys.modules["__main__"].__dict__.get("__file__") == __file__ and __name__ == "__main__",
            "threads": threading.active_count(), "torch_threads": torch.get_num_threads(),
            "gc": [gc.isenabled(), gc.get_threshold()],   # the server imports with collection off, then on to fork
            "random": [random.random(), float(np.random.random())],
            "modules": sorted(m for m in sys.modules if "." not in m and m in ("supervise", "warm_server")),
            "preloaded": "torch._inductor.config" in sys.modules,   # a kept server's extra module
            "esverify_path": [rel(p) for p in __import__("esverify.rng").rng.__path__],   # where later imports come from
        }

    for line in sys.stdin:
        cmd = json.loads(line)
        op = cmd.get("op")
        if op == "exit":
            break
        if op == "facts":
            reply.write(json.dumps({"id": cmd["id"], "status": "ok", "facts": facts()}) + "\n")
        elif op == "atexit":
            atexit.register(lambda path=cmd["path"]: open(path, "w").write("ran"))
            reply.write(json.dumps({"id": cmd["id"], "status": "ok"}) + "\n")
        elif op == "die":
            sys.stdout.flush()
            if cmd["how"] == "signal":
                os.kill(os.getpid(), signal.SIGSEGV)
            raise SystemExit(cmd["code"])
        elif op == "orphan":   # a process that leaves the group, as a hostile reference's may
            pid = os.fork()
            if pid == 0:
                os.setsid()
                import time
                time.sleep(60)
                os._exit(0)
            reply.write(json.dumps({"id": cmd["id"], "status": "ok", "pid": pid}) + "\n")
''')


@pytest.fixture(scope="module")
def probe(tmp_path_factory):
    base = tmp_path_factory.mktemp("warm")
    shared = base / "drivers"
    shared.mkdir()
    driver = shared / "facts.py"
    driver.write_text(FACTS_DRIVER)
    clone = base / "clone"
    clone.mkdir()
    server = warm_start_server(sys.executable, {}, base, base / "warm-start.log")
    server.start(60)
    yield {"base": base, "driver": driver, "clone": clone, "server": server}
    server.close()


def _child(probe, warm: bool, name: str, **kwargs) -> Child:
    return Child(sys.executable, probe["driver"], probe["clone"], probe["base"] / f"{name}.log",
                 workdir=probe["base"], max_memory=8 << 30, target="facts", shared=probe["driver"].parent,
                 warm=probe["server"] if warm else None, **kwargs)


def _facts(child: Child) -> dict:
    return child.request({"op": "facts"}, 30)["facts"]


def _gone(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return True
    return state in "ZX"


def test_a_warm_child_is_the_child_a_fresh_interpreter_is(probe, tmp_path, monkeypatch):
    """The same facts in a fresh child and two forked ones; each then exits, when closed, as an interpreter
    does: its atexit handlers run and its status is 0 (these children, not three more started for it)."""
    # the claim is the exit status and the atexit handlers, not how fast a loaded machine lets a child exit:
    # under a load of 13 the 2 s grace ran out and close() killed the child (exit 143) before atexit finished
    monkeypatch.setattr("esverify.oracle.child_process.EXIT_GRACE", 30.0)
    children = _child(probe, False, "fresh"), _child(probe, True, "warm"), _child(probe, True, "warm2")
    markers = [tmp_path / f"atexit-{n}" for n in range(3)]
    fresh, warm, warm2 = children
    try:
        fresh.start(60), warm.start(60), warm2.start(60)
        assert fresh.last_start == "fresh" and warm.last_start == warm2.last_start == "warm"
        a, b, c = _facts(fresh), _facts(warm), _facts(warm2)
        for child, marker in zip(children, markers):
            child.request({"op": "atexit", "path": str(marker)}, 30)
    finally:
        for child in children:
            child.close()
    assert [m.read_text() for m in markers] == ["ran"] * 3 and [ch.last_exit for ch in children] == [0] * 3
    # each forked child draws its own `random` and numpy global values, as fresh interpreters do
    assert len({tuple(x.pop("random")) for x in (a, b, c)}) == 3
    assert a == b == c
    assert a["other_fds"] == [] and a["reply_fd_open"] and a["stdio"][1:] == ["pipe"] * 2
    assert a["group_is_supervisor"] and a["main"] and a["threads"] == 1
    assert a["path"][:2] == ["ROOT/drivers", "ROOT/pkg"] and a["cwd"] == "ROOT/cwd"
    assert any(p.endswith("site-packages") for p in a["path"]) and len(a["path"]) > 4   # stdlib and site too
    assert a["tempdir"] == "ROOT/tmp" and a["env"]["TMPDIR"] == "ROOT/tmp"
    assert a["limits"]["RLIMIT_DATA"] == [8 << 30, 8 << 30] and a["limits"]["RLIMIT_CORE"] == [0, 0]
    assert a["esverify_path"] == ["ROOT/pkg/esverify/rng"]   # its own copy, not the server's


def test_a_warm_childs_exit_status_and_atexit_are_an_interpreters(probe, tmp_path, monkeypatch):
    """A child that exits with a status or dies of a signal, fresh and forked (the exit on close, atexit
    handlers and status 0: test_a_warm_child_is_the_child_a_fresh_interpreter_is's children)."""
    monkeypatch.setattr("esverify.oracle.child_process.EXIT_GRACE", 30.0)   # as there: a loaded machine's grace
    for warm in (False, True):
        for how, code, expected in (("code", 7, "exit status 7"), ("signal", 0, "SIGSEGV")):
            marker = tmp_path / f"atexit-{warm}-{how}"
            child = _child(probe, warm, f"die-{warm}-{how}")
            try:
                child.start(60)
                child.request({"op": "atexit", "path": str(marker)}, 30)
                with pytest.raises(ChildDied, match=expected):
                    child.request({"op": "die", "how": how, "code": code}, 30)
            finally:
                child.close()
            assert child.last_exit == (7 if how == "code" else -signal.SIGSEGV)
            # SystemExit runs the atexit handlers, as in an interpreter; a SIGSEGV runs none
            assert marker.exists() == (how == "code")


def test_a_warm_childs_supervisor_kills_what_it_leaves_behind(probe):
    child = _child(probe, True, "orphan")
    try:
        child.start(60)
        pid = child.request({"op": "orphan"}, 30)["pid"]
        assert not _gone(pid)
    finally:
        child.close()
    deadline = time.monotonic() + 15
    while not _gone(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _gone(pid)
    # the supervisor says so in the child's log, as a fresh one does (not in the server's log)
    assert "esverify supervisor: the reference left 1 process(es) running" in (probe["base"] / "orphan.log").read_text()


def _facts_driver(tmp_path):
    """(drivers folder, the probe driver in it), and an empty clone folder beside them."""
    shared = tmp_path / "drivers"
    shared.mkdir()
    driver = shared / "facts.py"
    driver.write_text(FACTS_DRIVER)
    (tmp_path / "clone").mkdir()
    return shared, driver


def _started_as(child) -> tuple:
    """(how `child` started, "warm" or "fresh", and its facts); it is closed again."""
    try:
        child.start(60)
        return child.last_start, _facts(child)
    finally:
        child.close()


def _facts_child(tmp_path, shared, driver, server, log: str):
    return Child(sys.executable, driver, tmp_path / "clone", tmp_path / log, workdir=tmp_path, target="facts",
                 shared=shared, warm=server)


def test_the_server_ends_with_close_and_takes_its_children_along(tmp_path):
    shared, driver = _facts_driver(tmp_path)
    server = warm_start_server(sys.executable, {}, tmp_path, tmp_path / "warm-start.log")
    server.start(60)
    child = _facts_child(tmp_path, shared, driver, server, "c.log")
    child.start(60)
    supervisor = child.proc.pid
    server.close()          # while the child runs: its supervisor gets SIGTERM and kills it
    assert server.proc.returncode is not None and not server.alive()
    deadline = time.monotonic() + 15
    while not _gone(supervisor) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _gone(supervisor)
    child.close()
    # a child asked to start after the server ended starts fresh, and says why in its log
    assert _started_as(_facts_child(tmp_path, shared, driver, server, "d.log"))[0] == "fresh"
    assert "esverify: the warm start server exited" in (tmp_path / "d.log").read_text()


def test_a_server_under_other_settings_is_not_used(probe):
    other = Child(sys.executable, probe["driver"], probe["clone"], probe["base"] / "other.log",
                  env={"OMP_NUM_THREADS": "1"}, workdir=probe["base"], target="facts",
                  shared=probe["driver"].parent, warm=probe["server"])
    try:
        other.start(60)
        assert other.last_start == "fresh"   # torch read OMP_NUM_THREADS at the server's import, not this one
    finally:
        other.close()
    assert not probe["server"].usable(sys.executable + "-other", {}, passed_environment())
    assert not probe["server"].usable(sys.executable, {}, {**passed_environment(), "OMP_NUM_THREADS": "7"})


@pytest.mark.slow   # two parity runs of a small matrix
def test_parity_rows_are_the_same_warm_and_fresh(tmp_path):
    """Differential: the same matrix (two references, single-op and training-loop rows, both noise
    sources) run with warm starts and with fresh interpreters gives the same rows, cell for cell."""
    import pandas as pd

    from esverify.oracle import Options, Runner
    standins = Path(__file__).parent / "standins"
    frames, starts = [], []
    for warm in (True, False):
        out = tmp_path / f"out-{warm}"
        result = Runner(Options(ref=(str(standins / "es-at-scale"), str(standins / "es-awd")), small=True,
                                dtypes=("bf16",), devices=("cpu",), out=str(out), quiet=True,
                                warm_start=warm)).run()
        frames.append(pd.read_csv(out / "parity-cases.csv", keep_default_na=False))
        starts.append({name: child["start"] for name, child in result.metadata["children"].items()})
        assert result.exit_code == 0
    assert {"es-at-scale", "es-awd"} <= set(starts[0]) and set(starts[0]) == set(starts[1])
    assert set(starts[0].values()) == {"warm"} and set(starts[1].values()) == {"fresh"}
    warm, fresh = frames
    assert len(warm) > 50 and set(warm["status"]) <= {"pass", "artifact"}
    assert {"fit", "main"} <= set(warm["op"])
    pd.testing.assert_frame_equal(warm, fresh)


def test_a_warm_child_finds_no_module_of_the_server_under_a_plain_name(probe):
    """The server imports esverify/oracle/supervise.py as `supervise`: a forked child must not find it in
    sys.modules (a clone's own `supervise` module would be shadowed), and the server's folder is not on
    its sys.path."""
    child = _child(probe, True, "modules")
    try:
        child.start(60)
        facts = _facts(child)
    finally:
        child.close()
    assert not any("esverify/oracle" in p for p in facts["path"])
    assert "supervise" not in facts["modules"] and "warm_server" not in facts["modules"]


@pytest.mark.slow   # five runs of one row and a session
def test_keep_warm_serves_single_reference_runs_and_leaves_nothing(tmp_path, monkeypatch):
    """keep_warm: one server for the runs of a block, one reference or more; a run that asks for fresh
    children, or whose environment changed since the server started, gets fresh ones; the block's end
    ends the server and removes its folder."""
    from esverify.oracle import Options, Runner
    from esverify.oracle import warm_kept as warm_start
    standin = str(Path(__file__).parent / "standins" / "es-at-scale")
    runs = [0]

    def start(**options) -> str:
        runs[0] += 1
        result = Runner(Options(ref=standin, target="es-at-scale", devices=("cpu",), dtypes=("f32",), small=True,
                                schemes=("iid",), case="*/perturb/*", out=str(tmp_path / f"out{runs[0]}"),
                                quiet=True, **options)).run()
        assert result.exit_code == 0 and len(result.frame) >= 1
        return result.metadata["children"]["es-at-scale"]["start"]

    with warm_start.not_kept():     # the test session's own server (tests/conftest.py) out of the way
        # a run here starts fresh: the `not_kept` block inside this test's keep_warm below is the same case
        # (a not_kept block over a server: no server at all), and its run says so
        assert warm_start.kept() is None
        with warm_start.keep_warm() as warm:
            assert warm is not None and warm_start.kept() is warm
            assert warm.kept is True
            assert start() == "warm" and warm.alive()     # left running for the next run
            assert start() == "warm"
            with warm_start.not_kept():
                assert start() == "fresh"
            assert start(warm_start=False) == "fresh"
            with monkeypatch.context() as env:
                env.setenv("OMP_NUM_THREADS", "3")        # torch read another value at the server's start
                assert start() == "fresh"
            with Runner(Options(quiet=True)).session("es-at-scale", standin) as run:   # one child, cases one by one
                assert run.session.child.last_start == "warm"
            folder = warm.root.parent
            assert folder.is_dir() and warm.alive()
        assert not warm.alive() and warm.proc.returncode is not None and not folder.exists()
        assert warm_start.kept() is None


def test_a_running_warm_child_is_polled_without_asking_the_server():
    """WarmProcess.poll reads /proc while the process runs (the server keeps it unreaped, so its pid is
    still it) and asks the server only once it is a zombie, for the exit code the server reaps."""
    import os
    import subprocess

    from esverify.oracle.warm_start import WarmProcess, WarmStartError

    class Server:
        asked = []
        up = True

        def alive(self):
            return self.up

        def request(self, message):
            self.asked.append(message)
            if not self.up:
                raise WarmStartError("the warm start server is not running")
            return {"code": -9}
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    read_fd, write_fd = os.pipe()
    try:
        server = Server()
        warm = WarmProcess(server, proc.pid, write_fd)
        assert [warm.poll() for _ in range(3)] == [None, None, None] and Server.asked == []
        server.up = False                       # the server gone: its children's supervisors stop with it
        assert warm.poll() == -9 and Server.asked == [{"op": "poll", "pid": proc.pid}]
        server.up = True
        Server.asked.clear()
        proc.kill()
        deadline = time.monotonic() + 10
        while warm.poll() is None and time.monotonic() < deadline:   # a zombie until reaped below
            time.sleep(0.01)
        assert warm.poll() == -9 and Server.asked[-1] == {"op": "poll", "pid": proc.pid}
    finally:
        proc.kill()
        proc.wait()
        os.close(read_fd)
        warm.stdin.close()


def test_a_launched_server_is_waited_for_once_and_forks_after_its_hello(tmp_path):
    """launch() returns while the server still imports (a run imports our side meanwhile, Runner._our_side);
    wait() gives its hello, the same one when asked again; a child then forks from it, with what a kept
    server (keep_warm's, `kept=True`) imports beyond a run's own imported (the determinism module), which
    a run's own server's children and a fresh child do not have. An interpreter that cannot be started is a WarmStartError
    at launch, and waiting for a server never launched is one too."""
    from esverify.oracle.warm_start import WarmStartError
    shared, driver = _facts_driver(tmp_path)
    server = warm_start_server(sys.executable, {}, tmp_path, tmp_path / "warm-start.log", kept=True)
    try:
        server.launch()
        assert server.hello is None and server.proc.poll() is None   # not waited for: still importing
        hello = server.wait(60)
        assert hello["hello"] == "warm-start" and server.wait(60) is hello
        how, facts = _started_as(_facts_child(tmp_path, shared, driver, server, "c.log"))
        assert how == "warm" and facts["preloaded"] is True
    finally:
        server.close()
    never = warm_start_server(sys.executable, {}, tmp_path, tmp_path / "never.log")
    with pytest.raises(WarmStartError, match="was not started"):
        never.wait(5)
    broken = warm_start_server(str(tmp_path / "no-python-here"), {}, tmp_path, tmp_path / "broken.log")
    with pytest.raises(WarmStartError, match="cannot start the warm start server"):
        broken.launch()


def test_a_child_restarted_from_a_thread_that_ends_lives_on(tmp_path):
    """A child started fresh dies with the thread that started it (its supervisor's PR_SET_PDEATHSIG), and
    a reference's worker thread ends before the children are closed: Session.ensure_child starts it in
    the session's own thread whichever thread asks, so a child restarted mid-run lives until it is closed."""
    import threading

    from esverify.oracle import Options, Runner
    from esverify.oracle import warm_kept
    standin = Path(__file__).parent / "standins" / "es-awd"
    with warm_kept.not_kept():   # fresh children, as without warm starts (--python, one reference)
        runner = Runner(Options(ref=str(standin), devices=("cpu",), out=str(tmp_path / "out"), quiet=True,
                                warm_start=False))
        with runner.session("es-awd", standin) as run:
            session = run.session
            session.child.kill()
            assert not session.child.alive()
            worker = threading.Thread(target=session.ensure_child)
            worker.start()
            worker.join()                  # the thread that asked for the restart is gone
            time.sleep(1.0)
            assert session.child.alive() and session.child.last_start == "fresh"
