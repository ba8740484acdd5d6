"""Golden files that are valid JSON but hostile, and temp files of a killed writer.

Duplicate keys, deep nesting and sizes that disagree with the expected values are refused with exit 2
before anything is computed; schema validation is done once per vector skeleton and agrees with full
jsonschema validation; stale temp files are cleaned and never shipped in the sdist.
"""
from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
import time

import jsonschema
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from esverify.goldens import fileformat
from test_goldens_support import COMMITTED, ROOT, copy_goldens, load, run, save, vector


def check(directory, *extra):
    return run("goldens", "check", "--area", "rng", "--backend", "numpy", "--goldens-dir", str(directory), *extra)


def test_duplicate_keys_are_refused(tmp_path):
    goldens = copy_goldens(tmp_path / "g")
    text = (goldens / "rng.json").read_text()
    # a tampered "expected" hidden in front of the good one: json.loads would keep the last
    tampered = text.replace('"expected": {', '"expected": {"outputs": {"format": "u64", "values": []}}, '
                                              '"expected": {', 1)
    assert tampered != text
    (goldens / "rng.json").write_text(tampered)
    result = check(goldens)
    assert result.exit_code == 2, result.output
    assert "duplicate key 'expected'" in result.output


def test_deep_nesting_is_refused_without_recursion(tmp_path):
    goldens = copy_goldens(tmp_path / "g")
    (goldens / "rng.json").write_text("[" * 100_000 + "]" * 100_000)
    result = check(goldens)
    assert result.exit_code == 2, result.output
    assert "nests 100000 brackets deep" in result.output and "Traceback" not in result.output


def test_nesting_depth_ignores_brackets_in_strings():
    raw = json.dumps({'a"[[[\\': [1, {"b": "]]}{{{"}]}).encode()
    assert fileformat.nesting_depth(raw) == 3
    assert fileformat.nesting_depth(b"") == 0


def test_an_oversized_file_is_refused_before_reading(tmp_path, monkeypatch):
    goldens = copy_goldens(tmp_path / "g")
    monkeypatch.setattr(fileformat, "MAX_FILE_BYTES", 1000)
    with pytest.raises(fileformat.GoldenFileError, match="over the 1000-byte bound"):
        fileformat.load(goldens / "rng.json")


@pytest.mark.parametrize("area,vid,mutate,words", [
    ("rng", "gaussian-poly32-seed-1234567-first-1-n-1", lambda v: v["inputs"].update(n=20_000_000),
     "n asks for 20000000 values, values has 1"),
    ("rng", "splitmix64-sequential-known-answer", lambda v: v["inputs"].update(n=10 ** 9),
     "n asks for 1000000000 values, outputs has 5"),
    ("rng", "noise-iid-poly32-antithetic-member-7", lambda v: v["inputs"]["slot_sizes"].__setitem__(0, 10 ** 8),
     "slot_0 has 6 values, its slot size is 100000000"),
    ("es-at-scale", "raw-rewards", lambda v: v["inputs"]["params"][0].update(shape=[10 ** 5, 10 ** 4]),
     "shape [100000, 10000] but 35 values"),
    ("es-at-scale", "shaping-n5-wide", lambda v: v["inputs"].update(population=2 * 10 ** 7),
     "population 20000000 but 5 rewards"),
])
def test_sizes_are_checked_against_expected_values_before_computing(tmp_path, monkeypatch, area, vid, mutate,
                                                                     words):
    from esverify.goldens import gate
    goldens = copy_goldens(tmp_path / "g", areas=(area,))
    doc = load(goldens / f"{area}.json")
    mutate(vector(doc, vid))
    save(goldens / f"{area}.json", doc)
    computed = []
    monkeypatch.setattr(gate, "_recompute_area", lambda *args: computed.append(args))
    result = run("goldens", "check", "--area", area, "--backend", "numpy", "--goldens-dir", str(goldens))
    assert result.exit_code == 2, result.output
    assert words in result.output and "refused before computing" in result.output
    assert computed == []


