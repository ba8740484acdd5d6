"""A failing row names the reference's code (esverify.oracle.blame): the clone's
changes against its base (git diff, committed and uncommitted, each hunk in its enclosing function)
intersected with the functions the row ran (the child's per-row record). The stand-ins are not git
repositories: these tests make a git repository of a copied stand-in, commit it, then apply a mutant
of the catalog (tests/standins/mutants.py) as an uncommitted edit, or as a commit."""
from __future__ import annotations

import shutil
import subprocess

import pytest

from esverify.oracle import Options, Runner, cases
from esverify.oracle.blame import Changes, Hunk, clone_changes, enclosing, explain, functions_of, parse_diff
from standins.mutants import MUTANTS, STANDINS

WORKER = "es_at_scale/utils/worker_extension.py"


def _git(root, *args):
    return subprocess.run(["git", "-C", str(root), "-c", "user.name=t", "-c", "user.email=t@example.org", *args],
                          check=True, capture_output=True, text=True).stdout.strip()


def git_clone_of(tmp_path, target: str):
    """A copy of the stand-in of `target`, a git repository with one commit; (root, that commit)."""
    root = tmp_path / target
    shutil.copytree(STANDINS / target, root, ignore=shutil.ignore_patterns("__pycache__"))
    _git(root, "init", "-q")
    _git(root, "add", "-A")
    _git(root, "commit", "-qm", "stand-in")
    return root, _git(root, "rev-parse", "HEAD")


def apply(root, name):
    for rel, old, new in MUTANTS[name].edits:
        path = root / rel
        text = path.read_text()
        assert text.count(old) == 1
        path.write_text(text.replace(old, new))


def test_functions_and_the_one_that_encloses_a_line():
    source = "import x\n\n\nclass A:\n    @staticmethod\n    def f():\n        def g():\n            return 1\n" \
             "        return g\n\n\ndef h():\n    pass\n"
    functions = functions_of(source)
    assert functions == [("A.f", 5, 9, 7), ("A.f.g", 7, 8, 8), ("h", 12, 13, 13)]
    assert [enclosing(functions, n) for n in (1, 5, 8, 9, 12, 13)] == [
        "module level", "A.f", "A.f.g", "A.f", "h", "h"]
    assert functions_of("def (:\n") is None   # not parsed: never "module level"


def test_the_diff_parser_reads_hunks_in_the_new_file():
    diff = ("diff --git a/m.py b/m.py\n--- a/m.py\n+++ b/m.py\n@@ -3 +3 @@ def f():\n-a\n+b\n"
            "@@ -10,2 +9,0 @@\n-x\n-y\n@@ -20,0 +21,3 @@\n+p\n+q\n+r\n"
            "diff --git a/gone.py b/gone.py\n--- a/gone.py\n+++ /dev/null\n@@ -1,2 +0,0 @@\n-a\n-b\n")
    assert parse_diff(diff) == [("m.py", 3, 3), ("m.py", 9, 9), ("m.py", 21, 23)]


def test_a_clean_clone_an_uncommitted_mutant_and_a_committed_one(tmp_path):
    root, base = git_clone_of(tmp_path, "es-at-scale")
    clean = clone_changes(root, base[:7])
    assert (clean.state, clean.hunks, clean.note) == ("clean", [], "")
    # the validated commit (574a9d1) is not in a fresh repository's history: only uncommitted changes count
    assert "whose history lacks the validated commit 574a9d1" in clone_changes(root, "574a9d1").note
    apply(root, "sigma-constant")
    line = next(n for n, text in enumerate((root / WORKER).read_text().splitlines(), 1) if "0.001" in text)
    want = [Hunk(WORKER, line, line, "WorkerExtension.perturb_self_weights")]
    assert clone_changes(root, "574a9d1").hunks == want
    assert clone_changes(root, base[:7]).hunks == want
    _git(root, "commit", "-qam", "the mutant")
    assert clone_changes(root, "574a9d1").hunks == []           # committed, and no base in history to count from
    after = clone_changes(root, base[:7])
    assert after.hunks == want and after.note.startswith(f"the clone is at {_git(root, 'rev-parse', 'HEAD')[:7]}, "
                                                        f"after the validated {base[:7]}")
    (root / "extra.py").write_text("def new():\n    return 1\n")   # untracked files are changes too
    assert Hunk("extra.py", 1, 2, "new") in clone_changes(root, base[:7]).hunks


