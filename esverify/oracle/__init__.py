"""esverify.oracle: identical-noise parity against out-of-tree reference clones.

The reference code runs only in a child interpreter, driven by the scripts
in `oracles/` (executed by path, never imported). This package builds the
cases (`cases`: the matrix from a case seed, random cases, shrinking),
runs our side (`ours`, the one adapter to esverify.es), talks to the
child (`child_process`, one `session` per reference), compares bits and
names the diagnoses (`compare`), fuzzes (`fuzz`) and writes the report
(`run_report`, through esverify.report). What the core knows about each
reference is its adapter (`adapters`). Entry points: `esverify parity` (`cli`),
`run_parity(Options)` and `Runner(options).session(target, clone)` (one
child, cases run one at a time: fuzz shrinking, mutant catalogs).
"""
from __future__ import annotations

import importlib

#: public name -> the submodule defining it; imported on first use (PEP 562), so that loading
#: `esverify.oracle.cli` for `esverify parity --help` or a usage error imports no torch
_LAZY = {"Options": "options", "UsageError": "options", "RunResult": "run_report", "Runner": "runner"}


def __getattr__(name):
    if name in _LAZY:
        value = getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def run_parity(options) -> "RunResult":
    """Run a parity matrix; see Options and docs/parity.md. Raises UsageError on bad options."""
    from .runner import Runner
    return Runner(options).run()


__all__ = ["Options", "RunResult", "Runner", "UsageError", "run_parity"]
