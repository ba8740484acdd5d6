"""The registry of references: one package per reference, found by entry point (CONTRIBUTING.md, "Adding a reference").

A leaf module: the core asks it and it imports no module of esverify but by
string, so it sits below every layer that asks it (tests/test_structure.py).

Design record (issue 30): everything esverify knows about a reference on the
parent side lives in one package (`esverify/references/<name>/` for the
built-ins, any installed package for a plug-in), which declares one
`Reference` record. The core (oracle, trainer, goldens gate, replay) asks
this registry for adapters, profiles, golden areas, run-log formats,
straight-line models and seed schedules by name and never names a reference itself, the way pytest finds its
``pytest11`` plug-ins.

Where records come from, in order, de-duplicated by name (first wins):

1. the entry points of the group ``esverify.references`` (the built-ins are
   registered there in pyproject.toml, value ``esverify.references.es_awd:REFERENCE``);
2. every package ``esverify/references/<pkg>/`` of the esverify being run
   that defines ``REFERENCE`` (a source checkout whose installed metadata is
   older than its tree); a package without one is not a reference yet and
   is skipped.

A record's fields after `name` are ``"module:attr"`` strings (attr may be
dotted), imported only when asked for, so that naming the registry costs
nothing and a broken reference breaks only the runs that ask for it.
"""
from __future__ import annotations

import functools
import importlib
import pkgutil
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

GROUP = "esverify.references"
#: the package that holds the built-in references, one sub-package each
BUILTINS = "esverify.references"


@dataclass(frozen=True)
class Reference:
    """One reference's record: its name and where its parts live (``"module:attr"`` strings, loaded lazily).

    name: the reference's name ("es-awd"), the adapter's name and the
    `--ref` report's target. adapter: the `esverify.oracle.adapters.base.Adapter`
    instance (None: no parity adapter). profiles: numerics profiles (a
    Trainer `Profile` or a loop profile), each with its own `name`.
    golden_areas: `esverify.goldens.area.Area` values, each with its own
    `name` (the file stem goldens/<name>.json). runlog_formats: run-log
    readers of `esverify replay` (`esverify.replay.log.RunLogFormat`).
    models: straight-line models of its Trainer profiles
    (`esverify.es.algebra.Model`, numpy, no torch), each with its profile's
    `name`. seed_schedules: the member-seed schedules its loops draw
    (`esverify.es.seeds.SeedSchedule`), each with its own `name`, the value of
    ``Config.seed_schedule`` and of run logs.
    """

    name: str
    adapter: str | None = None
    profiles: tuple = ()
    golden_areas: tuple = ()
    runlog_formats: tuple = ()
    models: tuple = ()
    seed_schedules: tuple = ()
    #: top-level module names of the reference's code (its clone's files and packages) that esverify's own
    #: tree must never import, even when the audit is given no clone (docs/audit.md); generic names
    #: (a clone's `es.py`) are left out, they would flag unrelated modules
    clone_modules: tuple = ()
    #: (flag, environment variable, default path) of a deprecated per-reference option of `esverify parity`
    #: (its adapter's alias_flag, env_var, default_path), read without importing the adapter
    alias_option: tuple | None = None
    #: names of this reference's numerics profiles that `esverify replay --profile` offers, read without
    #: importing them (the choices are built when the command line is parsed)
    replay_profiles: tuple = ()
    #: dotted names of this package's modules its child driver imports (the child gets a copy of each,
    #: with its packages' __init__.py, beside the shared child modules: a child under another Python,
    #: `parity --python`, has no esverify installed); keep them light: numpy, torch and esverify.rng
    child_modules: tuple = ()


def load(spec: str):
    """The object a ``"module:attr"`` string names (attr may be dotted); ImportError/AttributeError otherwise.

    Nothing is cached here beyond Python's modules, so a value replaced in its module is seen."""
    module, _, attr = spec.partition(":")
    obj = importlib.import_module(module)
    for part in filter(None, attr.split(".")):
        obj = getattr(obj, part)
    return obj


