"""Configuration: [tool.esverify] in pyproject.toml and ESVERIFY_* variables for
the clone paths, the child Python, the formats and the report folder, with the precedence pytest and
ruff use (command line > environment > config file > default); the report says where each setting
came from."""
from __future__ import annotations

import json

import click
import pytest
from click.testing import CliRunner

from esverify import cliutil
from esverify.cli import main
from standins.mutants import STANDINS

AT_SCALE = str(STANDINS / "es-at-scale")
QUICK = ["--target", "es-at-scale", "--case", "es-at-scale/cpu/f32/iid/perturb/N7", "--small", "--quiet"]


@click.command()
@click.option("--ref", default=None)
@click.option("--format", "formats", default="csv,json,md,html")
@click.option("--python", default=None)
@click.pass_context
def _probe(ctx, ref, formats, python):
    settings = cliutil.resolve(ctx, ["ref", "formats", "python", "reports"])
    click.echo(json.dumps(settings.metadata(), sort_keys=True))


def _resolved(tmp_path, args, env):
    result = CliRunner().invoke(_probe, args, env=env)
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def test_command_line_beats_environment_beats_config_beats_default(tmp_path, monkeypatch):
    (tmp_path / "sub").mkdir()
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "x"\n\n[tool.esverify]\nref = "refs/at"\n'
                                             'format = ["json", "md"]\npython = "python3"\n')
    monkeypatch.chdir(tmp_path / "sub")               # found from a sub-folder, as pytest's and ruff's are
    clean = {"ESVERIFY_REF": None, "ESVERIFY_FORMAT": None, "ESVERIFY_PYTHON": None, "ESVERIFY_REPORTS": None}
    config = f"{tmp_path / 'pyproject.toml'} [tool.esverify]"
    got = _resolved(tmp_path, [], clean)
    assert got == {"ref": {"value": str(tmp_path / "refs/at"), "source": f"{config} ref"},   # relative to the file
                   "formats": {"value": "json,md", "source": f"{config} format"},
                   "python": {"value": "python3", "source": f"{config} python"},              # a name stays a name
                   "reports": {"value": None, "source": "default"}}
    got = _resolved(tmp_path, [], {**clean, "ESVERIFY_REF": "/env/ref", "ESVERIFY_FORMAT": "html"})
    assert got["ref"] == {"value": "/env/ref", "source": "environment $ESVERIFY_REF"}
    assert got["formats"] == {"value": "html", "source": "environment $ESVERIFY_FORMAT"}
    got = _resolved(tmp_path, ["--ref", "/cli/ref", "--format", "csv"], {**clean, "ESVERIFY_REF": "/env/ref"})
    assert got["ref"] == {"value": "/cli/ref", "source": "command line"}
    assert got["formats"] == {"value": "csv", "source": "command line"}
    # the option's own default is not "the command line": the config file still wins over it
    assert _resolved(tmp_path, [], clean)["formats"]["source"] == f"{config} format"


def test_no_config_file_means_defaults(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert cliutil.find_config(tmp_path) is None or "esverify" not in str(cliutil.find_config(tmp_path))
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "x"\n')     # no [tool.esverify]: not ours
    assert cliutil.find_config(tmp_path) is None or cliutil.find_config(tmp_path) != tmp_path / "pyproject.toml"


@pytest.mark.parametrize("table, said", [('refx = "a"', "unknown key 'refx'; did you mean 'ref'?"),
                                         ("ref = 3", "ref must be a string")])
def test_a_bad_config_is_one_usage_line(tmp_path, monkeypatch, table, said):
    (tmp_path / "pyproject.toml").write_text(f"[tool.esverify]\n{table}\n")
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(main, ["parity", *QUICK])
    assert result.exit_code == 2 and said in result.output, result.output
    assert not (tmp_path / "reports").exists()


@pytest.mark.slow   # 3 s (--durations, 2026-12-03): out of the fast tier
def test_parity_reads_the_config_and_says_where_each_setting_came_from(tmp_path, monkeypatch):
    (tmp_path / "pyproject.toml").write_text(f'[tool.esverify]\nref = "{AT_SCALE}"\nreports = "out"\n'
                                             'format = "json"\n')
    monkeypatch.chdir(tmp_path)
    for name in ("ESVERIFY_REF", "ESVERIFY_FORMAT", "ESVERIFY_REPORTS", "ESVERIFY_PYTHON"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("ESVERIFY_FORMAT", "json,md")            # the environment beats the file
    result = CliRunner().invoke(main, ["parity", *QUICK])
    assert result.exit_code == 0, result.output
    folders = list((tmp_path / "out").iterdir())                 # the report folder from the file
    assert len(folders) == 1 and sorted(p.name for p in folders[0].glob("parity.*")) == ["parity.json", "parity.md"]
    settings = json.loads((folders[0] / "parity.json").read_text())["metadata"]["settings"]
    config = f"{tmp_path / 'pyproject.toml'} [tool.esverify]"
    assert settings["ref"] == {"value": AT_SCALE, "source": f"{config} ref"}
    assert settings["formats"] == {"value": "json,md", "source": "environment $ESVERIFY_FORMAT"}
    assert settings["reports"] == {"value": str(tmp_path / "out"), "source": f"{config} reports"}
    assert settings["python"] == {"value": None, "source": "default"}
