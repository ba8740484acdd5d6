"""A later commit of a reference, as users clone it (docs/parity.md, "What a later commit does to a verdict").

- the drift generator (tests/standins/drift.py) applies to every stand-in, each drifted file still parses;
- the stand-in engines and modules are drift-tolerant: a clone with a new task class imported at module
  level, a new top-level import of a package no interpreter has, new flags with inert defaults, new
  helpers and files, and comments gets every row's verdict of the stand-in it drifted from; the first
  screen says how far past the validated commit it is, whether a function the rows ran changed, and
  lists each placeholder;
- the generator's behaviour edits (a sign, a scale, a written dtype) on top of the drift still fail a row;
- a placeholder the reference uses is one line naming the module, the name and the file that asked;
- hyperscale-es (a JAX child of its own, under an interpreter with jax: $ESVERIFY_JAX_PYTHON or this one) is
  drift-tolerant the same way (an absent import at a noiser module's top, inside a `try` or not; a new option
  and init_noiser keyword; a new noiser file; new names in models/common.py; a renamed noiser module), and a
  later commit that moved or renamed what its driver reads (models/common.py, an ALL_NOISERS name, an option
  the rows set, refused or silently dropped) ends those rows with one line, "esverify could not drive this
  clone: ...", never the reference's fault and never a traceback.
"""
from __future__ import annotations

import ast
import sys

import pandas as pd
import pytest

from esverify.oracle import Options, adapters, run_parity
from standins.drift import ABSENT, BEHAVIOUR, DRIFTS, FEW_ROWS, NOT_DRIVEN, TARGETS, apply_edits, drifted_clone
from standins.mutants import STANDINS

STANDIN_NAMES = sorted(DRIFTS)


@pytest.mark.parametrize("standin", STANDIN_NAMES)
def test_every_drift_and_behaviour_edit_applies_once_and_parses(tmp_path, standin):
    root, base = drifted_clone(tmp_path, standin)
    assert len(base) == 40
    for path in root.rglob("*.py"):
        ast.parse(path.read_text(), filename=str(path))
    for kind, edits in BEHAVIOUR[standin].items():
        apply_edits(root, edits)   # each on top of the drift (and of the ones before: distinct anchors)
    for path in root.rglob("*.py"):
        ast.parse(path.read_text(), filename=str(path))


@pytest.mark.parametrize("standin", sorted(FEW_ROWS))
def test_the_few_rows_are_those_of_the_ops_their_claims_name_and_all_in_the_targets_rows(standin):
    """FEW_ROWS' pattern selects, from the whole matrix, shaping, OpenES's perturbation and the jitted
    rank-2 update (contract and native noise) and nothing else, all of them rows of TARGETS' pattern: a new
    op of the matrix cannot widen it, nor a renamed one leave it empty."""
    from esverify.oracle import cases
    target, case, _ = TARGETS[standin]
    matrix = cases.build_matrix([target], ["cpu"], ("f32", "f16", "bf16"), ("iid", "correlated"), iterations=1,
                                small=False, noises=("contract", "native"), loops=True)
    few = cases.select(matrix, FEW_ROWS[standin])
    assert sorted((c.op, c.noise) for c in few) == [("perturb-openes", "contract"), ("perturb-openes", "native"),
                                                    ("shaping", "contract"), ("update-jit", "contract"),
                                                    ("update-jit", "native")]
    assert {c.case_id for c in few} < {c.case_id for c in cases.select(matrix, case)}


def _parity(tmp_path, name, clone, standin, validated, monkeypatch, few=False):
    """run_parity of TARGETS[standin]'s rows on `clone` (FEW_ROWS' where `few` and the stand-in has them)."""
    target, case, extra = TARGETS[standin]
    case = FEW_ROWS.get(standin, case) if few else case
    monkeypatch.setattr(adapters.get(target), "validated_commit", validated)   # the one adapter every lookup returns
    if target == "hyperscale-es":   # its child needs jax: skipped without an interpreter that has it
        from test_hyperscale_child import _python
        extra = {**extra, "pythons": {target: _python()}}
    opts = Options(ref=[str(clone)], target=target, devices=("cpu",), dtypes=("f32",), case=case, iterations=1,
                   out=str(tmp_path / name), quiet=True, **extra)
    return run_parity(opts)


def _plain(tmp_path, tmp_path_factory, standin, base, monkeypatch) -> tuple[int, pd.DataFrame]:
    """(exit code, rows) of the unedited stand-in on TARGETS[standin]'s rows. hyperscale-es's are those rows of
    its default f32/bf16 run, which tests/test_hyperscale_parity.py makes once per test session and asserts
    on (`standin_report`): the same case ids in the same order (each noise's f32 rows), where a run of its
    own cost a second JAX child compiling the 17 rows afresh (about 25 s of CPU on a cold XLA cache). The
    other stand-ins' runs fork from the kept warm start server: cheap, run here."""
    if standin != "hyperscale-es":
        plain = _parity(tmp_path, "plain", STANDINS / standin, standin, base, monkeypatch)
        return plain.exit_code, plain.frame
    from fnmatch import fnmatchcase

    from test_hyperscale_parity import standin_report
    code, rows, _, _ = standin_report(tmp_path_factory)
    return code, rows[[fnmatchcase(case, TARGETS[standin][1]) for case in rows["case"]]].reset_index(drop=True)


