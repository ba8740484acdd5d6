"""Benchmark of esverify.exactsum.array_fsum against math.fsum over tolist() (the baseline it replaces
in the training loops' reward), measured in the same run.

    python benchmarks/bench_exactsum.py

Prints the median time per call of each on the loops' model size (20,370 squared differences) and on
two other sizes, and the ratios, for the numba kernel and for the numpy path (used without numba). Nothing is asserted: speed is reported, never tested; the values are
checked equal bit for bit on every input timed (tests/test_exactsum.py checks it in general).
"""
from __future__ import annotations

import math
import statistics
import struct
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import esverify.exactsum as exactsum  # noqa: E402
from esverify.exactsum import array_fsum  # noqa: E402


def _median_seconds(fn, repeat: int = 7, number: int = 50) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        for _ in range(number):
            fn()
        times.append((time.perf_counter() - start) / number)
    return statistics.median(times)


def main() -> None:
    rng = np.random.default_rng(0)
    print(f"{'values':>9} {'math.fsum(tolist) ms':>21} {'numba ms':>9} {'ratio':>6} {'numpy ms':>9} {'ratio':>6}")
    for n in (1_000, 20_370, 1_000_000):
        d = rng.standard_normal(n) * 0.01 - 0.05
        squares = d * d
        for use_numba in (True, False):
            exactsum._USE_NUMBA = use_numba
            assert struct.pack("<d", array_fsum(squares)) == struct.pack("<d", math.fsum(squares.tolist()))
        number = max(1, 20_000_000 // n // 100)
        base = _median_seconds(lambda: math.fsum(squares.tolist()), number=number)
        paths = []
        for use_numba in (True, False):
            exactsum._USE_NUMBA = use_numba
            paths.append(_median_seconds(lambda: array_fsum(squares), number=number))
        exactsum._USE_NUMBA = True
        print(f"{n:>9} {base * 1e3:>21.3f} {paths[0] * 1e3:>9.3f} {base / paths[0]:>6.2f} "
              f"{paths[1] * 1e3:>9.3f} {base / paths[1]:>6.2f}")


if __name__ == "__main__":
    main()
