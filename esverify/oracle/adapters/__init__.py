"""The registry of reference adapters: name -> module, imported only when asked (CONTRIBUTING.md, "Adding a reference").

Design record: the oracle core (cases, runner, reports, command line) is
written once against `base.Adapter` and never branches on a reference's
name, as esverify.goldens.area does for golden areas and pytest does for
its plug-ins. A reference is one module under this package defining
`ADAPTER` (an `Adapter` instance); registering it is one line in
ADAPTER_MODULES. Modules are imported lazily so that naming the registry
costs nothing and a broken adapter breaks only the runs that ask for it.
"""
from __future__ import annotations

import importlib
from pathlib import Path


def __getattr__(name):
    # the base classes (and the torch they pull in) load on first use (PEP 562): `names()` is what
    # `esverify parity --help` needs, and it must cost nothing
    if name in ("Adapter", "Cell", "LoopSpec", "MatrixSpec"):
        from . import base
        return getattr(base, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

#: adapter name -> module defining `ADAPTER`; imported only when asked for. Order is report order.
ADAPTER_MODULES = {
    "es-at-scale": "esverify.oracle.adapters.es_at_scale",
    "es-awd": "esverify.oracle.adapters.es_awd",
    "es-paper": "esverify.oracle.adapters.es_paper",
    "skill-sample": "esverify.oracle.adapters.skill_sample",
}

#: adapter name -> (alias_flag, env_var, default_path) of each adapter with a deprecated per-reference
#: option: `esverify parity` builds its options from here without importing the adapters; `get`
#: checks each adapter against it
ALIAS_OPTIONS = {
    "es-awd": ("--awd-ref", "ESVERIFY_AWD_REF", "refs/es-awd"),
}


def names() -> list[str]:
    """The registered adapter names, in report order."""
    return list(ADAPTER_MODULES)


def get(name: str) -> Adapter:
    """The adapter registered under `name`; KeyError naming the known adapters."""
    if name not in ADAPTER_MODULES:
        raise KeyError(f"unknown reference {name!r}; known: {names()}")
    from .base import Adapter
    adapter = importlib.import_module(ADAPTER_MODULES[name]).ADAPTER
    if not isinstance(adapter, Adapter) or adapter.name != name:   # like numpy's Generator: check it is one
        raise TypeError(f"{ADAPTER_MODULES[name]}.ADAPTER is not the Adapter named {name!r}")
    if adapter.alias_flag and (adapter.alias_flag, adapter.env_var, str(adapter.default_path)) != ALIAS_OPTIONS.get(name):
        raise TypeError(f"{ADAPTER_MODULES[name]}.ADAPTER: its alias_flag {adapter.alias_flag!r} is not in ALIAS_OPTIONS")
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


__all__ = ["ADAPTER_MODULES", "ALIAS_OPTIONS", "Adapter", "Cell", "LoopSpec", "MatrixSpec", "all_adapters", "get", "loop_ops", "loop_spec", "names",
           "not_recognised_message", "recognise"]
