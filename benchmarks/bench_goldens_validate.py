"""Benchmark: validating a golden file of 100,000 small vectors (target under 30 s).

    python benchmarks/bench_goldens_validate.py [--vectors N]

Builds a document of N vectors from the committed rng file's small kinds
(counter, member-seed and stream-seed vectors, each with a distinct id and
seed), then times `esverify.goldens.fileformat.parse` (size and depth
checks, duplicate-key-refusing JSON parse, skeleton-cached schema
validation) against full jsonschema validation of a sample, extrapolated.
Prints seconds and the ratio; asserts nothing.
"""
from __future__ import annotations

import argparse
import copy
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import jsonschema  # noqa: E402

from esverify.goldens import fileformat  # noqa: E402


def build(n: int) -> bytes:
    doc = fileformat.load(Path(__file__).resolve().parents[1] / "goldens" / "rng.json")
    small = [v for v in doc["vectors"] if sum(len(f["values"]) for f in v["expected"].values()) <= 20]
    vectors = []
    for k in range(n):
        v = copy.deepcopy(small[k % len(small)])
        v["id"] = f"v{k}"
        if "seed" in v["inputs"]:
            v["inputs"]["seed"] = f"0x{k:016x}"
        vectors.append(v)
    doc["vectors"] = vectors
    return json.dumps(doc, indent=1, sort_keys=True).encode()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--vectors", type=int, default=100_000)
    args = parser.parse_args()
    raw = build(args.vectors)
    started = time.perf_counter()
    doc = fileformat.parse(raw, "bench")
    fast = time.perf_counter() - started
    print(f"{args.vectors} vectors, {len(raw) / 1e6:.1f} MB: parse + validate {fast:.2f} s "
          f"({fast / args.vectors * 1e6:.0f} us per vector)")
    schema = fileformat._schema()
    full = jsonschema.validators.validator_for(schema)(schema)
    sample = {**doc, "vectors": doc["vectors"][:500]}
    started = time.perf_counter()
    full.validate(sample)
    per = (time.perf_counter() - started) / 500
    print(f"full jsonschema validation: {per * 1e3:.2f} ms per vector, {per * args.vectors:.0f} s extrapolated "
          f"(ratio {per * args.vectors / fast:.0f}x)")


if __name__ == "__main__":
    main()
