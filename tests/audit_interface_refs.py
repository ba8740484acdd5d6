"""Interface-only fixture references for the audit's interface classification (issue 28).

`write_reference(root, name, data)` writes, for every file the interface
data (oracle_child/interfaces.json) lists under reference `name`, a Python module
with exactly the listed interface (imports in order, module constants,
functions and classes with their signatures and defaults, dataclass fields,
argparse flags) and bodies of our own that share nothing with the stand-ins
(each raises NotImplementedError naming the declaration). It is generated
from the data alone: no reference code is involved. Audited against it, a
stand-in shares only its interface, as a stand-in shares only its interface
with a real clone. `plant(...)` helpers put code from the project's own
fixture reference (tests/fixtures/audit/reference/) into copies.
"""
from __future__ import annotations

import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
INTERFACES = ROOT / "oracle_child" / "interfaces.json"


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


def module_source(name: str, entry: dict) -> str:
    """The interface-only module of one file entry of the interface data."""
    lines = [f'"""Interface-only fixture for the audit tests, generated from the interface data: {name} '
             f'{entry["file"]}."""']
    lines += [_import_line(i) for i in entry.get("module_imports", [])]
    lines.append("")
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
            lines += ["", f"    def {mname}({_params(params)}):", *_body(f"{cname}.{mname}", "        ")]
        if not methods and cname not in fields:
            lines.append("    pass")
    return "\n".join(lines) + "\n"


def load(path: Path = INTERFACES) -> dict:
    return json.loads(Path(path).read_text(encoding="utf-8"))


def write_reference(root: Path, name: str, data: dict) -> list[Path]:
    """Write reference `name`'s interface-only files under `root`; returns their paths."""
    written = []
    for entry in data[name]["files"]:
        path = root / entry["file"]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(module_source(name, entry), encoding="utf-8")
        written.append(path)
    return written
