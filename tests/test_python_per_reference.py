"""An interpreter per reference (docs/parity.md, "What each child needs"; esverify.oracle.interpreters).

- `--python NAME=PATH` (repeatable) gives one reference its own child interpreter, a bare PATH every other
  one; the same in $ESVERIFY_PYTHON and [tool.esverify] python (entries separated by commas, or a list);
  a bad entry is one line, exit 2.
- each reference's child needs (EGGROLL: safetensors) are checked before any row: a reference whose
  interpreter lacks one costs only its own rows (skipped, one line naming the reference, the interpreter
  and the module), and the first line of the console and of the report says so, never a bare PASS;
  when no reference can run it is a setup error.
- (slow, needs a Python 3.12 with torch and numpy: $ESVERIFY_TEST_PY312, else ~/.pyenv/versions/3.12*)
  `--python es-at-scale=PY312` runs es-at-scale's 3.12-only rows under 3.12 while es-awd keeps the
  default interpreter; without it those rows are skipped and the first line says how to run them.
"""
from __future__ import annotations

import glob
import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner

from esverify.cli import main
from esverify.oracle import Options, run_parity
from esverify.cliutil import config_paths
from esverify.oracle.interpreters import interpreter_gaps, parse_python
from esverify.oracle.options import SetupError, UsageError
from standins.mutants import STANDINS, make_bad

QUICK = ("--devices", "cpu", "--small", "--dtypes", "f32", "--schemes", "iid", "--iterations", "1", "--quiet")


def test_parse_python_bare_named_and_mixed():
    assert parse_python(None) == (None, {})
    assert parse_python(("/usr/bin/python3",)) == ("/usr/bin/python3", {})
    assert parse_python(("es-at-scale=/v/312/bin/python", "/usr/bin/python3")) == (
        "/usr/bin/python3", {"es-at-scale": "/v/312/bin/python"})
    # the environment's and the config file's form: one string, commas between entries
    assert parse_python("es-at-scale=/a/python, eggroll=/b/python") == (
        None, {"es-at-scale": "/a/python", "eggroll": "/b/python"})
    assert parse_python("python3") == ("python3", {})
    # a shell does not expand the ~ after NAME=
    assert parse_python(("eggroll=~/venv/bin/python",)) == (None, {"eggroll": os.path.expanduser("~/venv/bin/python")})


@pytest.mark.parametrize("value, words", [
    (("/a/python", "/b/python"), "two interpreters for every reference"),
    (("es-awd=/a", "es-awd=/b"), "es-awd is given two interpreters"),
    (("es-awd=",), "no interpreter after '='"),
    ("/a/python,,", "an empty entry"),
])
def test_parse_python_refuses_ambiguous_entries(value, words):
    with pytest.raises(UsageError, match=words):
        parse_python(value)


def test_config_paths_are_relative_to_the_pyproject_file(tmp_path):
    said = config_paths("es-at-scale=../venvs/py312/bin/python,python3", tmp_path)
    assert said == f"es-at-scale={tmp_path}/../venvs/py312/bin/python,python3"


def test_an_unknown_reference_name_is_one_line_exit_2(tmp_path):
    result = CliRunner().invoke(main, ["parity", "--ref", str(STANDINS / "es-awd"), "--python",
                                       f"es_awd={sys.executable}", "--out", str(tmp_path / "out"), *QUICK])
    assert result.exit_code == 2, result.output
    line = result.output.strip()
    assert "\n" not in line and "no reference is named 'es_awd'" in line and "es-awd" in line
    assert not (tmp_path / "out").exists()


def test_config_file_gives_a_reference_its_own_interpreter(tmp_path, monkeypatch):
    """[tool.esverify] python as a TOML list: the named entry's path is relative to the file; a run that
    probes it reports the interpreter per reference."""
    (tmp_path / "pyproject.toml").write_text(
        f'[tool.esverify]\npython = ["es-awd=./nowhere/python", "{sys.executable}"]\n')
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(main, ["parity", "--ref", str(STANDINS / "es-awd"), "--out", str(tmp_path / "o"),
                                       *QUICK])
    assert result.exit_code == 2, result.output
    assert f"--python es-awd={tmp_path}/./nowhere/python: no such interpreter" in result.output