def test_validation_runs_jsonschema_once_per_vector_shape(monkeypatch):
    """100,000 vectors must validate in seconds: vectors of one shape cost one jsonschema run."""
    doc = load(COMMITTED / "rng.json")
    small = [v for v in doc["vectors"] if v["inputs"]["kind"] == "splitmix64-counter"][0]
    vectors = []
    for k in range(2000):
        v = copy.deepcopy(small)
        v["id"] = f"v{k}"
        v["inputs"]["seed"] = f"0x{k:016x}"
        v["expected"]["outputs"]["values"][0] = f"0x{k * 7919:016x}"
        vectors.append(v)
    doc["vectors"] = vectors
    calls = []
    real = fileformat._vector_validator()
    monkeypatch.setattr(fileformat, "_vector_validator", lambda: _Counting(real, calls))
    fileformat.validate(doc, "x")
    assert len(calls) == 1


class _Counting:
    def __init__(self, real, calls):
        self.real, self.calls = real, calls

    def iter_errors(self, instance):
        self.calls.append(1)
        return self.real.iter_errors(instance)


def test_bit_patterns_are_the_schemas():
    schema = json.loads((COMMITTED / "schema.json").read_text())
    for rule in schema["$defs"]["bitArray"]["allOf"]:
        pattern = rule["then"]["properties"]["values"]["items"]["pattern"]
        for fmt in rule["if"]["properties"]["format"]["enum"]:
            assert "^" + fileformat.BIT_PATTERNS[fmt].pattern + "$" == pattern


_BASE = [v for v in load(COMMITTED / "rng.json")["vectors"] if len(json.dumps(v)) < 3000][:6]
_SCALARS = st.one_of(st.integers(-3, 2 ** 65), st.booleans(), st.none(), st.floats(allow_nan=False),
                     st.sampled_from(["0x0000000000000001", "0x12", "0xZZ", "name", "", "0x3f800000", "BAD id"]))


