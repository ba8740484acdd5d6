"""The audit tells a shared interface from shared code (docs/audit.md, "Interface regions").

The references are never used here (clean room). Their stand-ins
(tests/standins/) share the references' interface by design; the tests
audit them against *interface-only references* generated from the
interface data (tests/audit_interface_refs.py: every declaration the data
lists, bodies of our own), which share with a stand-in exactly what a real
clone shares with it by design. Planted copies come from the project's own
fixture reference (tests/fixtures/audit/reference/).

- interface-only regions are `interface` (not findings), listing the
  declarations they consist of; the whole repository audits clean;
- a reference function body (verbatim, or renamed and reformatted), a
  comment block or a docstring planted into any stand-in is a finding;
- the classification's parts have known answers (declarations found,
  filtered-token positions equal copydetect's own filtered text).
"""
from __future__ import annotations

import ast
import collections
import json
import re
import shutil
import textwrap
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner

import audit_interface_refs as gen
from esverify.audit import interface, similarity, sources
from esverify.audit.filtered import filtered_positions
from esverify.audit.run import AuditOptions, run_audit
from esverify.cli import main

ROOT = Path(__file__).resolve().parents[1]
STANDINS = ROOT / "tests" / "standins"
FIXTURES = ROOT / "tests" / "fixtures" / "audit"
SMOOTHER = FIXTURES / "reference" / "lattice_tools" / "spectral_smoother.py"
RENAMED = FIXTURES / "variants" / "renamed.py"
DATA = interface.load_shipped()


@pytest.fixture(scope="module", autouse=True)
def _fingerprint_each_text_once():
    """copydetect's fingerprint of a file is a function of its language, text and the k and window asked
    for (the name is only stored, as `filename`, which the audit never reads): this file's audits
    fingerprint the same generated clones and stand-ins dozens of times (every planted-copy test audits
    against every clone, the whole repository holds the stand-ins again), so each distinct input is
    fingerprinted once and every later audit gets the same fingerprint under its own entry. Nothing
    downstream changes a fingerprint (copydetect's comparisons and the interface classification only read
    it); a text the lexer refuses still raises every time."""
    real, memo = similarity.fingerprint, {}

    def once(entry, k=similarity.DEFAULT_K, window=similarity.DEFAULT_WINDOW, drop_low_entropy=True):
        key = (entry.language, entry.text, k, window, drop_low_entropy)
        if key not in memo:
            memo[key] = real(entry, k, window, drop_low_entropy)
        held = memo[key]
        return similarity.Fingerprint(entry, held.fp, list(held.line_starts))

    # The interface classification lexes (filtered positions) and parses (declarations) each file of a
    # pair again in every audit: the same stand-ins and clones, test after test. Both answers are functions
    # of the text (and of the data entries asked for) alone, so each is reused, as a fresh list; the planted
    # copies, each met once, would only fill memory, so the memo keeps the most recently used texts.
    recent: collections.OrderedDict = collections.OrderedDict()

    def reuse(key, compute, size=160):
        if key in recent:
            recent.move_to_end(key)
        else:
            recent[key] = compute()
            if len(recent) > size:
                recent.popitem(last=False)
        return recent[key]

    def positions_once(text, language):
        def compute():
            filtered, where = real_positions(text, language)
            return filtered, tuple(where)
        filtered, where = reuse(("positions", text, language), compute)
        return filtered, list(where)

    def declarations_once(text, entries):
        return list(reuse(("declarations", text, json.dumps(entries)),
                          lambda: tuple(real_declarations(text, entries))))
    real_positions, real_declarations = interface.filtered_positions, interface.declarations
    patch = pytest.MonkeyPatch()
    patch.setattr(similarity, "fingerprint", once)
    patch.setattr(interface, "filtered_positions", positions_once)
    patch.setattr(interface, "declarations", declarations_once)
    yield
    patch.undo()


@pytest.fixture(scope="module")
def refs(tmp_path_factory) -> list[Path]:
    """One generated clone per reference (those the interface data holds, and the skill page's sample), each
    sharing with its stand-in what a real clone shares: the interface and the kinds of
    tests/audit_interface_refs.py."""
    root = tmp_path_factory.mktemp("interface_refs")
    out = []
    for n, name in enumerate(gen.references(DATA)):
        clone = root / f"ref{n}"
        gen.write_reference(clone, name, DATA)
        out.append(clone)
    return out


