"""Which clones a parity run runs, and whence: `--ref` runs what it names; a clone
found elsewhere ($ESVERIFY_* variables, ./refs/<name>) runs only with --discover; a folder that one
adapter matches on a generic file name only is exit 2 naming what it lacks. No child runs here."""
from __future__ import annotations

import shutil

import pytest
from click.testing import CliRunner

from esverify.cli import main
from esverify.oracle import adapters
from esverify.oracle.options import Options, SetupError
from esverify.oracle.setup import NotAskedFor, clones_line, resolve_clones
from standins.mutants import STANDINS

AT_SCALE, AWD = STANDINS / "es-at-scale", STANDINS / "es-awd"


@pytest.fixture
def elsewhere(monkeypatch, tmp_path):
    """A working folder with ./refs/es-awd, and $ESVERIFY_REF naming the es-at-scale stand-in."""
    monkeypatch.chdir(tmp_path)
    shutil.copytree(AWD, tmp_path / "refs" / "es-awd")
    monkeypatch.setenv("ESVERIFY_REF", str(AT_SCALE))
    monkeypatch.delenv("ESVERIFY_AWD_REF", raising=False)
    return tmp_path


def test_ref_runs_only_what_it_names(elsewhere):
    skill = STANDINS / "skill-sample"
    clones, not_given = resolve_clones(Options(ref=str(skill)), adapters.names())
    assert list(clones) == ["skill-sample"] and clones["skill-sample"].source == "--ref"
    assert all(isinstance(not_given[n], NotAskedFor) for n in ("es-at-scale", "es-awd", "es-paper"))
    assert not_given["es-at-scale"].found == f"$ESVERIFY_REF {AT_SCALE}"
    assert not_given["es-awd"].found == "./refs/es-awd"
    line = clones_line(clones, not_given)
    assert line.startswith(f"clones: skill-sample {skill.resolve()} (from --ref); found elsewhere, not run "
                           "(--discover runs them): "), line
    assert f"es-at-scale at $ESVERIFY_REF {AT_SCALE}" in line and "es-awd at ./refs/es-awd" in line


def test_discover_runs_the_clones_found_elsewhere_and_says_whence(elsewhere):
    clones, not_given = resolve_clones(Options(ref=str(STANDINS / "skill-sample"), discover=True), adapters.names())
    assert {n: c.source for n, c in clones.items()} == {
        "skill-sample": "--ref", "es-at-scale": "$ESVERIFY_REF", "es-awd": "./refs/es-awd (the default path)"}
    # found nowhere: the references with no clone in this test's places (not "not asked for": --discover asked)
    assert list(not_given) == ["eggroll", "es-paper", "hyperscale-es"]
    assert not any(isinstance(why, NotAskedFor) for why in not_given.values())


def test_without_ref_the_clones_found_run_as_before(elsewhere):
    clones, _ = resolve_clones(Options(), adapters.names())
    assert {"es-at-scale", "es-awd"} <= set(clones) and clones["es-awd"].source.startswith("./refs/es-awd")


def test_target_of_a_reference_ref_did_not_name_is_a_setup_error(elsewhere):
    with pytest.raises(SetupError, match=r"--target es-awd needs the es-awd clone, and no --ref path is one; "
                                         r"fix: pass --ref PATH, or --discover to run the one at ./refs/es-awd"):
        resolve_clones(Options(ref=str(AT_SCALE), target="es-awd"), ["es-awd"])


def test_a_folder_with_an_unrelated_es_py_is_not_an_es_awd_clone(tmp_path):
    folder = tmp_path / "project"
    folder.mkdir()
    (folder / "es.py").write_text("print('an unrelated evolution strategy')\n")
    assert adapters.get("es-awd").recognise(folder) == (
        "not an es-awd clone: it lacks distributed_utils.py, weight_update_utils.py (it has only es.py, a name "
        "other code uses too)")
    result = CliRunner().invoke(main, ["parity", "--ref", str(folder), "--devices", "cpu", "--quiet",
                                       "--out", str(tmp_path / "out")])
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == 2 and len(lines) == 1, result.output
    assert "not an es-awd clone: it lacks distributed_utils.py, weight_update_utils.py" in lines[0]
    assert not (tmp_path / "out").exists()


def test_a_partial_es_awd_clone_is_still_one(tmp_path):
    clone = tmp_path / "awd"
    shutil.copytree(AWD, clone)
    (clone / "es.py").unlink()
    assert adapters.get("es-awd").recognise(clone) is None
    clones, _ = resolve_clones(Options(ref=str(clone)), adapters.names())
    assert clones["es-awd"].missing == ["es.py"]
