"""Unit tests of the audit sections: licences, import boundary, prefilter, text, identity.

Every licence text here is a few lines written for these tests (only the
"ACADEMIC PUBLIC LICENSE" heading and the "Academic Free License" title
are the real names the recogniser must tell apart).
"""
from __future__ import annotations

import random
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from esverify.audit import identity, imports, provenance, similarity, sources, text

FIXTURES = Path(__file__).parent / "fixtures" / "audit"

APL = """                 ACADEMIC PUBLIC LICENSE
Test text. Use is allowed for non-commercial purposes only; a commercial
licence must be bought from the holder.
"""
APL_NO_TERMS = "ACADEMIC PUBLIC LICENSE\nTest text with no use restriction stated.\n"
AFL = """Academic Free License ("AFL") v. 3.0
Test text. This Academic Free License applies to any original work of
authorship; commercial use is allowed.
"""
APACHE = "                                 Apache License\n                           Version 2.0, January 2004\n"


@pytest.mark.parametrize("text_, name, noncommercial", [
    (APL, "Academic Public License (noncommercial)", True),
    ((FIXTURES / "reference" / "LICENSE.txt").read_text(), "Academic Public License (noncommercial)", True),
    (APL_NO_TERMS, "Academic Public License heading, noncommercial terms not found (unverified)", None),
    (AFL, "Academic Free License 3.0 (AFL)", False),
    (APACHE, "Apache-2.0", False),
    ("Permission is hereby granted, free of charge, to any person (test)", "MIT", False),
    ("All rights reserved. Nothing else here.", "unrecognised", None),
    # "Academic Public License" in running prose is not the heading.
    ("This project is not under the Academic Public License; see AUTHORS.", "unrecognised", None),
])
def test_licence_recognition(text_, name, noncommercial):
    assert provenance.recognise_licence(text_) == (name, noncommercial)


def test_afl_mentioning_noncommercial_is_still_afl():
    assert provenance.recognise_licence(AFL + "Unlike noncommercial licences, ...")[0].startswith(
        "Academic Free License")


def test_reference_provenance_git_commit_and_dirty_flag(tmp_path):
    import shutil
    import subprocess
    ref = tmp_path / "ref"
    shutil.copytree(FIXTURES / "reference", ref)
    git = ["git", "-C", str(ref), "-c", "user.name=t", "-c", "user.email=t@example.org", "-c",
           "commit.gpgsign=false"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "init"], check=True)
    row = provenance.describe_root("reference", ref)
    head = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    assert (row["commit"], row["dirty"], row["licence_file"]) == (head, False, "LICENSE.txt")
    (ref / "run_lattice.py").write_text("changed\n")
    assert provenance.describe_root("reference", ref)["dirty"] is True


# -- import boundary ---------------------------------------------------------------

def scan(path: str, src: str, names=frozenset({"lattice_tools"})):
    return [(line, cls, kind) for line, cls, kind, _ in imports.scan_file(path, src, set(names))]