def standin_files() -> list[Path]:
    """Stand-in files the interface data lists (by path suffix), for every reference in the data."""
    found = []
    for path in sorted(STANDINS.rglob("*.py")):
        rel = path.relative_to(STANDINS).as_posix().split("/", 1)[-1]
        if interface.references_in([rel], DATA):
            found.append(path)
    return found


def audit(tree: Path, refs: list[Path]):
    result = run_audit(AuditOptions(tree=tree, refs=refs))
    return result, result.sections["similarity"]


# ------------------------------------------------------------------ known answers

SOURCE = '''"""Doc."""
import os
import numpy as np
from typing import List, Any
import json

LIMIT = 3
OTHER = 4


@dataclass
class Args:
    name: str = "x"
    size: int = 2

    def run(self, seed, scale=1.0):
        return seed


def main(args, *, quiet=False):
    parser = argparse.ArgumentParser(description="d")
    parser.add_argument("--sigma", type=float, default=0.5)
    parser.add_argument("--extra", type=int)
    return parser.parse_args()
'''

ENTRY = {"file": "pkg/mod.py",
         "module_imports": [{"module": "os", "as": "os"}, {"module": "numpy", "as": "np"},
                            {"from": "typing", "name": "List", "as": "List"},
                            {"from": "typing", "name": "Any", "as": "Any"}],
         "functions": {"main": [{"name": "args", "default": None},
                                {"name": "quiet", "default": "False", "keyword_only": True}]},
         "classes": {"Args": {"bases": [], "methods": {"run": [{"name": "self", "default": None},
                                                               {"name": "seed", "default": None},
                                                               {"name": "scale", "default": "1.0"}]}}},
         "dataclass_fields": {"Args": [{"name": "name", "annotation": "str", "default": "'x'"},
                                       {"name": "size", "annotation": "int", "default": "3"}]},
         "argparse_flags": [{"flag": "--sigma", "type": "float", "default": "0.5"}],
         "module_constants": {"LIMIT": 3, "OTHER": 5}}


def test_declarations_are_exactly_the_listed_ones():
    decls = interface.declarations(SOURCE, [("toy", ENTRY)])
    labels = [d.label for d in decls]
    assert labels == ["import os", "import numpy as np", "from typing import List, Any", "constant LIMIT = 3",
                      "class Args", "field Args.name", "def Args.run(self, seed, scale=1.0)",
                      "def main(args, quiet=False)", "argparse parser parser", "flag --sigma",
                      "argparse parser parser (parse)"]
    # not listed, or listed with another value: `import json`, OTHER = 4 (listed 5), size default 2
    # (listed 3), the flag --extra; the class header starts at its bare decorator
    spans = {d.label: (d.start, d.end) for d in decls}
    assert spans["class Args"] == ((11, 0), (12, 11))
    assert SOURCE.splitlines()[19] == "def main(args, *, quiet=False):"
    assert spans["def main(args, quiet=False)"] == ((20, 0), (20, 31))   # to the header's colon


def test_a_declaration_that_differs_from_the_data_is_not_interface():
    changed = json.loads(json.dumps(ENTRY))
    changed["functions"]["main"][0]["name"] = "argv"            # another parameter name
    changed["classes"]["Args"]["methods"]["run"][2]["default"] = "2.0"   # another default
    changed["argparse_flags"][0]["default"] = "0.25"
    changed["module_imports"] = changed["module_imports"][:1]   # only `os` listed
    labels = [d.label for d in interface.declarations(SOURCE, [("toy", changed)])]
    assert labels == ["import os", "constant LIMIT = 3", "class Args", "field Args.name"]


def test_no_entries_or_unparsable_source_has_no_declarations():
    assert interface.declarations(SOURCE, []) == []
    assert interface.declarations("def (:\n", [("toy", ENTRY)]) == []


@pytest.mark.parametrize("path", sorted(STANDINS.rglob("*.py"))[:40], ids=lambda p: p.name)
def test_filtered_positions_reproduce_copydetects_filtered_text(path):
    """Differential: our lexing of every stand-in gives copydetect's own filtered text, and each
    filtered character points at a source token that yields it."""
    entry = sources.classify("tree", path.name, path.read_bytes())
    fp = similarity.fingerprint(entry)
    filtered, where = filtered_positions(entry.text, "python")
    assert filtered == fp.fp.filtered_code
    lines = entry.text.splitlines()
    for ch, (line, col) in zip(filtered, where):
        if ch not in "VFOS\"P":
            assert lines[line - 1][col] == ch or ch.isalpha(), (ch, line, col)


