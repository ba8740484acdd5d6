"""CPU time of the command line's help, version and usage errors.

Each command line runs --repeats times in a fresh interpreter; the figure is the median CPU time
(user + sys of the child, from os.wait4's rusage), which a loaded machine changes far less than
wall time, and its ratio to `esverify --version` measured in the same run (the floor: Python, click
and esverify's top module). The goal, printed beside the figures and never asserted: under 0.5 s
of CPU each. tests/test_cli_imports.py checks the cause (no torch, numba, pandas or adapter is
imported). Run:

    python benchmarks/bench_cli.py [--repeats 5]
"""
from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time

import click

GOAL_CPU_S = 0.5

COMMAND_LINES = [
    ["--version"],
    ["--help"],
    ["parity", "--help"],
    ["replay", "--help"],
    ["goldens", "--help"],
    ["audit", "--help"],
    ["parity", "--ref", "/nonexistent/clone"],
    ["parity", "--bogus"],
    ["replay", "--bogus"],
]


def _cpu_seconds(argv) -> tuple[float, float, float]:
    """(user, sys, wall) seconds of one `python -m esverify ARGV` in a fresh interpreter."""
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "esverify", *argv], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    _, _, usage = os.wait4(proc.pid, 0)
    proc.returncode = 0   # reaped above
    return usage.ru_utime, usage.ru_stime, time.perf_counter() - t0


@click.command()
@click.option("--repeats", type=click.IntRange(min=1), default=5, show_default=True)
def main(repeats):
    rows = []
    for argv in COMMAND_LINES:
        runs = [_cpu_seconds(argv) for _ in range(repeats)]
        cpu = statistics.median(u + s for u, s, _ in runs)
        rows.append((" ".join(argv), statistics.median(u for u, _, _ in runs),
                     statistics.median(s for _, s, _ in runs), cpu, statistics.median(w for *_, w in runs)))
    floor = rows[0][3]
    print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}; median of {repeats} runs")
    print(f"{'command line':42s} {'user s':>7s} {'sys s':>7s} {'cpu s':>7s} {'wall s':>7s} {'/--version':>10s}  goal")
    for name, user, sys_, cpu, wall in rows:
        ok = "ok" if cpu < GOAL_CPU_S else f"over {GOAL_CPU_S} s"
        print(f"esverify {name:33s} {user:7.3f} {sys_:7.3f} {cpu:7.3f} {wall:7.3f} {cpu / floor:10.2f}  {ok}")


if __name__ == "__main__":
    main()
