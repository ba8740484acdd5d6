"""End-to-end tests of `esverify audit` on fixture trees written for these tests.

tests/fixtures/audit/ holds an invented "reference" (its own short licence
text under an "ACADEMIC PUBLIC LICENSE" heading, a few functions), a clean
esverify-shaped tree and variant files. Each test composes a tree in
tmp_path: (a) clean, (b) a verbatim copy of one reference function, (c) the
same function renamed and re-laid-out, (d) a copied comment block only,
(e) a byte-identical file, (f) a package import of a reference module; and
a wheel and an sdist built from (b). Every case must be found and named,
(a) must pass.
"""
from __future__ import annotations

import ast
import json
import os
import re
import shutil
import subprocess
import tarfile
import zipfile
from pathlib import Path

import pytest
from click.testing import CliRunner

from esverify.cli import main

FIXTURES = Path(__file__).parent / "fixtures" / "audit"
REFERENCE = FIXTURES / "reference"
SMOOTHER = REFERENCE / "lattice_tools" / "spectral_smoother.py"


def run_audit(*args, cwd: Path | None = None):
    """Invoke the CLI in-process; returns (exit code, report dict or None, output)."""
    runner = CliRunner()
    out = None
    if "--out" not in args:
        out = Path(os.environ.get("PYTEST_TMP_OUT", "/tmp")) / f"audit-test-{os.getpid()}-{len(args)}"
        shutil.rmtree(out, ignore_errors=True)
        args = (*args, "--out", str(out))
    else:
        out = Path(args[args.index("--out") + 1])
    if cwd is not None:
        old = os.getcwd()
        os.chdir(cwd)
    try:
        result = runner.invoke(main, ["audit", *args, "--format", "json"], catch_exceptions=False)
    finally:
        if cwd is not None:
            os.chdir(old)
    report = json.loads((out / "audit.json").read_text()) if (out / "audit.json").exists() else None
    return result.exit_code, report, result.output


@pytest.fixture(autouse=True)
def _reports_in_tmp(tmp_path, monkeypatch):
    """run_audit writes its report under PYTEST_TMP_OUT: keep it in pytest's tmp folder, not /tmp."""
    monkeypatch.setenv("PYTEST_TMP_OUT", str(tmp_path))


def findings(report, section):
    return [r for r in report["sections"][section] if r["status"] == "finding"]


def verbatim_function(name: str = "smooth_spectrum") -> str:
    src = SMOOTHER.read_text()
    node = next(n for n in ast.parse(src).body if isinstance(n, ast.FunctionDef) and n.name == name)
    return ast.get_source_segment(src, node)


def make_tree(tmp_path: Path, case: str) -> Path:
    tree = tmp_path / f"tree_{case}"
    shutil.copytree(FIXTURES / "clean", tree)
    pkg = tree / "esverify"
    if case == "b":
        (pkg / "smoothing.py").write_text('"""Own module."""\n\n\n' + verbatim_function() + "\n")
    elif case == "c":
        shutil.copy(FIXTURES / "variants" / "renamed.py", pkg / "bins.py")
    elif case == "d":
        shutil.copy(FIXTURES / "variants" / "docstring_copy.py", pkg / "notes.py")
    elif case == "e":
        shutil.copy(REFERENCE / "lattice_tools" / "ring_buffer.py", tree / "scripts" / "ring.py")
    elif case == "f":
        shutil.copy(FIXTURES / "variants" / "import_ref.py", pkg / "peaks.py")
    return tree


@pytest.fixture(autouse=True)
def _tmp_out(tmp_path, monkeypatch):
    monkeypatch.setenv("PYTEST_TMP_OUT", str(tmp_path))