@pytest.mark.parametrize("src, expected", [
    ("import numpy, json\nfrom esverify.es import trainer\n", []),
    ("import es_at_scale.utils.worker_extension as we\n", [(1, "bad", "reference import")]),
    ("from torch import nn\nfrom somewhere.reward_shaping import z_score\n", [(2, "bad", "reference import")]),
    ("import lattice_tools\n", [(1, "bad", "reference import")]),
    ("from numpy.lattice_tools import x\n", []),  # ref-derived names match the top level only
    ("from esverify.references.es_awd.child import driver\n", [(1, "bad", "oracle area in-process")]),
    ("from oracles import child_server\n", [(1, "bad", "oracle area in-process")]),
    ("import oracles.child_server\n", [(1, "bad", "oracle area in-process")]),
    ("import importlib\nm = importlib.import_module('esverify.references.eggroll.child.driver')\n",
     [(2, "bad", "oracle area in-process")]),
    ("import importlib\nm = importlib.import_module('esverify.rng')\n", []),
    ("import importlib\nm = importlib.import_module(name)\n", [(2, "review", "computed import")]),
    ("m = __import__(f'x{y}')\n", [(1, "review", "computed import")]),
    ("from importlib.util import spec_from_file_location as sf\nfrom esverify.paths import oracles_dir\n"
     "s = sf('d', oracles_dir() / 'driver.py')\n", [(3, "bad", "oracle area in-process")]),
    ("import importlib.util\ns = importlib.util.spec_from_file_location('m', '/x/lattice_tools/a.py')\n",
     [(2, "bad", "reference load by path")]),
    ("import importlib.util\ns = importlib.util.spec_from_file_location('m', p)\n", [(2, "review", "load by path")]),
    ("import runpy\nrunpy.run_path(p)\n", [(2, "review", "load by path")]),
    ("exec(open(p).read())\n", [(1, "review", "exec of computed code")]),
    ("exec('x = 1')\n", []),
    ("import sys\nsys.path.insert(0, clone)\n", [(2, "review", "sys.path edit")]),
    ("import sys\nsys.path = [clone]\n", [(2, "review", "sys.path edit")]),
    ("import subprocess, sys\nsubprocess.run([sys.executable, oracles_dir() / 'd.py'])\n",
     [(2, "child", "oracle child launch")]),
    ("def broken(:\n", [(1, "review", "not parsed")]),
    # Computed names resolved through module-level literal tables (registry pattern).
    ("import importlib\nT = {'a': ('esverify.rng.x', 'f')}\ndef g(k):\n    mod, attr = T[k]\n"
     "    return importlib.import_module(mod)\n", [(5, "resolved", "resolved import")]),
    ("import importlib\nT = {'a': 'esverify.x:f', 'b': 'es_at_scale.y:g'}\ndef g(k):\n"
     "    mod, attr = T[k].split(':')\n    return importlib.import_module(mod)\n", [(5, "bad", "reference import")]),
    ("import importlib\nT = {'a': 'oracles.d'}\nm = importlib.import_module(T['a'])\n",
     [(3, "bad", "oracle area in-process")]),
    ("import importlib\nT = {'a': 'json'}\ndef g(k):\n    m = T[k]\n    m = k\n"
     "    return importlib.import_module(m)\n", [(6, "review", "computed import")]),
    ("import importlib\ndef g(self):\n    mod, attr = self.kernels['x'].split(':')\n"
     "    return importlib.import_module(mod)\n", [(4, "review", "computed import")]),
])
def test_import_scanner(src, expected):
    assert scan("esverify/oracle/runner.py", src) == expected


def test_scan_areas_tests_are_data_and_oracle_area_is_listed():
    entries = [sources.classify("tree", "tests/standins/esverify/x.py", b"import es_at_scale\n"),
               sources.classify("tree", "examples/demo.py", b"import es_at_scale\n"),
               sources.classify("tree", "oracles/driver.py",
                                b"import sys\nsys.path.insert(0, c)\nimport es_at_scale\n"),
               sources.classify("wheel:x", "esverify/references/es_awd/child/driver.py", b"import worker_extension\n"),
               sources.classify("tree", "esverify/ok.py", b"import json\n")]
    frame = imports.scan(entries, set())
    assert list(zip(frame["file"], frame["status"])) == [
        ("esverify/references/es_awd/child/driver.py", "listed"), ("oracles/driver.py", "listed"),
        ("oracles/driver.py", "listed")]


def test_reference_module_names_skip_stdlib_and_packaging():
    entries = [sources.classify("ref", p, b"x = 1\n") for p in
               ("pkg/utils/worker.py", "setup.py", "json.py", "pkg/__init__.py", "docs/readme.md")]
    names, excluded = imports.reference_module_names(entries)
    assert names == {"pkg", "utils", "worker"}
    assert excluded == ["__init__", "json", "setup"]


def test_the_built_in_reference_module_names_come_from_the_records():
    """The names the import scan looks for with no --ref: the references' own top-level modules (each
    record's clone_modules: es-at-scale's and es-awd's, and those of records added since); es-awd's
    generic `es` is not among them."""
    from esverify import registry
    names = imports.builtin_reference_modules()
    assert names == registry.clone_modules()
    assert {"es_at_scale", "es_trainer", "worker_extension", "reward_shaping", "weight_update_utils",
            "distributed_utils"} <= names and "es" not in names
    assert scan("esverify/x.py", "import weight_update_utils\nfrom es_at_scale.utils import worker_extension\n"
                "import es\n", names=frozenset()) == [(1, "bad", "reference import"), (2, "bad", "reference import")]


# -- similarity: the prefilter never drops a pair copydetect would flag ---------------

LINES = ["total = 0", "for item in values:", "    total += item * weight", "if total > limit:",
         "    return total", "result = compute(a, b, c)", "data = [x ** 2 for x in range(n)]",
         "print('done', count)", "while queue:", "    node = queue.pop()", "try:", "    run()",
         "except ValueError:", "    pass", "value = mapping.get(key, default)", "x, y = y, x + y"]


