"""Bitwise comparison of one case's results (docs/numerics.md §7).

A mismatch is any difference in bits, the sign of zero included. For each
case: element count, mismatches, the largest absolute difference (f64,
finite values only), the largest ulp distance (esverify.bits; NaN and
infinities named, never given a distance) and the first mismatch (slot,
index, both values as hex plus decimal). The slot layout must agree
first: a differing shape or dtype is reported as such, not compared.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .. import bits

_FLOAT_OF = {"f64": np.float64, "f32": np.float32, "f16": np.float16}


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
    specials: str = ""           #: NaN/inf mismatches by name
    layout_error: str = ""
    mismatched_slots: tuple = ()

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
    bad_slots = []
    for k, (o, t_raw, t_fmt) in enumerate(zip(ours, theirs, theirs_dtypes)):
        o_bits, o_fmt = bits.array_bits(o)
        o_shape = tuple(o.shape)
        if o_fmt != t_fmt or o_shape != tuple(t_raw.shape):
            result.layout_error = (f"slot {k} ({names[k]}): ours is {o_fmt} {o_shape}, "
                                   f"theirs {t_fmt} {tuple(t_raw.shape)}")
            return result
        t_bits = np.ascontiguousarray(t_raw).reshape(-1).astype(o_bits.dtype)
        result.elements += o_bits.size
        diff = np.flatnonzero(o_bits != t_bits)
        if not diff.size:
            continue
        bad_slots.append(names[k])
        result.mismatches += int(diff.size)
        ob, tb = o_bits[diff], t_bits[diff]
        if not result.first_index:
            i = int(diff[0])
            result.first_index = f"{names[k]}[{i}]"
            result.first_ours = bits.describe(int(o_bits[i]), o_fmt)
            result.first_theirs = bits.describe(int(t_bits[i]), o_fmt)
        ulps = bits.ulp_distance(ob, tb, o_fmt)
        finite = np.array([u is not None for u in ulps], dtype=bool)
        if finite.any():
            top = int(max(u for u in ulps if u is not None))
            result.max_ulp_diff = top if result.max_ulp_diff is None else max(result.max_ulp_diff, top)
            absd = float(np.max(np.abs(values_f64(ob[finite], o_fmt) - values_f64(tb[finite], o_fmt))))
            result.max_abs_diff = absd if result.max_abs_diff is None else max(result.max_abs_diff, absd)
        if (~finite).any():
            kinds = sorted(set(bits.classify(ob[~finite], o_fmt)) | set(bits.classify(tb[~finite], o_fmt)) - {""})
            result.specials = f"{int((~finite).sum())} mismatches involve {', '.join(kinds)}"
    if result.mismatches and result.max_abs_diff is None:
        result.max_abs_diff = float("nan")
    elif not result.mismatches:
        result.max_abs_diff, result.max_ulp_diff = 0.0, 0
    result.mismatched_slots = tuple(bad_slots)
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
