"""Comparison of two loop tapes: the first quantity that differs, named.

`compare_tapes` walks our tape (esverify.oracle.loop_rows.run_ours) and the
reference's (recorded in the child by oracles/child_loops.py) in time order
and stops at the first difference, which the row's detail names
("iteration 2: coefficient of member 4: ours 0x... (...), theirs ..."):
per iteration the members evaluated (seed, sign, engine, whether they were
restored, the caching flag handed to their perturb and restore where the
reference's take one), every reward (f64 bits), the aggregated rewards and
the mean/std handed to z_score (batched loops), the seeds, coefficients
(f64 bits), alpha, divisor and decay arguments handed to the update, the
reference's own iteration records, the
parameters after the update (bit patterns, every slot; docs/numerics.md §7); then
the number of updates, engine 0's final parameters and every state_dict
saved with torch.save. A `Difference` carries a `kind` (seeds, values,
args, records, layout, count) so that the caller can tell a value
difference (the caching artifact) from a structural one.
"""
from __future__ import annotations

import numpy as np

from .. import bits
from . import compare as _compare
from . import paramsets
from .cases import Case


def _f64(value) -> str:
    return bits.describe(int(np.float64(value).view(np.uint64)), "f64")


def _same(a, b) -> bool:
    """The same f64 bits; a NaN matches a NaN whatever its sign and payload: the tape's floats (rewards,
    mean/std, coefficients, the iteration records) reach the parent as JSON, which spells every NaN alike,
    so their NaN bits are not the reference's. The parameters after each update and at the end are
    compared from their files, NaN bits included."""
    if np.isnan(a) and np.isnan(b):
        return True
    return np.float64(a).view(np.uint64) == np.float64(b).view(np.uint64)


class Difference(Exception):
    """The first differing quantity; `kind` says which family it belongs to (for the caching artifact)."""

    def __init__(self, message: str, kind: str, cmp=None):
        super().__init__(message)
        self.kind, self.cmp = kind, cmp


def _sign(negate: bool) -> str:
    return "-sigma" if negate else "+sigma"


def _compare_members(label, ours, theirs, member_of):
    # the common prefix first: a missing or extra evaluation is named after what precedes it
    for p, (o, t) in enumerate(zip(ours, theirs)):
        k = member_of(o)
        if (o["seed"], o["negate"]) != (t["seed"], t["negate"]):
            raise Difference(f"{label}: seed of member {k} (evaluation {p}): ours {o['seed']} ({_sign(o['negate'])}), "
                             f"theirs {t['seed']} ({_sign(t['negate'])})", "seeds")
        if o["engine"] != t["engine"]:
            raise Difference(f"{label}: member {k} (evaluation {p}) ran on engine {t['engine']} in theirs, "
                             f"{o['engine']} in ours", "seeds")
        if t.get("restored") is False:   # ours restores every member: a perturbation left in place
            raise Difference(f"{label}: member {k} (evaluation {p}) was never restored by theirs (engine "
                             f"{t['engine']})", "seeds")
        if o.get("caching") is not None:   # perturb and restore that pass caching through (docs/references.md §5)
            # a method without a parameter of that name records None: not compared, like the update's extra
            for call, key in (("perturb", "caching"), ("restore", "restore_caching")):
                if t.get(key) is not None and t[key] != o["caching"]:
                    raise Difference(f"{label}: caching handed to the {call} of member {k} (evaluation {p}): "
                                     f"ours {o['caching']!r}, theirs {t.get(key)!r}", "args")
        if len(o["rewards"]) != len(t["rewards"]):
            raise Difference(f"{label}: member {k} (evaluation {p}) was scored on {len(t['rewards'])} prompts "
                             f"by theirs, {len(o['rewards'])} by ours", "seeds")
        for q, (a, b) in enumerate(zip(o["rewards"], t["rewards"])):
            if not _same(a, b):
                raise Difference(f"{label}: reward of member {k} (seed {o['seed']}, {_sign(o['negate'])}, "
                                 f"evaluation {p}, prompt {q}): ours {_f64(a)}, theirs {_f64(b)}", "values")
    if len(ours) != len(theirs):
        raise Difference(f"{label}: ours evaluated {len(ours)} members, theirs {len(theirs)}", "seeds")


def _compare_update(label, o, t, index):
    if o["seeds"] != t["seeds"]:
        if len(o["seeds"]) != len(t["seeds"]):
            raise Difference(f"{label}: the update got {len(t['seeds'])} seeds from theirs, {len(o['seeds'])} "
                             "from ours", "seeds")
        k = next(k for k, (a, b) in enumerate(zip(o["seeds"], t["seeds"])) if a != b)
        raise Difference(f"{label}: seed of member {k} handed to the update: ours {o['seeds'][k]}, "
                         f"theirs {t['seeds'][k]}", "seeds")
    if len(o["coeffs"]) != len(t["coeffs"]):
        raise Difference(f"{label}: the update got {len(t['coeffs'])} coefficients from theirs, "
                         f"{len(o['coeffs'])} from ours", "seeds")
    for k, (a, b) in enumerate(zip(o["coeffs"], t["coeffs"])):
        if not _same(a, b):
            raise Difference(f"{label}: coefficient of member {k}: ours {_f64(a)}, theirs {_f64(b)}", "values")
    if not _same(o["alpha"], t["alpha"]):
        raise Difference(f"{label}: alpha handed to the update: ours {o['alpha']!r}, theirs {t['alpha']!r}", "args")
    if o["population_size"] != t["population_size"]:
        raise Difference(f"{label}: divisor (population_size) handed to the update: ours {o['population_size']}, "
                         f"theirs {t['population_size']}", "args")
    for key, value in o["extra"].items():
        if key in t["extra"] and t["extra"][key] != value:
            raise Difference(f"{label}: {key} handed to the update: ours {value!r}, theirs {t['extra'][key]!r}",
                             "args")


