"""Warm starts: reference children forked from a server that imported torch once.

A child started fresh spends most of its start importing torch, numpy and
numba and loading the noise kernels from numba's cache (about 1.5-2 s of CPU
each on the 2-core development machine), and a parity run starts one child
per reference, more after a restart. `WarmStart` starts one server per run
(esverify/oracle/warm_server.py, run by path under the child's interpreter,
in a private folder and environment of its own, like a child's) that has
done that work; each `Child` then asks it to fork its supervisor and child
(`spawn`) instead of starting a new interpreter. The forked child gets what a
fresh one gets (the same pipes, environment, working folder, resource limits,
private package folder, supervisor; docs/parity.md, "Warm starts"), and the
parent handles its supervisor through `WarmProcess`, which answers as the
`subprocess.Popen` of a fresh one does.

When the server cannot start or dies, `Child` starts fresh interpreters
instead (and its log says why). A run keeps one server per distinct child
interpreter (`WarmStarts`, keyed by the interpreter path a child is
launched with: a reference's own `--python NAME=PATH`, the bare
`--python`, or the parent's own), so children under a user's reference
environment are forked too (esverify.oracle.runner; `--warm-start`).
"""
from __future__ import annotations

import json
import os
import socket
import subprocess
import threading
import time
from pathlib import Path

from .. import procstat

SERVER = Path(__file__).with_name("warm_server.py")
MAX_PACKET = 1 << 20


class WarmStartError(RuntimeError):
    """The server did not start, died, or refused a request."""


