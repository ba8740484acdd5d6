"""Bitwise comparison of one case's results (docs/numerics.md §7).

A mismatch is any difference in bits, the sign of zero included. For each
case: element count, mismatches, the largest absolute difference (f64,
finite values only), the largest ulp distance (esverify.bits; NaN and
infinities named, never given a distance) and the first mismatch (slot,
index, both values as hex plus decimal). The slot layout must agree
first: a differing shape or dtype is reported as such, not compared.

`diagnose` turns a comparison and the row's own draw accounting into a
status with named diagnoses: advanced, eager, skip,
reuse, extra (docs/parity.md, "Diagnoses").
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .. import bitcompare, bits

_FLOAT_OF = {"f64": np.float64, "f32": np.float32, "f16": np.float16}
PROFILE_BINS = 64   #: element runs per slot in Comparison.profile


@dataclass
class Comparison:
    """The bitwise verdict of one case; `fields()` gives its report columns."""
    elements: int = 0
    mismatches: int = 0
    max_abs_diff: float | None = None
    max_ulp_diff: int | None = None
    first_index: str = ""
    first_ours: str = ""
    first_theirs: str = ""
    specials: str = ""           #: NaN/inf mismatches by name, counted over every slot
    layout_error: str = ""
    mismatched_slots: tuple = ()
    special_count: int = 0       #: mismatches where either side is NaN or infinite (no ulp distance)
    special_kinds: tuple = ()    #: their kinds, e.g. ("+inf", "nan")
    #: where the sides differ, per mismatching slot: {"slot", "elements", "mismatches", "bins"}: the largest
    #: ulp distance in each of PROFILE_BINS equal runs of the slot's elements (0: none differ there; -1: a
    #: NaN/inf mismatch, no distance); drawn as the report's ulp plots (parity_report.ulp_plots)
    profile: list = field(default_factory=list)

    def summary(self) -> str:
        """'K of M elements differ (slots ...); first at X, max D ulp' (D named as absent when every
        mismatch involves NaN or an infinity); '' when nothing differs."""
        if not self.mismatches:
            return ""
        ulp = (f"max {self.max_ulp_diff} ulp" if self.max_ulp_diff is not None
               else "no ulp distance (every mismatch involves NaN or an infinity)")
        return (f"{self.mismatches} of {self.elements} elements differ (slots {', '.join(self.mismatched_slots)}); "
                f"first at {self.first_index}, {ulp}")

    def fields(self) -> dict:
        return {"elements": self.elements, "mismatches": self.mismatches, "max_abs_diff": self.max_abs_diff,
                "max_ulp_diff": self.max_ulp_diff, "first_mismatch_index": self.first_index,
                "first_mismatch_ours": self.first_ours, "first_mismatch_theirs": self.first_theirs}


def values_f64(raw: np.ndarray, fmt: str) -> np.ndarray:
    """Float64 values of a flat bit-pattern array of format fmt."""
    raw = np.ascontiguousarray(raw).reshape(-1)
    if fmt == "bf16":
        return (raw.astype(np.uint32) << np.uint32(16)).view(np.float32).astype(np.float64)
    return raw.view(_FLOAT_OF[fmt]).astype(np.float64)


def compare(ours: list, theirs: list, theirs_dtypes: list, names: list | None = None) -> Comparison:
    """Compare our result tensors with the child's bit arrays, slot by slot (docs/numerics.md §7).

    ours: tensors (any device; f64/f32/f16/bf16); theirs: uint bit arrays of the same shapes;
    theirs_dtypes: their format names; names: slot names for the report. A slot count, shape or
    format that differs is returned as `layout_error`, never raised.
    """
    result = Comparison()
    names = names or [f"slot{k}" for k in range(len(ours))]
    if len(ours) != len(theirs):
        result.layout_error = f"ours has {len(ours)} result tensors, theirs {len(theirs)}"
        return result
    bad_slots, kinds_seen = [], set()
    for k, (o, t_raw, t_fmt) in enumerate(zip(ours, theirs, theirs_dtypes)):
        o_bits, o_fmt = bits.array_bits(o)
        o_shape = tuple(o.shape)
        if o_fmt != t_fmt or o_shape != tuple(t_raw.shape):
            result.layout_error = (f"slot {k} ({names[k]}): ours is {o_fmt} {o_shape}, "
                                   f"theirs {t_fmt} {tuple(t_raw.shape)}")
            return result
        try:   # the one comparator (esverify.bitcompare): their patterns are never cast to fit ours
            found = bitcompare.compare(bitcompare.of_format(o_bits, o_fmt, o_shape),
                                       bitcompare.of_format(t_raw, t_fmt))
        except ValueError as exc:
            result.layout_error = f"slot {k} ({names[k]}): theirs: {exc}"
            return result
        result.elements += o_bits.size
        diff = found.index
        if not diff.size:
            continue
        bad_slots.append(names[k])
        result.mismatches += int(diff.size)
        ob, tb = found.expected_bits, found.got_bits
        if not result.first_index:
            i = int(diff[0])
            result.first_index = f"{names[k]}[{i}]"
            result.first_ours = bits.describe(int(ob[0]), o_fmt)
            result.first_theirs = bits.describe(int(tb[0]), o_fmt)
        # the distances as arrays (found.ulps() is a Python list: a slot whose every element differs cost
        # a second per million elements); f64 distances are Python ints (they may pass 2**63)
        finite, dist = found.finite, found.dist
        bins = np.zeros(min(PROFILE_BINS, o_bits.size), dtype=np.int64)
        where = diff * bins.size // o_bits.size
        np.maximum.at(bins, where, np.where(finite, np.minimum(dist, 2 ** 62), -1).astype(np.int64))
        for b in np.unique(where[~finite]):   # a NaN/inf mismatch marks its run even beside finite ones
            bins[b] = -1 if bins[b] == 0 else bins[b]
        result.profile.append({"slot": names[k], "elements": int(o_bits.size), "mismatches": int(diff.size),
                               "bins": bins.tolist()})
        if finite.any():
            top = int(dist[finite].max())
            result.max_ulp_diff = top if result.max_ulp_diff is None else max(result.max_ulp_diff, top)
            with np.errstate(over="ignore"):   # two finite f64 far apart (+-max): their distance is inf in f64
                absd = float(np.max(np.abs(values_f64(ob[finite], o_fmt) - values_f64(tb[finite], o_fmt))))
            result.max_abs_diff = absd if result.max_abs_diff is None else max(result.max_abs_diff, absd)
        if (~finite).any():
            # "" is the kind of a finite value: the other side of such a pair is the special one
            kinds_seen |= (set(bits.classify(ob[~finite], o_fmt)) | set(bits.classify(tb[~finite], o_fmt))) - {""}
            result.special_count += int((~finite).sum())
    if result.mismatches and result.max_abs_diff is None:
        result.max_abs_diff = float("nan")
    elif not result.mismatches:
        result.max_abs_diff, result.max_ulp_diff = 0.0, 0
    result.mismatched_slots = tuple(bad_slots)
    if result.special_count:
        result.special_kinds = tuple(sorted(kinds_seen))
        result.specials = f"{result.special_count} mismatches involve {', '.join(result.special_kinds)}"
    return result


def compare_rewards(ours: list, theirs: list) -> str:
    """'' when the loop's rewards agree bitwise, else where they first differ."""
    if len(ours) != len(theirs):
        return f"rewards: ours has {len(ours)} iterations, theirs {len(theirs)}"
    for i, (ro, rt) in enumerate(zip(ours, theirs)):
        for m, (a, b) in enumerate(zip(ro, rt)):
            if np.float64(a).view(np.uint64) != np.float64(b).view(np.uint64):
                return (f"rewards first differ at iteration {i} member {m} (ours {a!r}, theirs {b!r}): "
                        "the perturbed parameters already differ there")
    return ""


