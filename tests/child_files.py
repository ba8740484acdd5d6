"""The child's files in the test process: the shared runtime (oracles/) and a reference's child folder.

A child runs its reference's `child/` folder flat beside a copy of `oracles/` (esverify.oracle.child_process.
child_files); tests that call a driver's functions in-process put both folders on sys.path the same way and
import the driver under a name of its own (every reference's driver is `driver.py`).
"""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

from esverify.paths import child_dir, oracles_dir


def on_path(package: str | None = None) -> None:
    """Put oracles/ (and the child folder of reference package `package`, e.g. "eggroll") first on sys.path."""
    for folder in ([child_dir(package)] if package else []) + [oracles_dir()]:
        if str(folder) not in sys.path:
            sys.path.insert(0, str(folder))


def driver(package: str):
    """The child driver of reference package `package`, imported once as module `driver_<package>`."""
    on_path(package)
    name = f"driver_{package}"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, child_dir(package) / "driver.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


def manifest(reference: str):
    """The interface data (interfaces.json) of built-in reference `reference` ("es-awd"): its child folder's."""
    return child_dir(reference.replace("-", "_")) / "interfaces.json"



def in_child_folder(rel: Path) -> bool:
    """Whether `rel` (a path relative to the esverify package folder) is a reference's child file
    (references/<name>/child/...): run by path in the child beside oracles/, never a module of the package."""
    parts = rel.parts
    return len(parts) > 3 and parts[0] == "references" and parts[2] == "child"
