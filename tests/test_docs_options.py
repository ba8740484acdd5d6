"""Every command-line option is documented in its guide, and an options table names each option once
(a newcomer reads the table, not the source): parity -> docs/parity.md, audit -> docs/audit.md,
goldens check/generate -> docs/goldens.md, replay -> docs/replay.md."""
from __future__ import annotations

import re
from pathlib import Path

import click
import pytest

from esverify.cli import main

ROOT = Path(__file__).resolve().parents[1]


def _command(*path):
    cmd, ctx = main, click.Context(main)
    for name in path:
        cmd = cmd.get_command(ctx, name)
        ctx = click.Context(cmd, parent=ctx)
    return cmd


def _options(cmd) -> list[str]:
    return [o for p in cmd.params if isinstance(p, click.Option) for o in p.opts + p.secondary_opts
            if o.startswith("--")]


def table_options(text: str) -> list[str]:
    """The options named in the first cell of each markdown table row (`--a`, `--b` both count)."""
    return [o for line in text.splitlines() if line.startswith("| `--")
            for o in re.findall(r"`(--[a-z0-9-]+)", line.split("|")[1])]


@pytest.mark.parametrize("path, doc", [(("parity",), "parity.md"), (("audit",), "audit.md"),
                                       (("goldens", "check"), "goldens.md"),
                                       (("goldens", "generate"), "goldens.md"), (("replay",), "replay.md")])
def test_every_option_is_in_its_guide(path, doc):
    text = (ROOT / "docs" / doc).read_text()
    missing = [o for o in _options(_command(*path)) if not re.search(re.escape(o) + r"(?![a-z0-9-])", text)]
    assert missing == [], f"{' '.join(path)}: options missing from docs/{doc}"


def test_the_parity_options_table_names_every_option_once():
    named = table_options((ROOT / "docs" / "parity.md").read_text())
    assert sorted(o for o in set(named) if named.count(o) > 1) == []
    assert sorted(set(_options(_command("parity"))) - set(named)) == []
    assert sorted(set(named) - set(_options(_command("parity")))) == []


def test_the_replay_options_table_names_every_option_once():
    named = table_options((ROOT / "docs" / "replay.md").read_text())
    assert sorted(o for o in set(named) if named.count(o) > 1) == []
    assert sorted(set(named) ^ set(_options(_command("replay")))) == []


def test_the_table_reader_sees_duplicates_and_shared_rows():
    text = "| `--a`, `--b` | x | y |\n| `--a` | x | y |\nprose `--c`\n"
    assert table_options(text) == ["--a", "--b", "--a"]


def _vectors(area: str) -> int:
    import json
    return len(json.loads((ROOT / "goldens" / f"{area}.json").read_text())["vectors"])


def test_the_vector_counts_the_docs_quote_are_the_goldens_counts():
    """The C example claims every rng and es-at-scale vector but the step and seed-schedule ones, and none
    of es-awd, es-paper, skill-sample or eggroll (tests/test_impl_c.py asserts it on a live run); the goldens
    guide and PROTOCOL.md quote the counts that follow from the goldens, and the guide's cost paragraph quotes
    the gate's recomputations (3 backends on the CPU)."""
    import json
    at_scale = json.loads((ROOT / "goldens" / "es-at-scale.json").read_text())["vectors"]
    not_c = sum(v["inputs"]["kind"] in ("step", "seed-schedule") for v in at_scale)
    claimed = _vectors("rng") + len(at_scale) - not_c
    unsupported = _vectors("es-awd") + not_c + _vectors("es-paper") + _vectors("skill-sample")
    unsupported += _vectors("eggroll")
    total = claimed + unsupported
    guide = (ROOT / "docs" / "goldens.md").read_text()
    protocol = (ROOT / "docs" / "PROTOCOL.md").read_text()
    quoted = re.search(r"--impl \./esimpl +# (\d+) vectors bit-equal, (\d+) unsupported", guide)
    assert quoted and (int(quoted[1]), int(quoted[2])) == (claimed, unsupported), quoted
    quoted = re.search(r"PASS: (\d+) vector recomputations bit-equal on impl:esimpl-c.*?; (\d+) vector\(s\) "
                       r"unsupported", protocol)
    assert quoted and (int(quoted[1]), int(quoted[2])) == (claimed, unsupported), quoted
    quoted = re.search(r"\((\d+)\s+recomputations\s+of\s+(\d+)\s+vectors\s+on\s+numpy,\s+numba\s+and\s+torch\s+CPU",
                       guide)
    assert quoted and (int(quoted[1]), int(quoted[2])) == (3 * total, total), quoted


