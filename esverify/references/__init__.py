"""The built-in references, one package each (`esverify/references/<name>/`, CONTRIBUTING.md, "Adding a reference").

Each package declares one `Reference` record (its adapter, profiles, golden
areas and run-log formats as ``"module:attr"`` strings); `esverify.registry`
finds them through the entry points of the group ``esverify.references``
and by scanning this folder. A reference imports the record type from the
leaf module `esverify.record`, never the registry; `Reference` is re-exported
here for plug-in packages, which declare themselves the same way.
"""
from esverify.record import GROUP, Reference

__all__ = ["GROUP", "Reference"]
