"""The parent side of the module-wrapper protocol: one wrapper process, requests under deadlines.

`ImplProcess(command)` starts the implementation under test (a shell-like
command line, split with shlex, never run through a shell) in its own
process group, with stdin/stdout as the frame channel and stderr appended
to a log file. `start()` sends `capabilities` and validates the reply
(docs/PROTOCOL.md §3). `call(op, args)` sends one request and returns the
reply's `result`, or raises:

- `WrapperError`: the wrapper answered ``ok: false`` with a message (the
  process keeps running: a refused case is not a broken wrapper);
- `ImplFailure` (kind ``timeout``, ``crashed``, ``protocol``): no valid reply
  before the deadline, the process died, or it wrote bytes that are not a
  frame. The process group is killed; the next call restarts the wrapper
  and repeats the handshake. Restarts and giving up are counted **per
  operation**: after `max_consecutive` failures of one op in a
  row (no valid reply to it in between) or `max_restarts` restarts caused
  by it, every later call *of that op* fails at once with kind
  ``gave-up``, so a broken op cannot make a run last deadline x cases,
  while the other ops (other vector kinds, other areas) are still checked.
  `restarts` counts the restarts of all ops together.

I/O is non-blocking (selectors) in both directions at once, so neither a
silent wrapper nor one that writes while we still write can hang the
parent. `close()` always kills the whole process group: no orphans.
"""
from __future__ import annotations

import json
import os
import selectors
import shlex
import signal
import subprocess
import tempfile
import time
from importlib import resources
from pathlib import Path

from .. import procstat
from . import wire

DEFAULT_DEADLINE_S = 60.0      #: per request, unless the call gives its own
FIRST_READ_BYTES = 64 << 20    #: a reply buffer starts at most this large and doubles as bytes arrive
PIPE_BYTES = 1 << 20           #: requested pipe buffer size (Linux F_SETPIPE_SZ; capped by fs.pipe-max-size)
START_DEADLINE_S = 60.0        #: process start + capabilities reply (importing torch takes seconds)
GROUP_GONE_SECONDS = 5.0       #: after SIGKILL, how long `kill` waits for the group's last process to die


#: the status of a row whose case or vector the wrapper did not claim
UNSUPPORTED = "unsupported"


class Unsupported(Exception):
    """A golden vector or parity case needs something the implementation did not claim in its capabilities
    (status `unsupported`, never a pass): raised by esverify.goldens.impl_target and esverify.oracle.impl_side."""
    status = UNSUPPORTED

    def __init__(self, reason: str):
        super().__init__(reason)
        self.detail = f"unsupported: {reason}"


class ImplFailure(RuntimeError):
    """No valid reply: `kind` is timeout, crashed, protocol, start or gave-up; the message says why."""

    def __init__(self, kind: str, message: str):
        super().__init__(message)
        self.kind = kind


class WrapperError(RuntimeError):
    """The wrapper replied ok=false: the message is the wrapper's own."""


def schema() -> dict:
    """The protocol's JSON Schema (esverify/impl/protocol.schema.json; Draft 2020-12)."""
    return json.loads(resources.files("esverify.impl").joinpath("protocol.schema.json").read_text("utf-8"))


def validate_capabilities(result) -> None:
    """ImplFailure('protocol') naming the first schema violation of a capabilities result."""
    import jsonschema
    doc = schema()
    sub = {"$schema": doc["$schema"], "$defs": doc["$defs"], "$ref": "#/$defs/capabilities"}
    errors = sorted(jsonschema.Draft202012Validator(sub).iter_errors(result), key=lambda e: list(e.path))
    if errors:
        e = errors[0]
        where = "/".join(str(p) for p in e.path) or "(top)"
        raise ImplFailure("protocol", f"capabilities reply fails the protocol schema at {where}: {e.message}")


def group_members(pgid: int) -> list[int]:
    """The pids of the processes of group `pgid` that have not exited yet (zombies excluded: they run
    nothing and hold no memory; their reaping is their new parent's business). Linux reads /proc; where
    there is none, `os.killpg(pgid, 0)` answers whether the group has any process at all, zombies
    included, and the answer is ``[pgid]`` or ``[]``."""
    if not os.path.isdir("/proc/self"):
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return []
        except PermissionError:
            pass
        return [pgid]
    found = []
    for name in filter(str.isdigit, os.listdir("/proc")):
        try:
            if os.getpgid(int(name)) == pgid and procstat.running(int(name), zombie_threads=True):
                found.append(int(name))
        except OSError:          # exited meanwhile
            continue
    return found


