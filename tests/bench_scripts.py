"""A benchmark script of benchmarks/ loaded as a module, for the tests of its helpers (the folder is not a
package, and each load is a module of its own: a test may monkeypatch it freely)."""
from __future__ import annotations

import importlib.util
import itertools
from pathlib import Path

_LOADS = itertools.count()


def load(name: str):
    """benchmarks/<name>.py, freshly executed as a module of its own."""
    path = Path(__file__).resolve().parents[1] / "benchmarks" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"{name}_under_test_{next(_LOADS)}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
