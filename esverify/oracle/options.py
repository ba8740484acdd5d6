"""The options of a parity run and their checks (docs/parity.md, "Options").

Design record: `Options` is the whole input of a run, filled by
the command line (esverify.oracle.cli) or by a caller; `validate` checks
every option before anything runs, so a bad one costs nothing and is one
line. Clone paths are generic (`ref`, recognised by the adapters); an
adapter's deprecated option lands in `aliases`.
"""
from __future__ import annotations

import math
import sys
from dataclasses import dataclass, field
from pathlib import Path

from ..report import FORMATS
from . import cases as _cases
from .case_model import MATRIX_DTYPES
from .child_process import DEFAULT_MAX_OUTPUT


class UsageError(ValueError):
    """Bad options or nothing to run: exit 2 without a report."""


class SetupError(UsageError):
    """The environment cannot run the matrix (clone, child Python, devices): exit 2, one line, no rows."""


class ChildStartError(SetupError):
    """A reference child that did not start (import failure, a broken hello): exit 2 after a report
    of error rows is written, so what the child said is kept."""


@dataclass
class Options:
    """Everything `esverify parity` takes (see docs/parity.md); defaults are the CLI's."""
    #: reference clone paths (`--ref`, repeatable): one path or a sequence; each is recognised by the
    #: adapters (esverify.oracle.adapters), several adapters may claim one path
    ref: str | tuple | list | None = None
    #: {deprecated option (an adapter's alias_flag): clone path}: that adapter's clone, as before `--ref`
    aliases: dict = field(default_factory=dict)
    target: str | None = None            #: an adapter name, "all" or None (every clone found)
    #: the child interpreter of every reference without its own in `pythons` (a bare --python PATH)
    python: str = sys.executable
    python_explicit: bool = False        #: a bare --python was given (then "pass --python" is no fix to suggest)
    #: {reference name: interpreter} (--python NAME=PATH, repeatable; esverify.oracle.interpreters): a plain
    #: string per reference, which whatever keeps state per interpreter (warm start servers) keys by
    pythons: dict = field(default_factory=dict)
    dtypes: tuple = ("f32", "f16", "bf16")
    schemes: tuple = ("iid", "correlated")
    devices: tuple = ("cpu", "cuda")
    devices_explicit: bool = False
    mapping: str = "poly32"
    seed: int = 42
    population: int | None = None        #: None: drawn from case_seed (odd, not a multiple of 3)
    sigma: float | None = None           #: None: drawn per case from case_seed
    alpha: float | None = None           #: None: drawn per case from case_seed
    case_seed: int = _cases.DEFAULT_CASE_SEED
    noises: tuple = _cases.NOISES        #: "contract" and/or "native" (native: correlated rows only)
    case_json: str | None = None         #: run exactly this one case (cases.to_json), e.g. a shrunk fuzz case
    fuzz: int = 0                        #: run this many random cases instead of the matrix, shrink failures
    iterations: int = 3
    case: str | None = None
    keep_tensors: bool = False
    out: str | None = None
    formats: tuple = FORMATS
    junit: str | None = None
    summary: str | None = None           #: a short Markdown verdict + needs-attention block for a CI job page
    reports: str | None = None           #: the folder that holds the default report folders (default ./reports)
    settings: dict = field(default_factory=dict)   #: {setting: {"value", "source"}} (cliutil.Settings.metadata)
    timeout: float = 120.0
    max_memory: int | None = None        #: RLIMIT_DATA of each child in bytes; None: half the RAM; 0: none
    max_output: int = DEFAULT_MAX_OUTPUT  #: bytes of each child's output kept (head and tail); 0: all
    quiet: bool = False
    small: bool = False
    require_all: bool = False            #: a skipped row (not checked here) makes the exit code 1
    overwrite: bool = False              #: replace an earlier report in --out
    loops: bool = True                   #: the training-loop rows fit / main-* (esverify.oracle.loop_rows)
    #: with --ref paths given, also run the references found elsewhere ($ESVERIFY_* variables, ./refs/<name>)
    discover: bool = False
    #: the commit a failing row's blame counts the clone's changes from (None: the validated commit)
    blame_base: str | None = None
    child_env: dict = field(default_factory=dict)   #: extra environment for the children (tests, diagnostics)
    #: fork the children from a warm start server that imported torch once (esverify.oracle.warm_start), one
    #: per child interpreter with two children or more; False: a fresh interpreter each
    warm_start: bool = True
    #: the children count the clone's executed lines with coverage.py (a trace function: slower children)
    line_coverage: bool = False
    argv: list = field(default_factory=lambda: list(sys.argv))

    def python_for(self, name: str) -> str:
        """The interpreter of reference `name`'s child: its own (--python NAME=PATH), else the bare one."""
        return str(self.pythons.get(name) or self.python)

    def explicit_for(self, name: str) -> bool:
        """Whether `name`'s interpreter was given (NAME=PATH, or a bare --python), not the default."""
        return name in self.pythons or self.python_explicit


