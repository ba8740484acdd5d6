"""Long-stream digest vectors (docs/goldens.md, *Long-stream digests*).

The digest is SHA-256 over the little-endian f32 bit patterns plus the
count; every backend here reproduces every digest vector; a backend that
bumps one value (one ulp) in a 2**20-value stream fails, and the gate names
the first differing index, both values and the ulp distance, found by
asking for sub-ranges; the libm class allows a single one-ulp value but not
one in a thousand; a hostile count is refused before computing.
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest

from esverify.goldens import digest, gate, rng_area
from esverify.rng import scalar

GOLDENS = Path(__file__).resolve().parents[1] / "goldens"


def _vectors() -> list[dict]:
    doc = json.loads((GOLDENS / "rng.json").read_text())
    return [v for v in doc["vectors"] if digest.is_digest(v)]


def test_the_digest_is_sha256_of_the_little_endian_bits_and_the_count():
    values = np.array([1.0, -0.0, 3.5e-45, np.inf], dtype=np.float32)
    fields = digest.digest_fields(values)
    raw = b"".join(int(b).to_bytes(4, "little") for b in values.view(np.uint32))
    assert "".join(v[2:] for v in fields["sha256"]["values"]) == hashlib.sha256(raw).hexdigest()
    assert fields["count"] == {"format": "u64", "values": ["0x0000000000000004"]}
    h = digest.Hasher()
    for part in (values[:1], values[1:3], values[3:]):
        h.update(part)
    assert h.fields() == fields


def test_the_file_holds_long_streams_for_each_mapping_and_scheme():
    vectors = _vectors()
    kinds = {(v["inputs"]["kind"], v["inputs"].get("scheme"), v["inputs"]["mapping"]) for v in vectors}
    assert kinds == {("gaussian-digest", None, m) for m in ("poly32", "libm64")} | {
        ("noise-digest", s, m) for s in ("iid", "correlated") for m in ("poly32", "libm64")}
    for v in vectors:
        assert digest.count_of(v) >= 2**20, v["id"]
        assert rng_area.check_sizes(v) == []
    ranges = rng_area.ranges_of(next(v for v in vectors if v["inputs"]["kind"] == "gaussian-digest")["inputs"])
    assert any(f < 2**32 < f + n for _, f, n in ranges)          # counters across 2**32
    assert any(f + n == 2**64 for _, f, n in ranges)             # up to the last element
    assert any(f % 2 for _, f, n in ranges)                      # an odd start


@pytest.mark.parametrize("backend", rng_area.backends())
def test_every_backend_reproduces_every_digest(backend):
    for v in _vectors():
        assert rng_area.recompute(v, backend) == v["expected"], (backend, v["id"])


def test_split_and_where_follow_the_concatenation():
    ranges = [(1, 0, 3), (2, 10, 4), (3, 5, 2)]
    assert digest.split(ranges, 2, 8) == [(1, 2, 1), (2, 10, 4), (3, 5, 1)]
    assert digest.split(ranges, 3, 7) == [(2, 10, 4)]
    assert digest.where(ranges, 4) == "range 1: element 11 of the stream of seed 0x0000000000000002"
    ref = digest.reference(ranges, "poly32", 0, 9)
    assert ref.tolist() == [np.float32(x) for s, f, n in ranges for x in scalar.gaussian(s, n, f, "poly32")]


def _faulty(monkeypatch, every: int | None = None, at: int | None = None):
    """rng_area's backend values with the cosine half of some pairs one ulp up: element `at` of every
    stream, or every element j = 0 mod 2*every (one value in 2*every)."""
    real = rng_area._gaussian_values

    def bumped(seed, n, first, mapping, backend):
        v = np.array(real(seed, n, first, mapping, backend), dtype=np.float32)
        j = np.arange(first, first + n, dtype=np.uint64)
        hit = (j == np.uint64(at)) if at is not None else (j % np.uint64(2 * every) == 0)
        v[hit] = np.nextafter(v[hit], np.float32(np.inf))
        return v
    monkeypatch.setattr(rng_area, "_gaussian_values", bumped)


def _check(vector_id: str, backend="torch-cpu"):
    doc = {"vectors": [v for v in _vectors() if v["id"] == vector_id]}
    result = gate.CheckResult()
    gate._recompute_area(rng_area.AREA, doc, [backend], result)
    return result


def test_one_bumped_value_is_located_by_index_values_and_ulp(monkeypatch):
    """poly32: element 1000 of each range's stream one ulp up; the first is flat index 1000 of range 0."""
    _faulty(monkeypatch, at=1000)
    result = _check("gaussian-digest-poly32-2p20")
    assert result.exit_code(strict=False) == 1
    (row,) = result.rows
    assert (row["field"], row["element"], row["ulp"], row["status"]) == ("values", 1000, 1, "mismatch")
    want = np.float32(scalar.poly32(0, 1000))
    assert row["expected"].startswith(f"0x{int(np.array(want).view(np.uint32)):08x}")
    assert row["got"].startswith(f"0x{int(np.array(np.nextafter(want, np.float32(np.inf))).view(np.uint32)):08x}")
    assert "range 0: element 1000 of the stream of seed 0x0000000000000000" in row["detail"]
    assert "sub-range request" in row["detail"]


def test_a_fault_in_one_value_of_a_thousand_fails_each_digest(monkeypatch):
    _faulty(monkeypatch, every=500)
    for v in _vectors():
        if v["inputs"]["mapping"] != "poly32":
            continue
        rows = _check(v["id"]).rows
        assert rows and rows[0]["status"] == "mismatch" and rows[0]["ulp"] == 1, v["id"]


@pytest.mark.slow   # 2 s (--durations, 2026-12-03): out of the fast tier
def test_libm64_allows_one_divergence_but_not_one_in_a_thousand(monkeypatch):
    _faulty(monkeypatch, at=2**32 + 1000)          # one value, inside the range across 2**32
    one = _check("gaussian-digest-libm64-2p20")
    assert one.exit_code(strict=False) == 0 and one.exit_code(strict=True) == 1
    assert [r["status"] for r in one.rows] == ["libm-divergence"]
    _faulty(monkeypatch, every=500)
    many = _check("gaussian-digest-libm64-2p20")
    assert many.exit_code(strict=False) == 1
    assert any(r["status"] == "systematic-divergence" for r in many.rows)


def test_a_hostile_count_is_refused_before_computing():
    v = json.loads(json.dumps(_vectors()[0]))
    v["inputs"]["ranges"][0]["n"] = 2**40
    assert "over the" in rng_area.check_sizes(v)[0]
    v = json.loads(json.dumps(_vectors()[0]))
    v["expected"]["count"]["values"] = ["0x0000000000000005"]
    assert "count is 5" in rng_area.check_sizes(v)[0]