def test_references_are_recognised_by_path_suffix_for_every_reference_in_the_data():
    for name, spec in DATA.items():
        for entry in spec["files"]:
            assert name in interface.references_in([entry["file"]], DATA)
            assert name in interface.references_in(["clone/" + entry["file"]], DATA)
            assert name in interface.references_in([entry["file"].rsplit("/", 1)[-1]], DATA)
    assert interface.references_in(["unrelated/thing.py"], DATA) == []


def test_bad_interface_data_is_a_one_line_usage_error(tmp_path):
    bad = tmp_path / "interfaces.json"
    bad.write_text('{"x": []}')
    with pytest.raises(ValueError, match="interface data .*interfaces.json"):
        interface.load(bad)
    with pytest.raises(ValueError, match="cannot read"):
        interface.load(tmp_path / "missing.json")


# ------------------------------------------------------------------ interface regions

@pytest.mark.slow   # 2 s (--durations, 2026-12-03): out of the fast tier
def test_standins_share_only_interface_with_interface_only_references(tmp_path, refs):
    tree = tmp_path / "tree"
    shutil.copytree(STANDINS, tree / "standins")
    result, sim = audit(tree, refs)
    assert result.findings == 0, sim[sim["status"] == "finding"].to_dict("records")
    shared = sim[sim["status"] == "interface"]
    assert len(shared) >= 1
    # every row names the declarations it consists of; what is neither interface nor idiom on the
    # stand-in's side (an assignment's `V=` before a configuration call) is far below a region
    for _, row in shared.iterrows():
        head, _, items = row["interface"].partition(": ")
        assert head and items.count("; ") >= 3, row["interface"]
        assert row["longest_region_tokens"] >= similarity.DEFAULT_MIN_TOKENS
        assert row["our_tokens"] < 40, row["not_interface"]
    # the stand-ins that carry an argparse block or many imports are among them
    assert {"es.py", "distributed_utils.py"} <= {Path(f).name for f in shared["tree_file"]}
    # the generated clones share each kind a real clone shares, and the audit names each one
    met = "; ".join(shared["interface"])
    assert "(nested import)" in met and " stores self." in met and "call LoraConfig(r=" in met
    assert shared["idioms"].str.contains("tree ").any()


@pytest.mark.slow   # 2 s (--durations, 2026-12-03): out of the fast tier
def test_without_interface_data_the_same_regions_are_findings(tmp_path, refs):
    """The control: the same pairs with empty interface data are findings, so `interface` above is the
    classification's doing, not pairs below the thresholds."""
    tree = tmp_path / "tree"
    shutil.copytree(STANDINS, tree / "standins")
    empty = tmp_path / "none.json"
    empty.write_text("{}")
    result = run_audit(AuditOptions(tree=tree, refs=refs, interfaces=empty))
    sim = result.sections["similarity"].set_index(["tree_file", "ref_file"])
    # the argparse block of es-awd's es.py is listed data: without the data it is the stand-in's own code
    row = sim.loc[("standins/es-awd/es.py", "es.py")]
    assert result.findings >= 1 and row["status"] == "finding" and row["our_tokens"] >= similarity.DEFAULT_MIN_TOKENS


@pytest.mark.slow
def test_the_whole_repository_audits_clean_with_interface_regions_as_evidence(tmp_path, refs):
    """`esverify audit --tree <this repository> --ref <each generated clone>`: exit 0, the interface and
    idiom regions listed, on one screen."""
    out = tmp_path / "rep"
    args = ["audit", "--tree", str(ROOT), *[a for ref in refs for a in ("--ref", str(ref))], "--out", str(out),
            "--format", "json"]
    result = CliRunner().invoke(main, args)
    doc = json.loads((out / "audit.json").read_text())
    sim = pd.DataFrame(doc["sections"]["similarity"])
    assert result.exit_code == 0, sim[sim["status"] == "finding"][["tree_file", "ref_file", "not_interface"]]
    lines = result.output.splitlines()
    assert lines[0].startswith("esverify audit: PASS (exit 0): 0 finding(s)")
    assert len(lines) <= 40 and max(map(len, lines)) <= 160
    shared = sim[sim["status"] == "interface"]
    assert any(re.fullmatch(f"{len(shared)} pair\\(s\\) share only interface and idioms .*", line) for line in lines)
    assert len(shared) and all(f.startswith("tests/standins/") for f in shared["tree_file"])
    assert shared["idioms"].str.contains("tree ").any()
    assert {Path(r).name for r in refs} == {Path(r.split(" ")[0]).name for r in doc["metadata"]["refs"]}
    assert len(refs) == 5
    note = doc["metadata"]["interface"]
    assert "interface data" in note["reason"].lower() and all(str(path) in note["data"] for path in interface.default_paths())
    assert note["base code"].startswith("Python ") and "standard library" in note["base code"]


