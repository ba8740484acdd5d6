"""Shared interface and idioms versus shared code in the similarity section.

The test stand-ins (tests/standins/) reproduce each reference's public
interface exactly: module imports, function and method signatures with their
defaults, argparse flags, module constants and dataclass fields. Written in
the same order, such declarations form long identical token runs that
copydetect reports as copied regions. This module tells those runs apart from
shared implementation.

The line is drawn by the project's interface data (each reference's
`child/interfaces.json`, docs/references.md §5.3): per reference, the entry-point files with their
declarations, as data. For a pair (tree file, reference file):

1. a clone is the references of the data that list one of its files, by
   path suffix either way (`es.py` matches es-awd's `es.py`;
   `es_fine-tuning_countdown.py` at the root of a fork matches
   `archive/es_fine-tuning_countdown.py`), over all references the data
   holds; the reference side is classified against every file those
   references list, the tree side against the same plus the references its
   own path matches (a stand-in of one reference paired with another
   reference's clone declares its own reference's interface);
2. `declarations` locates, with `ast` and `tokenize`, the declarations of a
   file that appear in those entries: a top-level import statement all of
   whose bound names are listed; a `def`/`class` header (from its bare
   decorators, such as `@dataclass`, to the colon that ends the header) whose
   name, parameters and defaults (bases for a class) equal the data's; a
   method header of a listed class likewise; an `add_argument(...)` statement
   whose flag, type, choices, default and action equal a listed flag; a
   top-level `NAME = literal` with the listed value; a dataclass field with
   the listed annotation and default. A declaration that differs in any of
   these is not interface;
3. `mask` gives, per copydetect filtered token, whether it lies inside such a
   declaration (and which), by lexing the text exactly as copydetect does
   (checked: the filtered text must equal copydetect's, else no token is
   interface).

Declarations are also recognised by their kind, whatever the data lists
(`by_kind`): an import below the module's top level (in a function body, a
class, an `if` or `try`: the data records module-level imports only), a
method's store of one of its own parameters in an attribute of the same name
(`self.a = a`, a constructor's run of them), and a call of a third-party
package (a name imported from outside the standard library) with keyword
arguments made only of names, keyword names and literals (a configuration
object: `LoraConfig(r=8, target_modules=[...])`).

`side` then looks at every copied region of a pair that reaches the region
minimum, on both sides. A token that lies in no declaration is *own* code,
unless it belongs to an idiom: a short piece of own tokens (between two
declarations, fewer than IDIOM_MAX_TOKENS) made mostly of shapes of the
base-code corpus (`corpus`: the interpreter's standard library), listed and
not counted. A run made only of brackets, commas, colons and semicolons (`)`
closing the statement before a declaration) carries no code and is listed as
`delimiters`. The pair is a finding only when one region holds, in the
*tree* file, at least `min_tokens` own tokens: the reference's side of a
region is shown (its own runs in `not_interface`) but never makes a finding,
since what the audit must establish is what the audited file holds.
"""
from __future__ import annotations

import ast
import io
import json
import tokenize
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .. import pyast
from .filtered import filtered_positions

#: the argparse keywords the interface data records, as source text (oracles/interface_drift.py)
FLAG_KEYS = ("type", "choices", "default", "action")
#: filtered characters that carry no code: brackets, commas, colons, semicolons that join statements,
#: and copydetect's string placeholders (`S` for a string's contents, `"` for a quote); a non-interface
#: run made only of these is listed and not counted (the text pass compares docstring words)
NO_CODE = frozenset('()[]{},:;S"')
#: filtered tokens of a run shown in the report (the line:column range gives the whole run)
SHOWN = 60
#: a piece of own code shorter than this can be an idiom (`_idiom_pieces`): the idioms any file has
#: (a folder checked, removed and made again; a batch loop; a print in an `except`) are 30-60 tokens
IDIOM_MAX_TOKENS = 64


