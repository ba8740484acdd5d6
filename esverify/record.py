"""A reference's record: the `Reference` type and its shape check (CONTRIBUTING.md, "Adding a reference").

A leaf module that imports nothing of esverify: a reference package imports it
to declare itself, and the registry (esverify.registry) imports it to check
what it finds. Neither imports the other, so the registry's loads of the
reference packages by name close no circle.
"""
from __future__ import annotations

from dataclasses import dataclass

#: the entry-point group a reference registers in (the built-ins in pyproject.toml, a plug-in in its own)
GROUP = "esverify.references"


@dataclass(frozen=True)
class Reference:
    """One reference's record: its name and where its parts live (``"module:attr"`` strings, loaded lazily).

    name: the reference's name ("es-awd"), the adapter's name and the
    `--ref` report's target. adapter: names its `esverify.oracle.spec.ReferenceSpec` (or,
    for an older plug-in, an `esverify.oracle.adapters.base.Adapter` instance; None: no parity adapter).
    profiles: numerics profiles (a
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


def is_spec(value) -> bool:
    """True when `value` is a ``"module:attr"`` string (attr may be empty or dotted)."""
    return isinstance(value, str) and ":" in value and bool(value.partition(":")[0])


def shape_problems(ref) -> list[str]:
    """What is wrong with the shape of record `ref` (a plug-in's entry point object), in words; [] when
    it is a `Reference` whose fields have the types its docstring gives. Imports nothing."""
    if not isinstance(ref, Reference):
        return [f"its object is a {type(ref).__name__}, not an esverify Reference"]
    out = []
    if not isinstance(ref.name, str) or not ref.name.strip() or ref.name != ref.name.strip():
        out.append(f"its name {ref.name!r} is not a non-empty name")
    if ref.adapter is not None and not is_spec(ref.adapter):
        out.append(f"its adapter {ref.adapter!r} is not a \"module:attr\" string")
    for name in SPEC_FIELDS + NAME_FIELDS:
        value = getattr(ref, name)
        check = is_spec if name in SPEC_FIELDS else (lambda v: isinstance(v, str) and bool(v))
        if not isinstance(value, tuple) or not all(check(v) for v in value):
            out.append(f"its {name} is not a tuple of " + ("\"module:attr\" strings" if name in SPEC_FIELDS
                                                           else "names"))
    option = ref.alias_option
    if option is not None and (not isinstance(option, tuple) or len(option) != 3):
        out.append("its alias_option is not (flag, environment variable, default path)")
    return out


__all__ = ["GROUP", "NAME_FIELDS", "Reference", "SPEC_FIELDS", "is_spec", "shape_problems"]
