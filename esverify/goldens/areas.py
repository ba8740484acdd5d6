"""The golden areas as the gate and `goldens generate` ask for them: a thin view of esverify.registry (docs/goldens.md).

The registry is the one place that maps an area's name to its `Area`: the
contract's own area (`rng`, esverify.registry.CONTRACT_AREAS) and every
reference's, in report order. Nothing here names an area's module, and the
gate never imports one directly.
"""
from __future__ import annotations

from .. import registry
from .area import Area

#: area name -> the "module:attr" string of its Area, asked of the registry on every use (report order);
#: read-only: an area is registered through a record (or, in a test, by patching the registry)
AREA_MODULES = registry.Asked(lambda: registry.golden_area_specs())


def get_area(name: str) -> Area:
    """The Area registered under `name`; KeyError names the known areas; an area whose module does not
    import raises that import's error."""
    return registry.golden_area(name)


def area_names() -> list[str]:
    """Every registered area's name, in report order (the contract's first)."""
    return list(AREA_MODULES)
