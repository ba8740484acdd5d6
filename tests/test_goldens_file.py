"""The committed golden files: language-neutral, schema-valid, byte-identical on regeneration.

`test_rng_golden_read_with_stdlib_only` deliberately uses nothing but the
standard library (json, int(..., 16), struct, math) and docs/CONTRACT.md's text: it
is what a consumer in any other language would do.
"""
import json
import math
import struct

import jsonschema
import pytest

from esverify.goldens import fileformat
from test_goldens_support import COMMITTED, load, run, vector

# ---- a consumer's own splitmix64, written from docs/CONTRACT.md §2 and §4 only -------------
M64 = (1 << 64) - 1


def _mix(z):
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return z ^ (z >> 31)


def _at(seed, i):
    return _mix((seed + (i + 1) * 0x9E3779B97F4A7C15) & M64)


def _f32_bits(x):
    return struct.unpack("<I", struct.pack("<f", x))[0]


def _libm64(seed, j):
    p = j - j % 2
    ua = ((_at(seed, p) >> 11) + 1) * 2.0 ** -53
    ub = (_at(seed, p + 1) >> 11) * 2.0 ** -53
    r = math.sqrt(-2.0 * math.log(ua))
    t = 2.0 * math.pi * ub
    return r * (math.cos(t) if j % 2 == 0 else math.sin(t))


def test_rng_golden_read_with_stdlib_only():
    with open(COMMITTED / "rng.json", encoding="ascii") as fh:
        doc = json.load(fh)
    assert doc["contract"] == {"name": "rng", "version": 1}
    vectors = {v["id"]: v for v in doc["vectors"]}

    known = vectors["splitmix64-sequential-known-answer"]
    assert int(known["inputs"]["seed"], 16) == 1234567
    outputs = [int(h, 16) for h in known["expected"]["outputs"]["values"]]
    assert outputs == [6457827717110365317, 3203168211198807973, 9817491932198370423,
                       4593380528125082431, 16408922859458223821]   # docs/CONTRACT.md §2

    counter = vectors["splitmix64-counter-seed-0"]
    indices = [int(h, 16) for h in counter["inputs"]["indices"]]
    assert [int(h, 16) for h in counter["expected"]["outputs"]["values"]] == [_at(0, i) for i in indices]
    assert int(counter["expected"]["outputs"]["values"][indices.index(M64)], 16) == _mix(0)

    ms = vectors["member-seed-seed-0-iter-0"]
    assert [int(h, 16) for h in ms["expected"]["member_seeds"]["values"]] == \
        [_at(0 ^ 0x65735F7365656473, m) for m in ms["inputs"]["members"]]          # "es_seeds"

    anti = vectors["member-seed-antithetic-seed-1234567-iter-2"]
    seeds = [int(h, 16) for h in anti["expected"]["member_seeds"]["values"]]
    assert seeds[0] == seeds[1] != seeds[2] == seeds[3]
    assert seeds[2] == _at(1234567 ^ 0x65735F7365656473, 2 * 8 + 2)

    iid = vectors["stream-seed-iid-member-max"]
    assert [int(h, 16) for h in iid["expected"]["stream_seeds"]["values"]] == \
        [_at(M64 ^ 0x65735F6E6F697365, s) for s in iid["inputs"]["slots"]]          # "es_noise"

    g = vectors["gaussian-libm64-seed-1234567-first-1-n-33"]
    assert g["expected"]["values"]["format"] == "f32"
    first, n = g["inputs"]["first"], g["inputs"]["n"]
    got = [int(h, 16) for h in g["expected"]["values"]["values"]]
    want = [_f32_bits(_libm64(1234567, j)) for j in range(first, first + n)]
    assert len(got) == n == 33
    assert got == want
    value = struct.unpack("<f", struct.pack("<I", got[0]))[0]
    assert math.isfinite(value) and abs(value) < 10


