"""Section 4: the import boundary, by a static (ast) scan.

The package (`esverify/**.py`, minus the oracle area) must not import a
reference module, must not load code by path from a reference or from the
oracle area, and must not import the oracle area in-process; each of these
is a finding. The oracle area is what runs only in a child process: the
shared child runtime (the top-level package `oracles/`, in a checkout and in
a wheel alike) and each reference's child folder
(`esverify/references/<name>/child/`, package data run by path).
Loading that cannot be resolved statically (`importlib.import_module` or
`__import__` of a computed name that is not a literal, a subscript of a
module-level literal table that no module changes in place, a `.split()`
of one, or a local bound exactly once, by `=`, to one of these; resolved
names are checked like imports and listed as info), `runpy`, file loaders
on a computed path, `exec`/`eval` of computed code, edits of `sys.path`)
is listed for review (informational); `exec` of a literal is scanned as
code. In the oracle area every place that loads reference code
is listed: drivers run only in a child process. Files under `tests/` (and
anything else outside `esverify/`) are data, not the package.

Reference module names: the built-in list below (matched on any dotted
component) plus every module and package name found in each `--ref`
(matched on the top-level component, since only the clone's folders can
be put on `sys.path`), minus standard-library names and packaging names
(`setup`, `conftest`, `tests`) that would only produce noise.
"""
from __future__ import annotations

import ast
import re
import sys
from collections import Counter
from pathlib import PurePosixPath

import pandas as pd

from .. import pyast

PACKAGE = "esverify"
ORACLE_PREFIXES = ("oracles/",)
#: a reference's child folder: esverify/references/<name>/child/...
CHILD_FOLDER = re.compile(r"^esverify/references/[^/]+/child/")
#: words that name the oracle area in code: the runtime package, its folder helpers, a child folder
ORACLE_WORDS = re.compile(r"\boracles\b|oracles_dir|child_dir|/child/|\bchild/driver")
IGNORED_REF_NAMES = frozenset({"setup", "conftest", "tests", "test", "__init__", "__main__", PACKAGE})

IMPORT_CALLS = {"importlib.import_module", "__import__", "importlib.__import__", "builtins.__import__"}
PATH_LOADS = {"importlib.util.spec_from_file_location", "importlib.machinery.SourceFileLoader",
              "importlib.machinery.SourcelessFileLoader", "importlib.machinery.ExtensionFileLoader",
              "importlib.util.spec_from_loader", "imp.load_source", "imp.load_module", "imp.load_compiled",
              "imp.load_package", "zipimport.zipimporter", "runpy.run_path", "pkgutil.get_importer",
              "site.addsitedir"}
MODULE_RUNS = {"runpy.run_module"}
EXECS = {"exec", "eval", "builtins.exec", "builtins.eval"}
SYS_PATH_EDITS = {"sys.path.insert", "sys.path.append", "sys.path.extend"}
CHILD_LAUNCHES = {"subprocess.run", "subprocess.Popen", "subprocess.call", "subprocess.check_call",
                  "subprocess.check_output", "os.system", "asyncio.create_subprocess_exec",
                  "asyncio.create_subprocess_shell", "os.execv", "os.execvp", "os.execve", "os.spawnv"}

COLUMNS = ["area", "status", "file", "line", "kind", "detail"]


def builtin_reference_modules() -> frozenset:
    """The references' own top-level module names (each record's `clone_modules`, esverify.registry),
    looked for even when the audit is given no clone."""
    from .. import registry
    return registry.clone_modules()


def reference_module_names(ref_entries) -> tuple[set[str], list[str]]:
    """(names, excluded names) of the modules and packages in reference files."""
    found: set[str] = set()
    for entry in ref_entries:
        path = PurePosixPath(entry.path)
        if path.suffix != ".py":
            continue
        found.add(path.stem)
        found.update(path.parts[:-1])
    stdlib = set(getattr(sys, "stdlib_module_names", ()))
    excluded = sorted(n for n in found if n in IGNORED_REF_NAMES or n in stdlib or not n.isidentifier()
                      or n.startswith("."))
    return found - set(excluded), excluded


