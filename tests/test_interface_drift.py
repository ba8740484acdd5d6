"""Known answers for oracles/interface_drift.py (docs/references.md §5): a reference file described from
its source without importing it, in the interface manifest's schema, and the findings when a clone's
file differs from its manifest entry. Synthetic source files only (the stand-in clones are checked
against the manifest in test_standin_interfaces.py)."""
from __future__ import annotations

import importlib.util
import json
import keyword
import textwrap

import pytest
from hypothesis import given
from hypothesis import strategies as st

from esverify.paths import oracles_dir


def _load():
    spec = importlib.util.spec_from_file_location("interface_drift_under_test", oracles_dir() / "interface_drift.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


drift = _load()

BASE = textwrap.dedent('''
    """A module."""
    import argparse
    import os.path
    import numpy as np
    from typing import List, Dict as D
    from .sibling import thing

    SIGMA = 0.001
    NAME = "run"
    FLAGS = (1, 2)
    lower = 3
    listed = False
    COMPUTED = os.path.join("a", "b")
    REDEFINED = 1
    REDEFINED = 2

    try:
        import wandb
    except ImportError:
        wandb = None


    def parse_args():
        import json
        parser = argparse.ArgumentParser()
        parser.add_argument("--sigma", type=float, default=SIGMA, help="noise scale")
        parser.add_argument("--task", type=str, choices=["a", "b"], default="a")
        parser.add_argument("--mirror", action="store_true")
        parser.add_argument("--seed", type=int)
        return parser.parse_args()


    def train(model, data, steps=10, *extra, lr=0.1, name, **options):
        def inner(x):
            return x
        return inner


    async def fetch(url, timeout=None):
        return url


    class Base:
        pass


    class Trainer(Base, metaclass=type):
        limit = 5

        def __init__(self, *args, **kwargs):
            self.args = args

        def step(self, seeds, sigma, negate=False):
            return seeds

        @staticmethod
        def helper(x, y=2):
            return x + y


    if __name__ == "__main__":
        from tasks import get_data
        main = parse_args
''')


def _write(tmp_path, text, name="mod.py"):
    path = tmp_path / name
    path.write_text(text)
    return path


def test_extract_gives_the_manifest_schema_of_a_known_file(tmp_path):
    got = drift.extract(_write(tmp_path, BASE), names=["listed"])
    assert got["module_imports"] == [
        {"module": "argparse", "as": "argparse"}, {"module": "os.path", "as": "os.path"},
        {"module": "numpy", "as": "np"}, {"from": "typing", "name": "List", "as": "List"},
        {"from": "typing", "name": "Dict", "as": "D"}, {"from": ".sibling", "name": "thing", "as": "thing"}]
    # *extra and **options are not listed (as in the manifest); keyword-only parameters are, marked
    assert got["functions"] == {
        "parse_args": [],
        "train": [{"name": "model", "default": None}, {"name": "data", "default": None},
                  {"name": "steps", "default": "10"}, {"name": "lr", "default": "0.1", "keyword_only": True},
                  {"name": "name", "default": None, "keyword_only": True}],
        "fetch": [{"name": "url", "default": None}, {"name": "timeout", "default": "None"}]}
    assert got["classes"] == {
        "Base": {"bases": [], "methods": {}},
        "Trainer": {"bases": ["Base"], "methods": {
            "__init__": [{"name": "self", "default": None}],
            "step": [{"name": "self", "default": None}, {"name": "seeds", "default": None},
                     {"name": "sigma", "default": None}, {"name": "negate", "default": "False"}],
            "helper": [{"name": "x", "default": None}, {"name": "y", "default": "2"}]}}}
    assert got["argparse_flags"] == [
        {"flag": "--sigma", "type": "float", "default": "SIGMA"},
        {"flag": "--task", "type": "str", "choices": "['a', 'b']", "default": "'a'"},
        {"flag": "--mirror", "action": "'store_true'"},
        {"flag": "--seed", "type": "int"}]
    # UPPER_CASE literals and the listed names; not `lower`, not a computed value; the last assignment wins
    assert got["module_constants"] == {"SIGMA": 0.001, "NAME": "run", "FLAGS": [1, 2], "listed": False,
                                       "REDEFINED": 2}
    json.dumps(got)   # the manifest is JSON


def test_files_without_flags_or_constants_omit_those_keys(tmp_path):
    got = drift.extract(_write(tmp_path, "import torch\n\n\ndef f(x):\n    return x\n"))
    assert got == {"module_imports": [{"module": "torch", "as": "torch"}], "functions": {"f": [
        {"name": "x", "default": None}]}, "classes": {}}


def test_identical_source_gives_no_finding(tmp_path):
    entry = drift.extract(_write(tmp_path, BASE), names=["listed"])
    assert drift.compare({"file": "mod.py", **entry}, entry) == []


def _findings(tmp_path, old: str, new: str, text: str = BASE):
    assert text.count(old) == 1, old
    expected = {"file": "mod.py", **drift.extract(_write(tmp_path, text, "old.py"), names=["listed"])}
    actual = drift.extract(_write(tmp_path, text.replace(old, new), "new.py"), names=["listed"])
    return drift.compare(expected, actual)


P = lambda name, default=None: {"name": name, "default": default}  # noqa: E731 - a parameter entry


@pytest.mark.parametrize("old,new,finding", [
    # a changed signature: a parameter renamed
    ("def step(self, seeds, sigma, negate=False)", "def step(self, seeds, scale, negate=False)",
     {"kind": "signature", "name": "Trainer.step",
      "expected": [P("self"), P("seeds"), P("sigma"), P("negate", "False")],
      "found": [P("self"), P("seeds"), P("scale"), P("negate", "False")]}),
    # a new required parameter
    ("def step(self, seeds, sigma, negate=False)", "def step(self, seeds, sigma, engine, negate=False)",
     {"kind": "signature", "name": "Trainer.step",
      "expected": [P("self"), P("seeds"), P("sigma"), P("negate", "False")],
      "found": [P("self"), P("seeds"), P("sigma"), P("engine"), P("negate", "False")]}),
    # a default removed: the parameter becomes required
    ("def fetch(url, timeout=None)", "def fetch(url, timeout)",
     {"kind": "signature", "name": "fetch", "expected": [P("url"), P("timeout", "None")],
      "found": [P("url"), P("timeout")]}),
    # parameters reordered
    ("def train(model, data, steps=10,", "def train(data, model, steps=10,",
     {"kind": "signature", "name": "train"}),
    # a new required keyword-only parameter
    ("def fetch(url, timeout=None)", "def fetch(url, timeout=None, *, retries)",
     {"kind": "signature", "name": "fetch", "expected": [P("url"), P("timeout", "None")],
      "found": [P("url"), P("timeout", "None"), {"name": "retries", "default": None, "keyword_only": True}]}),
    # a removed flag
    ('    parser.add_argument("--mirror", action="store_true")\n', "",
     {"kind": "flag-missing", "name": "--mirror", "expected": {"flag": "--mirror", "action": "'store_true'"},
      "found": None}),
    # a new flag
    ('    parser.add_argument("--seed", type=int)\n',
     '    parser.add_argument("--seed", type=int)\n    parser.add_argument("--run_name", default=None)\n',
     {"kind": "flag-new", "name": "--run_name", "expected": None,
      "found": {"flag": "--run_name", "default": "None"}}),
    # a flag's default, type, choices, action changed
    ('"--task", type=str, choices=["a", "b"], default="a"', '"--task", type=str, choices=["a", "b"], default="b"',
     {"kind": "flag-default", "name": "--task", "expected": "'a'", "found": "'b'"}),
    ('"--seed", type=int)', '"--seed", type=str)', {"kind": "flag-type", "name": "--seed", "expected": "int",
                                                     "found": "str"}),
    ('choices=["a", "b"]', 'choices=["a", "b", "c"]', {"kind": "flag-choices", "name": "--task",
                                                       "expected": "['a', 'b']", "found": "['a', 'b', 'c']"}),
    ('"--mirror", action="store_true"', '"--mirror", action="store_false"',
     {"kind": "flag-action", "name": "--mirror", "expected": "'store_true'", "found": "'store_false'"}),
    # a missing method, function, class
    ("    def step(self, seeds, sigma, negate=False):\n        return seeds\n", "",
     {"kind": "missing-method", "name": "Trainer.step", "found": None}),
    ("async def fetch(url, timeout=None):\n    return url\n", "",
     {"kind": "missing-function", "name": "fetch", "found": None}),
    ("class Base:\n    pass\n", "Base = object\n", {"kind": "missing-class", "name": "Base", "found": None}),
    ("class Trainer(Base, metaclass=type):", "class Trainer(object):",
     {"kind": "bases", "name": "Trainer", "expected": ["Base"], "found": ["object"]}),
    # an import moved elsewhere, and one gone
    ("from typing import List, Dict as D", "from typing import List\nfrom collections import OrderedDict as D",
     {"kind": "missing-import", "name": "D", "expected": {"from": "typing", "name": "Dict", "as": "D"},
      "found": {"from": "collections", "name": "OrderedDict", "as": "D"}}),
    ("import numpy as np\n", "",
     {"kind": "missing-import", "name": "np", "expected": {"module": "numpy", "as": "np"}, "found": None}),
    # constants: a value changed, a type changed (1 == 1.0 in Python), one no longer a literal, one gone
    ("SIGMA = 0.001", "SIGMA = 0.002", {"kind": "constant", "name": "SIGMA", "expected": 0.001, "found": 0.002}),
    ("REDEFINED = 2", "REDEFINED = 2.0", {"kind": "constant", "name": "REDEFINED", "expected": 2, "found": 2.0}),
    ('NAME = "run"', 'NAME = os.environ.get("RUN", "run")', {"kind": "constant", "name": "NAME",
                                                               "expected": "run", "found": None}),
    ("listed = False\n", "", {"kind": "constant", "name": "listed", "expected": False, "found": None}),
])
def test_one_difference_gives_exactly_its_finding(tmp_path, old, new, finding):
    findings = _findings(tmp_path, old, new)
    assert len(findings) == 1, findings
    assert findings[0]["file"] == "mod.py"
    assert set(findings[0]) == {"file", "kind", "name", "expected", "found"}
    assert {k: findings[0][k] for k in finding} == finding
    assert findings[0]["name"] in drift.describe(findings[0]) and "mod.py" in drift.describe(findings[0])


@pytest.mark.parametrize("old,new", [
    # what a clone may have beyond the manifest: helpers, imports, constants, methods, optional keyword-only
    ("class Base:\n", "def _helper(x):\n    return x\n\n\nclass _Private:\n    pass\n\n\nclass Base:\n"),
    ("import argparse\n", "import argparse\nimport gc\n"),
    ("SIGMA = 0.001\n", "SIGMA = 0.001\nEXTRA = 7\n"),
    ("    def step(", "    def _inner(self):\n        return 1\n\n    def step("),
    ("def fetch(url, timeout=None)", "def fetch(url, timeout=None, *, retries=3)"),
    # *args / **kwargs the manifest does not show
    ("def fetch(url, timeout=None)", "def fetch(url, timeout=None, *more, **options)"),
    # imports in another order (only the stand-ins must keep the manifest's order)
    ("import argparse\nimport os.path\n", "import os.path\nimport argparse\n"),
    # source text that unparses the same
    ("default=SIGMA, help=\"noise scale\"", "default = SIGMA"),
])
def test_what_a_clone_has_beyond_the_manifest_is_no_finding(tmp_path, old, new):
    assert _findings(tmp_path, old, new) == []


_NAMES = st.from_regex(r"[a-z][a-z0-9_]{0,6}", fullmatch=True).filter(lambda s: not keyword.iskeyword(s))


@given(names=st.lists(_NAMES, min_size=0, max_size=6, unique=True), data=st.data())
def test_extract_recovers_any_positional_signature(names, data):
    n_defaults = data.draw(st.integers(0, len(names)))
    defaults = data.draw(st.lists(st.one_of(st.integers(-5, 5), st.sampled_from(["'x'", "None", "True", "1.5"])),
                                  min_size=n_defaults, max_size=n_defaults))
    texts = [str(d) for d in defaults]
    params = [P(n) for n in names[:len(names) - n_defaults]] + \
             [P(n, t) for n, t in zip(names[len(names) - n_defaults:], texts)]
    source = "def f(" + ", ".join(p["name"] + (f"={p['default']}" if p["default"] else "") for p in params) + \
             "):\n    pass\n"
    got = drift.extract_source(source)
    assert got["functions"]["f"] == params
    assert drift.compare({"file": "m.py", **got}, got) == []


def _manifest(tmp_path, files):
    path = tmp_path / "manifest.json"
    path.write_text(json.dumps({"t": {"commit": "abc", "files": files}, "other": {"commit": "x", "files": []}}))
    return path


def test_check_clone_reports_missing_and_unparsable_files_and_compares_the_rest(tmp_path):
    clone = tmp_path / "clone"
    (clone / "pkg").mkdir(parents=True)
    (clone / "pkg" / "a.py").write_text("import torch\n\n\ndef f(x, y=1):\n    return x\n")
    (clone / "bad.py").write_text("def f(:\n")
    a = {"file": "pkg/a.py", "module_imports": [{"module": "torch", "as": "torch"}],
         "functions": {"f": [P("x"), P("y", "2")]}, "classes": {}}
    manifest = _manifest(tmp_path, [a, {"file": "gone.py", "module_imports": [], "functions": {}, "classes": {}},
                                    {"file": "bad.py", "module_imports": [], "functions": {}, "classes": {}}])
    findings = drift.check_clone(clone, "t", manifest)
    assert [(f["file"], f["kind"], f["name"]) for f in findings] == [
        ("pkg/a.py", "signature", "f"), ("gone.py", "missing-file", "gone.py"), ("bad.py", "unreadable", "bad.py")]
    assert findings[2]["found"].startswith("SyntaxError:") and "(line 1)" in findings[2]["found"]
    assert "file missing from the clone" in drift.describe(findings[1])


def test_check_clone_passes_the_listed_constant_names(tmp_path):
    clone = tmp_path / "clone"
    clone.mkdir()
    (clone / "s.py").write_text("seed = 33\nSTEPS = 5\n")
    entry = {"file": "s.py", "module_imports": [], "functions": {}, "classes": {},
             "module_constants": {"seed": 33, "STEPS": 5}}
    assert drift.check_clone(clone, "t", _manifest(tmp_path, [entry])) == []
    (clone / "s.py").write_text("seed = 34\nSTEPS = 5\n")
    assert [(f["kind"], f["name"], f["found"]) for f in drift.check_clone(clone, "t", _manifest(tmp_path, [entry]))] \
        == [("constant", "seed", 34)]


def test_check_clone_refuses_an_unknown_target_and_a_broken_manifest(tmp_path):
    manifest = _manifest(tmp_path, [])
    with pytest.raises(ValueError, match=r"no target 'es-awd' \(it has: t, other\)"):
        drift.check_clone(tmp_path, "es-awd", manifest)
    broken = tmp_path / "broken.json"
    broken.write_text("{not json")
    with pytest.raises(ValueError, match="interface manifest .*broken.json: JSONDecodeError"):
        drift.check_clone(tmp_path, "t", broken)
    with pytest.raises(ValueError, match="interface manifest .*absent.json: FileNotFoundError"):
        drift.check_clone(tmp_path, "t", tmp_path / "absent.json")


def test_extract_never_imports_the_file(tmp_path):
    path = _write(tmp_path, "raise SystemExit('imported')\nimport vllm_not_installed_here\n\n\ndef f():\n    pass\n")
    assert drift.extract(path)["functions"] == {"f": []}