class WarmProcess:
    """A supervisor forked by the server, as `Child` uses a Popen: pid, stdin, returncode, poll, wait.

    Its exit status comes from the server (its parent), which keeps it unreaped until `wait`: as with a
    Popen that `Child` polls with WNOWAIT, the pid keeps naming the process group until the group is
    killed. When the server is gone, so is the supervisor (it got SIGTERM, PR_SET_PDEATHSIG, and killed
    its child): the code is then -SIGKILL, and `log` (the child's BoundedLog, or None) says why."""

    def __init__(self, server: "WarmStart", pid: int, stdin_fd: int, log=None):
        self.server, self.pid, self.log = server, pid, log
        self.stdin = open(stdin_fd, "wb", buffering=0)
        self.returncode = None
        self._told = False

    def _gone(self, exc) -> int:
        if self.log is not None and not self._told:
            self._told = True
            self.log.feed(f"\nesverify: the warm start server is gone ({exc}; its log: {self.server.log_path}); "
                          "this child's supervisor stopped with it\n".encode())
        return -9

    def poll(self):
        """The exit code (minus the signal number), or None while it runs; does not reap."""
        if self.returncode is not None:
            return self.returncode
        # the server keeps it unreaped, so the pid is still it. False where /proc cannot tell: ask the
        # server. A run polls each child before every request and while it waits for a reply; asking the
        # server each time was a round trip of both processes' CPU
        if self.server.alive() and procstat.running(self.pid):
            return None
        try:
            return self.server.request({"op": "poll", "pid": self.pid})["code"]
        except WarmStartError as exc:
            return self._gone(exc)

    def wait(self, timeout: float | None = None):
        """Reap it and return the code; subprocess.TimeoutExpired after `timeout` seconds."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.returncode is None:
            try:
                code = self.server.request({"op": "reap", "pid": self.pid})["code"]
            except WarmStartError as exc:
                code = self._gone(exc)
            if code is not None:
                self.returncode = code
                break
            if deadline is not None and time.monotonic() >= deadline:
                raise subprocess.TimeoutExpired(f"warm child {self.pid}", timeout)
            time.sleep(0.02)
        return self.returncode


class WarmStart:
    """One warm start server for the children of a run.

    python: the children's interpreter; extra_env: the extra environment entries the children get (a
    child with others is not forked from this server); env: the server's own environment; root: its
    private folder, prepared as a child's (pkg/, cwd/, tmp/); log_path: where its output goes. Made by
    esverify.oracle.child_process.warm_start_server. `start(timeout)` raises
    WarmStartError; `spawn` forks a supervisor and child; `close()` ends the server (idempotent). Start
    it from the thread that outlives the run: the server dies with that thread (PR_SET_PDEATHSIG).
    """

    def __init__(self, python: str, extra_env: dict, env: dict, root: Path, log_path: Path,
                 passed: dict | None = None, kept: bool = False, mappings: tuple | None = None):
        self.python, self.extra_env, self.env = python, dict(extra_env or {}), dict(env)
        self.passed = dict(passed or {})   #: the parent's entries a child gets, when the server started
        self.root, self.log_path = Path(root), Path(log_path)
        #: a server that forks many children (warm_kept.keep_warm): it also imports what some driver imports
        #: at its start (warm_server._preload)
        self.kept = bool(kept)
        #: the noise mappings whose kernels the server loads (None: every one; a kept server loads every one)
        self.mappings = None if mappings is None else tuple(mappings)
        self.proc = None
        self.sock = None
        self.lock = threading.Lock()
        self.hello = None
        self.sent = 0   #: the id of the last request

    def start(self, timeout: float) -> dict:
        """Start the server and wait up to `timeout` s for its hello; WarmStartError on failure."""
        self.launch()
        return self.wait(timeout)

    def launch(self) -> None:
        """Start the server without waiting for it (its imports take seconds: the caller works meanwhile,
        then calls `wait`); WarmStartError when it cannot be started."""
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        log = open(self.log_path, "ab")
        try:
            self.proc = subprocess.Popen(
                [self.python, str(SERVER), f"--parent={os.getpid()}", f"--socket-fd={theirs.fileno()}"]
                + (["--kept=1"] if self.kept else [])
                + ([f"--mappings={','.join(self.mappings)}"] if self.mappings is not None else []),
                stdin=subprocess.DEVNULL, stdout=log, stderr=log, pass_fds=(theirs.fileno(),),
                cwd=str(self.root / "cwd"), env=self.env, start_new_session=True)
        except OSError as exc:
            ours.close()
            raise WarmStartError(f"cannot start the warm start server under {self.python!r}: {exc}") from None
        finally:
            theirs.close()
            log.close()
        self.sock = ours

    def wait(self, timeout: float) -> dict:
        """Wait up to `timeout` s for the launched server's hello (at once when it came already);
        WarmStartError when none comes (the server is closed then)."""
        if self.hello is not None:
            return self.hello
        if self.sock is None:
            raise WarmStartError(self.why_not() or "the warm start server was not started")
        self.sock.settimeout(timeout)
        try:
            hello = json.loads(self.sock.recv(MAX_PACKET) or b"null")
        except (OSError, ValueError) as exc:
            self.close()
            raise WarmStartError(f"the warm start server sent no hello: {exc}") from None
        if not isinstance(hello, dict) or hello.get("hello") != "warm-start":
            self.close()
            raise WarmStartError(f"the warm start server sent no hello (got {hello!r}); its log: {self.log_path}")
        self.sock.settimeout(30.0)
        self.hello = hello
        return hello

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None and self.sock is not None

    def why_not(self) -> str:
        """Why the server cannot fork a child now ('' when it can)."""
        if self.proc is None:
            return "the warm start server was not started"
        code = self.proc.poll()
        if code is not None:
            return f"the warm start server exited ({code}; its log: {self.log_path})"
        return "" if self.sock is not None else f"the warm start server was closed (its log: {self.log_path})"

    def request(self, message: dict, fds=()) -> dict:
        """One request and its answer (the threads of a run share the socket, one exchange at a time).
        WarmStartError when the server is not running, does not answer, or answers out of turn or with
        an error; a request cut short (a timeout, Ctrl-C between the request and its answer) ends the
        server, so no later request can read an answer meant for this one: its supervisors then stop
        their children (PR_SET_PDEATHSIG) and the next children start fresh."""
        with self.lock:
            sock = self.sock
            if sock is None or self.proc is None or self.proc.poll() is not None:
                raise WarmStartError("the warm start server is not running")
            self.sent += 1
            try:
                socket.send_fds(sock, [json.dumps(dict(message, id=self.sent)).encode()], list(fds))
                data = sock.recv(MAX_PACKET)
                answer = json.loads(data) if data else None
            except BaseException as exc:
                self._drop()
                if isinstance(exc, (OSError, ValueError)):
                    raise WarmStartError(f"the warm start server did not answer: {exc}") from None
                raise
            if not isinstance(answer, dict) or answer.get("id") != self.sent:
                self._drop()
                raise WarmStartError(f"the warm start server answered out of turn: {str(answer)[:200]}")
        if "error" in answer:
            raise WarmStartError(f"the warm start server refused {message.get('op')}: {answer['error']}")
        return answer

    def _drop(self) -> None:
        """Close our end (the lock held): the server exits on EOF."""
        sock, self.sock = self.sock, None
        if sock is not None:
            sock.close()

    def usable(self, python: str, extra_env: dict, passed: dict) -> bool:
        """Whether a child of interpreter `python` with these extra environment entries may be forked
        from this server now: the server's interpreter, and the environment torch and numba read at import
        (the extra entries, and `passed`, the parent's entries a child gets now, as
        child_process.passed_environment reads them: a server kept across runs (esverify.oracle.warm_kept)
        is not used after they changed)."""
        return (self.alive() and str(python) == self.python and dict(extra_env or {}) == self.extra_env
                and dict(passed) == self.passed)

    def spawn(self, argv: list, env: dict, cwd: Path, max_memory: int, max_file: int, stdin_r: int, out_w: int,
              reply_w: int) -> int:
        """Fork a supervisor and its child running `argv` ([driver, args...]; the server appends
        --reply-fd N) with the read end of its stdin, its output pipe and its reply pipe. Returns the
        supervisor's pid (wrap it in a WarmProcess); the fds given stay ours to close."""
        answer = self.request({"op": "spawn", "argv": [str(a) for a in argv], "env": env, "cwd": str(cwd),
                               "max_memory": int(max_memory), "max_file": int(max_file)},
                              fds=(stdin_r, out_w, reply_w))
        return int(answer["pid"])

    def close(self) -> None:
        """End the server (its supervisors, if any are left, kill their children) and wait for it."""
        with self.lock:
            sock, self.sock = self.sock, None
            if sock is not None:
                try:
                    socket.send_fds(sock, [b'{"op": "exit"}'], [])
                except OSError:
                    pass
                sock.close()
        proc = self.proc
        if proc is not None:
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=5)


