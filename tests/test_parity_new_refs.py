"""Parity on es-paper and skill-sample, the references docs/references.md §6 and §7 describe.

- es-paper: the paper's four scripts in archive/ of the es-at-scale stand-in
  pass every row (contract and native noise, f32/f16/bf16, two model
  copies and one); the es-at-scale clone yields both targets, a fork (the
  scripts at the root) only es-paper; every PAPER_MUTANT fails the rows its
  fault reaches, each failing row's blame naming the edited function, and
  every equivalent passes;
- skill-sample: the page's sample given as one file passes f32/f16 at N 5
  and 30, its bf16 and N = 40 rows are `defect` rows naming the sample's
  line, never fail or pass; its findings are in the report; a rank-sorted
  variant (the page's stated intent) fails; every SKILL_MUTANT fails (the
  blame naming the edit) and every equivalent passes.
"""
from __future__ import annotations

import json
import re

import pandas as pd
import pytest

from esverify.oracle import Options, run_parity
from esverify.oracle.case_model import Case
from esverify.oracle.runner import Runner
from esverify.oracle.adapters import get
from esverify.oracle.adapters.base import MatrixSpec
from standins.layouts import paper_fork
from standins.mutants import BLAMED, STANDINS, edited_functions, make_variant, names_the_edit
from standins.new_ref_mutants import EQUIVALENTS, PAPER_MUTANTS, SKILL_MUTANTS

AT_SCALE = STANDINS / "es-at-scale"
SKILL_DIR = STANDINS / "skill-sample"
SKILL_FILE = SKILL_DIR / "es_finetuning_skill.py"


# every test that runs a whole parity matrix (a child per reference) is marked slow: the fast tier
# (`pytest -m "not slow"`) leaves it out, CI runs it
def _run(tmp_path, refs, **kw):
    opts = Options(ref=[str(r) for r in refs], devices=("cpu",), out=str(tmp_path / "report"), quiet=True, **kw)
    return run_parity(opts)


def _by_case(frame) -> dict:
    return dict(zip(frame["case"], frame["status"]))


@pytest.mark.slow
def test_paper_scripts_pass_every_row(tmp_path):
    result = _run(tmp_path, [AT_SCALE], target="es-paper")
    rows = result.frame
    assert len(rows) == 29 and set(rows["target"]) == {"es-paper"}   # with the NaN-reward row
    assert set(rows["status"]) == {"pass"}, rows[rows["status"] != "pass"][["case", "detail"]].to_string()
    assert set(rows["op"]) == {"main-countdown", "main-countdown-iid", "main-conciseness", "main-conciseness-iid"}
    assert set(rows[rows["op"].str.endswith("iid")]["scheme"]) == {"iid"}
    assert {"contract", "native"} == set(rows["noise"]) and {"f32", "f16", "bf16"} == set(rows["dtype"])
    assert result.exit_code == 0
    report = json.loads((tmp_path / "report" / "parity.json").read_text())
    text = json.dumps(report)
    assert "restore add_(-SIGMA * noise)" in text or "restore a member with add_(-SIGMA * noise)" in text
    assert "es_fine-tuning_countdown_accl.py" in text      # the vLLM version is listed as not checked
    # both sides' time is on the reference's clock (metadata seconds_per_side): our loop runs after the reply
    sides = report["metadata"]["seconds_per_side"]["es-paper"]
    assert sides["ours_s"] > 0 and sides["reference_s"] > 0, sides


@pytest.mark.slow
def test_es_at_scale_clone_yields_both_targets_and_a_fork_only_the_scripts(tmp_path):
    both = _run(tmp_path / "a", [AT_SCALE], case="*/cpu/f32/correlated/[mp][ae][ir][nt]*", small=True)
    assert {"es-at-scale", "es-paper"} <= set(both.frame["target"])
    assert set(both.frame[both.frame["target"] == "es-paper"]["status"]) == {"pass"}
    fork = paper_fork(tmp_path / "fork")
    only = _run(tmp_path / "b", [fork], case="*/cpu/f32/correlated/main-countdown/*")
    assert set(only.frame["target"]) == {"es-paper"}
    assert set(only.frame["status"]) == {"pass"}, only.frame[["case", "detail"]].to_string()
    assert "es_fine-tuning_countdown.py" in " ".join(only.frame["detail"]) and "archive/" not in \
        " ".join(only.frame["detail"])


