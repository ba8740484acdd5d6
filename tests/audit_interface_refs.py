"""Fixture references for the audit's interface classification, generated from the interface data.

`write_reference(root, name, data)` writes, for every file the interface
data (a reference's child/interfaces.json) lists under reference `name`, a Python module
with exactly the listed interface (imports in order, module constants,
functions and classes with their signatures and defaults, dataclass fields,
argparse flags) and bodies of our own (each raises NotImplementedError
naming the declaration). It is generated from the data alone: no reference
code is involved.

A real clone shares more with a stand-in than the data lists, by kind
(docs/audit.md, "Interface regions" and "Idioms"): imports inside function
bodies, a constructor storing each parameter in an attribute of the same
name, third-party configuration calls, and idioms any Python file has (a
folder checked, removed and made again; a list walked in slices of a batch
size; a formatted line printed in an `except` clause). With `like_real=True`
(the default) each generated module also holds the statements of exactly
these kinds that the matching stand-in (tests/standins/) holds, found here
by their own ast patterns (`shared_kinds`), in the same functions: the
generated clone then shares with a stand-in each kind a real clone shares,
and nothing else. `plant(...)` helpers put code from the project's own
fixture reference (tests/fixtures/audit/reference/) into copies.
"""
from __future__ import annotations

import ast
import json
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
STANDINS = ROOT / "tests" / "standins"


def _import_line(item: dict) -> str:
    if "from" in item:
        alias = f" as {item['as']}" if item.get("as") and item["as"] != item["name"] else ""
        return f"from {item['from']} import {item['name']}{alias}"
    alias = f" as {item['as']}" if item.get("as") and item["as"] != item["module"] else ""
    return f"import {item['module']}{alias}"


def _params(params: list) -> str:
    out, star = [], False
    for p in params:
        if p.get("keyword_only") and not star:
            out.append("*")
            star = True
        out.append(p["name"] + (f"={p['default']}" if p.get("default") is not None else ""))
    return ", ".join(out)


def _body(label: str, pad: str) -> list[str]:
    return [f"{pad}raise NotImplementedError({label!r})"]


def _flag_call(flag: dict, holder: str) -> str:
    keys = "".join(f", {k}={v}" for k, v in flag.items() if k != "flag")
    return f"{holder}.add_argument({flag['flag']!r}{keys})"


def standin_for(entry: dict) -> Path | None:
    """The stand-in file of a file entry: tests/standins/<reference>/<the entry's file>."""
    for path in sorted(STANDINS.glob("*/" + entry["file"])):
        return path
    return None


# ------------------------------------------------------------------ the kinds a real clone shares

def _segment(lines: list[str], first: int, last: int) -> str:
    return textwrap.dedent("\n".join(lines[first - 1:last]))


def _third_party_names(tree) -> set[str]:
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module.split(".")[0] not in sys.stdlib_module_names:
                names |= {a.asname or a.name for a in node.names}
        elif isinstance(node, ast.Import):
            names |= {a.asname or a.name.split(".")[0] for a in node.names
                      if a.name.split(".")[0] not in sys.stdlib_module_names}
    return names


def _dotted(node) -> str:
    try:
        return ast.unparse(node)
    except Exception:   # noqa: BLE001 - an odd node is simply not a match
        return ""


def _is_config_call(node, packages: set[str]) -> bool:
    def passed(value) -> bool:   # literals, containers of them, names and attribute chains
        if isinstance(value, ast.Constant):
            return True
        if isinstance(value, (ast.List, ast.Tuple)):
            return all(passed(e) for e in value.elts)
        while isinstance(value, ast.Attribute):
            value = value.value
        return isinstance(value, ast.Name)
    if not (isinstance(node, ast.Call) and node.keywords):
        return False
    root = node.func
    while isinstance(root, ast.Attribute):
        root = root.value
    return (isinstance(root, ast.Name) and root.id in packages
            and all(k.arg and passed(k.value) for k in node.keywords) and all(passed(a) for a in node.args))


