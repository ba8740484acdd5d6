"""`esverify goldens check`: exit codes 0/1/2, the mismatch table, libm-divergence, reports.

Every test runs the real click command on a temporary copy of the
committed goldens (--goldens-dir), mostly on the numpy backend for speed;
`test_committed_goldens_pass_on_every_cpu_backend` is the gate itself.
"""
import json
import xml.etree.ElementTree as ET

import numpy as np
import pytest

from esverify import rng
from esverify.goldens import areas as area_mod
from esverify.goldens import gate, rng_area
from test_goldens_support import COMMITTED, copy_goldens, flip_bit, load, run, save, vector

POLY = "gaussian-poly32-seed-max-first-5-n-1000-chunk-64"
LIBM = "gaussian-libm64-seed-99-first-0-n-2053-chunk-256"


def check(directory, *extra):
    return run("goldens", "check", "--area", "rng", "--goldens-dir", str(directory), *extra)


@pytest.fixture
def goldens(tmp_path):
    return copy_goldens(tmp_path / "goldens")


@pytest.mark.slow   # 21 s (--durations, 2026-12-03): out of the fast tier
def test_committed_goldens_pass_on_every_cpu_backend(tmp_path):
    result = run("goldens", "check", "--json", str(tmp_path / "r.json"))
    assert result.exit_code == 0, result.output
    assert "goldens check: PASS" in result.output
    meta = json.loads((tmp_path / "r.json").read_text())
    ran = {row["backend"] for row in meta["sections"]["summary"]}
    assert {"numpy", "numba", "torch-cpu"} <= ran
    # every area recomputes under the same labels as esverify.rng.backend_targets()
    labels = [label for label, _, _ in rng.backend_targets()]
    for name in ("rng", "es-at-scale"):
        assert area_mod.get_area(name).backends() == labels


@pytest.mark.cuda
def test_committed_goldens_pass_on_cuda(tmp_path):
    result = run("goldens", "check", "--area", "rng", "--area", "es-at-scale", "--backend", "torch-cuda")
    assert result.exit_code == 0, result.output


def test_flipped_bit_is_a_mismatch_with_its_ulp_distance(goldens, tmp_path):
    doc = load(goldens / "rng.json")
    flip_bit(doc, POLY, "values", 17, bit=1)
    save(goldens / "rng.json", doc)
    result = check(goldens, "--backend", "numpy", "--json", str(tmp_path / "r.json"))
    assert result.exit_code == 1, result.output
    assert "FAIL (exit 1)" in result.output
    rows = json.loads((tmp_path / "r.json").read_text())["sections"]["differences"]
    assert len(rows) == 1
    row = rows[0]
    assert (row["backend"], row["vector"], row["field"], row["element"], row["ulp"], row["status"]) == \
        ("numpy", POLY, "values", 17, 2, "mismatch")
    assert row["expected"].startswith("0x") and row["got"] != row["expected"]


def test_flipped_u64_output_is_a_mismatch(goldens):
    doc = load(goldens / "rng.json")
    flip_bit(doc, "splitmix64-counter-seed-max", "outputs", 11, bit=63)
    save(goldens / "rng.json", doc)
    result = check(goldens, "--backend", "numpy")
    assert result.exit_code == 1
    assert "splitmix64-counter-seed-max" in result.output


def test_missing_file_exits_2(tmp_path):
    (tmp_path / "empty").mkdir()
    result = check(tmp_path / "empty")
    assert result.exit_code == 2
    assert "rng.json is missing" in result.output


def test_missing_rng_file_exits_2_without_area_option(tmp_path):
    (tmp_path / "empty").mkdir()
    result = run("goldens", "check", "--goldens-dir", str(tmp_path / "empty"))
    assert result.exit_code == 2
    assert "rng.json is missing" in result.output


def test_unreadable_file_exits_2(goldens):
    (goldens / "rng.json").write_text('{"contract": ')
    result = check(goldens)
    assert result.exit_code == 2
    assert "not readable JSON" in result.output


def test_schema_failure_exits_2(goldens):
    doc = load(goldens / "rng.json")
    vector(doc, POLY)["expected"]["values"]["values"][0] = "0x3f80"   # 4 hex digits in an f32 array
    save(goldens / "rng.json", doc)
    result = check(goldens)
    assert result.exit_code == 2
    assert "fails the golden schema" in result.output


def test_version_mismatch_exits_2_and_names_both_versions(goldens):
    doc = load(goldens / "rng.json")
    doc["contract"]["version"] = 2
    save(goldens / "rng.json", doc)
    result = check(goldens)
    assert result.exit_code == 2
    assert "records rng version 2" in result.output
    assert "esverify.rng.CONTRACT_VERSION is 1" in result.output


