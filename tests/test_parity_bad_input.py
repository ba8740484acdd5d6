"""Bad input to `esverify parity` ("What must hold"): a setup fault is one
line first (what, why, the fix), exit 2, before any row; a fault of one op is a row, and the others run.

Covered: clone path missing, not a clone of the target, `--target` without
its clone, a file missing, a reference file that needs Python 3.12 under
the 3.11 child (skipped, not checked here: the file, the Python it needs
and --python are named; --require-all makes it exit 1), an import of an
absent package, a reference that hangs past --timeout, one that kills its
own process, noise drawn without a generator or with an unknown seed (the
seed-plus-slot mutant) or through Tensor.normal_(0, 2) (not standard normals), a child interpreter
without torch, an interpreter that does not exist, is a folder, is not
executable or is not a Python, an --out that is a file or holds an earlier
report, non-finite --sigma/--alpha, a case the runner itself cannot
finish, and no clone at all.
"""
from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner

from esverify.cli import main
from standins.mutants import STANDINS, make_bad

AT_SCALE = str(STANDINS / "es-at-scale")
AWD = str(STANDINS / "es-awd")
QUICK = ("--devices", "cpu", "--small", "--dtypes", "f32", "--schemes", "iid", "--iterations", "1", "--quiet")
#: one row of every es-at-scale op, on both parameter sets (the standard one and `layers`): 9 of QUICK's 36 rows.
#: Each test below checks one property per op, which the update's other populations (the N sweep, the paper's
#: N30, the reward populations) would only repeat; every child start and row costs seconds
EVERY_OP = ("--case", "*/N7*")
OPS = {"zscore", "perturb", "restore", "update", "loop", "fit"}


@pytest.fixture
def fresh_children():
    """A test whose claim is about the child's process (a hang killed, a death, and the restart after each)
    starts its children as a user's single-reference run does: fresh interpreters, not forks of the test
    session's kept server (tests/conftest.py `_warm_children`). A fault of the reference's code (a missing
    file, an absent package, noise drawn wrongly) is the same fault in a forked child (tests/test_warm_start.py:
    a forked child is the child a fresh interpreter is), which saves the interpreter's start (2-3 s of CPU)."""
    from esverify.oracle.warm_kept import not_kept
    with not_kept():
        yield


def _cli(tmp_path, *args):
    result = CliRunner().invoke(main, ["parity", *args, "--out", str(tmp_path / "out")])
    frame = None
    if (tmp_path / "out" / "parity-cases.csv").is_file():
        frame = pd.read_csv(tmp_path / "out" / "parity-cases.csv", keep_default_na=False)
    return result.exit_code, result.output, frame


def _status(frame, op):
    return set(frame.loc[frame["op"] == op, "status"])


def _one_line_error(output: str) -> str:
    """A setup fault is ONE line, first, before any row."""
    lines = [line for line in output.splitlines() if line.strip()]
    assert lines and lines[0].startswith("esverify parity: error: "), output
    assert len(lines) == 1, output
    return lines[0]


def test_missing_path_is_one_setup_line_before_any_row(tmp_path):
    code, output, frame = _cli(tmp_path, "--ref", str(tmp_path / "nowhere"), "--awd-ref", AWD, *QUICK)
    assert code == 2 and frame is None
    line = _one_line_error(output)
    assert "--ref" in line and "does not exist" in line and "fix:" in line
    assert not (tmp_path / "out").exists()     # the folder it made for the report is gone again


def test_not_a_clone(tmp_path):
    (tmp_path / "empty").mkdir()
    code, output, frame = _cli(tmp_path, "--ref", str(tmp_path / "empty"), "--target", "es-at-scale", *QUICK)
    assert code == 2 and frame is None
    assert "is not a clone of es-at-scale" in _one_line_error(output)