@dataclass(frozen=True)
class Declaration:
    """One interface declaration found in a file: a half-open span of (line, column) positions
    (1-based lines, 0-based character columns, as `tokenize`) and its label, e.g. `def main(args)`."""

    start: tuple[int, int]
    end: tuple[int, int]
    label: str


def default_paths() -> list[Path]:
    """The interface data esverify ships: each built-in reference's `child/interfaces.json`, sorted."""
    from esverify.paths import interface_files
    return interface_files()


def load_shipped() -> dict:
    """Every reference's shipped interface data in one {reference name: {...}} (`load` of each file);
    ValueError when a file cannot be read or two files describe one reference."""
    out: dict = {}
    for path in default_paths():
        for name, spec in load(path).items():
            if name in out:
                raise ValueError(f"interface data {path}: reference {name!r} is described twice")
            out[name] = spec
    return out


def load(path) -> dict:
    """The interface data at `path`: {reference name: {"files": [{"file": ..., ...}], ...}}.

    Raises ValueError (one line, naming the path) when it cannot be read or has no such shape."""
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise ValueError(f"interface data {path}: cannot read it ({exc})") from None
    if not isinstance(data, dict) or not all(isinstance(v, dict) and isinstance(v.get("files"), list)
                                             for v in data.values()):
        raise ValueError(f"interface data {path}: expected {{reference: {{'files': [...]}}}}")
    return data


def _matches(path: str, listed: str) -> bool:
    return bool(listed) and (path == listed or path.endswith("/" + listed) or listed.endswith("/" + path))


def references_in(paths, data: dict) -> list[str]:
    """The references of `data` (in its order) that a clone holding files `paths` (posix, relative to
    the clone) is: those with a listed file matching one of `paths` by path suffix either way."""
    paths = list(paths)
    return [name for name, spec in data.items()
            if any(_matches(p, str(entry.get("file", ""))) for entry in spec.get("files", []) for p in paths)]


def entries_for(names, data: dict) -> list[tuple[str, dict]]:
    """(reference name, file entry) of every file `data` lists for the references `names`."""
    return [(name, entry) for name in names for entry in data[name].get("files", [])]


# ------------------------------------------------------------------ declarations

def _params(args: ast.arguments) -> list:
    """As oracles/interface_drift.py: positional parameters with defaults, then keyword-only ones."""
    positional = [*args.posonlyargs, *args.args]
    defaults = [None] * (len(positional) - len(args.defaults)) + list(args.defaults)
    params = [{"name": a.arg, "default": ast.unparse(d) if d is not None else None}
              for a, d in zip(positional, defaults)]
    for a, d in zip(args.kwonlyargs, args.kw_defaults):
        params.append({"name": a.arg, "default": ast.unparse(d) if d is not None else None, "keyword_only": True})
    return params


def _same_params(found: list, listed) -> bool:
    return isinstance(listed, list) and found == [dict(p) for p in listed]


def _signature(name: str, params: list) -> str:
    return f"{name}(" + ", ".join(p["name"] + (f"={p['default']}" if p["default"] is not None else "")
                                  for p in params) + ")"


def _import_keys(node) -> list[tuple]:
    if isinstance(node, ast.Import):
        return [("module", a.name, a.asname or a.name) for a in node.names]
    module = "." * node.level + (node.module or "")
    return [("from", module, a.name, a.asname or a.name) for a in node.names]


def _listed_import_keys(entry: dict) -> set:
    keys = set()
    for item in entry.get("module_imports", []) or []:
        if "from" in item:
            keys.add(("from", item["from"], item.get("name"), item.get("as")))
        else:
            keys.add(("module", item.get("module"), item.get("as")))
    return keys


def _literal(node):
    value = ast.literal_eval(node)
    return list(value) if isinstance(value, tuple) else value


