"""One case, one row: the dispatch and the core's generic single-operation path (docs/parity.md, "Statuses").

Design record: `run_case(session, case)` is the only way a case
becomes a row, for the matrix, fuzz shrinking and mutant catalogs alike.
It checks what every row shares (a device the child sees, a child that
runs, the clone file the op needs), then asks the case's adapter
(`Adapter.run_row`, whose `Outcome` esverify.oracle.verdict judges); an
adapter that does not own the row leaves it to the loop path
(esverify.oracle.loop_rows) for its loop ops or to the generic single-op
path here: our side (esverify.oracle.ours, or a `--impl` wrapper) beside
the child's reply, compared bit for bit (esverify.oracle.compare), with
the named diagnoses and the `reuse` what-if. Every verdict, and every
row a case ends early with, is esverify.oracle.verdict's. Nothing here
names a reference.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from . import compare as _compare
from . import loop_rows as _loop_rows
from . import ours as _ours
from . import ours_cache as _ours_cache
from . import paramsets
from . import verdict
from .reuse_plan import CallOrderPlan
from .rows import FAILING as BLAMED, NO_CUDA, flush_row, too_old_python
from .noise_policy import BackendRefused


def checked_case(session, case) -> dict:
    """run_case, then the child's float-environment probe of that case (rows.flush_row); a runner
    failure on the case is an error row, not a crash."""
    session.child.last_flush = []
    session.last_ran = None
    try:
        row = run_case(session, case)
    except Exception as exc:  # noqa: BLE001 - one broken case must not hide the others' rows
        return session.row(case, status="error", detail=f"{case.op}: the runner failed on this case: "
                                                         f"{type(exc).__name__}: {exc}")
    return add_blame(session, case, flush_row(row, session.child.last_flush, session.adapter.name))


def add_blame(session, case, row: dict) -> dict:
    """`row` (in place, and returned) with its blame line when it failed and has none: the reference's
    code the case just run on `session` involves (the repeat check calls it for a row it
    fails). Never a reason to lose the row: a git failure is said in the blame line."""
    if row["status"] in BLAMED and not row.get("blame"):
        try:
            row["blame"] = session.blame(case)
        except Exception as exc:  # noqa: BLE001
            row["blame"] = f"the clone's changes could not be read: {type(exc).__name__}: {exc}"
    return row


def run_case(session, case) -> dict:
    """The row of `case` on `session` (columns rows.COLUMNS)."""
    try:
        return _dispatch(session, case)
    except verdict.Stop as stop:   # the core's own early row, from a reference's run_row too
        return stop.row
    except (verdict.Ended, BackendRefused) as fact:
        return verdict.ended_row(session, case, fact)


def _dispatch(session, case) -> dict:
    env = session.environment
    if case.device == "cuda" and not env.get("cuda"):
        return session.row(case, status="skipped", detail=NO_CUDA)
    if not session.ensure_child():
        return verdict.error_row(session, case, f"the child could not be restarted: {session.start_error}")
    env = session.environment
    module_key = session.adapter.module_key(case)
    load_error = (session.hello.get("modules") or {}).get(module_key) if module_key else None
    if load_error and not session.variant_clone:
        return too_old_python(case, load_error, env) or verdict.error_row(session, case,
                                                                          f"{case.op}: {load_error['message']}")
    if case.op in session.adapter.loop_ops and session.impl_side is not None:   # also an adapter's own rows
        return session.row(case, status="unsupported", detail=f"{case.op}: unsupported by --impl: the "
                                                              "training-loop rows run the clean-room trainer only")
    owned = session.adapter.run_row(session, case)   # a reference's own rows: their Outcome, judged here
    if owned is not None:
        return verdict.reference_row(session, case, owned)
    if case.op in session.adapter.loop_ops:   # the references' own training loops
        return _loop_rows.run_loop_case(session, case)
    return run_single(session, case)


@dataclass
class _Inputs:
    """A single-op case's parameter set: slot names, the tensors our side works on, a copy of them as
    they start, the anchor set (anchored decay) or None, and the set's dtype and variant."""
    names: list
    tensors: list
    inputs: list
    anchor: list | None
    dtype: str
    variant: str


