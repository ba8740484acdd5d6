"""The registry of references: one package per reference, found by entry point (CONTRIBUTING.md, "Adding a reference").

A leaf module: the core asks it, and it imports no module of esverify but
the record type (esverify.record) and, by string, what it registers, so it
sits below every layer that asks it (tests/test_structure.py). The reference
packages import the record type, never this module: the registry's loads of
them by name close no circle.

Design record: everything esverify knows about a reference on the
parent side lives in one package (`esverify/references/<name>/` for the
built-ins, any installed package for a plug-in), which declares one
`Reference` record. This is the one place that maps a name to a part: the
core (oracle, trainer, goldens gate, replay) asks it for adapters, profiles,
golden areas (the contract's `rng` among them, `CONTRACT_AREAS`), run-log
formats, straight-line models and seed schedules by name and never names a
reference itself, the way pytest finds its ``pytest11`` plug-ins. No name is
settled by order: a plug-in's part under a name already registered is left
out with a line of `problems`, two of esverify's own under one name are a
`RegistryError`, and a run log two formats recognise is `AmbiguousLog`.

Where records come from:

1. the built-ins: every package ``esverify/references/<pkg>/`` of the
   esverify being run that defines ``REFERENCE`` (a package without one is
   not a reference yet and is skipped). They are also registered as entry
   points in pyproject.toml (value ``esverify.references.es_awd:REFERENCE``);
   an entry point whose object is a built-in's record is that record.
2. the plug-ins: the other entry points of the group ``esverify.references``,
   each loaded and validated on its own when the registry is first asked
   (`record.shape_problems`: the record's shape; its golden areas' names
   against the built-ins'), as pluggy's `register` does, not when a row
   first calls it. An entry point that raises while it loads, or whose
   object is not a valid record, is left out with one warning line naming
   it and its distribution (`problems`); every command that does not need
   it runs, and one that does (`get`, `adapter`) gets that line.
   A name claimed twice is never settled silently: a built-in keeps its
   name (and its golden areas' names) against any plug-in, two plug-ins
   that claim one name are both left out, and each conflict is a line of
   `problems`, which every report carries.

A record's part fields (adapter, profiles, golden_areas, runlog_formats, models,
seed_schedules) are ``"module:attr"`` strings (attr may be dotted), imported only when asked
for, so that naming the registry costs
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

from .record import GROUP, Reference, shape_problems

#: the package that holds the built-in references, one sub-package each
BUILTINS = "esverify.references"


#: the golden areas that belong to no reference (the RNG contract's `rng`), loaded by string like the records'
#: parts; they are registered first and keep their names against every reference's
CONTRACT_AREAS = ("esverify.goldens.rng_area:AREA",)


class RegistryError(RuntimeError):
    """Two records or parts of this tree (the contract's, the built-ins') declare one name: a fault of
    esverify itself, raised where they are first asked for, never settled by keeping one of them."""


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


def _area_names(specs, problems: list, who: str) -> list:
    """[(area name, spec)] of `specs`, each loaded; one that does not load is a line of `problems`."""
    out = []
    for spec in specs:
        try:
            out.append((load(spec).name, spec))
        except Exception as exc:   # a plug-in's area that cannot load: named, the rest of the plug-in kept
            problems.append(f"{who}: its golden area {spec} cannot be loaded ({_cause(exc)}); the area is left out")
    return out


def _checked_areas(ref, who: str, taken: set, problems: list) -> Reference:
    """`ref` with the golden areas whose names are already `taken` (a built-in's, the contract's, another
    plug-in's, one of its own) left out, each named in `problems`; the names it keeps are added to `taken`."""
    keep = []
    for name, spec in _area_names(ref.golden_areas, problems, who):
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
        if ref.name in state.records:      # two packages of this tree under one name: neither is kept silently
            raise RegistryError(f"the reference name {ref.name!r} is declared by two built-in packages of "
                                f"{BUILTINS}: {state.records[ref.name]} and {ref}")
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
                taken = {load(spec).name for spec in CONTRACT_AREAS}
                for b in builtins:
                    taken |= {n for n, _ in _area_names(b.golden_areas, state.problems, f"built-in reference {b.name}")}
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


def _parts(field: str) -> dict:
    """{part's name: (its "module:attr" string, the part)} over every reference's `field` strings (imports
    them), the contract's areas first (`golden_areas` only), then the built-ins', then the plug-ins', each in
    report order. A plug-in's part never takes a name already registered (a line of `problems`, said once,
    and the part left out); two parts of the contract or the built-ins under one name are a RegistryError."""
    state = _state()
    owners = [("the contract", CONTRACT_AREAS if field == "golden_areas" else (), True)]
    owners += [(f"reference {ref.name}", getattr(ref, field), ref.name in state.builtins)
               for ref in sorted(state.records.values(), key=lambda r: (r.name not in state.builtins, r.name))]
    out, owner = {}, {}
    what = field[:-1].replace("_", " ")
    for who, specs, own in owners:
        for spec in specs:
            obj = load(spec)
            if obj.name not in out:
                out[obj.name], owner[obj.name] = (spec, obj), who
                continue
            if own:
                raise RegistryError(f"the {what} name {obj.name!r} is declared twice: by {owner[obj.name]} "
                                    f"({out[obj.name][0]}) and by {who} ({spec})")
            line = (f"plug-in {who}: its {what} {obj.name!r} ({spec}) has the name of {owner[obj.name]}'s "
                    f"({out[obj.name][0]}), which keeps it; the plug-in's is not used")
            if line not in state.problems:
                state.problems.append(line)
                print(f"esverify: warning: {line}", file=sys.stderr)
    return out


def _many(field: str) -> dict:
    """{part's name: part} of `_parts(field)`."""
    return {name: obj for name, (_, obj) in _parts(field).items()}


class UnknownPart(KeyError):
    """No registered part of a kind under a name. str() is the one-line message naming the known ones."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


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
    """{area name: Area} of the contract (`rng`) and of every reference, in report order (imports them)."""
    return _many("golden_areas")


def golden_area_specs() -> dict:
    """{area name: the "module:attr" string of its Area}, in the order of `golden_areas` (imports them: an
    area's name is its Area's own)."""
    return {name: spec for name, (spec, _) in _parts("golden_areas").items()}


def golden_area(name: str):
    """The `esverify.goldens.area.Area` registered as `name` (imports it); UnknownPart (a KeyError) naming
    the known areas; the import's own error for an area whose module does not import."""
    specs = golden_area_specs()
    if name not in specs:
        raise UnknownPart(f"unknown golden area {name!r}; known: {sorted(specs)}")
    return load(specs[name])


def runlog_formats() -> dict:
    """{format name: run-log format} of every reference (imports them)."""
    return _many("runlog_formats")


class AmbiguousLog(ValueError):
    """A run log that more than one registered run-log format recognises (one line naming them)."""


def runlog_format_for(log):
    """The one registered run-log format (`esverify.replay.log.RunLogFormat`) whose `detect` recognises the
    log folder `log` (a path), or None when none does (a trainer log, or an error the reader names).
    AmbiguousLog (a ValueError) when several do: which one replays it is never decided by their order."""
    found = [fmt for fmt in runlog_formats().values() if fmt.detect(log)]
    if len(found) > 1:
        raise AmbiguousLog(f"the run log is recognised by more than one run-log format "
                           f"({', '.join(f.name for f in found)}); remove the reference that should not claim it")
    return found[0] if found else None


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
    """A read-only mapping whose table `table()` computes on every use: the core's views of this registry
    (profiles, seed schedules' first iterations, golden areas' modules), so that a reference registered
    after import (a plug-in, a test's monkeypatch) is seen; the views hold no table of their own."""

    def __init__(self, table):
        self._table = table

    def __getitem__(self, name):
        return self._table()[name]

    def __iter__(self):
        return iter(self._table())

    def __len__(self):
        return len(self._table())


def specs() -> list[str]:
    """Every ``"module:attr"`` string this registry may load: the contract's areas and every record's (the
    structure test resolves them)."""
    out = list(CONTRACT_AREAS)
    for ref in _records().values():
        out += [s for s in (ref.adapter, *ref.profiles, *ref.golden_areas, *ref.runlog_formats, *ref.models,
                            *ref.seed_schedules) if s]
    return out


__all__ = ["AmbiguousLog", "Asked", "BUILTINS", "CONTRACT_AREAS", "GROUP", "Reference", "RegistryError", "UnknownPart",
           "UnknownReference", "adapter", "adapter_names", "builtin_names", "clone_modules", "get", "golden_area",
           "golden_area_specs", "golden_areas", "load", "models", "names", "problems", "profiles", "replay_profiles",
           "runlog_format_for", "runlog_formats", "seed_schedules", "shape_problems", "specs", "unusable"]