def _flag_of(call: ast.Call) -> dict | None:
    if not (isinstance(call.func, ast.Attribute) and call.func.attr == "add_argument" and call.args):
        return None
    first = call.args[0]
    flag = {"flag": first.value if isinstance(first, ast.Constant) else ast.unparse(first)}
    for keyword in call.keywords:
        if keyword.arg in FLAG_KEYS:
            flag[keyword.arg] = ast.unparse(keyword.value)
    return flag


class _Positions:
    """ast (line, UTF-8 byte column) -> (line, character column), and header ends from `tokenize`."""

    def __init__(self, text: str):
        self.lines = text.splitlines(keepends=True)
        self.tokens = list(tokenize.generate_tokens(io.StringIO(text).readline))
        self.starts = [t.start for t in self.tokens]

    def char(self, line: int, byte_col: int) -> tuple[int, int]:
        src = self.lines[line - 1] if 0 < line <= len(self.lines) else ""
        return line, len(src.encode("utf-8")[:byte_col].decode("utf-8", "replace"))

    def node(self, node) -> tuple[tuple[int, int], tuple[int, int]]:
        return self.char(node.lineno, node.col_offset), self.char(node.end_lineno, node.end_col_offset)

    def header_end(self, start: tuple[int, int]) -> tuple[int, int]:
        """End of the `def`/`class` header starting at `start`: its colon at bracket depth 0."""
        import bisect
        depth = 0
        for tok in self.tokens[bisect.bisect_left(self.starts, start):]:
            if tok.type == tokenize.OP:
                if tok.string in "([{":
                    depth += 1
                elif tok.string in ")]}":
                    depth -= 1
                elif tok.string == ":" and depth == 0:
                    return tok.end
        return start


def _header(pos: _Positions, node, label: str) -> Declaration:
    """The header span of a def/class, from its first bare decorator (a name or dotted name)."""
    start = pos.char(node.lineno, node.col_offset)
    for deco in node.decorator_list:
        if isinstance(deco, (ast.Name, ast.Attribute)) and all(isinstance(n, (ast.Name, ast.Attribute, ast.Load))
                                                                for n in ast.walk(deco)):
            # `@` precedes the expression on its own line
            start = min(start, (deco.lineno, max(0, pos.char(deco.lineno, deco.col_offset)[1] - 1)))
    return Declaration(start, pos.header_end(pos.char(node.lineno, node.col_offset)), label)


def declarations(text: str, entries: list[tuple[str, dict]]) -> list[Declaration]:
    """The declarations of Python `text` that the interface data `entries` list (module docstring, item 2).

    entries: (reference name, file entry) pairs from `entries_for`. Returns
    an empty list for no entries or a file that does not parse or tokenize."""
    try:
        tree = pyast.parse(text)
        pos = _Positions(text)
    except (SyntaxError, ValueError, tokenize.TokenError, IndentationError, RecursionError):
        return []
    kinds = by_kind(tree, pos)
    if not entries:
        return _outermost(kinds)
    imports, functions, classes, flags, constants, fields = set(), {}, {}, [], {}, {}
    for _, entry in entries:
        imports |= _listed_import_keys(entry)
        for name, params in (entry.get("functions") or {}).items():
            functions.setdefault(name, []).append(params)
        for name, spec in (entry.get("classes") or {}).items():
            classes.setdefault(name, []).append(spec)
        flags += [dict(f) for f in entry.get("argparse_flags") or []]
        for name, value in (entry.get("module_constants") or {}).items():
            constants.setdefault(name, []).append(value)
        for name, items in (entry.get("dataclass_fields") or {}).items():
            fields.setdefault(name, []).extend(items)
    out: list[Declaration] = []
    for node in tree.body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            keys = _import_keys(node)
            if keys and all(k in imports for k in keys):
                start, end = pos.node(node)
                out.append(Declaration(start, end, ast.unparse(node)))
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            params = _params(node.args)
            if any(_same_params(params, listed) for listed in functions.get(node.name, [])):
                out.append(_header(pos, node, "def " + _signature(node.name, params)))
        elif isinstance(node, ast.ClassDef):
            out += _class(pos, node, classes.get(node.name, []), fields.get(node.name, []))
        elif isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if len(targets) == 1 and isinstance(targets[0], ast.Name) and targets[0].id in constants:
                try:
                    value = _literal(node.value)
                except (ValueError, TypeError, SyntaxError, RecursionError):
                    continue
                if value in constants[targets[0].id]:
                    start, end = pos.node(node)
                    out.append(Declaration(start, end, f"constant {targets[0].id} = {ast.unparse(node.value)}"))
    if flags:
        out += _argparse(tree, pos, flags)
    return _outermost(out + kinds)


