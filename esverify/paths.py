"""Where the committed data lives: a checkout or an installed wheel.

In a checkout the goldens are `goldens/` and the oracle drivers `oracle_child/`
at the repository root. A wheel ships copies as package data
(`esverify/goldens/data/`, `esverify/oracle_child/`, see setup.py). Code asks
these helpers and never hard-codes either layout.
"""
from __future__ import annotations

from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent


def checkout_root() -> Path | None:
    """The repository root when esverify runs from a checkout, else None.

    A checkout is recognised by `pyproject.toml` beside the package plus the
    top-level `goldens/` folder; an installed wheel has neither.
    """
    root = PACKAGE_DIR.parent
    if (root / "pyproject.toml").is_file() and (root / "goldens").is_dir():
        return root
    return None


def goldens_dir() -> Path:
    """Folder holding the golden JSON files and their schema (read-only in a wheel)."""
    root = checkout_root()
    return root / "goldens" if root else PACKAGE_DIR / "goldens" / "data"


def oracle_child_dir() -> Path:
    """Folder holding the oracle driver scripts run in the child process."""
    root = checkout_root()
    return root / "oracle_child" if root else PACKAGE_DIR / "oracle_child"
