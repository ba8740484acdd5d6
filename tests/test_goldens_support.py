"""Helpers shared by the goldens tests (no tests here).

Tests never touch the committed goldens: they copy them into a temporary
folder and point the gate at it with --goldens-dir. `run` invokes the
real click command in-process and returns (exit code, output).
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

from click.testing import CliRunner

from esverify import registry
from esverify.cli import main
from esverify.goldens import areas as area_mod
from esverify.goldens.area import Area

ROOT = Path(__file__).resolve().parent.parent
COMMITTED = ROOT / "goldens"


def run(*args: str, env: dict | None = None):
    """Run `esverify <args>` in-process; returns the click Result (exit_code, output, stderr)."""
    runner = CliRunner()
    env = {"ESVERIFY_GOLDENS_DIR": None, **(env or {})}
    return runner.invoke(main, list(args), env=env, catch_exceptions=False)


def copy_goldens(dest: Path, areas=("rng",), keep=None) -> Path:
    """Copy committed golden files into `dest` (created); returns `dest`.

    keep: a predicate on a vector (its dict); when given, each copied file holds only the vectors it keeps
    (in their order), so that a test planting a fault pays only for the vectors it asserts on. Every kept
    vector is recomputed exactly as in the whole file: the gate checks each vector on its own. The copy is
    compact JSON (the gate reads any JSON; the canonical form's indent would take Python's slow encoder).
    """
    dest.mkdir(parents=True, exist_ok=True)
    for name in areas:
        if keep is None:
            shutil.copy(COMMITTED / f"{name}.json", dest / f"{name}.json")
            continue
        doc = load(COMMITTED / f"{name}.json")
        doc["vectors"] = [v for v in doc["vectors"] if keep(v)]
        assert doc["vectors"], f"{name}.json: the filter kept no vector"
        (dest / f"{name}.json").write_text(json.dumps(doc, sort_keys=True))
    return dest


def of_kind(*kinds: str):
    """A `copy_goldens` filter keeping the vectors whose inputs.kind is one of `kinds`."""
    return lambda vector: vector["inputs"]["kind"] in kinds


def without_kind(*kinds: str):
    """A `copy_goldens` filter keeping every vector except those whose inputs.kind is one of `kinds`."""
    return lambda vector: vector["inputs"]["kind"] not in kinds


def load(path: Path) -> dict:
    return json.loads(Path(path).read_text())


def save(path: Path, doc: dict) -> None:
    Path(path).write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")


def vector(doc: dict, vid: str) -> dict:
    return next(v for v in doc["vectors"] if v["id"] == vid)


def flip_bit(doc: dict, vid: str, field: str, element: int, bit: int = 0) -> None:
    """Flip one bit of one expected value, in place."""
    values = vector(doc, vid)["expected"][field]["values"]
    width = len(values[element]) - 2
    values[element] = f"0x{int(values[element], 16) ^ (1 << bit):0{width}x}"


class ToyArea:
    """A tiny golden area registered under a test-only name, for generate's rules.

    Its vectors and version are mutable attributes, so a test can change
    the "implementation" between two `generate` runs.
    """

    def __init__(self, name="toy", version=1):
        self.name, self.version = name, version
        self.values = {"one": [1, 2, 3], "two": [4]}
        self.comments = {}

    def vectors(self):
        return [{"id": k, "comment": self.comments.get(k, f"toy vector {k}"), "inputs": {"n": len(v)},
                 "expected": {"values": {"format": "u32", "values": [f"0x{x:08x}" for x in v]}}}
                for k, v in self.values.items()]

    def area(self) -> Area:
        return Area(self.name, self.version, "tests.ToyArea.version", self.vectors,
                    lambda: ["python"], lambda vec, backend: vec["expected"])


def register_area(monkeypatch, name: str, spec: str) -> None:
    """Register an area `name` whose Area `spec` ("module:attr") names, in esverify.registry, for the
    duration of a test (the registry maps every area's name; nothing else holds a table of them)."""
    original = registry.golden_area_specs
    monkeypatch.setattr(registry, "golden_area_specs", lambda: {**original(), name: spec})


def register_toy(monkeypatch, toy: ToyArea) -> None:
    """Register `toy` in the area registry for the duration of a test.

    get_area is wrapped so that edits of `toy` between runs are visible.
    """
    register_area(monkeypatch, toy.name, "tests.toy:in-memory")
    original = area_mod.get_area
    monkeypatch.setattr(area_mod, "get_area", lambda name: toy.area() if name == toy.name else original(name))


__all__ = ["ROOT", "COMMITTED", "run", "copy_goldens", "of_kind", "without_kind", "load", "save", "vector", "flip_bit",
           "ToyArea", "register_area", "register_toy"]
