"""The done-when check of issue 32 item 1 over the stand-ins' mutant catalogs: every detected mutant's
failing rows name the patched file and function (the needs-attention entry shows its example row's
blame), and a clean clone's failure (a deliberately wrong profile) names the function that computes the
first differing quantity. Each mutant is a git repository of a copied stand-in with the mutant as an
uncommitted edit. Slow: it runs the catalogs' rows again (tests/test_parity_mutants.py,
test_parity_loops.py and test_parity_new_refs.py check their statuses).

Which rows: a mutant of the single-operation or loop catalog runs only the rows its table
(test_parity_mutants.expected_status, test_parity_loops.EXPECTED) says it flags; those tests assert that
every other row of the same selection passes, so the failing rows are the same and each is still
blame-checked. A state mutant (its fault is what a row leaves behind for the next) and a loop mutant whose
table is for more iterations than this run (ITERATIONS) keep every row, in order. The paper's and the
skill sample's mutants have no per-row table and keep their rows."""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from esverify.oracle import Options, Runner, cases
from esverify.oracle.adapters import MatrixSpec, get
from esverify.oracle.blame import enclosing, functions_of
from standins.loop_mutants import LOOP_MUTANTS
from standins.mutants import MUTANTS, STANDINS
from standins.new_ref_mutants import PAPER_MUTANTS, SKILL_MUTANTS

FAILING = ("fail", "error", "unverifiable")


def git_mutant(tmp: Path, folder: str, edits) -> tuple[Path, dict]:
    """A git repository of the stand-in `folder` with `edits` applied uncommitted; (root, {file: the
    functions enclosing the edited lines})."""
    root = tmp / "clone"
    shutil.copytree(STANDINS / folder, root, ignore=shutil.ignore_patterns("__pycache__"))
    git = ["git", "-C", str(root), "-c", "user.name=t", "-c", "user.email=t@example.org"]
    subprocess.run(git + ["init", "-q"], check=True)
    subprocess.run(git + ["add", "-A"], check=True)
    subprocess.run(git + ["commit", "-qm", "stand-in"], check=True)
    patched = {}
    for rel, old, new in edits:
        path = root / rel
        text = path.read_text()
        assert text.count(old) == 1, (rel, old)
        at = text.index(old)   # where the edit lands (its new text may also occur elsewhere)
        text = text.replace(old, new)
        path.write_text(text)
        start = text[:at].count("\n") + 1
        functions = functions_of(text)
        patched.setdefault(rel, set()).update(enclosing(functions, n) for n in range(start, start + new.count("\n") + 1))
    return root, patched


def names_it(blame: str, patched: dict) -> bool:
    return "which this row ran" in blame and any(f"{rel}:" in blame and any(f", in {fn}" in blame for fn in fns)
                                                 for rel, fns in patched.items())


def _single_cases(mutant):
    """The rows of cases_for(mutant) its table flags (every row of a state mutant: see the docstring)."""
    from test_parity_mutants import cases_for, expected_status
    rows = cases_for(mutant)
    if mutant.kind == "state":
        return rows
    return [c for c in rows if expected_status(mutant, c.case_id, c) != "pass"]


def _loop_cases(name, target):
    """The f32 loop rows of `target` that loop mutant `name`'s table flags (every row: see the docstring)."""
    from test_parity_loops import ITERATIONS, expected_statuses, row_key
    spec = MatrixSpec(devices=("cpu",), dtypes=("f32",), schemes=("iid" if target == "es-at-scale" else "correlated",),
                      iterations=1, small=True)
    rows = [c for c in get(target).cases(spec) if c.op in get(target).loop_ops]
    if name in ITERATIONS:
        return rows
    flagged = expected_statuses(name)
    return [c for c in rows if row_key(c.op, c.case_id, c.noise, c.dtype) in flagged]


def _new_ref_cases(target, mutant):
    spec = MatrixSpec(devices=("cpu",), dtypes=("f32", "f16", "bf16"), schemes=("correlated", "iid"))
    dtypes = set(mutant.shows or ("f32",))
    return [c for c in get(target).cases(spec) if c.dtype in dtypes][:6]


