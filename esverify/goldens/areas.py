"""The registry of golden areas: name -> where its `Area` lives, imported only when asked for (docs/goldens.md).

The contract's own area (`rng`) is listed here; every reference's areas come
from its package through esverify.registry, so nothing here names a
reference. The gate and `goldens generate` ask this module, never an area's
module directly.
"""
from __future__ import annotations

import importlib
from collections.abc import MutableMapping

from .area import Area

#: the areas that belong to no reference (the RNG contract's)
CONTRACT_AREAS = {"rng": "esverify.goldens.rng_area"}


class _AreaModules(MutableMapping):
    """area name -> "module" (defining `AREA` or `AREAS`) or "module:attr"; filled on first use.

    Mutable so that a test can register a stand-in area with monkeypatch.setitem."""

    def __init__(self):
        self._table = None

    def _filled(self) -> dict:
        if self._table is None:
            from .. import registry
            table = dict(CONTRACT_AREAS)
            for ref in registry.names():
                for spec in registry.get(ref).golden_areas:
                    table.setdefault(_area_name(spec), spec)
            self._table = table
        return self._table

    def __getitem__(self, name):
        return self._filled()[name]

    def __setitem__(self, name, value):
        self._filled()[name] = value

    def __delitem__(self, name):
        del self._filled()[name]

    def __iter__(self):
        return iter(self._filled())

    def __len__(self):
        return len(self._filled())


def _area_name(spec: str) -> str:
    from .. import registry
    return registry.load(spec).name


#: area name -> where its Area lives; imported only when asked for. Order is report order.
AREA_MODULES = _AreaModules()


def get_area(name: str) -> Area:
    """The Area registered under `name`; KeyError names the known areas."""
    if name not in AREA_MODULES:
        raise KeyError(f"unknown golden area {name!r}; known: {sorted(AREA_MODULES)}")
    spec = AREA_MODULES[name]
    if ":" in spec:
        from .. import registry
        return registry.load(spec)
    module = importlib.import_module(spec)
    areas = getattr(module, "AREAS", None) or {module.AREA.name: module.AREA}
    return areas[name]


def area_names() -> list[str]:
    return list(AREA_MODULES)
