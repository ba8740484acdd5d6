"""End-to-end parity runs against the stand-in clones ("What must hold").

The stand-ins (tests/standins/) were written from docs/references.md alone.
Every row must pass on them (CPU, Python 3.11); CUDA rows are skipped
without a GPU; `caching=True` under iid is an artifact. Also: the report
(columns, summary, metadata, formats, JUnit), `--python` with a second
virtual environment, the commit warning on a git-initialised stand-in,
--keep-tensors, --case and the exit codes.
"""
from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner

from esverify.cli import main
from esverify.oracle import Options, run_parity
from esverify.oracle.adapters import all_adapters

LOOP_OPS = tuple(op for a in all_adapters() for op in a.loop_ops)
from esverify.oracle.rows import COLUMNS
from standins.mutants import STANDINS, make_mutant

AT_SCALE = str(STANDINS / "es-at-scale")
AWD = str(STANDINS / "es-awd")
SKILL = str(STANDINS / "skill-sample")


def _cli(*args):
    result = CliRunner().invoke(main, ["parity", *args])
    return result.exit_code, result.output


@pytest.mark.slow   # 34 s (--durations, 2026-12-03): out of the fast tier
def test_small_matrix_passes_on_both_standins(tmp_path):
    junit = tmp_path / "parity.xml"
    result = run_parity(Options(ref=(AT_SCALE, AWD), dtypes=("f32", "f16"), schemes=("iid", "correlated"),
                                iterations=2, small=True, out=str(tmp_path / "out"), junit=str(junit), quiet=True))
    frame = result.frame
    assert list(frame.columns) == COLUMNS
    # the es-at-scale stand-in also holds the paper's scripts (archive/): those rows run and pass; no
    # skill-sample file nor eggroll clone was given: they get no rows
    assert set(frame.loc[(frame["target"] == "es-paper") & (frame["device"] == "cpu"), "status"]) == {"pass"}
    assert not {"skill-sample", "eggroll"} & set(frame["target"])   # named by no --ref: no row
    everything, frame = frame, frame[frame["target"].isin(["es-at-scale", "es-awd"])]
    cpu = frame[frame["device"] == "cpu"]
    artifacts = cpu[cpu["status"] == "artifact"]
    assert set(artifacts["op"]) == {"caching", "main-caching"} and set(artifacts["scheme"]) == {"iid"}
    assert (cpu.loc[cpu["status"] != "artifact", "status"] == "pass").all(), cpu[cpu["status"] != "pass"]
    assert (frame.loc[frame["device"] == "cuda", "status"] == "skipped").all()
    assert (cpu.loc[cpu["status"] == "pass", "mismatches"] == 0).all()
    assert set(cpu["op"]) >= {"perturb", "restore", "zscore", "update", "loop", "update-none", "update-l1",
                              "update-l2", "decay-l1", "decay-l2", "mirrored", "caching"}
    assert set(cpu["dtype"]) == {"f32", "f16", "mixed", "f64"}
    assert set(cpu.loc[cpu["op"] == "update", "population"]) == {7, 8, 9, 16, 17, 30, 127, 128, 129}
    # contract and native noise both pass every row; native rows are correlated only
    assert set(cpu["noise"]) == {"contract", "native", "-"}
    assert set(cpu.loc[cpu["noise"] == "native", "scheme"]) == {"correlated"}
    assert (cpu.loc[cpu["noise"] == "native", "status"] == "pass").all()
    assert cpu.loc[cpu["status"] == "artifact", "diagnosis"].eq("reuse").all()
    assert set(cpu.loc[cpu["target"] == "es-awd", "rule"]) == {"cpu"}
    assert result.exit_code == 0
    out = tmp_path / "out"
    for name in ("parity.json", "parity.md", "parity.html", "parity-cases.csv", "parity-summary.csv",
                 "parity-metadata.json"):
        assert (out / name).is_file(), name
    doc = json.loads((out / "parity.json").read_text())
    meta = doc["metadata"]
    assert meta["children"]["es-awd"]["torch_threads"] == 1
    assert meta["children"]["es-at-scale"]["cpu_capability"]
    assert meta["clones"]["es-at-scale"]["licence_file"] == "LICENSE.txt"
    assert len(meta["clones"]["es-awd"]["licence_sha256"]) == 64
    assert meta["wall_time_s"] > 0 and meta["parent_python"] and meta["child_python"]
    assert meta["case_seed"] == 20260401 and meta["noise"] == ["contract", "native"]
    assert len(pd.read_csv(out / "parity-cases.csv")) == len(everything)
    summary = pd.read_csv(out / "parity-summary.csv")
    assert {"target", "op", "f32/iid", "mixed/correlated"} <= set(summary.columns)
    # the stand-ins print to stdout: it lands in the child's log, never in the results channel
    assert "perturbed weights with seed" in (out / "child-es-at-scale.log").read_text()
    assert "avg_reward" in (out / "child-es-at-scale.log").read_text()
    suite = ET.parse(junit).getroot()
    # one testcase per row, plus one per thing not checked: es-paper's vLLM script (a reference no --ref names,
    # the skill sample or eggroll, is left out)
    assert int(suite.get("tests")) == len(everything) + 1
    assert suite.get("failures") == "0" and suite.get("errors") == "0"


