"""Throughput of the gaussian stream per mapping and backend, against torch.randn.

For each mapping x backend: millions of float32 elements per second
(median of --repeats timed fills of a preallocated buffer of --n
elements, after one warm-up fill) and the ratio to torch.randn(out=...)
float32 measured in the same run with the same thread count (torch and
numba both set to --threads). Never asserted: the bars the contract set (poly32
on the fastest CPU backend >= 0.5x torch.randn, libm64 >= 0.3x) are
printed beside the figures. Run:

    python benchmarks/bench_rng.py [--n 4194304] [--repeats 7] [--threads 2] [--cuda]
"""
from __future__ import annotations

import statistics
import time

import click
import numpy as np
import pandas as pd
import torch

from esverify import rng
from esverify.report import console_table

BARS = {"poly32": 0.5, "libm64": 0.3}


def _median_seconds(fn, repeats: int, sync=None) -> float:
    fn()  # warm-up: numba compile or cache load, allocator
    times = []
    for _ in range(repeats):
        if sync:
            sync()
        t0 = time.perf_counter()
        fn()
        if sync:
            sync()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def measure(n: int, repeats: int, threads: int, cuda: bool) -> pd.DataFrame:
    torch.set_num_threads(threads)
    from esverify.rng import numba_backend
    numba_backend.set_threads(threads)  # Python threads; numba's OpenMP layer stays down
    rows = []
    targets = [("cpu", b) for b in rng.available_backends("cpu")]
    if cuda and torch.cuda.is_available():
        targets.append(("cuda", "torch"))
    for device in sorted({d for d, _ in targets}):
        sync = torch.cuda.synchronize if device == "cuda" else None
        buf = torch.empty(n, dtype=torch.float32, device=device)
        base = _median_seconds(lambda: torch.randn(n, out=buf), repeats, sync)
        rows.append({"device": device, "mapping": "torch.randn", "backend": "torch",
                     "M_per_s": n / base / 1e6, "ratio_to_randn": 1.0, "bar": None})
        for d, backend in targets:
            if d != device:
                continue
            for mapping in rng.MAPPINGS:
                out = buf if device == "cuda" else np.empty(n, dtype=np.float32)
                sec = _median_seconds(lambda: rng.gaussian_into(out, 12345, 1, mapping, backend=backend),
                                      repeats, sync)
                rows.append({"device": device, "mapping": mapping, "backend": backend,
                             "M_per_s": n / sec / 1e6, "ratio_to_randn": base / sec,
                             "bar": BARS[mapping] if device == "cpu" else None})
    return pd.DataFrame(rows)


@click.command()
@click.option("--n", default=1 << 22, show_default=True, help="elements per timed fill")
@click.option("--repeats", default=7, show_default=True, help="timed fills per entry (median)")
@click.option("--threads", default=2, show_default=True, help="torch and numba thread count")
@click.option("--cuda/--no-cuda", default=True, show_default=True, help="also time the CUDA path if present")
def main(n, repeats, threads, cuda):
    frame = measure(n, repeats, threads, cuda)
    click.echo(f"gaussian stream throughput, n={n}, median of {repeats}, threads={threads}, "
               f"torch {torch.__version__}")
    click.echo(console_table(frame.round({"M_per_s": 1, "ratio_to_randn": 3})))
    cpu = frame[(frame.device == "cpu") & (frame.mapping != "torch.randn")]
    for mapping, bar in BARS.items():
        best = cpu[cpu.mapping == mapping].sort_values("ratio_to_randn").iloc[-1]
        verdict = "meets" if best.ratio_to_randn >= bar else "MISSES"
        click.echo(f"{mapping}: fastest CPU backend {best.backend} at {best.ratio_to_randn:.2f}x "
                   f"torch.randn ({verdict} the {bar}x bar)")


if __name__ == "__main__":
    main()