def _kinds_in(fn, lines: list[str], packages: set[str], params: set[str]) -> list[str]:
    """The statements of the shared kinds in one function (or the module: `fn` the module), in order."""
    out = []
    body_nodes = []

    def walk(nodes):
        for node in nodes:
            body_nodes.append(node)
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                continue
            for field in ("body", "orelse", "finalbody"):
                walk(getattr(node, field, []) or [])
            for handler in getattr(node, "handlers", []) or []:
                body_nodes.append(handler)
                walk(handler.body)
    walk(fn.body)
    is_module = isinstance(fn, ast.Module)
    for node in body_nodes:
        if isinstance(node, (ast.Import, ast.ImportFrom)) and not (is_module and node in fn.body):
            out.append(_segment(lines, node.lineno, node.end_lineno))
        elif (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Attribute)
              and isinstance(node.targets[0].value, ast.Name) and node.targets[0].value.id == "self"
              and isinstance(node.value, ast.Name) and node.value.id == node.targets[0].attr
              and node.value.id in params):
            out.append(_segment(lines, node.lineno, node.end_lineno))
        elif isinstance(node, (ast.Assign, ast.Expr)) and _is_config_call(node.value, packages):
            out.append(_segment(lines, node.lineno, node.end_lineno))
        elif (isinstance(node, ast.If) and _dotted(getattr(node.test, "func", None)) == "os.path.exists"
              and len(node.body) == 1 and _dotted(getattr(node.body[0].value, "func", None)) == "shutil.rmtree"):
            out.append(_segment(lines, node.lineno, node.end_lineno))          # the folder checked and removed
        elif isinstance(node, ast.Expr) and _dotted(getattr(node.value, "func", None)) == "os.makedirs":
            out.append(_segment(lines, node.lineno, node.end_lineno))          # ... and made again
        elif (isinstance(node, ast.For) and isinstance(node.iter, ast.Call) and _dotted(node.iter.func) == "range"
              and len(node.iter.args) == 3 and _dotted(node.iter.args[0]) == "0"
              and _dotted(getattr(node.iter.args[1], "func", None)) == "len"):
            head = _segment(lines, node.lineno, node.body[0].lineno - 1)        # a list walked in batch slices
            first = node.body[0]
            sliced = (isinstance(first, ast.Assign) and isinstance(first.value, ast.Subscript)
                      and isinstance(first.value.slice, ast.Slice))
            inner = _segment(lines, first.lineno, first.end_lineno) if sliced else "pass"
            out.append(head + "\n" + textwrap.indent(inner, "    "))
        elif (isinstance(node, ast.ExceptHandler) and node.body and isinstance(node.body[0], ast.Expr)
              and _dotted(getattr(node.body[0].value, "func", None)) == "print"):
            kind = f" {_dotted(node.type)}" if node.type is not None else ""
            name = f" as {node.name}" if node.name else ""
            printed = _segment(lines, node.body[0].lineno, node.body[0].end_lineno)
            out.append(f"try:\n    pass\nexcept{kind}{name}:\n" + textwrap.indent(printed, "    "))
    return out


def shared_kinds(text: str) -> dict[str, tuple[str, list[str]]]:
    """Per function of a stand-in ("name", "Class.name", "" for the module): (its parameters as source, the
    statements of the kinds a real clone shares with it, each as dedented source)."""
    tree = ast.parse(text)
    lines = text.splitlines()
    packages = _third_party_names(tree)
    out: dict[str, tuple[str, list[str]]] = {}
    found = _kinds_in(tree, lines, packages, set())
    if found:
        out[""] = ("", found)
    for node in tree.body:
        owners = [(node.name, node)] if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) else []
        if isinstance(node, ast.ClassDef):
            owners = [(f"{node.name}.{m.name}", m) for m in node.body
                      if isinstance(m, (ast.FunctionDef, ast.AsyncFunctionDef))]
        for qual, fn in owners:
            params = {a.arg for a in (*fn.args.posonlyargs, *fn.args.args, *fn.args.kwonlyargs)}
            found = _kinds_in(fn, lines, packages, params)
            if found:
                out[qual] = (ast.unparse(fn.args), found)
    return out


def _kind_lines(statements: list[str], pad: str) -> list[str]:
    return [pad + line if line else line for stmt in statements for line in stmt.splitlines()]


# ------------------------------------------------------------------ modules