def test_the_environment_variable_takes_the_same_entries(tmp_path, monkeypatch):
    monkeypatch.setenv("ESVERIFY_PYTHON", f"{sys.executable},es-awd={tmp_path}/nowhere/python")
    result = CliRunner().invoke(main, ["parity", "--ref", str(STANDINS / "es-awd"), "--out", str(tmp_path / "o"),
                                       *QUICK])
    assert result.exit_code == 2, result.output
    assert f"--python es-awd={tmp_path}/nowhere/python: no such interpreter" in result.output
    monkeypatch.setenv("ESVERIFY_PYTHON", "es_awd=/x")
    result = CliRunner().invoke(main, ["parity", "--ref", str(STANDINS / "es-awd"), "--out", str(tmp_path / "o"),
                                       *QUICK])
    assert result.exit_code == 2 and "no reference is named 'es_awd'" in result.output


def _needs(monkeypatch, name, needs):
    from esverify.oracle import adapters
    monkeypatch.setattr(adapters.get(name), "child_needs", needs, raising=False)   # the adapter every lookup returns


@pytest.mark.slow   # one es-awd child and its rows
def test_a_reference_whose_interpreter_lacks_a_need_costs_only_its_own_rows(tmp_path, monkeypatch):
    _needs(monkeypatch, "es-at-scale", ("esverify_no_such_module",))
    opts = Options(ref=[str(STANDINS / "es-awd"), str(STANDINS / "es-at-scale")], target="all", devices=("cpu",),
                   dtypes=("f32",), schemes=("iid",), small=True, iterations=1, case="*/perturb/N7",
                   out=str(tmp_path / "report"), quiet=True)
    result = run_parity(opts)
    frame = result.frame
    lacking = frame[frame["target"] == "es-at-scale"]
    assert len(lacking) == 1 and set(lacking["status"]) == {"skipped"}
    detail = lacking["detail"].iloc[0]
    assert f"the child Python {sys.executable}" in detail and "lacks esverify_no_such_module, which es-at-scale " \
        "needs" in detail
    assert set(frame.loc[frame["target"] == "es-awd", "status"]) == {"pass"}
    assert result.exit_code == 0
    first = result.console.splitlines()[0]
    assert first.startswith("esverify parity: PASS") and \
        "es-at-scale: 1 row not run: the interpreter lacks esverify_no_such_module; give --python " \
        "es-at-scale=PATH" in first, first
    header = json.loads((tmp_path / "report" / "parity.json").read_text())
    assert "es-at-scale" in header["reason"] and header["verdict"] == "pass"
    # the report's Markdown says it in its header block, before any section
    md = (tmp_path / "report" / "parity.md").read_text()
    assert md.index("esverify_no_such_module") < md.index("\n## ")


def test_when_no_reference_can_run_it_is_a_setup_error(tmp_path, monkeypatch):
    _needs(monkeypatch, "es-awd", ("esverify_no_such_module",))
    opts = Options(ref=[str(STANDINS / "es-awd")], devices=("cpu",), dtypes=("f32",), schemes=("iid",),
                   small=True, iterations=1, out=str(tmp_path / "report"), quiet=True)
    with pytest.raises(SetupError, match=r"lacks esverify_no_such_module, which es-awd needs; fix: install it "
                                         r"there \(.* -m pip install esverify_no_such_module\)"):
        run_parity(opts)


def test_interpreter_gaps_words_each_reference_once():
    frame = pd.DataFrame([
        {"target": "es-at-scale", "status": "skipped", "detail": "not checked here: x.py needs Python 3.12 or newer"},
        {"target": "es-at-scale", "status": "skipped", "detail": "not checked here: y needs Python 3.12 or newer"},
        {"target": "es-awd", "status": "pass", "detail": ""},
        {"target": "eggroll", "status": "skipped", "detail": "not checked here: the child Python /p (3.12.1) lacks "
                                                              "safetensors, which eggroll needs; fix: ..."}])
    assert interpreter_gaps(frame) == ("es-at-scale: 2 rows not run: they need Python 3.12; give --python "
                                       "es-at-scale=PATH; eggroll: 1 row not run: the interpreter lacks "
                                       "safetensors; give --python eggroll=PATH")
    assert interpreter_gaps(frame[frame["target"] == "es-awd"]) == ""


def _python312(torch: bool = True) -> str | None:
    """A Python 3.12 (with torch and numpy when `torch`): $ESVERIFY_TEST_PY312, else a pyenv 3.12."""
    candidates = [os.environ.get("ESVERIFY_TEST_PY312", "")]
    candidates += sorted(glob.glob(os.path.expanduser("~/.pyenv/versions/3.12*/bin/python")))
    for python in filter(None, candidates):
        try:
            out = subprocess.run([python, "-c", ("import torch, numpy; " if torch else "")
                                  + "import sys; print(sys.version_info[:2] >= (3, 12))"],
                                 capture_output=True, text=True, timeout=120)
        except (OSError, subprocess.TimeoutExpired):
            continue
        if out.returncode == 0 and out.stdout.strip().endswith("True"):
            return python
    return None