def test_every_parity_command_in_the_docs_names_a_clone():
    """Without --ref/--awd-ref parity looks in ./refs/ and exits 2: a command a newcomer copies from a code
    block must name its clone (the README once showed a --case example without one)."""
    offenders = []
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        blocks = re.findall(r"```[a-z]*\n(.*?)```", doc.read_text(), re.S)
        for line in (ln for block in blocks for ln in block.replace("\\\n", " ").splitlines()):
            command = line.split("#")[0]
            if re.search(r"(^|\s)esverify parity(\s|$)", command) and "--help" not in command \
                    and not re.search(r"--(awd-)?ref[ =]", command):
                offenders.append(f"{doc.name}: {line.strip()}")
    assert offenders == []


def _exit_codes(text: str) -> set:
    """The exit codes named in a help text's "Exit" paragraph (numbers, not section signs)."""
    at = text.find("Exit")
    assert at >= 0, "no Exit paragraph"
    paragraph = re.split(r"\n\s*\n", text[at:], maxsplit=1)[0]
    return {int(n) for n in re.findall(r"(?<![\w.§])(\d{1,3})\b", paragraph)}


def _doc_exit_table(text: str, index: int) -> set:
    """The codes in the first column of the `index`-th `| exit | meaning |` table of a guide."""
    tables = text.split("| exit | meaning |")[1:]
    rows = []
    for line in tables[index].splitlines()[2:]:   # [0] is the rest of the header line, [1] the rule
        if not line.startswith("|"):
            break
        rows.append(line)
    codes = set()
    for line in rows:
        codes |= {int(n) for n in re.findall(r"\d+", line.split("|")[1])}
    return codes


@pytest.mark.parametrize("path, doc, index", [(("replay",), "replay.md", 0), (("goldens", "check"), "goldens.md", 0),
                                              (("goldens", "generate"), "goldens.md", 1)])
def test_help_and_guide_name_the_same_exit_codes(path, doc, index):
    """`--help` and the guide's exit table agree code for code (replay --help once omitted 130)."""
    help_codes = _exit_codes(_command(*path).help)
    doc_codes = _doc_exit_table((ROOT / "docs" / doc).read_text(), index)
    assert help_codes == doc_codes and {0, 1, 2, 130, 143, 129} <= doc_codes


@pytest.mark.parametrize("path, doc", [(("parity",), "parity.md"), (("replay",), "replay.md"),
                                       (("audit",), "audit.md")])
def test_the_defaults_a_table_names_are_the_cli_defaults(path, doc):
    """A table row saying "`X` (default)" or "(default: X)" names the option's real default (replay's table
    said `--batching members` while the CLI's default is passes)."""
    cmd = _command(*path)
    defaults = {o: p.default for p in cmd.params if isinstance(p, click.Option) for o in p.opts}
    checked = 0
    for line in (ROOT / "docs" / doc).read_text().splitlines():
        if not line.startswith("| `--"):
            continue
        option = re.findall(r"`(--[a-z0-9-]+)", line.split("|")[1])[0]
        named = re.findall(r"`([^`]+)` \(default\)", line) + re.findall(r"\(default:? `?([^)`,;]+)`?\)", line)
        for value in named:
            if option in defaults and isinstance(defaults[option], (str, int, float)) \
                    and not isinstance(defaults[option], bool):
                checked += 1
                assert str(defaults[option]) == value.strip(), f"{option}: the table says {value}"
    if path == ("replay",):
        assert checked >= 2     # --batching and --device