@st.composite
def _mutated(draw):
    v = copy.deepcopy(draw(st.sampled_from(_BASE)))
    for _ in range(draw(st.integers(1, 3))):
        where = draw(st.sampled_from(["id", "comment", "input", "expected-format", "expected-value", "extra",
                                      "input-key", "drop"]))
        if where.startswith("input") and not (isinstance(v.get("inputs"), dict) and v["inputs"]):
            continue
        if where.startswith("expected") and not (isinstance(v.get("expected"), dict) and v["expected"] and all(
                isinstance(f, dict) and isinstance(f.get("values"), list) for f in v["expected"].values())):
            continue
        if where == "id":
            v["id"] = draw(_SCALARS)
        elif where == "comment":
            v["comment"] = draw(_SCALARS)
        elif where == "input":
            v["inputs"][draw(st.sampled_from(sorted(v["inputs"])))] = draw(
                st.one_of(_SCALARS, st.lists(_SCALARS, max_size=3),
                          st.fixed_dictionaries({"format": st.sampled_from(["f32", "u64", "x"]),
                                                 "values": st.lists(_SCALARS, max_size=2)})))
        elif where == "expected-format":
            field = draw(st.sampled_from(sorted(v["expected"])))
            v["expected"][field]["format"] = draw(st.sampled_from(["f64", "f32", "f16", "u32", "q8", 3]))
        elif where == "expected-value":
            field = draw(st.sampled_from(sorted(v["expected"])))
            values = v["expected"][field]["values"]
            if values:
                values[draw(st.integers(0, len(values) - 1))] = draw(_SCALARS)
        elif where == "extra":
            v[draw(st.sampled_from(["extra", "inputs"]))] = draw(_SCALARS)
        elif where == "input-key":
            v["inputs"][draw(st.sampled_from(["ok_key", "9bad", "a.b", "-x"]))] = 1
        else:
            v.pop(draw(st.sampled_from(["id", "comment", "inputs", "expected"])), None)
    return v


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_mutated())
@pytest.mark.slow   # 1 s (--durations, 2026-12-03): out of the fast tier
def test_skeleton_validation_agrees_with_full_jsonschema(v):
    doc = {"contract": {"name": "rng", "version": 1}, "generator": {"tool": "esverify", "version": "x"},
           "vectors": [v]}
    full = jsonschema.validators.validator_for(fileformat._schema())(fileformat._schema())
    full_ok = next(full.iter_errors(doc), None) is None
    try:
        fileformat.validate(doc, "x")
        fast_ok = True
    except fileformat.GoldenFileError:
        fast_ok = False
    assert fast_ok == full_ok


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_stale_temp_files_of_a_killed_writer_are_cleaned(tmp_path):
    goldens = copy_goldens(tmp_path / "g")
    stale = goldens / f".rng.json.pid{_dead_pid()}.k3j4.tmp"
    live = goldens / f".rng.json.pid{os.getpid()}.abcd.tmp"          # being written by this process
    old_style = goldens / ".es-awd.json.q1w2e3.tmp"                     # no pid: stale once old
    for f in (stale, live, old_style):
        f.write_text("{")
    os.utime(old_style, (time.time() - 3600, time.time() - 3600))
    result = check(goldens)
    assert result.exit_code == 0, result.output
    assert not stale.exists() and not old_style.exists() and live.exists()
    out = tmp_path / "out"        # generate cleans the folder it writes to
    out.mkdir()
    stale_out = out / f".rng.json.pid{_dead_pid()}.yy.tmp"
    stale_out.write_text("{")
    # skill-sample: the cheapest area to generate (rng's digests take minutes of pure-Python reference)
    gen = run("goldens", "generate", "--area", "skill-sample", "--out", str(out), "--goldens-dir", str(goldens))
    assert gen.exit_code == 0, gen.output
    assert not stale_out.exists() and f"removed stale temp file {stale_out}" in gen.output
    assert sorted(p.name for p in out.iterdir()) == ["skill-sample.json"]


def test_temp_files_stay_out_of_the_sdist(tmp_path, monkeypatch):
    """MANIFEST.in (what `python -m build --sdist` ships) leaves golden temp files out."""
    from setuptools.command.egg_info import FileList
    (tmp_path / "goldens").mkdir()
    (tmp_path / "goldens" / "rng.json").write_text("{}")
    (tmp_path / "goldens" / ".rng.json.pid99.abcd.tmp").write_text("{")
    (tmp_path / "goldens" / ".rng.json.x8y9.tmp").write_text("{")
    for name in ("README.md", "CHANGELOG.md", "LICENSE", "setup.py"):
        (tmp_path / name).write_text("x")
    (tmp_path / "oracles").mkdir()
    monkeypatch.chdir(tmp_path)
    files = FileList()
    for line in (ROOT / "MANIFEST.in").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            files.process_template_line(line)
    assert "goldens/rng.json" in files.files
    assert not [f for f in files.files if f.endswith(".tmp")]


def test_a_sigkilled_writer_leaves_a_temp_file_that_check_removes(tmp_path):
    """A real SIGKILL between writing the temp file and the rename (os.replace made to block)."""
    import signal
    goldens = copy_goldens(tmp_path / "g")
    script = ("import os, sys, time\n"
              "from esverify.goldens import fileformat\n"
              "os.replace = lambda *a: (print('written', flush=True), time.sleep(60))\n"
              f"fileformat.write_golden_file({str(goldens / 'rng.json')!r}, 'x' * 1000)\n")
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, cwd=ROOT,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        assert proc.stdout.readline().strip() == b"written"
        leftovers = list(goldens.glob(".rng.json.*.tmp"))
        assert [p.name.startswith(f".rng.json.pid{proc.pid}.") for p in leftovers] == [True]
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    result = check(goldens)
    assert result.exit_code == 0, result.output
    assert list(goldens.glob(".*.tmp")) == []