def _outermost(decls: list[Declaration]) -> list[Declaration]:
    """`decls` sorted by start, each one lying inside an earlier one dropped (spans never cross: they are
    ast nodes and headers)."""
    out: list[Declaration] = []
    for d in sorted(decls, key=lambda d: (d.start, (-d.end[0], -d.end[1]))):
        if out and d.end <= out[-1].end:
            continue
        out.append(d)
    return out


# ------------------------------------------------------------------ declarations by kind

def _third_party(tree) -> dict[str, str]:
    """Names bound by absolute imports of modules outside the standard library, anywhere in `tree`:
    bound name -> top-level module."""
    import sys
    out = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                top = a.name.split(".")[0]
                out[a.asname or top] = top
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            top = node.module.split(".")[0]
            for a in node.names:
                out[a.asname or a.name] = top
    return {name: top for name, top in out.items()
            if top not in sys.stdlib_module_names and top != "__future__"}


def _root_name(node) -> str | None:
    while isinstance(node, ast.Attribute):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def _plain(node, packages: dict) -> bool:
    """A literal, a container of such, or a name or attribute chain (a value passed through)."""
    if isinstance(node, ast.Constant):
        return True
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        return isinstance(node.operand, ast.Constant)
    if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
        return all(_plain(e, packages) for e in node.elts)
    if isinstance(node, ast.Dict):
        return all(k is not None and _plain(k, packages) and _plain(v, packages)
                   for k, v in zip(node.keys, node.values))
    if isinstance(node, (ast.Name, ast.Attribute)):   # a value passed through: no operator, call or subscript
        return _root_name(node) is not None
    return False


def _config_call(node, packages: dict) -> bool:
    """A call of a third-party name with keyword arguments, made only of the package's names, keyword
    names, literals and names passed through (`LoraConfig(r=8, target_modules=["q_proj"])`,
    `LoraConfig(r=args.rank)`): it configures, it computes nothing."""
    return (isinstance(node, ast.Call) and isinstance(node.func, (ast.Name, ast.Attribute))
            and _root_name(node.func) in packages and bool(node.keywords)
            and all(k.arg is not None and _plain(k.value, packages) for k in node.keywords)
            and all(not isinstance(a, ast.Starred) and _plain(a, packages) for a in node.args))


def _scope_walk(node):
    """The nodes of a function body, not descending into nested functions or classes."""
    todo = list(ast.iter_child_nodes(node))
    while todo:
        item = todo.pop()
        yield item
        if not isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            todo.extend(ast.iter_child_nodes(item))


def _stores(pos: _Positions, fn) -> list[Declaration]:
    """A constructor's (or any method's) stores of its own parameters: `self.a = a` (or `self.a: T = a`),
    `self` being its first parameter and `a` another of its parameters, under the same name."""
    params = [a.arg for a in (*fn.args.posonlyargs, *fn.args.args, *fn.args.kwonlyargs)]
    if not params:
        return []
    me, own = params[0], set(params[1:])
    out = []
    for node in _scope_walk(fn):
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, value = node.targets[0], node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            target, value = node.target, node.value
        else:
            continue
        if (isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) and target.value.id == me
                and isinstance(value, ast.Name) and value.id == target.attr and value.id in own):
            start, end = pos.node(node)
            out.append(Declaration(start, end, f"{fn.name} stores {me}.{target.attr}"))
    return out


