"""The command line follows the conventions of the tools its users know: `-h`
everywhere, exit codes in every command's help, help text and the real default on every option,
the same path and size types in every command, a suggestion for a mistyped choice, a progress bar
only on a terminal."""
from __future__ import annotations

import io

import click
import pytest
from click.testing import CliRunner

from esverify import cliutil
from esverify.cli import main

COMMANDS = [(), ("parity",), ("audit",), ("goldens",), ("goldens", "check"), ("goldens", "generate")]
LEAVES = [c for c in COMMANDS if c and c != ("goldens",)]


def _command(*path):
    cmd, ctx = main, click.Context(main)
    for name in path:
        cmd = cmd.get_command(ctx, name)
        ctx = click.Context(cmd, parent=ctx)
    return cmd


@pytest.mark.parametrize("path", COMMANDS)
def test_dash_h_is_help_everywhere(path):
    result = CliRunner().invoke(main, [*path, "-h"], prog_name="esverify")
    assert result.exit_code == 0, result.output
    assert result.output.startswith(f"Usage: esverify {' '.join(path)}".rstrip() + " ")
    assert "-h, --help" in result.output


@pytest.mark.parametrize("path", LEAVES)
def test_every_command_lists_its_exit_codes(path):
    text = CliRunner().invoke(main, [*path, "-h"]).output
    flat = " ".join(text.split())
    assert "Exit" in flat and "0" in flat and "2" in flat and "130/143/129" in flat, text


@pytest.mark.parametrize("path", LEAVES)
def test_every_option_has_help_and_a_shown_default(path):
    for param in _command(*path).params:
        if not isinstance(param, click.Option) or param.name == "help":
            continue
        assert (param.help or "").strip(), f"{path} {param.opts}: no help text"
        # a default that is not None/False must be shown (its real value, not a placeholder)
        unset = param.default is None or "UNSET" in str(param.default) or param.default in (False, ())
        if not unset and not param.is_flag:
            assert param.show_default not in (None, False), f"{path} {param.opts}: default {param.default!r} not shown"
        assert param.show_default != "fixed", f"{path} {param.opts}"


def test_case_seed_shows_its_value():
    text = " ".join(CliRunner().invoke(main, ["parity", "-h"]).output.split())
    assert "[default: 20260401]" in text and "[default: fixed]" not in text


def test_clone_paths_and_sizes_have_one_type_in_every_command():
    parity, audit = _command("parity"), _command("audit")
    by_name = {c: {p.name: p for p in c.params} for c in (parity, audit)}
    assert isinstance(by_name[parity]["ref"].type, click.Path) and isinstance(by_name[audit]["refs"].type, click.Path)
    # parity's --ref may name one file (a reference that is one module: the skill page's sample); audit's are folders
    assert by_name[parity]["ref"].type.file_okay is True and by_name[audit]["refs"].type.file_okay is False
    assert by_name[parity]["max_memory"].type is cliutil.SIZE is by_name[audit]["max_file_bytes"].type
    assert [cliutil.parse_size(v) for v in ("8G", "20M", "512k", "1024", "0", "1.5K")] == \
        [8 << 30, 20 << 20, 512 << 10, 1024, 0, 1536]
    with pytest.raises(ValueError, match="not a size"):
        cliutil.parse_size("eight")


@pytest.mark.parametrize("args, said", [
    (["parity", "--target", "es-awdd"], "did you mean 'es-awd'?"),
    (["parity", "--mapping", "poly23"], "did you mean 'poly32'?"),
    (["audit", "--format", "jsn"], "did you mean 'json'?"),
    (["audit", "--max-file-size", "4Q"], "not a size"),
])
def test_a_mistyped_value_is_refused_with_the_nearest_valid_one(args, said):
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 2 and said in result.output, result.output


def test_a_mistyped_list_entry_gets_a_suggestion(tmp_path):
    from esverify.oracle.options import Options, UsageError, validate as _validate
    with pytest.raises(UsageError, match=r"unknown \['f17'\]; choose from .*; did you mean 'f16'\?"):
        _validate(Options(dtypes=("f17",)))
    assert cliutil.suggest("zzz", ["json", "md"]) == ""


class _Stream(io.StringIO):
    def __init__(self, tty):
        super().__init__()
        self.tty = tty

    def isatty(self):
        return self.tty


def test_the_progress_bar_is_drawn_only_on_a_terminal():
    assert cliutil.progress_enabled(False, _Stream(True)) is True
    assert cliutil.progress_enabled(True, _Stream(True)) is False          # --quiet
    assert cliutil.progress_enabled(False, _Stream(False)) is False        # a CI log, a pipe
    assert cliutil.progress_enabled(False, object()) is False              # no isatty at all


def test_the_shown_case_seed_is_the_runners_default():
    from esverify.oracle import cases
    from esverify.oracle.cli import _DEFAULT_CASE_SEED
    assert _DEFAULT_CASE_SEED == cases.DEFAULT_CASE_SEED == 20260401


def test_goldens_check_leads_with_its_verdict_and_says_each_error_once(tmp_path):
    (tmp_path / "g").mkdir()                       # no golden file at all: exit 2
    result = CliRunner().invoke(main, ["goldens", "check", "--area", "rng", "--goldens-dir", str(tmp_path / "g")])
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert lines[0].startswith("goldens check: ERROR (exit 2): "), result.output
    error = lines[0].split(": ", 2)[2]
    assert error and result.output.count(error) == 1, result.output


def test_audit_leads_with_its_verdict(tmp_path):
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "mine.py").write_text("def mine(x):\n    return x * 2 + 1\n")
    result = CliRunner().invoke(main, ["audit", "--tree", str(tree), "--out", str(tmp_path / "a"), "--format", "json"])
    assert result.exit_code == 0, result.output
    lines = result.output.strip().splitlines()
    assert lines[0].startswith("esverify audit: PASS (exit 0): 0 finding(s)"), result.output
    assert lines[-1].startswith(f"report: {tmp_path / 'a'} (") and lines[-1].endswith("exit 0)")
