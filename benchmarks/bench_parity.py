"""Wall time and rows/s of the default parity matrix on the test stand-ins (issues 4 and 8, "Speed").

Runs `esverify parity` with its defaults (both targets, CPU, contract and
native noise; cuda rows are skipped without a GPU) against tests/standins/
and prints the wall time, rows per second, and ratios against baselines
measured in the same run: the time spent on our side (esverify.es) and
waiting for the reference side (the child works while our side computes,
and the two targets run side by side, so the sum exceeds the wall time).
Nothing is asserted; the issue's target is under 60 s on the project
machine (2 cores) with the real clones.

    python benchmarks/bench_parity.py [--small] [--out DIR]
"""
from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from esverify.oracle import Options, run_parity
from esverify.oracle.loops import LOOP_OPS

STANDINS = Path(__file__).resolve().parents[1] / "tests" / "standins"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", action="store_true", help="leave out the 1M-element tensor")
    parser.add_argument("--out", default=None, help="report folder (default: a temporary one)")
    args = parser.parse_args()
    out = args.out or tempfile.mkdtemp(prefix="bench-parity-")
    started = time.perf_counter()
    result = run_parity(Options(ref=str(STANDINS / "es-at-scale"), awd_ref=str(STANDINS / "es-awd"),
                                small=args.small, out=out, quiet=True))
    wall = time.perf_counter() - started
    sides = result.metadata["seconds_per_side"]
    ours = sum(s["ours_s"] for s in sides.values())
    theirs = sum(s["reference_s"] for s in sides.values())
    counts = result.frame["status"].value_counts().to_dict()
    ran = int((result.frame["status"] != "skipped").sum())
    loops = int(result.frame["op"].isin(LOOP_OPS).sum())
    print(f"default matrix: {len(result.frame)} rows ({loops} training-loop rows) {counts}; exit {result.exit_code}")
    print(f"wall {wall:.2f} s (report's own figure {result.metadata['wall_time_s']} s); "
          f"{ran / wall:.1f} rows/s over the {ran} rows that ran")
    for target, s in sides.items():
        print(f"  {target}: ours {s['ours_s']:.2f} s, reference child {s['reference_s']:.2f} s")
    print(f"ratio wall / our side: {wall / ours:.2f}; reference side / our side: {theirs / ours:.2f}; "
          f"(ours + reference) / wall: {(ours + theirs) / wall:.2f} (above 1: both sides busy at once)")


if __name__ == "__main__":
    main()