@pytest.mark.slow
def test_default_matrix_both_targets_cli(tmp_path):
    """The ONE default-matrix run, of all four references: every CPU row passes (or is the caching
    artifact, or one of the skill sample's own defects)."""
    code, output = _cli("--ref", AT_SCALE, "--ref", AWD, "--ref", SKILL, "--out", str(tmp_path / "out"),
                        "--quiet")
    everything = pd.read_csv(tmp_path / "out" / "parity-cases.csv")
    assert code == 0, output
    # the paper's scripts (archive/ of the es-at-scale clone): 3 dtypes x 2 noises x 4 scripts + 4 one-copy rows
    paper = everything[(everything["target"] == "es-paper") & (everything["device"] == "cpu")]
    assert len(paper) == 29 and set(paper["status"]) == {"pass"}   # with the NaN-reward row
    # the skill sample: f32/f16 pass; bf16 and N = 40 are its own defects (docs/references.md §7)
    skill = everything[(everything["target"] == "skill-sample") & (everything["device"] == "cpu")]
    assert len(skill) == 12 and set(skill.loc[skill["status"] == "defect", "dtype"] + "/"
                                    + skill.loc[skill["status"] == "defect", "population"].astype(str)) \
        == {"bf16/5", "f32/40"}
    assert (skill["status"] == "pass").sum() == 8      # with the 1M-element f16 row and the NaN-reward row
    frame = everything[everything["target"].isin(["es-at-scale", "es-awd"])]
    cpu = frame[frame["device"] == "cpu"]
    assert set(cpu["status"]) == {"pass", "artifact"}
    assert cpu["elements"].max() > 1_000_000
    # es-at-scale: 9 zscore + 5 reward populations + 4 sets x 3 (iid, correlated, native) x 6 + 7 sweep x 2
    #   schemes + 5 reward-population updates + the layers set (3 ops x 3) + the loop rows: fit per set x 3;
    # es-awd: 4 sets x 3 x 10 + 7 sweep x 2 schemes + 5 reward-population updates + the layers set (5 ops x 3)
    #   + main-* (7 variants) per set x 3
    # + 8: the non-finite rewards (zscore, update, update-none at nan and inf; fit/nan, main/inf)
    assert len(cpu) == (9 + 5 + 4 * 3 * 6 + 14 + 5 + 9 + 4 * 3 * 1) + (4 * 3 * 10 + 14 + 5 + 15 + 4 * 3 * 7) + 8
    assert set(cpu.loc[cpu["case"].str.endswith("/layers"), "status"]) == {"pass", "artifact"}
    for shape in ("sparse", "outliers", "ties", "equal", "tiny"):
        assert (cpu.loc[cpu["case"].str.contains(f"/N30/{shape}"), "status"] == "pass").sum() == 3, shape
    repeats = json.loads((tmp_path / "out" / "parity-metadata.json").read_text())["children"]
    assert all(len(repeats[t]["repeat"]) == 6 and all(r["identical"] for r in repeats[t]["repeat"])
               for t in ("es-at-scale", "es-awd"))
    loops = cpu[cpu["op"].isin(LOOP_OPS)]
    assert len(loops) == 4 * 3 * 8 + 2 and (loops["noise"] == "native").sum() == 4 * 8   # + fit/nan, main/inf
    meta = json.loads((tmp_path / "out" / "parity-metadata.json").read_text())
    print(f"default matrix wall time: {meta['wall_time_s']} s")
    # parity.md fits a pull-request comment and leads with what to do
    md = (tmp_path / "out" / "parity.md").read_text()
    assert len(md) < 60_000, len(md)
    headings = [line[3:] for line in md.splitlines() if line.startswith("## ")]
    assert headings[:4] == ["needs attention", "not checked here", "summary", "cases"]
    assert "caching" in md[md.index("## needs attention"):md.index("## not checked here")]   # the artifact kinds
    assert "report:" in output and "pass" in output


