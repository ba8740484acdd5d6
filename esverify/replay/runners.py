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
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait

from .kernel import run_unit

RAY_HINT = "pip install ray (or pip install 'esverify[test]')"


class RunnerError(RuntimeError):
    """A runner that cannot start (Ray missing or unreachable); one line for the user."""


def _init_worker() -> None:
    import torch

    from esverify.rng import numba_backend
    # workers are the parallelism: one torch thread and one noise thread each (neither changes a bit,
    # docs/replay.md §5); more would oversubscribe the cores the pool already fills
    torch.set_num_threads(1)
    numba_backend.set_threads(1)


def run_local(job, units, workers: int, on_result) -> None:
    """Run `units` here (workers == 1) or on a spawn pool of `workers` processes; results to on_result."""
    if workers <= 1 or len(units) <= 1:
        for unit in units:
            on_result(run_unit(job, unit))
        return
    ctx = multiprocessing.get_context("spawn")
    pool = ProcessPoolExecutor(max_workers=min(workers, len(units)), mp_context=ctx, initializer=_init_worker)
    try:
        pending = {pool.submit(run_unit, job, unit) for unit in units}
        while pending:
            done, pending = wait(pending, return_when=FIRST_COMPLETED)
            for future in done:
                on_result(future.result())
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def _ray():
    try:
        import ray
    except ImportError:
        raise RunnerError(f"--ray needs Ray, which is not installed: {RAY_HINT}") from None
    return ray


def run_ray(job, units, address, on_result) -> None:
    """Run `units` as Ray tasks (one CPU each) on the cluster at `address`; results to on_result.

    address: "auto", a cluster address, or None to use the Ray this process
    has already initialised. A Ray this call starts is shut down at the end.
    Raises RunnerError when Ray is missing or cannot connect.
    """
    ray = _ray()
    started = False
    if not ray.is_initialized():
        try:
            ray.init(address=address, include_dashboard=False, log_to_driver=False)
        except Exception as exc:   # ConnectionError and Ray's own types
            raise RunnerError(f"--ray {address}: cannot connect to a Ray cluster ({exc})") from None
        started = True
    try:
        task = ray.remote(num_cpus=1)(run_unit)
        job_ref = ray.put(job)   # the seeds of every iteration go to the object store once, not per task
        pending = [task.remote(job_ref, unit) for unit in units]
        while pending:
            done, pending = ray.wait(pending, num_returns=1)
            for ref in done:
                on_result(ray.get(ref))
    finally:
        if started:
            ray.shutdown()