def _doc(rng: random.Random, n: int) -> str:
    return "\n".join(rng.choice(LINES) for _ in range(n)) + "\n"


def _fps(docs, origin):
    out = []
    for i, d in enumerate(docs):
        e = sources.classify(origin, f"f{i}.py", d.encode())
        out.append(similarity.fingerprint(e))
    return out


@settings(max_examples=15)
@given(st.integers(0, 2 ** 32 - 1), st.integers(5, 40), st.integers(20, 400))
def test_prefilter_is_exact(seed, n_lines, min_tokens):
    rng = random.Random(seed)
    ref_docs = [_doc(rng, rng.randint(3, n_lines)) for _ in range(4)]
    tree_docs = [_doc(rng, rng.randint(3, n_lines)) for _ in range(3)]
    tree_docs.append(ref_docs[0][: len(ref_docs[0]) // 2] + _doc(rng, 5))  # a partial copy
    tree_fps = _fps(tree_docs, "tree")
    ref_fps = [("ref", f) for f in _fps(ref_docs, "ref")]
    fast, stats = similarity.compare(tree_fps, ref_fps, threshold=0.3, min_tokens=min_tokens)
    slow, _ = similarity.compare(tree_fps, ref_fps, threshold=0.3, min_tokens=min_tokens, prefilter=False)
    assert fast.equals(slow)
    assert stats["compared"] + stats["prefiltered_out"] == stats["pairs"] == 16


def test_line_ranges_of_a_copied_block():
    ref_src = (FIXTURES / "reference" / "lattice_tools" / "ring_buffer.py").read_text()
    body = ref_src.splitlines()
    tree_src = "import os\n\n\n" + "\n".join(body[3:30]) + "\n"
    (tf,) = _fps([tree_src], "tree")
    (rf,) = _fps([ref_src], "ref")
    frame, _ = similarity.compare([tf], [("ref", rf)])
    row = frame.iloc[0]
    assert row["status"] == "finding"
    assert row["tree_lines"].split("-")[0] in ("4", "5") and row["ref_lines"].split("-")[0] in ("4", "5")


# -- text -------------------------------------------------------------------------

def test_text_pieces_python_shell_notebook():
    py = sources.classify("t", "a.py", b'"""Module doc."""\nx = "not a doc"  # trailing note\n# own line\n')
    assert text.words_of(py)[0] == ["module", "doc", "trailing", "note", "own", "line"]
    sh = sources.classify("t", "run", b"#!/bin/bash\n# say hello\necho hi  # inline\n")
    assert sh.kind == "code" and text.words_of(sh)[0] == ["say", "hello", "inline"]
    nb = sources.classify("t", "n.ipynb", b'{"cells": [{"cell_type": "markdown", "source": ["Big title"]},'
                          b'{"cell_type": "code", "source": ["%time x = 1\\n", "y = 2  # why"]}]}')
    assert nb.kind == "code" and nb.notebook
    assert "%time" not in nb.text.replace("# %time", "")
    assert text.words_of(nb)[0][-2:] == ["big", "title"]


def test_text_runs_and_licence_files_excluded():
    shared = " ".join(f"w{i}" for i in range(40))
    ref = [("r", sources.classify("r", "notes.md", f"intro\n{shared}\n".encode())),
           ("r", sources.classify("r", "LICENSE", f"{shared}\n".encode()))]
    tree = [sources.classify("t", "doc.md", f"other words here\n{shared}\nend\n".encode()),
            sources.classify("t", "LICENCE", f"{shared}\n".encode()),
            sources.classify("t", "short.md", " ".join(shared.split()[:20]).encode())]
    frame, _ = text.compare(tree, ref, min_words=30)
    assert list(zip(frame["tree_file"], frame["status"], frame["longest_run_words"])) == [
        ("doc.md", "finding", 40), ("short.md", "below threshold", 20)]
    assert frame.iloc[0]["tree_lines"] == "2" and frame.iloc[0]["ref_lines"] == "2"


# -- identity ---------------------------------------------------------------------

def test_identity_trivial_rules():
    big = b"x = 1\n" * 20
    ref = [("r", sources.classify("r", "a.py", big)), ("r", sources.classify("r", "e.py", b"")),
           ("r", sources.classify("r", "ws.py", b" \n" * 40))]
    tree = [sources.classify("t", "copy.py", big), sources.classify("t", "empty.py", b""),
            sources.classify("t", "blank.py", b" \n" * 40), sources.classify("t", "other.py", big + b"#")]
    frame = identity.compare(tree, ref)
    assert list(zip(frame["status"], frame["tree_file"])) == [
        ("finding", "copy.py"), ("trivial", "blank.py"), ("trivial", "empty.py")]
    assert identity.is_trivial(b"a" * 63) and not identity.is_trivial(b"a" * 64)


def test_unreadable_file_is_listed(tmp_path, monkeypatch):
    (tmp_path / "a.py").write_text("x = 1\n")
    real = open

    def deny(path, *args, **kwargs):
        if Path(path).name == "a.py":
            raise PermissionError(13, "Permission denied")
        return real(path, *args, **kwargs)
    monkeypatch.setattr(sources, "open", deny, raising=False)    # sources reads with open(), capped
    (entry,) = sources.walk_entries(tmp_path, "tree")
    assert entry.kind == "unreadable" and "Permission denied" in entry.error


@pytest.mark.parametrize("src, expected", [
    # A name rebound in any other way than one `=` cannot be resolved: review, never "resolved to json".
    ("import importlib\ndef g():\n    name = 'json'\n    for name in ['es_trainer']:\n        pass\n"
     "    return importlib.import_module(name)\n", [(6, "review", "computed import")]),
    ("import importlib\ndef g():\n    name = 'es'\n    name += '_trainer'\n    return importlib.import_module(name)\n",
     [(5, "review", "computed import")]),
    ("import importlib\ndef g():\n    name = 'json'\n    (name := 'es_trainer')\n"
     "    return importlib.import_module(name)\n", [(5, "review", "computed import")]),
    ("import importlib\ndef g():\n    name = 'json'\n    with f() as name:\n        pass\n"
     "    return importlib.import_module(name)\n", [(6, "review", "computed import")]),
    # A module-level table changed in place is not a literal any more.
    ("import importlib\nT = {'a': 'json'}\nT['b'] = 'es_trainer'\ndef g(k):\n"
     "    return importlib.import_module(T[k])\n", [(5, "review", "computed import")]),
    ("import importlib\nT = {'a': 'json'}\nT.update(b='es_trainer')\ndef g(k):\n"
     "    return importlib.import_module(T[k])\n", [(5, "review", "computed import")]),
    # exec of a literal is static code: scanned like the file.
    ("exec('import es_trainer')\n", [(1, "bad", "reference import")]),
    ("import sys\nsys.path += [clone]\n", [(2, "review", "sys.path edit")]),
])
def test_import_scanner_does_not_resolve_rebound_names(src, expected):
    assert scan("esverify/oracle/runner.py", src) == expected


def test_table_changed_by_another_package_module_is_not_trusted():
    table = sources.classify("tree", "esverify/reg.py", b"import importlib\nT = {'a': 'json'}\n"
                             b"def g(k):\n    return importlib.import_module(T[k])\n")
    other = sources.classify("tree", "esverify/plug.py", b"from esverify import reg\nreg.T['b'] = 'es_trainer'\n")
    assert list(imports.scan([table], set())["status"]) == ["info"]
    frame = imports.scan([table, other], set())
    assert list(zip(frame["file"], frame["status"], frame["kind"])) == [
        ("esverify/reg.py", "review", "computed import")]


def test_fingerprinting_leaves_the_root_logger_level_alone():
    import logging
    root = logging.getLogger()
    before = root.level
    root.setLevel(logging.INFO)
    try:
        similarity.fingerprint(sources.classify("t", "a.py", b"def f(x):\n    return x + 1\n"))
        assert root.level == logging.INFO
    finally:
        root.setLevel(before)


def test_archive_provenance_flags_a_noncommercial_licence(tmp_path):
    entries = [sources.classify("wheel:x", "x-0.dist-info/licenses/LICENSE", APL.encode()),
               sources.classify("wheel:x", "x-0.dist-info/METADATA", b"Name: x\nLicense: other\n")]
    row = provenance.describe_archive(tmp_path / "x-0-py3-none-any.whl", entries)
    assert (row["licence"], row["noncommercial"], row["declared_licence"]) == (
        "Academic Public License (noncommercial)", True, "other")
    apache = [sources.classify("wheel:x", "x-0.dist-info/LICENSE", APACHE.encode())]
    assert provenance.describe_archive(tmp_path / "x.whl", apache)["noncommercial"] is False