def test_clean_tree_passes(tmp_path):
    code, report, output = run_audit("--tree", str(make_tree(tmp_path, "a")), "--ref", str(REFERENCE))
    assert code == 0, output
    summary = {r["section"]: r["verdict"] for r in report["sections"]["summary"]}
    assert summary == {"similarity": "pass", "text": "pass", "identity": "pass", "imports": "pass", "readability": "pass",
                       "provenance": "info"}
    # Independent argparse boilerplate shares some tokens with the reference's
    # command line but stays under the finding criteria.
    sim = report["sections"]["similarity"]
    assert all(r["status"] == "below threshold" for r in sim)
    # The empty tests/__init__.py equals the reference's empty __init__.py: trivial, listed.
    ident = report["sections"]["identity"]
    assert [(r["status"], r["tree_file"]) for r in ident] == [("trivial", "tests/__init__.py")]
    # The oracle driver loads the reference: listed (child process only), not a finding.
    listed = [r for r in report["sections"]["imports"] if r["status"] == "listed"]
    assert {r["file"] for r in listed} == {"oracles/lattice_driver.py"}
    # tests/data_tree/esverify/ imports the reference but is data, not the package.
    assert not any(r["file"].startswith("tests/") for r in report["sections"]["imports"])
    # The binary logo is skipped and listed, not a crash.
    assert [r["path"] for r in report["sections"]["skipped"]] == ["logo.png"]


def test_b_verbatim_function_found(tmp_path):
    code, report, _ = run_audit("--tree", str(make_tree(tmp_path, "b")), "--ref", str(REFERENCE))
    assert code == 1
    (hit,) = findings(report, "similarity")
    assert (hit["tree_file"], hit["ref_file"]) == ("esverify/smoothing.py", "lattice_tools/spectral_smoother.py")
    assert hit["similarity_tree"] > 0.9 and hit["shared_tokens"] >= 150
    assert hit["tree_lines"] == "4-28" and hit["ref_lines"] == "5-31"
    # Its comment block came along: the text pass names it too.
    assert [r["tree_file"] for r in findings(report, "text")] == ["esverify/smoothing.py"]


def test_c_renamed_and_reformatted_found(tmp_path):
    code, report, _ = run_audit("--tree", str(make_tree(tmp_path, "c")), "--ref", str(REFERENCE))
    assert code == 1
    (hit,) = findings(report, "similarity")
    assert (hit["tree_file"], hit["ref_file"]) == ("esverify/bins.py", "lattice_tools/spectral_smoother.py")
    assert hit["similarity_tree"] > 0.8
    assert findings(report, "text") == [] and findings(report, "identity") == []


def test_d_comment_block_only_found_by_text_pass(tmp_path):
    code, report, _ = run_audit("--tree", str(make_tree(tmp_path, "d")), "--ref", str(REFERENCE))
    assert code == 1
    assert findings(report, "similarity") == []
    (hit,) = findings(report, "text")
    assert (hit["tree_file"], hit["ref_file"]) == ("esverify/notes.py", "lattice_tools/spectral_smoother.py")
    assert hit["tree_lines"] == "5-8" and hit["ref_lines"] == "6-9"
    assert hit["longest_run_words"] >= 30


def test_e_byte_identical_file_found(tmp_path):
    code, report, _ = run_audit("--tree", str(make_tree(tmp_path, "e")), "--ref", str(REFERENCE))
    assert code == 1
    (hit,) = findings(report, "identity")
    assert (hit["tree_file"], hit["ref_file"]) == ("scripts/ring.py", "lattice_tools/ring_buffer.py")
    assert [r["tree_file"] for r in findings(report, "similarity")] == ["scripts/ring.py"]


def test_f_package_import_of_reference_found(tmp_path):
    tree = make_tree(tmp_path, "f")
    code, report, _ = run_audit("--tree", str(tree), "--ref", str(REFERENCE))
    assert code == 1
    (hit,) = findings(report, "imports")
    assert (hit["file"], hit["line"], hit["kind"]) == ("esverify/peaks.py", 2, "reference import")
    # Without --ref the module name is unknown, so sections 1-3 are skipped and
    # this import is not flagged; a module on the built-in list always is.
    code, report, _ = run_audit("--tree", str(tree))
    assert code == 0
    assert {r["section"]: r["verdict"] for r in report["sections"]["summary"]}["similarity"] == "skipped"
    shutil.copy(FIXTURES / "variants" / "import_builtin.py", tree / "esverify" / "ext.py")
    code, report, _ = run_audit("--tree", str(tree))
    assert code == 1
    assert [(r["file"], r["detail"]) for r in findings(report, "imports")] == [
        ("esverify/ext.py", "importlib.import_module( worker_extension")]


