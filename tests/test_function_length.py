"""Functions a reader can hold: none longer than LIMIT lines in the package (each reference's child
folder included), the shared child runtime and the benchmarks, but those listed in ALLOWED.

A long function is split where the split names a step. ALLOWED holds the ones whose split is still
under way and may only shrink: the second test fails on an entry that no longer needs to be there.
Static (ast), so it costs nothing: ``python tests/test_function_length.py`` prints every function over
the limit with its length.
"""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: lines from `def` to the function's last line (decorators not counted), as ast gives them
LIMIT = 80
#: the folders checked: the package (esverify/references/<name>/child/ included), the shared child
#: runtime oracles/ and the benchmark scripts; a folder that does not exist holds nothing to check
TREES = ("esverify", "oracles", "benchmarks")
#: functions still over LIMIT, as "path::qualified name", each with a comment saying why it may stay
#: long for now. Only a function whose split into named steps is under way belongs here, and it
#: leaves when that split lands; empty since every long function has been split.
ALLOWED: set[str] = set()


def _functions(tree: ast.AST, prefix: str = ""):
    """(qualified name, node) of every function in `tree`, methods and nested functions included."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            name = prefix + node.name
            if not isinstance(node, ast.ClassDef):
                yield name, node
            yield from _functions(node, name + ".")
        else:
            yield from _functions(node, prefix)


def long_functions(root: Path = ROOT) -> dict[str, int]:
    """{"path::qualified name": lines} of every function over LIMIT lines in TREES under `root`."""
    found = {}
    for top in TREES:
        for path in sorted((root / top).rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
            for name, node in _functions(tree):
                lines = node.end_lineno - node.lineno + 1
                if lines > LIMIT:
                    found[f"{path.relative_to(root).as_posix()}::{name}"] = lines
    return found


def test_no_function_over_the_limit_but_the_allowed():
    extra = {k: n for k, n in long_functions().items() if k not in ALLOWED}
    assert extra == {}, (f"functions over {LIMIT} lines (split each where the split names a step): "
                         + "; ".join(f"{k} ({n} lines)" for k, n in sorted(extra.items())))


def test_the_allow_list_holds_only_functions_still_over_the_limit():
    stale = sorted(ALLOWED - set(long_functions()))
    assert stale == [], f"split or gone, remove from ALLOWED: {stale}"


def test_the_count_sees_nested_functions_and_methods(tmp_path):
    body = "\n".join(f"        x{i} = {i}" for i in range(LIMIT))
    (tmp_path / "esverify").mkdir()
    (tmp_path / "esverify" / "m.py").write_text(
        f"def outer():\n    def inner():\n{body}\n\n\nclass K:\n    def method(self):\n{body}\n\n\n"
        f"def short():\n    return 0\n")
    assert long_functions(tmp_path) == {"esverify/m.py::outer": LIMIT + 2, "esverify/m.py::outer.inner": LIMIT + 1,
                                        "esverify/m.py::K.method": LIMIT + 1}


if __name__ == "__main__":
    for key, n in sorted(long_functions().items(), key=lambda kv: -kv[1]):
        print(f"{n:4d}  {key}" + ("  (allowed)" if key in ALLOWED else ""))