@pytest.mark.slow
def test_skill_sample_as_one_file(tmp_path):
    result = _run(tmp_path, [SKILL_FILE])
    others = result.frame[result.frame["target"] != "skill-sample"]
    assert others.empty       # --ref names the sample only: the other references get no row
    rows = result.frame[result.frame["target"] == "skill-sample"]
    got = _by_case(rows)
    # 3 dtypes x 2 noises at N 5, f32 at N 30 and 40 x 2 noises, f16 on 1M elements, f32 with a NaN reward
    assert len(rows) == 12
    for case, status in got.items():
        if "/bf16/" in case or "/N40" in case:
            assert status == "defect", (case, status)
        else:
            assert status == "pass", (case, status, rows.set_index("case").loc[case, "detail"])
    bf16 = rows[rows["dtype"] == "bf16"]["detail"].iloc[0]
    assert "TypeError: Got unsupported ScalarType BFloat16" in bf16 and "es_finetuning_skill.py:" in bf16
    n40 = rows[rows["population"] == 40]["detail"].iloc[0]
    assert "IndexError" in n40 and "30 entries" in n40
    assert set(rows[rows["status"] == "defect"]["diagnosis"]) == {"reference-defect"}
    assert result.exit_code == 0          # the sample's defects are findings, not failures of ours
    findings = pd.read_csv(tmp_path / "report" / "parity-findings.csv")
    text = " ".join(findings.astype(str).values.ravel())
    for needle in ("indexed by member number", "last member's perturbed", "flips sign", "seeds in common",
                   "numpy has no bfloat16", "30 entries"):
        assert needle in text, needle


@pytest.mark.slow
def test_require_all_counts_defect_rows(tmp_path):
    result = _run(tmp_path, [SKILL_DIR], case="skill-sample/*/f32/*/N40", require_all=True)
    assert list(result.frame["status"]) == ["defect"] and result.exit_code == 1


def _matrix_cases(target):
    spec = MatrixSpec(devices=("cpu",), dtypes=("f32", "f16", "bf16"), schemes=("correlated", "iid"))
    return get(target).cases(spec)


def _catalog(target, clone, cases, table, tmp_path, blame_only=lambda mutant: []):
    """{mutant: {case id: status}} over one child (the variant clone per case). Each variant is a git
    checkout with its edit uncommitted, and every failing row's blame must name the edited function
   : asserted here, for every mutant and equivalent, on `cases` (a list, or a function of the
    mutant's name giving its list) and on the rows `blame_only(mutant)` adds for this check alone (their
    statuses are not returned)."""
    out, unnamed = {}, []
    runner = Runner(Options(ref=[str(clone)], devices=("cpu",), out=str(tmp_path / "unused"), quiet=True))
    with runner.session(target, clone) as run:
        for name, mutant in table.items():
            variant = make_variant(tmp_path / name, mutant.target, mutant.edits, git=True)
            rows = [run(case, clone=variant) for case in (cases(name) if callable(cases) else cases)]
            out[name] = {r["case"]: r["status"] for r in rows}
            rows += [run(case, clone=variant) for case in blame_only(mutant)]
            patched = edited_functions(mutant.target, mutant.edits)
            unnamed += [f"{name}: {r['case']}: {r['blame'][:300]} (edited: {patched})" for r in rows
                        if r["status"] in BLAMED and not names_the_edit(r["blame"], patched)]
    assert not unnamed, "failing rows whose blame does not name the edited function:\n" + "\n".join(unnamed)
    return out


def _failing(statuses: dict) -> list:
    return [c for c, s in statuses.items() if s not in ("pass", "defect")]


#: edits that remove a defect of the sample rather than add a fault: its rows must pass
FIXES = {"unused-accumulation-dropped"}
#: mutants the rows cannot see, with the reason (false passes, stated)
UNSEEN = {}


#: the paper mutants that run the rows of all four scripts: those whose reach (which scripts' rows fail) the
#: test asserts; every equivalent runs them all too
WHOLE_MATRIX = {"iid-update-without-slot", "iid-perturb-without-slot", "initial-seed-ignored"}


def _scripts_edited(mutant) -> set:
    """The paper scripts (file names, esverify.references.es_paper.scripts.SCRIPTS) `mutant` edits."""
    return {rel.rsplit("/", 1)[-1] for rel, _, _ in mutant.edits}