def _compare_params(label, ours_tensors, theirs_path, names):
    _, theirs, dtypes = paramsets.read(theirs_path)
    cmp = _compare.compare(ours_tensors, theirs, dtypes, names)
    if cmp.layout_error:
        raise Difference(f"{label}: layout differs: {cmp.layout_error}", "layout", cmp)
    if cmp.mismatches:
        raise Difference(f"{label}: {cmp.mismatches} of {cmp.elements} elements differ (slots "
                         f"{', '.join(cmp.mismatched_slots)}), first at {cmp.first_index}: ours {cmp.first_ours}, "
                         f"theirs {cmp.first_theirs}, max {cmp.max_ulp_diff} ulp", "values", cmp)
    return cmp


def _compare_record(label, number, update, record):
    if "error" in record:
        raise Difference(f"{label}: its record {record['file']} is unreadable: {record['error']}", "records")
    rec = record["record"]
    if rec.get("iteration") != number:
        raise Difference(f"{label}: its record {record['file']} names iteration {rec.get('iteration')!r}",
                         "records")
    if [int(s) for s in rec.get("seeds", [])] != update["seeds"]:
        raise Difference(f"{label}: seeds in its record {record['file']}: ours {update['seeds']}, "
                         f"theirs {rec.get('seeds')}", "seeds")
    coeffs = rec.get("update_coefficients", [])
    if len(coeffs) != len(update["coeffs"]):
        raise Difference(f"{label}: its record {record['file']} holds {len(coeffs)} coefficients, ours "
                         f"{len(update['coeffs'])}", "records")
    for k, (a, b) in enumerate(zip(update["coeffs"], coeffs)):
        if not _same(a, b):
            raise Difference(f"{label}: coefficient of member {k} in its record {record['file']}: ours {_f64(a)}, "
                             f"theirs {_f64(b)}", "values")


def compare_tapes(case: Case, ours: dict, theirs: dict, final_path: str):
    """(Comparison of the final parameters, first Difference or None) for one loop case."""
    names = ours["names"]
    from .adapters import loop_spec
    spec = loop_spec(case)
    quirks = spec.quirks
    records = theirs.get("records")
    theirs_iterations = [it for it in theirs["iterations"] if it.get("update")]
    try:
        for i, (o, t) in enumerate(zip(ours["iterations"], theirs_iterations)):
            number = quirks.record_number(i)
            label = f"iteration {number}"
            member_of = _member_index(o)
            _compare_members(label, o["members"], t["members"], member_of)
            if o["zscore"] is not None:
                z = t.get("zscore")
                if z is None:
                    raise Difference(f"{label}: theirs never called z_score", "args")
                for k, (a, b) in enumerate(zip(o["zscore"]["avg_rewards"], z["avg_rewards"])):
                    if not _same(a, b):
                        raise Difference(f"{label}: aggregated reward of member {k} (seed {o['update']['seeds'][k]}): "
                                         f"ours {_f64(a)}, theirs {_f64(b)}", "values")
                if len(z["avg_rewards"]) != len(o["zscore"]["avg_rewards"]):
                    raise Difference(f"{label}: z_score got {len(z['avg_rewards'])} members from theirs, "
                                     f"{len(o['zscore']['avg_rewards'])} from ours", "seeds")
                for key in ("mean", "std"):
                    if not _same(o["zscore"][key], z[key]):
                        raise Difference(f"{label}: {key}_reward handed to z_score: ours {_f64(o['zscore'][key])}, "
                                         f"theirs {_f64(z[key])}", "values")
            _compare_update(label, o["update"], t["update"], i)
            if records is not None:   # written before the update; compared after it, so a wrong
                if i >= len(records):  # coefficient is named as what the update got
                    raise Difference(f"{label}: theirs wrote no iteration_updates/iteration_{number:06d}.json "
                                     "before its update", "records")
                _compare_record(label, number, o["update"], records[i])
            _compare_params(f"{label}: parameters after the update", o["params"], t["update"]["params"], names)
        if ours["updates"] != theirs["updates"]:
            raise Difference(f"number of updates: ours {ours['updates']}, theirs {theirs['updates']} "
                             f"(num_iterations {case.extra['iterations']})", "count")
        if records is not None and len(records) != ours["updates"]:
            raise Difference(f"iteration records: theirs wrote {len(records)} iteration_updates files, "
                             f"ours {ours['updates']}", "records")
        cmp = _compare_params("final parameters of engine 0", ours["final"], final_path, names)
        saved = theirs.get("saved", [])
        missing = quirks.save_missing(theirs)
        if missing:
            raise Difference(missing, "records")
        for entry in saved:
            label = f"final state_dict {entry['path'].rsplit('/', 1)[-1]}"
            if "error" in entry:
                raise Difference(f"{label}: unreadable with torch.load: {entry['error']}", "records")
            if entry["names"] != names:
                raise Difference(f"{label}: names {entry['names']}, ours {names}", "layout")
            _compare_params(label, ours["final"], entry["results"], names)
        return cmp, None
    except Difference as diff:
        return diff.cmp, diff


def _member_index(iteration: dict):
    seeds = iteration["update"]["seeds"]
    where = {s: k for k, s in reversed(list(enumerate(seeds)))}
    return lambda rec: where.get(rec["seed"], "?")