def _wheel_from(tree: Path, path: Path) -> Path:
    """A wheel laid out as ours is built: the package (its references' child/ folders inside) plus oracles/."""
    with zipfile.ZipFile(path, "w") as zf:
        for f in sorted((tree / "esverify").rglob("*.py")):
            zf.write(f, f.relative_to(tree).as_posix())
        for f in sorted((tree / "oracles").glob("*.py")):
            zf.write(f, f"oracles/{f.name}")
        zf.writestr("fixture-0.0.0.dist-info/METADATA", "Metadata-Version: 2.1\nName: fixture\n"
                    "Version: 0.0.0\nLicense: Apache-2.0\n")
        zf.writestr("fixture-0.0.0.dist-info/WHEEL", "Wheel-Version: 1.0\n")
    return path


def test_wheel_and_sdist_built_from_b_found(tmp_path):
    tree = make_tree(tmp_path, "b")
    wheel = _wheel_from(tree, tmp_path / "fixture-0.0.0-py3-none-any.whl")
    code, report, _ = run_audit("--wheel", str(wheel), "--ref", str(REFERENCE), cwd=tmp_path)
    assert code == 1
    assert [r["tree_file"] for r in findings(report, "similarity")] == ["esverify/smoothing.py"]
    # oracles/ in a wheel (a top-level package beside esverify/) is the oracle area: listed, never a finding.
    imp = report["sections"]["imports"]
    assert findings(report, "imports") == []
    assert {r["file"] for r in imp if r["status"] == "listed"} == {"oracles/lattice_driver.py"}
    assert report["sections"]["provenance"][0]["declared_licence"] == "Apache-2.0"

    sdist = tmp_path / "fixture-0.0.0.tar.gz"
    with tarfile.open(sdist, "w:gz") as tf:
        tf.add(tree, arcname="fixture-0.0.0")
    code, report, _ = run_audit("--wheel", str(sdist), "--ref", str(REFERENCE), cwd=tmp_path)
    assert code == 1
    assert [r["tree_file"] for r in findings(report, "similarity")] == ["esverify/smoothing.py"]
    assert {r["file"] for r in report["sections"]["imports"] if r["status"] == "listed"} == {
        "oracles/lattice_driver.py"}


def _git(repo: Path, *args):
    subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@example.org",
                    "-c", "commit.gpgsign=false", *args], check=True, capture_output=True)


def test_history_finds_a_copy_committed_then_deleted(tmp_path):
    repo = make_tree(tmp_path, "a")
    _git(repo, "init", "-q")
    (repo / "esverify" / "smoothing.py").write_text(verbatim_function() + "\n")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "copy")
    (repo / "esverify" / "smoothing.py").unlink()
    _git(repo, "commit", "-qam", "delete the copy")
    code, report, _ = run_audit("--tree", str(repo), "--ref", str(REFERENCE))
    assert code == 0
    code, report, _ = run_audit("--tree", str(repo), "--ref", str(REFERENCE), "--history")
    assert code == 1
    (hit,) = findings(report, "similarity")
    assert hit["tree_file"].startswith("esverify/smoothing.py@")
    assert any(r["origin"] == "history" for r in report["sections"]["manifest"])
    # The tree's own provenance row carries its commit and a clean flag.
    tree_row = report["sections"]["provenance"][0]
    assert tree_row["role"] == "tree" and len(tree_row["commit"]) == 40 and tree_row["dirty"] is False


def test_default_tree_is_the_git_top_level_and_outside_a_checkout_is_usage_error(tmp_path):
    repo = make_tree(tmp_path, "a")
    _git(repo, "init", "-q")
    code, report, _ = run_audit(cwd=repo / "esverify")
    assert code == 0
    assert report["metadata"]["tree"] == str(repo.resolve())
    plain = tmp_path / "plain"
    plain.mkdir()
    code, report, output = run_audit(cwd=plain)
    assert code == 2 and report is None
    assert "--tree" in output