@pytest.mark.slow   # 2 s (--durations, 2026-12-03): out of the fast tier
def test_case_pattern_and_keep_tensors(tmp_path):
    clone = make_mutant(tmp_path, "restore-sign")
    code, output = _cli("--ref", str(clone), "--target", "es-at-scale", "--devices", "cpu", "--small",
                        "--case", "*/f32/iid/re*", "--noise", "contract", "--keep-tensors",
                        "--out", str(tmp_path / "out"), "--quiet")
    frame = pd.read_csv(tmp_path / "out" / "parity-cases.csv")
    assert list(frame["op"]) == ["restore"] and list(frame["status"]) == ["fail"]
    assert code == 1, output
    kept = list((tmp_path / "out" / "tensors").iterdir())
    assert len(kept) == 1 and {p.name for p in kept[0].iterdir()} == {"ours.npz", "theirs.npz"}


def test_case_pattern_matching_nothing_is_usage_error(tmp_path):
    code, output = _cli("--ref", AT_SCALE, "--target", "es-at-scale", "--case", "no-such-case",
                        "--out", str(tmp_path / "out"))
    assert code == 2 and "matches no case" in output


@pytest.mark.slow   # 6 s (--durations, 2026-12-03): out of the fast tier
def test_eager_consumption_is_unverifiable_only_on_the_iid_rows_of_that_call(tmp_path):
    """The update consumes its parameters eagerly: its iid rows are unverifiable, its correlated and
    native rows are verified (and pass), and the other ops' rows are untouched by it."""
    clone = make_mutant(tmp_path, "eager-update")
    result = run_parity(Options(ref=str(clone), target="es-at-scale", devices=("cpu",), dtypes=("f32",),
                                iterations=1, small=True, out=str(tmp_path / "o"), quiet=True,
                                case="*/update/N7*"))
    rows = result.frame.set_index("case")
    iid = rows[rows["scheme"] == "iid"]
    assert set(iid["status"]) == {"unverifiable"} and iid["diagnosis"].eq("eager").all()
    other = rows[rows["scheme"] != "iid"]
    assert set(other["status"]) == {"pass"} and other["detail"].str.contains("this row is verified").all()
    assert not rows["detail"].str.contains("harmless").any()
    clean = run_parity(Options(ref=str(clone), target="es-at-scale", devices=("cpu",), dtypes=("f32",),
                               iterations=1, small=True, out=str(tmp_path / "p"), quiet=True, case="*/iid/perturb*"))
    assert set(clean.frame["status"]) == {"pass"}


