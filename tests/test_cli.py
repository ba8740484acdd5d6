"""The command group: every subcommand is reachable, and the listing stays cheap."""
import subprocess
import sys

from click.testing import CliRunner

from esverify.cli import SUBCOMMANDS, main


def test_every_subcommand_resolves_and_has_help():
    runner = CliRunner()
    for name in SUBCOMMANDS:
        result = runner.invoke(main, [name, "--help"])
        assert result.exit_code == 0, result.output
        assert f"Usage: main {name}" in result.output or f"Usage: esverify {name}" in result.output


def test_group_help_lists_commands_without_importing_them():
    code = ("import sys; from click.testing import CliRunner; from esverify.cli import main; "
            "r = CliRunner().invoke(main, ['--help']); print(r.output); "
            "print(sorted(m for m in ('torch', 'esverify.goldens.cli', 'esverify.oracle.cli', "
            "'esverify.audit.cli') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    for name in SUBCOMMANDS:
        assert f"  {name} " in out
    assert out.strip().splitlines()[-1] == "[]"


def test_unknown_subcommand_is_a_usage_error():
    result = CliRunner().invoke(main, ["paritee"])
    assert result.exit_code == 2 and "No such command" in result.output


# ---------------------------------------------------------------- a newcomer's first hour
import os  # noqa: E402
import tomllib  # noqa: E402
from pathlib import Path  # noqa: E402

import pytest  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def test_python_dash_m_esverify_runs_the_cli():
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    out = subprocess.run([sys.executable, "-m", "esverify", "--version"], capture_output=True, text=True,
                         env=env, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "esverify, version 0.1.0"


def test_unknown_goldens_backend_is_named_once_with_the_valid_names():
    result = CliRunner().invoke(main, ["goldens", "check", "--backend", "numpyy"])
    assert result.exit_code == 2
    assert result.output.count("unknown backend") == 1, result.output
    assert "'numpyy'" in result.output and "numpy, numba, torch-cpu, torch-cuda" in result.output


def test_project_license_is_an_spdx_string_setuptools_accepts():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert project["project"]["license"] == "Apache-2.0"
    assert "Apache License" in (ROOT / "LICENSE").read_text()[:200] and "Version 2.0" in (ROOT / "LICENSE").read_text()[:200]
    assert "setuptools>=77" in project["build-system"]["requires"]    # PEP 639 expressions need >= 77


def _bad_destinations(tmp_path):
    (tmp_path / "a-file").write_text("x")
    bad = [(tmp_path / "a-file" / "sub", "is a file, not a directory")]
    if Path("/proc/self").exists():
        bad.append((Path("/proc/esverify-x"), "does not accept new files"))
    return bad


def _forbid(monkeypatch, target: str):
    def work_started(*args, **kwargs):
        raise AssertionError("work started before the report destination was checked")
    monkeypatch.setattr(target, work_started)


@pytest.mark.parametrize("command, option, kind, work", [
    (["parity", "--ref", str(ROOT / "tests" / "standins" / "es-at-scale")], "--out", "dir",
     "esverify.oracle.runner.resolve_clones"),
    (["parity", "--ref", str(ROOT / "tests" / "standins" / "es-at-scale")], "--junit", "file",
     "esverify.oracle.runner.resolve_clones"),
    (["audit", "--tree", str(ROOT)], "--out", "dir", "esverify.audit.run.run_audit"),
    (["goldens", "check"], "--junit", "file", "esverify.goldens.gate.check"),
    (["goldens", "check"], "--json", "file", "esverify.goldens.gate.check"),
    (["goldens", "generate"], "--out", "dir", "esverify.goldens.generate.generate"),
])
def test_every_report_destination_is_checked_before_any_work(tmp_path, monkeypatch, command, option, kind, work):
    """Exit 2 and one line naming the option, the path and the reason; nothing computed first."""
    monkeypatch.chdir(tmp_path)
    _forbid(monkeypatch, work)
    for path, reason in _bad_destinations(tmp_path):
        dest = path / "report.xml" if kind == "file" else path
        result = CliRunner().invoke(main, [*command, option, str(dest)])
        assert result.exit_code == 2, result.output
        lines = [line for line in result.output.splitlines() if line.strip()]
        assert len(lines) == 1, result.output
        assert f"{option} {dest}" in lines[0] and reason in lines[0], lines[0]


def _signal_mid_work(signum):
    def work(*args, **kwargs):
        import signal as _signal  # noqa: F401
        import time
        os.kill(os.getpid(), signum)     # a real signal, delivered while the command works
        time.sleep(30)                   # never reached in full: the handler interrupts it
        raise AssertionError("the signal did not interrupt the work")
    return work


@pytest.mark.parametrize("signame, code", [("SIGINT", 130), ("SIGTERM", 143), ("SIGHUP", 129)])
def test_goldens_and_audit_interrupted_by_a_signal_leave_a_marked_report(tmp_path, monkeypatch, signame, code):
    import json
    import signal
    signum = getattr(signal, signame)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("esverify.goldens.gate.check", _signal_mid_work(signum))
    result = CliRunner().invoke(main, ["goldens", "check", "--json", str(tmp_path / "g.json"),
                                       "--junit", str(tmp_path / "g.xml")])
    assert result.exit_code == code, result.output
    doc = json.loads((tmp_path / "g.json").read_text())
    assert doc["verdict"] == "interrupted" and doc["exit_code"] == code and signame in result.output
    assert "interrupted by " + signame in (tmp_path / "g.xml").read_text()

    monkeypatch.setattr("esverify.audit.run.run_audit", _signal_mid_work(signum))
    result = CliRunner().invoke(main, ["audit", "--tree", str(ROOT), "--out", str(tmp_path / "a"),
                                       "--format", "json"])
    assert result.exit_code == code, result.output
    doc = json.loads((tmp_path / "a" / "audit.json").read_text())
    assert doc["verdict"] == "interrupted" and doc["exit_code"] == code
    assert {r["verdict"] for r in doc["sections"]["summary"]} == {"not-run"}
    assert not (tmp_path / "a" / ".esverify-run.lock").exists()

    monkeypatch.setattr("esverify.goldens.generate.generate", _signal_mid_work(signum))
    result = CliRunner().invoke(main, ["goldens", "generate", "--out", str(tmp_path / "gen")])
    assert result.exit_code == code and "interrupted" in result.output
    assert signal.getsignal(signum) is not None      # the previous handler is back


@pytest.mark.parametrize("flag, counted", [([], False), (["--line-coverage"], True)])
def test_line_coverage_is_asked_for_on_the_command_line(monkeypatch, flag, counted):
    """`parity --line-coverage` is Options.line_coverage (the children count lines with coverage.py);
    without it they do not (a trace function slows them); each child's command line says so."""
    from types import SimpleNamespace

    from esverify.oracle import adapters
    from esverify.oracle.options import UsageError
    from esverify.oracle.runner import Runner
    from esverify.oracle.session import Session
    seen = {}

    def run(self):   # the options as parsed, and the driver arguments a session's child gets (none started)
        seen["opts"] = self.opts
        self.work = Path("/nonexistent")
        seen["args"] = Session(self, adapters.get("es-awd"), SimpleNamespace(path=ROOT)).child.driver_args
        raise UsageError("stopped by the test")
    monkeypatch.setattr(Runner, "run", run)
    result = CliRunner().invoke(main, ["parity", "--ref", str(ROOT / "tests" / "standins" / "es-awd"), *flag])
    assert result.exit_code == 2 and "stopped by the test" in result.output, result.output
    assert seen["opts"].line_coverage is counted
    assert seen["args"] == (["--line-coverage"] if counted else [])