@pytest.mark.parametrize("args", [
    ("--tree", "/nonexistent/path"),
    ("--ref", "/nonexistent/ref"),
    ("--threshold", "0"),
    ("--min-tokens", "0"),
    ("--format", "xml"),
])
def test_usage_errors_exit_2(tmp_path, args):
    code, report, _ = run_audit("--tree", str(FIXTURES / "clean"), *args)
    assert code == 2 and report is None


def test_notebook_code_cells_are_fingerprinted(tmp_path):
    tree = make_tree(tmp_path, "a")
    cells = [{"cell_type": "markdown", "source": ["# Smoothing\n"]},
             {"cell_type": "code", "source": ["%matplotlib inline\n", "import math\n"]},
             {"cell_type": "code", "source": verbatim_function().splitlines(keepends=True)}]
    (tree / "explore.ipynb").write_text(json.dumps({"cells": cells, "nbformat": 4}))
    code, report, _ = run_audit("--tree", str(tree), "--ref", str(REFERENCE))
    assert code == 1
    (hit,) = findings(report, "similarity")
    assert (hit["tree_file"], hit["ref_file"]) == ("explore.ipynb", "lattice_tools/spectral_smoother.py")
    # Line numbers count lines of the joined code cells.
    assert hit["tree_lines"] == "2-28"  # from `import math` (as in the reference) to the end


def test_ngram_larger_than_min_words_is_usage_error():
    code, report, output = run_audit("--tree", str(FIXTURES / "clean"), "--ngram", "12", "--min-words", "10")
    assert code == 2 and report is None and "--ngram" in output


def test_history_without_git_and_bad_archive_are_usage_errors(tmp_path):
    plain = make_tree(tmp_path, "a")
    code, _, output = run_audit("--tree", str(plain), "--history")
    assert code == 2 and "--history" in output
    # A sub-folder of a checkout is not its top level either.
    code, _, output = run_audit("--tree", str(FIXTURES / "clean"), "--history")
    assert code == 2
    bogus = tmp_path / "not-a-wheel.whl"
    bogus.write_text("hello")
    code, _, output = run_audit("--wheel", str(bogus))
    assert code == 2 and "neither a wheel" in output


def test_binary_unreadable_and_symlinked_files_are_skipped_and_listed(tmp_path):
    tree = make_tree(tmp_path, "a")
    os.mkfifo(tree / "esverify" / "pipe.py")
    (tree / "esverify" / "latin1.py").write_bytes(b"# caf\xe9\nx = 1\n")
    os.symlink(SMOOTHER, tree / "esverify" / "linked.py")
    code, report, _ = run_audit("--tree", str(tree), "--ref", str(REFERENCE))
    # a file the audit cannot read is a finding: the pipe, and a .py that is not UTF-8
    # without a PEP 263 declaration (Python itself refuses it); the symlink and the PNG are only listed
    assert code == 1
    skipped = {r["path"]: r["reason"] for r in report["sections"]["skipped"]}
    assert "not a regular file" in skipped["esverify/pipe.py"]
    assert skipped["esverify/latin1.py"].startswith("Python source not decodable with its declared encoding")
    assert skipped["esverify/linked.py"].startswith("symlink to")
    assert "logo.png" in skipped
    found = {r["path"]: r["kind"] for r in report["sections"]["readability"]}
    assert found == {"esverify/pipe.py": "unreadable", "esverify/latin1.py": "unreadable"}