def test_target_without_its_clone_says_which_option_to_pass(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("ESVERIFY_AWD_REF", raising=False)
    code, output, frame = _cli(tmp_path, "--ref", AT_SCALE, "--target", "es-awd", *QUICK)
    assert code == 2 and frame is None
    assert "pass --ref PATH" in _one_line_error(output)


def test_no_clone_found_is_usage_error(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("ESVERIFY_REF", raising=False)
    monkeypatch.delenv("ESVERIFY_AWD_REF", raising=False)
    code, output, frame = _cli(tmp_path, *QUICK)
    assert code == 2 and "no reference clone found" in output and frame is None


@pytest.mark.slow   # --durations: 90-146 s at load 18 (children killed and restarted)
def test_file_missing_fails_only_its_ops(tmp_path):
    clone = tmp_path / "clone"
    shutil.copytree(AT_SCALE, clone)
    (clone / "es_at_scale/utils/reward_shaping.py").unlink()
    code, output, frame = _cli(tmp_path, "--ref", str(clone), "--target", "es-at-scale", *EVERY_OP, *QUICK)
    assert code == 1 and set(frame["op"]) == OPS
    assert _status(frame, "zscore") == {"error"}
    assert "file missing in the clone: es_at_scale/utils/reward_shaping.py" in frame.loc[
        frame["op"] == "zscore", "detail"].iloc[0]
    # the training loop imports z_score too (docs/references.md §5): its fit row fails with the same cause
    assert _status(frame, "fit") == {"error"}
    assert "es_at_scale.utils.reward_shaping" in frame.loc[frame["op"] == "fit", "detail"].iloc[0]
    assert set(frame.loc[~frame["op"].isin(["zscore", "fit"]), "status"]) == {"pass"}
    assert "file missing" in output


@pytest.mark.slow   # --durations: 90-146 s at load 18 (children killed and restarted)
def test_file_needing_a_newer_python_is_not_checked_here_not_passed(tmp_path):
    clone = make_bad(tmp_path, "shaping-needs-3.12")
    code, output, frame = _cli(tmp_path, "--ref", str(clone), "--target", "es-at-scale", *EVERY_OP, *QUICK)
    assert code == 0, output                  # nothing failed; the zscore row is listed as not checked
    assert set(frame["op"]) == OPS
    detail = frame.loc[frame["op"] == "zscore", "detail"].iloc[0]
    for words in ("es_at_scale/utils/reward_shaping.py", "Python 3.12 or newer", "Python 3.11", "--python"):
        assert words in detail, detail
    assert _status(frame, "zscore") == {"skipped"}
    assert _status(frame, "fit") == {"skipped"}                # the loop imports z_score too
    assert set(frame.loc[~frame["op"].isin(["zscore", "fit"]), "status"]) == {"pass"}
    tail = output[output.index("not checked here"):]
    assert "reward_shaping.py needs Python 3.12 or newer" in " ".join(tail.split())
    # every console line is whole: the detail is wrapped, never cut
    assert "pass --python with a Python 3.12+ interpreter that has torch and numpy" in " ".join(tail.split())
    code, output, _ = _cli(tmp_path / "all", "--ref", str(clone), "--target", "es-at-scale", "--require-all",
                           *EVERY_OP, *QUICK)
    assert code == 1 and "--require-all" in output


@pytest.mark.slow   # 2 s (--durations, 2026-12-03): out of the fast tier
def test_absent_package(tmp_path):
    clone = make_bad(tmp_path, "absent-package")
    """A top-level import of a package the child lacks is an inert placeholder (docs/parity.md, "What a later
    commit does to a verdict"): the rows that never use it run and pass, and the placeholder is a warning
    naming the module, the file and the interpreter."""
    code, output, frame = _cli(tmp_path, "--ref", str(clone), "--target", "es-at-scale", *EVERY_OP, *QUICK)
    assert code == 0 and set(frame["op"]) == OPS
    assert set(frame["status"]) == {"pass"}
    assert "placeholder for module vllm_not_installed_here" in " ".join(output.split())   # the console, wrapped
    warnings = json.loads((tmp_path / "out" / "parity-metadata.json").read_text())["warnings"]
    [placeholder] = [w for w in warnings if "vllm_not_installed_here" in w]
    assert re.fullmatch(re.escape("es-at-scale: placeholder for module vllm_not_installed_here, imported at the top "
                                  "of es_at_scale/utils/worker_extension.py (the child's Python 3.")
                        + r"\d+ \(\S+\) " + re.escape("has no module vllm_not_installed_here): inert until used; a "
                                                       "row that uses it is an error naming it"), placeholder), placeholder


@pytest.mark.slow   # --durations: 90-146 s at load 18 (children killed and restarted)
@pytest.mark.usefixtures("fresh_children")
def test_hang_past_timeout_is_killed_and_run_goes_on(tmp_path):
    clone = make_bad(tmp_path, "hang")
    code, output, frame = _cli(tmp_path, "--ref", str(clone), "--target", "es-at-scale", "--timeout", "3",
                               "--case", "*/f32/iid/[pu]*/N7*", *QUICK)
    assert code == 1
    assert _status(frame, "perturb") == {"error"}
    assert frame.loc[frame["op"] == "perturb", "detail"].iloc[0].startswith("timeout:")
    assert _status(frame, "update") == {"pass"}
    meta = json.loads((tmp_path / "out" / "parity-metadata.json").read_text())
    # one restart per hanging row: the standard set's perturb and the `layers` set's
    assert meta["children"]["es-at-scale"]["restarts"] == (frame["op"] == "perturb").sum() == 2


@pytest.mark.slow   # --durations: 90-146 s at load 18 (children killed and restarted)
@pytest.mark.usefixtures("fresh_children")
def test_reference_that_kills_its_process(tmp_path):
    clone = make_bad(tmp_path, "self-kill")
    code, output, frame = _cli(tmp_path, "--ref", str(clone), "--target", "es-at-scale",
                               "--case", "*/f32/iid/[lpru]*/N7", *QUICK)   # each killed row costs a restart
    assert code == 1 and set(frame["op"]) == OPS - {"zscore", "fit"}
    for op in ("restore", "loop"):
        assert _status(frame, op) == {"error"}
        assert "died" in frame.loc[frame["op"] == op, "detail"].iloc[0]
        assert "SIGKILL" in frame.loc[frame["op"] == op, "detail"].iloc[0]
    assert _status(frame, "perturb") == {"pass"} and _status(frame, "update") == {"pass"}


@pytest.mark.slow   # --durations: 14-21 s at load 4-6 (a parity run; the fast tier keeps two)
def test_noise_without_generator_is_refused(tmp_path):
    clone = make_bad(tmp_path, "no-generator")
    code, output, frame = _cli(tmp_path, "--ref", str(clone), "--target", "es-at-scale", *EVERY_OP, *QUICK)
    assert code == 1 and set(frame["op"]) == OPS
    noisy = frame[frame["op"] != "zscore"]
    assert set(noisy["status"]) == {"error"}
    assert noisy["detail"].str.contains("without a generator").all()
    assert _status(frame, "zscore") == {"pass"}


def _bare_python(tmp_path) -> Path:
    """An interpreter without torch or numpy, however this Python was installed."""
    import subprocess
    import sys
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(tmp_path / "bare")], check=True)
    return tmp_path / "bare" / "bin" / "python"


