"""The protocol's overhead: golden rows per second and a 1M-element gaussian, in process vs through a wrapper.

Two measurements, never asserted:

1. Gate throughput: the `rng` and `es-at-scale` vectors recomputed in
   process (esverify's `numpy` backend) against the same vectors through
   ``python -m esverify.impl --backend numpy`` (vectors per second, wrapper
   start excluded; the gate's own comparison included both ways), and
   through the C implementation when a compiler is present.
2. One `gaussian` request of --n elements (default 2**20, poly32): the
   median time of the in-process call (`esverify.rng.gaussian`) against the same call through the wrapper (request frame,
   computation in the wrapper, 4 MiB reply frame, decoding). The ratio
   in-process time / protocol time is printed beside the issue's bar of
   0.5x, for the numpy and numba backends (the wrapper uses the same backend).
3. The transport's ceiling: the same bytes through a bare pipe between two
   processes, no protocol at all.

    python benchmarks/bench_impl.py [--n 1048576] [--repeats 7]
"""
from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import click
import numpy as np
import pandas as pd

from esverify import rng
from esverify.goldens import gate
from esverify.impl import client, wire
from esverify.goldens.impl_target import ImplTarget
from esverify.report import console_table

ROOT = Path(__file__).resolve().parents[1]
AREAS = ["rng", "es-at-scale"]


def _median(fn, repeats: int) -> float:
    fn()   # warm-up: numba compile or cache load, imports in the wrapper
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def _gate_rate(impl_cmd) -> tuple[float, int]:
    if impl_cmd is None:
        t = time.perf_counter()
        result = gate.check(ROOT / "goldens", AREAS, backends=["numpy"])
        seconds = time.perf_counter() - t
    else:
        target = ImplTarget(impl_cmd)
        target.open()                     # the wrapper's start-up is not part of the rate
        t = time.perf_counter()
        try:
            result = gate.check(ROOT / "goldens", AREAS, impl=_Opened(target))
        finally:
            seconds = time.perf_counter() - t
            target.close()
    assert not result.errors, result.errors
    n = sum(s["vectors"] - s.get("unsupported", 0) for s in result.summary)
    return n / seconds, n


class _Opened:
    """An ImplTarget that is already started (gate.check opens its impl; here that was timed apart)."""

    def __init__(self, target):
        self._t = target

    def open(self):
        return None

    def __getattr__(self, name):
        return getattr(self._t, name)


def _pipe_ms(nbytes: int, repeats: int) -> float:
    """Median ms to move `nbytes` from a child process through a pipe (1 MiB buffer): the transport's ceiling."""
    code = ("import sys; b = bytes(%d); sys.stdin.read(1); "
            "[sys.stdout.buffer.write(b) for _ in range(%d)]; sys.stdout.flush()" % (nbytes, repeats))
    p = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=0)
    client._widen_pipe(p.stdout.fileno())
    buf, times = bytearray(nbytes), []
    p.stdin.write(b"x")
    for _ in range(repeats):
        t, got, view = time.perf_counter(), 0, memoryview(buf)
        while got < nbytes:
            got += p.stdout.readinto(view[got:])
        times.append(time.perf_counter() - t)
    p.wait()
    return statistics.median(times) * 1e3


@click.command()
@click.option("--n", default=1 << 20, show_default=True, help="elements of the gaussian request")
@click.option("--repeats", default=7, show_default=True)
def main(n, repeats):
    rows = []
    cmd = f"{sys.executable} -m esverify.impl --backend numpy"
    _gate_rate(None)                      # warm-up: imports, numba caches, the trainer's first call
    for label, impl in (("in process (numpy)", None), ("python -m esverify.impl", cmd)):
        rate, count = _gate_rate(impl)
        rows.append({"path": label, "vectors": count, "vectors_per_s": round(rate, 1)})
    cc = shutil.which("cc")
    if cc:
        exe = Path(tempfile.mkdtemp()) / "esimpl"
        subprocess.run([cc, "-std=c11", "-O2", *map(str, sorted((ROOT / "examples/impl_c").glob("*.c"))), "-lm",
                        "-o", str(exe)], check=True)
        rate, count = _gate_rate(str(exe))
        rows.append({"path": "examples/impl_c (C)", "vectors": count, "vectors_per_s": round(rate, 1)})
    print(console_table(pd.DataFrame(rows)))

    rows = []
    args = {"mapping": "poly32", "seed": wire.u64_hex(1234567), "first": wire.u64_hex(1), "n": wire.u64_hex(n)}
    for backend in ("numpy", "numba"):
        inproc = _median(lambda: rng.gaussian(1234567, n, 1, "poly32", backend=backend), repeats)
        with client.ImplProcess([sys.executable, "-m", "esverify.impl", "--backend", backend]) as proc:
            proc.start()
            via = _median(lambda: proc.call("gaussian", args)["values"].values(), repeats)
            got = proc.call("gaussian", args)["values"].bits
        same = np.array_equal(got, rng.gaussian(1234567, n, 1, "poly32", backend=backend).view(np.uint32))
        rows.append({"backend": backend, "n": n, "in_process_ms": round(inproc * 1e3, 2),
                     "protocol_ms": round(via * 1e3, 2), "ratio": round(inproc / via, 3),
                     "bar_0.5x": "met" if inproc / via >= 0.5 else "NOT met", "bits_equal": same})
    print(console_table(pd.DataFrame(rows)))
    pipe = _pipe_ms(4 * n, repeats)
    print(f"transport ceiling: {4 * n} bytes through a bare pipe take {pipe:.2f} ms here "
          f"({4 * n / pipe / 1e3:.0f} MB/s); cpu threads: {os.cpu_count()}, load average: "
          f"{os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