def _dotted(node) -> str | None:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return None


def _mentions_oracle_area(node) -> bool:
    for sub in ast.walk(node):
        if isinstance(sub, ast.Name) and ORACLE_WORDS.search(sub.id):
            return True
        if isinstance(sub, ast.Attribute) and ORACLE_WORDS.search(sub.attr):
            return True
        if isinstance(sub, ast.Constant) and isinstance(sub.value, str) and ORACLE_WORDS.search(sub.value):
            return True
    return False


def _constants(args) -> list[str]:
    return [a.value for a in args if isinstance(a, ast.Constant) and isinstance(a.value, str)]


class _Scanner(ast.NodeVisitor):
    """Collects (line, status-class, kind, detail) for one file."""

    def __init__(self, path: str, names: set[str], tables: dict[str, list[str]] | None = None):
        self.path = PurePosixPath(path)
        self.names = names
        self.builtin = builtin_reference_modules()
        self.aliases: dict[str, str] = {}
        self.items: list[tuple[int, str, str, str]] = []
        self.tables = tables or {}
        self.local: dict[str, ast.AST | None] = {}

    # -- static resolution of "computed" module names --
    def visit_FunctionDef(self, node):
        saved = self.local
        self.local = {}
        # Only a name bound exactly once, by a plain `=`, is resolved: any other
        # binding (a second `=`, `+=`, `for`, `with ... as`, `:=`, an argument,
        # `global`/`nonlocal`) could change its value, so the call is reviewed.
        bound = _binding_counts(node)
        for sub in ast.walk(node):
            if isinstance(sub, ast.Assign):
                for target in sub.targets:
                    for leaf in ast.walk(target):
                        if isinstance(leaf, ast.Name):
                            self.local[leaf.id] = sub.value if bound[leaf.id] == 1 else None
        self.generic_visit(node)
        self.local = saved

    visit_AsyncFunctionDef = visit_FunctionDef

    def _candidates(self, expr, depth: int = 0) -> list[str] | None:
        """Every string `expr` can evaluate to, or None when unknown. Handles
        literals, subscripts of module-level literal tables, `.split()` of
        those, and local names bound once to such an expression."""
        if depth > 4:
            return None
        if isinstance(expr, ast.Constant) and isinstance(expr.value, str):
            return [expr.value]
        if isinstance(expr, ast.Subscript):
            if isinstance(expr.value, ast.Name) and expr.value.id in self.tables:
                return self.tables[expr.value.id]
            return self._candidates(expr.value, depth + 1)
        if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute) and \
                expr.func.attr in ("split", "rsplit", "partition", "rpartition", "strip"):
            inner = self._candidates(expr.func.value, depth + 1)
            if inner is None:
                return None
            seps = _constants(expr.args) or [":", "."]
            return sorted({part for c in inner for sep in seps for part in [c, *c.split(sep)] if part})
        if isinstance(expr, ast.Name) and self.local.get(expr.id) is not None:
            return self._candidates(self.local[expr.id], depth + 1)
        return None

    # -- classification helpers --
    def _package_parts(self) -> list[str]:
        parts = list(self.path.parts[:-1])
        return parts

    def _bad_module(self, mod: str) -> str | None:
        """Why importing `mod` crosses the boundary, or None."""
        parts = mod.split(".")
        if parts[0] == PACKAGE:
            # a reference's child folder has no __init__.py, but Python imports it as a namespace package
            if len(parts) > 3 and parts[1] == "references" and parts[3] == "child":
                return "oracle-area"
            return None
        if parts[0] == "oracles":
            return "oracle-area"
        hits = [p for p in parts if p in self.builtin]
        if hits or parts[0] in self.names:
            return "reference"
        return None

    def _flag_module(self, node, mod: str, how: str):
        why = self._bad_module(mod)
        if why == "oracle-area":
            self.items.append((node.lineno, "bad", "oracle area in-process", f"{how} {mod}"))
        elif why == "reference":
            self.items.append((node.lineno, "bad", "reference import", f"{how} {mod}"))

    def _names_reference(self, path: str) -> bool:
        pure = PurePosixPath(path)
        return bool((set(pure.parts) | {pure.stem}) & (self.names | self.builtin))

    # -- visitors --
    def visit_Import(self, node):
        for alias in node.names:
            self.aliases[alias.asname or alias.name.split(".")[0]] = alias.name if alias.asname \
                else alias.name.split(".")[0]
            self._flag_module(node, alias.name, "import")
        self.generic_visit(node)

    def visit_ImportFrom(self, node):
        if node.level:
            base = self._package_parts()
            base = base[:len(base) - (node.level - 1)] if node.level > 1 else base
            mod = ".".join(base + ([node.module] if node.module else []))
        else:
            mod = node.module or ""
        candidates = [mod] + [f"{mod}.{a.name}" for a in node.names if a.name != "*"]
        flagged = False
        for cand in candidates:
            if not flagged and self._bad_module(cand):
                self._flag_module(node, cand, "from-import")
                flagged = True
        for alias in node.names:
            self.aliases[alias.asname or alias.name] = f"{mod}.{alias.name}"
        self.generic_visit(node)

    def _resolve(self, func) -> str | None:
        name = _dotted(func)
        if name is None:
            return None
        head, _, rest = name.partition(".")
        full = self.aliases.get(head, head)
        return f"{full}.{rest}" if rest else full

    def visit_Call(self, node):
        name = self._resolve(node.func)
        args = list(node.args) + [k.value for k in node.keywords]
        first = node.args[0] if node.args else None
        const = first.value if isinstance(first, ast.Constant) and isinstance(first.value, str) else None
        if name in IMPORT_CALLS or name in MODULE_RUNS:
            cands = self._candidates(first) if first is not None else None
            if const is not None:
                self._flag_module(node, const, f"{name}(")
            elif cands is None:
                self.items.append((node.lineno, "review", "computed import",
                                   f"{name}() with a computed module name"))
            else:
                mods = list(dict.fromkeys(c for c in cands if all(p.isidentifier() for p in c.split("."))))
                before = len(self.items)
                for mod in mods:
                    if len(self.items) == before:
                        self._flag_module(node, mod, f"{name}( resolved to")
                if len(self.items) == before:
                    self.items.append((node.lineno, "resolved", "resolved import",
                                       f"{name}() resolved statically to one of: {', '.join(mods)}"))
        elif name in PATH_LOADS:
            if any(_mentions_oracle_area(a) for a in args):
                self.items.append((node.lineno, "bad", "oracle area in-process",
                                   f"{name}() on an oracle-area path"))
            elif any(self._names_reference(c) for c in _constants(args)):
                hit = next(c for c in _constants(args) if self._names_reference(c))
                self.items.append((node.lineno, "bad", "reference load by path", f"{name}({hit!r})"))
            else:
                self.items.append((node.lineno, "review", "load by path", f"{name}() (path not resolved)"))
        elif name in EXECS:
            if const is not None:  # literal code is static: scan it like the file itself
                for _, cls, kind, detail in scan_file(str(self.path), const, self.names):
                    self.items.append((node.lineno, cls, kind, f"in {name}() of a literal: {detail}"))
            elif first is not None and not isinstance(first, ast.Constant):
                self.items.append((node.lineno, "review", "exec of computed code", f"{name}() of a computed value"))
        elif name in SYS_PATH_EDITS:
            self.items.append((node.lineno, "review", "sys.path edit", f"{name}()"))
        elif name in CHILD_LAUNCHES and any(_mentions_oracle_area(a) for a in args):
            self.items.append((node.lineno, "child", "oracle child launch",
                               f"{name}() runs the oracle area in a child"))
        self.generic_visit(node)

    def visit_Assign(self, node):
        for target in getattr(node, "targets", None) or [node.target]:
            base = target.value if isinstance(target, ast.Subscript) else target
            if self._resolve(base) == "sys.path" if isinstance(base, (ast.Attribute, ast.Name)) else False:
                self.items.append((node.lineno, "review", "sys.path edit", "assignment to sys.path"))
        self.generic_visit(node)

    visit_AugAssign = visit_Assign  # sys.path += [...]


