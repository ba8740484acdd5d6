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
