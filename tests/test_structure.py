"""The shape of the whole esverify package: the core never names a reference, a reference never imports
another, no import cycle (modules loaded by name through esverify.registry included), no arrow from a lower
layer to a higher one, and no private name imported or reached across modules, on the parent side and the
child side (oracles/).

Static checks over the source (ast and tokens), so they cost nothing and hold for code paths no run reaches:
every import counts, module-level or inside a function. Run the name count alone with
``python tests/test_structure.py`` (it prints the places per file).
"""
from __future__ import annotations

import ast
import functools
import graphlib
import io
import re
import sys
import tokenize
from pathlib import Path

import pytest

from child_files import in_child_folder

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "esverify"
CHILD = ROOT / "oracles"
#: a reference's name in code: identifiers and string literals (docstrings and comments not counted)
NAMES = re.compile(r"es[-_]?at[-_]?scale|at_scale|awd|es[-_]paper|paper_|skill[-_]sample|skill_|eggroll", re.I)
#: core files still allowed to name a reference: (places, why). Each one is a debt, to be
#: paid by moving the named part into its reference's package; the count may only go down.
ALLOWED: dict = {}

#: the layers, lowest first: a module may import its own layer or a lower one, never a higher one.
#: A module not listed takes the layer of its longest listed prefix.
LAYERS = [
    # 0: leaves shared by everything; the references registry esverify.registry (it imports the record type
    # esverify.record and loads what it registers by string)
    {"esverify", "esverify.bits", "esverify.exactsum", "esverify.paths", "esverify.console", "esverify.forksafe", "esverify.interrupt",
     "esverify.procstat", "esverify.differing",
     "esverify.record", "esverify.registry",
     "esverify.gitinfo", "esverify.jsonin", "esverify.numerics_probe", "esverify.outputs", "esverify.report",
     "esverify.reportset", "esverify.cliutil"},
    # 1: the RNG contract
    {"esverify.rng"},
    # 2: the clean-room trainer and its numerics; the golden-vector machinery; the wrapper protocol (its server
    # runs the trainer, the gate checks a wrapper through its client)
    {"esverify.es", "esverify.goldens", "esverify.impl"},
    # 3: the users of the trainer: replay, the oracle, the audit
    {"esverify.replay", "esverify.oracle", "esverify.audit"},
    # 4: the references (they fill the registries the layers below ask) and the command line
    {"esverify.references", "esverify.cli", "esverify.__main__", "esverify.goldens.cli"},
]
#: (importer, imported) arrows allowed to run up, with why
UPWARD_ALLOWED: dict = {}