def _from_entry_points() -> list:
    out = []
    for ep in metadata.entry_points(group=GROUP):
        ref = ep.load()
        if not isinstance(ref, Reference):
            raise TypeError(f"entry point {ep.name} = {ep.value} (group {GROUP}) is not an esverify Reference")
        out.append(ref)
    return out


def _from_this_tree() -> list:
    out = []
    folder = Path(__file__).with_name(BUILTINS.rpartition(".")[2])     # esverify/references/, not imported here
    for info in sorted(pkgutil.iter_modules([str(folder)]), key=lambda i: i.name):
        if not info.ispkg:
            continue
        ref = getattr(importlib.import_module(f"{BUILTINS}.{info.name}"), "REFERENCE", None)
        if isinstance(ref, Reference):
            out.append(ref)
    return out


@functools.cache
def _records() -> dict:
    found = {}
    for ref in [*_from_entry_points(), *_from_this_tree()]:
        found.setdefault(ref.name, ref)
    return {name: found[name] for name in sorted(found)}


def names() -> list[str]:
    """Every registered reference's name, in report order (sorted)."""
    return list(_records())


def get(name: str) -> Reference:
    """The record registered as `name`; KeyError naming the known references."""
    try:
        return _records()[name]
    except KeyError:
        raise KeyError(f"unknown reference {name!r}; known: {names()}") from None


def _many(field: str) -> dict:
    """{object's name: object} over every reference's `field` strings (imports them)."""
    out = {}
    for ref in _records().values():
        for spec in getattr(ref, field):
            obj = load(spec)
            out.setdefault(obj.name, obj)
    return out


def adapter_names() -> list[str]:
    """The references that have a parity adapter, in report order."""
    return [ref.name for ref in _records().values() if ref.adapter]


def adapter(name: str):
    """The adapter of reference `name` (imports it); KeyError naming the known adapters."""
    ref = _records().get(name)
    if ref is None or not ref.adapter:
        raise KeyError(f"unknown reference {name!r}; known: {adapter_names()}")
    return load(ref.adapter)


def profiles() -> dict:
    """{profile name: profile} of every reference (imports them)."""
    return _many("profiles")


def golden_areas() -> dict:
    """{area name: Area} of every reference (imports them)."""
    return _many("golden_areas")


def runlog_formats() -> dict:
    """{format name: run-log format} of every reference (imports them)."""
    return _many("runlog_formats")


def clone_modules() -> frozenset:
    """Every reference's `clone_modules`, together (imports only the records, not their parts)."""
    return frozenset(m for ref in _records().values() for m in ref.clone_modules)


def child_modules() -> list[str]:
    """Every reference's `child_modules`, in report order (imports only the records)."""
    return [m for ref in _records().values() for m in ref.child_modules]


def replay_profiles() -> list[str]:
    """The profiles `esverify replay --profile` offers: every record's `replay_profiles`, in report order
    (imports no reference module but the records)."""
    return [p for ref in _records().values() for p in ref.replay_profiles]


def models() -> dict:
    """{profile name: straight-line model} of every reference (imports them; numpy only)."""
    return _many("models")


def seed_schedules() -> dict:
    """{schedule name: seed schedule} of every reference (imports them), in report order."""
    return _many("seed_schedules")


class Asked(Mapping):
    """A read-only mapping whose table `table()` computes on every use: the core's name -> part tables
    (profiles, seed schedules' first iterations) asked of this registry, so that a reference registered
    after import (a plug-in, a test's monkeypatch) is seen."""

    def __init__(self, table):
        self._table = table

    def __getitem__(self, name):
        return self._table()[name]

    def __iter__(self):
        return iter(self._table())

    def __len__(self):
        return len(self._table())


def specs() -> list[str]:
    """Every ``"module:attr"`` string of every record (the structure test resolves them)."""
    out = []
    for ref in _records().values():
        out += [s for s in (ref.adapter, *ref.profiles, *ref.golden_areas, *ref.runlog_formats, *ref.models,
                            *ref.seed_schedules) if s]
    return out


__all__ = ["Asked", "BUILTINS", "GROUP", "Reference", "adapter", "adapter_names", "clone_modules", "get", "golden_areas", "load",
           "models", "names", "profiles", "replay_profiles", "runlog_formats", "seed_schedules", "specs"]