@pytest.mark.slow   # two parity runs of a few rows per stand-in
@pytest.mark.parametrize("standin", STANDIN_NAMES)
def test_a_drifted_clone_keeps_every_verdict_and_the_first_screen_names_the_drift(tmp_path, tmp_path_factory,
                                                                                  monkeypatch, standin):
    clone, base = drifted_clone(tmp_path / "clones", standin)
    plain_code, plain = _plain(tmp_path, tmp_path_factory, standin, base[:7], monkeypatch)
    drifted = _parity(tmp_path, "drifted", clone, standin, base[:7], monkeypatch)
    assert len(plain) and list(drifted.frame["case"]) == list(plain["case"])
    assert list(drifted.frame["status"]) == list(plain["status"]), drifted.frame[["case", "status", "detail"]]
    assert set(drifted.frame["status"]) <= {"pass", "artifact"} and drifted.exit_code == plain_code == 0
    screen = "\n".join(drifted.console.splitlines()[:6])
    flat = " ".join(screen.split())
    kinds = len(DRIFTS[standin])
    assert f"{kinds} commits past the validated {base[:7]}" in flat, screen
    # es-awd's new flag is a line of parse_args, which its loop row runs: named, and still a pass
    # hyperscale-es's child reports no functions it ran (a JAX child: no line tracing): the hunks are counted
    changed = {"es-awd": "functions the rows ran that changed: parse_args (es.py)",
               "hyperscale-es": "changed hunks the rows ran is unknown"}.get(standin,
                                                                             "no function the rows ran has changed")
    assert changed in flat, screen
    assert "placeholder" in flat, screen
    notes = drifted.metadata["warnings"]
    assert any(f"placeholder for module {ABSENT}" in n for n in notes), notes
    if "task-class" in DRIFTS[standin]:
        assert any("placeholder for tasks.SudokuTask" in n and "es_lora_multinode.py" in n for n in notes), notes


@pytest.mark.slow   # one parity run of a few rows per stand-in and edit
@pytest.mark.parametrize("standin, behaviour", [(s, b) for s in STANDIN_NAMES for b in ("sign", "scale", "dtype")])
def test_a_behaviour_edit_on_top_of_the_drift_still_fails(tmp_path, monkeypatch, standin, behaviour):
    clone, base = drifted_clone(tmp_path / "clones", standin, behaviour=behaviour)
    result = _parity(tmp_path, "edited", clone, standin, base[:7], monkeypatch, few=True)
    assert "fail" in set(result.frame["status"]), result.frame[["case", "status", "detail"]].to_string()
    assert result.exit_code == 1
    # an edit the served noise refuses (hyperscale-es's noise dtype) is an error row of one line, not the
    # traceback jax wraps a host callback's exception in
    assert not result.frame["detail"].str.contains("Traceback|\n").any(), list(result.frame["detail"])
    flat = " ".join("\n".join(result.console.splitlines()[:6]).split())
    assert f"{len(DRIFTS[standin]) + 1} commits past the validated {base[:7]}" in flat


