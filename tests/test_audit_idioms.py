"""The audit judges the audited file's own tokens (docs/audit.md, "Interface regions" and "Idioms").

- declarations recognised by their kind, whatever the interface data lists: imports below the module's
  top level, a method's stores of its own parameters, third-party configuration calls;
- a finding needs a copied region holding >= min_tokens tokens of *our* file that are neither
  interface nor idiom: the reference's side of a region is evidence, not a reason to fail;
- idioms are short pieces made of shapes of a base-code corpus (the interpreter's standard library,
  indexed once and cached by its version);
- the console's first screen fits 40 lines of at most 160 characters and names every finding; the
  HTML's first screen (its header and the `findings` section) names every file with a finding.
"""
from __future__ import annotations

import json
import os
import re
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from esverify.audit import corpus, interface, similarity, sources
from esverify.audit.run import AuditOptions, run_audit
from esverify.cli import main

ROOT = Path(__file__).resolve().parents[1]
SMOOTHER = ROOT / "tests" / "fixtures" / "audit" / "reference" / "lattice_tools" / "spectral_smoother.py"


def labels(text: str, entries=()) -> list[str]:
    return [d.label for d in interface.declarations(text, list(entries))]


# ------------------------------------------------------------------ declarations by kind

KINDS = '''import os
import json
from peft import LoraConfig
import torch as T


def launch(master, port, rank, world):
    from vllm.distributed.utils import StatelessProcessGroup
    import numpy as np
    return StatelessProcessGroup.create(host=master, port=port, rank=rank)


class Trainer:
    def __init__(self, sigma, alpha, seeds):
        self.sigma = sigma
        self.alpha: float = alpha
        self.seeds = list(seeds)
        self.beta = alpha
        self.count = 0

    def setup(self, folder):
        self.folder = folder
        config = LoraConfig(r=8, lora_alpha=16, target_modules=["q_proj", "v_proj"], bias="none",
                            task_type=T.float32, dropout=-0.5)
        other = LoraConfig(r=self.rank + 1)
        parsed = json.loads(folder, strict=False)
        spread = LoraConfig(**self.options)
        return config, other, parsed, spread
'''


def test_nested_imports_parameter_stores_and_configuration_calls_are_interface_by_kind():
    found = labels(KINDS)
    assert found == [
        "from vllm.distributed.utils import StatelessProcessGroup (nested import)",
        "import numpy as np (nested import)",
        "call StatelessProcessGroup.create(host=, port=, rank=) of vllm",
        "__init__ stores self.sigma", "__init__ stores self.alpha",
        "setup stores self.folder",
        "call LoraConfig(r=, lora_alpha=, target_modules=, bias=, task_type=, dropout=) of peft"]
    # not interface: the top-level imports (the data lists those), `self.seeds = list(seeds)` (a call),
    # `self.beta = alpha` (another name), a constant store, a computed keyword (`self.rank + 1`), a
    # standard-library call (json), a call spreading `**options`


def test_a_kind_inside_a_listed_declaration_is_not_listed_twice():
    entry = {"file": "m.py", "functions": {"f": [{"name": "a", "default": "LoraConfig(r=1)"}]}}
    text = "from peft import LoraConfig\n\n\ndef f(a=LoraConfig(r=1)):\n    import os\n"
    assert labels(text, [("toy", entry)]) == ["def f(a=LoraConfig(r=1))", "import os (nested import)"]


# ------------------------------------------------------------------ our side decides

def _pair(tree_text: str, ref_text: str, data: dict | None = None, base=None):
    tree = sources.classify("tree", "pkg/mine.py", tree_text.encode())
    ref = sources.classify("ref1:x", "theirs.py", ref_text.encode())
    frame, _ = similarity.compare([similarity.fingerprint(tree)], [("ref1:x", similarity.fingerprint(ref))],
                                  interface=interface.Classifier(data or {}, corpus=base))
    return frame


IMPORTS = "".join(f"    from vendor.pkg{i}.sub import thing_{i}\n" for i in range(14))