def scan_file(path: str, text: str, names: set[str],
              mutated_elsewhere: frozenset[str] = frozenset(), parsed=None) -> list[tuple[int, str, str, str]]:
    """Boundary items of one Python file; a file that does not parse yields one review item.

    mutated_elsewhere: table names that other files mutate as attributes
    (`area.AREA_MODULES[k] = ...`); such tables are not trusted here.
    parsed: (tree, _mutated_names(tree)) of `text` when the caller has them (`scan` parses each file once).
    """
    if parsed is None:
        try:
            tree = pyast.parse(text, filename=path)
        except (SyntaxError, ValueError) as exc:
            return [(getattr(exc, "lineno", 0) or 0, "review", "not parsed",
                     f"cannot parse with Python {sys.version_info.major}.{sys.version_info.minor}: "
                     f"{getattr(exc, 'msg', exc)}")]
        parsed = (tree, _mutated_names(tree))
    tree, mutated = parsed
    tables = _literal_tables(tree)
    untrusted = mutated[0] | set(mutated_elsewhere)
    scanner = _Scanner(path, names, {k: v for k, v in tables.items() if k not in untrusted})
    scanner.visit(tree)
    return scanner.items


#: methods that change a dict, list or set in place.
_MUTATORS = frozenset({"update", "setdefault", "__setitem__", "__delitem__", "append", "extend", "insert",
                       "add", "pop", "popitem", "remove", "discard", "clear", "__ior__", "__iadd__"})