def by_kind(tree, pos: _Positions) -> list[Declaration]:
    """The declarations recognised by their kind, whatever the interface data lists (module docstring,
    item 2): imports below the module's top level (in a function, a class, an `if` or `try`), a
    constructor's (or other method's) stores of its own parameters, and calls of third-party packages
    with keyword arguments made only of names, keyword names and literals (`_config_call`)."""
    out: list[Declaration] = []
    top = set(map(id, tree.body))
    packages = _third_party(tree)
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)) and id(node) not in top:
            start, end = pos.node(node)
            out.append(Declaration(start, end, f"{ast.unparse(node)} (nested import)"))
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            out += _stores(pos, node)
        elif _config_call(node, packages):
            start, end = pos.node(node)
            name = ast.unparse(node.func)
            keys = ", ".join(f"{k.arg}=" for k in node.keywords)
            out.append(Declaration(start, end, f"call {name}({keys}) of {packages[_root_name(node.func)]}"))
    return out


def _receiver(call) -> str | None:
    func = call.func if isinstance(call, ast.Call) else None
    if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
        return func.value.id
    return None


def _argparse(tree, pos: _Positions, flags: list) -> list[Declaration]:
    """Declared flags (`P.add_argument(...)` statements equal to a listed flag) and the parser that holds
    them: `P = argparse.ArgumentParser(...)` and the statement that parses (`args = P.parse_args(...)`,
    `return P.parse_args(...)`, with or without `vars(...)`), P being the receiver of a declared flag."""
    out, parsers = [], set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Call):
            flag = _flag_of(node.value)
            if flag is not None and flag in flags:
                start, end = pos.node(node)
                out.append(Declaration(start, end, f"flag {flag['flag']}"))
                parsers.add(_receiver(node.value))
    parsers.discard(None)
    for node in ast.walk(tree):
        value = getattr(node, "value", None) if isinstance(node, (ast.Assign, ast.Return, ast.Expr)) else None
        if isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id == "vars" \
                and len(value.args) == 1:
            value = value.args[0]
        if not isinstance(value, ast.Call):
            continue
        func = value.func
        made = (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
                and node.targets[0].id in parsers
                and (isinstance(func, ast.Attribute) and func.attr == "ArgumentParser"
                     or isinstance(func, ast.Name) and func.id == "ArgumentParser"))
        parsed = (isinstance(func, ast.Attribute) and func.attr in ("parse_args", "parse_known_args")
                  and _receiver(value) in parsers)
        if made or parsed:
            start, end = pos.node(node)
            name = node.targets[0].id if made else _receiver(value)
            out.append(Declaration(start, end, f"argparse parser {name}" + (" (parse)" if parsed else "")))
    return out


def _class(pos: _Positions, node: ast.ClassDef, specs: list, fields: list) -> list[Declaration]:
    out = []
    bases = [ast.unparse(b) for b in node.bases]
    if any(spec.get("bases", []) == bases for spec in specs):
        out.append(_header(pos, node, f"class {node.name}" + (f"({', '.join(bases)})" if bases else "")))
    methods = [spec.get("methods", {}) for spec in specs]
    for item in node.body:
        if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
            params = _params(item.args)
            if any(_same_params(params, m.get(item.name)) for m in methods):
                out.append(_header(pos, item, f"def {node.name}." + _signature(item.name, params)))
        elif isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
            found = {"name": item.target.id, "annotation": ast.unparse(item.annotation),
                     "default": ast.unparse(item.value) if item.value is not None else None}
            for listed in fields:
                if ({k: listed.get(k) for k in ("name", "annotation")} == {k: found[k] for k in ("name", "annotation")}
                        and listed.get("default") == found["default"]):
                    start, end = pos.node(item)
                    out.append(Declaration(start, end, f"field {node.name}.{found['name']}"))
                    break
    return out


# ------------------------------------------------------------------ tokens

