"""What the hyperscale-es driver reads of a clone, and the one line when a later commit lacks it (docs/hyperscale.md).

Runs ONLY in the hyperscale-es child (beside child/driver.py); the esverify package never imports it,
and it imports no torch (the child's interpreter need not have it).

A user clones HyperscaleES's newest commit, not the one the driver was validated at. What the driver
reads is few names: `hyperscalees.noiser.ALL_NOISERS` and the noisers' class methods, the options the
rows set (`rank`, `noise_reuse`, `group_size`), and `simple_es_tree_key` and `MM_PARAM` of
`hyperscalees.models.common`. A later commit that moved or renamed one of those cannot be driven: the
row ends with one line, "esverify could not drive this clone: it reads X ...", never a traceback and
never the reference's fault (`NotDriven`). Everything else a later commit may do keeps the rows:

- a new top-level import of a package the child's interpreter lacks, outside a `try`, becomes an inert
  placeholder (the shared runtime's oracles/placeholders.py, torch-free: `watch`), listed as a note of
  the run and an error only when the reference uses it; inside a `try` the reference's own fallback runs;
- new options, noisers, names and files, and moved modules that the package's own imports follow, are
  read through ALL_NOISERS and class methods, as before.
"""
from __future__ import annotations

from pathlib import Path

try:   # the shared runtime beside the driver in a parity child; the one-shot mode (tests) runs without it
    import placeholders
except ImportError:   # pragma: no cover - the one-shot mode keeps import errors as they are
    placeholders = None

COMMON = "src/hyperscalees/models/common.py"
INIT = "src/hyperscalees/noiser/__init__.py"
#: the names the driver reads from models/common.py
COMMON_NAMES = ("simple_es_tree_key", "MM_PARAM")


class NotDriven(RuntimeError):
    """esverify could not drive this clone: the message (one line) names what the driver reads that the
    clone lacks; the parity child replies it with kind "interface" (ours to say, not the reference's)."""

    def __init__(self, what: str):
        super().__init__(f"esverify could not drive this clone: {what}")


def watch(clone: Path) -> None:
    """Serve placeholders for the absent top-level imports of `clone`'s files from now on (no-op without
    the shared runtime)."""
    if placeholders is not None:
        placeholders.watch(clone)


def unwatch(clone: Path) -> None:
    if placeholders is not None:
        placeholders.unwatch(clone)


def served() -> list:
    """The placeholders served so far ({"module", "name", "file", "why"} each), for the hello and replies."""
    return placeholders.served() if placeholders is not None else []


def check_files(clone: Path) -> None:
    """NotDriven when `clone` lacks a file the driver imports by its module name (before importing it, so
    that a moved file is said as such, not as the import's traceback)."""
    if not (clone / COMMON).is_file():
        raise NotDriven(f"it reads {COMMON} ({', '.join(COMMON_NAMES)}), which this clone does not have")


def check_loaded(noisers, common) -> None:
    """NotDriven when the imported modules lack a name the driver reads."""
    if not isinstance(getattr(noisers, "ALL_NOISERS", None), dict):
        raise NotDriven(f"it reads ALL_NOISERS of {INIT}, which defines no such dict")
    lacking = [name for name in COMMON_NAMES if not hasattr(common, name)]
    if lacking:
        raise NotDriven(f"it reads {', '.join(lacking)} of {COMMON}, which defines no "
                        f"{'such names' if len(lacking) > 1 else 'such name'}")


def noiser(noisers, name: str):
    """The noiser class ALL_NOISERS[`name`]; NotDriven naming the names the clone has when it has not that one."""
    table = noisers.ALL_NOISERS
    if name not in table:
        raise NotDriven(f"it reads ALL_NOISERS[{name!r}] of {INIT}, which has no {name!r} "
                        f"(it has {', '.join(map(repr, table))})")
    return table[name]


def init(cls, params, sigma, lr, **options):
    """`cls.init_noiser(params, sigma, lr, **options)` -> (frozen, dyn). NotDriven when the noiser refuses an
    option the rows set (a TypeError of the call itself) or keeps a value other than the one passed (an
    option renamed by a later commit and ignored: the row would otherwise compare another noiser's values
    and blame the reference). A frozen state that is not a dict is not checked."""
    try:
        frozen, dyn = cls.init_noiser(params, sigma, lr, **options)
    except TypeError as exc:
        if not _raised_by_init(exc):
            raise
        raise NotDriven(f"{cls.__name__}.init_noiser refused the keywords the driver passes "
                        f"({', '.join(sorted(options))}): TypeError: {exc}") from None
    if isinstance(frozen, dict):
        dropped = sorted(k for k, v in options.items() if k not in frozen or _differs(frozen[k], v))
        if dropped:
            raise NotDriven(f"{cls.__name__}.init_noiser did not keep the options the driver passes "
                            f"({', '.join(f'{k}={options[k]!r}' for k in dropped)}; its frozen state has "
                            f"{', '.join(sorted(map(str, frozen)))})")
    return frozen, dyn


def _differs(kept, given) -> bool:
    try:
        return bool(kept != given)
    except Exception:  # noqa: BLE001 - an array-valued option: compared by the rows, not here
        return False


def _raised_by_init(exc: BaseException) -> bool:
    """Whether `exc` was raised by the call's binding or by init_noiser's own body (not deeper, where a
    TypeError is the reference's own failure)."""
    tb, frames = exc.__traceback__, []
    while tb is not None:
        frames.append(tb.tb_frame.f_code.co_name)
        tb = tb.tb_next
    below = frames[frames.index("init_noiser") + 1:] if "init_noiser" in frames else []
    return not below
