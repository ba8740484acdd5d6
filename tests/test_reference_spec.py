"""The reference spec (esverify.oracle.spec; CONTRIBUTING.md "Adding a reference"): at most twelve members, a
default for all but the five a reference must say, and the references written as specs reach into the core
through the spec and the case types only; the core's Adapter of a spec answers as the spec says."""
from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import pytest

from esverify.oracle.spec import (NO_NOISE_CELL, ChildRequest, CloneSpec, LoopQuirks, LoopSpec, OpsSpec, OurSide,
                                  ReferenceSpec, ReportTexts)

ROOT = Path(__file__).resolve().parents[1]
#: the references written as a ReferenceSpec
SPEC_REFERENCES = ("es_awd", "es_at_scale")
#: what a reference module may import of esverify.oracle
ALLOWED = {"esverify.oracle.spec", "esverify.oracle.case_model"}


def test_the_spec_has_at_most_twelve_members_and_defaults_for_all_but_five():
    fields = dataclasses.fields(ReferenceSpec)
    assert len(fields) <= 12
    required = [f.name for f in fields if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]
    assert required == ["name", "clone", "ops", "driver", "profile"]
    # no member beyond its fields: the methods a reference could override are none
    own = {n for n in vars(ReferenceSpec) if not n.startswith("_")}
    assert own <= {f.name for f in fields}, own - {f.name for f in fields}


