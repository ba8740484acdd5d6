"""The reference adapters, looked up by name in esverify.references (CONTRIBUTING.md, "Adding a reference").

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

from .base import Adapter, Cell, LoopSpec, MatrixSpec

def names() -> list[str]:
    """The registered adapter names, in report order."""
    from ... import references
    return references.adapter_names()


def get(name: str) -> Adapter:
    """The adapter registered under `name`; KeyError naming the known adapters."""
    from ... import references
    adapter = references.adapter(name)
    if not isinstance(adapter, Adapter) or adapter.name != name:   # like numpy's Generator: check it is one
        raise TypeError(f"{references.get(name).adapter} is not the Adapter named {name!r}")
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


__all__ = ["Adapter", "Cell", "LoopSpec", "MatrixSpec", "all_adapters", "get", "loop_ops", "loop_spec", "names",
           "not_recognised_message", "recognise"]
