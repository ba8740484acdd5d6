"""The mutation catalog of the parity runner (tests/standins/mutants.py).

Each mutant is a stand-in clone with ONE detail edited, of seven kinds:
hook (how the reference uses its generators, docs/references.md §3a), masking
(bugs a fixed sigma, alpha, lambda, sorted seeds or plain tensor names
would hide), numerics (where a rounding happens), accounting (what a
row's own draws show: eager, skip, reuse), structure (rules keyed on the
layer index or a tie: the `layers` set), rewards (code that acts on
outliers, a degenerate std: the reward populations) and state (what a
case leaves behind: the repeat check, run on the state mutants and on
every equivalent). Each runs only on the rows it
needs (a --case pattern, --small, one loop iteration) and must get the
status its table gives on every row (every other row passes), with its
named diagnosis in the row, and each failing row's blame must name the
edited function (each mutant is a git checkout with its
edit uncommitted). Equivalent mutants compute the same bits by other
means and must pass every row. The catalog runs two mutants at a
time (two children busy beside our side); the test prints the detection
rate and asserts 100% detection and no false alarm.

Why some rows of a mutant still pass (measured, and expected): a change
in the f32 accumulator (fma-update, per-term-scaling, alpha-over-n-in-f32)
moves it by a few f32 ulps, which the final rounding to bf16 hides in the
small sets; noise drawn in f32 and cast is invisible under contract noise
(the hook rounds the same contract values either way) and only native
noise shows it.
"""
from __future__ import annotations

import fnmatch
from concurrent.futures import ThreadPoolExecutor

import pytest

from esverify.oracle import Options, Runner, cases
from standins.mutants import BLAMED, EQUIVALENTS, MUTANTS, STANDINS, edited_functions, make_mutant, names_the_edit

KINDS = ("hook", "masking", "numerics", "accounting", "structure", "rewards", "state")


def expected_status(mutant, case_id: str, case=None) -> str:
    """The status mutant's table gives the row `case_id` (`case`: that row's Case, when the caller has it)."""
    if callable(mutant.expect):     # a rule on the case's own parameters
        if case is None:
            case = next(c for c in cases_for(mutant) if c.case_id == case_id)
        return mutant.expect(case)
    for pattern, status in mutant.expect:
        if fnmatch.fnmatchcase(case_id, pattern):
            return status
    return "pass"


def cases_for(mutant):
    """The rows a mutant runs on: its run config applied to the default matrix (small, one iteration)."""
    run = dict(mutant.run)
    matrix = cases.build_matrix([mutant.target], ["cpu"], run.get("dtypes", ("f32",)),
                                run.get("schemes", ("iid", "correlated")), iterations=1, small=True,
                                noises=run.get("noises", ("contract", "native")), loops=False)
    # the training-loop rows have their own catalog (standins/loop_mutants.py, test_parity_loops.py): a
    # worker mutant shows there too, and "dividing by len(seeds)" is no equivalent under mirroring
    return cases.select(matrix, run.get("case"))


def run_group(tmp_path, target, names, catalog) -> dict:
    """{mutant: {case id: (status, diagnosis, detail, blame)}}: one child serves every mutant of the group; each
    mutant is a git checkout with its edit uncommitted, so a failing row's blame can name the edit."""
    base = STANDINS / target
    runner = Runner(Options(target=target, devices=("cpu",), quiet=True, timeout=120))
    results = {}
    with runner.session(target, base) as run:
        for name in names:
            clone = make_mutant(tmp_path, name, git=True)
            run.forget()
            rows = [run(case, clone=clone) for case in cases_for(catalog[name])]
            # the repeat check (this mutant's rows again, in the reverse order): the state mutants need it,
            # and an equivalent must pass it too; a row whose second run differs is failed in place
            if catalog[name].kind == "state" or name in EQUIVALENTS:
                run.repeat()
            results[name] = {r["case"]: (r["status"], r["diagnosis"], r["detail"], r["blame"]) for r in rows}
    return results


