"""Where the work units run: in this process, a local process pool, or Ray tasks (docs/replay.md §5).

Every runner calls `esverify.replay.kernel.run_unit(job, unit)` on each
unit and hands each result to `on_result` as it arrives (in any order:
the report sorts by unit). Results are identical whichever runner and
however many workers, since a unit's bits depend on nothing else.

- `run_local(job, units, workers, on_result)`: workers == 1 runs in this
  process; more start a `spawn` process pool (no fork of a process whose
  torch threads are running), each worker with one torch thread.
- `run_ray(job, units, address, on_result)`: one Ray task per unit on the
  cluster at `address` ("auto" for the running one; None uses the Ray
  this process already initialised). The checkpoint paths must be
  readable from every node. Ray is optional: without it `RunnerError`
  says how to install it.
"""
from __future__ import annotations

import multiprocessing
import os
import sys
import time
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool

from .. import interrupt
from . import scratch
from .kernel import run_unit

RAY_HINT = "pip install ray (or pip install 'esverify[test]')"


class RunnerError(RuntimeError):
    """A runner that cannot start (Ray missing or unreachable); one line for the user."""


class InfrastructureError(RuntimeError):
    """The machinery failed while units ran, not the inputs: a worker process killed (the OOM killer,
    a signal: BrokenProcessPool), a lost Ray node or worker, an unexpected error in a unit. One line;
    the units verified before it are kept (docs/replay.md §7, exit 3)."""


def _unit_failure(unit, exc: BaseException) -> Exception:
    """The one-line error of a unit that raised: WeightsError (input it cannot read) passes through,
    anything else is an InfrastructureError naming the unit."""
    from .weights import WeightsError
    if isinstance(exc, WeightsError):
        return WeightsError(str(exc).splitlines()[0] if str(exc) else type(exc).__name__)
    first = (str(exc).strip().splitlines() or [""])[0]
    return InfrastructureError(f"unit {unit.index} (tensor {unit.name}) failed: {type(exc).__name__}"
                               + (f": {first}" if first else ""))


def stop_pool(pool, wait: bool) -> None:
    """Shut a pool down; unless `wait`, kill its workers now (an error or a signal must not leave a
    worker replaying a unit nobody will read, nor re-parented to PID 1)."""
    processes = list(getattr(pool, "_processes", {}).values())
    if not wait:
        for proc in processes:
            if proc.is_alive():
                proc.kill()
    pool.shutdown(wait=wait, cancel_futures=True)
    for proc in processes:
        proc.join(timeout=5)


def _exit_with_parent(parent: int) -> None:
    """A worker whose parent died exits by itself: PR_SET_PDEATHSIG on Linux, else a parent-pid watch."""
    import signal
    import threading
    if sys.platform.startswith("linux"):
        try:
            import ctypes
            libc = ctypes.CDLL(None, use_errno=True)
            if libc.prctl(1, signal.SIGKILL, 0, 0, 0) == 0:   # PR_SET_PDEATHSIG = 1
                if os.getppid() != parent:                    # the parent died before prctl ran
                    os._exit(1)
                return
        except (OSError, AttributeError):
            pass

    def watch():
        while os.getppid() == parent:
            time.sleep(1.0)
        os._exit(1)
    threading.Thread(target=watch, daemon=True, name="esverify-parent-watch").start()


def _init_worker(parent: int) -> None:
    import signal

    import torch
    _exit_with_parent(parent)
    # the parent handles SIGINT/SIGTERM/SIGHUP (esverify.interrupt) and stops the pool: a Ctrl-C sent to
    # the whole process group must not make every worker print a KeyboardInterrupt traceback
    for sig in (signal.SIGINT, getattr(signal, "SIGHUP", None)):
        if sig is not None:
            signal.signal(sig, signal.SIG_IGN)

    from esverify.rng import numba_backend
    # workers are the parallelism: one torch thread and one noise thread each (neither changes a bit,
    # docs/replay.md §5); more would oversubscribe the cores the pool already fills
    torch.set_num_threads(1)
    numba_backend.set_threads(1)


