"""The reference adapters, looked up by name in esverify.registry (CONTRIBUTING.md, "Adding a reference").

Design record: the oracle core (cases, runner, reports, command line) is
written once against `base.Adapter` and never branches on a reference's
name, as the goldens gate does for golden areas and pytest does for its
plug-ins. A reference's adapter lives in its own package
(`esverify/references/<name>/adapter.py`, or an installed plug-in) and is
imported lazily, so that naming the registry costs nothing and a broken
adapter breaks only the runs that ask for it.
"""
from __future__ import annotations

from pathlib import Path


def __getattr__(name):
    # the base classes (and the torch they pull in) load on first use (PEP 562): `names()` is what
    # `esverify parity --help` needs, and it must cost nothing
    if name in ("Adapter", "Cell", "LoopQuirks", "LoopSpec", "MatrixSpec"):
        from . import base
        return getattr(base, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

def alias_options() -> dict:
    """{reference name: (alias flag, env var, default path)} of each reference whose record declares a
    deprecated per-reference option (esverify.registry.Reference.alias_option): `esverify parity`
    builds its options from here without importing an adapter; `get` checks each adapter against it."""
    from ... import registry
    return {n: tuple(registry.get(n).alias_option) for n in registry.adapter_names()
            if registry.get(n).alias_option}


def names() -> list[str]:
    """The registered adapter names, in report order."""
    from ... import registry
    return registry.adapter_names()


def get(name: str) -> Adapter:
    """The adapter registered under `name` (a record's ReferenceSpec is answered by its SpecAdapter);
    KeyError naming the known adapters."""
    from ... import registry
    from ..spec import ReferenceSpec
    from .base import Adapter
    adapter = registry.adapter(name)
    if isinstance(adapter, ReferenceSpec):
        from .from_spec import adapter_of
        adapter = adapter_of(adapter)
    if not isinstance(adapter, Adapter) or adapter.name != name:   # like numpy's Generator: check it is one
        raise TypeError(f"{registry.get(name).adapter} is not the Adapter named {name!r}")
    declared = registry.get(name).alias_option
    if (adapter.alias_flag or declared) and \
            (adapter.alias_flag, adapter.env_var, str(adapter.default_path)) != tuple(declared or (None,) * 3):
        raise TypeError(f"{registry.get(name).adapter}: its alias_flag {adapter.alias_flag!r} is not its record's "
                        f"alias_option {declared!r}")
    return adapter


def all_adapters() -> list[Adapter]:
    """Every registered adapter, in report order (imports each)."""
    return [get(n) for n in names()]


def loop_ops() -> set:
    """Every adapter's loop op names (the console legend, the loop sections of the report)."""
    return {op for adapter in all_adapters() for op in adapter.loop_ops}


def loop_spec(case):
    """The LoopSpec of the loop case `case`, from its adapter."""
    return get(case.target).loop_spec(case)


def recognise(path) -> list[tuple[Adapter, object]]:
    """[(adapter, CloneInfo or the reason it is not a clone of that adapter (str))] for every adapter.

    One path may be recognised by several adapters (a clone holding both a library and the scripts
    of a paper). The CloneInfo carries the layout's warnings (missing files, commit, licence)."""
    from ..clones import CloneError, inspect_clone
    out = []
    for adapter in all_adapters():
        try:
            out.append((adapter, inspect_clone(adapter, Path(path))))
        except CloneError as exc:
            out.append((adapter, str(exc)))
    return out


def not_recognised_message(path) -> str:
    """The one-line error of a path no adapter recognises: what each adapter looks for."""
    looks = "; ".join(f"{a.name}: {a.looks_for()}" for a in all_adapters())
    return f"{path}: no reference adapter recognises it (looked for {looks})"


__all__ = ["Adapter", "Cell", "LoopQuirks", "LoopSpec", "MatrixSpec", "alias_options", "all_adapters", "get", "loop_ops", "loop_spec",
           "names",
           "not_recognised_message", "recognise"]
