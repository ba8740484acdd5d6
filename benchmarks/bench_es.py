#!/usr/bin/env python
"""Trainer memory and speed benchmark ("What must hold": memory and speed). Never a test.

memory: in a fresh child process, a 50M-element f32 parameter set,
population 30, `regenerate` restore, no anchor. Baseline = RSS after
allocating the parameters and a warm-up (update on a small trainer to
compile every kernel, then perturb and restore of member 0 on the real
set: thread pools started, buffers touched once); the
kernel's peak-RSS counter (VmHWM) is then reset (/proc/self/clear_refs),
perturb(0), restore(0) and update(rewards) run, and the peak minus the
baseline is printed against the 64 MiB bar.

speed: one update at population 30 over 10M f32 elements against the
naive stored-noise update measured in the same run and thread count (30
`torch.randn` draws of that size, each scaled and added into an f32
accumulator, then one scaled add into theta); median of --repeats runs;
the ratio of throughputs is printed against the 0.35x bar.

Run: python benchmarks/bench_es.py [--memory-elements 50000000] [--speed-elements 10000000]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

MIB = 1 << 20


def _status_kib(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"no {field} in /proc/self/status")


def memory_child(elements: int, population: int, chunk: int | None) -> dict:
    import numpy as np
    import torch
    from esverify.es import Config, Trainer
    theta = torch.empty(elements, dtype=torch.float32)
    theta.normal_(generator=torch.Generator().manual_seed(0))
    config = Config(population=population, restore="regenerate", chunk_elements=chunk)
    warm = Trainer([torch.zeros(1000)], config)          # compile/initialise every kernel once
    warm.perturb(0)
    warm.restore(0)
    warm.update(np.arange(population, dtype=np.float64))
    trainer = Trainer([theta], config)
    trainer.perturb(0)                                    # the warm-up call on the real set
    trainer.restore(0)
    rewards = np.random.default_rng(0).standard_normal(population)
    baseline = _status_kib("VmRSS")
    with open("/proc/self/clear_refs", "w") as f:        # reset VmHWM to the current RSS
        f.write("5")
    t0 = time.perf_counter()
    trainer.perturb(0)
    trainer.restore(0)
    trainer.update(rewards)
    seconds = time.perf_counter() - t0
    peak = _status_kib("VmHWM")
    return {"elements": elements, "population": population, "baseline_mib": baseline / 1024,
            "peak_mib": peak / 1024, "extra_mib": (peak - baseline) / 1024, "seconds": seconds,
            "chunk_elements": trainer.chunk}


def bench_memory(args) -> dict:
    cmd = [sys.executable, __file__, "--child-memory", str(args.memory_elements), "--population", str(args.population)]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    result = json.loads(out.strip().splitlines()[-1])
    bar = 64.0
    print(f"memory: {result['elements']:,} f32 elements, population {result['population']}, regenerate, "
          f"chunk {result['chunk_elements']:,}: RSS baseline {result['baseline_mib']:.1f} MiB, peak "
          f"{result['peak_mib']:.1f} MiB, extra {result['extra_mib']:.1f} MiB (bar < {bar:.0f} MiB: "
          f"{'PASS' if result['extra_mib'] < bar else 'FAIL'}); perturb+restore+update took "
          f"{result['seconds']:.1f} s")
    return result


def naive_update(theta, coeffs, alpha: float, generator) -> None:
    import torch
    acc = torch.zeros_like(theta)
    for c in coeffs:
        eps = torch.randn(theta.shape, generator=generator, dtype=torch.float32)
        acc.add_(eps, alpha=float(c))
    theta.add_(acc, alpha=alpha / len(coeffs))


def bench_speed(args) -> dict:
    import numpy as np
    import torch
    from esverify.es import Config, Trainer
    n, pop = args.speed_elements, args.population
    theta = torch.zeros(n, dtype=torch.float32)
    trainer = Trainer([theta], Config(population=pop))
    rewards = np.random.default_rng(1).standard_normal(pop)
    coeffs = (rewards - rewards.mean()) / (rewards.std() + 1e-8)
    gen = torch.Generator().manual_seed(0)
    trainer.update(rewards)                      # warm-up: numba compilation
    naive_update(theta, coeffs, 0.0005, gen)
    ours, naive = [], []
    for _ in range(args.repeats):
        t0 = time.perf_counter()
        naive_update(theta, coeffs, 0.0005, gen)
        naive.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        trainer.update(rewards)
        ours.append(time.perf_counter() - t0)
    t_ours, t_naive = statistics.median(ours), statistics.median(naive)
    ratio = t_naive / t_ours
    print(f"speed: update over {n:,} f32 elements at population {pop}, {torch.get_num_threads()} torch threads, "
          f"median of {args.repeats}: ours {t_ours:.3f} s ({n * pop / t_ours / 1e6:.0f} M member-elements/s), "
          f"naive stored-noise {t_naive:.3f} s ({n * pop / t_naive / 1e6:.0f} M/s); throughput ratio "
          f"{ratio:.2f}x (bar >= 0.35x: {'PASS' if ratio >= 0.35 else 'FAIL'})")
    return {"ours_s": t_ours, "naive_s": t_naive, "ratio": ratio}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--memory-elements", type=int, default=50_000_000)
    ap.add_argument("--speed-elements", type=int, default=10_000_000)
    ap.add_argument("--population", type=int, default=30)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--skip-memory", action="store_true")
    ap.add_argument("--skip-speed", action="store_true")
    ap.add_argument("--child-memory", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child_memory:
        print(json.dumps(memory_child(args.child_memory, args.population, None)))
        return 0
    if not os.path.exists("/proc/self/clear_refs"):
        print("memory: not measured: needs Linux /proc/self/clear_refs", file=sys.stderr)
        args.skip_memory = True
    if not args.skip_memory:
        bench_memory(args)
    if not args.skip_speed:
        bench_speed(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
