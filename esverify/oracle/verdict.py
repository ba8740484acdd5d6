"""The core's verdicts: our result and the reference's result in, one row out (docs/parity.md, "Diagnoses").

Design record: a row's status (pass, fail, artifact, unverifiable, defect, error), its diagnoses, its notes
and what is kept of a failing row (--keep-tensors) are decided in this module, for the generic single-op
rows (row_runner, with compare.diagnose), the core's loop rows (loop_rows) and the rows a reference runs
itself (`Adapter.run_row`) alike. Nothing here names a reference.

A reference that runs its own rows never builds a row. It talks to the child through `exchange` (a child
that dies, times out or breaks the protocol, or a reference that raises, ends the row with the core's row
here), states what ended a row early as a fact (`NotDriven`, `Unattributable`, `OursRaised`; a refused
noise backend is noise_policy.BackendRefused), and otherwise returns an `Outcome`: the first difference its
own comparison found, the final state's comparison, the child's draw accounting, its notes and findings.
`reference_row` turns that into the row. A row kind the core lacks (a reference's documented defect) is the
reference's first-result hook, handed to `exchange`: it names a `Defect`, and the core writes the row.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from . import compare as _compare
from . import paramsets
from .compare import Comparison, Findings


# ----------------------------------------------------------------- what a reference returns or states

@dataclass
class Draws:
    """The child's draw accounting of a reference's row: `found` (compare.findings of its reply's
    attribution) and `layout`, [(dtype name, shape)] per slot (where a slot never drawn may have borrowed
    another slot's noise, compare.reuse_sources). The accounting counts each slot's draws over the whole
    row (perturb, restore and update each draw once per member), so a note names slots, not calls."""
    found: Findings
    layout: list


@dataclass
class Outcome:
    """What a reference's own row ran and found, before any verdict (`reference_row` judges it).

    diff: the first difference its comparison found, in words ('' when every compared quantity agrees);
    final: the comparison of the final state (compare.Comparison: the row's element and mismatch
    columns; None when the row stopped before it); draws: the child's draw accounting (None: not kept);
    notes: notes in order, ahead of the core's; ran: what ran, the row's last note ('' for none);
    keep: (names, our tensors, the child's results file) kept for a failing row under --keep-tensors;
    findings: [(key, observed)] the reference's findings for the report (Session.record_finding)."""
    diff: str = ""
    final: Comparison | None = None
    draws: Draws | None = None
    notes: list = field(default_factory=list)
    ran: str = ""
    keep: tuple | None = None
    findings: list = field(default_factory=list)


@dataclass(frozen=True)
class Defect:
    """A reference's own documented defect, named by its first-result hook from the child's error reply:
    `text`, one line; `findings`, [(key, observed)] for the report. The row is `defect`, diagnosis
    `reference-defect`: nothing to compare (docs/parity.md, "Statuses")."""
    text: str
    findings: tuple = ()


class Ended(Exception):
    """A row that ended before any comparison, stated as a fact; `ended_row` words and judges it."""


class NotDriven(Ended):
    """esverify could not drive this clone (`why`: what it lacks); an error row."""

    def __init__(self, why: str):
        super().__init__(why)
        self.why = why


class Unattributable(Ended):
    """The child's draws cannot be told apart (`why`); an unverifiable row."""

    def __init__(self, why: str):
        super().__init__(why)
        self.why = why


class OursRaised(Ended):
    """Our side raised `exc` (`context`: what it ran, ending in '; ', or ''); an error row, or the status the
    exception carries (`carried_status`: an --impl wrapper's `unsupported`)."""

    def __init__(self, exc: BaseException, context: str = "", carried_status: bool = False):
        super().__init__(str(exc))
        self.exc, self.context, self.carried_status = exc, context, carried_status


class Stop(Exception):
    """The core's own early row (a child that failed, an error reply): carried out of a reference's
    `run_row` to the dispatch (row_runner.run_case). References never raise it."""

    def __init__(self, row: dict):
        super().__init__(row.get("detail", ""))
        self.row = row


# ----------------------------------------------------------------- rows that end early

def error_row(session, case, detail: str, **fields) -> dict:
    """The error row of `case` on `session` with `detail` (and other columns)."""
    return session.row(case, status="error", detail=detail, **fields)


def ended_row(session, case, fact: Exception) -> dict:
    """The row of a fact that ended `case` early (Ended, or noise_policy.BackendRefused)."""
    op = case.op
    if isinstance(fact, NotDriven):
        return error_row(session, case, f"{op}: esverify could not drive this clone: {fact.why}")
    if isinstance(fact, Unattributable):
        return session.row(case, status="unverifiable", detail=f"{op}: {fact.why}")
    if isinstance(fact, OursRaised):
        exc = fact.exc
        status = getattr(exc, "status", "error") if fact.carried_status else "error"
        return session.row(case, status=status, detail=f"{op}: {fact.context}our side raised "
                                                       f"{type(exc).__name__}: {exc}")
    return error_row(session, case, f"{op}: {fact}")   # a refused noise backend says why itself


def exchange(session, case, command: dict, compute: Callable | None = None,
             first_result: Callable | None = None) -> tuple:
    """Session.exchange, the reply checked: (reply, our computed result or None). A child that timed out,
    died or broke the protocol, our side raising while the child worked, or a reply with status 'error'
    ends the row (Stop, carrying the core's row). first_result(err) -> a Defect (a reference's documented
    defect), a row (the core's own: a file the child's Python is too old for), or None (the reference
    raised: Session.reference_error_row)."""
    reply, computed, failed = session.exchange(case, command, compute)
    if failed is not None:
        raise Stop(failed)
    if reply["status"] != "ok":
        raise Stop(_first_row(session, case, reply["error"], first_result))
    return reply, computed


def _first_row(session, case, err: dict, first_result) -> dict:
    first = first_result(err) if first_result is not None else None
    if isinstance(first, Defect):
        for key, observed in first.findings:
            session.record_finding(key, case, observed)
        return session.row(case, status="defect", diagnosis="reference-defect", detail=f"{case.op}: {first.text}")
    return first if first is not None else session.reference_error_row(case, err)


def keep(session, case, status: str, kept: tuple | None) -> None:
    """Under --keep-tensors, a failing row's two sides: ours written to the case folder's ours.npz
    (kept = (names, our tensors, the child's results file)), both paths listed in the report."""
    if status == "fail" and session.opts.keep_tensors and kept is not None:
        names, tensors, theirs = kept
        session.keep(case.case_id, paramsets.write(session.case_dir(case) / "ours.npz", names, tensors), theirs)


# ----------------------------------------------------------------- a reference's own rows

def reference_row(session, case, outcome: Outcome) -> dict:
    """The row of a reference's `Outcome`: `fail` when it names a difference or its final state's comparison
    has a mismatch, else `pass`; a final state
    whose layout differs is an error; slots never drawn are judged by compare.judge_reuse (the bits
    decide); `advanced` and `extra` draws are diagnoses."""
    cmp, op = outcome.final, case.op
    if cmp is not None and cmp.layout_error:
        return error_row(session, case, f"{op}: result layout differs: {cmp.layout_error}")
    for key, observed in outcome.findings:
        session.record_finding(key, case, observed)
    notes, diagnoses = list(outcome.notes), []
    found = outcome.draws.found if outcome.draws is not None else Findings()
    notes += counted_draw_notes(op, found)
    # the final state's bits decide too: a reference that names no difference does not pass a mismatch
    diff = outcome.diff or (f"final state: {cmp.summary()}" if cmp is not None and cmp.mismatches else "")
    status = "fail" if diff else "pass"
    if diff:
        notes.insert(0, f"{op}: {diff}")
    if outcome.draws is not None:
        status = _counted_unused_slots(case, bool(diff), outcome.draws, status, diagnoses, notes)
    diagnoses += (["advanced"] if found.advanced else []) + (["extra"] if found.extra else [])
    keep(session, case, status, outcome.keep)
    if outcome.ran:
        notes.append(f"{op}: {outcome.ran}")
    return session.row(case, status=status, diagnosis=",".join(diagnoses), detail="; ".join(notes),
                       **(cmp.fields() if cmp is not None else {}))


def counted_draw_notes(op: str, found: Findings) -> list:
    """The notes of a row's counted draw accounting: draws past position 0 of a generator, slots drawn a
    number of times other than perturb + restore + update, draws with seeds no member has."""
    notes = []
    if found.advanced:
        notes.append(f"{op}: {found.advanced_count} draws started past position 0 of their generator "
                     "(a generator reused or not reseeded)")
    if found.extra:
        notes.append(f"{op}: slots drawn a number of times that is not perturb + restore + update: "
                     f"{sorted(found.extra)[:8]}")
    if found.foreign:
        notes.append(f"{op}: {len(found.foreign)} draws with seeds no member of the schedule has")
    return notes


def _counted_unused_slots(case, differs: bool, draws: Draws, status: str, diagnoses: list, notes: list) -> str:
    """Slots never drawn, under counted accounting: one with no earlier slot to borrow from is `skip` when
    the row differs (a note when it agrees: the bits decide); else the reuse rule of every row kind, with
    no what-if (our side has no replay of such a reuse). Returns the status; edits the lists in place."""
    found, op = draws.found, case.op
    if not found.missing:
        return status
    sources = _compare.reuse_sources(list(found.missing), draws.layout)
    skipped = [k for k in sorted(found.missing) if k not in sources]
    if skipped:
        text = "skip: " + ", ".join(f"slot {k} ({found.missing[k][0]}) never drawn" for k in skipped[:4])
        if differs:
            diagnoses.append("skip")
            notes.insert(0, f"{op}: {text}")
        else:
            notes.append(f"note: the draw accounting and the bits disagree: {text}, yet every compared "
                         "quantity agrees bit for bit, so the bits decide")
    elif sources:
        status = _compare.record_reuse(_compare.judge_reuse(case.scheme, differs, None,
                                                            _compare.reuse_pairs(found, sources)),
                                       op, status, diagnoses, notes)
    return status


# ----------------------------------------------------------------- the core's loop rows

def per_call_draw_notes(found: Findings, missing: bool = True) -> str:
    """A loop's draw accounting in words, call by call ('' when every call drew once per seed and slot);
    missing: name the slots never drawn too."""
    parts = []
    if found.eager:
        call, slot, name = found.eager[0]
        parts.append(f"eager: every draw of {call} landed on slot {slot} ({name})")
    for label, slots in ((("skip or reuse: never drawn", found.missing),) if missing else ()) + \
            (("extra draws", found.extra),):
        if slots:
            parts.append(f"{label}: " + ", ".join(f"slot {k} ({n}) in {calls[0]}" for k, (n, calls) in
                                                   sorted(slots.items())[:4]))
    if found.advanced:
        call, slot, name, pos = found.advanced[0]
        parts.append(f"advanced: slot {slot} ({name}) drew from position {pos} of its stream in {call}: "
                     f"generator reused or not reseeded ({found.advanced_count} such draws)")
    return "; ".join(parts)


def judge_loop(case, diff, found: Findings, layout: list, whatif: Callable) -> tuple[str, list, list]:
    """(status, diagnoses, notes) of a loop row from its first difference (`diff`, None when the tapes
    agree) and the child's per-call draw accounting: eager draws under iid are unverifiable; a slot never
    drawn that no earlier slot could have lent its draw is `skip` when the row differs; a reuse is judged
    by compare.judge_reuse, with whatif(sources) -> (ours with that reuse agrees: bool or None, what
    still differs) run for a differing iid row."""
    op = case.op
    sources = _compare.reuse_sources(list(found.missing), layout) if found.missing else {}
    skipped = [k for k in sorted(found.missing) if k not in sources]
    status, notes, diagnoses = ("fail" if diff is not None else "pass"), [], []
    if diff is not None:
        notes.append(f"{op}: {diff}")
    if found.eager and case.scheme == "iid":
        status = "unverifiable"
        notes.insert(0, f"{op}: {per_call_draw_notes(found)}: iid noise could not be attributed to slots")
    elif skipped and diff is not None:
        diagnoses.append("skip")
        notes.insert(0, f"{op}: skip: " + ", ".join(f"slot {k} ({found.missing[k][0]}) never drawn in "
                                                    f"{found.missing[k][1][0]}" for k in skipped[:4]))
    elif skipped:
        notes.append("note: the draw accounting and the bits disagree: slot(s) "
                     + ", ".join(f"{k} ({found.missing[k][0]})" for k in skipped[:4])
                     + " never drawn, yet every compared quantity agrees bit for bit, so the bits decide")
    if sources and status != "unverifiable" and not (skipped and diff is not None):
        agrees, left = whatif(sources) if diff is not None and case.scheme == "iid" else (None, None)
        status = _compare.record_reuse(_compare.judge_reuse(case.scheme, diff is not None, agrees,
                                                            _compare.reuse_pairs(found, sources), left),
                                       op, status, diagnoses, notes)
    return status, diagnoses, notes


def loop_row(session, case, judged: tuple, found: Findings, fields: dict, settings: str,
             kept: tuple | None) -> dict:
    """The loop row from `judge_loop`'s (status, diagnoses, notes), the notes added since in place: the
    named diagnoses of the single-op rows from the row's own draws, the kept tensors of a failing row."""
    status, diagnoses, notes = judged
    keep(session, case, status, kept)
    diagnoses = (["eager"] if found.eager else []) + diagnoses + (["extra"] if found.extra else []) + \
        (["advanced"] if found.advanced else [])
    if found.extra or found.advanced:
        notes.append(f"{case.op}: {per_call_draw_notes(found, missing=False)}")
    return session.row(case, status=status, diagnosis=",".join(diagnoses), detail="; ".join(notes),
                       reference_settings=settings, **fields)


# ----------------------------------------------------------------- the generic single-op rows

def single_row(session, case, cmp: Comparison, other: str, judged: tuple, kept: tuple) -> dict:
    """The single-op row from compare.diagnose's (status, diagnoses, notes): the comparison's summary
    and specials, `other` (a loop's first differing reward, a restore's perturbed state) first, the ulp
    profile of a fail or artifact row for the report's plots, the kept tensors of a failing row."""
    status, diagnoses, notes = judged
    if cmp.mismatches:
        notes.append(f"{case.op}{' (population %d)' % case.population if case.kind == 'update' else ''}: "
                     f"{cmp.summary()}")
        if cmp.specials:
            notes.append(cmp.specials)
    if other:
        notes.insert(0, f"{case.op}: {other}")
    if status in ("fail", "artifact") and cmp.profile:
        session.record_profile(case.case_id, cmp.profile)
    keep(session, case, status, kept)
    return session.row(case, status=status, diagnosis=",".join(diagnoses), detail="; ".join(notes), **cmp.fields())
