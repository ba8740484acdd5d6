"""The registry of references: one package per reference, found by entry point (CONTRIBUTING.md, "Adding a reference").

A leaf module: the core asks it and it imports no module of esverify but by
string, so it sits below every layer that asks it (tests/test_structure.py).

Design record: everything esverify knows about a reference on the
parent side lives in one package (`esverify/references/<name>/` for the
built-ins, any installed package for a plug-in), which declares one
`Reference` record. The core (oracle, trainer, goldens gate, replay) asks
this registry for adapters, profiles, golden areas, run-log formats,
straight-line models and seed schedules by name and never names a reference itself, the way pytest finds its
``pytest11`` plug-ins.

Where records come from:

1. the built-ins: every package ``esverify/references/<pkg>/`` of the
   esverify being run that defines ``REFERENCE`` (a package without one is
   not a reference yet and is skipped). They are also registered as entry
   points in pyproject.toml (value ``esverify.references.es_awd:REFERENCE``);
   an entry point whose object is a built-in's record is that record.
2. the plug-ins: the other entry points of the group ``esverify.references``,
   each loaded and validated on its own when the registry is first asked
   (`Reference.problems`: the record's shape; its golden areas' names
   against the built-ins'), as pluggy's `register` does, not when a row
   first calls it. An entry point that raises while it loads, or whose
   object is not a valid record, is left out with one warning line naming
   it and its distribution (`problems`); every command that does not need
   it runs, and one that does (`get`, `adapter`) gets that line.
   A name claimed twice is never settled silently: a built-in keeps its
   name (and its golden areas' names) against any plug-in, two plug-ins
   that claim one name are both left out, and each conflict is a line of
   `problems`, which every report carries.

A record's fields after `name` are ``"module:attr"`` strings (attr may be
dotted), imported only when asked for, so that naming the registry costs
nothing and a broken reference breaks only the runs that ask for it.
"""
from __future__ import annotations

import dataclasses
import functools
import importlib
import pkgutil
import sys
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


#: the record's fields that hold ``"module:attr"`` strings (a tuple of them each)
SPEC_FIELDS = ("profiles", "golden_areas", "runlog_formats", "models", "seed_schedules")
#: its fields that hold plain names (a tuple of str each)
NAME_FIELDS = ("clone_modules", "replay_profiles", "child_modules")
#: where the golden areas that belong to no reference are named (the RNG contract's `rng`), read by string
CONTRACT_AREAS = "esverify.goldens.areas:CONTRACT_AREAS"


def shape_problems(ref) -> list[str]:
    """What is wrong with the shape of record `ref` (a plug-in's entry point object), in words; [] when
    it is a `Reference` whose fields have the types its docstring gives. Imports nothing."""
    if not isinstance(ref, Reference):
        return [f"its object is a {type(ref).__name__}, not an esverify Reference"]
    out = []
    if not isinstance(ref.name, str) or not ref.name.strip() or ref.name != ref.name.strip():
        out.append(f"its name {ref.name!r} is not a non-empty name")
    if ref.adapter is not None and not _is_spec(ref.adapter):
        out.append(f"its adapter {ref.adapter!r} is not a \"module:attr\" string")
    for name in SPEC_FIELDS + NAME_FIELDS:
        value = getattr(ref, name)
        check = _is_spec if name in SPEC_FIELDS else (lambda v: isinstance(v, str) and bool(v))
        if not isinstance(value, tuple) or not all(check(v) for v in value):
            out.append(f"its {name} is not a tuple of " + ("\"module:attr\" strings" if name in SPEC_FIELDS
                                                           else "names"))
    option = ref.alias_option
    if option is not None and (not isinstance(option, tuple) or len(option) != 3):
        out.append("its alias_option is not (flag, environment variable, default path)")
    return out


def _is_spec(value) -> bool:
    return isinstance(value, str) and ":" in value and bool(value.partition(":")[0])