def wait_group_gone(pgid: int, seconds: float) -> list[int]:
    """Wait until group `pgid` has no running process (`group_members`), at most `seconds`; returns the
    pids still running then (empty when the group is gone)."""
    deadline = time.monotonic() + seconds
    while True:
        left = group_members(pgid)
        if not left or time.monotonic() >= deadline:
            return left
        time.sleep(0.005)


def _widen_pipe(fd: int) -> None:
    """Ask Linux for a 1 MiB pipe buffer (default 64 KiB): a 4 MiB tensor then crosses in a few
    wake-ups instead of 64, which dominated a 1M-element gaussian. Best effort elsewhere."""
    import fcntl
    setsize = getattr(fcntl, "F_SETPIPE_SZ", None)
    if setsize is None:
        return
    try:
        fcntl.fcntl(fd, setsize, PIPE_BYTES)
    except OSError:
        pass


class ImplProcess:
    """One implementation-under-test process (see the module docstring).

    command: the wrapper's command line (str, split with shlex, or a list).
    log_path: file that receives the wrapper's stderr (appended; default a
    temporary file, see `.log_path`, removed by close() when it stayed
    empty). deadline_s: per-request deadline in
    seconds. Attributes after start(): capabilities (dict), restarts (int).
    max_consecutive: failures of one op in a row before giving up that op; max_restarts: restarts
    one op may cause before it is given up.
    """

    def __init__(self, command, log_path: Path | None = None, deadline_s: float = DEFAULT_DEADLINE_S,
                 start_deadline_s: float = START_DEADLINE_S, max_restarts: int = 50, max_consecutive: int = 3,
                 env: dict | None = None):
        self.argv = shlex.split(command) if isinstance(command, str) else list(command)
        if not self.argv:
            raise ValueError("--impl: empty command")
        # a log of our own making is removed at close() when the wrapper wrote nothing to it (a kept one
        # holds what the wrapper said, which the failure messages point to)
        self._own_log = log_path is None
        if log_path is None:
            fd, name = tempfile.mkstemp(prefix="esverify-impl-", suffix=".log")
            os.close(fd)
            log_path = Path(name)
        self.log_path = Path(log_path)
        self.deadline_s = deadline_s
        self.start_deadline_s = start_deadline_s
        self.max_restarts = max_restarts
        self.max_consecutive = max_consecutive
        self._failures_in_a_row: dict[str, int] = {}   #: per op
        self._restarts_by: dict[str, int] = {}         #: restarts each op caused
        self._broken_by: str | None = None              #: the op whose failure killed the running process
        self.env = env
        self.capabilities: dict | None = None
        self.restarts = 0
        self._proc: subprocess.Popen | None = None
        self._next_id = 1
        self._gave_up: dict[str, str] = {}              #: op -> why it was given up

    # -- lifecycle -----------------------------------------------------------
    def start(self) -> dict:
        """Start the wrapper and do the capabilities handshake; returns the capabilities.

        Raises ImplFailure (kind start/timeout/crashed/protocol) with a one-line reason.
        """
        try:
            log = open(self.log_path, "ab")
        except OSError as exc:
            raise ImplFailure("start", f"cannot open the wrapper log {self.log_path}: {exc}") from None
        try:
            self._proc = subprocess.Popen(self.argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log,
                                          start_new_session=True, env=self.env, bufsize=0)
        except OSError as exc:
            raise ImplFailure("start", f"cannot start {shlex.join(self.argv)!r}: {exc}") from None
        finally:
            log.close()
        for f in (self._proc.stdin, self._proc.stdout):
            os.set_blocking(f.fileno(), False)
            _widen_pipe(f.fileno())
        try:
            caps = self._exchange("capabilities", {}, self.start_deadline_s, extra={"protocol": wire.PROTOCOL_VERSION})
        except WrapperError as exc:
            self.kill()
            raise ImplFailure("protocol", f"the wrapper refused the capabilities request: {exc}") from None
        try:
            validate_capabilities(caps)
        except ImplFailure:
            self.kill()
            raise
        if caps["protocol"] != wire.PROTOCOL_VERSION:
            self.kill()
            raise ImplFailure("protocol", f"the wrapper speaks protocol {caps['protocol']}, esverify speaks "
                                          f"{wire.PROTOCOL_VERSION}")
        if self.capabilities is not None and caps != self.capabilities:
            self.kill()
            raise ImplFailure("protocol", "the restarted wrapper announced different capabilities")
        self.capabilities = caps
        return caps

    def kill(self) -> None:
        """Kill the wrapper's whole process group (no orphans), reap the wrapper, and wait (at most
        `GROUP_GONE_SECONDS`) until no process of the group still runs: SIGKILL is delivered when the
        target is next scheduled, so a grandchild the wrapper started can outlive the wrapper's reaping."""
        proc, self._proc = self._proc, None
        if proc is None:
            return
        for f in (proc.stdin, proc.stdout):
            try:
                f.close()
            except OSError:
                pass
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:  # pragma: no cover - SIGKILL is not ignorable
            pass
        wait_group_gone(proc.pid, GROUP_GONE_SECONDS)

    def close(self) -> None:
        """Ask the wrapper to end (stdin closed, 2 s), then kill its process group in any case; remove
        the temporary log made for it when the wrapper wrote nothing there."""
        proc = self._proc
        if proc is not None:
            try:
                proc.stdin.close()
                proc.wait(timeout=2)
            except (OSError, subprocess.TimeoutExpired):
                pass
        self.kill()
        if self._own_log:
            try:
                if self.log_path.stat().st_size == 0:
                    self.log_path.unlink()
            except OSError:
                pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    @property
    def pid(self) -> int | None:
        return None if self._proc is None else self._proc.pid

    # -- requests ------------------------------------------------------------
    def call(self, op: str, args: dict, deadline_s: float | None = None) -> dict:
        """Send request `op` with `args` and return the reply's result (see the module docstring)."""
        if op in self._gave_up:
            raise ImplFailure("gave-up", self._gave_up[op])
        in_a_row = self._failures_in_a_row.get(op, 0)
        caused = self._restarts_by.get(op, 0)
        if in_a_row >= self.max_consecutive or caused >= self.max_restarts:
            why = f"{in_a_row} failures in a row" if in_a_row >= self.max_consecutive else f"{caused} restarts"
            self._gave_up[op] = (f"{op} was given up after {why}; not sent again (the other operations still "
                                 f"are; log: {self.log_path})")
            raise ImplFailure("gave-up", self._gave_up[op])
        if self._proc is None:
            self.restarts += 1
            culprit = self._broken_by or op   # the restart is charged to the op that broke the process
            self._restarts_by[culprit] = self._restarts_by.get(culprit, 0) + 1
            try:
                self.start()
            except ImplFailure:
                self._failures_in_a_row[op] = in_a_row + 1
                raise
            self._broken_by = None
        try:
            result = self._exchange(op, args, self.deadline_s if deadline_s is None else deadline_s)
        except ImplFailure:
            self._failures_in_a_row[op] = in_a_row + 1
            self._broken_by = op
            raise
        except WrapperError:   # a refusal is a valid reply: the wrapper works
            self._failures_in_a_row[op] = 0
            raise
        self._failures_in_a_row[op] = 0
        return result

    def _exchange(self, op: str, args: dict, deadline_s: float, extra: dict | None = None) -> dict:
        rid = self._next_id
        self._next_id += 1
        header = {"id": rid, "op": op, "deadline_ms": int(deadline_s * 1000), "args": args, **(extra or {})}
        try:
            parts = wire.encode_parts(header)
        except (TypeError, ValueError) as exc:   # our own bug: not the wrapper's failure
            raise ValueError(f"cannot encode request {op}: {exc}") from None
        try:
            reply = self._roundtrip(parts, time.monotonic() + deadline_s, op, deadline_s)
        except ImplFailure:
            self.kill()
            raise
        if reply.get("id") != rid:
            self.kill()
            raise ImplFailure("protocol", f"reply to {op} carries id {reply.get('id')!r}, expected {rid}")
        ok = reply.get("ok")
        if ok is True and isinstance(reply.get("result"), dict):
            return reply["result"]
        if ok is False and isinstance(reply.get("error"), str):
            raise WrapperError(reply["error"])
        self.kill()
        raise ImplFailure("protocol", f"reply to {op} is neither {{ok: true, result: {{...}}}} nor "
                                      f"{{ok: false, error: '...'}}: {str(reply)[:200]}")

    def _roundtrip(self, parts: list, deadline: float, op: str, deadline_s: float) -> dict:
        """Write the request's parts and read one reply frame, both non-blocking, under `deadline`.

        The reply is read straight into one buffer of its announced size (no
        concatenation) and decoded from views of it (tensors are not copied).
        """
        proc = self._proc
        out_fd, in_fd = proc.stdout.fileno(), proc.stdin.fileno()
        pending = [memoryview(p) for p in parts if len(p)]
        prefix = bytearray(wire.PREFIX.size)
        buf, got, h, total = prefix, 0, None, wire.PREFIX.size
        with selectors.DefaultSelector() as sel:
            sel.register(out_fd, selectors.EVENT_READ)
            sel.register(in_fd, selectors.EVENT_WRITE)
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    received = got + (wire.PREFIX.size if h is not None else 0)
                    raise ImplFailure("timeout", f"no complete reply to {op} within the {deadline_s:g} s deadline "
                                                 f"({received} bytes received)")
                for key, _ in sel.select(timeout=left):
                    if key.fd == in_fd:
                        try:
                            n = os.write(in_fd, pending[0][:PIPE_BYTES])
                        except BlockingIOError:
                            continue
                        except (BrokenPipeError, ConnectionResetError):
                            raise ImplFailure("crashed", self._died(f"while receiving {op}")) from None
                        pending[0] = pending[0][n:]
                        if not len(pending[0]):
                            pending.pop(0)
                        if not pending:
                            sel.unregister(in_fd)
                        continue
                    try:
                        n = proc.stdout.readinto(memoryview(buf)[got:])
                    except BlockingIOError:
                        continue
                    if n is None:
                        continue
                    if n == 0:
                        received = got + (wire.PREFIX.size if h is not None else 0)
                        raise ImplFailure("crashed", self._died(f"before answering {op}", received))
                    got += n
                    if got < len(buf):
                        continue
                    if got < total:   # grow with the data actually received, never to a merely announced size
                        try:
                            buf += bytearray(min(total - got, len(buf)))
                        except MemoryError:
                            raise ImplFailure("protocol", f"reply to {op} announces {total} bytes: more than "
                                                          f"this machine can hold") from None
                        continue
                    if h is None:   # the prefix is complete: size the frame's buffer
                        try:
                            h, b = wire.parse_prefix(bytes(prefix))
                        except wire.FrameError as exc:
                            raise ImplFailure("protocol", f"reply to {op}: {exc} (stdout is reserved for "
                                                          f"frames; log to stderr)") from None
                        total = h + b
                        buf, got = bytearray(min(total, FIRST_READ_BYTES)), 0
                        if total:
                            continue
                    if pending:
                        raise ImplFailure("protocol", f"the wrapper replied to {op} before reading the whole "
                                                      f"request")
                    stray = self._stray_bytes()
                    if stray:
                        raise ImplFailure("protocol", f"the wrapper wrote byte(s) {stray!r} after its reply to "
                                                      f"{op} (stdout is reserved for frames)")
                    view = memoryview(buf)
                    try:
                        return wire.decode(view[:h], view[h:])
                    except wire.FrameError as exc:
                        raise ImplFailure("protocol", f"reply to {op}: {exc}") from None

    def _stray_bytes(self) -> bytes:
        """Bytes already waiting on stdout after a complete reply (nothing may follow a reply)."""
        try:
            return os.read(self._proc.stdout.fileno(), 64) or b""
        except BlockingIOError:
            return b""

    def _died(self, when: str, received: int = 0) -> str:
        proc = self._proc
        try:
            code = proc.wait(timeout=1)
        except subprocess.TimeoutExpired:
            code = None
        how = "closed its stdout" if code is None else f"exited with status {code}"
        return (f"the wrapper {how} {when}" + (f" after {received} byte(s) of a reply" if received else "")
                + f" (log: {self.log_path})")


def missing_claims(caps: dict | None, ops=(), **features) -> list[str]:
    """What a case needs that the wrapper's `capabilities` reply does not claim, in words ([] when
    nothing). ops: operation names; features: capability key -> values needed (`profiles`,
    `mappings`, `schemes`, `dtypes`, `shapings`, `decays`, `restores`, ...), or `antithetic=True`."""
    caps = caps or {}
    missing = [f"operation {op!r}" for op in ops if op not in caps.get("operations", [])]
    for key, value in features.items():
        if key == "antithetic":
            if value and not caps.get("antithetic"):
                missing.append("antithetic pairs")
            continue
        claimed = caps.get(key, {} if key == "profiles" else [])
        missing += [f"{key[:-1]} {v!r}" for v in value if v not in claimed]
    return missing
