"""The parent side of the oracle channel: one long-lived child per target.

The child is a reference's driver script (its child/driver.py) run BY PATH,
beside the shared runtime `oracles/`, under the chosen
interpreter (docs/references.md §3); this package never imports it. Commands go
as JSON lines on the child's stdin; replies come back as JSON lines on a
dedicated pipe (fd passed with `--reply-fd`), while the child's stdout and
stderr go through a pipe into a bounded log, so reference chatter can
neither corrupt the channel nor fill the disk or the parent's memory.

The trust boundary (docs/parity.md "Trust model"):

- the child runs under a supervisor (`supervise.py`): a child subreaper
  that kills every process the reference leaves behind, `setsid()`
  escapes included, and passes on the child's real exit status;
- it gets a fresh private folder per start (`root`) holding a copy of
  only the modules it needs (`child_files`: the runtime and the reference's child
  folder; `CHILD_MODULES`: `esverify.rng` and the few esverify modules they
  import), files made read-only, never a link to the installed
  package, an empty working folder (its cwd) and its own TMPDIR;
- a scrubbed environment (`child_environment`: only what Python, torch,
  numpy, numba and CUDA read);
- resource limits: RLIMIT_DATA = `max_memory`, RLIMIT_FSIZE = the larger
  of `max_output` and `MIN_FILE_LIMIT` (its results files must fit),
  no core files; its output is kept up to `max_output` bytes (the head
  and the tail, the cut marked).

Every wait has a deadline: on expiry the child's whole process group is
killed and `ChildTimeout` raised; a child that dies mid-command raises
`ChildDied` with its real exit status and the tail of its log; a child
that breaks the protocol (a line that is not JSON, a reply of the wrong
shape or id, a closed reply channel while it keeps running) is killed
and `ChildProtocolError` raised. The runner restarts the child for the
next case. `close()` always kills the group and removes the private
folder, is idempotent and may be called from a signal handler;
`close_all()` closes every child still open.
"""
from __future__ import annotations

import collections
import errno
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from pathlib import Path

from .. import jsonin
from ..paths import PACKAGE_DIR, oracles_dir

DEFAULT_MAX_OUTPUT = 20 * 1024 * 1024      #: bytes of child output kept per target (head + tail)
MIN_FILE_LIMIT = 256 * 1024 * 1024         #: RLIMIT_FSIZE floor: the results files of the 1M-element sets fit
MAX_REPLY_BYTES = 16 * 1024 * 1024         #: one reply line longer than this is a protocol violation
REPLY_MAX_DEPTH = 64                       #: bracket nesting of one reply line (replies need 6)
EXIT_GRACE = 2.0                           #: seconds a child gets to exit after "exit" or a closed channel
TEMP_PREFIX = "esverify-child-"
#: what the child imports from esverify, relative to the package's parent folder (the shared child scripts
#: and what these import in turn), besides each reference's own `child_modules` (esverify.record);
#: tests/test_structure.py checks both against the child scripts' imports: a module missing here fails
#: only where esverify is not installed for the child's Python, as with `parity --python`
CHILD_MODULES = ("esverify/__init__.py", "esverify/rng", "esverify/numerics_probe.py", "esverify/forksafe.py",
                 "esverify/exactsum.py", "esverify/jitcache.py", "esverify/record.py",
                 "esverify/references/__init__.py")
#: environment variables passed to the child: exact names, then prefixes (docs/parity.md "Trust model")
ENV_NAMES = ("PATH", "HOME", "USER", "LOGNAME", "LANG", "LANGUAGE", "TZ", "SYSTEMROOT", "LD_LIBRARY_PATH",
             "CONDA_PREFIX", "VIRTUAL_ENV")
ENV_PREFIXES = ("LC_", "CUDA_", "CUBLAS_", "CUDNN_", "NVIDIA_", "NCCL_", "TORCH_", "PYTORCH_", "NUMBA_", "OMP_",
                "KMP_", "MKL_", "OPENBLAS_", "GOMP_", "HIP_", "ROCR_", "ROCM_",
                "XLA_", "JAX_")   # a JAX child's flags: every hyperscale-es row records the XLA_FLAGS it ran under

