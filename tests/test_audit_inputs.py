"""Audit inputs: declared encodings, empty references, resource bounds, folder symlinks
.

A verbatim copy with a PEP 263 latin-1 declaration is read and found (tree and wheel); a file the
audit cannot read is a `readability` finding with its reason; a reference or tree without code is a
usage error naming the path; files over the bound are findings "too large to audit", hashed by
streaming and never held in memory; archive members over the bound are never decompressed.
"""
from __future__ import annotations

import hashlib
import os
import zipfile
from pathlib import Path

import pytest

from esverify.audit import sources
from test_audit import FIXTURES, REFERENCE, SMOOTHER, findings, make_tree, run_audit


@pytest.fixture(autouse=True)
def _reports_in_tmp(tmp_path, monkeypatch):
    """run_audit writes its report under PYTEST_TMP_OUT: keep it in pytest's tmp folder, not /tmp."""
    monkeypatch.setenv("PYTEST_TMP_OUT", str(tmp_path))


def _latin1_copy() -> bytes:
    """The reference module, verbatim, declared latin-1, with one non-ASCII comment (valid Python)."""
    return (b"# -*- coding: latin-1 -*-\n# r\xe9sum\xe9 of the smoother\n" + SMOOTHER.read_bytes())


def test_a_latin1_declared_copy_is_read_and_found(tmp_path):
    tree = make_tree(tmp_path, "a")
    (tree / "esverify" / "smoothing.py").write_bytes(_latin1_copy())
    entry = sources.classify("tree", "esverify/smoothing.py", _latin1_copy())
    assert (entry.kind, entry.encoding) == ("code", "iso-8859-1") and "résumé" in entry.text
    code, report, output = run_audit("--tree", str(tree), "--ref", str(REFERENCE))
    assert code == 1, output
    assert [r["tree_file"] for r in findings(report, "similarity")] == ["esverify/smoothing.py"]
    assert not any(r["path"] == "esverify/smoothing.py" for r in report["sections"]["skipped"])


def test_a_latin1_declared_copy_in_a_wheel_is_found(tmp_path):
    wheel = tmp_path / "fixture-0.0.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr("esverify/__init__.py", "")
        zf.writestr("esverify/smoothing.py", _latin1_copy())
    code, report, output = run_audit("--wheel", str(wheel), "--ref", str(REFERENCE), cwd=tmp_path)
    assert code == 1, output
    assert [r["tree_file"] for r in findings(report, "similarity")] == ["esverify/smoothing.py"]


@pytest.mark.parametrize("data,reason", [
    (b"# coding: utf-8\n# caf\xe9\nx = 1\n", "not decodable with its declared encoding"),
    (b"# coding: klingon\nx = 1\n", "not decodable with its declared encoding"),
    (b"x = 1\n# caf\xe9\n", "not decodable with its declared encoding"),      # PEP 3120: UTF-8 by default
    (b"x = 1\x00\n", "NUL byte"),
])
def test_python_the_audit_cannot_read_is_a_finding_with_its_reason(tmp_path, data, reason):
    tree = make_tree(tmp_path, "a")
    (tree / "esverify" / "broken.py").write_bytes(data)
    code, report, output = run_audit("--tree", str(tree))
    assert code == 1, output
    (row,) = findings(report, "readability")
    assert row["path"] == "esverify/broken.py" and reason in row["reason"]
    summary = {r["section"]: (r["verdict"], r["findings"]) for r in report["sections"]["summary"]}
    assert summary["readability"] == ("FINDING", 1)


def test_other_languages_are_read_as_they_define():
    sh = sources.classify("tree", "run.sh", b"#!/bin/sh\necho caf\xe9\n")            # bash: bytes
    assert sh.kind == "code" and sh.encoding == "latin-1" and sh.text.endswith("caf\xe9\n")
    md = sources.classify("tree", "notes.md", b"r\xe9sum\xe9\n")
    assert md.kind == "prose" and md.text == "r\xe9sum\xe9\n"
    nb = sources.classify("tree", "a.ipynb", '{"cells": [{"cell_type": "code", "source": "x = 1"}]}'
                          .encode("utf-16"))                                          # JSON: UTF-16 detected
    assert nb.kind == "code" and nb.text.strip() == "x = 1"
    bad_nb = sources.classify("tree", "b.ipynb", b"{not json")
    assert bad_nb.kind == "unreadable" and "notebook" in bad_nb.error
    png = sources.classify("tree", "logo.png", b"\x89PNG\x00\x01")
    assert png.kind == "binary"


@pytest.mark.parametrize("content", [None, {"README.md": "no code here\n", "data.json": "{}"}])
def test_a_reference_without_code_is_a_usage_error(tmp_path, content):
    ref = tmp_path / "ref"
    ref.mkdir()
    for name, text in (content or {}).items():
        (ref / name).write_text(text)
    code, report, output = run_audit("--tree", str(FIXTURES / "clean"), "--ref", str(ref))
    assert code == 2 and report is None
    assert f"--ref {ref}: no code files" in output


def test_a_tree_without_code_is_a_usage_error(tmp_path):
    tree = tmp_path / "docs-only"
    tree.mkdir()
    (tree / "README.md").write_text("words\n")
    code, report, output = run_audit("--tree", str(tree), "--ref", str(REFERENCE))
    assert code == 2 and report is None and f"--tree {tree}: no code files" in output
    wheel = tmp_path / "x-0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr("x-0.dist-info/METADATA", "Name: x\n")
    code, _, output = run_audit("--wheel", str(wheel), cwd=tmp_path)
    assert code == 2 and "no code files" in output