def test_a_body_planted_in_a_standin_exits_1_naming_the_file(tmp_path, refs):
    """The same stand-in-like clones, one of them with the fixture reference's function body in a declared
    function, and a copy of that stand-in with the body planted in the same function: exit 1, and the
    console's finding line names the file."""
    path = STANDINS / "es-awd" / "es.py"
    node = _first_listed_function(path)
    body = _body_text(SMOOTHER, "smooth_spectrum")
    clone = tmp_path / "ref"
    gen.write_reference(clone, "es-awd", DATA)
    ref_file = clone / "es.py"
    ref_src = ref_file.read_text()
    ref_file.write_text(_replace_body(ref_src, _function(ref_src, node.name), body))
    tree = tmp_path / "tree"
    shutil.copytree(STANDINS / "es-awd", tree / "es-awd")
    (tree / "es-awd" / "es.py").write_text(_replace_body(path.read_text(), node, body))
    result = CliRunner().invoke(main, ["audit", "--tree", str(tree), "--ref", str(clone), "--out",
                                       str(tmp_path / "rep"), "--format", "json"])
    assert result.exit_code == 1, result.output
    named = [line for line in result.output.splitlines() if line.startswith("  similarity: es-awd/es.py ~ ")]
    assert len(named) == 1 and re.search(r": \d\.\d\d, \d+ tokens, lines \d+-\d+$", named[0]), result.output
    doc = json.loads((tmp_path / "rep" / "audit.json").read_text())
    found = {(r["section"], r["file"]) for r in doc["sections"]["findings"]}
    assert ("similarity", "es-awd/es.py") in found and {f for _, f in found} == {"es-awd/es.py"}
    assert "es-awd/es.py" in doc["reason"]


def test_interface_regions_in_wheel_and_history_modes(tmp_path, refs):
    """The classification is the similarity section's, whatever the source: an sdist holding stand-ins and
    a history blob of one are classified the same way."""
    import subprocess
    import tarfile
    tree = tmp_path / "repo"
    shutil.copytree(STANDINS / "es-awd", tree / "standin")
    sdist = tmp_path / "pkg-0.1.tar.gz"
    with tarfile.open(sdist, "w:gz") as tar:
        tar.add(tree, arcname="pkg-0.1")
    result = run_audit(AuditOptions(wheels=[sdist], refs=refs))
    sim = result.sections["similarity"]
    assert result.findings == 0 and (sim["status"] == "interface").sum() >= 1
    git = ["git", "-C", str(tree), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run(["git", "init", "-q", str(tree)], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "a"], check=True)
    es = tree / "standin" / "es.py"
    es.write_text(es.read_text() + "\n# changed\n")
    subprocess.run([*git, "commit", "-qam", "b"], check=True)
    result = run_audit(AuditOptions(tree=tree, history=True, refs=refs))
    sim = result.sections["similarity"]
    history = sim[(sim["origin"] == "history") & (sim["status"] == "interface")]
    assert result.findings == 0 and len(history) >= 1


# ------------------------------------------------------------------ planted code is still caught

def _function(src: str, name: str) -> ast.FunctionDef:
    return next(n for n in ast.walk(ast.parse(src)) if isinstance(n, ast.FunctionDef) and n.name == name)


def _body_text(path: Path, name: str) -> str:
    """The body (below the header, docstring and comments included) of function `name`, dedented."""
    src = path.read_text()
    node = _function(src, name)
    lines = src.splitlines()
    return textwrap.dedent("\n".join(lines[node.lineno:node.end_lineno])) + "\n"


def _replace_body(src: str, node, body: str) -> str:
    lines = src.splitlines()
    pad = " " * (node.col_offset + 4)
    header_end = node.body[0].lineno - 1
    if (isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)
            and isinstance(node.body[0].value.value, str)):   # keep the stand-in's own docstring
        header_end = node.body[0].end_lineno
    new = textwrap.indent(body, pad).rstrip("\n").splitlines()
    return "\n".join(lines[:header_end] + new + lines[node.end_lineno:]) + "\n"