def catalog():
    """[(name, target, stand-in folder, edits, cases)] of every mutant of the three catalogs."""
    out = [(f"mutants:{n}", m.target, m.target, m.edits, lambda m=m: _single_cases(m)) for n, m in MUTANTS.items()]
    out += [(f"loop:{n}", t, t, e, lambda n=n, t=t: _loop_cases(n, t)) for n, (t, e, _) in LOOP_MUTANTS.items()]
    out += [(f"paper:{n}", "es-paper", m.target, m.edits, lambda m=m: _new_ref_cases("es-paper", m))
            for n, m in PAPER_MUTANTS.items()]
    out += [(f"skill:{n}", "skill-sample", m.target, m.edits, lambda m=m: _new_ref_cases("skill-sample", m))
            for n, m in SKILL_MUTANTS.items()]
    return out


def run_catalog(tmp_path) -> dict:
    """{mutant: (detected, every failing row names the patched file and function, an example blame)}."""
    results = {}
    by_target = {}
    for entry in catalog():
        by_target.setdefault(entry[1], []).append(entry)
    for target, entries in by_target.items():
        base = STANDINS / entries[0][2]
        runner = Runner(Options(target=target, devices=("cpu",), quiet=True, timeout=120, iterations=1))
        with runner.session(target, base) as run:
            for name, _, folder, edits, make_cases in entries:
                root, patched = git_mutant(tmp_path / name.replace(":", "-"), folder, edits)
                clone = get(target).clone_root(root) if target != "skill-sample" else root
                rows = [run(c, clone=clone) for c in make_cases()]
                bad = [r for r in rows if r["status"] in FAILING]
                results[name] = (bool(bad), all(names_it(r["blame"], patched) for r in bad),
                                 next((r["blame"] for r in bad if not names_it(r["blame"], patched)),
                                      bad[0]["blame"] if bad else ""), patched)
                log = os.environ.get("ESVERIFY_BLAME_LOG")   # progress of a long run, one line per mutant
                if log:
                    with open(log, "a", encoding="utf-8") as fh:
                        fh.write(f"{name}\tdetected={results[name][0]}\tnamed={results[name][1]}\t"
                                 f"{results[name][2]}\t{sorted((k, sorted(v)) for k, v in patched.items())}\n")
    return results


@pytest.mark.slow
def test_every_detected_mutant_names_the_patched_file_and_function(tmp_path):
    results = run_catalog(tmp_path)
    detected = {n: r for n, r in results.items() if r[0]}
    named = [n for n, r in detected.items() if r[1]]
    print(f"\nblame: {len(named)}/{len(detected)} detected mutants name the patched file and function "
          f"({len(results)} mutants run)")
    missed = {n: (r[2], r[3]) for n, r in detected.items() if not r[1]}
    assert not missed, "\n".join(f"{n}: {b} (patched {p})" for n, (b, p) in missed.items())


@pytest.mark.slow
def test_a_clean_clone_failure_names_the_function_that_computes_it(tmp_path, monkeypatch):
    """A deliberately wrong profile: our side under es-awd's numerics for es-at-scale's update."""
    from esverify.references.es_at_scale import adapter as es_at_scale
    root, _ = git_mutant(tmp_path, "es-at-scale", [])
    monkeypatch.setattr(es_at_scale.EsAtScale, "profile", "es-awd")
    matrix = cases.build_matrix(["es-at-scale"], ["cpu"], ("bf16",), ("correlated",), iterations=1, small=True,
                                noises=("contract",), loops=False)
    runner = Runner(Options(target="es-at-scale", devices=("cpu",), quiet=True, timeout=120))
    with runner.session("es-at-scale", root) as run:
        rows = [run(c) for c in cases.select(matrix, "*/update/N*")[:2]]
    failing = [r for r in rows if r["status"] == "fail"]
    assert failing, [(r["case"], r["status"]) for r in rows]
    for r in failing:
        assert r["blame"].startswith("the clone is clean at ") and r["blame"].endswith(
            "the first differing quantity is computed by WorkerExtension.update_weights_from_seeds "
            "(es_at_scale/utils/worker_extension.py)"), r["blame"]
