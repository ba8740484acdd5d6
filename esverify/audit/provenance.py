"""Section 5: provenance, licences, tools and what the audit can establish.

Licence recognition is by text markers, most specific first. The
Academic Public License (docs/references.md §4) is recognised by its upper-case
heading "ACADEMIC PUBLIC LICENSE" near the top plus noncommercial terms;
a heading without those terms is reported as unverified rather than
guessed. The Academic Free License (AFL), a permissive licence with a
similar name, is matched by its own title and never by the APL heading.
"""
from __future__ import annotations

import platform
import re
import subprocess
import sys
from importlib import metadata as importlib_metadata
from pathlib import Path

from ..gitinfo import commit_and_dirty, toplevel
from .sources import LICENCE_STEMS

_APL_HEADING = re.compile(r"ACADEMIC\s+PUBLIC\s+LICEN[CS]E")
_NONCOMMERCIAL = re.compile(r"non[-\s]?commercial", re.I)
_AFL = re.compile(r"Academic\s+Free\s+Licen[cs]e", re.I)
_VERSION = re.compile(r"(?:Version|v\.?)\s*(\d+(?:\.\d+)?)", re.I)

#: (name, test) pairs after the APL/AFL special cases; first match wins.
_OTHERS = [
    ("Apache-2.0", lambda t: re.search(r"Apache License", t) and re.search(r"Version 2\.0", t)),
    ("CC-BY-NC (noncommercial)", lambda t: re.search(r"Creative Commons", t, re.I) and _NONCOMMERCIAL.search(t)),
    ("AGPL", lambda t: re.search(r"GNU AFFERO GENERAL PUBLIC LICENSE", t)),
    ("LGPL", lambda t: re.search(r"GNU LESSER GENERAL PUBLIC LICENSE", t)),
    ("GPL", lambda t: re.search(r"GNU GENERAL PUBLIC LICENSE", t)),
    ("MPL-2.0", lambda t: re.search(r"Mozilla Public License,? (?:Version|v\.?) ?2\.0", t)),
    ("MIT", lambda t: re.search(r"Permission is hereby granted, free of charge", t)),
    ("BSD", lambda t: re.search(r"Redistribution and use in source and binary forms", t)),
]

#: A pyproject.toml larger than this is not parsed (it is outside input; real ones are a few KB).
PYPROJECT_MAX_BYTES = 1 << 20


def recognise_licence(text: str) -> tuple[str, bool | None]:
    """(licence name, noncommercial?) from a licence text.

    Returns ("unrecognised", None) when no marker matches. The APL needs its
    heading within the first 2,000 characters; with noncommercial terms the
    name is "Academic Public License (noncommercial)".
    """
    head = text[:2000]
    if _APL_HEADING.search(head):
        if _NONCOMMERCIAL.search(text):
            return "Academic Public License (noncommercial)", True
        return "Academic Public License heading, noncommercial terms not found (unverified)", None
    if _AFL.search(head):
        m = _VERSION.search(text[:4000])
        return (f"Academic Free License {m.group(1)} (AFL)" if m else "Academic Free License (AFL)"), False
    for name, test in _OTHERS:
        if test(text):
            return name, bool(_NONCOMMERCIAL.search(name))
    return "unrecognised", None


def licence_files(root: Path) -> list[Path]:
    """Licence-like files at the top of a folder (LICENSE, LICENCE, COPYING...)."""
    try:
        return sorted(p for p in root.iterdir() if p.is_file() and p.name.lower().startswith(LICENCE_STEMS))
    except OSError:
        return []


def git_state(root: Path) -> dict:
    """commit, dirty flag and top level of a folder's git checkout (None outside one)."""
    top = toplevel(root)
    commit, dirty = commit_and_dirty(root)
    return {"commit": commit, "dirty": dirty, "git_toplevel": str(top) if top else None}