def _module(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = list(rel.parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def package_modules() -> dict:
    """{dotted module name: path} of every module of esverify (the references' child folders are not)."""
    return {_module(p): p for p in sorted(PACKAGE.rglob("*.py")) if not in_child_folder(p.relative_to(PACKAGE))}


def child_files() -> list:
    """Every file of the child side: the shared runtime oracles/*.py and each reference's child/*.py."""
    return [p for p in sorted(CHILD.glob("*.py")) if p.name != "__init__.py"] + \
        sorted(PACKAGE.glob("references/*/child/*.py"))


def child_modules() -> dict:
    """{module name: path} of the child side (run by path in the child, imported by bare name); each
    reference's driver as "<package>.driver" (no other module imports a driver)."""
    return {(f"{p.parent.parent.name}.driver" if p.name == "driver.py" else p.stem): p for p in child_files()}


def _parsed(path: Path) -> ast.Module:
    """The syntax tree of `path`, parsed once per version of the file (its size and modification time): the
    graph's three tests and the name checks walk the same few hundred files (read only, never changed)."""
    st = path.stat()
    return _parse_cached(str(path), st.st_mtime_ns, st.st_size)


@functools.lru_cache(maxsize=None)
def _parse_cached(path: str, mtime_ns: int, size: int) -> ast.Module:
    return ast.parse(Path(path).read_text(encoding="utf-8"))


def _imports(path: Path, name: str, is_package: bool):
    """(imported module, names taken from it, line) of every import in `path`, relative ones resolved."""
    tree = _parsed(path)
    package = name if is_package else name.rsplit(".", 1)[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, [], node.lineno
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module
            for alias in node.names:   # from m import x: an edge to m.x if it is a module, else to m
                yield f"{target}.{alias.name}", [alias.name], node.lineno


def _resolve(target: str, modules) -> str | None:
    while target and target not in modules and "." in target:
        target = target.rsplit(".", 1)[0]   # a name imported from a module: the module
    return target if target in modules else None


#: registry function or record field asked for -> the record field whose strings it loads
ASKS = {"adapter": "adapter", "adapter_names": "adapter", "profiles": "profiles", "golden_areas": "golden_areas",
        "golden_area": "golden_areas", "golden_area_specs": "golden_areas", "runlog_formats": "runlog_formats",
        "runlog_format_for": "runlog_formats", "models": "models", "seed_schedules": "seed_schedules"}


#: the registry's functions that look records up (and so import every reference package)
LOOKUPS = {"names", "get", "adapter", "adapter_names", "profiles", "golden_areas", "golden_area", "golden_area_specs",
           "runlog_formats", "runlog_format_for", "specs", "clone_modules", "replay_profiles", "models",
           "seed_schedules"}


def registry_edges() -> set:
    """(module, module it has loaded by name) for every module that asks esverify.registry: an edge to each
    reference package of this tree (where REFERENCE is looked for), and to every "module:attr" string of the
    fields it asks for (ASKS: the names it reaches on the registry or a record), resolved; the contract's golden
    areas (registry.CONTRACT_AREAS) count among every record's. The registry only runs those loads: the module
    that asks is the one that depends on what is loaded. What the registry loads for itself counts as its own
    edges: each reference package (where REFERENCE is looked for) and the contract's areas."""
    from esverify import registry
    modules = package_modules()
    holders = {m for m, p in modules.items()
               if m.count(".") == 2 and m.startswith("esverify.references.") and p.name == "__init__.py"}
    records = [registry.get(n) for n in registry.names()]
    contract = tuple(getattr(registry, "CONTRACT_AREAS", ()))
    edges = {("esverify.registry", h) for h in holders}
    edges |= {("esverify.registry", spec.partition(":")[0]) for spec in contract}
    for name, path in modules.items():
        if name == "esverify.registry" or not any(
                _resolve(t, modules) == "esverify.registry" for t, _, _ in _imports(path, name, path.name == "__init__.py")):
            continue
        tree = _parsed(path)
        lookups = {node.attr for node in ast.walk(tree) if isinstance(node, ast.Attribute)
                   and isinstance(node.value, ast.Name) and node.value.id == "registry"}
        if not lookups & LOOKUPS:
            continue   # takes the Reference record only (a reference package declaring itself)
        asked = {ASKS[node.attr] for node in ast.walk(tree) if isinstance(node, ast.Attribute) and node.attr in ASKS}
        edges |= {(name, h) for h in holders}
        for field in asked:
            if field == "golden_areas":
                edges |= {(name, spec.partition(":")[0]) for spec in contract}
            for ref in records:
                specs = getattr(ref, field)
                for spec in ([specs] if isinstance(specs, str) else specs or ()):
                    edges.add((name, spec.partition(":")[0]))
    return edges


def import_graph() -> dict:
    """{esverify module: set of esverify modules it imports}, registry loads included."""
    modules = package_modules()
    graph = {name: set() for name in modules}
    for name, path in modules.items():
        for target, _, _ in _imports(path, name, path.name == "__init__.py"):
            resolved = _resolve(target, modules)
            if resolved and resolved != name:
                graph[name].add(resolved)
    for source, target in registry_edges():
        target = _resolve(target, modules)
        if target and target != source:
            graph[source].add(target)
    return graph


def _layer(module: str) -> int:
    best, layer = -1, 0
    for k, names in enumerate(LAYERS):
        for prefix in names:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > best:
                best, layer = len(prefix), k
    return layer


def _docstring_lines(tree) -> set:
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) \
                    and isinstance(first.value.value, str):
                out.update(range(first.lineno, first.end_lineno + 1))
    return out


def core_files() -> list:
    """The core: esverify outside esverify/references/, and the shared child code (not the drivers)."""
    files = [p for p in sorted(PACKAGE.rglob("*.py")) if "references" not in p.relative_to(PACKAGE).parts]
    return files + [p for p in sorted(CHILD.glob("*.py"))]


def reference_names() -> dict:
    """{core file (relative): [(line, token)]} of every place a core file names a reference in code."""
    found = {}
    for path in core_files():
        src = path.read_text(encoding="utf-8")
        docs = _docstring_lines(ast.parse(src))
        for tok in tokenize.generate_tokens(io.StringIO(src).readline):
            if tok.type == tokenize.NAME or (tok.type == tokenize.STRING and tok.start[0] not in docs):
                for _ in NAMES.findall(tok.string):
                    found.setdefault(str(path.relative_to(ROOT)), []).append((tok.start[0], tok.string))
    return found


# ----------------------------------------------------------------------------------------------- tests
@pytest.mark.slow   # 2 s (--durations, 2026-12-03): out of the fast tier
def test_the_graph_is_built_from_real_edges():
    graph = import_graph()
    assert "esverify.oracle.session" in graph["esverify.oracle.runner"]
    assert "esverify.registry" in graph["esverify.oracle.adapters"]
    assert "esverify.references.es_paper.adapter" in graph["esverify.oracle.adapters"]   # loaded by name
    assert "esverify.references.es_awd.profile" in graph["esverify.es.profiles"]
    assert "esverify.goldens.area" in graph["esverify.references.es_paper.golden_area"]
    assert "esverify.references.es_awd.model" in graph["esverify.es.reference"]          # loaded by name
    assert "esverify.references.es_paper.schedule" in graph["esverify.es.schedule"]      # loaded by name
    assert "esverify.references.es_awd" in graph["esverify.registry"]                    # loaded by name
    assert "esverify.goldens.rng_area" in graph["esverify.goldens.areas"]                # loaded by name
    assert sum(map(len, graph.values())) > 300


def test_the_name_search_finds_names_in_code_and_not_in_docstrings(tmp_path, monkeypatch):
    monkeypatch.setattr(sys.modules[__name__], "PACKAGE", tmp_path)
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    monkeypatch.setattr(sys.modules[__name__], "CHILD", tmp_path / "none")
    (tmp_path / "m.py").write_text('"""es-awd in a docstring."""\n# es_awd in a comment\nX = "es-awd"\nes_paper = 1\n')
    assert reference_names() == {"m.py": [(3, '"es-awd"'), (4, "es_paper")]}


@pytest.mark.slow   # 1 s (--durations, 2026-12-03): out of the fast tier
def test_the_core_never_names_a_reference():
    """Outside esverify/references/ and the child drivers no reference is named in code (ALLOWED lists the debts)."""
    found = reference_names()
    over = {f: places for f, places in found.items() if len(places) > ALLOWED.get(f, (0, ""))[0]}
    assert over == {}, "core files naming a reference:\n" + "\n".join(
        f"{f}: {len(p)} place(s): {p[:6]}" for f, p in over.items())


@pytest.mark.slow   # 2 s (--durations, 2026-12-03): out of the fast tier
def test_no_import_cycle_registry_loads_included():
    """Every import is an edge (a lazy import hides a cycle from Python, not from a reader), and so is every
    module esverify.registry loads by name."""
    try:
        tuple(graphlib.TopologicalSorter(import_graph()).static_order())
    except graphlib.CycleError as exc:
        pytest.fail(f"import cycle: {' -> '.join(exc.args[1])}")


@pytest.mark.slow   # 3 s (--durations, 2026-12-03): out of the fast tier
def test_no_arrow_from_a_lower_layer_to_a_higher_one():
    """The registry's loads by name are the one way up (a plug-in is above what asks for it), and a package's
    __init__ may name its own submodules."""
    by_name = registry_edges()
    bad = [f"{a} (layer {_layer(a)}) -> {b} (layer {_layer(b)})" for a, targets in import_graph().items()
           for b in sorted(targets) if _layer(b) > _layer(a) and (a, b) not in UPWARD_ALLOWED
           and (a, b) not in by_name and not b.startswith(a + ".")]
    assert bad == [], "arrows up:\n" + "\n".join(bad)


def _reference_of(module: str) -> str | None:
    """The reference package a module of esverify belongs to ("es_paper"), or None for the core."""
    parts = module.split(".")
    return parts[2] if len(parts) > 2 and parts[:2] == ["esverify", "references"] else None


def test_a_reference_never_imports_another_reference_nor_the_registry():
    """A reference's package imports the core and its own modules, never another reference's: numerics that
    two references share live in esverify.es, so each folder holds all of one reference and nothing of another.
    Nor does it import esverify.registry, which loads its modules by name (its record type is esverify.record):
    an import back would close a circle, however late either side runs it."""
    modules = package_modules()
    bad = []
    for name, path in modules.items():
        own = _reference_of(name)
        for target, _, line in _imports(path, name, path.name == "__init__.py") if own else ():
            resolved = _resolve(target, modules) or ""
            if _reference_of(resolved) not in (None, own) or resolved == "esverify.registry":
                bad.append(f"{path.relative_to(ROOT)}:{line}: imports {target}")
    assert bad == [], "a reference importing another, or the registry:\n" + "\n".join(bad)


def _private_uses(modules: dict, resolve) -> list:
    bad = []
    for name, path in modules.items():
        tree = _parsed(path)
        aliases = set()   # local names that stand for a module of ours
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                aliases.update((a.asname or a.name).split(".")[0] for a in node.names if resolve(a.name))
            elif isinstance(node, ast.ImportFrom):
                target = node.module or ""
                if node.level and resolve("esverify"):   # a relative import: the absolute name of what it names
                    base = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
                    target = ".".join(base[:len(base) - node.level + 1] + ([node.module] if node.module else []))
                for a in node.names:
                    if node.level or resolve(target):
                        if a.name.startswith("_") and not a.name.startswith("__"):
                            bad.append(f"{path.name}:{node.lineno}: from {target or '.'} import {a.name}")
                        # a module or a name of ours (relative or not): reaching its private names crosses modules
                        if node.module is None or resolve(f"{target}.{a.name}"):
                            aliases.add(a.asname or a.name)
        for node in ast.walk(tree):
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases
                    and node.attr.startswith("_") and not node.attr.startswith("__")):
                bad.append(f"{path.name}:{node.lineno}: {node.value.id}.{node.attr}")
    return bad


@pytest.mark.slow   # 1 s (--durations, 2026-12-03): out of the fast tier
def test_no_private_name_is_imported_or_reached_across_modules():
    parent = package_modules()
    child = child_modules()
    bad = _private_uses(parent, lambda t: t == "esverify" or t.startswith("esverify."))
    bad += _private_uses(child, lambda t: t.split(".")[0] in child)
    assert bad == [], "private names across modules:\n" + "\n".join(bad)


def test_the_private_name_check_sees_every_way_a_module_is_named(tmp_path):
    """A module named through a relative import (`from ..goldens import chain`, `from . import chain`) or an
    absolute one is followed to its private names (the relative form was not, and hid chain._label_target)."""
    pkg = tmp_path / "esverify" / "pkg"
    pkg.mkdir(parents=True)
    sources = {"a": "from ..goldens import chain\nx = chain._hidden\n",
               "b": "from . import sibling\nx = sibling._hidden\n",
               "c": "import esverify.goldens.chain as chain\nx = chain._hidden\n",
               "d": "from esverify.goldens import chain\nx = chain.public\n",
               "e": "from ..goldens.chain import _hidden\n"}
    for stem, text in sources.items():
        (pkg / f"{stem}.py").write_text(text)
    found = _private_uses({f"esverify.pkg.{stem}": pkg / f"{stem}.py" for stem in sources},
                          lambda t: t == "esverify" or t.startswith("esverify."))
    assert sorted(found) == ["a.py:2: chain._hidden", "b.py:2: sibling._hidden", "c.py:2: chain._hidden",
                             "e.py:1: from esverify.goldens.chain import _hidden"]


def test_every_registry_string_resolves():
    from esverify import registry
    for spec in registry.specs():
        assert registry.load(spec) is not None, spec


def test_an_asked_table_is_computed_on_every_use():
    """registry.Asked serves PROFILES, LOOP_PROFILES and FIRST_ITERATION: a later registration is seen."""
    from esverify import registry
    table = {"a": 1}
    asked = registry.Asked(lambda: dict(table))
    assert dict(asked) == {"a": 1}
    table["b"] = 2
    assert (len(asked), asked["b"], list(asked)) == (2, 2, ["a", "b"])


if __name__ == "__main__":
    places = reference_names()
    for f, p in sorted(places.items(), key=lambda kv: -len(kv[1])):
        print(f"{len(p):4d} {f}")
    print("total", sum(map(len, places.values())), "places in", len(places), "files")


def _esverify_imports(path: Path) -> set:
    """The esverify modules a file imports (absolute imports only: the child scripts have no package)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.split(".")[0] == "esverify"}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").split(".")[0] == "esverify":
            found |= {f"{node.module}.{a.name}" for a in node.names} | {node.module}
    return found


def test_the_child_gets_every_esverify_module_it_imports():
    """A child under another Python (--python) has no esverify installed: it imports the copies of
    CHILD_MODULES staged beside its drivers, so each esverify module the child scripts import, and each
    module those import in turn, must be among them (a missing one failed only under a second venv)."""
    from esverify.oracle.child_process import CHILD_MODULES, reference_child_files
    copied = [*CHILD_MODULES, *(rel for _, rel in reference_child_files())]

    def staged(module: str) -> bool:
        rel = module.replace(".", "/")
        return any(rel == m.removesuffix(".py").removesuffix("/__init__") or rel.startswith(m + "/")
                   or rel == m for m in copied)

    def is_module(name: str) -> bool:
        rel = ROOT / name.replace(".", "/")
        return rel.with_suffix(".py").is_file() or (rel / "__init__.py").is_file()

    todo = child_files()
    seen, missing = set(), []
    while todo:
        path = todo.pop()
        for name in _esverify_imports(path):
            if not is_module(name) or name in seen:
                continue      # a name imported from a module, not a module
            seen.add(name)
            if not staged(name):
                missing.append(f"{name} (imported by {path.relative_to(ROOT)})")
            rel = ROOT / name.replace(".", "/")
            todo.append(rel.with_suffix(".py") if rel.with_suffix(".py").is_file() else rel / "__init__.py")
    assert {"esverify.exactsum", "esverify.rng", "esverify.references.eggroll.contract"} <= seen
    assert not missing, missing


@pytest.mark.slow   # 3 s (--durations, 2026-12-03): out of the fast tier
def test_the_child_copy_imports_without_the_installed_esverify(tmp_path):
    """The staged copy alone serves every esverify import of the child scripts: a Python run with the
    copy first on its path and the editable install's finder removed (which would otherwise find
    modules missing from the copy in this checkout) imports them from the copy."""
    import subprocess

    from esverify.oracle.child_process import prepare_root
    pkg, _ = prepare_root(tmp_path / "root", [])
    modules = sorted({m for p in child_files() for m in _esverify_imports(p)
                      if (ROOT / m.replace(".", "/")).with_suffix(".py").is_file()
                      or (ROOT / m.replace(".", "/") / "__init__.py").is_file()})
    code = ("import importlib, sys\n"
            "sys.meta_path[:] = [f for f in sys.meta_path if 'editable' not in repr(f).lower()\n"
            "                    and 'editable' not in type(f).__module__.lower()]\n"
            f"sys.path.insert(0, {str(pkg)!r})\n"
            f"for name in {modules!r}:\n"
            "    print(name, importlib.import_module(name).__file__)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    files = dict(line.split(" ", 1) for line in done.stdout.splitlines())
    assert set(files) == set(modules) and "esverify.references.eggroll.contract" in files
    assert all(f.startswith(str(pkg)) for f in files.values()), files