def test_unavailable_backend_exits_2(goldens):
    result = check(goldens, "--backend", "abacus")
    assert result.exit_code == 2
    assert result.output.count("unknown backend 'abacus'") == 1 and "numpy, numba, torch-cpu, torch-cuda" in result.output
    import torch
    if not torch.cuda.is_available():   # a known backend this machine lacks
        result = check(goldens, "--backend", "torch-cuda")
        assert result.exit_code == 2 and "not available" in result.output


def test_one_ulp_libm64_difference_is_libm_divergence_unless_strict(goldens, tmp_path):
    doc = load(goldens / "rng.json")
    flip_bit(doc, LIBM, "values", 100, bit=0)
    save(goldens / "rng.json", doc)
    lenient = check(goldens, "--backend", "numpy", "--json", str(tmp_path / "r.json"))
    assert lenient.exit_code == 0, lenient.output
    assert "libm-divergence" in lenient.output
    rows = json.loads((tmp_path / "r.json").read_text())["sections"]["differences"]
    assert [(r["vector"], r["element"], r["ulp"], r["status"]) for r in rows] == \
        [(LIBM, 100, 1, "libm-divergence")]
    strict = check(goldens, "--backend", "numpy", "--strict")
    assert strict.exit_code == 1


def test_two_ulp_libm64_difference_fails(goldens):
    doc = load(goldens / "rng.json")
    flip_bit(doc, LIBM, "values", 100, bit=1)
    save(goldens / "rng.json", doc)
    assert check(goldens, "--backend", "numpy").exit_code == 1


def test_one_ulp_poly32_difference_is_never_tolerated(goldens):
    doc = load(goldens / "rng.json")
    flip_bit(doc, POLY, "values", 3, bit=0)
    save(goldens / "rng.json", doc)
    assert check(goldens, "--backend", "numpy").exit_code == 1


def test_junit_and_json_reports(goldens, tmp_path):
    doc = load(goldens / "rng.json")
    flip_bit(doc, POLY, "values", 0, bit=5)
    save(goldens / "rng.json", doc)
    result = check(goldens, "--backend", "numpy", "--junit", str(tmp_path / "j.xml"),
                   "--json", str(tmp_path / "r.json"))
    assert result.exit_code == 1
    suite = ET.parse(tmp_path / "j.xml").getroot()
    assert suite.get("failures") == "1" and suite.get("errors") == "0"
    failed = [c for c in suite.iter("testcase") if c.find("failure") is not None]
    # one testcase per checked unit (area, backend) whatever its status: the rng/numpy
    # unit fails and names the flipped value; every other area on numpy keeps its passing testcase
    assert [c.get("name") for c in failed] == ["rng/numpy/*"]
    assert f"{POLY}/values[0]: mismatch" in failed[0].find("failure").get("message")
    assert failed[0].find("failure").get("type") == "fail"
    names = [c.get("name") for c in suite.iter("testcase")]
    assert len(names) == len(set(names)) == int(suite.get("tests"))
    areas = [s["area"] for s in json.loads((tmp_path / "r.json").read_text())["sections"]["summary"]]
    assert set(names) == {f"{area}/numpy/*" for area in areas}
    assert all(c.get("time") is not None for c in suite.iter("testcase")) and float(suite.get("time")) > 0
    meta = json.loads((tmp_path / "r.json").read_text())["metadata"]
    assert meta["exit_code"] == 1 and meta["verdict"].startswith("goldens check: FAIL")


def test_junit_keeps_one_testcase_per_area_and_backend_whatever_its_status():
    """A mismatch in rng/numpy does not drop the passing rng/numba testcase; libm-divergence passes
    unless --strict; the counts agree with the exit code."""
    import pandas as pd

    from esverify import report
    from esverify.goldens.cli import _junit_cases
    from esverify.goldens.gate import CheckResult
    summary = pd.DataFrame([{"area": "rng", "backend": "numpy", "vectors": 47, "mismatches": 1, "libm_divergences": 0,
                             "libm_cap": 1, "seconds": 0.5},
                            {"area": "rng", "backend": "numba", "vectors": 47, "mismatches": 0,
                             "libm_divergences": 1, "libm_cap": 1, "seconds": 0.25}])
    table = pd.DataFrame([{"area": "rng", "backend": "numpy", "vector": "v1", "field": "values", "element": 3,
                           "status": "mismatch", "detail": "", "expected": "0x3f800000", "got": "0x3f800001", "ulp": 1},
                          {"area": "rng", "backend": "numba", "vector": "v2", "field": "values", "element": 0,
                           "status": "libm-divergence", "detail": "", "expected": "0x1", "got": "0x2", "ulp": 1}])
    for strict, failures in ((False, 1), (True, 2)):
        cases = _junit_cases(CheckResult(), summary, table, strict)
        xml = report.to_junit(cases, "esverify.goldens", name_cols=["area", "backend", "vector"], failing=("fail",),
                              time_col="seconds", suite_time=0.75, exit_code=1, verdict="fail")
        suite = ET.fromstring(xml.split("?>", 1)[1])
        got = {c.get("name"): (c.find("failure") is not None, c.get("time")) for c in suite.iter("testcase")}
        assert got == {"rng/numpy/*": (True, "0.500"), "rng/numba/*": (strict, "0.250")}
        assert (suite.get("tests"), suite.get("failures"), suite.get("errors"), suite.get("time")) == \
            ("2", str(failures), "0", "0.750")
        assert "v1/values[3]: mismatch" in suite.find("testcase[@name='rng/numpy/*']/failure").get("message")