def test_a_changed_default_argument_is_a_signature_hunk_that_ran_with_its_module(tmp_path):
    """A default argument (or a decorator) is evaluated when the module is imported and can be read
    without a call (the parity child reads launch_engines' default precision and never calls it): the
    hunk is the function's signature, and it ran when any function of its file ran."""
    root = tmp_path / "clone"
    root.mkdir()
    (root / "m.py").write_text("class T:\n    def launch(self, n=4,\n               precision='bfloat16'):\n"
                               "        return precision\n\n    def fit(self):\n        return 1\n")
    _git(root, "init", "-q")
    _git(root, "add", "-A")
    _git(root, "commit", "-qm", "base")
    (root / "m.py").write_text((root / "m.py").read_text().replace("'bfloat16'", "'float16'")
                               .replace("return 1", "return 2"))
    hunks = clone_changes(root, "").hunks
    assert hunks == [Hunk("m.py", 3, 3, "T.launch", signature=True), Hunk("m.py", 7, 7, "T.fit")]
    blame = explain(Changes("changed", base="abc", hunks=hunks[:1]), {"m.py": ["T.fit"]}, [])
    assert blame == ("the clone differs from abc in m.py:3, in T.launch (its signature), which this row ran; "
                     "no other changed line ran")
    # a getter and its setter share one name: the getter's body line is no signature for the setter's body
    (root / "p.py").write_text("class P:\n    @property\n    def x(self):\n        return 1\n\n"
                               "    @x.setter\n    def x(self, v):\n        self.v = v\n")
    _git(root, "add", "-A")
    _git(root, "commit", "-qm", "property")
    (root / "p.py").write_text((root / "p.py").read_text().replace("return 1", "return 2"))
    assert clone_changes(root, "").hunks[-1:] == [Hunk("p.py", 4, 4, "P.x")]
    # a body line of a function the row did not call did not run
    blame = explain(Changes("changed", base="abc", hunks=hunks[1:]), {"m.py": ["T.launch"]}, [])
    assert "none of which this row ran" in blame


def test_not_a_git_checkout(tmp_path):
    copy = tmp_path / "copy"
    shutil.copytree(STANDINS / "es-awd", copy)
    assert clone_changes(copy, "f432ff8").state == "no-git"


def test_explain_names_what_ran_and_what_did_not():
    changed = Changes("changed", base="574a9d1", head="574a9d1", hunks=[
        Hunk(WORKER, 127, 127, "WorkerExtension.update_weights_from_seeds"),
        Hunk(WORKER, 60, 61, "WorkerExtension.restore_self_weights")])
    ran = {WORKER: ["WorkerExtension.update_weights_from_seeds"]}
    assert explain(changed, ran, []) == (
        f"the clone differs from 574a9d1 in {WORKER}:127, in WorkerExtension.update_weights_from_seeds, which this "
        f"row ran; other changed lines did not run: {WORKER}:60-61, in WorkerExtension.restore_self_weights")
    assert explain(Changes("changed", base="574a9d1", hunks=changed.hunks[:1]), ran, []).endswith(
        "which this row ran; no other changed line ran")
    assert "none of which this row ran" in explain(changed, {WORKER: ["WorkerExtension.perturb_self_weights"]},
                                                   [f"{WORKER}::WorkerExtension.perturb_self_weights"])
    assert "which of it this row ran is unknown" in explain(changed, None, [])
    # a clean clone names the function that computes the row's op, among those the row ran
    computes = [f"{WORKER}::WorkerExtension.perturb_self_weights", f"{WORKER}::WorkerExtension.restore_self_weights"]
    assert explain(Changes("clean", base="574a9d1", head="574a9d1"), {WORKER: ["WorkerExtension.restore_self_weights"]},
                   computes) == ("the clone is clean at 574a9d1; the first differing quantity is computed by "
                                 f"WorkerExtension.restore_self_weights ({WORKER})")
    assert explain(Changes("no-git", note="the clone is not a git checkout: its changes cannot be named"), None,
                   ["*::es_train_loop"]) == ("the clone is not a git checkout: its changes cannot be named; the first "
                                             "differing quantity is computed by es_train_loop")


