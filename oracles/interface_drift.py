"""Interface drift: a reference clone's entry points against the interface manifest (docs/references.md §5).

Runs in the parity child (Python 3.11 or 3.12) before a loop is driven, and
in esverify's own tests; standard library only, nothing from esverify, and
the clone's files are READ, never imported or run (`ast`).

A reference's `child/interfaces.json` (the manifest) describes, per target, the
entry-point files of the references at the documented commits: their
module-level imports, functions, classes with methods, argparse flags and
module constants. `extract(path)` computes the same description of a
file; `compare(expected, actual)` lists what differs in a way that can
stop esverify from driving the clone (a finding per difference);
`check_clone(root, target, manifest)` does that for every file of a
target. Things a clone has beyond the manifest (private helpers, extra
imports, optional keyword-only parameters) are not findings: a clone may
have more than esverify drives. A new argparse flag is one: esverify does
not pass it.

The description follows the manifest's own conventions:
- `module_imports`: top-level `import` / `from ... import` statements only
  (not those inside functions, `if` or `try` blocks), in source order, one
  entry per bound name: `{"module", "as"}` or `{"from", "name", "as"}`;
  `as` is the alias, else the imported name as written (`import a.b`
  gives `"as": "a.b"`).
- `functions`: top-level `def` -> its positional parameters, each
  `{"name", "default"}` with the default's source text (`ast.unparse`) or
  null. `*args` and `**kwargs` do not appear (the manifest lists an
  `__init__(self, *args, **kwargs)` as `[self]`). Keyword-only parameters
  are appended with `"keyword_only": true`; the manifest has none.
- `classes`: top-level `class` -> `{"bases": [source text], "methods":
  {name: parameters}}`, methods being the `def`s directly in the body.
- `argparse_flags` (only when the file has any): every `*.add_argument(...)`
  call in source order: `"flag"` (its first option string) and, when
  given, the keywords `type`, `choices`, `default`, `action` as source text.
- `module_constants` (only when the file has any): top-level assignments of
  a literal to an UPPER_CASE name, or to a name listed in `names`.
"""
from __future__ import annotations

import ast
import json
import re
import sys
from pathlib import Path

#: the argparse keywords the manifest records, as source text
FLAG_KEYS = ("type", "choices", "default", "action")
_UPPER = re.compile(r"^_?[A-Z][A-Z0-9_]*$")


# ----------------------------------------------------------------- extract

def _params(args: ast.arguments) -> list:
    """Positional parameters (with defaults, right-aligned as Python does), then keyword-only ones."""
    positional = [*args.posonlyargs, *args.args]
    defaults = [None] * (len(positional) - len(args.defaults)) + list(args.defaults)
    params = [{"name": a.arg, "default": ast.unparse(d) if d is not None else None}
              for a, d in zip(positional, defaults)]
    for a, d in zip(args.kwonlyargs, args.kw_defaults):
        params.append({"name": a.arg, "default": ast.unparse(d) if d is not None else None, "keyword_only": True})
    return params


def _imports(tree: ast.Module) -> list:
    found = []
    for node in tree.body:
        if isinstance(node, ast.Import):
            found += [{"module": a.name, "as": a.asname or a.name} for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            module = "." * node.level + (node.module or "")
            found += [{"from": module, "name": a.name, "as": a.asname or a.name} for a in node.names]
    return found


def _flags(tree: ast.Module) -> list:
    calls = [node for node in ast.walk(tree)
             if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
             and node.func.attr == "add_argument" and node.args]
    flags = []
    for call in sorted(calls, key=lambda n: (n.lineno, n.col_offset)):
        first = call.args[0]
        flag = {"flag": first.value if isinstance(first, ast.Constant) else ast.unparse(first)}
        for keyword in call.keywords:
            if keyword.arg in FLAG_KEYS:
                flag[keyword.arg] = ast.unparse(keyword.value)
        flags.append(flag)
    return flags


def _literal(node):
    """The JSON value of a literal expression (tuples become lists); raises ValueError when not a literal."""
    value = ast.literal_eval(node)
    if isinstance(value, tuple):
        value = list(value)
    json.dumps(value)   # sets, bytes and complex numbers are not manifest values
    return value


def _constants(tree: ast.Module, names) -> dict:
    wanted = set(names or ())
    found = {}
    for node in tree.body:
        if isinstance(node, ast.Assign):
            targets, value = node.targets, node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            targets, value = [node.target], node.value
        else:
            continue
        for target in targets:
            if isinstance(target, ast.Name) and (_UPPER.match(target.id) or target.id in wanted):
                try:
                    found[target.id] = _literal(value)   # the last assignment wins, as at run time
                except (ValueError, TypeError, SyntaxError, RecursionError):
                    found.pop(target.id, None)
    return found


def extract_source(source: str, filename: str = "<source>", names=()) -> dict:
    """The manifest-shaped description of Python `source` (without the "file" key).

    names: module-level names to record as constants besides the UPPER_CASE
    ones. Raises SyntaxError when the source does not parse under this
    interpreter (a clone needing a newer Python than the child's)."""
    tree = ast.parse(source, filename=filename)
    functions, classes = {}, {}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            functions[node.name] = _params(node.args)
        elif isinstance(node, ast.ClassDef):
            methods = {item.name: _params(item.args) for item in node.body
                       if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef))}
            classes[node.name] = {"bases": [ast.unparse(b) for b in node.bases], "methods": methods}
    entry = {"module_imports": _imports(tree), "functions": functions, "classes": classes}
    flags = _flags(tree)
    if flags:
        entry["argparse_flags"] = flags
    constants = _constants(tree, names)
    if constants:
        entry["module_constants"] = constants
    return entry


