"""The numerics profile `hyperscale-es`: our numpy model of XLA CPU's arithmetic as the registry's named value.

Neither a Trainer `Profile` (no torch chunk kernels) nor a loop profile that drives a loop: its kernels
are this package's modules (jaxrandom, xlamath, shaping, noise, update, docs/hyperscale.md §2-§8), which
the parity rows (.rows) call. name, version, version_constant: as for every profile; the model's bits are
the golden area `hyperscale-es`'s, so its version is the area's (a change of any computed bit bumps it,
with ``## hyperscale-es v<N>`` in CHANGELOG.md).
"""
from __future__ import annotations

from dataclasses import dataclass

from .golden_area import VERSION


@dataclass(frozen=True)
class XlaCpuProfile:
    """name, version, and version_constant: the dotted name of the constant that holds the version."""
    name: str
    version: int
    version_constant: str


PROFILE = XlaCpuProfile(name="hyperscale-es", version=VERSION,
                        version_constant="esverify.references.hyperscale_es.golden_area.VERSION")
