"""Shared test settings.

Hypothesis runs without deadlines (this 2-core machine is noisy and timing
is never asserted) and with a bounded number of examples per property;
HYPOTHESIS_PROFILE=thorough raises it for a long local run. Tests marked
`cuda` skip cleanly on a machine without a CUDA device (CI has none). The
heaviest test files are collected first (tests/durations.py).
"""
import os

import pytest
from hypothesis import HealthCheck, settings

try:
    from durations import file_seconds
except ImportError:   # this file copied alone into a scratch project (tests/test_hostile_leakcheck.py): no order
    def file_seconds() -> dict:
        return {}

#: the stand-ins are clones of the references, not esverify's tests: a clone's own test file (HyperscaleES's
#: tests/end_to_end_test.py, which parity runs in its JAX child) is never collected here
collect_ignore_glob = ["standins/*"]

settings.register_profile("default", deadline=None, max_examples=40,
                          suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("thorough", deadline=None, max_examples=1000,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))

# An xdist worker (PYTEST_XDIST_WORKER is set before this file loads): the workers are the parallelism,
# one per core, and torch's OpenMP pool of one thread per core in every worker and in every process it
# starts oversubscribed the cores, its spinning threads costing CPU. esverify's own bits never depend on
# the thread count; torch's own ops can (es-awd's per-thread tails, docs/numerics.md §3), and the tests
# of those set their thread count. Set before torch is first imported (below); a user's setting is kept.
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ.setdefault("OMP_NUM_THREADS", "1")


def _has_cuda() -> bool:
    try:
        import torch
        return torch.cuda.is_available()
    except Exception:
        return False


HAS_CUDA = _has_cuda()


@pytest.fixture(scope="session", autouse=True)
def _warm_children():
    """Every parity run of this test process (one xdist worker) forks its reference children from one warm
    start server (esverify.oracle.warm_kept.keep_warm): a fresh child's start (an interpreter importing
    torch, numpy and numba: 1.2-1.5 s) is paid once per worker instead of once per run. A run that asks
    for fresh children gets them as before (--no-warm-start, --python, another child environment), and
    tests/test_warm_start.py checks that a forked child and a fresh one find the same process and give
    the same rows. ESVERIFY_TEST_FRESH=1 runs the whole suite on fresh children."""
    if os.environ.get("ESVERIFY_TEST_FRESH"):
        yield None
        return
    from esverify.oracle.warm_kept import keep_warm
    with keep_warm() as warm:
        # its private folder is the session's, not a test's leftover; what it forked and a test left
        # running is (`leftovers` looks at its children as at pytest's own)
        _LEAK["kept"] = (warm.root.parent.name, warm.proc.pid) if warm is not None else None
        try:
            yield warm
        finally:
            if warm is not None and "baseline" in _LEAK:    # before its end kills them (PR_SET_PDEATHSIG)
                _LEAK["kept_left"] = leftovers(_children_of(os.getpid()), grace=5.0)[0]
            _LEAK.pop("kept", None)


@pytest.hookimpl(trylast=True)
def pytest_collection_finish(session):
    """Move what is alive once the tests are collected (torch, jax, pandas, numba and every test module:
    about 330,000 objects a worker) out of the cyclic collector's reach (gc.freeze), as the warm start
    server does before it forks. Why: each full collection walked all of it, about 0.16 s, and a worker
    makes hundreds (the tests' own and the references' gc.collect() calls, and the automatic ones):
    10.3 s of 44.5 s of CPU in three in-process files (docs/benchmarks.md). Only what exists now is frozen:
    a later test's garbage is collected as before."""
    import gc
    gc.collect()
    gc.freeze()


def pytest_collection_modifyitems(config, items):
    # the heaviest test files first (tests/durations.py says why); a file's own tests keep their order
    seconds = file_seconds()
    if seconds:
        position = {id(item): k for k, item in enumerate(items)}
        items.sort(key=lambda item: (-seconds.get(item.nodeid.split("::")[0], 1.0), position[id(item)]))
    if HAS_CUDA:
        return
    skip = pytest.mark.skip(reason="not run: no CUDA device on this machine")
    for item in items:
        if "cuda" in item.keywords:
            item.add_marker(skip)


# ----------------------------------------------------------------- leak check
# No test may leave a process or an esverify temp folder behind. The session gets a private temp
# folder (TMPDIR), so that only its own esverify-* folders are seen there (other sessions may share
# the machine's /tmp), and makes pytest a child subreaper (Linux), so that an orphan a test leaves,
# even one that left its process group with setsid(), is re-parented to pytest and counted here.
# At the end, whatever runs or remains fails the session and is cleaned up.

import shutil
import signal
import tempfile
import time

_LEAK = {}


def _children_of(pid: int) -> list:
    found = []
    for name in os.listdir("/proc") if os.path.isdir("/proc") else []:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as fh:
                fields = fh.read().rsplit(b")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[1]) == pid and fields[0] not in (b"Z", b"X"):
            found.append(int(name))
    return found


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return fh.read().replace(b"\0", b" ").decode("utf-8", "replace").strip()[:200]
    except OSError:
        return "?"


def _reap():
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def _is_worker(config) -> bool:
    """True in a pytest-xdist worker (the README's test command runs the suite on one per core)."""
    return hasattr(config, "workerinput")


def pytest_configure(config):
    if file_seconds() and hasattr(config.option, "loadscopereorder"):
        # xdist's controller: hand out the files in the order collected (heaviest first, above), not by
        # their number of tests
        config.option.loadscopereorder = False
    # An xdist worker inherits the controller's TMPDIR: its own folder goes beside the controller's,
    # not inside it, since Ray's socket paths under the temp folder must stay within AF_UNIX's 107
    # bytes (nested, they were 108 in a CI run).
    base = os.environ.get("ESVERIFY_LEAKCHECK_BASE") if _is_worker(config) else None
    if base is None:
        os.environ["ESVERIFY_LEAKCHECK_BASE"] = tempfile.gettempdir()
    private = tempfile.mkdtemp(prefix="leakcheck-", dir=base)
    _LEAK.update(tmp=private, old_tmpdir=os.environ.get("TMPDIR"), old_tempdir=tempfile.tempdir,
                 baseline=set(_children_of(os.getpid())))
    os.environ["TMPDIR"] = private
    tempfile.tempdir = private
    if not _is_worker(config):
        _share_xla_compilations(private)
    try:
        import ctypes
        ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)     # PR_SET_CHILD_SUBREAPER
    except (OSError, AttributeError):
        pass