@pytest.mark.slow
def test_fuzz_on_the_unchanged_standins_finds_nothing(tmp_path):
    code, output = _cli("--ref", AT_SCALE, "--awd-ref", AWD, "--ref", SKILL, "--devices", "cpu", "--fuzz", "60",
                        "--case-seed", "5", "--out", str(tmp_path / "out"), "--quiet")
    frame = pd.read_csv(tmp_path / "out" / "parity-cases.csv")
    assert code == 0, output
    assert len(frame) == 60 and set(frame["status"]) <= {"pass", "artifact"}
    assert {"es-at-scale", "es-awd"} <= set(frame["target"])
    assert set(frame.loc[frame["status"] == "artifact", "op"]) <= {"caching"}
    assert "fuzz: 60 cases, 0 bad" in output


@pytest.mark.slow   # 21 s (--durations, 2026-12-03): out of the fast tier
def test_fuzz_shrinks_a_failure_to_one_command_line(tmp_path):
    clone = make_mutant(tmp_path, "skip-bias")
    code, output = _cli("--ref", str(clone), "--target", "es-at-scale", "--devices", "cpu", "--fuzz", "6",
                        "--case-seed", "11", "--out", str(tmp_path / "out"), "--quiet")
    meta = json.loads((tmp_path / "out" / "parity-metadata.json").read_text())
    fuzz = meta["fuzz"]
    assert fuzz["cases"] == 6 and fuzz["cases_per_s"] > 0 and "cases/s" in output
    if not fuzz["failures"]:
        assert code == 0
        return
    assert code == 1 and len(fuzz["shrunk"]) == 1
    shrunk = fuzz["shrunk"][0]
    assert "--case-json" in shrunk["command"] and shrunk["command"] in output.replace("\n  ", "\n")
    minimal = json.loads(shrunk["minimal"])
    if minimal["op"] in ("perturb", "restore", "loop") and minimal["shapes"]:
        names = [n for n, _ in minimal["shapes"]]        # q_proj.bias, or a bias of the `layers` set
        assert len(names) == 1 and names[0].endswith("_proj.bias"), names
    argv = shlex.split(shrunk["command"])[2:]
    again_code, again = _cli(*argv, "--out", str(tmp_path / "again"), "--quiet")
    frame = pd.read_csv(tmp_path / "again" / "parity-cases.csv")
    assert again_code == 1 and list(frame["status"]) == [shrunk["status"]]


@pytest.mark.slow   # 4 s (--durations, 2026-12-03): out of the fast tier
def test_second_virtualenv_as_child_python(tmp_path):
    from venvs import make_venv   # sees this interpreter's torch however it was installed
    venv = tmp_path / "venv"
    python = make_venv(venv)
    code, output = _cli("--ref", AT_SCALE, "--target", "es-at-scale", "--devices", "cpu", "--small",
                        "--python", str(python), "--case", "*/f32/iid/*", "--iterations", "1",
                        "--out", str(tmp_path / "out"), "--quiet")
    assert code == 0, output
    meta = json.loads((tmp_path / "out" / "parity-metadata.json").read_text())
    assert meta["child_executable"].startswith(str(venv))
    assert meta["children"]["es-at-scale"]["executable"].startswith(str(venv))


@pytest.mark.slow   # 3 s (--durations, 2026-12-03): out of the fast tier
def test_git_clone_commit_is_named_and_warned_about(tmp_path):
    clone = tmp_path / "es-awd"
    shutil.copytree(AWD, clone, ignore=shutil.ignore_patterns("__pycache__"))
    env = dict(os.environ, GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@example.org", GIT_COMMITTER_NAME="t",
               GIT_COMMITTER_EMAIL="t@example.org")
    for args in (["init", "-q"], ["add", "."], ["commit", "-q", "-m", "stand-in"]):
        subprocess.run(["git", "-C", str(clone), *args], check=True, env=env)
    commit = subprocess.run(["git", "-C", str(clone), "rev-parse", "HEAD"], capture_output=True, text=True,
                            check=True).stdout.strip()
    (clone / "weight_update_utils.py").write_text((clone / "weight_update_utils.py").read_text() + "\n")
    code, output = _cli("--awd-ref", str(clone), "--target", "es-awd", "--devices", "cpu", "--small",
                        "--case", "*/f32/iid/perturb*", "--out", str(tmp_path / "out"), "--quiet")
    assert code == 0, output
    meta = json.loads((tmp_path / "out" / "parity-metadata.json").read_text())
    info = meta["clones"]["es-awd"]
    assert info["git_commit"] == commit and info["dirty"] is True
    assert any("not the one docs/references.md was validated against (f432ff8)" in w for w in meta["warnings"])
    assert "validated against" in output


