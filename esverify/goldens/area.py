"""The plug-in point of a golden area (docs/CONTRACT.md §5; CONTRIBUTING.md, numpy's bit generators).

An area is one named value: its version, how to generate its vectors from
the slow reference implementation, which backends can recompute them on
this machine, and how one backend recomputes one vector. The gate
(`esverify goldens check|generate`) treats every area alike and never
branches on an area's name.

Vector layout (language-neutral JSON, keys sorted)::

    {"id": "zscore-two-iterations-iid-poly32",      # unique within the file
     "comment": "what it pins and why",
     "inputs": {...},                                 # u64 as "0x"+16 hex; other ints plain;
                                                      # floats as bit arrays (below)
     "expected": {"<field>": {"format": "f32", "values": ["0x3f800000", ...]}, ...}}

A *bit array* is ``{"format": F, "values": [hex, ...]}`` with F one of
f64, f32, f16, bf16, u64, u32 (esverify.bits). Every expected field is a
bit array; `recompute` returns the same fields. Vectors whose
``inputs["mapping"] == "libm64"`` (or ``inputs["config"]["mapping"]``, for
trainer configs) are in the libm class: a difference of exactly
one ulp is status `libm-divergence` (docs/CONTRACT.md §3a), not a mismatch,
unless the gate runs with --strict.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable


@dataclass(frozen=True)
class Area:
    name: str                                   #: file stem: goldens/<name>.json
    version: int                                #: the area's version constant now
    version_constant: str                       #: where that constant lives, for messages
    generate: Callable[[], list]                #: () -> vectors, expected from the reference
    backends: Callable[[], list]                #: () -> backend names available here
    recompute: Callable[[dict, str], dict]      #: (vector, backend) -> {field: bit array}
    #: vector -> problems: sizes it declares (n, shapes, population) that disagree with its expected
    #: values; run by the gate before any backend computes (a hostile n = 2e7 must cost nothing)
    check_sizes: Callable[[dict], list] | None = None
    #: (vector, backend) -> the (field, element) pairs whose value depends on a libm64 output of this
    #: backend that differs from the reference's: only there is a one-ulp difference `libm-divergence`
    #: None: every value of a libm-class vector is the mapping's own output (the rng area)
    libm_trace: Callable[[dict, str], set] | None = None
    #: (vector, backend, recomputed fields) -> gate rows naming the first differing value of a vector that
    #: does not carry its values (a digest, esverify.goldens.digest; a chain, esverify.goldens.chain), or
    #: None for a kind it does not locate; asked only when the vector differs
    locate: Callable[[dict, str, dict], list | None] | None = None