def test_the_references_side_of_a_region_is_evidence_our_side_decides():
    """The same 14 imports: nested in our function (interface by kind) and at the reference's top level,
    which no data lists (not interface there). Our side holds no own token: not a finding. The other way
    round (our top-level imports, the reference's nested ones) it is, with our lines."""
    nested = "def load():\n" + IMPORTS + "    return None\n"
    top = "import os\n" + IMPORTS.replace("    from", "from") + "\n\ndef other(x):\n    return x * 2\n"
    frame = _pair(nested, top)
    row = frame.iloc[0]
    assert row["status"] == "interface" and row["our_tokens"] == 0
    assert row["not_interface"].startswith("ref 2:1-15:")    # the reference's tokens: shown, not counted
    row = _pair(top, nested).iloc[0]
    assert row["status"] == "finding" and row["our_tokens"] >= similarity.DEFAULT_MIN_TOKENS
    assert row["our_lines"] == "2-15"


# ------------------------------------------------------------------ the base-code corpus

def test_window_hashes_are_a_stable_rolling_hash():
    h = corpus.window_hashes("abcd", 2)
    base = 1_000_003
    assert h.tolist() == [(ord("a") * base + ord("b")) % 2 ** 64, (ord("b") * base + ord("c")) % 2 ** 64,
                          (ord("c") * base + ord("d")) % 2 ** 64]
    assert corpus.window_hashes("abc", 4).tolist() == []


def test_idiom_mask_marks_exactly_the_windows_found_in_the_corpus():
    known = np.unique(corpus.window_hashes("xyzXYZ", 3))
    mask = corpus.idiom_mask("aaxyzbbXYZ", known, 3)
    assert mask.tolist() == [False, False, True, True, True, False, False, True, True, True]


def _fake_stdlib(root: Path) -> Path:
    (root / "pkg").mkdir(parents=True)
    (root / "test").mkdir()
    (root / "site-packages").mkdir()
    (root / "a.py").write_text("import os\nfor start in range(0, len(items), size):\n"
                               "    x = items[start:start + size]\n")
    (root / "pkg" / "b.py").write_text("def f(a):\n    return a\n")
    (root / "test" / "t.py").write_text("raise SystemExit\n")
    (root / "site-packages" / "s.py").write_text("raise SystemExit\n")
    return root


def test_the_corpus_is_indexed_once_and_read_back_keyed_by_its_files(tmp_path, monkeypatch):
    monkeypatch.setenv("ESVERIFY_CACHE", str(tmp_path / "cache"))
    root = _fake_stdlib(tmp_path / "lib")
    assert [p.relative_to(root).as_posix() for p in corpus.stdlib_files(root)] == ["a.py", "pkg/b.py"]
    first = corpus.stdlib(8, root)
    again = corpus.stdlib(8, root)
    assert (first.loaded, again.loaded) == (False, True) and Path(first.cache).is_file()
    assert np.array_equal(first.hashes, again.hashes) and first.files == 2
    assert first.size == sum(p.stat().st_size for p in corpus.stdlib_files(root))
    assert again.describe().startswith(f"Python {__import__('platform').python_version()} standard library "
                                       f"({root}): 2 files")
    assert Path(first.cache).name.startswith(f"audit-corpus-stdlib-{__import__('sys').implementation.name}")
    (root / "pkg" / "b.py").write_text("def f(a, b):\n    return a + b\n")   # another corpus: another key
    changed = corpus.stdlib(8, root)
    assert changed.loaded is False and changed.cache != first.cache