def test_a_paper_row_reads_only_its_own_script():
    """What lets the other paper mutants run only the rows of the script they edit (the rows of the other
    three cannot change, and pass unedited: test_paper_scripts_pass_every_row): each edits one script,
    a row execs only its op's script (the child's op_paper_main), and no script names another, so none
    imports or reads one."""
    from esverify.references.es_paper.scripts import SCRIPTS
    files = {name for name, _, _ in SCRIPTS.values()}
    assert len(files) == len(SCRIPTS) == 4
    for name in files:
        text = (AT_SCALE / "archive" / name).read_text()
        # a stem whole (countdown's is the start of countdown_iid's)
        assert not any(re.search(re.escape(other.removesuffix(".py")) + r"(?![\w-])", text)
                       for other in files - {name}), name
    for name, mutant in PAPER_MUTANTS.items():
        assert len(_scripts_edited(mutant)) == 1 and _scripts_edited(mutant) <= files, name


@pytest.mark.slow
def test_paper_mutants_fail_and_equivalents_pass(tmp_path):
    from esverify.references.es_paper.scripts import SCRIPTS
    everything = _matrix_cases("es-paper")
    cases = [c for c in everything if c.dtype != "f16" or c.noise == "native"]
    table = {**PAPER_MUTANTS, **{k: v for k, v in EQUIVALENTS.items() if v.target != "skill-sample"}}

    everywhere = [table[name] for name in table if name in EQUIVALENTS or name in WHOLE_MATRIX]

    def reached(mutant, of):
        """The rows of `of` for an equivalent and WHOLE_MATRIX, else those of the script the mutant edits (each
        reaches only its script: test_a_paper_row_reads_only_its_own_script)."""
        if any(mutant is m for m in everywhere):
            return of
        return [c for c in of if SCRIPTS[c.op][0] in _scripts_edited(mutant)]
    # the f16 contract-noise rows a mutant that shows in f16 fails: their blame is checked too
    f16_contract = [c for c in everything if c not in cases]
    got = {k: _failing(v) for k, v in _catalog("es-paper", AT_SCALE, lambda name: reached(table[name], cases), table,
                                               tmp_path, lambda m: reached(m, f16_contract)
                                               if "f16" in (m.shows or ()) else []).items()}
    for name, failing in got.items():
        if name in EQUIVALENTS:
            assert failing == [], (name, failing)
        elif name not in UNSEEN:
            assert failing, f"{name}: no row failed"
    # where each fault reaches: the _iid slot faults only the _iid scripts, the countdown edits only countdown
    assert all("-iid" in c for c in got["iid-update-without-slot"] + got["iid-perturb-without-slot"])
    assert all("main-countdown/" in c or "main-countdown/N" in c for c in got["initial-seed-ignored"])
    assert not any("/f32/" in c for c in got["accumulator-f32"])   # an f32 accumulator is the f32 scripts' own


@pytest.mark.slow
def test_skill_mutants_fail_and_equivalents_pass(tmp_path):
    cases = _matrix_cases("skill-sample")
    table = {**SKILL_MUTANTS, **{k: v for k, v in EQUIVALENTS.items() if v.target == "skill-sample"}}
    statuses = _catalog("skill-sample", SKILL_DIR, cases, table, tmp_path)
    got = {k: _failing(v) for k, v in statuses.items()}
    for name, failing in got.items():
        if name in EQUIVALENTS or name in FIXES:
            assert failing == [], (name, failing)
        elif name not in UNSEEN:
            assert failing, f"{name}: no row failed"
    # the page's stated intent (weights by reward rank) is told apart from the published sample
    assert any("/f32/" in c for c in got["utilities-by-rank"])
    # fixing the bf16 crash makes the bf16 rows run and compare (they pass: the fix changes nothing else)
    fixed = statuses["unused-accumulation-dropped"]
    assert {s for c, s in fixed.items() if "/bf16/" in c} == {"pass"}


def test_skill_case_checks():
    adapter = get("skill-sample")
    good = adapter.cases(MatrixSpec(devices=("cpu",), dtypes=("f32",), schemes=("correlated",)))[0]
    adapter.check_case(good)
    with pytest.raises(ValueError, match="correlated"):
        adapter.check_case(Case("skill-sample", "cpu", "f32", "iid", "es_train_loop", 5, 0.017, 0.001))
    with pytest.raises(ValueError, match="not an op"):
        adapter.check_case(Case("skill-sample", "cpu", "f32", "correlated", "perturb", 5, 0.017, 0.001))