def run_catalog(tmp_path, catalog, workers=2) -> dict:
    """Every mutant of `catalog`, in `workers` groups per target run side by side (one child each)."""
    groups = []
    for target in ("es-at-scale", "es-awd"):
        names = [n for n, m in catalog.items() if m.target == target]
        groups += [names[k::workers] for k in range(workers) if names[k::workers]]
    results = {}
    with ThreadPoolExecutor(max_workers=workers) as pool:
        for part in pool.map(lambda g: run_group(tmp_path, catalog[g[0]].target, g, catalog), groups):
            results.update(part)
    return results


def check_mutant(name, mutant, rows) -> list:
    """The problems of one mutant's rows against its table (empty when all is as expected)."""
    problems = []
    if not rows:
        return [f"{name}: no rows ran"]
    patched = edited_functions(mutant.target, mutant.edits)
    for case_id, (status, diagnosis, detail, blame) in rows.items():
        want = expected_status(mutant, case_id)
        if status != want:
            problems.append(f"{name}: {case_id}: got {status} ({detail[:160]}), want {want}")
        elif status != "pass" and mutant.diagnosis and mutant.diagnosis not in diagnosis.split(","):
            problems.append(f"{name}: {case_id}: diagnosis {diagnosis!r} lacks {mutant.diagnosis!r}: {detail[:160]}")
        elif status == "fail" and "skip" not in diagnosis and not any(w in detail for w in ("differ", "skip")):
            problems.append(f"{name}: {case_id}: a fail without the differing elements named: {detail[:160]}")
        if status in BLAMED and not names_the_edit(blame, patched):   # every blamed row names the edit
            problems.append(f"{name}: {case_id}: the blame does not name the edited function of {sorted(patched)}: "
                            f"{blame[:300]}")
        if "harmless" in detail:
            problems.append(f"{name}: {case_id}: a detail calls something harmless: {detail[:160]}")
    if not any(s != "pass" for s, *_ in rows.values()) and mutant.expect:
        problems.append(f"{name}: no row flagged it")
    return problems


def test_catalog_shape():
    assert len(MUTANTS) >= 40 and len(EQUIVALENTS) >= 8
    assert {m.kind for m in MUTANTS.values()} == set(KINDS)
    for name, m in {**MUTANTS, **EQUIVALENTS}.items():
        assert m.what and m.target in ("es-at-scale", "es-awd") and m.kind in KINDS, name
        assert len({rel for rel, _, _ in m.edits}) == 1, f"{name} edits more than one file"
        assert m.expect is not None, f"{name}: no table"
    for name, m in MUTANTS.items():
        statuses = {m.expect(c) for c in cases_for(m)} if callable(m.expect) else {s for _, s in m.expect}
        assert statuses - {"pass"}, f"{name}: a mutant must be flagged somewhere"
    assert not any(m.expect for m in EQUIVALENTS.values())


@pytest.mark.slow
def test_catalog_is_detected_and_equivalents_pass(tmp_path):
    catalog = {**MUTANTS, **EQUIVALENTS}
    results = run_catalog(tmp_path, catalog)
    problems = []
    for name, m in catalog.items():
        problems += check_mutant(name, m, results[name])
    detected = [n for n in MUTANTS if not check_mutant(n, MUTANTS[n], results[n])]
    false_alarms = [n for n in EQUIVALENTS if check_mutant(n, EQUIVALENTS[n], results[n])]
    by_kind = {k: f"{sum(1 for n in detected if MUTANTS[n].kind == k)}/"
                  f"{sum(1 for m in MUTANTS.values() if m.kind == k)}" for k in KINDS}
    print(f"\nmutation catalog: {len(detected)}/{len(MUTANTS)} detected as tabled "
          f"({100 * len(detected) / len(MUTANTS):.0f}%; by kind {by_kind}); "
          f"{len(EQUIVALENTS) - len(false_alarms)}/{len(EQUIVALENTS)} equivalents pass; "
          f"{sum(len(r) for r in results.values())} rows")
    assert not problems, "\n".join(problems)
