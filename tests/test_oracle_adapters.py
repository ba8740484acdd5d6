"""The reference adapters seen from the core: clone recognition behind `--ref`, the one
noise-backend policy of every row, and `fuzz.shrink` over a `run(case)` callable. No child runs here."""
from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from esverify.cli import main
from esverify.oracle import adapters, cases, fuzz
from esverify.oracle.options import Options, SetupError
from esverify.oracle.session import BackendRefused, noise_backend
from esverify.oracle.setup import resolve_clones
from standins.mutants import STANDINS

AT_SCALE, AWD = STANDINS / "es-at-scale", STANDINS / "es-awd"


def test_each_stand_in_is_recognised_by_its_own_adapters_only(tmp_path):
    from standins.layouts import paper_fork
    skill = STANDINS / "skill-sample"
    # the es-at-scale clone holds the paper's scripts in archive/: two adapters claim it
    for path, names in ((AT_SCALE, {"es-at-scale", "es-paper"}), (AWD, {"es-awd"}), (skill, {"skill-sample"}),
                        (skill / "es_finetuning_skill.py", {"skill-sample"}),
                        (STANDINS / "eggroll-vllm", {"eggroll"}), (STANDINS / "hyperscale-es", {"hyperscale-es"}),
                        (paper_fork(tmp_path / "fork"), {"es-paper"})):
        claims = {a.name: info for a, info in adapters.recognise(path)}
        assert {n for n, info in claims.items() if not isinstance(info, str)} == names, path
        assert all(claims[n].path == Path(path).resolve() for n in names)


def test_repeated_ref_paths_are_sorted_to_their_adapters_whatever_the_order(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    for refs in ((str(AT_SCALE), str(AWD)), (str(AWD), str(AT_SCALE))):
        clones, not_given = resolve_clones(Options(ref=refs), adapters.names())
        assert {n: c.path for n, c in clones.items()} == {"es-at-scale": AT_SCALE.resolve(), "es-awd": AWD.resolve(),
                                                          "es-paper": AT_SCALE.resolve()}
        assert list(not_given) == ["eggroll", "hyperscale-es", "skill-sample"]


def test_the_deprecated_alias_names_only_its_adapter(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("ESVERIFY_REF", raising=False)
    clones, not_given = resolve_clones(Options(aliases={"--awd-ref": str(AWD)}), adapters.names())
    assert list(clones) == ["es-awd"] and "es-at-scale" in not_given
    with pytest.raises(SetupError, match="is not a clone of es-awd"):
        resolve_clones(Options(aliases={"--awd-ref": str(AT_SCALE)}), adapters.names())


def test_two_clones_of_one_reference_are_refused(tmp_path):
    copy = tmp_path / "copy"
    shutil.copytree(AWD, copy)
    with pytest.raises(SetupError, match="a second es-awd clone"):
        resolve_clones(Options(ref=(str(AWD), str(copy))), adapters.names())


def test_a_path_no_adapter_recognises_is_one_line_listing_what_each_looks_for(tmp_path):
    (tmp_path / "empty").mkdir()
    result = CliRunner().invoke(main, ["parity", "--ref", str(tmp_path / "empty"), "--devices", "cpu", "--quiet",
                                       "--out", str(tmp_path / "out")])
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == 2 and len(lines) == 1, result.output
    assert "no reference adapter recognises it" in lines[0]
    for adapter in adapters.all_adapters():
        assert f"{adapter.name}: {adapter.looks_for()}" in lines[0]


def test_target_choices_come_from_the_registry():
    result = CliRunner().invoke(main, ["parity", "--target", "no-such-reference"])
    assert result.exit_code == 2
    for name in adapters.names():
        assert name in result.output


def test_one_backend_policy_for_every_row():
    from esverify.rng import default_backend
    ours = default_backend("cpu")
    has = {"noise_backends": {"cpu": [ours]}}
    lacks = {"noise_backends": {"cpu": []}}
    assert noise_backend("cpu", has, "libm64") == (ours, ours, "")
    assert noise_backend("cpu", lacks, "libm64", noise="native") == (ours, ours, "")
    got = noise_backend("cpu", lacks, "poly32")
    assert got[:2] == (ours, None) and "bitwise identical on every backend" in got[2]
    if ours in lacks["noise_backends"]["cpu"]:
        return
    with pytest.raises(BackendRefused, match="libm64 is only bit-exact within one backend"):
        noise_backend("cpu", lacks, "libm64")


def test_shrink_reruns_only_the_callable_and_keeps_the_smallest_case_with_the_status():
    rng = np.random.default_rng(3)
    case = next(c for c in (cases.random_case(rng, ["es-awd"]) for _ in range(50))
                if c.shapes and len(c.shapes) > 1 and c.population > 3)
    seen = []

    def run(candidate):   # "fails" while the population stays above 2: the shrink must reach 3
        seen.append(candidate)
        return {"status": "fail" if candidate.population >= 3 else "pass"}
    minimal, runs = fuzz.shrink(run, case, "fail")
    assert runs == len(seen) and 0 < runs <= fuzz.SHRINK_BUDGET
    assert minimal.population == 3 + (minimal.op == "mirrored") and len(minimal.shapes) == 1
    assert cases.check(minimal) is minimal
    budget = []
    fuzz.shrink(lambda c: budget.append(c) or {"status": "fail"}, case, "fail",
                candidates=lambda c: [c] * 10)
    assert len(budget) == fuzz.SHRINK_BUDGET