#: JAX's persistent compilation cache settings every JAX process of the session inherits (a JAX child gets
#: the JAX_ variables: esverify.oracle.child_process.ENV_PREFIXES)
XLA_CACHE = {"JAX_COMPILATION_CACHE_DIR": None, "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
             "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "0"}


def _share_xla_compilations(private: str) -> None:
    """One XLA compilation cache for the whole session (the controller's private folder, removed at its end;
    xdist's workers inherit the variables). Why: the suite starts dozens of JAX children (drifted clones,
    mutants, parity runs) that compile the same jitted functions; a process that finds an executable there
    skips XLA's compile, 12-21% of the JAX tests' CPU (docs/benchmarks.md). The executable is the one XLA
    would build again: jax's cache key covers the lowered program, the compile options, XLA_FLAGS and the
    jax/jaxlib versions, so no row can change; a clone's edited code lowers to another program and another
    key. A HyperscaleES end-to-end run still points the cache at its own folder and resets it (its
    `cache_files` finding). A JAX_COMPILATION_CACHE_DIR the user set is kept."""
    if os.environ.get("JAX_COMPILATION_CACHE_DIR"):
        return
    for name, value in XLA_CACHE.items():
        os.environ.setdefault(name, value or os.path.join(private, "xla-cache"))


def leftovers(baseline=frozenset(), grace: float = 5.0) -> tuple[list, list]:
    """(processes still running that are children of this process and not in `baseline`, as
    'pid: command line'; esverify temp folders in the session's temp folder), after up to `grace`
    seconds for processes that are being killed to go."""
    deadline = time.monotonic() + grace
    while True:
        _reap()
        kept = _LEAK.get("kept")
        procs = [p for p in _children_of(os.getpid()) + (_children_of(kept[1]) if kept else [])
                 if p not in baseline]
        if not procs or time.monotonic() >= deadline:
            break
        time.sleep(0.1)
    tmp = _LEAK.get("tmp")
    folders = sorted(n for n in os.listdir(tmp) if n.lstrip(".").startswith("esverify")
                     and n != (kept or ("",))[0]) if tmp else []
    return [f"{p}: {_cmdline(p)}" for p in procs], folders


def _stop_resource_tracker():
    """multiprocessing starts one resource tracker per interpreter, lazily, for the first pool or
    semaphore any test makes (replay's spawn pool, Ray's helpers); it belongs to pytest's own
    interpreter and lives as long as it, so it is stopped here rather than counted as a test's
    leak. A test that leaves its own processes is still caught: only this one helper is stopped."""
    try:
        from multiprocessing import resource_tracker
        resource_tracker._resource_tracker._stop()
    except Exception:       # no tracker was started, or a Python without _stop: nothing to stop
        pass


def pytest_testnodeready(node):
    """xdist's controller: its workers are its children for the whole session, not a test's leak. The
    controller runs no test, so its children when a worker reports ready are workers."""
    _LEAK.setdefault("workers", set()).update(_children_of(os.getpid()))


def pytest_testnodedown(node, error):
    """xdist's controller: a worker's leak-check lines (its own children and temp folder) come back in
    its workeroutput, since a worker's session status does not reach the controller's exit code."""
    _LEAK.setdefault("worker_lines", []).extend(getattr(node, "workeroutput", {}).get("esverify_leaks", []))


def pytest_sessionfinish(session, exitstatus):
    if not _LEAK:
        return
    _stop_resource_tracker()
    procs, folders = leftovers(_LEAK["baseline"] | _LEAK.get("workers", set()))
    for entry in procs:
        try:
            os.kill(int(entry.split(":", 1)[0]), signal.SIGKILL)
        except OSError:
            pass
    _reap()
    tmp = _LEAK["tmp"]
    if _LEAK["old_tmpdir"] is None:
        os.environ.pop("TMPDIR", None)
    else:
        os.environ["TMPDIR"] = _LEAK["old_tmpdir"]
    tempfile.tempdir = _LEAK["old_tempdir"]
    procs += _LEAK.pop("kept_left", [])    # forked by the kept warm start server (_warm_children): killed by its end
    lines = ([f"leak check: a test left process {p} running (killed now)" for p in procs]
             + [f"leak check: a test left the temp folder {tmp}/{f} (removed now)" for f in folders])
    shutil.rmtree(tmp, ignore_errors=True)
    if _is_worker(session.config):
        session.config.workeroutput["esverify_leaks"] = [f"[{session.config.workerinput['workerid']}] {line}"
                                                         for line in lines]
        return
    lines += _LEAK.get("worker_lines", [])
    if lines:
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            reporter.write_line("")
            for line in lines:
                reporter.write_line(line, red=True)
        else:
            print("\n".join(lines))
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