@pytest.mark.slow   # 1 s (--durations, 2026-12-03): out of the fast tier
def test_a_50_mb_generated_module_is_too_large_to_audit(tmp_path):
    tree = make_tree(tmp_path, "a")
    big = tree / "esverify" / "generated.py"
    line = b"VALUE_%07d = 1\n"
    with open(big, "wb") as fh:
        for chunk in range(50):
            fh.write(b"".join(line % (chunk * 62500 + k) for k in range(62500)))
    size = big.stat().st_size
    assert size > 50 * 10 ** 6 - 1
    code, report, output = run_audit("--tree", str(tree), "--ref", str(REFERENCE))
    assert code == 1, output
    (row,) = findings(report, "readability")
    assert row["path"] == "esverify/generated.py" and row["kind"] == "too-large"
    assert f"too large to audit: {size} bytes" in row["reason"]
    manifest = {r["path"]: r for r in report["sections"]["manifest"] if r["origin"] == "tree"}
    assert manifest["esverify/generated.py"]["sha256"] == hashlib.sha256(big.read_bytes()).hexdigest()


def test_the_bound_is_configurable_and_checked_before_reading(tmp_path, monkeypatch):
    tree = make_tree(tmp_path, "a")
    (tree / "esverify" / "mid.py").write_text("x = 1\n" * 300)          # 1800 bytes
    opened = []
    real = open

    def spy(path, *args, **kwargs):
        opened.append((Path(path).name, args))
        return real(path, *args, **kwargs)
    monkeypatch.setattr(sources, "open", spy, raising=False)
    entry = sources.read_path("tree", tree, "esverify/mid.py", max_bytes=1000)
    assert opened == [("mid.py", ("rb",))]        # once, to stream the hash; the size came from lstat
    assert entry.kind == "too-large" and entry.data is None and entry.size == 1800
    assert entry.sha256 == hashlib.sha256(b"x = 1\n" * 300).hexdigest()
    assert sources.read_path("tree", tree, "esverify/mid.py", max_bytes=1800).kind == "code"
    code, report, _ = run_audit("--tree", str(tree), "--max-file-size", "1000")
    assert code == 1
    assert "esverify/mid.py" in {r["path"] for r in findings(report, "readability")}


def test_a_zip_bomb_member_is_never_decompressed(tmp_path, monkeypatch):
    wheel = tmp_path / "bomb-0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("bomb/__init__.py", "x = 1\n")
        zf.writestr("bomb/data.py", b"\x20" * (8 * 1024 * 1024))          # 8 MiB of spaces, ~8 KB compressed
    assert wheel.stat().st_size < 100_000
    opened = []
    real_open = zipfile.ZipFile.open

    def spy(self, name, *args, **kwargs):
        opened.append(getattr(name, "filename", name))
        return real_open(self, name, *args, **kwargs)
    monkeypatch.setattr(zipfile.ZipFile, "open", spy)
    entries = {e.path: e for e in sources.archive_entries(wheel, max_bytes=1024 * 1024)}
    assert "bomb/data.py" not in opened and "bomb/__init__.py" in opened
    bomb = entries["bomb/data.py"]
    assert bomb.kind == "too-large" and bomb.size == 8 * 1024 * 1024 and bomb.sha256 is None
    assert "not read, not hashed" in bomb.error
    code, report, _ = run_audit("--wheel", str(wheel), "--max-file-size", str(1024 * 1024), cwd=tmp_path)
    assert code == 1 and [r["path"] for r in findings(report, "readability")] == ["bomb/data.py"]


def test_folder_symlinks_are_listed_like_file_symlinks(tmp_path):
    tree = tmp_path / "plain"
    (tree / "pkg").mkdir(parents=True)
    (tree / "pkg" / "a.py").write_text("x = 1\n")
    os.symlink(REFERENCE, tree / "pkg" / "linked_ref")
    os.symlink(tree / "pkg" / "a.py", tree / "pkg" / "b.py")
    entries = {e.path: e for e in sources.walk_entries(tree, "tree")}
    assert entries["pkg/linked_ref"].kind == "symlink" and str(REFERENCE) in entries["pkg/linked_ref"].error
    assert entries["pkg/b.py"].kind == "symlink"
    assert not any(p.startswith("pkg/linked_ref/") for p in entries)          # never followed
    code, report, _ = run_audit("--tree", str(tree))
    assert code == 0
    kinds = {r["path"]: r["kind"] for r in report["sections"]["manifest"]}
    assert kinds["pkg/linked_ref"] == "symlink"


def test_history_blobs_over_the_bound_are_never_read(tmp_path):
    import subprocess
    repo = tmp_path / "repo"
    repo.mkdir()
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t"}
    (repo / "small.py").write_text("x = 1\n")
    (repo / "big.py").write_text("y = 2\n" * 1000)
    for cmd in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "c"]):
        subprocess.run(["git", *cmd], cwd=repo, env=env, check=True)
    entries = {e.plain_path: e for e in sources.history_entries(repo, max_bytes=1000)}
    assert entries["big.py"].kind == "too-large" and entries["big.py"].size == 6000
    assert entries["small.py"].kind == "code" and entries["small.py"].text == "x = 1\n"


def test_an_archive_of_many_members_under_the_bound_stops_at_its_total_bound(tmp_path):
    wheel = tmp_path / "many-0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("many/__init__.py", "x = 1\n")
        for k in range(100):
            zf.writestr(f"many/m{k:03d}.py", b"#" * 900)      # each under a 1000-byte bound
    entries = sources.archive_entries(wheel, max_bytes=1000)    # total bound 64 x 1000 bytes
    read = [e for e in entries if e.kind == "code"]
    refused = [e for e in entries if e.kind == "too-large"]
    assert len(read) == 72 and len(refused) == 29     # 6 + 71 x 900 bytes fit in 64,000; the 72nd would not
    assert all("inflate past 64000 bytes in all" in e.error for e in refused)