# ------------------------------------------------------------------ diagnoses from the draw accounting

DIAGNOSES = ("advanced", "eager", "skip", "reuse", "extra")


@dataclass
class Findings:
    """The draw accounting of one row (the child's per-call findings, docs/references.md §3, §3a), merged.

    eager: [(call, slot, name)]; missing: {slot: (name, [calls])}; extra: {slot: (name, [calls])};
    advanced: [(call, slot, name, position)] (at most a few shown; `advanced_count` in all);
    foreign: [(call, entry, seed or None, slot, name)]: native-noise draws torch made for no member's seed
    (or without a generator), which the child lets through (docs/references.md §3b).
    """
    eager: list = field(default_factory=list)
    missing: dict = field(default_factory=dict)
    extra: dict = field(default_factory=dict)
    advanced: list = field(default_factory=list)
    advanced_count: int = 0
    foreign: list = field(default_factory=list)


def findings(attribution: dict | None) -> Findings:
    """Merge the child's `attribution` reply ({"ok", "calls": [...]}) into Findings."""
    out = Findings()
    for call in (attribution or {}).get("calls", []) or []:
        name = call.get("call", "?")
        if call.get("eager"):
            e = call["eager"]
            out.eager.append((name, e["slot"], e["name"]))
        for key, target in (("missing", out.missing), ("extra", out.extra)):
            for s in call.get(key, []):
                target.setdefault(s["slot"], (s["name"], []))[1].append(name)
        for a in call.get("advanced", []):
            out.advanced.append((name, a["slot"], a["name"], a["position"]))
        out.advanced_count += int(call.get("advanced_count", len(call.get("advanced", []))))
        for f in call.get("foreign", []):
            out.foreign.append((name, f.get("entry", "?"), f.get("seed"), f.get("slot"), f.get("name", "")))
    return out