_OPEN: "weakref.WeakSet[Child]" = weakref.WeakSet()


class ChildError(RuntimeError):
    """Base of the channel failures; `log_tail` holds the child's last output."""

    def __init__(self, message: str, log_tail: str = ""):
        super().__init__(message)
        self.log_tail = log_tail


class ChildTimeout(ChildError):
    pass


class ChildDied(ChildError):
    pass


class ChildProtocolError(ChildError):
    """The child broke the protocol (bad JSON, a reply of the wrong shape, a closed channel)."""


def default_max_memory() -> int:
    """Half the machine's physical memory (bytes), or 0 (no limit) where it cannot be read."""
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") // 2
    except (ValueError, OSError, AttributeError):
        return 0


def parse_size(text) -> int:
    """Bytes from '20M', '8G', '512k', '1024' or 0 (binary units); ValueError on anything else. The one
    size parser of every command (esverify.cliutil.parse_size)."""
    from ..cliutil import parse_size as _parse
    return _parse(text)


def package_root(folder: Path) -> Path:
    """Former API (a folder linking to the live package): now only `folder`; `Child` ignores it and
    gives the child a private copy instead."""
    return Path(folder)


def _describe_exit(code) -> str:
    if code is None:
        return "still running"
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            return f"killed by signal {-code}"
        why = {"SIGXFSZ": " (it wrote a file over its size limit, --max-output)",
               "SIGKILL": " (killed by the system or itself; the kernel's OOM killer also uses it)"}
        return f"killed by signal {name}{why.get(name, '')}"
    return f"exit status {code}"


def passed_environment() -> dict:
    """The entries of our environment a child gets (ENV_NAMES, ENV_PREFIXES), as they are now."""
    return {k: v for k, v in os.environ.items() if k in ENV_NAMES or k.startswith(ENV_PREFIXES)}


