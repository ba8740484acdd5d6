"""The core owns every verdict: no module under esverify/references/ decides a row's status or builds a row.

A reference returns results (esverify.oracle.verdict.Outcome, or a fact that ended its row early) and the
core's esverify.oracle.verdict turns them into the row (docs/parity.md, "Diagnoses"). Read from the syntax
tree, so a docstring or comment that spells a verdict is not a hit, and an aliased call or import still is.
"""
from __future__ import annotations

import ast
from pathlib import Path

from esverify.oracle.rows import STATUSES

ROOT = Path(__file__).resolve().parents[1]
REFERENCES = ROOT / "esverify" / "references"
#: the names a row's verdict is written to
VERDICT_FIELDS = {"status", "verdict"}
#: the core's functions that build a row or decide its status (a call, an attribute or an import is a hit)
ROW_BUILDERS = {"row", "make_row", "reference_error_row", "too_old_python", "flush_row", "error_row", "ended_row",
                "reference_row", "loop_row", "single_row", "judge_loop", "keep", "judge_reuse", "record_reuse",
                "diagnose"}
#: core modules only the core imports: the dispatch, the loop rows, the row type
CORE_ROW_MODULES = {"esverify.oracle.row_runner", "esverify.oracle.loop_rows", "esverify.oracle.rows"}
#: the child protocol's reply status (a child driver answers "ok" or "error"; it never builds a row)
CHILD_PROTOCOL = {"ok", "error"}


def _verdicts_in(node, allowed=frozenset()) -> list:
    return [n.value for n in ast.walk(node) if isinstance(n, ast.Constant) and isinstance(n.value, str)
            and n.value in STATUSES and n.value not in allowed]


def _field_name(target) -> str | None:
    if isinstance(target, ast.Name):
        return target.id
    if isinstance(target, ast.Attribute):
        return target.attr
    if isinstance(target, ast.Subscript) and isinstance(target.slice, ast.Constant):
        return target.slice.value if isinstance(target.slice.value, str) else None
    return None


def _called(func) -> str | None:
    """The name a call reaches: `f(...)` and `anything.f(...)` both reach f."""
    return func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None


def hits(source: str, child: bool = False) -> list:
    """['line N: what'] for each place in `source` that decides a verdict or builds a row; child: a child
    driver's file, whose replies may say "error" (the child protocol's status)."""
    allowed = CHILD_PROTOCOL if child else frozenset()
    out = []
    for node in ast.walk(ast.parse(source)):
        line = getattr(node, "lineno", 0)
        if isinstance(node, ast.keyword) and node.arg in VERDICT_FIELDS and _verdicts_in(node.value, allowed):
            out.append(f"line {node.value.lineno}: {node.arg}={_verdicts_in(node.value, allowed)}")
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)) and node.value is not None:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(_field_name(t) in VERDICT_FIELDS for t in targets) and _verdicts_in(node.value, allowed):
                out.append(f"line {line}: a verdict assigned: {_verdicts_in(node.value, allowed)}")
        elif isinstance(node, ast.Dict):
            for key, value in zip(node.keys, node.values):
                if isinstance(key, ast.Constant) and key.value in VERDICT_FIELDS and _verdicts_in(value, allowed):
                    out.append(f"line {line}: a row dict with {key.value} {_verdicts_in(value, allowed)}")
        elif isinstance(node, ast.Call) and _called(node.func) in ROW_BUILDERS:
            out.append(f"line {line}: calls the core's {_called(node.func)}")
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            names = {a.name for a in node.names}
            if module in CORE_ROW_MODULES or (module.startswith("esverify.oracle") and names & ROW_BUILDERS):
                out.append(f"line {line}: imports {sorted(names)} from {module}")
        elif isinstance(node, ast.Import):
            out += [f"line {line}: imports {a.name}" for a in node.names if a.name in CORE_ROW_MODULES]
    return sorted(out, key=lambda hit: int(hit.split(":")[0].split()[1]))


def test_no_reference_module_decides_a_verdict_or_builds_a_row():
    found = {}
    for path in sorted(REFERENCES.rglob("*.py")):
        rel = path.relative_to(ROOT)
        lines = hits(path.read_text(encoding="utf-8"), child="child" in rel.parts)
        if lines:
            found[str(rel)] = lines
    assert not found, "verdicts decided or rows built outside the core (esverify.oracle.verdict):\n" + "\n".join(
        f"{rel}: {line}" for rel, lines in found.items() for line in lines)


def test_the_check_reads_code_not_text():
    """A docstring, a comment or a plain string that spells a verdict is no hit; each way code writes one,
    and each way it reaches the core's row builders, is."""
    quiet = '''
"""A row is status="fail" when it differs: session.row(case, status="error"); status = "pass"."""
# status = "fail"
text = "the row's status is pass"
status_line = {"detail": "fail"}
reply = {"status": "ok"}
self.row.before_call(owner)
'''
    assert hits(quiet) == []
    loud = {
        'session.row(case, status="error", detail="x")': ["status=['error']", "calls the core's row"],
        'status = "fail" if diff else "pass"': ["a verdict assigned: ['fail', 'pass']"],
        'row["status"] = "artifact"': ["a verdict assigned: ['artifact']"],
        'out = {"status": "unverifiable"}': ["a row dict with status ['unverifiable']"],
        'make = make_row(case)': ["calls the core's make_row"],
        'from esverify.oracle.rows import make_row as m': ["imports ['make_row'] from esverify.oracle.rows"],
        'from esverify.oracle.verdict import reference_row': ["imports ['reference_row'] from esverify.oracle.verdict"],
        'import esverify.oracle.row_runner': ["imports esverify.oracle.row_runner"],
        'x = _compare.judge_reuse("iid", True, None, "")': ["calls the core's judge_reuse"],
        'return session.reference_error_row(case, err)': ["calls the core's reference_error_row"],
    }
    for code, want in loud.items():
        got = hits(code)
        assert all(any(w in g for g in got) for w in want), (code, got)
    # a child driver's reply may say "error" (its protocol), never another verdict
    assert hits('answer.update(status="error")', child=True) == []
    assert hits('answer.update(status="pass")', child=True) != []


class _Session:
    """What reference_row asks of a session, recorded."""

    class opts:
        keep_tensors = False

    def record_finding(self, key, case, observed):
        raise AssertionError("no finding expected")

    def row(self, case, **fields):
        return fields


def test_a_final_mismatch_fails_the_row_though_the_reference_names_no_difference():
    """The core judges the final state's bits itself: an Outcome whose diff is empty but whose final
    comparison has a mismatch is a `fail` naming it, never a pass; with no mismatch it passes."""
    from types import SimpleNamespace

    from esverify.oracle.compare import Comparison
    from esverify.oracle.verdict import Outcome, reference_row
    case = SimpleNamespace(op="main", case_id="x/cpu/f32/iid/main/N4")
    bad = Comparison(elements=8, mismatches=2, max_abs_diff=1.0, max_ulp_diff=3, first_index="w[1]",
                     first_ours="0x1", first_theirs="0x2", mismatched_slots=("w",))
    row = reference_row(_Session(), case, Outcome(diff="", final=bad))
    assert row["status"] == "fail" and row["detail"].startswith("main: final state: 2 of 8 elements differ")
    row = reference_row(_Session(), case, Outcome(diff="", final=Comparison(elements=8)))
    assert row["status"] == "pass" and row["detail"] == ""