def _oracle_imports(path: Path) -> list[str]:
    """The esverify.oracle modules `path` imports (absolute imports; relative ones stay in the package)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
            [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else []
        found += [n for n in names if n == "esverify.oracle" or n.startswith("esverify.oracle.")]
    return found


@pytest.mark.parametrize("package", SPEC_REFERENCES)
def test_a_spec_reference_imports_nothing_of_the_core_but_the_spec_and_the_case_types(package):
    folder = ROOT / "esverify" / "references" / package
    modules = sorted(folder.glob("*.py"))          # child/ is the child's, run by path: not scanned
    assert modules and (folder / "adapter.py") in modules
    reached = {f"{p.name}: {m}" for p in modules for m in _oracle_imports(p) if m not in ALLOWED}
    assert reached == set()


@pytest.mark.parametrize("name", ["es-awd", "es-at-scale"])
def test_the_registry_answers_a_spec_with_one_adapter_built_from_it(name):
    from esverify import registry
    from esverify.oracle import adapters
    from esverify.oracle.adapters.base import Adapter
    from esverify.oracle.adapters.from_spec import SpecAdapter
    spec = registry.adapter(name)
    assert isinstance(spec, ReferenceSpec) and spec.name == name
    adapter = adapters.get(name)
    assert isinstance(adapter, SpecAdapter) and isinstance(adapter, Adapter) and adapters.get(name) is adapter
    assert (adapter.files, adapter.ops_need, adapter.env_var, adapter.alias_flag) == \
        (spec.clone.files, spec.clone.needs, spec.clone.env_var, spec.clone.alias_flag)
    assert adapter.all_ops() == (*spec.ops.single, *spec.ops.loops)
    assert adapter.paths == spec.texts.paths and adapter.paths          # the run-paths section reads these
    assert adapter.nonfinite_update is spec.ours.nonfinite_update      # the non-finite rows read this


def test_the_non_finite_reward_populations_of_es_at_scale_are_the_cores():
    from esverify.oracle.rewards import NONFINITE
    from esverify.references.es_at_scale.adapter import NONFINITE_REWARDS
    assert NONFINITE_REWARDS == NONFINITE


def _toy(**hooks) -> ReferenceSpec:
    return ReferenceSpec(name="toy", clone=CloneSpec(files={"core": "toy/core.py"}),
                         ops=OpsSpec(single=("zscore", "perturb", "update"), loops=("fit",), sweep="update",
                                     noiseless=("zscore",)),
                         driver="/nowhere/driver.py", profile="es-at-scale",
                         **{"loop": lambda case: LoopSpec("passes", 2, "es-awd", (0.5, 0.25), {"op": "fit"}), **hooks})


def _cases(spec: ReferenceSpec, **matrix) -> list[str]:
    from esverify.oracle.adapters.casebook import MatrixSpec
    from esverify.oracle.adapters.from_spec import SpecAdapter
    return [c.case_id for c in SpecAdapter(spec).cases(MatrixSpec(**{
        "devices": ("cpu",), "dtypes": ("f32",), "schemes": ("iid",), "noises": ("contract",), "population": 5,
        **matrix}))]


def test_one_cases_hook_fills_the_three_places_of_the_matrix_and_each_keeps_its_own_ops():
    def cases(matrix, cell):   # adds every op in every cell: the core keeps what it asked for
        cell.add("zscore", 3 if cell.noise == NO_NOISE_CELL[0] else 4)
        cell.add("perturb", cell.population)
        cell.add("fit", 6, extra={"iterations": matrix.iterations, "noise": cell.noise})
    ids = _cases(_toy(cases=cases))
    head = "toy/cpu/f32/iid"
    assert ids[0] == "toy/cpu/f64/-/zscore/N3" and f"{head}/perturb/N5" in ids and ids[-1] == f"{head}/fit/N6"
    assert not any("zscore/N4" in i or "/-/perturb" in i or "/-/fit" in i for i in ids)
    assert ids.index(f"{head}/perturb/N5") < ids.index(f"{head}/update/N8") < ids.index(f"{head}/fit/N6")
    assert f"{head}/fit/N6" not in _cases(_toy(cases=cases), loops=False)


def test_the_default_cases_hook_adds_each_single_op_once_per_cell_with_noise():
    ids = _cases(_toy(), loops=False, population=7, small=True)
    assert [i for i in ids if "/N7" in i] == ["toy/cpu/f32/iid/perturb/N7", "toy/cpu/f32/iid/update/N7"]


def test_the_hooks_answer_the_adapters_row_members():
    from esverify.oracle.adapters.from_spec import SpecAdapter
    from esverify.oracle.case_model import Case

    class Quirks(LoopQuirks):
        def record_number(self, index):
            return index

    quirks = Quirks()
    plain = SpecAdapter(_toy())
    hooked = SpecAdapter(_toy(request=lambda case: ChildRequest("offset", case.op == "update"),
                              ours=OurSide(rule=lambda device: f"rule-{device}"), quirks=quirks,
                              run_row=lambda session, case: {"first": case.op}))
    update = Case("toy", "cpu", "f32", "iid", "update", 5, 0.1, 0.2)
    fit = Case("toy", "cpu", "f32", "iid", "fit", 5, 0.1, 0.2, extra={"iterations": 1, "rewards": "nan"})
    assert (plain.set_variant(update), plain.needs_anchor(update), plain.run_row(None, update)) == ("base", False, None)
    assert (hooked.set_variant(update), hooked.needs_anchor(update)) == ("offset", True)
    assert hooked.rule_for("cuda") == "rule-cuda" and hooked.run_row(None, update) == {"first": "update"}
    # the core makes the first target of a non-finite row NaN; the spec's quirks replace the loop spec's
    assert str(plain.loop_spec(fit).data) == "(nan, 0.25)" and type(plain.loop_spec(fit).quirks) is LoopQuirks
    assert hooked.loop_spec(fit).quirks is quirks
    assert not hasattr(plain, "nonfinite_update")
    assert plain.never_checked() == [] and SpecAdapter(_toy(texts=ReportTexts(never_checked=(("a", "b"),)))
                                                       ).never_checked() == [("a", "b")]


def test_a_spec_with_loop_ops_and_no_loop_hook_is_refused():
    with pytest.raises(ValueError, match="need a `loop` hook"):
        _toy(loop=None)
    with pytest.raises(ValueError, match="name must not be empty"):
        ReferenceSpec(name="", clone=CloneSpec(files={}), ops=OpsSpec(), driver="", profile="")
