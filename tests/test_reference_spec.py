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
#: every built-in reference package (esverify/references/<package>/): each is written as a ReferenceSpec
BUILTIN_PACKAGES = tuple(sorted(p.parent.name for p in (ROOT / "esverify" / "references").glob("*/__init__.py")))
#: what a reference module may import of esverify.oracle: the spec and the case types whole, and of verdict the
#: result types a run_row returns (Outcome, with its Draws; a Defect, from a first-result hook) and the facts it
#: may raise instead (NotDriven, Unattributable, OursRaised)
ALLOWED = {"esverify.oracle.spec", "esverify.oracle.case_model"}
RESULT_TYPES = {"Outcome", "Draws", "Defect", "NotDriven", "Unattributable", "OursRaised"}
#: the exceptions, by "package/module": none. A reference's own rows (run_row) reach the core's services (the child
#: round trip, the bitwise comparison, the parameter sets, the loops' reward) through the `session.tools` they are
#: handed (esverify.oracle.row_tools.RowTools), never by importing them
EXCEPTIONS: dict = {}


def test_the_spec_has_at_most_twelve_members_and_defaults_for_all_but_five():
    fields = dataclasses.fields(ReferenceSpec)
    assert len(fields) <= 12
    required = [f.name for f in fields if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]
    assert required == ["name", "clone", "ops", "driver", "profile"]
    # no member beyond its fields: the methods a reference could override are none
    own = {n for n in vars(ReferenceSpec) if not n.startswith("_")}
    assert own <= {f.name for f in fields}, own - {f.name for f in fields}


