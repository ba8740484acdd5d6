"""The parent side of the oracle channel: one long-lived child per target.

The child is a driver script from `oracles/` run BY PATH under the chosen
interpreter (docs/references.md §3); this package never imports it. Commands go
as JSON lines on the child's stdin; replies come back as JSON lines on a
dedicated pipe (fd passed with `--reply-fd`), while the child's stdout and
stderr go to a log file, so reference chatter cannot corrupt the channel.
esverify's RNG is made importable in the child through PYTHONPATH: a
folder holding only a link to the `esverify` package (`package_root`), so
that the parent's other site-packages never leak into another interpreter.

Every wait has a deadline: on expiry the child is killed (its whole
process group) and `ChildTimeout` raised; a child that dies mid-command
raises `ChildDied` with its exit status and the tail of its log. The
runner restarts the child for the next case.
"""
from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import time
from pathlib import Path

from ..paths import PACKAGE_DIR


class ChildError(RuntimeError):
    """Base of the channel failures; `log_tail` holds the child's last output."""

    def __init__(self, message: str, log_tail: str = ""):
        super().__init__(message)
        self.log_tail = log_tail


class ChildTimeout(ChildError):
    pass


class ChildDied(ChildError):
    pass


def package_root(folder: Path) -> Path:
    """A folder under `folder` whose only entry links to this esverify package (for PYTHONPATH)."""
    root = Path(folder) / "pkgroot"
    root.mkdir(parents=True, exist_ok=True)
    link = root / "esverify"
    if not link.exists():
        try:
            link.symlink_to(PACKAGE_DIR, target_is_directory=True)
        except OSError:  # no symlinks here: fall back to the package's own parent folder
            return PACKAGE_DIR.parent
    return root


def _describe_exit(code) -> str:
    if code is None:
        return "still running"
    if code < 0:
        try:
            return f"killed by signal {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit status {code}"


class Child:
    """One driver process. `start()` returns its hello dict; `request()` one reply.

    python: interpreter path; driver: the driver script; clone: the clone
    root; log_path: where the child's stdout/stderr go (appended).
    """

    def __init__(self, python: str, driver: Path, clone: Path, log_path: Path, env: dict | None = None,
                 pythonpath: Path | None = None):
        self.python, self.driver, self.clone = str(python), Path(driver).resolve(), Path(clone).resolve()
        self.pythonpath = Path(pythonpath) if pythonpath else PACKAGE_DIR.parent
        self.log_path = Path(log_path)
        self.extra_env = dict(env or {})
        self.proc = None
        self.reply_fd = None
        self.buffer = b""
        self.hello = None
        self.starts = 0
        self._next_id = 0

    # -- lifecycle
    def start(self, timeout: float) -> dict:
        self.close()
        read_fd, write_fd = os.pipe()
        env = dict(os.environ)
        env.update(self.extra_env)
        # esverify.rng must be importable in the child, whatever interpreter it is.
        env["PYTHONPATH"] = os.pathsep.join([str(self.pythonpath)] + (
            [env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
        env["PYTHONUNBUFFERED"] = "1"
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log = open(self.log_path, "ab")
        try:
            self.proc = subprocess.Popen(
                [self.python, str(self.driver), "--clone", str(self.clone), "--reply-fd", str(write_fd)],
                stdin=subprocess.PIPE, stdout=log, stderr=subprocess.STDOUT, pass_fds=(write_fd,),
                cwd=str(self.log_path.parent), env=env, start_new_session=True)
        except OSError as exc:
            os.close(read_fd)
            raise ChildDied(f"cannot start the child interpreter {self.python!r}: {exc}") from None
        finally:
            os.close(write_fd)
            log.close()
        self.reply_fd, self.buffer = read_fd, b""
        self.starts += 1
        self.hello = self._read(timeout, "starting the child")
        return self.hello

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self):
        if self.proc is not None and self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait()

    def close(self):
        if self.proc is not None:
            if self.proc.poll() is None:
                try:
                    self.proc.stdin.write(b'{"op": "exit"}\n')
                    self.proc.stdin.flush()
                    self.proc.wait(timeout=5)
                except (OSError, subprocess.TimeoutExpired):
                    self.kill()
            try:
                self.proc.stdin.close()
            except OSError:
                pass
        if self.reply_fd is not None:
            os.close(self.reply_fd)
        self.proc, self.reply_fd = None, None

    # -- channel
    def request(self, command: dict, timeout: float) -> dict:
        """Send one command and wait for its reply; ChildTimeout / ChildDied on failure."""
        if not self.alive():
            raise ChildDied("the child is not running")
        self._next_id += 1
        command = dict(command, id=self._next_id)
        try:
            self.proc.stdin.write((json.dumps(command) + "\n").encode())
            self.proc.stdin.flush()
        except OSError:
            pass  # the read below reports the death with the exit status
        while True:
            reply = self._read(timeout, f"case {command.get('case_id', command.get('op'))}")
            if reply.get("id") == command["id"]:
                return reply

    def log_tail(self, chars: int = 1500) -> str:
        try:
            data = self.log_path.read_bytes()[-chars:]
        except OSError:
            return ""
        return data.decode("utf-8", "replace")

    def _read(self, timeout: float, what: str) -> dict:
        deadline = time.monotonic() + timeout
        while b"\n" not in self.buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                self.kill()
                raise ChildTimeout(f"timeout: no answer within {timeout:g} s while {what}; "
                                   "the child was killed", self.log_tail())
            ready, _, _ = select.select([self.reply_fd], [], [], min(left, 1.0))
            if not ready:
                continue
            chunk = os.read(self.reply_fd, 1 << 16)
            if not chunk:
                code = self.proc.wait()
                raise ChildDied(f"the child process died while {what} ({_describe_exit(code)})",
                                self.log_tail())
            self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\n", 1)
        return json.loads(line)
