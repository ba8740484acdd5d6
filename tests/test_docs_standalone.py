"""The docs stand alone: every document the repository cites is in the repository.

Code, CLI help, tests and docs cite the project's specifications by section
(`docs/numerics.md §3`, `docs/CONTRACT.md §3b`, `docs/references.md §2`; a file
inside docs/ cites its neighbours by their bare names). These tests fail when
- any text file cites one of the out-of-tree spec files the project was first
  written against (they are not shipped, so a user cannot follow the citation),
  or a path outside the repository;
- a `<file>.md §N` citation names a file that does not exist or a section
  that file does not have (stale numbering after a doc is restructured);
- a relative Markdown link points to a missing file.
"""
from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# Spelled in parts so that this file does not cite them itself.
_OLD_NAMES = ("ES", "RNG", "REFERENCES", "STYLE")
OLD_CITATION = re.compile(r"(?<![A-Za-z0-9_])(?:" + "|".join(_OLD_NAMES) + r")\.md(?![\w])")
OUTSIDE = re.compile("|".join(re.escape(p) for p in ("shared/" + "spec", "/work/" + "shared", "../" + "shared/")))

SIGN = r"(?:§|\\u00a7)"
SEC = r"\d+[a-z]?(?![\w])"
JOIN = r"(?:[ \t]*(?:,|-|–|\band\b|\bor\b|&)[ \t]*)"
MARK = rf"(?:{SIGN}[ \t]?|section[ \t]+)"
SECTION_LIST = (rf"(?:{SIGN}{{2}}[ \t]?{SEC}(?:{JOIN}(?:{SIGN}[ \t]?)?{SEC})*"
                rf"|{MARK}{SEC}(?:{JOIN}{MARK}{SEC})*)")
CITATION = re.compile(
    r"(?<![\w/.-])(?P<path>(?:\.\./)*(?:[\w-]+/)*[\w-]+\.md)[`)]?"
    rf"[ \t]*(?:\n[ \t]*(?:#[ \t]*)?)?(?P<list>{SECTION_LIST})")
_NUMBER = re.compile(r"\d+[a-z]?(?![\w])")


def _numbers(section_list: str) -> list[str]:
    """The section ids of a list such as "§2-§4", "§§2, 3" or the JSON-escaped "\\u00a72"."""
    return _NUMBER.findall(re.sub(SIGN, " ", section_list))
HEADING = re.compile(r"^#{1,6}[ \t]+(\d+[a-z]?)\.?[ \t]", re.M)
MD_LINK = re.compile(r"\]\((?P<target>[^)\s#]+\.md)(?:#[^)\s]*)?\)")

_TOP = ("esverify", "oracles", "goldens", "tests", "docs", "examples", "benchmarks", ".ci")


def _files() -> list[str]:
    """Tracked and untracked-but-not-ignored files; without git, the project's own folders."""
    try:
        out = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-z", "--cached", "--others",
                              "--exclude-standard"], capture_output=True, check=True, timeout=60).stdout
        names = [n for n in out.decode("utf-8").split("\0") if n]
        if names:
            return names
    except (OSError, subprocess.SubprocessError):
        pass
    names = [p.name for p in ROOT.iterdir() if p.is_file()]
    for top in _TOP:
        names += [str(p.relative_to(ROOT)) for p in (ROOT / top).rglob("*")
                  if p.is_file() and "__pycache__" not in p.parts]
    return names


def _texts() -> dict[str, str]:
    texts = {}
    for rel in _files():
        path = ROOT / rel
        if path.is_symlink() or not path.is_file():
            continue
        data = path.read_bytes()
        if b"\0" in data:
            continue
        try:
            texts[rel] = data.decode("utf-8")
        except UnicodeDecodeError:
            continue
    return texts


TEXTS = _texts()


def _resolve(citing: str, cited: str) -> Path:
    """Where a citation in file `citing` points: from the root, except that a file in docs/
    cites its neighbours by bare name (`numerics.md`, `../CONTRIBUTING.md`)."""
    if citing.startswith("docs/") and not cited.startswith("docs/"):
        return (ROOT / Path(citing).parent / cited).resolve()
    return (ROOT / cited).resolve()


