"""The sample's one file: how it is found in a folder (it defines `es_train_loop` and assigns a global
`utilities`) and the size of that `utilities` (docs/references.md §7). The spec (.adapter) and the rows (.rows)
both read them."""
from __future__ import annotations

import ast
from pathlib import Path

from esverify import pyast

#: the entries of the sample's global utilities: a larger population raises IndexError (a defect)
MAX_POPULATION = 30


def defines_loop(path: Path) -> bool:
    """True when the Python file defines a top-level `es_train_loop` and assigns a top-level `utilities`."""
    try:
        tree = pyast.parse(Path(path).read_text(encoding="utf-8"))
    except (OSError, SyntaxError, ValueError, UnicodeDecodeError):
        return False
    funcs = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
    names = {t.id for n in tree.body if isinstance(n, (ast.Assign, ast.AnnAssign))
             for t in (n.targets if isinstance(n, ast.Assign) else [n.target]) if isinstance(t, ast.Name)}
    return "es_train_loop" in funcs and "utilities" in names


def sample_module(path: Path) -> Path | None:
    """The sample's file: `path` itself, or the first `.py` (sorted) in the folder `path` that defines it."""
    path = Path(path)
    if path.is_file():
        return path if path.suffix == ".py" and defines_loop(path) else None
    if path.is_dir():
        return next((p for p in sorted(path.glob("*.py")) if defines_loop(p)), None)
    return None