def run_single(session, case) -> dict:
    """The generic single-op row: perturb, restore, update, decay, zscore or the in-process loop."""
    backend, child_backend = session.backend(case)   # BackendRefused: an error row (run_case)
    start = _inputs(session, case)
    early, compute, ours = _our_side(session, case, start, backend)
    out = session.case_dir(case)
    command = _command(session, case, start, child_backend, out, early if early is not None else ours.command)
    reply, computed = verdict.exchange(session, case, command, compute if ours is None else None)
    ours = computed if ours is None else ours
    theirs, theirs_dtypes = _read_results(session, case, reply)
    session.last_theirs = (case.case_id, theirs)   # the repeat check compares a second run with these bits
    result_names = start.names if case.op != "zscore" else ["coeffs"]
    cmp = _compare.compare(ours.tensors, theirs, theirs_dtypes, result_names)
    if cmp.layout_error:
        return verdict.error_row(session, case, f"{case.op}: result layout differs: {cmp.layout_error}")
    reward_note = _compare.compare_rewards(ours.rewards, reply.get("rewards", [])) if case.op == "loop" else ""
    # a restore row also compares the perturbed state the child saved before restoring: a slot the
    # reference never perturbs (nor restores) leaves a round trip unchanged, but not the perturbed state
    perturbed = _perturbed(out, reply, ours, result_names) if case.kind == "restore" else None
    if perturbed is not None and isinstance(perturbed[1], str):
        return verdict.error_row(session, case, f"{case.op}: {perturbed[1]}")
    other = reward_note
    if perturbed is not None and perturbed[1].mismatches:
        other = f"the perturbed state inside the restore: {perturbed[1].summary()}"
    judged = _diagnosed(session, case, start, backend, reply, ours, cmp, other, perturbed,
                        (theirs, theirs_dtypes, result_names))
    return verdict.single_row(session, case, cmp, other, judged, (result_names, ours.tensors, reply["results"]))


def _inputs(session, case) -> _Inputs:
    variant = session.adapter.set_variant(case)
    dtype = case.dtype if case.dtype in paramsets.DTYPES or case.dtype == paramsets.MIXED else "f32"
    names, tensors = session.fresh(dtype, case.big, variant, case.device, case.shapes, case.ties)
    anchored = session.adapter.needs_anchor(case)
    anchor = session.fresh(dtype, case.big, "base", case.device, case.shapes, case.ties)[1] if anchored else None
    return _Inputs(names, tensors, [t.clone() for t in tensors], anchor, dtype, variant)


def _our_side(session, case, start: _Inputs, backend) -> tuple:
    """(early command, compute, ours): our side run now, or (the in-process loop, whose command needs our
    rewards) its early command and the compute the child's exchange runs; our side raising ends the row.
    In Runner.session, a copy of the result an earlier variant's row of the same case computed (ours.command
    is then the child's command part: prepare's early command is the result's own command)."""
    opts = session.opts
    clock = session.clock(case)
    started = time.perf_counter()
    cache, key = getattr(session, "ours_cache", None), None
    if cache is not None and session.impl_side is None:   # Runner.session: once per case for every variant
        key = _ours_cache.key("single", case, seed=opts.seed, mapping=opts.mapping, backend=backend,
                              dtype=start.dtype, variant=start.variant, anchored=start.anchor is not None,
                              profile=_ours.profile_of(case))
        kept = cache.get(key)
        if kept is not None:   # its command is the one the child gets (prepare's early command, or the loop's)
            clock["ours_s"] += time.perf_counter() - started
            return None, None, kept
    try:
        if session.impl_side is not None:   # parity --impl: the wrapper is our side
            return None, None, session.impl_side.run(case, start.names, start.tensors, start.anchor, opts.seed,
                                                     opts.mapping, backend)
        early, compute = _ours.prepare(case, start.names, start.tensors, start.anchor, opts.seed, opts.mapping,
                                       backend)
        if key is not None:
            compute = cache.storing(key, compute)
        return early, compute, (compute() if early is None else None)
    except Exception as exc:  # noqa: BLE001 - our side failing is a row, not a crash
        raise verdict.OursRaised(exc, carried_status=True) from exc   # impl_side: unsupported
    finally:
        clock["ours_s"] += time.perf_counter() - started


def _command(session, case, start: _Inputs, child_backend, out, ours_part: dict) -> dict:
    """The child's command of a single-op case: the case's fields, then our side's part (handles, ...)."""
    opts, dtype = session.opts, start.dtype
    command = {"op": case.kind, "case_id": case.case_id,
               "device": case.device, "scheme": case.scheme, "mapping": opts.mapping,
               "backend": child_backend, "noise": case.noise if case.op != "zscore" else "contract",
               "set": str(session.set_path(dtype, case.big, start.variant, case.shapes, case.ties)),
               "sigma": case.sigma, "alpha": case.alpha, "population": case.population, "out": str(out),
               "handles": {}}
    if session.variant_clone:   # Runner.session: another clone of the same reference
        command["clone"] = str(session.variant_clone)
    if start.anchor is not None:
        command["anchor_set"] = str(session.set_path(dtype, case.big, "base", case.shapes, case.ties))
    command.update(ours_part)
    command["handles"] = {str(k): v for k, v in command["handles"].items()}
    if case.op == "loop":
        for it in command["iterations"]:
            it["handles"] = {str(k): v for k, v in it["handles"].items()}
    return command


