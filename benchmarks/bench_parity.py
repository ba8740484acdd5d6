"""Wall time and rows/s of the default parity matrix (issues 4, 8 and 9, "Speed").

Runs `esverify parity` with its defaults (both targets, CPU, contract and
native noise, training-loop rows included; cuda rows are skipped without
a GPU) against tests/standins/, or against the clones given with
--ref/--awd-ref, and prints the wall time against the 60 s budget of the
project machine (2 cores), rows per second, the time of the training-loop
rows and of the single-operation rows, and ratios against baselines
measured in the same run: the time spent on our side (esverify.es) and
waiting for the reference side (the child works while our side computes,
and the two targets run side by side, so the sum exceeds the wall time).
Nothing is asserted: machines are noisy.

    python benchmarks/bench_parity.py [--small] [--ref PATH] [--awd-ref PATH] [--out DIR]
"""
from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from esverify.oracle import Options, run_parity
from esverify.oracle.adapters import all_adapters

LOOP_OPS = tuple(op for a in all_adapters() for op in a.loop_ops)

STANDINS = Path(__file__).resolve().parents[1] / "tests" / "standins"
#: the default matrix's budget on the project machine (2 cores), real clones included (issue 9)
BUDGET_S = 60.0


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", action="store_true", help="leave out the 1M-element tensor")
    parser.add_argument("--ref", default=str(STANDINS / "es-at-scale"),
                        help="es-at-scale clone (default: the test stand-in)")
    parser.add_argument("--awd-ref", default=str(STANDINS / "es-awd"), help="es-awd clone (default: the test stand-in)")
    parser.add_argument("--out", default=None, help="report folder (default: a temporary one)")
    args = parser.parse_args()
    out = args.out or tempfile.mkdtemp(prefix="bench-parity-")
    started = time.perf_counter()
    result = run_parity(Options(ref=(args.ref, args.awd_ref), small=args.small, out=out, quiet=True))
    wall = time.perf_counter() - started
    # the part the loop rows take: the same matrix without them, measured in this run
    with tempfile.TemporaryDirectory(prefix="bench-parity-noloops-") as scratch:   # a baseline, not a report
        started = time.perf_counter()
        run_parity(Options(ref=(args.ref, args.awd_ref), small=args.small, loops=False,
                           out=str(Path(scratch) / "out"), quiet=True))
        no_loops = time.perf_counter() - started
    standins = {Path(args.ref).resolve(), Path(args.awd_ref).resolve()} <= {(STANDINS / "es-at-scale").resolve(),
                                                                             (STANDINS / "es-awd").resolve()}
    sides = result.metadata["seconds_per_side"]
    ours = sum(s["ours_s"] for s in sides.values())
    theirs = sum(s["reference_s"] for s in sides.values())
    counts = result.frame["status"].value_counts().to_dict()
    ran = int((result.frame["status"] != "skipped").sum())
    loops = int(result.frame["op"].isin(LOOP_OPS).sum())
    print(f"default matrix: {len(result.frame)} rows ({loops} training-loop rows) {counts}; exit {result.exit_code}")
    print(f"clones: {'the test stand-ins' if standins else f'{args.ref} and {args.awd_ref}'}; report: {out}")
    print(f"wall {wall:.2f} s (report's own figure {result.metadata['wall_time_s']} s); "
          f"{ran / wall:.1f} rows/s over the {ran} rows that ran")
    print(f"budget {BUDGET_S:g} s on 2 cores: {'within' if wall <= BUDGET_S else 'OVER'} "
          f"({wall / BUDGET_S:.2f} of it)")
    print(f"same matrix with --no-loops: {no_loops:.2f} s; the {loops} loop rows add {wall - no_loops:.2f} s "
          f"(ratio with / without loops: {wall / no_loops:.2f})")
    for target, s in sides.items():
        print(f"  {target}: ours {s['ours_s']:.2f} s, reference child {s['reference_s']:.2f} s")
    print(f"ratio wall / our side: {wall / ours:.2f}; reference side / our side: {theirs / ours:.2f}; "
          f"(ours + reference) / wall: {(ours + theirs) / wall:.2f} (above 1: both sides busy at once)")


if __name__ == "__main__":
    main()