def test_report_sections_and_formats(tmp_path):
    out = tmp_path / "rep"
    runner = CliRunner()
    result = runner.invoke(main, ["audit", "--tree", str(FIXTURES / "clean"), "--ref", str(REFERENCE),
                                  "--out", str(out)])
    assert result.exit_code == 0, result.output
    names = sorted(p.name for p in out.iterdir())
    assert {"audit.json", "audit.md", "audit.html", "audit-summary.csv", "audit-manifest.csv"} <= set(names)
    doc = json.loads((out / "audit.json").read_text())
    order = ["summary", "findings", "similarity", "text", "identity", "imports", "readability", "provenance",
             "tools", "manifest", "skipped"]
    assert set(doc["sections"]) == set(order)
    md = (out / "audit.md").read_text()
    assert [line[3:] for line in md.splitlines() if line.startswith("## ")] == [*order, "Metadata"]
    assert md.splitlines()[2].startswith("**Verdict: ")       # the report opens with the verdict
    ref_row = doc["sections"]["provenance"][1]
    assert ref_row["licence"] == "Academic Public License (noncommercial)" and ref_row["noncommercial"] is True
    assert ref_row["licence_file"] == "LICENSE.txt"
    manifest = {(r["origin"], r["path"]): r["sha256"] for r in doc["sections"]["manifest"]}
    import hashlib
    assert manifest[("tree", "esverify/stats.py")] == hashlib.sha256(
        (FIXTURES / "clean" / "esverify" / "stats.py").read_bytes()).hexdigest()
    assert ("ref1:reference", "lattice_tools/ring_buffer.py") in manifest
    tools = {r["item"]: r["value"] for r in doc["sections"]["tools"]}
    assert tools["copydetect"] == "0.5.0" and tools["threshold"] == 0.05
    assert "cannot establish" in doc["metadata"]["statement"]


def test_default_out_folder_is_timestamped_under_reports(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(main, ["audit", "--tree", str(FIXTURES / "clean"), "--format", "md"])
    assert result.exit_code == 0, result.output
    (folder,) = Path("reports").glob("audit-*")
    assert (folder / "audit.md").is_file() and str(folder) in result.output
    # microseconds, pid and a random suffix: two audits started at once never share a folder
    assert re.fullmatch(r"audit-\d{8}T\d{6}\.\d{6}Z-\d+-[0-9a-f]{4}", folder.name), folder.name


@pytest.mark.slow   # 4 s (--durations, 2026-12-03): out of the fast tier
def test_project_tree_passes_without_ref(tmp_path):
    """What .ci/run does: the audit of this checkout, no --ref, exits 0."""
    root = Path(__file__).resolve().parents[1]
    code, report, output = run_audit("--tree", str(root))
    assert code == 0, output
    assert findings(report, "imports") == []


def test_format_accepts_comma_separated_list_like_parity(tmp_path):
    out = tmp_path / "rep"
    result = CliRunner().invoke(main, ["audit", "--tree", str(FIXTURES / "clean"), "--out", str(out),
                                       "--format", "json,md"])
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in out.iterdir()) == ["audit.json", "audit.md"]


def test_unwritable_out_is_usage_error_not_a_finding(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    result = CliRunner().invoke(main, ["audit", "--tree", str(FIXTURES / "clean"), "--out", str(blocker / "rep"),
                                       "--format", "json"])
    # checked before any work: one line naming the path and the reason
    assert result.exit_code == 2 and f"--out {blocker / 'rep'}: {blocker} is a file, not a directory" in result.output
    assert "verdict" not in result.output


def test_manifest_claims_only_the_sections_that_ran(tmp_path):
    tree = make_tree(tmp_path, "a")
    _, report, _ = run_audit("--tree", str(tree))
    by_path = {r["path"]: r["scanned_by"] for r in report["sections"]["manifest"]}
    assert (by_path["esverify/stats.py"], by_path["README.md"], by_path["logo.png"]) == ("imports", "none", "none")
    note = {r["section"]: r["note"] for r in report["sections"]["summary"]}["imports"]
    assert note.startswith("3 package files;")   # tests/data_tree/esverify/ is data
    _, report, _ = run_audit("--tree", str(tree), "--ref", str(REFERENCE))
    rows = {(r["origin"], r["path"]): r["scanned_by"] for r in report["sections"]["manifest"]}
    assert rows[("tree", "esverify/stats.py")] == "similarity, text, identity, imports"
    assert rows[("tree", "LICENSE")] == "identity"
    assert rows[("ref1:reference", "lattice_tools/ring_buffer.py")] == "similarity, text, identity"