def _binding_counts(scope) -> Counter:
    """How many times each name is (re)bound anywhere inside `scope` (nested scopes included)."""
    bound: Counter = Counter()
    for sub in ast.walk(scope):
        if isinstance(sub, ast.Name) and isinstance(sub.ctx, (ast.Store, ast.Del)):
            bound[sub.id] += 1
        elif isinstance(sub, ast.arg):
            bound[sub.arg] += 1
        elif isinstance(sub, (ast.Global, ast.Nonlocal)):
            bound.update({n: 2 for n in sub.names})
        elif isinstance(sub, ast.alias):
            bound[(sub.asname or sub.name).split(".")[0]] += 1
        elif isinstance(sub, ast.ExceptHandler) and sub.name:
            bound[sub.name] += 1
        elif isinstance(sub, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and sub is not scope:
            bound[sub.name] += 1
        elif isinstance(sub, (ast.MatchAs, ast.MatchStar)) and sub.name:
            bound[sub.name] += 1
        elif isinstance(sub, ast.MatchMapping) and sub.rest:
            bound[sub.rest] += 1
    return bound


def _mutated_names(tree) -> tuple[set[str], set[str]]:
    """(bare, attribute) names a module may change after binding them.

    bare: names bound more than once anywhere in the module, or changed in
    place (`T[k] = v`, `del T[k]`, `T += ...`, `T.update(...)`) or handed
    to another name (`U = T`); attribute: the same through an attribute
    (`mod.T[k] = v`, `mod.T.update(...)`, `mod.T = ...`, `setattr(mod, "T", ...)`),
    which can reach another module's table.
    """
    bare = {n for n, c in _binding_counts(tree).items() if c > 1}
    attr: set[str] = set()

    def note(node):
        if isinstance(node, ast.Name):
            bare.add(node.id)
        elif isinstance(node, ast.Attribute):
            attr.add(node.attr)

    for sub in ast.walk(tree):
        if isinstance(sub, ast.Subscript) and isinstance(sub.ctx, (ast.Store, ast.Del)):
            note(sub.value)
        elif isinstance(sub, ast.AugAssign):
            note(sub.target)
        elif isinstance(sub, ast.Attribute) and isinstance(sub.ctx, (ast.Store, ast.Del)):
            attr.add(sub.attr)
        elif isinstance(sub, ast.Call) and isinstance(sub.func, ast.Attribute) and sub.func.attr in _MUTATORS:
            note(sub.func.value)
        elif isinstance(sub, ast.Call) and isinstance(sub.func, ast.Name) and sub.func.id == "setattr" \
                and len(sub.args) > 1 and isinstance(sub.args[1], ast.Constant) and isinstance(sub.args[1].value, str):
            attr.add(sub.args[1].value)
        elif isinstance(sub, (ast.Assign, ast.AnnAssign, ast.NamedExpr)) and isinstance(sub.value, ast.Name):
            bare.add(sub.value.id)  # an alias could be changed in place under another name
    return bare, attr


def _strings(value) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, (list, tuple, set, frozenset)):
        return [s for v in value for s in _strings(v)]
    return []


