"""The replay verdict: per tensor, the first differing element, as JSON and text (docs/replay.md §7).

`build_report(units, results, context)` folds the unit results into one
report: per tensor the number of differing elements of the replay and of
the naive replay (updates only), the first differing element with both
values and its ulp distance (docs/numerics.md §7), and the largest
finite ulp distance; the two sides are named for what they are: `replayed`
(what the log's updates give) and `checkpoint` (the checkpoint under test,
`--expect`), never "expected" and "got", which read backwards for a
checkpoint that is itself the thing in doubt; a tensor whose dtype or shape is not the replay's
has `layout` naming both (every element counts as differing); the verdict is "bit-equal" only when the replay
matches every element. `render_text(report)` is the human form.
"""
from __future__ import annotations

from collections import OrderedDict

from tabulate import tabulate

#: /2: a first difference names its sides `checkpoint` and `replayed` (/1 said `expected` and `got`)
REPORT_FORMAT = "esverify.replay.report/2"


def sides(compared: dict) -> dict:
    """A comparison of the replay with the checkpoint under test (esverify.replay.kernel.compare, whose
    `first` says `expected` for the checkpoint and `got` for the replay) with its first difference's
    sides named for what they are: {"index", "checkpoint", "replayed", "ulp"}. Idempotent."""
    first = compared.get("first")
    if not first or "expected" not in first:
        return compared
    named = {"index": first["index"], "checkpoint": first["expected"], "replayed": first["got"],
             "ulp": first.get("ulp")}
    return dict(compared, first=named)


def _fold(parts: list[dict]) -> dict:
    parts = [sides(p) for p in parts]
    firsts = [p["first"] for p in parts if p["first"] is not None]
    ulps = [p["max_ulp"] for p in parts if p["max_ulp"] is not None]
    out = {"mismatches": sum(p["mismatches"] for p in parts),
           "first": min(firsts, key=lambda f: f["index"]) if firsts else None,
           "max_ulp": max(ulps) if ulps else None}
    layouts = [p["layout"] for p in parts if p.get("layout")]
    if layouts:    # the checkpoint's dtype or shape is not the replay's (esverify.bitcompare)
        out["layout"] = layouts[0]
    return out


def build_report(units, results: dict, context: dict, verdict: str | None = None) -> dict:
    """The report of a finished replay (JSON-able).

    units: the plan (esverify.replay.units.Unit); results: unit index ->
    kernel.run_unit result, one per unit; context: the inputs, model and
    notes (api.replay fills it). Keys: format, verdict ("bit-equal" |
    "differs"), elements, mismatches, naive_mismatches, tensors (one entry
    per tensor in file order), and the context's keys. verdict: given for a
    partial report ("interrupted"): then `results` may lack units, each
    tensor says how many of its units were verified (`verified_units`), and
    only those count.
    """
    per = OrderedDict()
    for unit in units:
        per.setdefault(unit.name, {"unit": unit, "replay": [], "naive": [], "units": 0})
        per[unit.name]["units"] += 1
        if unit.index in results:
            per[unit.name]["replay"].append(results[unit.index]["replay"])
            per[unit.name]["naive"].append(results[unit.index]["naive"])
    tensors = []
    for name, entry in per.items():
        unit = entry["unit"]
        replay, naive = _fold(entry["replay"]), _fold(entry["naive"])
        tensors.append({"name": name, "shape": list(unit.shape), "dtype": unit.dtype, "elements": unit.numel,
                        "kind": unit.kind, "units": entry["units"], "replay": replay, "naive": naive})
        if verdict is not None:
            tensors[-1]["verified_units"] = len(entry["replay"])
    mismatches = sum(t["replay"]["mismatches"] for t in tensors)
    if verdict is None:
        verdict = "bit-equal" if mismatches == 0 else "differs"
    report = {"format": REPORT_FORMAT, "verdict": verdict,
              "elements": sum(t["elements"] for t in tensors), "mismatches": mismatches,
              "naive_mismatches": sum(t["naive"]["mismatches"] for t in tensors), "tensors": tensors}
    report.update(context)
    return report