def describe_root(role: str, root: Path) -> dict:
    """One provenance row: path, git state, licence file(s) and their names."""
    row = {"role": role, "path": str(root.resolve())}
    row.update(git_state(root))
    if row["git_toplevel"] and Path(row["git_toplevel"]).resolve() != root.resolve():
        row["note"] = (f"not a checkout's top level: commit and dirty flag are those of the enclosing "
                       f"checkout {row['git_toplevel']}")
    elif row["git_toplevel"] is None:
        row["note"] = "not a git checkout: no commit recorded"
    files = licence_files(root)
    names, nc = [], []
    for f in files:
        try:
            name, noncommercial = recognise_licence(f.read_text("utf-8", "replace"))
        except OSError as exc:
            name, noncommercial = f"unreadable ({exc.strerror})", None
        names.append(name)
        nc.append(noncommercial)
    row["licence_file"] = ", ".join(f.name for f in files) or None
    row["licence"] = "; ".join(names) or "no licence file found"
    row["noncommercial"] = any(nc) if any(v is not None for v in nc) else None
    pyproject = root / "pyproject.toml"
    if pyproject.is_file():
        try:   # outside input: bounded, and every parser failure (deep nesting, the digit limit) kept here
            import tomllib
            if pyproject.stat().st_size > PYPROJECT_MAX_BYTES:
                raise ValueError(f"over {PYPROJECT_MAX_BYTES} bytes")
            project = tomllib.loads(pyproject.read_text("utf-8")).get("project", {})
            lic = project.get("license") if isinstance(project, dict) else None
            if isinstance(lic, dict):
                lic = lic.get("text") or lic.get("file")
            if lic:
                row["declared_licence"] = str(lic)
        except (OSError, ValueError, RecursionError) as exc:
            row["declared_licence"] = f"unreadable pyproject.toml ({type(exc).__name__}: {str(exc)[:120]})"
    return row


def describe_archive(path: Path, entries) -> dict:
    """Provenance row for a wheel or sdist: its licence files and metadata licence."""
    names, files, nc = [], [], []
    for e in entries:
        base = e.name.lower()
        if base.startswith(LICENCE_STEMS) and e.kind in ("prose", "data"):
            files.append(e.path)
            name, noncommercial = recognise_licence(e.text)
            names.append(name)
            nc.append(noncommercial)
    declared = None
    for e in entries:
        if e.name in ("METADATA", "PKG-INFO") and e.kind in ("prose", "data"):
            m = re.search(r"^License(?:-Expression)?: (.+)$", e.text, re.M)
            if m:
                declared = m.group(1).strip()
    return {"role": "wheel" if path.suffix == ".whl" else "sdist", "path": str(path.resolve()),
            "commit": None, "dirty": None, "git_toplevel": None,
            "licence_file": ", ".join(files) or None, "licence": "; ".join(names) or "no licence file found",
            "noncommercial": any(nc) if any(v is not None for v in nc) else None, "declared_licence": declared}


def _version(dist: str) -> str:
    try:
        return importlib_metadata.version(dist)
    except importlib_metadata.PackageNotFoundError:
        return "not installed"


def tool_versions() -> dict:
    """Versions of everything whose behaviour the findings depend on."""
    try:
        git_v = subprocess.run(["git", "--version"], capture_output=True, text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        git_v = "git not found"
    from esverify import __version__
    return {"esverify": __version__, "copydetect": _version("copydetect"), "pygments": _version("pygments"),
            "pandas": _version("pandas"), "numpy": _version("numpy"),
            "python": f"{platform.python_implementation()} {sys.version.split()[0]}", "git": git_v}


STATEMENT = (
    "What this audit establishes: for the scanned sources (files, SHA-256 manifest below) and the named "
    "reference clones at the recorded commits, (1) no code file shares winnowed token fingerprints "
    "(copydetect; robust to renaming and reformatting) above the similarity threshold and token minimum, "
    "other than regions made only of interface declarations listed in the interface data (`interface` "
    "rows: imports, signatures with defaults, argparse flags, constants, dataclass fields), "
    "(2) no comment, docstring or prose file shares a run of normalised words at or above the run "
    "minimum, (3) no non-trivial file is byte-identical to a reference file, and (4) the esverify package "
    "neither imports reference modules or the oracle area nor loads them by a statically visible path. "
    "What it cannot establish: that the code was written independently (that is a matter of process and "
    "records); copying below the thresholds, heavy restructuring, paraphrase or translation into another "
    "language; similarity to reference versions or files not supplied with --ref (without --ref, "
    "sections 1-3 do not run at all); what items listed for review do at run time (a person must check "
    "them); anything in binary files beyond byte identity, or in data files (json, toml...) beyond byte "
    "identity; and licence files, which are compared only for identity."
)
