"""Bad input to `esverify parity` (issue 4, "What must hold"): each gets a clear message
and, where anything could run, a partial report with the rest of the rows.

Covered: clone path missing, not a clone of the target, a file missing, a
SyntaxError in a reference module (Python 3.12 f-string syntax under the
3.11 child: the file, the Python it needs and --python are named), an
import of an absent package, a reference that hangs past --timeout, one
that kills its own process, noise drawn without a generator or with an
unknown seed (the seed-plus-slot mutant) or through Tensor.normal_, a
child interpreter without torch, an interpreter that does not exist or is
not a Python, an --out that is a file, non-finite --sigma/--alpha, a case
the runner itself cannot finish, and no clone at all.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner

from esverify.cli import main
from standins.mutants import STANDINS, make_bad

AT_SCALE = str(STANDINS / "es-at-scale")
AWD = str(STANDINS / "es-awd")
PY312 = Path.home() / ".pyenv" / "versions" / "3.12.1" / "bin" / "python"
QUICK = ("--devices", "cpu", "--small", "--dtypes", "f32", "--schemes", "iid", "--iterations", "1", "--quiet")


def _cli(tmp_path, *args):
    result = CliRunner().invoke(main, ["parity", *args, "--out", str(tmp_path / "out")])
    frame = None
    if (tmp_path / "out" / "parity-cases.csv").is_file():
        frame = pd.read_csv(tmp_path / "out" / "parity-cases.csv", keep_default_na=False)
    return result.exit_code, result.output, frame


def _status(frame, op):
    return set(frame.loc[frame["op"] == op, "status"])


def test_missing_path_is_setup_error_with_partial_report(tmp_path):
    code, output, frame = _cli(tmp_path, "--ref", str(tmp_path / "nowhere"), "--awd-ref", AWD, *QUICK)
    assert code == 2
    assert "does not exist" in output
    at_scale = frame[frame["target"] == "es-at-scale"]
    assert set(at_scale["status"]) == {"error"} and at_scale["detail"].str.contains("does not exist").all()
    assert set(frame.loc[frame["target"] == "es-awd", "status"]) == {"pass", "artifact"}


def test_not_a_clone(tmp_path):
    (tmp_path / "empty").mkdir()
    code, output, frame = _cli(tmp_path, "--ref", str(tmp_path / "empty"), "--target", "es-at-scale", *QUICK)
    assert code == 2
    assert "is not a clone of es-at-scale" in output
    assert set(frame["status"]) == {"error"}


def test_no_clone_found_is_usage_error(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("ESVERIFY_REF", raising=False)
    monkeypatch.delenv("ESVERIFY_AWD_REF", raising=False)
    code, output, frame = _cli(tmp_path, *QUICK)
    assert code == 2 and "no reference clone found" in output and frame is None


def test_file_missing_fails_only_its_ops(tmp_path):
    clone = tmp_path / "clone"
    shutil.copytree(AT_SCALE, clone)
    (clone / "es_at_scale/utils/reward_shaping.py").unlink()
    code, output, frame = _cli(tmp_path, "--ref", str(clone), "--target", "es-at-scale", *QUICK)
    assert code == 1
    assert _status(frame, "zscore") == {"error"}
    assert "file missing in the clone: es_at_scale/utils/reward_shaping.py" in frame.loc[
        frame["op"] == "zscore", "detail"].iloc[0]
    # the training loop imports z_score too (REFERENCES.md §5): its fit row fails with the same cause
    assert _status(frame, "fit") == {"error"}
    assert "es_at_scale.utils.reward_shaping" in frame.loc[frame["op"] == "fit", "detail"].iloc[0]
    assert set(frame.loc[~frame["op"].isin(["zscore", "fit"]), "status"]) == {"pass"}
    assert "file missing" in output


def test_syntax_error_names_file_python_and_hint(tmp_path):
    clone = make_bad(tmp_path, "shaping-needs-3.12")
    code, output, frame = _cli(tmp_path, "--ref", str(clone), "--target", "es-at-scale", *QUICK)
    assert code == 1
    detail = frame.loc[frame["op"] == "zscore", "detail"].iloc[0]
    for words in ("SyntaxError in es_at_scale/utils/reward_shaping.py", "Python 3.11", "Python 3.12 or newer",
                  "--python"):
        assert words in detail, detail
    assert _status(frame, "zscore") == {"error"}
    fit = frame.loc[frame["op"] == "fit", "detail"].iloc[0]     # the loop imports z_score too
    assert "SyntaxError in es_at_scale/utils/reward_shaping.py" in fit and "Python 3.12 or newer" in fit, fit
    assert set(frame.loc[~frame["op"].isin(["zscore", "fit"]), "status"]) == {"pass"}


def test_absent_package(tmp_path):
    clone = make_bad(tmp_path, "absent-package")
    code, output, frame = _cli(tmp_path, "--ref", str(clone), "--target", "es-at-scale", *QUICK)
    assert code == 1
    assert _status(frame, "zscore") == {"pass"}
    others = frame[frame["op"] != "zscore"]
    assert set(others["status"]) == {"error"}
    assert others["detail"].str.contains("imports 'vllm_not_installed_here', which is not installed").all()
    assert others["detail"].str.contains("--python").all()


def test_hang_past_timeout_is_killed_and_run_goes_on(tmp_path):
    clone = make_bad(tmp_path, "hang")
    code, output, frame = _cli(tmp_path, "--ref", str(clone), "--target", "es-at-scale", "--timeout", "3",
                               "--case", "*/f32/iid/[pu]*", *QUICK)
    assert code == 1
    assert _status(frame, "perturb") == {"error"}
    assert frame.loc[frame["op"] == "perturb", "detail"].iloc[0].startswith("timeout:")
    assert _status(frame, "update") == {"pass"}
    meta = json.loads((tmp_path / "out" / "parity-metadata.json").read_text())
    assert meta["children"]["es-at-scale"]["restarts"] == 1


def test_reference_that_kills_its_process(tmp_path):
    clone = make_bad(tmp_path, "self-kill")
    code, output, frame = _cli(tmp_path, "--ref", str(clone), "--target", "es-at-scale",
                               "--case", "*/f32/iid/*", *QUICK)
    assert code == 1
    for op in ("restore", "loop"):
        assert _status(frame, op) == {"error"}
        assert "died" in frame.loc[frame["op"] == op, "detail"].iloc[0]
        assert "SIGKILL" in frame.loc[frame["op"] == op, "detail"].iloc[0]
    assert _status(frame, "perturb") == {"pass"} and _status(frame, "update") == {"pass"}


def test_noise_without_generator_is_refused(tmp_path):
    clone = make_bad(tmp_path, "no-generator")
    code, output, frame = _cli(tmp_path, "--ref", str(clone), "--target", "es-at-scale", *QUICK)
    assert code == 1
    noisy = frame[frame["op"] != "zscore"]
    assert set(noisy["status"]) == {"error"}
    assert noisy["detail"].str.contains("without a generator").all()
    assert _status(frame, "zscore") == {"pass"}


@pytest.mark.skipif(not PY312.is_file(), reason="no Python 3.12 at ~/.pyenv/versions/3.12.1")
def test_child_python_without_torch_is_setup_error(tmp_path):
    code, output, frame = _cli(tmp_path, "--ref", AT_SCALE, "--target", "es-at-scale", "--python", str(PY312),
                               *QUICK)
    assert code == 2
    assert "lacks torch" in output or set(frame["detail"].str.contains("lacks torch")) == {True}
    assert set(frame["status"]) == {"error"}


def test_child_python_that_does_not_exist(tmp_path):
    code, output, frame = _cli(tmp_path, "--ref", AT_SCALE, "--python", str(tmp_path / "nopython"), *QUICK)
    assert code == 2 and "no such interpreter" in output


def test_noise_with_an_unknown_seed_is_refused(tmp_path):
    from standins.mutants import make_mutant
    clone = make_mutant(tmp_path, "seed-plus-slot")     # perturb seeds tensor k with seed + k
    code, output, frame = _cli(tmp_path, "--ref", str(clone), "--target", "es-at-scale",
                               "--case", "*/f32/iid/[pu]*", *QUICK)
    assert code == 1
    detail = frame.loc[frame["op"] == "perturb", "detail"].iloc[0]
    assert _status(frame, "perturb") == {"error"} and "unknown seed 2001" in detail
    assert _status(frame, "update") == {"pass"}


def test_unwritable_out_or_non_python_interpreter_is_a_usage_error(tmp_path):
    (tmp_path / "out").write_text("a file, not a folder")
    result = CliRunner().invoke(main, ["parity", "--ref", AT_SCALE, *QUICK, "--out", str(tmp_path / "out")])
    assert result.exit_code == 2 and "exists and is not a directory" in result.output
    code, output, frame = _cli(tmp_path / "x", "--ref", AT_SCALE, "--python", "/bin/true", *QUICK)
    assert code == 2 and "does not behave like a Python 3 interpreter" in output and frame is None
    for option, value in (("--sigma", "inf"), ("--alpha", "nan"), ("--alpha", "inf")):
        code, output, frame = _cli(tmp_path / option, "--ref", AT_SCALE, option, value, *QUICK)
        assert code == 2 and f"{option} must be finite" in output and frame is None


def test_a_case_the_runner_cannot_finish_is_an_error_row_not_the_end_of_the_run(tmp_path, monkeypatch):
    from esverify.oracle import runner

    real = runner._compare.compare

    def broken_for_restore(ours, theirs, dtypes, names=None):
        broken_for_restore.calls += 1
        if broken_for_restore.calls == 2:         # the second case in order: restore
            raise RuntimeError("injected")
        return real(ours, theirs, dtypes, names)
    broken_for_restore.calls = 0
    monkeypatch.setattr(runner._compare, "compare", broken_for_restore)
    code, output, frame = _cli(tmp_path, "--ref", AT_SCALE, "--target", "es-at-scale", "--case", "*/f32/iid/*",
                               *QUICK)
    assert code == 1
    assert _status(frame, "restore") == {"error"}
    assert "the runner failed on this case: RuntimeError: injected" in frame.loc[frame["op"] == "restore",
                                                                                 "detail"].iloc[0]
    assert set(frame.loc[frame["op"] != "restore", "status"]) == {"pass"}


def test_noise_through_another_torch_gaussian_is_refused(tmp_path):
    clone = make_bad(tmp_path, "normal-in-place")       # Tensor.normal_(generator=...) instead of torch.randn
    code, output, frame = _cli(tmp_path, "--ref", str(clone), "--target", "es-at-scale", *QUICK)
    assert code == 1
    noisy = frame[frame["op"] != "zscore"]
    assert set(noisy["status"]) == {"error"}
    assert noisy["detail"].str.contains("Tensor.normal_ was called").all()
    assert _status(frame, "zscore") == {"pass"}