def reuse_sources(missing, layout) -> dict:
    """{slot k: slot j} for each missing slot k that could have reused an earlier slot j's noise:
    same (dtype, shape) first, then same dtype and element count (a draw reused reshaped), then same
    shape, then same element count; earliest first. layout: [(dtype, shape)] per slot."""
    sources = {}

    def numel(shape):
        return int(np.prod(shape, dtype=np.int64))
    for k in sorted(missing):
        dt, shape = layout[k]
        for rank in (lambda j: layout[j] == (dt, shape),
                     lambda j: layout[j][0] == dt and numel(layout[j][1]) == numel(shape),
                     lambda j: layout[j][1] == shape, lambda j: numel(layout[j][1]) == numel(shape)):
            hits = [j for j in range(k) if j not in missing and rank(j)]
            if hits:
                sources[k] = hits[0]
                break
    return sources


def judge_reuse(scheme: str, differs: bool, whatif_agrees: bool | None, pairs: str, left=None) -> tuple[str, str]:
    """The one rule for a reference that reused a draw across slots (docs/parity.md, "Diagnoses"), for
    every row kind: (status, note).

    differs: the row's compared bits differ; whatif_agrees: ours re-run with the same reuse agrees bit
    for bit (None: not run); pairs: the reuse in words ("slot 4 (k) <- slot 2"); left: what still
    differs from ours with the same reuse (a count or a described first difference). Under correlated
    noise the noise of equal-size slots is the same, so reuse is no difference at all: the bits decide.
    Under iid: `artifact` when ours with the same reuse agrees, else `fail` with both explanations."""
    if not differs:
        return "pass", (f"reuse: the reference reused noise ({pairs}; never drawn there), and every compared "
                        "bit agrees" + (": under correlated noise equal-size slots draw the same noise"
                                        if scheme != "iid" else ""))
    if scheme != "iid":
        return "fail", (f"reuse: the reference reused noise ({pairs}; never drawn there): under correlated noise "
                        "that is no difference, so the difference is not the reuse")
    if whatif_agrees:
        return "artifact", (f"reuse: the reference reused noise ({pairs}; never drawn there): under iid an "
                            "artifact of the reference (each slot has its own noise), and ours with the same "
                            "reuse agrees bit for bit; the correlated rows must agree")
    left = "" if left is None else (f"{left} element(s) still differ" if isinstance(left, int) else
                                    f"still differs ({left})")
    return "fail", (f"reuse: the reference reused noise ({pairs}; never drawn there), and "
                    + (f"ours with the same reuse {left}" if left else "ours with the same reuse could not be run")
                    + ": not only the reuse")


def record_reuse(judged: tuple[str, str], op: str, status: str, diagnoses: list, notes: list) -> str:
    """Put a `judge_reuse` (verdict, note) into a row: a pass adds a note at the end and keeps `status`;
    any other verdict becomes the row's status, adds the diagnosis "reuse" and puts its note first.
    Returns the row's status; `diagnoses` and `notes` are edited in place."""
    verdict, text = judged
    if verdict == "pass":
        notes.append(f"note: {op}: {text}")
        return status
    diagnoses.append("reuse")
    notes.insert(0, f"{op}: {text}")
    return verdict


def reuse_pairs(found, sources) -> str:
    """The reuse in words: 'slot k (name) <- slot j, ...'."""
    return ", ".join(f"slot {k} ({found.missing[k][0]}) <- slot {sources[k]}" for k in sorted(sources)
                     if k in found.missing)


def _calls(calls) -> str:
    calls = list(dict.fromkeys(calls))
    return ", ".join(calls[:2]) + (f" (+{len(calls) - 2} more)" if len(calls) > 2 else "")