def _rows(clone, target, case_pattern, dtypes=("f32",), profile=None, **opts):
    matrix = cases.build_matrix([target], ["cpu"], dtypes, ("iid", "correlated"), iterations=1, small=True,
                                noises=("contract",), loops=False)
    runner = Runner(Options(target=target, devices=("cpu",), quiet=True, timeout=120, **opts))
    with runner.session(target, clone) as run:
        return [run(c) for c in cases.select(matrix, case_pattern)[:2]]


@pytest.mark.parametrize("committed", [False, True])
@pytest.mark.slow   # 3 s (--durations, 2026-12-03): out of the fast tier
def test_a_failing_row_names_the_patched_function(tmp_path, committed):
    root, base = git_clone_of(tmp_path, "es-awd")
    apply(root, "awd-divide-by-len-seeds")
    if committed:
        _git(root, "commit", "-qam", "the mutant")
    rows = _rows(root, "es-awd", "*/correlated/mirrored/*", blame_base=base[:7] if committed else None)
    failing = [r for r in rows if r["status"] == "fail"]
    assert failing, [(r["case"], r["status"], r["detail"][:100]) for r in rows]
    for r in failing:
        assert "in weight_update_utils.py:" in r["blame"] and ", in update_parameters_from_seeds, which this row ran; " \
            "no other changed line ran" in r["blame"], r["blame"]
    assert all(r["blame"] == "" for r in rows if r["status"] == "pass")


def test_rows_of_one_cause_are_one_block_and_every_cause_is_on_the_first_screen():
    """81 failing rows of one changed hunk (any dtype, scheme, op, detail) are ONE cause with its count
    and span, in the console (within its first 40 lines, beside the other cause), parity.md and HTML."""
    from pathlib import Path

    import pandas as pd

    from esverify.oracle import parity_report
    from esverify.oracle.console import console_text, summary_pivot
    from esverify.oracle.rows import COLUMNS
    blame = (f"the clone differs from 574a9d1 in {WORKER}:107, in WorkerExtension.update_weights_from_seeds, "
             "which this row ran; no other changed line ran")
    rows = []
    for k in range(81):
        dtype, scheme, op = ("f32", "f16", "bf16")[k % 3], ("iid", "correlated")[k % 2], ("update", "loop")[k % 2]
        r = {c: "" for c in COLUMNS}
        r.update(target="es-at-scale", device="cpu", dtype=dtype, scheme=scheme, noise="contract", op=op,
                 population=7 + k, case=f"es-at-scale/cpu/{dtype}/{scheme}/{op}/N{7 + k}", status="fail",
                 detail=f"{op}: {k + 1} of 99 elements differ", blame=blame)
        rows.append(r)
    other = dict(rows[0], case="es-at-scale/cpu/f32/iid/zscore/N7", op="zscore", status="error",
                 detail="zscore: the reference side raised ValueError", blame="the clone is clean at 574a9d1; the "
                 "first differing quantity is computed by z_score (es_at_scale/utils/reward_shaping.py)")
    frame = pd.DataFrame(rows + [other], columns=COLUMNS)
    entries = parity_report.attention(frame, None, {}, {})
    assert list(entries["rows"]) == [81, 1]
    assert entries["spans"].iloc[0] == ("targets es-at-scale; devices cpu; dtypes f32, f16, bf16; schemes iid, "
                                        "correlated; ops update, loop; noise contract")
    text = console_text(frame, summary_pivot(frame), {"wall_time_s": 1.0, "warnings": []}, Path("out"), 1, "fail")
    screen = "\n".join(text.split("\n")[:40])
    assert "needs attention: 2 causes" in screen and "  fail (81 rows; targets es-at-scale;" in screen
    assert "WorkerExtension.update_weights_from_seeds" in screen and "  error (1 row;" in screen and "z_score" in screen
    md = parity_report.attention_markdown(entries)
    assert md.count("\n- **") == 1 and "81 row(s)" in md and "  - code: the clone differs from 574a9d1" in md
    page = parity_report.attention_html(entries)
    assert page.count("<div class='entry'>") == 2 and "<p>spans: targets es-at-scale;" in page
