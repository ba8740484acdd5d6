"""compare.compare_vector: every flipped bit is found, with the ulp distance of docs/numerics.md §7."""
import numpy as np
from hypothesis import given, strategies as st

from esverify import bits
from esverify.goldens import compare
from test_goldens_support import COMMITTED, load

DOC = load(COMMITTED / "rng.json")
VECTORS = [v for v in DOC["vectors"] if any(f["values"] for f in v["expected"].values())]


@given(st.data())
def test_any_flipped_bit_is_reported_once_with_its_ulp_distance(data):
    vector = data.draw(st.sampled_from(VECTORS))
    field = data.draw(st.sampled_from(sorted(k for k, f in vector["expected"].items() if f["values"])))
    want = vector["expected"][field]
    fmt = want["format"]
    element = data.draw(st.integers(0, len(want["values"]) - 1))
    bit = data.draw(st.integers(0, bits.width(fmt) - 1))
    old = int(want["values"][element], 16)
    new = old ^ (1 << bit)
    got = {k: {"format": f["format"], "values": list(f["values"])} for k, f in vector["expected"].items()}
    got[field]["values"][element] = bits.to_hex(new, fmt)

    rows = compare.compare_vector("rng", "numpy", vector, got)
    assert len(rows) == 1
    row = rows[0]
    assert (row["vector"], row["field"], row["element"]) == (vector["id"], field, element)
    expected_ulp = bits.ulp_distance(np.array([old], np.uint64), np.array([new], np.uint64), fmt)[0]
    assert row["ulp"] == expected_ulp
    libm = vector["inputs"].get("mapping") == "libm64"
    want_status = "libm-divergence" if libm and expected_ulp == 1 else "mismatch"
    assert row["status"] == want_status
    assert compare.compare_vector("rng", "numpy", vector, vector["expected"]) == []


def _vec(mapping, values, fmt="f32"):
    return {"id": "v", "comment": "c", "inputs": {"mapping": mapping},
            "expected": {"values": {"format": fmt, "values": values}}}


def test_nan_against_finite_is_a_mismatch_without_distance_even_for_libm64():
    v = _vec("libm64", ["0x3f800000"])
    rows = compare.compare_vector("rng", "numpy", v, {"values": {"format": "f32", "values": ["0x7fc00000"]}})
    assert [(r["status"], r["ulp"]) for r in rows] == [("mismatch", None)]
    assert "nan" in rows[0]["detail"]


def test_signed_zero_is_a_difference():
    v = _vec("poly32", ["0x00000000"])
    rows = compare.compare_vector("rng", "numpy", v, {"values": {"format": "f32", "values": ["0x80000000"]}})
    assert [(r["status"], r["ulp"]) for r in rows] == [("mismatch", 0)]


def test_shape_and_format_differences_are_mismatches():
    v = _vec("poly32", ["0x3f800000", "0x40000000"])
    short = compare.compare_vector("rng", "b", v, {"values": {"format": "f32", "values": ["0x3f800000"]}})
    assert "1 values where the golden has 2" in short[0]["detail"]
    fmt = compare.compare_vector("rng", "b", v, {"values": {"format": "u32", "values": ["0x3f800000"] * 2}})
    assert "format u32" in fmt[0]["detail"]
    missing = compare.compare_vector("rng", "b", v, {})
    assert "no field 'values'" in missing[0]["detail"]
    extra = compare.compare_vector("rng", "b", v, {**v["expected"], "more": v["expected"]["values"]})
    assert "does not have" in extra[0]["detail"]
    assert all(r["status"] == "mismatch" for r in short + fmt + missing + extra)


def test_es_vectors_take_the_mapping_from_their_config():
    """es vectors keep the mapping in the trainer config: a one-ulp libm64 difference
    there is a libm-divergence too, and the same difference under poly32 a mismatch."""
    es_doc = load(COMMITTED / "es-at-scale.json")
    by_mapping = {}
    for v in es_doc["vectors"]:
        if v["inputs"]["kind"] == "es-run":      # shaping vectors have no config (no noise)
            by_mapping.setdefault(v["inputs"]["config"]["mapping"], v)
    for mapping, status in (("libm64", "libm-divergence"), ("poly32", "mismatch")):
        vector = by_mapping[mapping]
        field = next(k for k, f in sorted(vector["expected"].items()) if f["format"] == "f32" and f["values"])
        got = {k: {"format": f["format"], "values": list(f["values"])} for k, f in vector["expected"].items()}
        old = int(got[field]["values"][0], 16)
        got[field]["values"][0] = bits.to_hex(old + 1 if old & 0x7FFFFFFF else 1, "f32")
        (row,) = compare.compare_vector("es-at-scale", "numpy", vector, got)
        assert (row["ulp"], row["status"]) == (1, status)


def test_signed_zero_in_a_libm64_vector_is_a_mismatch_not_a_divergence():
    """ulp(+0, -0) = 0 (docs/numerics.md §7), but a flipped sign of zero is no libm rounding
    effect (docs/CONTRACT.md §3a allows one f32 ulp): it must fail, not pass as libm-divergence."""
    v = _vec("libm64", ["0x00000000"])
    rows = compare.compare_vector("rng", "numpy", v, {"values": {"format": "f32", "values": ["0x80000000"]}})
    assert [(r["status"], r["ulp"]) for r in rows] == [("mismatch", 0)]
