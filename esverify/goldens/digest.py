"""Long-stream digest vectors: SHA-256 of a gaussian stream's bits, and locating the first difference.

A digest vector (docs/goldens.md, *Long-stream digests*) stands for a
stream of f32 values too long to carry (at least 2**20): its expected
fields are ``sha256`` (the SHA-256 of the values' bit patterns, each 4 bytes
little-endian, in stream order, as 4 u64 words, big-endian within a word, so
their hex digits concatenated are the usual hex digest) and ``count`` (one
u64, the number of values). The stream is a list of *ranges*
``(seed, first, n)``: elements first .. first+n-1 of the gaussian stream of
seed (docs/CONTRACT.md §3), concatenated in order; element k of the
vector is its k-th value overall (the *flat index*).

When a recomputed digest differs, `locate` finds the first differing flat
index by asking the backend (or the wrapper) again for sub-ranges of growing
size (1024 values, then doubling: an exponential search, so locating costs
about twice the index found) and comparing each with the slow scalar
reference (`esverify.rng.scalar`), never with the golden values, which the
file does not hold. In the libm class (libm64) a one-ulp first difference
is `libm-divergence`; the search then goes on to count the stream's other
differences (up to the gate's cap plus one), since one allowed value must not
hide a systematic fault.
"""
from __future__ import annotations

import hashlib

import numpy as np

from .. import bits
from .compare import encode_ints, row

FIELDS = ("count", "sha256")
FIRST_PROBE = 1024          #: values in the first sub-range asked for while locating


def is_digest(vector: dict) -> bool:
    """True when the vector's expected fields are a stream digest (sha256 and count)."""
    return set(vector.get("expected", {})) == set(FIELDS)


def count_of(vector: dict) -> int:
    """The number of values the digest vector stands for (its ``count``)."""
    return int(vector["expected"]["count"]["values"][0], 16)


def digest_fields(values) -> dict:
    """{"sha256": 4 u64 words, "count": 1 u64} of an f32 array (numpy; any shape, read flat)."""
    a = np.ascontiguousarray(np.asarray(values, dtype=np.float32).reshape(-1))
    h = hashlib.sha256(a.view("<u4").tobytes()).digest()
    return {"sha256": encode_ints([int.from_bytes(h[8 * k: 8 * k + 8], "big") for k in range(4)], "u64"),
            "count": encode_ints([a.size], "u64")}


class Hasher:
    """Incremental `digest_fields` over chunks (a long stream is hashed as it arrives)."""

    def __init__(self):
        self._h, self.count = hashlib.sha256(), 0

    def update(self, values) -> None:
        a = np.ascontiguousarray(np.asarray(values, dtype=np.float32).reshape(-1))
        self._h.update(a.view("<u4").tobytes())
        self.count += a.size

    def fields(self) -> dict:
        h = self._h.digest()
        return {"sha256": encode_ints([int.from_bytes(h[8 * k: 8 * k + 8], "big") for k in range(4)], "u64"),
                "count": encode_ints([self.count], "u64")}


def split(ranges: list[tuple[int, int, int]], lo: int, hi: int) -> list[tuple[int, int, int]]:
    """The (seed, first, n) sub-ranges covering flat indices [lo, hi) of the concatenated `ranges`."""
    out, start = [], 0
    for seed, first, n in ranges:
        a, b = max(lo, start), min(hi, start + n)
        if a < b:
            out.append((seed, first + a - start, b - a))
        start += n
        if start >= hi:
            break
    return out


def where(ranges: list[tuple[int, int, int]], index: int) -> str:
    """Words for flat index `index`: which range, seed and stream element it is."""
    start = 0
    for k, (seed, first, n) in enumerate(ranges):
        if index < start + n:
            return f"range {k}: element {first + index - start} of the stream of seed 0x{seed:016x}"
        start += n
    return "past the end of the stream"


def reference(ranges: list[tuple[int, int, int]], mapping: str, lo: int, hi: int) -> np.ndarray:
    """Flat values [lo, hi) from the scalar reference (esverify.rng.scalar; slow: tests and locating only)."""
    from ..rng import scalar
    parts = [np.array(scalar.gaussian(seed, n, first, mapping), dtype=np.float32)
             for seed, first, n in split(ranges, lo, hi)]
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.float32)


def locate(fetch, ranges: list[tuple[int, int, int]], mapping: str, limit: int = 1) -> tuple[list, int]:
    """The first differing values of a stream, found by asking `fetch(lo, hi)` for sub-ranges.

    fetch(lo, hi) -> the implementation's f32 values of flat indices [lo, hi) (raises on a failed
    request). Returns ([(index, expected_bits, got_bits), ...], requests): the first difference and,
    while the differences found are libm64 one-ulp ones and fewer than `limit`, the next ones.
    """
    total = sum(n for _, _, n in ranges)
    found, requests, lo, size = [], 0, 0, FIRST_PROBE
    while lo < total:
        hi = min(total, lo + size)
        want = reference(ranges, mapping, lo, hi).view(np.uint32)
        got = np.asarray(fetch(lo, hi), dtype=np.float32).reshape(-1).view(np.uint32)
        requests += 1
        if got.size != want.size:
            raise ValueError(f"asked for values {lo}..{hi - 1} ({hi - lo} values), got {got.size}")
        for k in np.nonzero(want != got)[0].tolist():
            found.append((lo + k, int(want[k]), int(got[k])))
            one_ulp = bits.ulp_distance(np.array([want[k]], dtype=np.uint64), np.array([got[k]], dtype=np.uint64),
                                        "f32")[0] == 1
            if not (mapping == "libm64" and one_ulp) or len(found) > limit:
                return found, requests
        lo, size = hi, size * 2
    return found, requests


def rows(area: str, backend: str, vector: dict, ranges, found: list, requests: int, got: dict) -> list[dict]:
    """Gate rows for a located digest difference: one per value found (compare's columns)."""
    libm = vector["inputs"].get("mapping") == "libm64"
    want_hex = "".join(v[2:] for v in vector["expected"]["sha256"]["values"])
    got_hex = "".join(v[2:] for v in got.get("sha256", {}).get("values", []))
    out = []
    for index, a, b in found:
        dist = int(bits.ulp_distance(np.array([a], dtype=np.uint64), np.array([b], dtype=np.uint64), "f32")[0])
        status = "libm-divergence" if libm and dist == 1 else "mismatch"
        out.append(row(area, backend, vector["id"], "values", index, bits.describe(a, "f32"), bits.describe(b, "f32"),
                       dist, status, f"{where(ranges, index)}; located by {requests} sub-range request(s): "
                                     f"sha256 expected {want_hex[:16]}..., got {got_hex[:16]}..."))
    if not found:
        out.append(row(area, backend, vector["id"], "sha256", detail=(
            f"the digest differs (expected {want_hex[:16]}..., got {got_hex[:16]}...), yet every sub-range asked "
            f"for again ({requests} request(s)) equals the reference: the values depend on how the stream is "
            f"split into requests")))
    return out
