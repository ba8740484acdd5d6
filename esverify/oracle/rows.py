"""The row of a parity case: its columns, statuses and the helpers that build one (docs/parity.md, "Statuses").

Design record: a row is a plain dict with the columns COLUMNS,
made by `make_row` for every kind of row (single-op, loop, an adapter's
own); the rule column comes from the case's adapter, so nothing here
names a reference.
"""
from __future__ import annotations

import re

from ..numerics_probe import what_is_off

COLUMNS = ["target", "device", "dtype", "scheme", "noise", "op", "population", "case", "rule", "elements",
           "mismatches", "max_abs_diff", "max_ulp_diff", "first_mismatch_index", "first_mismatch_ours",
           "first_mismatch_theirs", "status", "diagnosis", "detail", "params", "reference_settings", "blame"]
#: every row status, in report order; "not-run" marks the rows an interrupted run did not reach
#: "unsupported": a case the --impl wrapper does not claim (never a pass); "defect": the reference itself
#: cannot run the case, a documented defect of it (a finding of the reference, never a pass, never ours)
STATUSES = ("pass", "fail", "error", "skipped", "unverifiable", "artifact", "defect", "unsupported", "not-run")
#: statuses that make the exit code 1 (with --require-all, "skipped" too)
FAILING = ("fail", "error", "unverifiable")
NO_CUDA = ("not checked here: the child sees no CUDA device; to check it: run on a machine with a CUDA GPU "
           "and a CUDA build of torch (--devices cuda)")


def make_row(case, **fields) -> dict:
    """A row of `case` (status "error" unless `fields` say otherwise); fields override the columns."""
    from .adapters import get, names
    row = {"target": case.target, "device": case.device, "dtype": case.dtype, "scheme": case.scheme,
           "noise": case.noise, "op": case.op, "population": case.population, "case": case.case_id,
           "rule": get(case.target).rule_for(case.device) if case.target in names() else "",
           "elements": None, "mismatches": None,
           "max_abs_diff": None, "max_ulp_diff": None, "first_mismatch_index": "",
           "first_mismatch_ours": "", "first_mismatch_theirs": "", "status": "error", "diagnosis": "",
           "detail": "", "params": case.params_text() if case.op != "zscore" else "", "reference_settings": "",
           "blame": ""}
    row.update(fields)
    return row


FLUSH_STATUSES = ("pass", "fail", "artifact", "unverifiable")   #: rows a flushing child turns into fail


def flush_row(row: dict, findings: list, target: str) -> dict:
    """`row`, failed with diagnosis `flush` when the child reported FTZ/DAZ or a rounding mode other than to
    nearest after its case (`findings`, the probe's lines): a reference process that flushes subnormals to
    zero computes no IEEE results in the subnormal range, and one that rounds otherwise no contract result,
    whether or not this case's values showed it (docs/parity.md "Subnormals").
    Rows that did not compare (error, skipped, unsupported, not-run) keep their status."""
    if not findings or row["status"] not in FLUSH_STATUSES:
        return row
    does, causes, cost = what_is_off(findings)   # FTZ/DAZ, or a rounding mode other than to nearest
    note = (f"the {target} child {does} after this case: {findings[0]}"
            + (f" (+{len(findings) - 1} more probe(s))" if len(findings) > 1 else "")
            + f"; usual causes: {causes}; {cost}")
    diagnosis = ",".join([d for d in row["diagnosis"].split(",") if d] + ["flush"])
    return dict(row, status="fail", diagnosis=diagnosis,
                detail=note + (f"; row before the probe: {row['status']}" + (f": {row['detail']}" if row["detail"]
                                                                             else "")))


def too_old_python(case, load_error: dict, env: dict) -> dict | None:
    """A `skipped` row when `load_error` (the child's diagnosis of a reference file) says the file
    needs a newer Python than the child's: the clone is fine, the row is not checked here. Else None."""
    needs = str(load_error.get("needs") or "")
    if load_error.get("kind") != "syntax" or not re.match(r"Python \d+\.\d+ or newer", needs):
        return None
    version = needs.split(" or newer")[0]
    return make_row(case, status="skipped", detail=(
        f"not checked here: {load_error.get('file')} needs {needs}; the child is Python "
        f"{env.get('python') or '?'}; to check it: pass --python with a {version}+ interpreter that has "
        f"torch and numpy (--python {case.target}=PATH: for this reference alone)"))