def _first_listed_function(path: Path):
    """(name, node) of the first function or method of the stand-in whose header the data lists."""
    src = path.read_text()
    rel = path.relative_to(STANDINS).as_posix().split("/", 1)[-1]
    entries = interface.entries_for(interface.references_in([rel], DATA), DATA)
    listed = [d.label for d in interface.declarations(src, entries) if d.label.startswith("def ")]
    for node in ast.walk(ast.parse(src)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and len(node.body) >= 1 \
                and any(lab.split("(")[0].endswith(("." + node.name, " " + node.name)) for lab in listed):
            return node
    return None


PLANTS = ("verbatim", "renamed")


@pytest.mark.parametrize("mode", PLANTS)
@pytest.mark.parametrize("path", standin_files(), ids=lambda p: p.relative_to(STANDINS).as_posix())
def test_a_reference_body_planted_into_a_listed_function_of_a_standin_is_a_finding(tmp_path, refs, path, mode):
    """The fixture reference's smooth_spectrum body becomes the body of a declared function in both the
    reference and a copy of the stand-in: the header is interface, the body is not, so the pair is a
    finding and `not_interface` points into the stand-in's planted lines."""
    node = _first_listed_function(path)
    if node is None:
        pytest.skip("no listed function in this stand-in")
    body = _body_text(SMOOTHER, "smooth_spectrum")
    planted = _body_text(RENAMED, "blur_bins") if mode == "renamed" else body
    rel = path.relative_to(STANDINS).as_posix().split("/", 1)[-1]
    # the reference: the interface-only clone with the fixture body in that same function
    clone = tmp_path / "ref"
    names = interface.references_in([rel], DATA)
    for name in names:
        gen.write_reference(clone, name, DATA)
    ref_file = next(p for p in clone.rglob("*.py") if p.relative_to(clone).as_posix().endswith(rel)
                    or rel.endswith(p.relative_to(clone).as_posix()))
    ref_src = ref_file.read_text()
    ref_file.write_text(_replace_body(ref_src, _function(ref_src, node.name), body))
    tree = tmp_path / "tree"
    target = tree / path.relative_to(STANDINS)
    target.parent.mkdir(parents=True)
    src = path.read_text()
    target.write_text(_replace_body(src, node, planted))
    result, sim = audit(tree, [clone])
    hits = sim[sim["status"] == "finding"]
    assert result.findings >= 1 and target.relative_to(tree).as_posix() in set(hits["tree_file"]), \
        sim[["status", "tree_file", "ref_file", "longest_region_tokens"]].to_dict("records")
    row = hits[hits["tree_file"] == target.relative_to(tree).as_posix()].iloc[0]
    start = _function(target.read_text(), node.name).lineno
    end = _function(target.read_text(), node.name).end_lineno
    # our own runs of any length (not the `V=` before a configuration call elsewhere) lie in the plant
    runs = [re.match(r"tree (\d+):\d+-(\d+):\d+ .* \((\d+) tokens\)$", item)
            for item in row["not_interface"].split("; ") if item.startswith("tree ")]
    long = [(int(m[1]), int(m[2])) for m in runs if m and int(m[3]) >= 25]
    assert long and all(start <= a <= b <= end for a, b in long), (row["not_interface"], start, end)
    assert row["our_tokens"] >= similarity.DEFAULT_MIN_TOKENS


@pytest.mark.parametrize("path", standin_files(), ids=lambda p: p.relative_to(STANDINS).as_posix())
@pytest.mark.slow   # 2 s (--durations, 2026-12-03): out of the fast tier
def test_a_function_comment_and_docstring_planted_into_a_standin_are_findings(tmp_path, refs, path):
    """Against the interface-only clones plus the project's fixture reference: a whole reference
    function appended to a stand-in (verbatim and renamed/reformatted) is a similarity finding; its
    comment block pasted as comments, or as a docstring, is a text finding."""
    fn = ast.get_source_segment(SMOOTHER.read_text(), _function(SMOOTHER.read_text(), "smooth_spectrum"))
    comment = "\n".join(line.strip() for line in fn.splitlines() if line.strip().startswith("#"))
    words = " ".join(line.lstrip("# ") for line in comment.splitlines())
    plants = {"verbatim.py": fn, "renamed.py": RENAMED.read_text().split("\n\n\n", 1)[1],
              "comment.py": comment, "docstring.py": f'def helper():\n    """{words}"""\n    return None'}
    tree = tmp_path / "tree"
    for name, code in plants.items():
        target = tree / name.removesuffix(".py") / path.relative_to(STANDINS)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(path.read_text() + "\n\n" + code + "\n")
    result = run_audit(AuditOptions(tree=tree, refs=[*refs, FIXTURES / "reference"]))
    sim, txt = result.sections["similarity"], result.sections["text"]
    found_sim = {f.split("/")[0] for f in sim[(sim["status"] == "finding")
                                               & sim["ref_file"].str.endswith("spectral_smoother.py")]["tree_file"]}
    found_txt = {f.split("/")[0] for f in txt[(txt["status"] == "finding")
                                               & txt["ref_file"].str.endswith("spectral_smoother.py")]["tree_file"]}
    assert {"verbatim", "renamed"} <= found_sim
    assert {"comment", "docstring"} <= found_txt
    # the stand-ins' interface stays interface beside the planted copies: nothing else is a finding
    others = sim[(sim["status"] == "finding") & ~sim["ref_file"].str.endswith("spectral_smoother.py")]
    assert len(others) == 0, others[["tree_file", "ref_file", "not_interface"]].to_dict("records")


@pytest.mark.parametrize("name, entry", [(n, e) for n, spec in DATA.items() for e in spec["files"]],
                         ids=lambda v: v if isinstance(v, str) else v["file"])
def test_every_listed_declaration_is_found_in_a_module_made_of_it(name, entry):
    """Differential against the data itself: the interface-only module of each file entry (generated from
    the data) holds exactly the listed declarations, and `declarations` finds each one of them."""
    src = gen.module_source(name, entry)
    labels = [d.label for d in interface.declarations(src, [(name, entry)])]
    imports = [lab for lab in labels if lab.startswith(("import ", "from "))]
    assert len(imports) == len(entry.get("module_imports", []))   # the generator writes one per line
    classes = entry.get("classes") or {}
    expected = ({f"def {f}(" for f in entry.get("functions") or {}}
                | {f"class {c}" for c in classes}
                | {f"def {c}.{m}(" for c, spec in classes.items() for m in spec.get("methods") or {}}
                | {f"flag {f['flag']}" for f in entry.get("argparse_flags") or []}
                | {f"constant {k} = " for k in entry.get("module_constants") or {}}
                | {f"field {c}.{f['name']}" for c, fields in (entry.get("dataclass_fields") or {}).items()
                   for f in fields})
    found = {lab for lab in labels if not lab.startswith(("import ", "from ", "argparse parser"))}
    missing = [e for e in expected if not any(lab == e or lab.startswith(e) for lab in found)]
    assert missing == [] and len(found) == len(expected), (missing, sorted(found))


def test_a_standin_paired_with_another_references_clone_declares_its_own_interface(tmp_path):
    """Two references whose import blocks are alike: the tree file named as reference A's file is classified
    against A's interface too (interface); the same text under a name no reference lists is a finding,
    its imports being declarations of no reference the pair involves."""
    names_a = [f"alpha_{i}" for i in range(12)]   # bound names are filtered to V: the two blocks are alike
    names_b = [f"beta_{i}" for i in range(12)]

    def listed(names):
        return [{"from": "shared", "name": n, "as": n} for n in names]
    data = {"toy-a": {"files": [{"file": "pkg_a/a.py", "module_imports": listed(names_a)}]},
            "toy-b": {"files": [{"file": "b.py", "module_imports": listed(names_b)}]}}
    path = tmp_path / "interfaces.json"
    path.write_text(json.dumps(data))
    ref = tmp_path / "clone_b"
    ref.mkdir()
    (ref / "b.py").write_text("".join(f"from shared import {n}\n" for n in names_b))
    tree = tmp_path / "tree"
    text = "".join(f"from shared import {n}\n" for n in names_a)
    for rel in ("standins/toy-a/pkg_a/a.py", "elsewhere/mine.py"):
        (tree / rel).parent.mkdir(parents=True, exist_ok=True)
        (tree / rel).write_text(text)
    result = run_audit(AuditOptions(tree=tree, refs=[ref], interfaces=path))
    sim = result.sections["similarity"].set_index("tree_file")
    assert sim.loc["standins/toy-a/pkg_a/a.py", "status"] == "interface"
    assert "toy-b" in sim.loc["standins/toy-a/pkg_a/a.py", "interface"]
    assert "toy-a (the tree file's own)" in sim.loc["standins/toy-a/pkg_a/a.py", "interface"]
    assert sim.loc["elsewhere/mine.py", "status"] == "finding"
    assert sim.loc["elsewhere/mine.py", "not_interface"].startswith("tree 1:1-12:")
    assert result.findings == 1