def run_local(job, units, workers: int, on_result) -> None:
    """Run `units` here (workers == 1) or on a spawn pool of `workers` processes; results to on_result."""
    if workers <= 1 or len(units) <= 1:
        try:
            for unit in units:
                try:
                    result = run_unit(job, unit)
                except Exception as exc:
                    raise _unit_failure(unit, exc) from None
                on_result(result)
        finally:   # the units' reused buffers are this process's until it ends: give them back now
            scratch.release()
        return
    ctx = multiprocessing.get_context("spawn")
    pool = ProcessPoolExecutor(max_workers=min(workers, len(units)), mp_context=ctx, initializer=_init_worker,
                               initargs=(os.getpid(),))
    clean = False
    try:
        with interrupt.deferred():   # a signal raised inside wait() would leave futures' locks held
            _collect({pool.submit(run_unit, job, unit): unit for unit in units}, on_result)
        clean = True
    finally:
        stop_pool(pool, wait=clean)


def _collect(pending: dict, on_result) -> None:
    """Hand each finished unit to on_result; check for a deferred signal at least every 0.2 s."""
    while pending:
        done, _ = wait(pending, timeout=0.2, return_when=FIRST_COMPLETED)
        interrupt.check()
        for future in done:
            unit = pending.pop(future)
            try:
                result = future.result()
            except BrokenProcessPool as exc:
                raise InfrastructureError(f"a worker process died while replaying unit {unit.index} (tensor "
                                          f"{unit.name}): killed by a signal or the out-of-memory killer? "
                                          f"({exc})") from None
            except Exception as exc:   # an error raised inside the unit, pickled back
                raise _unit_failure(unit, exc) from None
            on_result(result)


def _cause(exc: BaseException, limit: int = 400) -> str:
    """`Type: message` of `exc` on one line (its lines joined: Ray's version mismatch puts the versions on
    the lines after the first), cut at `limit` characters: the cause a one-line error keeps."""
    text = " ".join(str(exc).split())
    text = text if len(text) <= limit else text[:limit - 3] + "..."
    return type(exc).__name__ + (f": {text}" if text else "")


def _ray():
    try:
        import ray
    except ModuleNotFoundError as exc:
        if exc.name != "ray":   # Ray is there but one of its own dependencies is not: that is the cause
            raise RunnerError(f"--ray: Ray is installed but cannot be imported ({_cause(exc)})") from None
        raise RunnerError(f"--ray needs Ray, which is not installed: {RAY_HINT}") from None
    except Exception as exc:   # an installed Ray whose import fails (a version clash of its dependencies...)
        raise RunnerError(f"--ray: Ray is installed but cannot be imported ({_cause(exc)})") from None
    return ray


def run_ray(job, units, address, on_result) -> None:
    """Run `units` as Ray tasks (one CPU each) on the cluster at `address`; results to on_result.

    address: "auto", a cluster address, or None to use the Ray this process
    has already initialised. A Ray this call starts is shut down at the end.
    Raises RunnerError (one line) when Ray is missing, when its import fails (the import's own
    exception named), when no cluster is there, or when `ray.init` fails otherwise (its cause kept: a
    version mismatch says so).
    """
    ray = _ray()
    started = False
    if not ray.is_initialized():
        try:
            ray.init(address=address, include_dashboard=False, log_to_driver=False)
        except ConnectionError as exc:   # no cluster there; Ray's own text names its own flags, not ours
            raise RunnerError(f"--ray {address}: cannot connect to a Ray cluster ({type(exc).__name__}); start "
                              f"one here (ray start --head) for --ray auto, or give a running cluster's "
                              f"address: --ray HOST:PORT") from None
        except Exception as exc:   # a cluster that refuses this driver (a Ray or Python version mismatch...)
            raise RunnerError(f"--ray {address}: ray.init failed: {_cause(exc)}") from None
        started = True
    pending = {}
    clean = False
    try:
        task = ray.remote(num_cpus=1, max_retries=0)(run_unit)
        job_ref = ray.put(job)   # the seeds of every iteration go to the object store once, not per task
        pending = {task.remote(job_ref, unit): unit for unit in units}
        while pending:
            done, _ = ray.wait(list(pending), num_returns=1)
            for ref in done:
                unit = pending.pop(ref)
                try:
                    result = ray.get(ref)
                except Exception as exc:   # RayTaskError (wrapping the unit's own error), a lost node or worker
                    cause = getattr(exc, "cause", None)
                    raise _unit_failure(unit, cause if isinstance(cause, Exception) else exc) from None
                on_result(result)
        clean = True
    finally:
        if not clean:
            for ref in pending:   # an error or a signal: the tasks still queued or running are cancelled
                try:
                    ray.cancel(ref, force=True)
                except Exception:   # already finished or its node is gone: nothing left to stop
                    pass
        if started:
            ray.shutdown()