def validate(opts: Options) -> Options:
    """`opts`, checked: UsageError (one line, naming the option and the fix) on the first bad one."""
    from . import adapters as _adapters
    if opts.target not in (None, "all", *_adapters.names()):
        from .. import registry
        if registry.unusable(opts.target):   # a plug-in of that name that is left out: its own line
            raise UsageError(f"--target {opts.target}: {registry.unusable(opts.target)}")
        raise UsageError(f"--target must be one of {', '.join(_adapters.names())} or all, got {opts.target!r}")
    for name, values, known in (("--dtypes", opts.dtypes, MATRIX_DTYPES), ("--schemes", opts.schemes,
                                ("iid", "correlated")), ("--devices", opts.devices, ("cpu", "cuda"))):
        if not values:
            raise UsageError(f"{name} is empty")
        bad = [v for v in values if v not in known]
        if bad:
            from ..cliutil import suggest
            raise UsageError(f"{name}: unknown {bad}; choose from {list(known)}{suggest(bad[0], known)}")
    if opts.mapping not in ("poly32", "libm64"):
        raise UsageError(f"--mapping must be poly32 or libm64, got {opts.mapping!r}")
    if not 0 <= int(opts.seed) < 1 << 64:
        raise UsageError(f"--seed must be in [0, 2**64), got {opts.seed}")
    if opts.population is not None and opts.population < 2:
        raise UsageError(f"--population must be >= 2 (z-scores of one member are zero), got {opts.population}")
    if opts.iterations < 1:
        raise UsageError(f"--iterations must be >= 1, got {opts.iterations}")
    if opts.sigma is not None and not 0 < opts.sigma < math.inf:
        raise UsageError(f"--sigma must be finite and > 0, got {opts.sigma}")
    bad = [n for n in opts.noises if n not in _cases.NOISES]
    if bad or not opts.noises:
        raise UsageError(f"--noise: unknown {bad or 'empty'}; choose from {list(_cases.NOISES)}")
    if not 0 <= int(opts.case_seed) < 1 << 64:
        raise UsageError(f"--case-seed must be in [0, 2**64), got {opts.case_seed}")
    if opts.fuzz < 0:
        raise UsageError(f"--fuzz must be >= 0, got {opts.fuzz}")
    if opts.case_json is not None:
        try:
            _cases.from_json(opts.case_json)
        except ValueError as exc:
            raise UsageError(str(exc)) from None
    if opts.alpha is not None and not 0 <= opts.alpha < math.inf:
        raise UsageError(f"--alpha must be finite and >= 0, got {opts.alpha}")
    if not opts.timeout > 0:
        raise UsageError(f"--timeout must be > 0 seconds, got {opts.timeout}")
    for name, value in (("--max-memory", opts.max_memory), ("--max-output", opts.max_output)):
        if value is not None and not (isinstance(value, int) and value >= 0):
            raise UsageError(f"{name} must be a size in bytes >= 0 (0: no limit), got {value!r}")
    bad = [f for f in opts.formats if f not in FORMATS]
    if bad:
        from ..cliutil import suggest
        raise UsageError(f"--format: unknown {bad}; choose from {list(FORMATS)}{suggest(bad[0], FORMATS)}")
    if not opts.formats:
        raise UsageError(f"--format is empty; choose from {list(FORMATS)}")
    # checked up front: a report that cannot be written must not cost a whole run (created in run())
    if opts.out and Path(opts.out).exists() and not Path(opts.out).is_dir():
        raise UsageError(f"--out {opts.out}: exists and is not a directory")
    if opts.junit and Path(opts.junit).is_dir():
        raise UsageError(f"--junit {opts.junit}: is a directory, not a file")
    unknown = [n for n in opts.pythons if n not in _adapters.names()]
    if unknown:   # --python NAME=PATH names a reference (esverify.oracle.interpreters)
        from ..cliutil import suggest
        raise UsageError(f"--python {unknown[0]}=...: no reference is named {unknown[0]!r}"
                         f"{suggest(unknown[0], _adapters.names())}; known: {', '.join(_adapters.names())}")
    check_numerics(import_torch=False)   # before anything runs; torch is probed once a run imported it
    return opts


def check_numerics(import_torch: bool = True):
    """UsageError when this process flushes subnormals to zero (numerics_probe): our side's subnormal
    results would not be the contract's. `validate` asks without importing torch (a run imports it
    later, beside the warm start server's imports), the runner again once torch and numba are imported
    (what importing them set shows then), before any case runs."""
    from ..numerics_probe import flush_to_zero_status
    flush = flush_to_zero_status(import_torch=import_torch)
    if flush.flushing:
        raise UsageError(f"parity: {flush.message()}")


def ref_paths(opts: Options) -> list[str]:
    """The generic clone paths of `opts` (`ref`: None, one path or a sequence), in order, once each."""
    refs = [opts.ref] if isinstance(opts.ref, (str, Path)) else list(opts.ref or ())
    return [str(r) for r in dict.fromkeys(refs)]