def diagnose(scheme: str, cmp: Comparison, reward_note: str, found: Findings, untouched=(), sources=None,
             whatif: Comparison | None = None, whatif_covers_note: bool = False) -> tuple[str, list, list]:
    """(status, diagnoses, notes) of one row from its comparison and its own draw accounting.

    scheme: the row's scheme ("iid"/"correlated"); cmp: ours vs theirs; reward_note: the loop's
    first differing reward ('' when none); untouched: missing slots whose result still equals the
    input bits; sources: {missing slot: slot whose noise it may have reused}; whatif: ours re-run
    with that reuse vs theirs (iid rows only); whatif_covers_note: the what-if compared what reward_note
    names too (a restore's perturbed state), so its agreement alone decides. The rules (docs/parity.md "Diagnoses"):
    - eager: iid -> unverifiable; correlated: verified as usual (the noise does not depend on the slot);
    - skip (a slot never drawn and untouched, or with nothing to reuse) -> fail, naming the slot, where
      the bits differ; over equal bits only a note that the accounting and the bits disagree (bits decide);
    - reuse: judge_reuse, the one rule of every row kind;
    - advanced, extra: named in the detail; the comparison decides.
    """
    sources = dict(sources or {})
    diagnoses, notes = [], []
    status = "fail" if (cmp.mismatches or reward_note) else "pass"
    for call, slot, name, position in found.advanced[:3]:
        notes.append(f"advanced: slot {slot} ({name}) drew from position {position} of its stream in {call}: "
                     "generator reused or not reseeded")
    if found.advanced:
        diagnoses.append("advanced")
        if found.advanced_count > 3:
            notes.append(f"advanced: {found.advanced_count} draws in all started past position 0")
    if found.eager:
        diagnoses.append("eager")
        call, slot, name = found.eager[0]
        text = (f"eager: every draw of {call} was attributed to slot {slot} ({name}): the parameters were "
                "consumed before drawing")
        if scheme == "iid":
            status = "unverifiable"
            notes.insert(0, text + ", so iid noise cannot be attributed to slots")
        else:
            notes.append(text + "; correlated noise does not depend on the slot, so this row is verified")
    differs = bool(cmp.mismatches or reward_note)
    skipped = [k for k in sorted(found.missing) if k in untouched or k not in sources]
    reused = [k for k in sorted(found.missing) if k not in skipped]
    skip_text = [f"skip: slot {k} ({found.missing[k][0]}) was never drawn in {_calls(found.missing[k][1])} while "
                 "the case expected draws" + (" and is left unchanged" if k in untouched else "") for k in skipped]
    if skipped and differs:
        notes[:0] = skip_text
        diagnoses.append("skip")
        if status != "unverifiable":
            status = "fail"
    elif skipped:
        # bits decide: the accounting is a diagnosis of a difference, never a verdict over equal bits
        notes.append("note: the draw accounting and the bits disagree: " + "; ".join(skip_text)
                     + ", yet every compared element agrees bit for bit, so the bits decide")
    if reused:
        pairs = reuse_pairs(found, {k: sources[k] for k in reused})
        if status == "unverifiable" or (skipped and differs):
            diagnoses.append("reuse")
            notes.append(f"reuse: {pairs}")
        else:
            agrees = None if whatif is None else (not whatif.layout_error and not whatif.mismatches
                                                  and (whatif_covers_note or not reward_note))
            left = None if whatif is None or whatif.layout_error else (whatif.mismatches or None)
            verdict, text = judge_reuse(scheme, differs, agrees, pairs, left)
            if verdict != "pass":
                diagnoses.append("reuse")
                notes.insert(0, text)
                status = verdict
            else:
                notes.append("note: " + text)
    if found.foreign:
        diagnoses.append("foreign")
        call, entry, seed, slot, name = found.foreign[0]
        source = f"seed {seed}, which is no member's" if seed is not None else "no generator (torch's default one)"
        where = f" for slot {slot} ({name})" if slot is not None else ""
        notes.append(f"foreign: {entry} in {call} drew with {source}{where}"
                     + (f" (+{len(found.foreign) - 1} more such draws)" if len(found.foreign) > 1 else "")
                     + "; under native noise torch drew it, and the values decide")
    extra = sorted(found.extra)
    if extra:
        diagnoses.append("extra")
        notes.append("extra: " + ", ".join(f"slot {k} ({found.extra[k][0]}) drawn more than once per seed in "
                                           f"{_calls(found.extra[k][1])}" for k in extra[:3]))
    return status, diagnoses, notes
