"""Where the committed data lives: a checkout or an installed wheel.

Goldens: `goldens/` at the repository root in a checkout; a wheel ships a
copy as package data (`esverify/goldens/data/`, see setup.py). The child
runtime: the top-level package `oracles/` (the same folder in a checkout and
in site-packages). A reference's child files (its driver, the stand-in modules
it imports, its interface data): `esverify/references/<name>/child/`, package
data of its package. Code asks these helpers and never hard-codes a layout.
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


def oracles_dir() -> Path:
    """The shared child runtime `oracles/` (child_server, the noise hook, coverage, interface drift, the
    loop seams): modules the child imports by bare name from a private copy, never imported by esverify."""
    return PACKAGE_DIR.parent / "oracles"


def child_dir(package: str) -> Path:
    """The `child/` folder of the built-in reference package `package` (its folder name under
    esverify/references/, e.g. "es_awd"): its driver `driver.py`, the modules the driver imports, and its
    interface data `interfaces.json` when it has one."""
    return PACKAGE_DIR / "references" / package / "child"


def interface_files() -> list[Path]:
    """Every built-in reference's interface data (`esverify/references/*/child/interfaces.json`), sorted."""
    return sorted((PACKAGE_DIR / "references").glob("*/child/interfaces.json"))
