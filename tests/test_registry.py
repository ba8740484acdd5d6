"""esverify.registry as the one place that maps a name to a part: the record type in a leaf module, the
contract's golden area registered beside the references', no name settled by order (CONTRIBUTING.md,
"Adding a reference"; docs/goldens.md, "Adding an area")."""
from __future__ import annotations

import subprocess
import sys

import pytest

from esverify import registry
from esverify.goldens import areas


def test_the_record_type_is_a_leaf_that_both_sides_import():
    """Importing the record type loads no other module of esverify: a reference package that declares
    itself does not load the registry, which loads it by name."""
    code = ("import sys, esverify.record, esverify.references.es_awd\n"
            "print(sorted(m for m in sys.modules if m.startswith('esverify')))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["['esverify',", "'esverify.record',", "'esverify.references',",
                                   "'esverify.references.es_awd']"]
    from esverify.record import Reference
    assert registry.Reference is Reference and registry.get("es-awd").__class__ is Reference


def test_every_golden_area_is_the_registrys_the_contracts_first():
    specs = registry.golden_area_specs()
    assert list(specs)[0] == "rng" and specs["rng"] == "esverify.goldens.rng_area:AREA"
    assert specs["eggroll"] == "esverify.references.eggroll.golden_area:AREA"
    assert areas.area_names() == list(specs) == list(registry.golden_areas())
    assert dict(areas.AREA_MODULES) == specs
    from esverify.goldens import rng_area
    assert areas.get_area("rng") is rng_area.AREA is registry.golden_area("rng")
    with pytest.raises(KeyError, match=r"^unknown golden area 'lowrank'; known: \['eggroll', 'es-at-scale'"):
        areas.get_area("lowrank")


def test_two_parts_of_esverify_under_one_name_are_an_error_never_the_first(monkeypatch):
    """A second area named es-awd among esverify's own (here: the contract's) is a fault of the tree,
    raised where the areas are asked for; it is not settled by keeping whichever came first."""
    monkeypatch.setattr(registry, "CONTRACT_AREAS",
                        (*registry.CONTRACT_AREAS, "esverify.references.es_awd.golden_area:AREA"))
    with pytest.raises(registry.RegistryError, match=r"^the golden area name 'es-awd' is declared twice: by the "
                                                     r"contract \(esverify\.references\.es_awd\.golden_area:AREA\) "
                                                     r"and by reference es-awd \(esverify\.references\.es_awd\."
                                                     r"golden_area:AREA\)$"):
        registry.golden_areas()


def test_two_built_in_packages_under_one_name_are_an_error_never_the_last():
    """The built-ins are found by scanning esverify/references/: two packages declaring one name stop the
    registry with both records named (a fresh interpreter: the registry is built once per process)."""
    code = ("from esverify import registry\nfrom esverify.record import Reference\n"
            "registry._from_this_tree = lambda: [Reference(name='twin'), Reference(name='twin', clone_modules=('x',))]\n"
            "try:\n    registry.names()\nexcept registry.RegistryError as exc:\n    print(exc)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("the reference name 'twin' is declared by two built-in packages of "
                                  "esverify.references: Reference(name='twin', adapter=None") and "('x',)" in done.stdout