@pytest.mark.slow   # two clones' children, one of them a fresh 3.12 interpreter importing torch
def test_es_at_scale_runs_its_312_rows_on_its_own_interpreter(tmp_path):
    py312 = _python312()
    if py312 is None:
        pytest.skip("no Python 3.12 with torch and numpy ($ESVERIFY_TEST_PY312 or ~/.pyenv/versions/3.12*)")
    clone = make_bad(tmp_path / "clones", "shaping-needs-3.12")   # reward_shaping.py in 3.12-only syntax
    common = ["parity", "--ref", str(clone), "--ref", str(STANDINS / "es-awd"), "--case", "*/N7*", *QUICK]
    default = CliRunner().invoke(main, [*common, "--out", str(tmp_path / "default")])
    assert default.exit_code == 0, default.output
    first = default.output.splitlines()[0]
    assert "es-at-scale: 2 rows not run: they need Python 3.12; give --python es-at-scale=PATH" in first, first
    own = CliRunner().invoke(main, [*common, "--python", f"es-at-scale={py312}", "--out", str(tmp_path / "own")])
    assert own.exit_code == 0, own.output
    frame = pd.read_csv(tmp_path / "own" / "parity-cases.csv", keep_default_na=False)
    at_scale = frame[frame["target"] == "es-at-scale"]
    assert set(at_scale.loc[at_scale["op"].isin(["zscore", "fit"]), "status"]) == {"pass"}
    assert "not run" not in own.output.splitlines()[0]
    children = json.loads((tmp_path / "own" / "parity.json").read_text())["metadata"]["children"]
    assert children["es-at-scale"]["python"].startswith("3.12")
    assert children["es-awd"]["python"] == ".".join(map(str, sys.version_info[:3]))


_NEW_SYNTAX = 'def z_score(xs):\n    return [f"{x["v"]}" for x in xs]\n'   # PEP 701: Python 3.12 and newer


def _git_clone_with_change(tmp_path) -> Path:
    root = tmp_path / "clone"
    root.mkdir()
    (root / "shaping.py").write_text(_NEW_SYNTAX)
    git = ["git", "-C", str(root), "-c", "user.name=t", "-c", "user.email=t@example.org"]
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "validated"]):
        subprocess.run(git + args, check=True)
    (root / "shaping.py").write_text(_NEW_SYNTAX.replace('f"{x["v"]}"', 'f"{x["v"]}!"'))
    subprocess.run(git + ["commit", "-qam", "later"], check=True)
    return root


def test_blame_names_no_module_level_for_a_file_the_parent_cannot_parse(tmp_path):
    """A changed line of a file in newer syntax than the parent's: never blamed on "module level"; with the
    reference's own interpreter (blame.functions_in) the function is named."""
    from esverify.oracle.blame import UNPARSED, clone_changes, distance_line
    root = _git_clone_with_change(tmp_path)
    base = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD~1"], capture_output=True, text=True,
                          check=True).stdout.strip()
    changes = clone_changes(root, base[:7], python=None if sys.version_info >= (3, 12) else sys.executable)
    assert changes.ahead == 1 and changes.validated == base[:7]
    if sys.version_info < (3, 12):
        assert [h.function for h in changes.hunks] == [UNPARSED]
    line = distance_line("es-at-scale", changes, {"shaping.py": ["z_score"]})
    assert line.startswith(f"es-at-scale: the clone is 1 commit past the validated {base[:7]}; ")
    py312 = _python312(torch=False)
    if py312 is None:
        pytest.skip("no Python 3.12 to parse the file with")
    changes = clone_changes(root, base[:7], python=py312)
    assert [h.function for h in changes.hunks] == ["z_score"]
    assert distance_line("es-at-scale", changes, {"shaping.py": ["z_score"]}).endswith(
        "functions the rows ran that changed: z_score (shaping.py)")


def test_interface_drift_says_the_interpreter_not_the_clone(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parent.parent / "oracles"))
    import interface_drift
    try:
        compile(_NEW_SYNTAX, "x.py", "exec")
        pytest.skip("this Python reads PEP 701 f-strings")
    except SyntaxError as exc:
        assert interface_drift.newer_python(exc) == "Python 3.12 or newer"
    assert interface_drift.newer_python(SyntaxError("invalid syntax")) is None
    line = interface_drift.describe({"file": "shaping.py", "kind": "needs-python", "name": "shaping.py",
                                     "expected": "Python 3.12 or newer", "found": "Python 3.11.7"})
    assert line == "shaping.py: not checked here: it needs Python 3.12 or newer, the child is Python 3.11.7"