def test_swapped_sine_cosine_in_a_backend_is_caught(goldens, monkeypatch):
    """An RNG-side fault (sine and cosine halves swapped in the numpy kernel) fails the gate."""
    from esverify.rng import numpy_backend
    original = numpy_backend.sincos_turn32

    def swapped(u):
        s, c = original(u)
        return c, s

    monkeypatch.setattr(numpy_backend, "sincos_turn32", swapped)
    assert np.any(numpy_backend.sincos_turn32(np.float32([0.1]))[0] != original(np.float32([0.1]))[0])
    result = check(goldens, "--backend", "numpy")
    assert result.exit_code == 1
    assert "gaussian-poly32" in result.output
    assert check(goldens, "--backend", "numba").exit_code == 0   # the other backend is untouched


def test_a_crashing_backend_is_an_error_row_and_exit_1(goldens, monkeypatch):
    def boom(vector, backend):
        raise RuntimeError("kernel exploded")
    area = rng_area.AREA
    monkeypatch.setattr(rng_area, "AREA", type(area)(area.name, area.version, area.version_constant,
                                                     area.generate, area.backends, boom))
    result = check(goldens, "--backend", "numpy")
    assert result.exit_code == 1
    assert "kernel exploded" in result.output


def test_recompute_is_bitwise_equal_to_expected_on_numpy():
    doc = load(COMMITTED / "rng.json")
    for v in doc["vectors"]:
        assert rng_area.recompute(v, "numpy") == v["expected"], v["id"]


def test_gate_api_requires_every_registered_area(tmp_path):
    copy_goldens(tmp_path)  # rng.json only
    result = gate.check(tmp_path, backends=["numpy"])
    assert result.exit_code(strict=False) == 2
    for name in ("es-at-scale", "es-awd"):
        assert any(f"{name}.json is missing" in err for err in result.errors)
    assert [s["area"] for s in result.summary] == ["rng"]  # the present area is still checked


def test_unwritable_report_exits_2_not_1(goldens, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    result = check(goldens, "--backend", "numpy", "--json", str(blocker / "r.json"))
    # checked before any work: one line naming the path and the reason, nothing computed
    assert result.exit_code == 2
    assert f"--json {blocker / 'r.json'}: {blocker} is a file, not a directory" in result.output
    assert "goldens check: PASS" not in result.output


def test_a_trainer_area_runs_on_the_targets_whose_device_takes_its_cpu_rule(monkeypatch):
    """The goldens hold each profile's CPU-rule values: es-at-scale (one rule everywhere) is recomputed on a
    CUDA target too, es-awd (rule `cuda` there) on CPU targets only; the shaping vectors on every target.
    Asked of the profile's rule_for, not of its name."""
    from esverify.goldens import es_area
    monkeypatch.setattr(rng, "backend_targets", lambda: [("numpy", "numpy", None), ("torch-cpu", "torch", None),
                                                         ("torch-cuda", "torch", "cuda")])
    every = ["numpy", "torch-cpu", "torch-cuda"]
    assert area_mod.get_area("es-at-scale").backends() == every
    assert area_mod.get_area("es-awd").backends() == ["numpy", "torch-cpu"]
    shaping = vector(load(COMMITTED / "es-at-scale.json"), "shaping-n2-wide")
    assert es_area.recompute(shaping, "torch-cuda") == shaping["expected"]   # shaping runs on CPU whatever the label
    schedule = vector(load(COMMITTED / "es-awd.json"), "seed-schedule-seed-0-n30")
    with pytest.raises(ValueError, match="es backend 'torch-cuda' is unknown or not available here"):
        es_area.recompute(schedule, "torch-cuda")