def _read_results(session, case, reply) -> tuple:
    """(their result bits, their dtypes) from the child's results file; one it cannot read is the child's
    protocol error: the child is killed and the row ends."""
    try:
        _, theirs, theirs_dtypes = paramsets.read(reply["results"])
    except Exception as exc:  # noqa: BLE001 - the child wrote the file: a bad one is its protocol error
        session.child.kill()
        raise verdict.Stop(verdict.error_row(session, case, f"{case.op}: protocol violation by the child: its "
                                                            f"results file cannot be read ({type(exc).__name__}: "
                                                            f"{exc}); the child was killed and restarted")) from exc
    return theirs, theirs_dtypes


def _diagnosed(session, case, start: _Inputs, backend, reply, ours, cmp, other, perturbed, theirs_side) -> tuple:
    """compare.diagnose's (status, diagnoses, notes) from the row's own draw accounting, with the reuse
    what-if run where a differing iid row's missing slots could have borrowed another slot's noise."""
    theirs, theirs_dtypes, result_names = theirs_side
    found = _compare.findings(reply.get("attribution"))
    untouched, sources, whatif = [], {}, None
    if found.missing:
        # the state each slot should have changed in: the result, or (restore) the perturbed state
        changed = theirs if perturbed is None else perturbed[0]
        untouched = [k for k in found.missing
                     if np.array_equal(paramsets.tensor_bits(start.inputs[k]).reshape(-1), changed[k].reshape(-1))]
        layout = [(paramsets.dtype_name(t), tuple(t.shape)) for t in start.inputs]
        sources = _compare.reuse_sources([k for k in found.missing if k not in untouched], layout)
        if case.scheme == "iid" and sources and (cmp.mismatches or other) and not found.eager:
            # each call replays its own reuse (a perturb may reuse where the restore does not), where the
            # child recorded each call's undrawn slots
            replay = sources if reply.get("missing") is None else CallOrderPlan(reply["missing"], layout)
            whatif = _whatif(session, case, start.dtype, start.variant, backend, replay, theirs, theirs_dtypes,
                             result_names, perturbed[0] if perturbed is not None else None,
                             reply.get("rewards", []),
                             [it["coeffs"] for it in ours.command.get("iterations", [])] if case.op == "loop"
                             else None)
    # the what-if compares what `other` names too (a restore's perturbed state, the loop's rewards)
    return _compare.diagnose(case.scheme, cmp, other, found, untouched, sources, whatif, whatif_covers_note=True)


def _perturbed(out, reply, ours, result_names):
    """(theirs' perturbed bits, Comparison with ours') of a restore row; None when either side has no
    perturbed state (an --impl side); (None, reason) when the child's file is not usable."""
    path = reply.get("perturbed")
    if path is None or ours.perturbed is None:
        return None
    try:
        if out.resolve() not in Path(path).resolve().parents:
            return None, (f"protocol violation by the child: its perturbed-state file {path!r} is outside the "
                          "case folder")
        _, bits, dtypes = paramsets.read(path)
    except Exception as exc:  # noqa: BLE001 - the child wrote the file: a bad one is its protocol error
        return None, (f"protocol violation by the child: its perturbed-state file cannot be read "
                      f"({type(exc).__name__}: {exc})")
    return bits, _compare.compare(ours.perturbed, bits, dtypes, result_names)


def _whatif(session, case, dtype, variant, backend, sources, theirs, theirs_dtypes, result_names,
            theirs_perturbed=None, theirs_rewards=(), loop_coeffs=None):
    """Ours re-run with the reference's noise reuse (slot k draws slot sources[k]'s noise),
    compared with theirs (and, for a restore, the perturbed state too: its mismatches count when the
    result agrees; for the in-process loop its rewards too): the `reuse` diagnosis under iid
    (compare.diagnose)."""
    names, tensors = session.fresh(dtype, case.big, variant, case.device, case.shapes, case.ties)
    anchor = session.fresh(dtype, case.big, "base", case.device, case.shapes, case.ties)[1] \
        if session.adapter.needs_anchor(case) else None
    try:
        again = _ours.run(case, names, tensors, anchor, session.opts.seed, session.opts.mapping, backend,
                          slot_map=sources, loop_coeffs=loop_coeffs)
    except Exception:  # noqa: BLE001 - no what-if, no artifact: the row stays a fail
        return None
    cmp = _compare.compare(again.tensors, theirs, theirs_dtypes, result_names)
    if case.op == "loop" and not cmp.mismatches and not cmp.layout_error:
        note = _compare.compare_rewards(again.rewards, theirs_rewards)
        if note:   # the rewards still differ with the same reuse: counted as one more difference
            return _compare.Comparison(elements=cmp.elements, mismatches=1, first_index=note)
    if theirs_perturbed is not None and again.perturbed is not None and not cmp.mismatches and not cmp.layout_error:
        inner = _compare.compare(again.perturbed, theirs_perturbed, theirs_dtypes, result_names)
        if inner.mismatches or inner.layout_error:
            return inner
    return cmp