class WarmStarts:
    """The warm start servers of a run, one per child interpreter: what `Child` forks from (its `warm`).

    `add(server, own)` keeps a WarmStart under its interpreter path (`server.python`); `own`: the run
    started it and closes it (`close`), else it is held by esverify.oracle.warm_kept.keep_warm and left
    running. `server_for(python)` is the server of that interpreter path (the string a child is launched
    with), or None. Iterating gives the servers; `drop(server)` forgets one (its start failed)."""

    def __init__(self):
        self._servers: dict = {}   # interpreter path -> (WarmStart, own)

    def add(self, server: WarmStart, own: bool) -> None:
        self._servers[str(server.python)] = (server, bool(own))

    def server_for(self, python) -> "WarmStart | None":
        entry = self._servers.get(str(python))
        return None if entry is None else entry[0]

    def own(self) -> list:
        """The servers the run started (launched, maybe not yet started)."""
        return [server for server, own in self._servers.values() if own]

    def drop(self, server: WarmStart) -> None:
        self._servers = {k: v for k, v in self._servers.items() if v[0] is not server}

    def __iter__(self):
        return iter([server for server, _ in self._servers.values()])

    def __len__(self) -> int:
        return len(self._servers)

    def close(self) -> None:
        """Close the servers the run started (keep_warm's stay running)."""
        for server in self.own():
            server.close()


def server_of(warm, python) -> "WarmStart | None":
    """The server a child of interpreter `python` forks from: `warm` is a WarmStarts (the run's), a WarmStart
    (a caller's own), or None."""
    if isinstance(warm, WarmStarts):
        return warm.server_for(python)
    return warm