@dataclass
class Tokens:
    """A file's copydetect filtered tokens classified: `labels[i]` is the index in `decls` of the
    declaration holding filtered character i, or -1 (not interface); `where[i]` its (line, column)."""

    decls: list[Declaration]
    labels: np.ndarray
    where: list[tuple[int, int]]


def classify_tokens(fp, language: str, decls: list[Declaration]) -> Tokens:
    """`Tokens` of copydetect fingerprint `fp` (its raw and filtered code). Every label is -1 when
    our lexing does not reproduce copydetect's filtered text (then nothing counts as interface)."""
    code = fp.filtered_code
    labels = np.full(len(code), -1, dtype=np.int64)
    try:
        filtered, where = filtered_positions(fp.raw_code, language)
    except Exception:  # noqa: BLE001 - a lexer failure means: nothing is interface
        return Tokens(decls, labels, [])
    if filtered != code:
        return Tokens(decls, labels, [])
    import bisect
    starts = [d.start for d in decls]
    for i, at in enumerate(where):
        j = bisect.bisect_right(starts, at) - 1   # no declaration lies in another (`_outermost`)
        if j >= 0 and at < decls[j].end:
            labels[i] = j
    return Tokens(decls, labels, where)


# ------------------------------------------------------------------ regions

def regions(slices, gap: int) -> list[list[tuple[int, int]]]:
    """Copied filtered-token slices (2 x N, copydetect's) grouped into regions as
    `similarity.longest_region` does: slices closer than `gap` tokens are one region."""
    out: list[list[tuple[int, int]]] = []
    prev_end = None
    for start, end in sorted(zip(np.asarray(slices[0]).tolist(), np.asarray(slices[1]).tolist())):
        if prev_end is not None and start - prev_end <= gap:
            out[-1].append((start, end))
        else:
            out.append([(start, end)])
        prev_end = max(end, prev_end if prev_end is not None else end)
    return out


@dataclass
class SideReport:
    """What one side's qualifying regions consist of."""

    entries: list[str]       #: declaration labels met, in file order, each once
    code: list[str]          #: runs of own tokens (neither interface nor idiom): "line:col-line:col `filtered`"
    delimiters: list[str]    #: delimiter-only runs (not code)
    idioms: list[str] = field(default_factory=list)   #: runs that are base-code shapes (`corpus`)
    own: int = 0             #: the most own tokens in one qualifying region (what a finding needs)
    own_lines: str = ""      #: line ranges of that region's own runs


def side(fp, tokens: Tokens, slices, gap: int, min_tokens: int, idiom=None) -> SideReport:
    """Classify the copied tokens (filtered-code slices, 2 x N) of every region of >= `min_tokens`
    covered tokens of one side of a pair. `idiom`: bool per filtered token, True for a base-code shape
    (`corpus.idiom_mask`); such tokens are listed, not counted. A run of only delimiters is not counted
    either. `own` is the largest count of the remaining tokens in one region."""
    code = fp.filtered_code
    labels, decls, where = tokens.labels, tokens.decls, tokens.where
    common = np.zeros(len(code), dtype=bool) if idiom is None else np.asarray(idiom, dtype=bool)
    seen: dict[int, None] = {}
    runs, delims, idioms = [], [], []
    best, best_lines = 0, ""
    for region in regions(slices, gap):
        if _covered(region) < min_tokens:
            continue
        cover = np.zeros(len(code), dtype=bool)
        for a, b in region:
            cover[a:b] = True
        idx = np.flatnonzero(cover)
        for j in np.unique(labels[idx]):
            if j >= 0:
                seen[int(j)] = None
        bad = idx[labels[idx] < 0]
        own, lines = 0, []
        for kind, run in _runs(bad, _idiom_pieces(bad, labels, common, gap)):
            a, b = int(run[0]), int(run[-1]) + 1
            chars = code[a:b]
            shown = chars if len(chars) <= SHOWN else chars[:SHOWN] + "..."
            item = f"{_spot(where, a, b)} `{shown}` ({b - a} tokens)"
            if kind == "idiom":
                idioms.append(item)
            elif set(chars) <= NO_CODE:
                delims.append(item)
            else:
                runs.append(item)
                own += b - a
                if where:
                    lines.append((where[a][0], where[b - 1][0]))
        if own > best:
            best, best_lines = own, _line_ranges(lines)
    return SideReport([decls[j].label for j in sorted(seen, key=lambda j: decls[j].start)], runs, delims,
                      idioms, best, best_lines)


