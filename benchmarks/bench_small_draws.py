"""The per-call paths parity runs tens of thousands of times, on the chunk sizes it runs them on.

A parity run calls es-awd's scaled add on f16/bf16 chunks of a few hundred elements about 40,000 times, and
draws noise ranges of that size about 70,000 times on our side (counted with benchmarks/bench_parity.py's
matrix). Each line times, in this process and the same run, median of --repeats batches:

- es-awd's scaled add, f16 and bf16: the numba kernel (esverify.es.half_kernels, through the profile's
  `scaled_add`) against the profile's torch lines (`scaled_add_torch`), microseconds a call and the ratio;
- a noise draw's numba kernel (odd first element): the one-call range kernel (numba_backend.poly32 and
  libm64 now) against the pair-kernel path it replaced for ranges one thread takes (numba_backend._fill
  without it: up to three calls), and the whole esverify.rng.gaussian_into around it.

Nothing is asserted (machines are noisy); the ratios are the figures to read.

    python benchmarks/bench_small_draws.py [--repeats 7] [--calls 2000]
"""
from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import torch


def _per_call_us(fn, calls: int, repeats: int) -> float:
    fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        times.append((time.perf_counter() - start) / calls * 1e6)
    return statistics.median(times)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--calls", type=int, default=2000)
    args = parser.parse_args()
    from esverify import rng
    from esverify.references.es_awd import profile
    from esverify.rng import numba_backend
    torch.set_num_threads(1)
    print(f"{'path':44s} {'elements':>9s} {'new us':>8s} {'old us':>8s} {'old/new':>8s}")
    for dtype in (torch.float16, torch.bfloat16):
        for n in (600, 16384, 1 << 19):
            x = torch.randn(n).to(dtype)
            y = torch.randn(n).to(dtype)
            calls = max(3, args.calls * 600 // n)
            new = _per_call_us(lambda: profile.scaled_add(x, y, 0.3, "cpu", 0, n + 5), calls, args.repeats)
            old = _per_call_us(lambda: profile.scaled_add_torch(x, y, 0.3, "cpu", 0, n + 5), calls, args.repeats)
            print(f"{'es-awd scaled add ' + str(dtype).removeprefix('torch.'):44s} {n:9d} {new:8.1f} {old:8.1f} "
                  f"{old / new:8.2f}")
    for mapping, pairs in (("poly32", numba_backend.poly32_pairs), ("libm64", numba_backend.libm64_pairs)):
        kernel = getattr(numba_backend, mapping)
        for n in (600, 16384):
            out = torch.empty(n)
            view = out.numpy()
            new = _per_call_us(lambda: kernel(view, 123, 7), args.calls, args.repeats)
            old = _per_call_us(lambda: numba_backend._fill(pairs, view, 123, 7), args.calls, args.repeats)
            print(f"{'numba ' + mapping + ' kernel, first element odd':44s} {n:9d} {new:8.1f} {old:8.1f} "
                  f"{old / new:8.2f}")
            whole = _per_call_us(lambda: rng.gaussian_into(out, 123, 7, mapping), args.calls, args.repeats)
            print(f"{'  the whole rng.gaussian_into (new)':44s} {n:9d} {whole:8.1f}")


if __name__ == "__main__":
    main()
