"""Every console of esverify keeps its lines to the console's width: the terminal's, 160 characters when
the output is no terminal (a CI log, a pipe); long detail is wrapped onto a few lines and otherwise left
to the written report, and a command to copy is never cut (esverify.console)."""
from __future__ import annotations

import fcntl
import os
import struct
import termios

import pytest
from click.testing import CliRunner

from esverify import console
from esverify.cli import main
from standins.mutants import STANDINS

LONG = "finding (skill-sample): " + " ".join(f"word{i}" for i in range(150))
COMMAND = "     re-run: esverify parity --ref /a/very/long/path" + "/deeper" * 30 + " --case 'x/y/z'"


def test_without_a_terminal_the_width_is_160(monkeypatch):
    monkeypatch.delenv("COLUMNS", raising=False)

    class Pipe:
        def isatty(self):
            return False
    assert console.width(Pipe()) == console.DEFAULT_WIDTH == 160


def test_a_terminal_gives_its_own_width_and_columns_overrides_it(monkeypatch):
    monkeypatch.delenv("COLUMNS", raising=False)
    leader, follower = os.openpty()
    try:
        fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 97, 0, 0))
        with os.fdopen(os.dup(follower), "w") as tty:
            assert console.width(tty) == 97
            monkeypatch.setenv("COLUMNS", "132")
            assert console.width(tty) == 132
            fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 20, 0, 0))
            monkeypatch.delenv("COLUMNS")
            assert console.width(tty) == console.MIN_WIDTH   # never narrower than a readable line
    finally:
        os.close(leader)
        os.close(follower)


@pytest.mark.parametrize("columns", [60, 100, 160])
def test_fit_keeps_every_line_to_the_width_and_commands_whole(columns):
    text = "\n".join(["short line", LONG, COMMAND, "x" * 500, ""])
    out = console.fit(text, columns).split("\n")
    assert COMMAND in out                                   # copied whole, wrapped by the terminal if need be
    assert all(len(line) <= columns for line in out if line != COMMAND), [len(x) for x in out]
    assert out[0] == "short line" and out[-1] == ""
    # a long line: at most MAX_WRAPPED lines, the cut said, the words kept in order up to the cut
    start = out.index(next(x for x in out if x.startswith("finding")))
    wrapped = out[start:start + console.MAX_WRAPPED]
    assert wrapped[-1].endswith("... (whole in the report)") and wrapped[1].startswith("  word")
    words = " ".join(wrapped).removesuffix("... (whole in the report)").split()
    assert words == LONG.split()[:len(words)]
    assert console.fit("a b c", 100) == "a b c" and console.fit("", 100) == ""


def test_a_line_that_fits_in_a_few_lines_loses_nothing():
    line = "warning: " + " ".join(f"w{i}" for i in range(40))        # about 170 characters: two lines
    out = console.fit(line, 100).split("\n")
    assert len(out) == 2 and " ".join(out).split() == line.split()


def test_fit_table_cuts_rows_and_says_where_they_are_whole():
    table = "\n".join(["area  vector  detail", "rng   v1      " + "d" * 300, "rng   v2      short"])
    out = console.fit_table(table, 80, rest="out.json").split("\n")
    assert all(len(line) <= 80 for line in out)
    assert out[1].endswith("~") and out[2] == "rng   v2      short"
    assert out[-1] == "(lines cut at 80 characters; whole in out.json)"
    assert console.fit_table("a\nb", 80) == "a\nb"


@pytest.mark.slow   # one parity run of the skill sample's stand-in, whose findings are long
def test_the_parity_console_keeps_to_160_characters_without_a_terminal(tmp_path, monkeypatch):
    monkeypatch.delenv("COLUMNS", raising=False)
    result = CliRunner().invoke(main, ["parity", "--ref", str(STANDINS / "skill-sample"), "--dtypes", "f32",
                                       "--small", "--quiet", "--out", str(tmp_path / "out")])
    assert result.exit_code in (0, 1), result.output
    lines = result.output.splitlines()
    assert any(line.startswith("finding (skill-sample)") for line in lines)
    long = [line for line in lines if len(line) > 160 and not console._is_command(line)]
    assert long == []
    assert any("(whole in the report (" in line for line in lines)   # a finding longer than three lines
    md = (tmp_path / "out" / "parity.md").read_text()
    assert "np.random.seed(seed) per member" in md   # the detail the console shortened is in the report


def test_the_goldens_console_keeps_to_its_width_when_the_json_holds_the_rest(tmp_path, monkeypatch):
    """A crashing backend's error rows carry a long detail: with --json the console cuts the table at 160
    characters and names the file that holds every cell; without it nothing is cut (no file holds it)."""
    from esverify.goldens import rng_area
    from test_goldens_support import copy_goldens, run
    monkeypatch.delenv("COLUMNS", raising=False)

    def boom(vector, backend):
        raise RuntimeError("kernel exploded " + "because " * 40)
    area = rng_area.AREA
    monkeypatch.setattr(rng_area, "AREA", type(area)(area.name, area.version, area.version_constant,
                                                     area.generate, area.backends, boom))
    goldens = copy_goldens(tmp_path / "goldens")
    base = ["goldens", "check", "--area", "rng", "--goldens-dir", str(goldens), "--backend", "numpy"]
    cut = run(*base, "--json", str(tmp_path / "r.json"))
    assert cut.exit_code == 1
    lines = cut.output.splitlines()
    assert max(len(line) for line in lines[1:]) <= 160   # [0] is the verdict, a line of its own
    assert lines[-1] == f"(lines cut at 160 characters; whole in {tmp_path / 'r.json'})"
    assert "because because because" in (tmp_path / "r.json").read_text()
    whole = run(*base)
    assert whole.exit_code == 1 and "kernel exploded because" in whole.output and "lines cut" not in whole.output