def _oracle_imports(path: Path) -> set[str]:
    """The esverify.oracle modules `path` imports, each name taken from verdict as "esverify.oracle.verdict.<name>"
    and a submodule taken from the package as "esverify.oracle.<name>" (absolute imports; relative ones stay in
    the package)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and not node.level:
            module = node.module or ""
            if module in ("esverify.oracle", "esverify.oracle.verdict"):
                found |= {f"{module}.{a.name}" for a in node.names}
            else:
                found.add(module)
    return {n for n in found if n == "esverify.oracle" or n.startswith("esverify.oracle.")}


def _allowed(name: str) -> bool:
    return name in ALLOWED or name.rsplit(".", 1)[0] == "esverify.oracle.verdict" and name.rsplit(".", 1)[1] \
        in RESULT_TYPES


def test_every_built_in_reference_is_a_spec_and_none_subclasses_the_adapter():
    from esverify import registry
    builtins = {registry.get(n).adapter.split(".")[2]: n for n in registry.builtin_names()}
    assert sorted(builtins) == list(BUILTIN_PACKAGES) and len(BUILTIN_PACKAGES) >= 6
    for name in builtins.values():
        assert isinstance(registry.adapter(name), ReferenceSpec), name


@pytest.mark.parametrize("package", BUILTIN_PACKAGES)
def test_a_reference_imports_nothing_of_the_core_but_the_spec_the_case_types_and_the_result_types(package):
    folder = ROOT / "esverify" / "references" / package
    modules = sorted(folder.glob("*.py"))          # child/ is the child's, run by path: not scanned
    assert modules and (folder / "adapter.py") in modules
    reached = {f"{package}/{p.name}": {m for m in _oracle_imports(p) if not _allowed(m)} for p in modules}
    assert {k: v for k, v in reached.items() if v} == {k: v for k, v in EXCEPTIONS.items()
                                                      if k.startswith(f"{package}/")}


@pytest.mark.parametrize("name", ["eggroll", "es-at-scale", "es-awd", "es-paper", "hyperscale-es", "skill-sample"])
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
    assert adapter.paths == spec.texts.paths                            # the run-paths section reads these
    assert getattr(adapter, "nonfinite_update", None) is spec.ours.nonfinite_update   # the non-finite rows read it


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


def test_the_default_cases_hook_adds_each_op_once_in_its_place():
    """Without a `cases` hook: each noiseless op once in the cell without noise, each other single op once per
    cell with noise, each loop op once per cell with noise when loops are on (none of them silently left out)."""
    ids = _cases(_toy(), loops=False, population=7, small=True)
    assert [i for i in ids if "/N7" in i] == ["toy/cpu/f64/-/zscore/N7", "toy/cpu/f32/iid/perturb/N7",
                                              "toy/cpu/f32/iid/update/N7"]
    ids = _cases(_toy(), population=7, small=True)
    assert [i for i in ids if "/N7" in i] == ["toy/cpu/f64/-/zscore/N7", "toy/cpu/f32/iid/perturb/N7",
                                              "toy/cpu/f32/iid/update/N7", "toy/cpu/f32/iid/fit/N7"]


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


def _own(tmp_path) -> ReferenceSpec:
    """A toy whose clone is one file and whose cases are its own: every optional clone and ops callable set."""
    from esverify.oracle.case_model import Case

    def row(device, n):
        return Case("toy", device, "f32", "correlated", "main", n, 0.5, 0.25, False, {"iterations": 1})
    return ReferenceSpec(
        name="toy", driver="/nowhere/driver.py", profile="es-at-scale",
        clone=CloneSpec(files={"main": "toy.py"}, needs={"main": "main"}, env_var="TOY_REF",
                        recognise=lambda path: None if Path(path).name == "toy.py" else f"{path}: no toy.py",
                        layout=lambda path: {"main": Path(path).name}, single_file=True,
                        looks_for="a toy.py", how_to_give="--ref toy.py"),
        ops=OpsSpec(loops=("main",), matrix=lambda matrix: [row(d, 4) for d in matrix.devices],
                    check=lambda case: None if case.population % 2 == 0 else (_ for _ in ()).throw(
                        ValueError("odd population")),
                    draw=lambda rng, device, noises, iterations: row(device, 2 * int(rng.integers(1, 4))),
                    shrink=lambda case: [row(case.device, 2)]),
        texts=ReportTexts(not_checked="its other script is never checked"),
        run_row=lambda session, case: None)


def test_the_optional_clone_and_ops_callables_answer_the_adapter(tmp_path):
    """A reference whose clone is one file and whose cases are its own (es-paper, skill-sample, eggroll) says so
    through the clone's and ops' callables; loop ops run by its run_row need no `loop` hook."""
    import numpy as np

    from esverify.oracle.adapters.casebook import MatrixSpec
    from esverify.oracle.adapters.from_spec import SpecAdapter
    from esverify.oracle.case_model import Case
    toy, plain = SpecAdapter(_own(tmp_path)), SpecAdapter(_toy())
    file = tmp_path / "toy.py"
    file.write_text("")
    assert (toy.recognise(file), toy.recognise(tmp_path)) == (None, f"{tmp_path}: no toy.py")
    assert toy.layout(file) == {"main": "toy.py"} and toy.accepts_file() and toy.clone_root(file) == tmp_path
    assert toy.clone_root(tmp_path) == tmp_path and (toy.looks_for(), toy.how_to_give()) == ("a toy.py", "--ref toy.py")
    cases = toy.cases(MatrixSpec(devices=("cpu", "cuda"), dtypes=("f32",), schemes=("iid",)))
    assert [c.case_id for c in cases] == ["toy/cpu/f32/correlated/main/N4", "toy/cuda/f32/correlated/main/N4"]
    assert toy.module_key(cases[0]) == "main" and toy.check_case(cases[0]) is None
    with pytest.raises(ValueError, match="odd population"):
        toy.check_case(Case("toy", "cpu", "f32", "correlated", "main", 3, 0.5, 0.25))
    assert toy.random_case(np.random.default_rng(0), "cpu", ("contract",)).population in (2, 4, 6)
    assert [c.population for c in toy.shrink_candidates(cases[0])] == [2]
    assert toy.not_checked() == "main (its other script is never checked)" == toy.not_checked(True)
    # the defaults: a layout file there, `files`, a folder, the generic lines, the core's check
    (tmp_path / "toy").mkdir()
    (tmp_path / "toy" / "core.py").write_text("")
    assert plain.recognise(tmp_path) is None and "none of its files" in plain.recognise(tmp_path / "toy")
    assert plain.layout(tmp_path) == {"core": "toy/core.py"} and not plain.accepts_file()
    assert plain.clone_root(file) == file and plain.looks_for() == "one of toy/core.py"
    assert plain.how_to_give() == "--ref PATH or set $" and plain.not_checked() == "zscore, perturb, update, fit"
    with pytest.raises(ValueError, match="not an op"):
        plain.check_case(Case("toy", "cpu", "f32", "correlated", "main", 4, 0.5, 0.25))