def test_an_unwritable_cache_only_costs_the_index(tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv("ESVERIFY_CACHE", str(blocker / "cache"))
    base = corpus.stdlib(8, _fake_stdlib(tmp_path / "lib"))
    assert base.cache == "" and len(base.hashes) and "(no cache)" in base.describe()


CODE = '''def combine(values, weights, offset):
    total = 0.0
    for value, weight in zip(values, weights):
        total += value * weight - offset
        if total > 10:
            total = total / 2 + offset * 3
    return total * len(values) ** 0.5
'''
IDIOM = '''    for start in range(0, len(members), args.num_engines):
        batch = members[start:start + args.num_engines]
'''


def test_a_short_piece_made_of_base_code_shapes_is_an_idiom_and_is_not_counted(tmp_path):
    """One shared region: a function of ours (about 120 tokens), a nested import (interface), then a batch
    loop (38 tokens). With a corpus that holds the loop's shape, the loop is an idiom: listed, not counted,
    and the region's own tokens fall under the minimum; without the corpus they reach it. A long piece (the
    function) is never an idiom, even when the corpus holds its shape."""
    text = CODE + "\n\ndef walk(members, args):\n    from vendor.tools import engine_pool, member_batches\n" + IDIOM
    loop = corpus.filtered_text(IDIOM)
    base = corpus.Corpus("toy", "-", 1, 1, np.unique(corpus.window_hashes(loop, 25)), "", True, 25)
    plain = _pair(text, text).iloc[0]
    idiom = _pair(text, text, base=base).iloc[0]
    assert plain["status"] == "finding" and plain["our_tokens"] >= similarity.DEFAULT_MIN_TOKENS
    assert idiom["status"] == "interface" and idiom["our_tokens"] == plain["our_tokens"] - len(loop)
    assert idiom["idioms"].startswith("tree 12:5-13:")
    whole = corpus.Corpus("toy", "-", 1, 1, np.unique(corpus.window_hashes(corpus.filtered_text(text), 25)),
                          "", True, 25)
    assert _pair(text, text, base=whole).iloc[0]["our_tokens"] == idiom["our_tokens"]


def test_the_standard_library_holds_the_idioms_any_file_has():
    """The real corpus: shapes the issue names are in it (a batch loop over a list, a folder made)."""
    base = corpus.stdlib()
    for snippet in ("for i in range(0, len(items), batch_size):\n    batch = items[i:i + batch_size]\n",
                    "try:\n    x = f(y)\nexcept Exception as exc:\n    print(f'failed: {exc}')\n"):
        filtered = corpus.filtered_text(snippet)
        # at least half: what makes a short piece an idiom (measured with CPython 3.11's: 1.0 and 0.81)
        assert corpus.idiom_mask(filtered, base.hashes, base.k).mean() >= 0.5, filtered


# ------------------------------------------------------------------ one screen

def _many_findings(tmp_path: Path, n: int) -> Path:
    body = SMOOTHER.read_text()
    tree = tmp_path / "tree"
    for i in range(n):
        path = tree / "pkg" / f"copied_module_with_a_rather_long_name_number_{i:03d}" / "implementation_file.py"
        path.parent.mkdir(parents=True)
        path.write_text(body)
    return tree


def test_the_console_first_screen_fits_40_lines_of_160_characters(tmp_path):
    tree = _many_findings(tmp_path, 45)
    out = tmp_path / "rep"
    result = CliRunner().invoke(main, ["audit", "--tree", str(tree), "--ref", str(SMOOTHER.parents[1]),
                                       "--out", str(out), "--format", "json,html"])
    assert result.exit_code == 1, result.output
    lines = result.output.splitlines()
    assert len(lines) <= 40 and max(map(len, lines)) <= 160, (len(lines), max(map(len, lines)))
    assert lines[0].startswith("esverify audit: FINDING (exit 1): ")
    shown = [line for line in lines if line.startswith("  similarity: ")]
    assert len(shown) >= 20 and all(" ~ ref1:reference lattice_tools/spectral_smoother.py: " in s for s in shown)
    assert re.search(r": 1\.00, \d+ tokens, lines \d+-\d+$", shown[0]), shown[0]
    assert any(re.match(r"  \.\.\. \d+ more finding\(s\)", line) for line in lines)
    assert lines[-1] == f"report: {out} (2 files; exit 1)"
    # the HTML's first screen: its header's reason names every file with a finding, and the findings
    # section comes right after the summary
    doc = json.loads((out / "audit.json").read_text())
    files = {r["tree_file"] for r in doc["sections"]["similarity"] if r["status"] == "finding"}
    assert len(files) >= 45
    html = (out / "audit.html").read_text()
    head = html[:html.index("<h2")]   # the header table, before the first section
    assert all(f in doc["reason"] and f in head for f in files)
    assert list(doc["sections"])[:3] == ["summary", "findings", "similarity"]
    assert {r["file"] for r in doc["sections"]["findings"]} >= files


def test_a_clean_audit_names_its_base_code_on_the_first_screen(tmp_path, monkeypatch):
    tree = tmp_path / "tree"
    (tree / "pkg").mkdir(parents=True)
    (tree / "pkg" / "own.py").write_text(CODE)
    result = CliRunner().invoke(main, ["audit", "--tree", str(tree), "--ref", str(SMOOTHER.parents[1]),
                                       "--out", str(tmp_path / "rep"), "--format", "json"])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert re.fullmatch(f"base code \\(idioms listed, not counted\\): Python "
                        f"{__import__('platform').python_version()} standard library: \\d+ files, [0-9.]+ MB", lines[2])
    doc = json.loads((tmp_path / "rep" / "audit.json").read_text())
    assert doc["reason"].startswith("no finding; 0 pair(s) share only interface and idioms")
    assert "standard library" in doc["metadata"]["parameters"]["base-code corpus"]

