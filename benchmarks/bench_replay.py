"""Throughput of `esverify replay` against the noise-generation rate (docs/replay.md §9).

A replay regenerates the noise of every member of every iteration, so its
ceiling is the rate at which the contract's poly32 generator writes f32
noise. This benchmark builds a synthetic run log (contract noise, profile
--profile, population --population, engine residue of --engines engines,
--iterations iterations) on one f32 tensor of --elements elements, then
measures, in the same run:

- the generation rate: `esverify.rng.gaussian_into` on one thread (one
  worker's share), fills of one unit's size, per CPU second and per wall
  second: --repeats fills in this process (the rate printed), and one fill
  in the worker just before each unit it replays (the rate the ratio uses:
  the same process, moments apart, so that the load other processes put on
  the machine weighs on both alike);
- the replay rate per worker: member-elements (elements x seeds x
  iterations) per second of `run_unit` over all units on a warm spawn
  pool of 1 worker, --rounds times (medians), then once on 2 workers (the
  1 -> 2 scaling), against an expected checkpoint that is the replay's own
  result (a genuine checkpoint); per CPU second (each worker times its own
  units with time.process_time) and per wall second;
- the ratio of the two, per round, against the worker's own fills (the goal,
  90%, is on the CPU ratio: a loaded machine changes CPU time far less than
  wall time), and the hours a paper-scale replay (7B x 30 x 500
  member-elements) would take on N workers at the measured rate.

Never asserted; printed. Run:

    python benchmarks/bench_replay.py [--elements 4194304] [--iterations 2] [--rounds 3] [--workers-estimate 64]
"""
from __future__ import annotations

import json
import multiprocessing
import os
import statistics
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor, wait
from pathlib import Path

import click
import numpy as np
import torch

PAPER = (7e9, 30, 500)   # parameters, members, iterations (the references' scale)


def _warm(_):
    import esverify.replay.kernel  # noqa: F401 - the import (torch, numba cache) is not the replay
    return True


def _log(folder: Path, population: int, iterations: int, engines: int, profile: str) -> None:
    rng = np.random.default_rng(3)
    (folder / "iteration_updates").mkdir(parents=True)
    (folder / "args.json").write_text(json.dumps({
        "alpha": 0.0005, "sigma": 0.001, "population_size": population, "num_engines": engines,
        "num_iterations": iterations,
        "esverify": {"format": "esverify.es.runlog/1", "profile": profile, "noise": "contract",
                     "mapping": "poly32", "scheme": "correlated", "slots": ["w"], "first_iteration": 0}}))
    for i in range(iterations):
        seeds = [int(s) for s in rng.integers(0, 2 ** 62, size=population)]
        (folder / "iteration_updates" / f"iteration_{i:06d}.json").write_text(json.dumps({
            "iteration": i, "seeds": seeds, "update_coefficients": rng.standard_normal(population).tolist(),
            "evaluated_on_saved": [[k, 1] for k in range(0, population, engines)]}))


def _job_and_units(folder: Path, elements: int, shard: int):
    from safetensors.torch import save_file

    from esverify.replay.kernel import Job
    from esverify.replay.log import read_log
    from esverify.replay.units import plan_units
    from esverify.replay.weights import open_weights
    save_file({"w": torch.randn(elements)}, folder / "base.safetensors")
    log = read_log(folder)
    job = Job(base=str(folder / "base.safetensors"), expect=str(folder / "base.safetensors"), profile=log.profile,
              noise="contract", mapping="poly32", scheme="correlated", slots=("w",), sigma=log.sigma,
              alpha=log.alpha, population=log.population, decay="none", lam=0.0,
              iterations=tuple((it.seeds, it.coeffs, tuple(log.evaluated(it))) for it in log.iterations))
    units = plan_units([("w", (elements,), torch.float32)], "contract", shard)
    # the expected checkpoint is the replay's own result, so that the timed runs compare as a genuine
    # checkpoint does (few or no differing elements), not the worst case of every element differing
    from dataclasses import replace

    from esverify.replay.kernel import replay_elements
    w = open_weights(folder / "base.safetensors")
    with torch.no_grad():
        got = torch.cat([replay_elements(job, u, w.read("w", u.start, u.end))[0] for u in units])
    save_file({"w": got}, folder / "expect.safetensors")
    return replace(job, expect=str(folder / "expect.safetensors")), units


def _timed_unit(job, unit) -> float:
    """CPU seconds of one run_unit in this worker."""
    from esverify.replay.kernel import run_unit
    mark = time.process_time()
    run_unit(job, unit)
    return time.process_time() - mark


def _generation_rate(n: int, repeats: int) -> tuple[float, float]:
    """(elements per CPU second, per wall second) of the poly32 generator on one thread (a fill warms it up
    first: the buffer's fresh pages and the kernel's load are not the generator's rate)."""
    from esverify import rng
    from esverify.rng import numba_backend
    numba_backend.set_threads(1)
    out = np.empty(n, dtype=np.float32)
    rng.gaussian_into(out, 12345, 0, "poly32")   # not timed: the pages' first touch, the kernel's load
    times, cpu = [], []
    for k in range(repeats):
        t0, c0 = time.perf_counter(), time.process_time()
        rng.gaussian_into(out, 12345 + k, 0, "poly32")
        cpu.append(time.process_time() - c0)
        times.append(time.perf_counter() - t0)
    return n / statistics.median(cpu), n / statistics.median(times)