def _idiom_pieces(bad: np.ndarray, labels: np.ndarray, common: np.ndarray, gap: int) -> np.ndarray:
    """bool per filtered token: True on the pieces of `bad` (a region's non-interface positions) that are
    idioms. A piece is a stretch of non-interface tokens not interrupted by a declaration nor by more than
    `gap` uncopied tokens; it is an idiom when it is short (fewer than IDIOM_MAX_TOKENS tokens) and at
    least half of its tokens lie in base-code shapes (`common`). A longer piece is code, whatever shapes
    it is made of: a copied function is not an idiom because its lines are common ones."""
    out = np.zeros(len(common), dtype=bool)
    if len(bad) == 0 or not common.any():
        return out
    interface_before = np.cumsum(labels >= 0)     # declarations' tokens up to each position
    cut = (np.diff(bad) > gap) | (interface_before[bad[1:]] != interface_before[bad[:-1]])
    for piece in np.split(bad, np.flatnonzero(cut) + 1):
        if len(piece) < IDIOM_MAX_TOKENS and 2 * int(common[piece].sum()) >= len(piece):
            out[piece] = True
    return out


def _runs(bad: np.ndarray, common: np.ndarray):
    """(kind, positions) of the consecutive runs of `bad` positions, split where the idiom flag changes:
    kind "idiom" for base-code shapes, else "own"."""
    if len(bad) == 0:
        return
    flags = common[bad]
    breaks = np.flatnonzero((np.diff(bad) != 1) | (np.diff(flags.astype(np.int8)) != 0))
    for run in np.split(bad, breaks + 1):
        yield ("idiom" if common[run[0]] else "own"), run


def _line_ranges(pairs) -> str:
    merged: list[list[int]] = []
    for a, b in sorted(pairs):
        if merged and a <= merged[-1][1] + 1:
            merged[-1][1] = max(merged[-1][1], b)
        else:
            merged.append([a, b])
    return ", ".join(f"{a}-{b}" if a != b else str(a) for a, b in merged)


def _covered(region) -> int:
    best = 0
    prev_end = None
    for start, end in region:
        if prev_end is not None:
            best += max(0, end - max(start, prev_end))
        else:
            best = end - start
        prev_end = max(end, prev_end) if prev_end is not None else end
    return best


def _spot(where, a: int, b: int) -> str:
    if not where:
        return f"tokens {a}-{b}"
    (l1, c1), (l2, c2) = where[a], where[b - 1]
    return f"{l1}:{c1 + 1}-{l2}:{c2 + 1}"


# ------------------------------------------------------------------ pairs

@dataclass
class PairReport:
    """A pair's qualifying regions classified: `interface` when no region of the tree file holds
    `min_tokens` own tokens (neither interface nor idiom); the reference's side is evidence only."""

    interface: bool
    entries: str        #: "es-awd es.py: import argparse; def parse_args(); ..." (both sides' declarations)
    not_interface: str  #: "tree 45:5-45:40 `V=V.V(V=\"S\")`; ref ..." (own runs, both sides)
    delimiters: str     #: delimiter-only runs, listed and not counted
    idioms: str = ""    #: base-code runs of the tree side, listed and not counted
    our_tokens: int = 0     #: the tree file's most own tokens in one region
    our_lines: str = ""     #: the lines of that region's own runs in the tree file


