"""Counting a backend's differences from the scalar reference (docs/CONTRACT.md §3a).

poly32 must match `esverify.rng.scalar` bit for bit on every backend;
libm64 may differ by one f32 ulp, rarely, because each backend brings its
own f64 libm. Such differences are counted and reported, never hidden:
`compare_to_scalar` returns every differing element with both bit
patterns and the ulp distance (docs/numerics.md §7, `esverify.bits`). The scalar
reference runs at about 150k elements/s (poly32), so keep `n` in the thousands.

Checks: ``python -m pytest -q tests/test_rng_backends.py`` (poly32: zero
differences on every CPU backend; libm64: counted and at most one ulp).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from .. import bits as _bits
from . import scalar
from .gaussian import gaussian
from .mappings import get_mapping


@dataclass(frozen=True)
class ScalarComparison:
    """Outcome of one backend-vs-scalar comparison over elements first .. first+n-1."""
    mapping: str
    backend: str
    device: str
    seed: int
    first: int
    n: int
    differences: pd.DataFrame  #: columns element, expected, got, ulp (one row per differing element)

    @property
    def count(self) -> int:
        """Number of elements whose f32 bit patterns differ."""
        return len(self.differences)

    @property
    def max_ulp(self):
        """Largest ulp distance among the differences (0 if none; None if a NaN/inf differs)."""
        if self.count == 0:
            return 0
        ulps = self.differences["ulp"]
        return None if ulps.isna().any() else int(ulps.max())

    def summary(self) -> dict:
        """One report row: mapping, backend, device, seed (0x hex), first, n, differing, max_ulp."""
        return {"mapping": self.mapping, "backend": self.backend, "device": self.device,
                "seed": f"0x{self.seed:016x}", "first": self.first, "n": self.n,
                "differing": self.count, "max_ulp": self.max_ulp}


def compare_to_scalar(seed: int, n: int, first: int = 0, mapping: str = "libm64",
                      backend: str | None = None, device=None,
                      chunk_elements: int | None = None) -> ScalarComparison:
    """Compute elements first .. first+n-1 with `backend` and with the scalar reference.

    Returns a ScalarComparison listing every element whose f32 bits differ
    (element index, expected and got as hex, ulp distance). Arguments as
    for `esverify.rng.gaussian`; raises what it raises.
    """
    m = get_mapping(mapping)
    got = gaussian(seed, n, first, m.name, device, backend=backend, chunk_elements=chunk_elements)
    got_bits, _ = _bits.array_bits(got)
    want = np.array([m.scalar(seed, j) for j in range(first, first + n)], dtype=np.float32)
    want_bits = want.view(np.uint32)
    idx = np.nonzero(got_bits != want_bits)[0]
    ulps = _bits.ulp_distance(want_bits[idx], got_bits[idx], "f32") if len(idx) else []
    frame = pd.DataFrame({
        "element": [first + int(i) for i in idx],
        "expected": [_bits.to_hex(int(want_bits[i]), "f32") for i in idx],
        "got": [_bits.to_hex(int(got_bits[i]), "f32") for i in idx],
        "ulp": pd.array([None if u is None else int(u) for u in ulps], dtype="Int64"),
    })
    dev = "cpu" if device is None else str(device)
    name = backend if backend is not None else "default"
    return ScalarComparison(m.name, name, dev, int(seed), int(first), int(n), frame)
