"""The repeat check of a parity run (docs/parity.md "The repeat check").

One child serves many cases in a row, so a reference that keeps state
between calls (a module-level cache, a counter, a generator kept alive)
can make a case's result depend on the cases run before it, and one
order of the matrix may happen to hide it. After a target's cases, the
runner runs some of them again, in the reverse order, and the
reference's result bits of each must be identical to its first run's: a
difference fails the row with the diagnosis `state`, naming the two run
positions (the n-th case this target ran) and the first differing
element. Our side is not involved: it is deterministic, and the check
is about the reference.
"""
from __future__ import annotations

import numpy as np

#: how many cases of a target are run again (spread over its single-operation rows)
REPEATS = 6
#: the row statuses whose reference result was compared, and so can be checked again
CHECKED = ("pass", "fail", "artifact", "unverifiable")


def choose(cases, count: int = REPEATS, exclude_ops=()) -> list[int]:
    """Indices (into `cases`) of up to `count` cases to run again, spread evenly over the cases
    whose op is not in `exclude_ops` (the training loops have their own tape); in the order they
    are to be run again: the reverse of the first run's."""
    eligible = [k for k, c in enumerate(cases) if c.op not in exclude_ops and not c.big]
    if len(eligible) <= count:
        return eligible[::-1]
    picked = sorted({eligible[(j * (len(eligible) - 1)) // (count - 1)] for j in range(count)}) if count > 1 \
        else [eligible[-1]]
    return picked[::-1]


def difference(first, again, names) -> str:
    """'' when the two results (lists of raw bit arrays, slot order) are identical, else which
    element differs first and how many do."""
    if len(first) != len(again):
        return f"{len(first)} result tensors, then {len(again)}"
    total, where = 0, ""
    for k, (a, b) in enumerate(zip(first, again)):
        a, b = np.asarray(a).reshape(-1), np.asarray(b).reshape(-1)
        if a.shape != b.shape or a.dtype != b.dtype:
            return f"slot {k} ({names[k] if k < len(names) else k}) changed layout: {a.shape} then {b.shape}"
        bad = np.flatnonzero(a != b)
        if bad.size and not where:
            i = int(bad[0])
            width = a.dtype.itemsize * 2
            where = (f"{names[k] if k < len(names) else f'slot{k}'}[{i}]: 0x{int(a[i]):0{width}x} then "
                     f"0x{int(b[i]):0{width}x}")
        total += int(bad.size)
    return f"{total} element(s) differ, first {where}" if total else ""


def mark(row: dict, first: int, again: int, text: str) -> dict:
    """`row` failed with the diagnosis `state` (in place, and returned)."""
    diagnoses = [d for d in str(row.get("diagnosis") or "").split(",") if d]
    note = (f"state: the reference's result at run position {first} and again at position {again} (after "
            f"{again - first - 1} other case(s), in another order) differ: {text}; it depends on what ran "
            "before it (state kept between calls, e.g. a module-level cache)")
    before = f"; first run: {row['status']}" + (f": {row['detail']}" if row.get("detail") else "")
    row.update(status="fail", diagnosis=",".join(diagnoses + ["state"]), detail=note + before)
    return row


def run_again(session, history, done: int, stop=None) -> list:
    """Run each (position, case, row, theirs, clone) of `history` again on `session`, in that order,
    after the `done` cases run so far; a row whose reference result differs from its first run's is
    failed with the diagnosis `state` (in place). `stop`: a threading.Event that ends the check early.
    Returns the report's record of the check."""
    from .paramsets import shapes_of
    from .row_runner import add_blame, checked_case
    record = []
    for position, case, row, theirs, clone in history:
        if stop is not None and stop.is_set():
            break
        if row["status"] not in CHECKED or not theirs or theirs[0] != case.case_id:
            continue
        done += 1
        session.last_theirs = None
        session.variant_clone = clone
        again = checked_case(session, case)
        entry = {"case": case.case_id, "first": position, "again": done}
        if session.last_theirs is None or session.last_theirs[0] != case.case_id:
            entry["identical"] = None
            entry["note"] = f"not compared: the second run is {again['status']}: {again['detail'][:200]}"
        else:
            names = [n for n, _ in shapes_of(case.big, case.shapes)] if case.op != "zscore" else ["coeffs"]
            text = difference(theirs[1], session.last_theirs[1], names)
            entry["identical"] = not text
            if text:   # failed now: a row whose first run passed gets the blame of the second run's code
                add_blame(session, case, mark(row, position, done, text))
        record.append(entry)
    return record