@pytest.mark.slow   # 2 s (--durations, 2026-12-03): out of the fast tier
def test_explicit_cuda_without_gpu_is_setup_error(tmp_path):
    code, output = _cli("--ref", AT_SCALE, "--target", "es-at-scale", "--devices", "cpu,cuda", "--small",
                        "--case", "*/f32/iid/perturb*", "--out", str(tmp_path / "out"), "--quiet")
    try:
        import torch
        has_cuda = torch.cuda.is_available()
    except ImportError:  # pragma: no cover
        has_cuda = False
    if has_cuda:  # pragma: no cover - exercised on a GPU machine only
        assert code == 0, output
        return
    # one line, before any row: no report, no 20-200 identical error rows
    assert code == 2, output
    lines = [line for line in output.splitlines() if line.strip()]
    assert len(lines) == 1 and "--devices names cuda but the child sees no CUDA device" in lines[0], output
    assert not (tmp_path / "out" / "parity-cases.csv").exists()


@pytest.mark.cuda
def test_cuda_rows_run_on_a_gpu(tmp_path):
    result = run_parity(Options(ref=(AT_SCALE, AWD), devices=("cuda",), devices_explicit=True,
                                dtypes=("f32", "bf16"), small=True, iterations=1, out=str(tmp_path / "o"),
                                quiet=True))
    at_scale = result.frame[result.frame["target"] == "es-at-scale"]
    assert set(at_scale["status"]) == {"pass"}
    # es-awd's and es-paper's cuda rules, measured on an H200 (docs/numerics.md §3, §5): no row fails; the
    # caching rows under iid are the documented reuse artifact
    assert set(result.frame["status"]) <= {"pass", "artifact"}


@pytest.mark.slow   # 6 s (--durations, 2026-12-03): out of the fast tier
def test_caching_artifact_only_where_the_reference_reused_noise(tmp_path):
    """iid + caching=True: artifact when ours with the same reuse agrees bit for bit (the reused slot
    is the k_proj twin of q_proj); the mixed set reuses nothing (its equal-shape pair has two dtypes),
    so it must pass; a numerics fault in the other slots is a fail, not hidden as an artifact."""
    quick = dict(target="es-awd", devices=("cpu",), dtypes=("f32", "bf16"), schemes=("iid",), small=True,
                 case="*/iid/caching/N[0-9]", quiet=True, noises=("contract",))   # not the /layers rows
    good = run_parity(Options(ref=AWD, out=str(tmp_path / "good"), **quick)).frame.set_index("dtype")
    assert good.loc["f32", "status"] == good.loc["bf16", "status"] == "artifact"
    assert good.loc["f32", "first_mismatch_index"].startswith("model.layers.0.self_attn.k_proj.weight[")
    assert "slot 4 (model.layers.0.self_attn.k_proj.weight) <- slot 2" in good.loc["f32", "detail"]
    assert good.loc["mixed", "status"] == "pass"
    clone = make_mutant(tmp_path, "awd-acc-in-f32")        # the accumulator in f32: bf16 slots all move
    bad = run_parity(Options(ref=str(clone), out=str(tmp_path / "bad"), **quick)).frame.set_index("dtype")
    assert bad.loc["f32", "status"] == "artifact"
    assert bad.loc["bf16", "status"] == "fail" and "not only the reuse" in bad.loc["bf16", "detail"]