def _literal_tables(tree) -> dict[str, list[str]]:
    """Module-level names bound once to a literal container: name -> its strings (dict values)."""
    tables: dict[str, list[str] | None] = {}
    for node in tree.body:
        targets, value = ([node.target], node.value) if isinstance(node, ast.AnnAssign) else \
            (node.targets, node.value) if isinstance(node, ast.Assign) else ([], None)
        for target in targets:
            if isinstance(target, ast.Name):
                try:
                    literal = ast.literal_eval(value) if value is not None else None
                except (ValueError, SyntaxError, TypeError):
                    literal = None
                ok = isinstance(literal, (dict, list, tuple, set, frozenset)) and target.id not in tables
                tables[target.id] = _strings(literal) if ok else None
    return {k: v for k, v in tables.items() if v is not None}


def area_of(path: str) -> str | None:
    """"package", "oracle area" or None (not scanned) for a posix path."""
    if path.startswith(ORACLE_PREFIXES) or CHILD_FOLDER.match(path):
        return "oracle area"
    if path.startswith(PACKAGE + "/"):
        return "package"
    return None


def scan(entries, names: set[str]) -> pd.DataFrame:
    """Import-boundary rows for every Python file of the package and oracle area.

    status: "finding" (package crosses the boundary), "review" (unresolved
    dynamic loading, informational), "listed" (oracle area loads reference
    code: allowed only in the child process), "info" (package launches the
    oracle area in a child process).
    """
    rows = []
    scanned = [e for e in entries if area_of(e.plain_path) and e.kind == "code" and e.language == "python"]
    mutated_elsewhere: set[str] = set()
    parsed = {}   # each file parsed and walked once, for both passes (the scan's largest cost)
    for k, entry in enumerate(scanned):  # tables another module changes (`area.AREA_MODULES[k] = ...`) are not trusted
        try:
            tree = pyast.parse(entry.text, filename=entry.path)
        except (SyntaxError, ValueError):
            continue   # scan_file parses it again and says why
        parsed[k] = (tree, _mutated_names(tree))
        mutated_elsewhere |= parsed[k][1][1]
    for k, entry in enumerate(scanned):
        area = area_of(entry.plain_path)
        for line, cls, kind, detail in scan_file(entry.path, entry.text, names, frozenset(mutated_elsewhere),
                                                 parsed.get(k)):
            if area == "package":
                status = {"bad": "finding", "review": "review", "child": "info", "resolved": "info"}[cls]
            elif kind == "oracle area in-process" or cls == "resolved":
                continue  # drivers may import each other: they all run in the child
            else:
                if cls == "child" or (cls == "review" and kind == "not parsed"):
                    status = "info" if cls == "child" else "review"
                else:
                    status = "listed"
                    detail += "; allowed only because oracle drivers run in a child process"
            rows.append({"area": area, "status": status, "file": entry.path, "line": line,
                         "kind": kind, "detail": detail})
    frame = pd.DataFrame(rows, columns=COLUMNS)
    order = {"finding": 0, "review": 1, "listed": 2, "info": 3}
    if len(frame):
        frame = frame.assign(_o=frame["status"].map(order)).sort_values(
            ["_o", "file", "line"], kind="stable").drop(columns="_o").reset_index(drop=True)
    return frame