def test_child_python_without_torch_is_one_setup_line(tmp_path):
    bare = _bare_python(tmp_path)
    code, output, frame = _cli(tmp_path, "--ref", AT_SCALE, "--target", "es-at-scale", "--python", str(bare),
                               *QUICK)
    assert code == 2 and frame is None
    line = _one_line_error(output)
    assert "lacks torch and numpy" in line and "-m pip install torch==2.13.0 numpy" in line
    assert "pass --python" not in line        # --python was given: suggesting it again would not help


def test_python_option_pointing_at_a_folder_or_a_non_python(tmp_path):
    bare = _bare_python(tmp_path)
    code, output, frame = _cli(tmp_path, "--ref", AT_SCALE, "--python", str(tmp_path / "bare"), *QUICK)
    assert code == 2 and "is a folder, not an interpreter" in _one_line_error(output)
    assert f"--python {bare}" in output
    script = tmp_path / "not-python.sh"
    script.write_text("#!/bin/sh\necho hello\n")
    script.chmod(0o755)
    code, output, frame = _cli(tmp_path, "--ref", AT_SCALE, "--python", str(script), *QUICK)
    assert code == 2 and "is not a Python 3 interpreter" in _one_line_error(output)
    script.chmod(0o644)
    code, output, frame = _cli(tmp_path, "--ref", AT_SCALE, "--python", str(script), *QUICK)
    assert code == 2 and "is not executable" in _one_line_error(output)


def test_child_python_that_does_not_exist(tmp_path):
    code, output, frame = _cli(tmp_path, "--ref", AT_SCALE, "--python", str(tmp_path / "nopython"), *QUICK)
    assert code == 2 and "no such interpreter" in output


@pytest.mark.slow   # 3 s (--durations, 2026-12-03): out of the fast tier
def test_noise_with_an_unknown_seed_is_refused(tmp_path):
    from standins.mutants import make_mutant
    clone = make_mutant(tmp_path, "seed-plus-slot")     # perturb seeds tensor k with seed + k
    code, output, frame = _cli(tmp_path, "--ref", str(clone), "--target", "es-at-scale",
                               "--case", "*/f32/iid/[pu]*/N7*", *QUICK)
    assert code == 1
    detail = frame.loc[frame["op"] == "perturb", "detail"].iloc[0]
    found = re.search(r"unknown seed (\d+): not a member handle of this case \(handles: \[(\d+)\]\)", detail)
    assert _status(frame, "perturb") == {"error"} and found, detail
    assert int(found.group(1)) == int(found.group(2)) + 1         # slot 1 drew with handle + 1
    assert _status(frame, "update") == {"pass"}