def load(spec: str):
    """The object a ``"module:attr"`` string names (attr may be dotted); ImportError/AttributeError otherwise.

    Nothing is cached here beyond Python's modules, so a value replaced in its module is seen."""
    module, _, attr = spec.partition(":")
    obj = importlib.import_module(module)
    for part in filter(None, attr.split(".")):
        obj = getattr(obj, part)
    return obj


def _cause(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return type(exc).__name__ + (f": {text[:300]}" if text else "")


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


@dataclass
class _Registry:
    records: dict                                        #: name -> Reference, in report order
    builtins: frozenset                                  #: the built-ins' names
    problems: list = dataclasses.field(default_factory=list)   #: one line per plug-in problem
    unusable: dict = dataclasses.field(default_factory=dict)   #: name -> the line saying why it is left out


def _entry_points() -> list:
    """(entry point, distribution name) of the group, in discovery order."""
    out = []
    for ep in metadata.entry_points(group=GROUP):
        dist = getattr(getattr(ep, "dist", None), "name", None) or "an unknown distribution"
        out.append((ep, dist))
    return out


def _area_names(specs, problems: list, who: str) -> dict:
    """{area name: spec} of `specs`, each loaded; one that does not load is a line of `problems`."""
    out = {}
    for spec in specs:
        try:
            out[load(spec).name] = spec
        except Exception as exc:   # a plug-in's area that cannot load: named, the rest of the plug-in kept
            problems.append(f"{who}: its golden area {spec} cannot be loaded ({_cause(exc)}); the area is left out")
    return out


def _checked_areas(ref, who: str, taken: set, problems: list) -> Reference:
    """`ref` with the golden areas whose names are already `taken` (a built-in's, the contract's, another
    plug-in's) left out, each named in `problems`; the names it keeps are added to `taken`."""
    keep = []
    for name, spec in _area_names(ref.golden_areas, problems, who).items():
        if name in taken:
            problems.append(f"{who}: its golden area {name!r} ({spec}) has the name of an area already registered; "
                            f"the registered one keeps it (goldens/{name}.json is checked against it) and the "
                            f"plug-in's is left out")
            continue
        taken.add(name)
        keep.append(spec)
    return ref if tuple(keep) == ref.golden_areas else dataclasses.replace(ref, golden_areas=tuple(keep))


def _build() -> _Registry:
    builtins = _from_this_tree()
    state = _Registry(records={}, builtins=frozenset(r.name for r in builtins))
    own = {id(r) for r in builtins}
    claims: dict = {}                     # plug-in name -> [(who, record)]
    for ep, dist in _entry_points():
        who = f"plug-in entry point {ep.name} = {ep.value} (distribution {dist}, group {GROUP})"
        try:
            ref = ep.load()
        except Exception as exc:   # a missing dependency, an import error: this plug-in only
            line = f"{who} cannot be loaded: {_cause(exc)}; it is left out"
            state.problems.append(line)
            state.unusable.setdefault(ep.name, line)
            continue
        if id(ref) in own:                # a built-in's own registration (pyproject.toml)
            continue
        wrong = shape_problems(ref)
        if wrong:
            line = f"{who} is not a valid reference: {'; '.join(wrong)}; it is left out"
            state.problems.append(line)
            state.unusable.setdefault(ep.name, line)
            continue
        if ref.name in state.builtins:
            state.problems.append(f"{who} registers the name {ref.name!r}, which is a built-in reference's; the "
                                  f"built-in keeps the name and the plug-in is not used")
            continue
        claims.setdefault(ref.name, []).append((who, ref))
    for ref in builtins:
        state.records[ref.name] = ref
    taken = None
    for name, found in claims.items():
        if len({id(ref) for _, ref in found}) > 1:
            line = (f"the reference name {name!r} is registered by more than one plug-in ("
                    + "; ".join(who for who, _ in found) + "); none of them is used: uninstall all but one")
            state.problems.append(line)
            state.unusable[name] = line
            continue
        who, ref = found[0]
        if len(found) > 1:
            state.problems.append(f"the reference {name!r} is registered by {len(found)} entry points with the "
                                  f"same record (" + "; ".join(w for w, _ in found) + "); it is used once")
        if ref.golden_areas:
            if taken is None:             # the built-ins' area names, imported only when a plug-in has areas
                taken = set(load(CONTRACT_AREAS))
                for b in builtins:
                    taken |= set(_area_names(b.golden_areas, state.problems, f"built-in reference {b.name}"))
            ref = _checked_areas(ref, who, taken, state.problems)
        state.records[name] = ref
    state.records = {name: state.records[name] for name in sorted(state.records)}
    for line in state.problems:   # said once per process; every report carries them too (`problems`)
        print(f"esverify: warning: {line}", file=sys.stderr)
    return state


@functools.cache
def _state() -> _Registry:
    return _build()


def _records() -> dict:
    return _state().records


def problems() -> list[str]:
    """One line per plug-in problem met while registering: an entry point that cannot be loaded or is not
    a valid record, a name or a golden area's name claimed twice. Every report carries them (parity's
    warnings, the goldens gate's and replay's metadata); [] when there is none."""
    return list(_state().problems)


def unusable(name: str) -> str | None:
    """The line saying why the plug-in reference or entry point `name` is left out, or None."""
    return _state().unusable.get(name)


def builtin_names() -> list[str]:
    """The built-in references' names (the packages of esverify/references/), in report order."""
    return sorted(_state().builtins)


def names() -> list[str]:
    """Every registered reference's name, in report order (sorted)."""
    return list(_records())


class UnknownReference(KeyError):
    """No usable record under a name: unknown, or a plug-in left out (its line from `problems`). str() is
    the one-line message (not KeyError's quoted repr)."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


def get(name: str) -> Reference:
    """The record registered as `name`; UnknownReference (a KeyError) naming the known references, or the
    line saying why a plug-in of that name is left out."""
    try:
        return _records()[name]
    except KeyError:
        raise UnknownReference(unusable(name) or f"unknown reference {name!r}; known: {names()}") from None


def _many(field: str) -> dict:
    """{object's name: object} over every reference's `field` strings (imports them), the built-ins' first:
    a plug-in's part never takes a built-in's name (a clash is a line of `problems`, said once)."""
    state = _state()
    out, owner = {}, {}
    ordered = sorted(state.records.values(), key=lambda r: (r.name not in state.builtins, r.name))
    for ref in ordered:
        for spec in getattr(ref, field):
            obj = load(spec)
            if obj.name in out and owner[obj.name] != ref.name:
                line = (f"plug-in reference {ref.name}: its {field[:-1].replace('_', ' ')} {obj.name!r} ({spec}) has "
                        f"the name of reference {owner[obj.name]}'s, which keeps it; the plug-in's is not used")
                if line not in state.problems:
                    state.problems.append(line)
                    print(f"esverify: warning: {line}", file=sys.stderr)
                continue
            out.setdefault(obj.name, obj)
            owner.setdefault(obj.name, ref.name)
    return out


def adapter_names() -> list[str]:
    """The references that have a parity adapter, in report order."""
    return [ref.name for ref in _records().values() if ref.adapter]


def adapter(name: str):
    """The adapter of reference `name` (imports it); KeyError naming the known adapters."""
    ref = _records().get(name)
    if ref is None or not ref.adapter:
        raise UnknownReference(unusable(name) or f"unknown reference {name!r}; known: {adapter_names()}")
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


__all__ = ["Asked", "BUILTINS", "GROUP", "Reference", "UnknownReference", "adapter", "adapter_names", "builtin_names",
           "clone_modules", "get", "golden_areas", "load", "models", "names", "problems", "profiles", "replay_profiles",
           "runlog_formats", "seed_schedules", "shape_problems", "specs", "unusable"]
