"""Bitwise comparison of one recomputed vector with its golden (docs/numerics.md §7, docs/CONTRACT.md §3a).

A field matches when every bit pattern is equal (the sign of zero
included). Every difference becomes one row: area, backend, vector id,
field, element, expected, got, ulp distance (`esverify.bits`), status and
detail. Status is `mismatch`, or `libm-divergence` for a libm-class vector
(inputs.mapping == "libm64") differing by exactly one ulp: backends' f64
libm functions are allowed to disagree by that much after the rounding to
f32, and the gate reports it without failing unless --strict.
"""
from __future__ import annotations

import math

import numpy as np
import pandas as pd

from .. import bitcompare, bits

COLUMNS = ["area", "backend", "vector", "field", "element", "expected", "got", "ulp", "status", "detail"]
SYSTEMATIC = "systematic-divergence"
FAILING = ("mismatch", "error", "changed-without-bump", "removed-without-bump", "version-backwards", SYSTEMATIC)
LIBM_DIVERGENCE = "libm-divergence"
UNSUPPORTED = "unsupported"       #: a vector an --impl wrapper does not claim (never a pass, never a failure)

#: Allowed one-ulp libm differences per libm-class value compared (docs/CONTRACT.md §3a expects about 1e-8).
LIBM_RATE_CAP = 1e-5


def libm_allowance(n_values: int) -> int:
    """How many libm-divergence values one (area, backend) may show among `n_values` libm-class values.

    max(1, floor(n * LIBM_RATE_CAP)): at the contract's rate (order 1e-8,
    docs/CONTRACT.md §3a; 1e-7 with a tenfold margin) two or more among the 3,438
    libm-class values of the rng file happen with probability about 6e-8, while a
    backend that diverges systematically (one value in a thousand or more)
    exceeds one with probability above 0.85 (docs/goldens.md).
    """
    return max(1, math.floor(n_values * LIBM_RATE_CAP))


def is_libm_class(vector: dict) -> bool:
    """True for vectors whose values come from backend f64 libm (docs/CONTRACT.md §3a).

    The mapping sits in ``inputs["mapping"]`` (rng vectors) or in the
    trainer config ``inputs["config"]["mapping"]`` (es vectors).
    """
    inputs = vector.get("inputs", {})
    config = inputs.get("config")
    mapping = config.get("mapping") if isinstance(config, dict) else inputs.get("mapping")
    return mapping == "libm64"


def decode(array: dict) -> np.ndarray:
    """A bit array {"format", "values"} as a uint64 numpy array of its patterns."""
    fmt = array["format"]
    return np.array([bits.from_hex(v, fmt) for v in array["values"]], dtype=np.uint64)


def encode(values) -> dict:
    """A bit array from a numpy array or torch tensor (any device), via esverify.bits."""
    raw, fmt = bits.array_bits(values)
    return {"format": fmt, "values": [bits.to_hex(int(b), fmt) for b in raw.tolist()]}


def encode_ints(values, fmt: str) -> dict:
    """A bit array from Python ints (u64 / u32 outputs such as seeds)."""
    return {"format": fmt, "values": [bits.to_hex(int(v), fmt) for v in values]}


def row(area, backend, vector, field=None, element=None, expected=None, got=None, ulp=None,
        status="mismatch", detail="") -> dict:
    return dict(zip(COLUMNS, (area, backend, vector, field, element, expected, got, ulp, status, detail)))


def compare_vector(area: str, backend: str, vector: dict, got: dict, libm_trace=None) -> list[dict]:
    """Rows for every bit difference between vector["expected"] and `got` (empty when equal).

    libm_trace: None, or a callable returning the set of (field, element) whose value traces back to a
    libm64 output of the backend that differs from the reference's (Area.libm_trace); it is asked
    only when a libm-class value differs by one ulp, and a one-ulp difference elsewhere is a mismatch.
    """
    rows = []
    libm = is_libm_class(vector)
    traced = None
    for field, want in vector["expected"].items():
        if field not in got:
            rows.append(row(area, backend, vector["id"], field, detail=f"backend returned no field {field!r}"))
            continue
        have = got[field]
        fmt = want["format"]
        if have["format"] != fmt:
            rows.append(row(area, backend, vector["id"], field,
                            detail=f"format {have['format']} where the golden has {fmt}"))
            continue
        a, b = decode(want), decode(have)
        if len(a) != len(b):
            rows.append(row(area, backend, vector["id"], field,
                            detail=f"{len(b)} values where the golden has {len(a)}"))
            continue
        diff = bitcompare.compare(bitcompare.of_format(a, fmt), bitcompare.of_format(b, have["format"]))
        where = diff.index
        if not len(where):
            continue
        dist = diff.ulps()
        kinds_a = bits.classify(a[where], fmt) if fmt in bits.FLOAT_FORMATS else None
        kinds_b = bits.classify(b[where], fmt) if fmt in bits.FLOAT_FORMATS else None
        for k, i in enumerate(where.tolist()):
            ulp = dist[k]
            # exactly one ulp: ulp 0 with different bits is a flipped sign of zero, never a libm rounding
            status = LIBM_DIVERGENCE if (libm and ulp == 1) else "mismatch"
            detail = ""
            if status == LIBM_DIVERGENCE and libm_trace is not None:
                if traced is None:
                    traced = libm_trace()
                if (field, i) not in traced:   # not downstream of a differing libm64 value: a real fault
                    status = "mismatch"
                    detail = "one ulp, but no libm64 value this backend computed differs where this one depends"
            if kinds_a is not None and (kinds_a[k] or kinds_b[k]):
                detail = f"special values: expected {kinds_a[k] or 'finite'}, got {kinds_b[k] or 'finite'}"
            rows.append(row(area, backend, vector["id"], field, i, bits.describe(int(a[i]), fmt),
                            bits.describe(int(b[i]), fmt), None if ulp is None else int(ulp), status, detail))
    for field in got:
        if field not in vector["expected"]:
            rows.append(row(area, backend, vector["id"], field,
                            detail=f"backend returned field {field!r} that the golden does not have"))
    return rows


def frame(rows: list[dict]) -> pd.DataFrame:
    """The mismatch table (columns COLUMNS), in the order rows were found."""
    return pd.DataFrame(rows, columns=COLUMNS)