def child_environment(extra: dict | None, pythonpath: Path, tmp: Path) -> dict:
    """The child's environment: ENV_NAMES and ENV_PREFIXES from ours, then `extra` (given explicitly,
    e.g. by a test; a PYTHONPATH there comes after the private copy), then PYTHONPATH (the private
    copy first), TMPDIR and the Python settings. Nothing else of ours gets through."""
    env = passed_environment()
    env.update(extra or {})
    path = os.pathsep.join([str(pythonpath)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    env.update({"PYTHONPATH": path, "PYTHONUNBUFFERED": "1", "PYTHONDONTWRITEBYTECODE": "1",
                "TMPDIR": str(tmp), "TEMP": str(tmp), "TMP": str(tmp)})
    env.setdefault("PATH", os.defpath)
    return env


def _read_only(path: Path):
    for dirpath, dirnames, filenames in os.walk(path):
        for name in filenames:
            os.chmod(os.path.join(dirpath, name), 0o444)
        if os.path.basename(dirpath) != "__pycache__":   # numba's cache index is written there
            os.chmod(dirpath, 0o555)


def remove_tree(path) -> None:
    """rmtree that first makes read-only folders writable again; never raises for a missing path."""
    path = Path(path)
    if not path.exists() and not path.is_symlink():
        return

    def fix(func, name, exc):
        try:
            os.chmod(os.path.dirname(name), 0o755)
            if os.path.isdir(name) and not os.path.islink(name):
                os.chmod(name, 0o755)
            func(name)
        except OSError:
            pass
    for dirpath, dirnames, _ in os.walk(path):
        for d in dirnames:
            try:
                full = os.path.join(dirpath, d)
                if not os.path.islink(full):
                    os.chmod(full, 0o755)
            except OSError:
                pass
    try:
        os.chmod(path, 0o755)
    except OSError:
        pass
    shutil.rmtree(path, onerror=fix)


def _copy_file_and_numba_cache(src: Path, dest: Path) -> None:
    """Copy one module and numba's on-disk cache of its functions (__pycache__/<stem>.*.nbi/.nbc; the
    index checks the source's mtime, kept by copy2): without it, each child compiled the module's
    kernels again (about a second of CPU per child), as its copy is read-only and keeps no cache."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(src, dest)
    for cached in sorted((src.parent / "__pycache__").glob(f"{src.stem}.*.nb[ic]")):
        (dest.parent / "__pycache__").mkdir(exist_ok=True)
        shutil.copy2(cached, dest.parent / "__pycache__" / cached.name)


def reference_child_files() -> list[tuple[Path, str]]:
    """(source file, path relative to the child's package folder) of every module a reference declares
    for its child driver (Reference.child_modules), each with its packages' __init__.py; a plug-in
    package's modules come from wherever it is installed. ImportError for a declared module that
    cannot be found."""
    import importlib.util

    from .. import registry
    out = {}
    for name in registry.child_modules():
        parts = name.split(".")
        for k in range(1, len(parts) + 1):
            spec = importlib.util.find_spec(".".join(parts[:k]))
            if spec is None or not spec.origin:
                raise ImportError(f"the child module {name} of a reference cannot be found")
            origin = Path(spec.origin)
            rel = "/".join(parts[:k]) + ("/__init__.py" if origin.name == "__init__.py" else ".py")
            out[rel] = origin
    return [(src, rel) for rel, src in sorted(out.items())]


def child_files(shared: Path, driver: Path) -> list[Path]:
    """The files a child runs beside each other, flat in one folder: the shared runtime's modules (`shared`,
    the top-level `oracles/` package: child_server and others) and the reference's own child folder (its
    driver, the stand-in modules it imports and its interfaces.json, the manifest the loops compare a clone
    with). Only a driver in a folder named `child` brings its folder: a driver beside its package's other
    modules (a plug-in's adapter.py, a profile.py that would shadow the standard library's) comes alone.
    A reference's file of a shared module's name is an error: the child would import one of them."""
    def listed(folder: Path) -> dict:
        return {p.name: p for p in folder.iterdir() if p.is_file() and p.name != "__init__.py"
                and (p.suffix == ".py" or p.name == "interfaces.json")}
    own = listed(driver.parent) if driver.parent.name == "child" and driver.parent != shared else {}
    runtime = listed(shared)
    clash = sorted(set(own) & set(runtime))
    if clash:
        raise OSError(f"the child folder {driver.parent} has files named as the shared child runtime's ({clash})")
    return sorted({*runtime.values(), *own.values(), driver})


def prepare_root(root: Path, drivers: list) -> tuple[Path, dict]:
    """Fill the fresh folder `root`: pkg/ (a copy of CHILD_MODULES and of `drivers`, read-only),
    cwd/ (empty) and tmp/. Returns (pkg folder, {driver name: copied path})."""
    pkg = root / "pkg"
    for rel in CHILD_MODULES:
        src = PACKAGE_DIR.parent / rel
        if src.is_dir():
            # the sources, plus numba's on-disk cache (its index checks the source's mtime, kept by copy2)
            shutil.copytree(src, pkg / rel, ignore=lambda d, names: [
                n for n in names if (d.endswith("__pycache__") and not n.endswith((".nbi", ".nbc")))
                or n.endswith((".pyc", ".pyo"))])
        else:
            _copy_file_and_numba_cache(src, pkg / rel)
    for src, rel in reference_child_files():
        _copy_file_and_numba_cache(src, pkg / rel)
    drivers_dir = root / "drivers"
    drivers_dir.mkdir(parents=True)
    copied = {}
    for drv in drivers:
        copied[Path(drv).name] = Path(shutil.copy2(drv, drivers_dir / Path(drv).name))
    _read_only(pkg)
    _read_only(drivers_dir)
    for name in ("cwd", "tmp"):
        (root / name).mkdir()
    return pkg, copied


def warm_start_server(python: str, extra_env: dict | None, workdir: Path, log_path: Path, kept: bool = False,
                      mappings: tuple | None = None):
    """A warm start server (esverify.oracle.warm_start.WarmStart, not started yet) for the children of
    interpreter `python` with extra environment `extra_env`: in a fresh private folder under `workdir`
    prepared as a child's (prepare_root, no driver) and with the environment a child gets
    (child_environment); `kept`: it will fork many children (WarmStart.kept); `mappings`: the noise mappings
    its children draw (WarmStart.mappings; None: any). The caller starts it, hands it to each Child (`warm`)
    and closes it."""
    from .warm_start import WarmStart
    root = Path(tempfile.mkdtemp(prefix="esverify-warm-", dir=workdir))
    pkg, _ = prepare_root(root, [])
    return WarmStart(str(python), dict(extra_env or {}), child_environment(extra_env, pkg, root / "tmp"), root,
                     Path(log_path), passed_environment(), kept, mappings)


class BoundedLog:
    """The child's output, kept up to `limit` bytes: the first half written to `path` as it comes, the
    last half held in memory, and on `finish()` a line marking how much was cut, then that tail."""

    def __init__(self, path: Path, limit: int = DEFAULT_MAX_OUTPUT):
        self.path, self.limit = Path(path), int(limit)
        self.head_left = self.limit - self.limit // 2 if self.limit else None
        self.tail_cap = self.limit // 2 if self.limit else 0
        self.tail: collections.deque = collections.deque()
        self.tail_len = 0
        self.cut = 0
        self.lock = threading.RLock()   # re-entrant: close() may run in a signal handler
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.fh = open(self.path, "ab")

    def feed(self, data: bytes):
        with self.lock:
            if self.fh.closed:
                self.fh = open(self.path, "ab")
            if self.head_left is None:
                self.fh.write(data)
                return
            if self.head_left > 0:
                take = data[:self.head_left]
                self.fh.write(take)
                self.fh.flush()
                self.head_left -= len(take)
                data = data[len(take):]
            if not data:
                return
            self.tail.append(data)
            self.tail_len += len(data)
            while self.tail and self.tail_len - len(self.tail[0]) >= self.tail_cap:
                dropped = self.tail.popleft()
                self.tail_len -= len(dropped)
                self.cut += len(dropped)

    def _tail_bytes(self) -> bytes:
        data = b"".join(self.tail)
        extra = max(0, len(data) - self.tail_cap)
        return data[extra:], extra

    def finish(self):
        """Write the marked cut and the tail; the file then holds at most `limit` bytes plus the mark."""
        with self.lock:
            if self.fh.closed:
                self.fh = open(self.path, "ab")
            data, extra = self._tail_bytes()
            cut = self.cut + extra
            if cut:
                self.fh.write(f"\n[esverify: {cut} bytes of the child's output cut here; the first and last "
                              f"{self.limit // 2} bytes are kept (--max-output {self.limit})]\n".encode())
            self.fh.write(data)
            self.tail.clear()
            self.tail_len = self.cut = 0
            self.fh.close()

    def tail_text(self, chars: int = 1500) -> str:
        """The last `chars` characters of the output so far (read by seeking; the tail from memory)."""
        with self.lock:
            data = self._tail_bytes()[0][-chars:] if self.tail else b""
            if len(data) < chars:
                try:
                    self.fh.flush() if not self.fh.closed else None
                    with open(self.path, "rb") as fh:
                        fh.seek(0, os.SEEK_END)
                        size = fh.tell()
                        fh.seek(max(0, size - (chars - len(data))))
                        data = fh.read() + data
                except OSError:
                    pass
        return data.decode("utf-8", "replace")


def _drain(fd: int, log: BoundedLog, stop: threading.Event):
    """Copy the child's output pipe into the log until EOF (every writer gone) or `stop`."""
    try:
        while not stop.is_set():
            ready, _, _ = select.select([fd], [], [], 0.2)
            if not ready:
                continue
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                break
            log.feed(chunk)
    except OSError:
        pass
    finally:
        try:
            os.close(fd)
        except OSError:
            pass


def _hello_error(hello, target: str | None) -> str:
    if not isinstance(hello, dict):
        return f"the hello is a {type(hello).__name__}, not an object"
    if target is not None and hello.get("hello") != target:
        return f"the hello names {hello.get('hello')!r}, expected {target!r}"
    if not isinstance(hello.get("environment"), dict):
        return "the hello has no 'environment' object"
    modules = hello.get("modules", {})
    if not isinstance(modules, dict) or not all(
            v is None or (isinstance(v, dict) and isinstance(v.get("message"), str)) for v in modules.values()):
        return "the hello's 'modules' is not {name: null or {'message': text}}"
    return ""


def _reply_error(reply, command: dict) -> str:
    """'' when `reply` has the shape of an answer to `command`, else what is wrong with it."""
    if not isinstance(reply, dict):
        return f"the reply is a {type(reply).__name__}, not an object"
    if reply.get("id") != command["id"]:
        return f"the reply's id is {reply.get('id')!r}, expected {command['id']}"
    status = reply.get("status")
    if status == "error":
        err = reply.get("error")
        if not isinstance(err, dict) or not isinstance(err.get("message"), str):
            return "an error reply without an 'error' object holding a 'message' text"
        return ""
    if status != "ok":
        return f"the reply's status is {status!r}, not 'ok' or 'error'"
    flush = reply.get("flush_to_zero", [])
    if not isinstance(flush, list) or not all(isinstance(x, str) for x in flush):
        return "the reply's 'flush_to_zero' is not a list of texts"
    if command.get("out") is not None:
        results = reply.get("results")
        if not isinstance(results, str):
            return "an ok reply without a 'results' path"
        out = Path(command["out"]).resolve()
        try:
            path = Path(results).resolve()
        except (OSError, RuntimeError, ValueError) as exc:
            return f"the results path {results!r} cannot be resolved: {exc}"
        if out not in path.parents:
            return f"the results path {results!r} is outside the case folder {str(out)!r}"
        if not path.is_file():
            return f"the results path {results!r} is not a file"
    attribution = reply.get("attribution", {"ok": True})
    if not isinstance(attribution, dict) or not isinstance(attribution.get("ok", True), bool) \
            or not isinstance(attribution.get("detail", ""), str):
        return "the reply's 'attribution' is not {'ok': bool, 'detail': text}"
    if command.get("op") == "loop" and "rewards" not in reply:
        return "a loop reply without 'rewards'"
    rewards = reply.get("rewards", [])
    if not isinstance(rewards, list) or not all(
            isinstance(r, list) and all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in r)
            for r in rewards):
        return "the reply's 'rewards' is not a list of lists of numbers"
    return ""