def test_unwritable_out_or_non_python_interpreter_is_a_usage_error(tmp_path):
    (tmp_path / "out").write_text("a file, not a folder")
    result = CliRunner().invoke(main, ["parity", "--ref", AT_SCALE, *QUICK, "--out", str(tmp_path / "out")])
    # --out is a click directory path, checked by click as audit's and goldens' are
    assert result.exit_code == 2 and "Invalid value for '--out'" in result.output and "is a file" in result.output
    code, output, frame = _cli(tmp_path / "x", "--ref", AT_SCALE, "--python", "/bin/true", *QUICK)
    assert code == 2 and "is not a Python 3 interpreter" in output and frame is None
    for option, value in (("--sigma", "inf"), ("--alpha", "nan"), ("--alpha", "inf")):
        code, output, frame = _cli(tmp_path / option, "--ref", AT_SCALE, option, value, *QUICK)
        assert code == 2 and f"{option} must be finite" in output and frame is None


@pytest.mark.slow   # --durations: 14-21 s at load 4-6 (a parity run; the fast tier keeps two)
def test_a_case_the_runner_cannot_finish_is_an_error_row_not_the_end_of_the_run(tmp_path, monkeypatch):
    from esverify.oracle import compare

    real = compare.compare

    def broken_for_restore(ours, theirs, dtypes, names=None):
        broken_for_restore.calls += 1
        if broken_for_restore.calls == 2:         # the second case in order: restore
            raise RuntimeError("injected")
        return real(ours, theirs, dtypes, names)
    broken_for_restore.calls = 0
    monkeypatch.setattr(compare, "compare", broken_for_restore)
    code, output, frame = _cli(tmp_path, "--ref", AT_SCALE, "--target", "es-at-scale", "--case", "*/f32/iid/*/N7*",
                               *QUICK)
    assert code == 1 and set(frame["op"]) == OPS - {"zscore"}
    failed = frame[frame["status"] != "pass"]
    assert list(failed["status"]) == ["error"] and failed["op"].iloc[0] == "restore"
    assert not failed["case"].iloc[0].endswith("/layers")      # the first restore in order
    assert "the runner failed on this case: RuntimeError: injected" in failed["detail"].iloc[0]


@pytest.mark.slow   # --durations: 14-21 s at load 4-6 (a parity run; the fast tier keeps two)
def test_noise_through_another_torch_gaussian_is_refused(tmp_path):
    # Tensor.normal_(0, 2, generator=...): not the standard normals torch.randn draws (normal_(generator=...)
    # is, and passes: the equivalent "normal-in-place" of the mutation catalog)
    clone = make_bad(tmp_path, "normal-other-std")
    code, output, frame = _cli(tmp_path, "--ref", str(clone), "--target", "es-at-scale", *EVERY_OP, *QUICK)
    assert code == 1 and set(frame["op"]) == OPS
    noisy = frame[frame["op"] != "zscore"]
    assert set(noisy["status"]) == {"error"}
    assert noisy["detail"].str.contains("Tensor.normal_ with mean 0 and std 2").all()
    assert _status(frame, "zscore") == {"pass"}


@pytest.mark.slow   # --durations: 14-21 s at load 4-6 (a parity run; the fast tier keeps two)
def test_a_reused_out_is_refused_unless_overwrite(tmp_path):
    args = ("--ref", AT_SCALE, "--target", "es-at-scale", "--case", "*/f32/iid/perturb*", *QUICK)
    code, output, first = _cli(tmp_path, *args)
    assert code == 0, output
    (tmp_path / "out" / "parity-stale-from-an-older-version.csv").write_text("x\n")
    code, output, frame = _cli(tmp_path, *args)
    assert code == 2 and "holds an earlier report" in output and "--overwrite" in output
    code, output, frame = _cli(tmp_path, *args, "--overwrite")
    assert code == 0, output
    assert not (tmp_path / "out" / "parity-stale-from-an-older-version.csv").exists()
    assert len(frame) == len(first)


def test_a_bad_clone_path_from_the_environment_names_the_variable(tmp_path, monkeypatch):
    monkeypatch.setenv("ESVERIFY_AWD_REF", str(tmp_path / "gone"))
    # with --ref, a clone named elsewhere runs (and is checked) only when --discover asks for it
    code, output, frame = _cli(tmp_path, "--ref", AT_SCALE, "--discover", *QUICK)
    assert code == 2 and frame is None
    assert f"$ESVERIFY_AWD_REF {tmp_path / 'gone'}" in _one_line_error(output)