@pytest.mark.slow   # 3 s (--durations, 2026-12-03): out of the fast tier
def test_committed_files_validate_against_the_schema():
    schema = json.loads((COMMITTED / "schema.json").read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    for path in sorted(COMMITTED.glob("*.json")):
        if path.name == "schema.json":
            continue
        doc = json.loads(path.read_text())
        jsonschema.validate(doc, schema)
        fileformat.validate(doc, str(path))   # also: unique ids
        assert fileformat.dumps(doc) == path.read_text(), f"{path.name} is not in canonical form"


def test_rng_golden_covers_what_issue_2_asks():
    doc = load(COMMITTED / "rng.json")
    inputs = [v["inputs"] for v in doc["vectors"]]
    seeds = {int(x["seed"], 16) for x in inputs if x["kind"] == "splitmix64-sequential"}
    assert {0, M64} <= seeds
    gauss = [x for x in inputs if x["kind"] == "gaussian"]
    assert {x["mapping"] for x in gauss} == {"poly32", "libm64"}
    for mapping in ("poly32", "libm64"):
        mine = [x for x in gauss if x["mapping"] == mapping]
        assert len({x["seed"] for x in mine}) >= 4
        assert any(x["first"] % 2 for x in mine)
        assert any(x["chunk_elements"] and x["n"] > 4 * x["chunk_elements"] for x in mine)
    assert {x["scheme"] for x in inputs if x["kind"] == "stream-seed"} == {"iid", "correlated"}
    assert any(x.get("antithetic") for x in inputs if x["kind"] == "member-seed")


def test_correlated_noise_vector_repeats_equal_size_slots():
    doc = load(COMMITTED / "rng.json")
    cor = vector(doc, "noise-correlated-poly32-antithetic-member-7")["expected"]
    iid = vector(doc, "noise-iid-poly32-antithetic-member-7")["expected"]
    assert cor["slot_0"] == cor["slot_1"]
    assert cor["slot_2"]["values"] == cor["slot_0"]["values"][:3]
    assert iid["slot_0"] != iid["slot_1"]


@pytest.mark.parametrize("mutate, where", [
    (lambda d: d["vectors"][0]["expected"]["outputs"].update(values=["0x1"]), "values"),
    (lambda d: d["vectors"][0]["expected"]["outputs"].update(format="f128"), "format"),
    (lambda d: d["vectors"][0]["inputs"].update(sigma=0.5), "sigma"),
    (lambda d: d["vectors"][0]["inputs"].update(config={"sigma": 0.5}), "nested float"),
    (lambda d: d["vectors"][0]["inputs"].update(config={"w": {"format": "f32", "values": ["0x3f80"]}}),
     "nested bad bits"),
    (lambda d: d["vectors"][0]["inputs"].update(seed="0x12"), "short u64 hex"),
    (lambda d: d["vectors"][0].pop("comment"), "comment"),
    (lambda d: d["contract"].update(version="1"), "version"),
    (lambda d: d.pop("generator"), "generator"),
    (lambda d: d["vectors"].append(dict(d["vectors"][0])), "duplicate vector id"),
])
def test_schema_rejects_malformed_documents(mutate, where):
    doc = load(COMMITTED / "rng.json")
    fileformat.validate(doc, "committed")
    mutate(doc)
    with pytest.raises(fileformat.GoldenFileError, match="fails the golden schema"):
        fileformat.validate(doc, "mutated")


@pytest.mark.slow   # 27 s (--durations, 2026-12-04; 63 s before the scalar reference's pairs): out of the fast tier
def test_regeneration_is_byte_identical(tmp_path):
    result = run("goldens", "generate", "--area", "rng", "--out", str(tmp_path))
    assert result.exit_code == 0, result.output
    assert (tmp_path / "rng.json").read_bytes() == (COMMITTED / "rng.json").read_bytes()
    again = run("goldens", "generate", "--area", "rng", "--out", str(tmp_path))
    assert again.exit_code == 0 and "bytes unchanged" in again.output


def test_generator_stamp_has_no_timestamp():
    doc = load(COMMITTED / "rng.json")
    assert set(doc["generator"]) == {"tool", "version", "numpy"}   # numpy: what z-score depends on (docs/numerics.md §2)
    assert doc["generator"]["tool"] == "esverify"


def test_schema_accepts_nested_configuration_records():
    doc = load(COMMITTED / "rng.json")
    doc["vectors"][0]["inputs"]["config"] = {"sigma": {"format": "f32", "values": ["0x3c23d70a"]},
                                             "population": 8, "scheme": "iid", "shape": [2, 3]}
    doc["vectors"][0]["expected"]["layers.0.weight"] = {"format": "bf16", "values": ["0x3f80"]}
    fileformat.validate(doc, "extended")