def module_source(name: str, entry: dict, kinds: dict | None = None) -> str:
    """The generated module of one file entry of the interface data; `kinds` (`shared_kinds` of its
    stand-in) adds the statements of the shared kinds to the functions that hold them."""
    kinds = dict(kinds or {})
    lines = [f'"""Interface-only fixture for the audit tests, generated from the interface data: {name} '
             f'{entry["file"]}."""']
    lines += [_import_line(i) for i in entry.get("module_imports", [])]
    lines.append("")
    lines += _kind_lines(kinds.pop("", ("", []))[1], "")
    for const, value in (entry.get("module_constants") or {}).items():
        lines.append(f"{const} = {value!r}")
    flags = entry.get("argparse_flags") or []
    functions = dict(entry.get("functions") or {})
    if flags and "parse_args" not in functions:   # flags parsed at import time (the paper's scripts)
        lines += ["", "cli = argparse.ArgumentParser(prog=__name__)"]
        lines += [_flag_call(f, "cli") for f in flags]
        lines.append("options = vars(cli.parse_args([]))")
    for fname, params in functions.items():
        lines += ["", "", f"def {fname}({_params(params)}):"]
        lines += _kind_lines(kinds.pop(fname, ("", []))[1], "    ")
        if fname == "parse_args" and flags:
            lines.append("    cli = argparse.ArgumentParser(prog=__name__)")
            lines += ["    " + _flag_call(f, "cli") for f in flags]
            lines.append("    return vars(cli.parse_args())")
        else:
            lines += _body(fname, "    ")
    fields = entry.get("dataclass_fields") or {}
    for cname, spec in (entry.get("classes") or {}).items():
        bases = spec.get("bases") or []
        lines += ["", ""]
        if cname in fields:
            lines.append("@dataclass")
        lines.append(f"class {cname}" + (f"({', '.join(bases)})" if bases else "") + ":")
        for field in fields.get(cname, []):
            default = f" = {field['default']}" if field.get("default") is not None else ""
            lines.append(f"    {field['name']}: {field['annotation']}{default}")
        methods = spec.get("methods") or {}
        for mname, params in methods.items():
            lines += ["", f"    def {mname}({_params(params)}):",
                      *_kind_lines(kinds.pop(f"{cname}.{mname}", ("", []))[1], "        "),
                      *_body(f"{cname}.{mname}", "        ")]
        if not methods and cname not in fields:
            lines.append("    pass")
    for qual, (params, statements) in kinds.items():   # functions the data does not list: their own names
        lines += ["", "", f"def {qual.replace('.', '_')}({params}):", *_kind_lines(statements, "    "),
                  *_body(qual, "    ")]
    return "\n".join(lines) + "\n"


def load(path: Path | None = None) -> dict:
    """The interface data at `path`; None: every built-in reference's shipped data, merged (as the audit
    reads it)."""
    if path is None:
        from esverify.audit.interface import load_shipped
        return load_shipped()
    return json.loads(Path(path).read_text(encoding="utf-8"))


def _p(*names, **defaults) -> list[dict]:
    return [{"name": n, "default": None} for n in names] + [{"name": n, "default": d} for n, d in defaults.items()]


#: The skill page's sample (docs/references.md §7, MIT) is not in the shipped interface data (its licence asks
#: for no clean-room audit); its one module's names and signatures as §7 documents them, in the data's shape.
SKILL_SAMPLE = {"files": [{
    "file": "es_finetuning_skill.py",
    "module_imports": [{"module": "torch", "as": "torch"}, {"module": "numpy", "as": "np"},
                       {"from": "transformers", "name": "AutoModelForCausalLM", "as": "AutoModelForCausalLM"},
                       {"from": "transformers", "name": "AutoTokenizer", "as": "AutoTokenizer"}],
    "module_constants": {"population_size": 30, "learning_rate": 0.001, "sigma": 0.017},
    "functions": {"compute_reward": _p("model", "tokenizer", "examples"),
                  "is_correct": _p("response", "expected"),
                  "es_train_loop": _p("model", "tokenizer", "params_init", "reward_fn", generations="100",
                                      population_size="30", sigma="0.017", lr="0.001", seed_base="42",
                                      device="'cuda'"),
                  "save_finetuned_model": _p("model", "params_final", "path")}}]}


def references(data: dict) -> dict:
    """Every reference a generated clone is written for: those of the interface data, then the skill
    page's sample (five in all with today's data)."""
    return {**data, "skill-sample": SKILL_SAMPLE}


def write_reference(root: Path, name: str, data: dict, like_real: bool = True) -> list[Path]:
    """Write reference `name`'s generated files under `root`; returns their paths. `like_real`: also the
    statements of the kinds a real clone shares with the stand-ins (module docstring)."""
    written = []
    for entry in references(data)[name]["files"]:
        path = root / entry["file"]
        path.parent.mkdir(parents=True, exist_ok=True)
        standin = standin_for(entry) if like_real else None
        kinds = shared_kinds(standin.read_text(encoding="utf-8")) if standin else None
        path.write_text(module_source(name, entry, kinds), encoding="utf-8")
        written.append(path)
    return written