class Child:
    """One driver process under its supervisor. `start()` returns the hello dict; `request()` one reply.

    python: the child's interpreter; driver: the driver script (copied before each start, with every
    .py file of `shared`, the shared child runtime, default oracles/, and of the driver's own folder); clone: the clone root; log_path: where its output is kept (appended,
    bounded by `max_output` bytes, 0 = unbounded); env: extra environment entries; workdir: where the
    private folder is made (default the system temp folder); max_memory: RLIMIT_DATA in bytes
    (None: `default_max_memory()`, 0: none); target: the name the hello must carry (None: any).
    Start it from a thread that outlives it (the main thread, say): the supervisor asks for SIGTERM
    when the thread that started it ends (PR_SET_PDEATHSIG), which stops the child.
    """

    def __init__(self, python: str, driver: Path, clone: Path, log_path: Path, env: dict | None = None,
                 workdir: Path | None = None, max_memory: int | None = None,
                 max_output: int = DEFAULT_MAX_OUTPUT, target: str | None = None, pythonpath=None,
                 shared: Path | None = None, warm=None, driver_args=()):
        # pythonpath: accepted and ignored (callers of the former API): the child gets a private copy
        self.python, self.driver, self.clone = str(python), Path(driver).resolve(), Path(clone).resolve()
        #: the folder of the shared child code (child_server and others) copied beside the driver
        self.shared = Path(shared).resolve() if shared else oracles_dir()
        self.log_path = Path(log_path)
        self.extra_env = dict(env or {})
        self.workdir = Path(workdir) if workdir else None
        self.max_memory = default_max_memory() if max_memory is None else int(max_memory)
        self.max_output = int(max_output)
        self.file_limit = max(self.max_output, MIN_FILE_LIMIT) if self.max_output else 0   #: RLIMIT_FSIZE
        self.target = target
        #: a started esverify.oracle.warm_start.WarmStart to fork from, a run's WarmStarts (the server of this
        #: child's interpreter), or None
        self.warm = warm
        self.driver_args = [str(a) for a in driver_args]   #: after --clone PATH (e.g. --line-coverage)
        self.log: BoundedLog | None = None
        self.proc = None
        self.root = None
        self.reply_fd = None
        self.drainer = None
        self.stop_drain = None
        self.buffer = b""
        self.hello = None
        self.starts = 0
        self.last_exit = None      #: the supervisor's return code after the last stop (the child's status)
        self.last_start = None     #: how the last start went: "warm" (forked, esverify.oracle.warm_start) or "fresh"
        self._next_id = 0
        #: the folder of noise ranges the parent serves (esverify.oracle.noise_memo.served_folder), named
        #: in each command; None: the child draws all its noise
        self.served: str | None = None
        self.last_flush: list = []   #: what the child's float-environment probe reported after the last request

    # -- lifecycle
    def start(self, timeout: float) -> dict:
        """(Re)start the child and wait up to `timeout` s for its hello; ChildError on failure."""
        self._stop()
        if self.log is None:
            self.log = BoundedLog(self.log_path, self.max_output)
        self.root = Path(tempfile.mkdtemp(prefix=TEMP_PREFIX, dir=self.workdir))
        _OPEN.add(self)
        try:
            pkg, copied = prepare_root(self.root, child_files(self.shared, self.driver))
        except (OSError, ImportError) as exc:   # ImportError: a reference's declared child module is not found
            raise ChildDied(f"cannot prepare the child's private folder: {exc}") from None
        read_fd, write_fd = os.pipe()
        out_r, out_w = os.pipe()
        env = child_environment(self.extra_env, pkg, self.root / "tmp")
        try:
            self.proc = self._fork_warm(copied[self.driver.name], env, out_w, write_fd) or \
                self._start_fresh(copied[self.driver.name], env, out_w, write_fd)
        except BaseException as exc:
            os.close(read_fd)
            os.close(out_r)
            if isinstance(exc, OSError):
                raise ChildDied(f"cannot start the child interpreter {self.python!r}: {exc}") from None
            raise
        finally:
            os.close(write_fd)
            os.close(out_w)
        self.last_start = "fresh" if isinstance(self.proc, subprocess.Popen) else "warm"
        os.set_blocking(self.proc.stdin.fileno(), False)
        self.stop_drain = threading.Event()
        self.drainer = threading.Thread(target=_drain, args=(out_r, self.log, self.stop_drain),
                                        name="esverify-child-log", daemon=True)
        self.drainer.start()
        self.reply_fd, self.buffer = read_fd, b""
        self.starts += 1
        hello = self._read(time.monotonic() + timeout, "starting the child")
        problem = _hello_error(hello, self.target)
        if problem:
            self._violation(f"{problem} (starting the child)")
        self.hello = hello
        return hello

    def _start_fresh(self, driver: Path, env: dict, out_w: int, write_fd: int):
        """A new interpreter under a new supervisor (supervise.py): the Popen of the supervisor."""
        supervisor = [sys.executable, "-I", str(Path(__file__).with_name("supervise.py")),
                      f"--parent={os.getpid()}", f"--max-memory={self.max_memory or -1}",
                      f"--max-file={self.file_limit or -1}", "--"]
        python = os.path.abspath(shutil.which(self.python) or self.python)
        return subprocess.Popen(
            supervisor + [python, str(driver), "--clone", str(self.clone), *self.driver_args,
                          "--reply-fd", str(write_fd)],
            stdin=subprocess.PIPE, stdout=out_w, stderr=out_w, pass_fds=(write_fd,),
            cwd=str(self.root / "cwd"), env=env, start_new_session=True)

    def _fork_warm(self, driver: Path, env: dict, out_w: int, write_fd: int):
        """The supervisor and child forked by the warm start server (esverify.oracle.warm_start), as a
        WarmProcess; None when there is no usable server (then the child starts fresh, and its log says
        why when a server was meant to fork it)."""
        from .warm_start import WarmProcess, WarmStartError, server_of
        warm = server_of(self.warm, self.python)   # the run's server of this child's interpreter
        if warm is None or not warm.usable(self.python, self.extra_env, passed_environment()):
            why = warm.why_not() if warm is not None else ""
            if why:
                self.log.feed(f"esverify: {why}; starting a fresh interpreter instead\n".encode())
            return None
        stdin_r, stdin_w = os.pipe()
        try:
            pid = warm.spawn([driver, "--clone", self.clone, *self.driver_args], env, self.root / "cwd",
                                  self.max_memory or -1, self.file_limit or -1, stdin_r, out_w, write_fd)
        except BaseException as exc:
            os.close(stdin_w)
            if not isinstance(exc, WarmStartError):
                raise
            self.log.feed(f"esverify: {exc}; starting a fresh interpreter instead\n".encode())
            return None
        finally:
            os.close(stdin_r)
        return WarmProcess(warm, pid, stdin_w, self.log)

    def alive(self) -> bool:
        return self.proc is not None and self._exit_code() is None

    def _exit_code(self):
        """The supervisor's return code, or None while it runs; never reaps it (its pid stays a zombie,
        so its process group id cannot be reused before `_stop` kills the group)."""
        if self.proc is None:
            return None
        if self.proc.returncode is not None:
            return self.proc.returncode
        if not isinstance(self.proc, subprocess.Popen):   # a WarmProcess is the server's child, not ours
            return self.proc.poll()
        try:
            info = os.waitid(os.P_PID, self.proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:
            return self.proc.poll()
        except (AttributeError, OSError):
            return self.proc.poll()
        if info is None:
            return None
        return -info.si_status if info.si_code in (os.CLD_KILLED, os.CLD_DUMPED) else info.si_status

    def kill(self):
        """Kill the child's whole tree now (the supervisor kills re-parented processes too)."""
        proc = self.proc
        if proc is None:
            return
        if self._exit_code() is None:
            try:
                os.kill(proc.pid, signal.SIGTERM)   # the supervisor: kills the group and every orphan, exits
            except OSError:
                pass
            deadline = time.monotonic() + 5.0
            while self._exit_code() is None and time.monotonic() < deadline:
                time.sleep(0.02)
        self._killpg(proc)

    @staticmethod
    def _killpg(proc):
        try:
            os.killpg(proc.pid, signal.SIGKILL)    # whatever is left in the group (the supervisor is a zombie
        except OSError:                            # or alive here: its pid still names this group)
            pass
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass

    def _stop(self, polite: bool = True):
        proc = self.proc
        if proc is not None:
            if polite and self._exit_code() is None:
                try:
                    self._send(b'{"op": "exit"}\n', time.monotonic() + EXIT_GRACE)
                except (OSError, ChildError):
                    pass
                deadline = time.monotonic() + EXIT_GRACE
                while self._exit_code() is None and time.monotonic() < deadline:
                    time.sleep(0.02)
            self.kill()
            self.last_exit = proc.returncode
            try:
                proc.stdin.close()
            except OSError:
                pass
        if self.reply_fd is not None:
            try:
                os.close(self.reply_fd)
            except OSError:
                pass
        if self.drainer is not None:
            self.drainer.join(timeout=2.0)
            if self.drainer.is_alive():
                self.stop_drain.set()
                self.drainer.join(timeout=1.0)
        if self.root is not None:
            remove_tree(self.root)
        self.proc, self.reply_fd, self.drainer, self.root = None, None, None, None

    def close(self, polite: bool = True):
        """Stop the child (ask it to exit when `polite`, then kill its whole tree), remove its private
        folder and write the kept log. Idempotent; safe from a signal handler (it only kills, waits
        with deadlines and removes files); a handler passes polite=False to skip the 2 s grace."""
        try:
            self._stop(polite)
        finally:
            if self.log is not None:
                self.log.finish()
            _OPEN.discard(self)

    # -- channel
    def request(self, command: dict, timeout: float) -> dict:
        """Send one command and wait for its reply; ChildTimeout / ChildDied / ChildProtocolError."""
        if not self.alive():
            raise ChildDied("the child is not running")
        deadline = time.monotonic() + timeout
        self._next_id += 1
        command = dict(command, id=self._next_id)
        if self.served:   # the parent's drawn noise (esverify.oracle.noise_memo): the child reads it, not draws it
            command.setdefault("served", self.served)
        what = f"case {command.get('case_id', command.get('op'))}"
        try:
            self._send((json.dumps(command) + "\n").encode(), deadline, what)
        except OSError:
            pass  # the read below reports the death with the exit status
        self.last_flush = []
        reply = self._read(deadline, what)
        problem = _reply_error(reply, command)
        if problem:
            self._violation(f"{problem} ({what})")
        # what the child's float-environment probe found after this command (oracles/child_server.py)
        self.last_flush = list(reply.get("flush_to_zero", [])) if reply.get("status") == "ok" else []
        return reply

    def log_tail(self, chars: int = 1500) -> str:
        return self.log.tail_text(chars) if self.log is not None else ""

    def _violation(self, problem: str):
        self.kill()
        raise ChildProtocolError(f"protocol violation by the child: {problem}; the child was killed",
                                 self._settled_tail())

    def _settled_tail(self) -> str:
        if self.drainer is not None:
            self.drainer.join(timeout=1.0)   # EOF once every writer is gone: the tail is then complete
        return self.log_tail()

    def _send(self, data: bytes, deadline: float, what: str = "sending a command"):
        fd = self.proc.stdin.fileno()
        while data:
            left = deadline - time.monotonic()
            if left <= 0:
                self.kill()
                raise ChildTimeout(f"timeout: the child did not read its command while {what}; the child "
                                   "was killed", self._settled_tail())
            _, ready, _ = select.select([], [fd], [], min(left, 0.2))
            if ready:
                try:
                    data = data[os.write(fd, data):]
                except BlockingIOError:
                    continue
            elif self._exit_code() is not None:
                raise OSError(errno.EPIPE, "the child exited")

    def _died(self, what: str):
        self.kill()
        code = self.proc.returncode
        raise ChildDied(f"the child process died while {what} ({_describe_exit(code)})", self._settled_tail())

    def _read(self, deadline: float, what: str) -> dict:
        closed = False
        while b"\n" not in self.buffer:
            if len(self.buffer) > MAX_REPLY_BYTES:
                self._violation(f"a reply line longer than {MAX_REPLY_BYTES} bytes while {what}")
            left = deadline - time.monotonic()
            if left <= 0:
                self.kill()
                raise ChildTimeout(f"timeout: no answer within the deadline while {what}; the child's "
                                   "process group was killed", self._settled_tail())
            if closed:
                # the reply channel is closed: wait (briefly, within the deadline) for the exit status
                if self._exit_code() is not None:
                    self._died(what)
                if time.monotonic() >= closed_at + EXIT_GRACE:
                    self.kill()
                    raise ChildProtocolError(
                        f"the child closed its reply channel while {what} and kept running; its process "
                        "group was killed", self._settled_tail())
                time.sleep(min(left, 0.05))
                continue
            ready, _, _ = select.select([self.reply_fd], [], [], min(left, 0.2))
            if not ready:
                if self._exit_code() is not None:   # died while a descendant holds the channel open
                    self._died(what)
                continue
            chunk = os.read(self.reply_fd, 1 << 16)
            if not chunk:
                closed, closed_at = True, time.monotonic()
                continue
            self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\n", 1)
        try:   # bounded (esverify.jsonin): the child runs reference code we did not write
            return jsonin.loads(line, "reply line", max_bytes=len(line), max_depth=REPLY_MAX_DEPTH,
                                nonfinite=True)   # our child server's json.dumps spells a NaN reward NaN
        except ValueError as exc:
            shown = line[:120].decode("utf-8", "replace")
            self._violation(f"a reply line that is not JSON while {what} ({type(exc).__name__}: {exc}; "
                            f"the line begins {shown!r})")


def close_all(polite: bool = False):
    """Close every child still open: kill its tree, remove its private folder (for signal handlers
    and teardown; not polite by default: no grace period)."""
    for child in list(_OPEN):
        try:
            child.close(polite)
        except Exception:  # noqa: BLE001 - one child failing to close must not keep the others running
            pass