def _replay_seconds(job, units, workers: int, rounds: int = 1, repeats: int = 5) -> list[tuple[float, float, float]]:
    """Per round (`rounds` on one warm pool): (the generation rate per CPU second measured in a worker just before
    the round, `_generation_rate` of one unit's size, CPU seconds of the replay summed over the workers, wall
    seconds of the round) of replaying every unit on `workers` workers."""
    from esverify.replay.kernel import run_unit
    from esverify.replay.runners import _init_worker
    ctx = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(workers, mp_context=ctx, initializer=_init_worker, initargs=(os.getpid(),)) as pool:
        wait([pool.submit(_warm, k) for k in range(workers)])
        wait([pool.submit(run_unit, job, units[0])])        # numba compile/cache load in each worker
        wait([pool.submit(run_unit, job, units[0]) for _ in range(workers - 1)])
        out = []
        for _ in range(rounds):
            gen, _ = pool.submit(_generation_rate, units[0].end - units[0].start, repeats).result()
            t0 = time.perf_counter()
            cpu = sum(f.result() for f in [pool.submit(_timed_unit, job, unit) for unit in units])
            out.append((gen, cpu, time.perf_counter() - t0))
        return out


@click.command()
@click.option("--elements", default=1 << 22, show_default=True, help="elements of the replayed tensor")
@click.option("--shard", default=1 << 20, show_default=True, help="elements per unit")
@click.option("--population", default=30, show_default=True)
@click.option("--iterations", default=2, show_default=True)
@click.option("--engines", default=4, show_default=True, help="engine residue: every engines-th seed")
@click.option("--profile", type=click.Choice(["es-awd", "es-at-scale"]), default="es-awd", show_default=True)
@click.option("--repeats", default=5, show_default=True, help="timed generation fills in this process (median)")
@click.option("--rounds", default=3, show_default=True, type=click.IntRange(1),
              help="timed replays of every unit on the 1-worker pool (medians)")
@click.option("--workers-estimate", default=64, show_default=True, help="N of the paper-scale estimate")
def main(elements, shard, population, iterations, engines, profile, repeats, rounds, workers_estimate):
    with tempfile.TemporaryDirectory(prefix="bench-replay-") as tmp:
        folder = Path(tmp)
        _log(folder, population, iterations, engines, profile)
        job, units = _job_and_units(folder, elements, shard)
        gen, gen_wall = _generation_rate(shard, repeats)
        work = elements * population * iterations           # member-elements (residue draws are reused)
        ones = _replay_seconds(job, units, 1, rounds, repeats)
        [(_, cpu2, two)] = _replay_seconds(job, units, 2, 1, 1)
    # per round: the replay's CPU rate against the generation rate the same worker measured just before it
    ratios = [(work / cpu) / g for g, cpu, _ in ones]
    cpu1 = statistics.median(cpu for _, cpu, _ in ones)
    one = statistics.median(wall for _, _, wall in ones)
    worker_gen = statistics.median(g for g, _, _ in ones)
    rate1, rate2 = work / cpu1, work / cpu2
    click.echo(f"replay benchmark: {elements} f32 elements, population {population}, {iterations} iterations, "
               f"residue of {engines} engines, profile {profile}, {len(units)} units, torch {torch.__version__}; "
               f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    click.echo(f"noise generation (poly32, 1 thread): {gen / 1e9:.3f} G elements per CPU second "
               f"({gen_wall / 1e9:.3f} per wall second); in the worker before each round: {worker_gen / 1e9:.3f}")
    click.echo(f"replay, 1 worker: {rate1 / 1e9:.3f} G member-elements per CPU second "
               f"({statistics.median(ratios):.0%} of the generation rate, median of {rounds} rounds: "
               f"{', '.join(f'{r:.0%}' for r in ratios)}; target >= 90%); per wall second "
               f"{work / one / 1e9:.3f} ({work / one / gen_wall:.0%} of the generation's wall rate)")
    click.echo(f"replay, 2 workers: {rate2 / 1e9:.3f} G member-elements per CPU second per worker, "
               f"{work / two / 1e9:.3f} per wall second in all; 1 -> 2 scaling {one / two:.2f}x (wall), "
               f"CPU per member-element {cpu2 / cpu1:.2f}x")
    total = PAPER[0] * PAPER[1] * PAPER[2]
    for n in sorted({1, 2, workers_estimate}):
        click.echo(f"paper scale (7B x 30 x 500 = {total:.2e} member-elements) on {n} workers at the 1-worker "
                   f"CPU rate: {total / (rate1 * n) / 3600:.1f} h")


if __name__ == "__main__":
    main()
