"""The shape of esverify/oracle: no import cycle, no private names across modules, and the
core never names a reference (each reference's names live in its adapter, CONTRIBUTING.md "Adding a
reference").

Static checks over the source (ast and text), so they cost nothing and hold for code paths no run
reaches: every import counts, module-level or inside a function.
"""
from __future__ import annotations

import ast
import re
from pathlib import Path

import graphlib

import pytest

ORACLE = Path(__file__).resolve().parents[1] / "esverify" / "oracle"
CORE = sorted(ORACLE.glob("*.py"))
#: the reference names the core must not contain (the grep test)
NAMES = re.compile(r"es-at-scale|es_at_scale|es-awd|es_awd|awd", re.IGNORECASE)
#: (file, reason) of the core files allowed to name a reference: none
ALLOWED: dict = {}


def _module(path: Path) -> str:
    rel = path.relative_to(ORACLE.parent.parent).with_suffix("")
    parts = list(rel.parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path):
    """(imported module, names taken from it, line) of every import in `path`, relative ones resolved."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = _module(path) if path.name == "__init__.py" else _module(path).rsplit(".", 1)[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, [], node.lineno
        elif isinstance(node, ast.ImportFrom):
            base = package.split(".")
            if node.level:
                base = base[:len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module
            names = [a.name for a in node.names]
            if node.module is None:   # from . import x: x is a module
                for name in names:
                    yield f"{target}.{name}", [], node.lineno
            else:
                yield target, names, node.lineno


def _oracle_modules():
    files = sorted(ORACLE.rglob("*.py"))
    return {_module(p): p for p in files}


def import_graph() -> dict:
    """{oracle module: set of oracle modules it imports}."""
    modules = _oracle_modules()
    graph = {name: set() for name in modules}
    for name, path in modules.items():
        for target, _, _ in _imports(path):
            while target and target not in modules and "." in target:
                target = target.rsplit(".", 1)[0]   # a name imported from a module: the module
            if target in modules and target != name:
                graph[name].add(target)
    return graph


def test_the_graph_is_built_from_real_edges():
    graph = import_graph()
    assert "esverify.oracle.session" in graph["esverify.oracle.runner"]
    assert "esverify.oracle.loop_rows" in graph["esverify.oracle.row_runner"]
    assert sum(map(len, graph.values())) > 40


def test_no_import_cycle_in_the_oracle():
    """Every import is an edge, at module level or inside a function (a lazy import hides a cycle from
    Python, not from a reader), a package's __init__ importing its own submodules included."""
    try:
        tuple(graphlib.TopologicalSorter(import_graph()).static_order())
    except graphlib.CycleError as exc:
        pytest.fail(f"import cycle: {' -> '.join(exc.args[1])}")


def test_no_private_name_is_imported_or_reached_across_modules():
    modules = _oracle_modules()
    bad = []
    for name, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        aliases = {}   # local name -> oracle module it stands for
        for target, names, line in _imports(path):
            if target in modules or target.rsplit(".", 1)[0] in modules:
                bad += [f"{path.name}:{line}: from {target} import {n}" for n in names
                        if n.startswith("_") and n != "__future__"]
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module is None:
                for alias in node.names:
                    aliases[alias.asname or alias.name] = alias.name
            if isinstance(node, ast.ImportFrom) and node.module and node.level:
                for alias in node.names:
                    aliases[alias.asname or alias.name] = alias.name
        for node in ast.walk(tree):
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases
                    and node.attr.startswith("_") and not node.attr.startswith("__")):
                bad.append(f"{path.name}:{node.lineno}: {node.value.id}.{node.attr}")
            if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Attribute) \
                    and node.value.attr == "__dict__":
                bad.append(f"{path.name}:{node.lineno}: state kept in a module's or object's __dict__")
    assert bad == [], "private names across modules:\n" + "\n".join(bad)


def test_the_core_never_names_a_reference():
    """The grep test: outside esverify/oracle/adapters/, no reference is named (docstrings and
    comments included)."""
    found = []
    for path in CORE:
        if path.name in ALLOWED:
            continue
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if NAMES.search(line):
                found.append(f"{path.name}:{number}: {line.strip()}")
    assert found == [], f"{len(found)} lines of the core name a reference:\n" + "\n".join(found)


def test_every_registered_adapter_is_an_adapter_with_its_data():
    from esverify.oracle import adapters
    from esverify.oracle.adapters.base import Adapter
    for name in adapters.names():
        adapter = adapters.get(name)
        assert isinstance(adapter, Adapter) and adapter.name == name
        assert adapter.summary and adapter.env_var and adapter.default_path and adapter.licence
        assert Path(adapter.driver).is_absolute() and Path(adapter.driver).is_file(), adapter.driver
        assert set(adapter.ops_need.values()) <= set(adapter.files)
        matrix = adapters.MatrixSpec(devices=("cpu",), dtypes=("f32", "f16"), schemes=("iid", "correlated"))
        cases = adapter.cases(matrix)
        assert {c.op for c in cases} == set(adapter.all_ops()), name
        # a reference that is one file the adapter finds itself (the skill sample) has no layout module
        assert all(adapter.module_key(c) in adapter.files or (adapter.module_key(c) is None and not adapter.files)
                   for c in cases), name
        assert set(adapter.reached) <= set(adapter.files.values())
        from esverify.es import get_profile
        from esverify.es.profiles import LOOP_PROFILES
        profile = LOOP_PROFILES[adapter.profile] if adapter.profile in LOOP_PROFILES else get_profile(adapter.profile)
        assert profile.name == adapter.profile


def test_an_unknown_adapter_is_a_key_error_naming_the_known_ones():
    from esverify.oracle import adapters
    with pytest.raises(KeyError, match="known"):
        adapters.get("no-such-reference")


def test_a_path_no_adapter_recognises_is_one_line_naming_what_each_looks_for(tmp_path):
    from esverify.oracle import adapters
    text = adapters.not_recognised_message(tmp_path)
    assert "\n" not in text and str(tmp_path) in text
    for name in adapters.names():
        assert f"{name}: {adapters.get(name).looks_for()}" in text
    assert all(isinstance(reason, str) for _, reason in adapters.recognise(tmp_path))