def _sections(path: Path, cache: dict = {}) -> set[str]:  # noqa: B006 - a deliberate memo
    if path not in cache:
        cache[path] = set(HEADING.findall(path.read_text(encoding="utf-8")))
    return cache[path]


def _line(text: str, pos: int) -> int:
    return text.count("\n", 0, pos) + 1


def test_the_files_scanned_include_the_code_and_the_docs():
    assert {"README.md", "docs/numerics.md", "docs/references.md", "docs/CONTRACT.md",
            "CONTRIBUTING.md", "esverify/cli.py"} <= set(TEXTS)


def test_no_file_cites_the_out_of_tree_spec_or_a_path_outside_the_repository():
    found = [f"{rel}:{_line(text, m.start())}: {m.group(0)}"
             for rel, text in TEXTS.items()
             for pattern in (OLD_CITATION, OUTSIDE) for m in pattern.finditer(text)]
    assert not found, "cite the docs in this repository instead:\n" + "\n".join(found)


def test_every_section_citation_names_an_existing_file_and_section():
    bad, checked = [], 0
    for rel, text in TEXTS.items():
        for m in CITATION.finditer(text):
            target = _resolve(rel, m.group("path"))
            where = f"{rel}:{_line(text, m.start())}: {m.group(0)!r}"
            if not target.is_file():
                bad.append(f"{where}: no file {target.relative_to(ROOT) if ROOT in target.parents else target}")
                continue
            sections = _sections(target)
            for number in _numbers(m.group("list")):
                checked += 1
                if number not in sections:
                    bad.append(f"{where}: {m.group('path')} has no section {number} (has {sorted(sections)})")
    assert not bad, "\n".join(bad)
    assert checked > 100   # the code really does cite the docs this way


def test_relative_markdown_links_point_to_existing_files():
    bad = []
    for rel, text in TEXTS.items():
        if not rel.endswith(".md"):
            continue
        for m in MD_LINK.finditer(text):
            target = m.group("target")
            if "://" in target:
                continue
            if not (ROOT / Path(rel).parent / target).resolve().is_file():
                bad.append(f"{rel}:{_line(text, m.start())}: {target}")
    assert not bad, "\n".join(bad)


S = "§"   # kept apart from the file names below, so the scan of this file skips these examples


@pytest.mark.parametrize("text, citing, problem", [
    (f"see docs/numerics.md {S}29", "esverify/x.py", "no section 29"),
    (f"see docs/CONTRACT.md {S}2c", "esverify/x.py", "no section 2c"),
    (f"(numerics.md {S}3, {S}19)", "docs/guide.md", "no section 19"),
    (f"[numerics.md](numerics.md) {S}19", "docs/guide.md", "no section 19"),
    (f"numerics.md {S}3", "esverify/x.py", "no file"),
    (f"docs/nowhere.md {S}1", "README.md", "no file"),
    ("docs/CONTRACT.md \\u00a712 known answer", "goldens/rng.json", "no section 12"),
    (f"NUMERICS.md {S}1", "README.md", "no file"),
])
def test_the_checker_itself_catches_stale_citations(text, citing, problem):
    """The section check above would pass vacuously if its parser missed citations."""
    messages = []
    for m in CITATION.finditer(text):
        target = _resolve(citing, m.group("path"))
        if not target.is_file():
            messages.append("no file")
            continue
        messages += [f"no section {n}" for n in _numbers(m.group("list")) if n not in _sections(target)]
    assert problem in messages


@pytest.mark.parametrize("text", ["(" + "ES" + ".md " + S + "3)", "`shared/" + "spec/RNG" + ".md`",
                                  "REFERENCES" + ".md", "STYLE" + ".md, JAX"])
def test_the_checker_itself_catches_old_citations(text):
    assert OLD_CITATION.search(text) or OUTSIDE.search(text)


@pytest.mark.parametrize("text", ["RELEASE" + "S.md", "docs/FEATURE" + "S.md", "NOTE" + "S.md"])
def test_other_names_ending_alike_are_not_old_citations(text):
    assert not OLD_CITATION.search(text)