def test_a_placeholder_raises_only_when_used_naming_module_name_and_file(tmp_path, monkeypatch):
    """The child's placeholder modules (oracles/placeholders.py), in process: an absent top-level import
    of a watched clone's file and an unknown name of a permissive stand-in module are inert until used."""
    monkeypatch.syspath_prepend(str(STANDINS.parent.parent / "oracles"))
    import importlib
    placeholders = importlib.import_module("placeholders")
    clone = tmp_path / "clone"
    clone.mkdir()
    (clone / "ref_mod.py").write_text(
        f"import {ABSENT}\nfrom {ABSENT}.sub import Thing\n"
        "try:\n    import esverify_guarded_absent\nexcept ImportError:\n    esverify_guarded_absent = None\n"
        "from esverify_stub_tasks import MathTask, NewTask\n"
        "import esverify_stub_tasks.newsub\n"
        "class Mine(NewTask):\n    pass\n"
        "def use():\n    return Thing()\n")
    stub = placeholders.PermissiveModule("esverify_stub_tasks")
    stub.MathTask = int
    stub.__path__, stub.__esverify_stub__ = [], True   # a package the driver stands in for
    monkeypatch.setitem(sys.modules, "esverify_stub_tasks", stub)
    monkeypatch.syspath_prepend(str(clone))
    placeholders.watch(clone)
    try:
        module = importlib.import_module("ref_mod")
        assert module.esverify_guarded_absent is None          # a guarded import keeps its own fallback
        assert module.MathTask is int                            # known names are the stand-in's own
        with pytest.raises(placeholders.PlaceholderUsed) as used:
            module.use()
        assert f"{ABSENT}.sub.Thing" in str(used.value) and "ref_mod.py" in str(used.value)
        with pytest.raises(placeholders.PlaceholderUsed, match="esverify_stub_tasks.NewTask"):
            module.Mine()
        served = placeholders.served()
        assert {"module": ABSENT, "name": "*", "file": "ref_mod.py"}.items() <= served[0].items()
        assert any(p["module"] == "esverify_stub_tasks" and p["name"] == "NewTask" for p in served)
        assert not any("guarded" in p["module"] for p in served)
        sub = [p for p in served if p["module"] == "esverify_stub_tasks.newsub"]
        assert sub and sub[0]["why"] == "esverify's stand-in esverify_stub_tasks has no submodule " \
                                        "esverify_stub_tasks.newsub"
        # a probe for whether a package exists hears the truth
        import importlib.util
        assert importlib.util.find_spec("esverify_probe_absent") is None
    finally:
        placeholders.unwatch(clone)
        for name in [n for n in sys.modules if n.startswith((ABSENT, "ref_mod", "esverify_stub_tasks."))]:
            sys.modules.pop(name, None)


@pytest.mark.slow   # the eggroll rows of f32 on the dtype mutant
def test_the_eggroll_engine_serves_the_written_adapter_dtype(tmp_path, monkeypatch):
    """A reference writing f32 adapter files (a dtype-only change) fails: the stand-in engine serves the file's
    dtype instead of rounding every adapter to f16."""
    clone, base = drifted_clone(tmp_path / "clones", "eggroll-vllm", kinds=(), behaviour="dtype")
    result = _parity(tmp_path, "f32-adapters", clone, "eggroll-vllm", base[:7], monkeypatch)
    frame = result.frame
    assert len(frame) and set(frame["status"]) == {"fail"}, frame[["case", "status", "detail"]]
    assert pd.Series(frame["detail"]).str.contains("evaluated").all()


@pytest.mark.slow   # one es-awd loop row
def test_a_row_that_uses_a_placeholder_is_an_error_naming_it(tmp_path, monkeypatch):
    """The absent optional package of a later commit, used by the loop after all: that row is an error whose
    one line names the module, the name and the file that asked for it."""
    clone, base = drifted_clone(tmp_path / "clones", "es-awd", kinds=("absent-import",))
    apply_edits(clone, [("es.py", "def main(args):\n", f"def main(args):\n    {ABSENT}.setup_tracing()\n")])
    result = _parity(tmp_path, "used", clone, "es-awd", base[:7], monkeypatch)
    frame = result.frame
    assert list(frame["status"]) == ["error"], frame[["case", "status", "detail"]]
    detail = frame["detail"].iloc[0]
    assert f"{ABSENT}.setup_tracing is an esverify placeholder" in detail and "es.py" in detail, detail
    assert "has no module" in detail


@pytest.mark.slow   # one hyperscale-es parity run of a few rows per change
@pytest.mark.parametrize("kind", sorted(NOT_DRIVEN["hyperscale-es"]))
def test_a_later_commit_the_driver_cannot_read_ends_its_rows_with_one_line(tmp_path, monkeypatch, kind):
    """What the driver reads moved or was renamed: the rows that read it are errors whose one line says
    esverify could not drive the clone and what it reads, never that the reference raised, never a traceback;
    the rows that do not read it still pass."""
    _, words = NOT_DRIVEN["hyperscale-es"][kind]
    clone, base = drifted_clone(tmp_path / "clones", "hyperscale-es", kinds=(kind,))
    # only the driver's own ops check the options init_noiser kept: that change runs only their rows
    few = kind == "ignored-option"
    frame = _parity(tmp_path, kind, clone, "hyperscale-es", base[:7], monkeypatch, few=few).frame
    if few:
        frame = frame[frame["op"].isin(("shaping", "perturb-openes", "update-jit"))]
    errors = frame[frame["status"] == "error"]
    assert len(errors) and set(frame["status"]) <= {"error", "pass"}, frame[["case", "status", "detail"]]
    for detail in errors["detail"]:
        assert ": esverify could not drive this clone: " in detail and words in detail, detail
        assert "\n" not in detail and "Traceback" not in detail and "reference side raised" not in detail
    # only the rows that read the renamed name end: OpenES's perturbation sets no rank and reads no 'eggroll'
    reads_all = kind == "moved-common"
    assert set(frame.loc[frame["op"] == "perturb-openes", "status"]) == {"error" if reads_all else "pass"}
    assert set(frame.loc[frame["op"] == "update-jit", "status"]) == {"error"}