def extract(path, names=()) -> dict:
    """The description of the Python file at `path` in the manifest's schema (docs/references.md §5).

    Returns a dict with keys module_imports (list), functions (name ->
    parameters), classes (name -> {"bases", "methods"}) and, when present,
    argparse_flags (list) and module_constants (name -> JSON value).
    Raises OSError when the file cannot be read, SyntaxError when it does
    not parse under this interpreter."""
    path = Path(path)
    return extract_source(path.read_text(encoding="utf-8"), str(path), names)


# ----------------------------------------------------------------- compare

def _finding(file, kind, name, expected, found) -> dict:
    return {"file": file, "kind": kind, "name": name, "expected": expected, "found": found}


def _signature_differs(expected: list, found: list) -> bool:
    """Whether a parameter list changed. Optional keyword-only parameters the manifest does not list are
    ignored (a call by esverify cannot miss them); a required one is a change."""
    listed = {p["name"] for p in expected}
    kept = [p for p in found
            if not (p.get("keyword_only") and p["default"] is not None and p["name"] not in listed)]
    return kept != expected


def _import_key(entry: dict) -> tuple:
    return (entry.get("module"), entry.get("from"), entry.get("name"), entry["as"])


def compare(expected: dict, actual: dict) -> list:
    """Findings where `actual` (extract() of a clone's file) differs from `expected` (its manifest entry).

    Each finding is {"file", "kind", "name", "expected", "found"}; kinds:
    missing-import (name = the bound name; found = the clone's import
    binding that name, or None), missing-function, missing-class, bases,
    missing-method, signature (name "f" or "Class.method"; expected/found
    the parameter lists), flag-missing, flag-new, flag-type, flag-choices,
    flag-default, flag-action (name = the flag), constant (found None when
    absent). Things the clone has beyond the manifest are not findings,
    except new argparse flags."""
    file = expected.get("file", actual.get("file", ""))
    findings = []
    have = {_import_key(i) for i in actual.get("module_imports", [])}
    bound = {i["as"]: i for i in actual.get("module_imports", [])}
    for entry in expected.get("module_imports", []):
        if _import_key(entry) not in have:
            findings.append(_finding(file, "missing-import", entry["as"], entry, bound.get(entry["as"])))
    functions = actual.get("functions", {})
    for name, params in expected.get("functions", {}).items():
        if name not in functions:
            findings.append(_finding(file, "missing-function", name, params, None))
        elif _signature_differs(params, functions[name]):
            findings.append(_finding(file, "signature", name, params, functions[name]))
    classes = actual.get("classes", {})
    for cname, spec in expected.get("classes", {}).items():
        if cname not in classes:
            findings.append(_finding(file, "missing-class", cname, spec, None))
            continue
        theirs = classes[cname]
        if spec.get("bases", []) != theirs.get("bases", []):
            findings.append(_finding(file, "bases", cname, spec.get("bases", []), theirs.get("bases", [])))
        methods = theirs.get("methods", {})
        for mname, params in spec.get("methods", {}).items():
            qualified = f"{cname}.{mname}"
            if mname not in methods:
                findings.append(_finding(file, "missing-method", qualified, params, None))
            elif _signature_differs(params, methods[mname]):
                findings.append(_finding(file, "signature", qualified, params, methods[mname]))
    if "argparse_flags" in expected:
        theirs = {f["flag"]: f for f in actual.get("argparse_flags", [])}
        ours = {f["flag"]: f for f in expected["argparse_flags"]}
        for flag, spec in ours.items():
            if flag not in theirs:
                findings.append(_finding(file, "flag-missing", flag, spec, None))
                continue
            for key in FLAG_KEYS:
                if spec.get(key) != theirs[flag].get(key):
                    findings.append(_finding(file, f"flag-{key}", flag, spec.get(key), theirs[flag].get(key)))
        for flag, spec in theirs.items():
            if flag not in ours:
                findings.append(_finding(file, "flag-new", flag, None, spec))
    constants = actual.get("module_constants", {})
    for name, value in expected.get("module_constants", {}).items():
        # 1 == 1.0 == True in Python: a changed type is a change too
        if name not in constants or (type(constants[name]), constants[name]) != (type(value), value):
            findings.append(_finding(file, "constant", name, value, constants.get(name)))
    return findings