def _first(side: dict) -> str:
    f = side["first"]
    if side.get("layout"):
        return side["layout"]
    if f is None:
        return ""
    ulp = "nan/inf" if f["ulp"] is None else f"{f['ulp']} ulp"
    return f"[{f['index']}] replayed {f['replayed']}, checkpoint {f['checkpoint']} ({ulp})"


def render_text(report: dict) -> str:
    """A few lines for a terminal: verdict, the differing tensors, the naive comparison, the notes."""
    lines = [f"replay of {report['log']} ({report['model']['iterations']} iterations, "
             f"profile {report['model']['profile']}, noise {report['model']['noise']}) against the checkpoint "
             f"under test {report['expect']}",
             f"verdict: {report['verdict'].upper()}: {report['mismatches']} of {report['elements']} elements differ"]
    if report["verdict"] == "interrupted":
        done = sum(t.get("verified_units", t["units"]) for t in report["tensors"])
        lines[1] = (f"verdict: INTERRUPTED by {report.get('signal', 'a signal')}: {done} of {report['units']} units "
                    f"verified ({report['mismatches']} differing elements among them); they are kept: run the "
                    f"same command again to continue")
    bad = [t for t in report["tensors"] if t["replay"]["mismatches"]]
    if bad:
        rows = [[t["name"], t["dtype"], f"{t['replay']['mismatches']}/{t['elements']}", _first(t["replay"]),
                 t["replay"]["max_ulp"]] for t in bad]
        lines.append(tabulate(rows, headers=["tensor", "dtype", "differ", "first differing element", "max ulp"]))
    lines.append(f"naive replay (updates only, no engine residue) would say: {report['naive_mismatches']} of "
                 f"{report['elements']} elements differ")
    for note in report.get("notes", []):
        lines.append(f"note: {note}")
    if report.get("resumed_units"):
        lines.append(f"resumed: {report['resumed_units']} of {report['units']} units were verified by an earlier "
                     f"run on the same bytes and reused")
    if report.get("reverified_units"):
        lines.append(f"re-verified: {report['reverified_units']} units recorded by an earlier run read other bytes "
                     f"now and were replayed again")
    return "\n".join(lines)


def _first_cells(side: dict) -> dict:
    first = side.get("first") or {}
    return {"first_index": first.get("index"), "replayed": first.get("replayed"), "checkpoint": first.get("checkpoint"),
            "ulp": first.get("ulp")}


def render_html(report: dict, exit_code: int | None = None) -> str:
    """The report as one standalone HTML page (esverify.report.to_html: it fits a 1,400 px window): the
    verdict, the tensors (the differing ones first, each with its first differing element as `replayed` and
    `checkpoint` values and their ulp distance, and what the naive replay would say), the notes, then the
    model and inputs as metadata. `exit_code`: the command's, shown beside the verdict."""
    import pandas as pd

    from ..report import to_html
    rows = [{"tensor": t["name"], "dtype": t["dtype"], "shape": "x".join(map(str, t["shape"])) or "()",
             "status": "differs" if t["replay"]["mismatches"] else "bit-equal",
             "differ": f"{t['replay']['mismatches']}/{t['elements']}", **_first_cells(t["replay"]),
             "max_ulp": t["replay"]["max_ulp"], "layout": t["replay"].get("layout", ""),
             "naive_differ": f"{t['naive']['mismatches']}/{t['elements']}"} for t in report["tensors"]]
    tensors = pd.DataFrame(rows, columns=["tensor", "dtype", "shape", "status", "differ", "first_index", "replayed",
                                          "checkpoint", "ulp", "max_ulp", "layout", "naive_differ"])
    tensors = tensors.sort_values("status", key=lambda c: c != "differs", kind="stable").reset_index(drop=True)
    notes = pd.DataFrame({"note": list(report.get("notes", []))}, columns=["note"])
    header = {"verdict": report["verdict"], **({"exit_code": exit_code} if exit_code is not None else {}),
              "counts": {"elements": report["elements"], "differ": report["mismatches"],
                         "naive replay differs": report["naive_mismatches"]}}
    metadata = {k: v for k, v in report.items() if k not in ("tensors", "notes", "text")}
    return to_html({"tensors": tensors, "notes": notes}, {**metadata, **header},
                   f"esverify replay of {report.get('log', '')} against the checkpoint under test", header,
                   {"tensors": "tensors (replayed: from the log; checkpoint: the checkpoint under test)"})
