"""The EGGROLL stand-in's mutants (tests/standins/eggroll_mutants.py) change exactly the parts of the eggroll
driver's collected output their entries say, against the unmutated stand-in, on two in-process runs
through `main` with torch's own noise (see the catalog's docstring); the equivalents change nothing that
decides behaviour (at most the factors' bits)."""
from __future__ import annotations

import hashlib
import py_compile
import sys

import pytest

import child_files
from standins.eggroll_mutants import EQUIVALENTS, MUTANTS, PARTS, TARGET, EggrollMutant
from standins.mutants import STANDINS, make_variant

driver = child_files.driver("eggroll")

ALL = {**MUTANTS, **EQUIVALENTS}
BASE = dict(population_size=4, num_iterations=3, steps_per_adapter=2, sigma=0.01, learning_rate=0.05, base_seed=3,
            normalize_with_std=True, save_freq=None)
RUNS = {"f32-r1": ("f32", dict(BASE, lora_r=1)), "bf16-r2": ("bf16", dict(BASE, lora_r=2))}


def parts(reply) -> dict:
    """The collected output, part by part (see the catalog's docstring), as comparable values."""
    tape = reply["tape"]
    steps = tape["steps"]

    def digest(paths):
        h = hashlib.sha256()
        for path in paths:
            with open(path, "rb") as f:
                import numpy as np
                with np.load(f) as data:
                    for key in sorted(data.files):
                        h.update(key.encode() + data[key].tobytes())
        return h.hexdigest()

    return {"rewards": [s["rewards"] for s in steps],
            "ba": [[m["ba_sha256"] for m in s["members"]] for s in steps],
            "factors": [[m["factors_sha256"] for m in s["members"]] for s in steps],
            "fitnesses": [(s["update"]["fitnesses"], s["update"]["pair_differences"]) for s in steps],
            "weights": digest([s["engines_after"] for s in steps] + [reply["results"]]),
            "updates": tape["updates"]}


def run_parts(tmp_path, clone, name) -> dict:
    dtype, args = RUNS[name]
    case = {"out": str(tmp_path / name), "dtype": dtype, "engines": 2, "noise": "native", "init_seed": 11,
            "init_std": 0.5, "targets": [0.25, -0.5], "args": args}
    return parts(driver.run(case, clone))


_BASELINE: dict = {}


def baseline(tmp_path, name):
    if name not in _BASELINE:
        _BASELINE[name] = run_parts(tmp_path / "baseline", STANDINS / TARGET, name)
    return _BASELINE[name]


def test_mutant_names_are_unique_and_parts_known():
    assert len(ALL) == len(MUTANTS) + len(EQUIVALENTS)
    for mutant in ALL.values():
        assert set(mutant.shows) | set(mutant.maybe) <= set(PARTS) and mutant.what and mutant.reveals
    assert all(set(m.shows) <= {"factors"} for m in EQUIVALENTS.values())


@pytest.mark.parametrize("name", sorted(ALL))
def test_each_mutant_applies_once_and_compiles(tmp_path, name):
    mutant: EggrollMutant = ALL[name]
    clone = make_variant(tmp_path, mutant.target, mutant.edits)
    for rel in {rel for rel, _, _ in mutant.edits}:
        assert (clone / rel).read_text() != (STANDINS / mutant.target / rel).read_text()
        py_compile.compile(str(clone / rel), cfile=str(tmp_path / "compiled.pyc"), doraise=True)


@pytest.mark.parametrize("name", sorted(ALL))
@pytest.mark.slow   # 2 s (--durations, 2026-12-03): out of the fast tier
def test_each_mutant_changes_exactly_the_parts_its_entry_says(tmp_path, name):
    mutant: EggrollMutant = ALL[name]
    clone = make_variant(tmp_path / "clone", mutant.target, mutant.edits)
    differs = set()
    for run in RUNS:
        got, want = run_parts(tmp_path / "mutant", clone, run), baseline(tmp_path, run)
        differs |= {part for part in PARTS if got[part] != want[part]}
    differs -= set(mutant.maybe)
    assert sorted(differs) == sorted(mutant.shows), f"{name}: {mutant.what}"