class Classifier:
    """Classifies the copied regions of (tree file, reference file) pairs against interface `data`
    (`load`) and a base-code corpus (`corpus.Corpus`, or None: no idioms); files are lexed and parsed once
    per set of matching data entries."""

    def __init__(self, data: dict, source: str = "", corpus=None):
        self.data = data
        self.source = source
        self.corpus = corpus
        self._tokens: dict = {}
        self._idioms: dict = {}
        self._refs: dict[str, list[str]] = {}
        self._entries: dict[str, list[tuple[str, dict]]] = {}

    def prepare(self, ref_fps) -> None:
        """Which references of the data each --ref clone is, from its files' paths: (label, Fingerprint)
        pairs as `similarity.compare` takes them."""
        paths: dict[str, list[str]] = {}
        for label, rf in ref_fps:
            paths.setdefault(label, []).append(rf.entry.path)
        self._refs = {label: references_in(p, self.data) for label, p in paths.items()}
        self._entries = {label: entries_for(names, self.data) for label, names in self._refs.items()}

    def recognised(self) -> dict[str, list[str]]:
        """--ref label -> the references of the data that clone is (empty: nothing of it is interface)."""
        return dict(self._refs)

    def _classified(self, fpr, entries) -> Tokens:
        # keyed by id, the fingerprint kept with the value: a collected fingerprint's id can be reused
        key = (id(fpr), tuple(id(e) for _, e in entries))
        held = self._tokens.get(key)
        if held is None or held[0] is not fpr:
            decls = declarations(fpr.entry.text, entries) if fpr.entry.language == "python" else []
            held = self._tokens[key] = (fpr, classify_tokens(fpr.fp, fpr.entry.language or "python", decls))
        return held[1]

    def _idiom(self, fpr):
        if self.corpus is None:
            return None
        held = self._idioms.get(id(fpr))
        if held is None or held[0] is not fpr:
            from .corpus import idiom_mask
            held = self._idioms[id(fpr)] = (fpr, idiom_mask(fpr.fp.filtered_code, self.corpus.hashes,
                                                            self.corpus.k))
        return held[1]

    def pair(self, tf, label: str, rf, idx_tree, idx_ref, gap: int, min_tokens: int) -> PairReport:
        """Classify a pair from copydetect's overlap positions (`find_fingerprint_overlap`); `label` is the
        reference clone's (see `prepare`)."""
        from copydetect.utils import get_copied_slices
        if label not in self._entries:
            self._refs[label] = references_in([rf.entry.path], self.data)
            self._entries[label] = entries_for(self._refs[label], self.data)
        entries = self._entries[label]
        # the tree side may also declare the interface of the reference it stands in for (a stand-in of one
        # reference paired with another's clone: both import blocks are declared interface)
        own = [n for n in references_in([tf.entry.plain_path], self.data) if n not in self._refs[label]]
        tree_entries = entries + entries_for(own, self.data)
        k = tf.fp.k
        tree_side = side(tf.fp, self._classified(tf, tree_entries), get_copied_slices(idx_tree, k), gap, min_tokens,
                         self._idiom(tf))
        ref_side = side(rf.fp, self._classified(rf, entries), get_copied_slices(idx_ref, k), gap, min_tokens,
                        self._idiom(rf))
        names = self._refs[label] + [f"{n} (the tree file's own)" for n in own]
        labels = list(dict.fromkeys(tree_side.entries + ref_side.entries))
        entries_text = (f"{', '.join(names)}: " if names else "no interface data for this reference: ") \
            + "; ".join(labels)
        code = [f"tree {r}" for r in tree_side.code] + [f"ref {r}" for r in ref_side.code]
        delims = [f"tree {r}" for r in tree_side.delimiters] + [f"ref {r}" for r in ref_side.delimiters]
        return PairReport(tree_side.own < min_tokens, entries_text, "; ".join(code), "; ".join(delims),
                          "; ".join(f"tree {r}" for r in tree_side.idioms), tree_side.own, tree_side.own_lines)