# ----------------------------------------------------------------- a clone

def load_manifest(manifest_path) -> dict:
    """The manifest as a dict; ValueError naming the file when it cannot be read or is not JSON."""
    path = Path(manifest_path)
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ValueError(f"interface manifest {path}: {type(exc).__name__}: {exc}") from None


def check_clone(clone_root, target: str, manifest_path, base: str = "", only=None) -> list:
    """Findings for every file of `target` (a top-level key of the manifest) against the clone.

    base: a folder prefix of the manifest's paths that the clone does not have (the paper's scripts
    sit in `archive/` of an es-at-scale clone and at the root of a fork: base "archive/" reads
    `archive/x.py` of the manifest as `x.py` of the clone). only: the manifest paths to check (None:
    all of the target's files); findings name the file as the clone has it.

    A file missing from the clone is a "missing-file" finding; one that cannot
    be read or parsed by this interpreter is "unreadable" (found: the error,
    with its line), not an exception. Raises ValueError for an unknown target
    or an unreadable manifest."""
    manifest = load_manifest(manifest_path)
    if target not in manifest or "files" not in manifest[target]:
        known = ", ".join(k for k, v in manifest.items() if isinstance(v, dict) and "files" in v)
        raise ValueError(f"interface manifest {manifest_path}: no target {target!r} (it has: {known})")
    root = Path(clone_root)
    findings = []
    for entry in manifest[target]["files"]:
        if only is not None and entry["file"] not in only:
            continue
        rel = entry["file"][len(base):] if base and entry["file"].startswith(base) else entry["file"]
        entry = {**entry, "file": rel}
        path = root / rel
        if not path.is_file():
            findings.append(_finding(rel, "missing-file", rel, rel, None))
            continue
        try:
            actual = extract(path, names=entry.get("module_constants", {}).keys())
        except SyntaxError as exc:
            needs = newer_python(exc)
            if needs:   # the interpreter's limit, not the reference's drift: said as such (needs-python)
                findings.append(_finding(rel, "needs-python", rel, needs, f"Python {sys.version.split()[0]}"))
            else:
                findings.append(_finding(rel, "unreadable", rel, None, f"SyntaxError: {exc.msg} (line {exc.lineno})"))
            continue
        except (OSError, UnicodeDecodeError, ValueError) as exc:
            findings.append(_finding(rel, "unreadable", rel, None, f"{type(exc).__name__}: {exc}"))
            continue
        findings += compare(entry, {"file": rel, **actual})
    return findings


def newer_python(exc: SyntaxError) -> str | None:
    """"Python 3.12 or newer" when `exc` is this (older) interpreter failing on PEP 701 f-string syntax, the
    one newer syntax the references use; None for a syntax error a newer Python would raise too."""
    if sys.version_info < (3, 12) and "f-string" in str(exc.msg):
        return "Python 3.12 or newer"
    return None


def _names(params) -> str:
    return ", ".join(p["name"] + (f"={p['default']}" if p["default"] is not None else "") for p in params or [])


def describe(finding: dict) -> str:
    """One line saying what a finding means, e.g. "es.py: flag --foo is new (esverify does not pass it)"."""
    f, kind, name = finding["file"], finding["kind"], finding["name"]
    exp, got = finding["expected"], finding["found"]
    if kind == "missing-file":
        return f"{f}: file missing from the clone"
    if kind == "unreadable":
        return f"{f}: cannot be read here: {got}"
    if kind == "needs-python":
        return f"{f}: not checked here: it needs {exp}, the child is {got}"
    if kind == "missing-import":
        now = f" (it binds {name!r} from {got.get('from') or got.get('module')} instead)" if got else ""
        return f"{f}: module-level import of {name!r} missing{now}"
    if kind in ("missing-function", "missing-class", "missing-method"):
        return f"{f}: {kind.split('-', 1)[1]} {name} missing"
    if kind == "bases":
        return f"{f}: class {name} bases ({', '.join(got)}) instead of ({', '.join(exp)})"
    if kind == "signature":
        return f"{f}: {name}({_names(got)}) instead of ({_names(exp)})"
    if kind == "flag-missing":
        return f"{f}: flag {name} missing"
    if kind == "flag-new":
        return f"{f}: flag {name} is new (esverify does not pass it)"
    if kind.startswith("flag-"):
        return f"{f}: flag {name} {kind[5:]} {got} instead of {exp}"
    if kind == "constant":
        return f"{f}: constant {name} = {got!r} instead of {exp!r}" if got is not None else \
            f"{f}: constant {name} missing"
    return f"{f}: {kind} {name}: {got!r} instead of {exp!r}"
