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

import re
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
        if not _init_refused(exc):
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


#: Python's own refusal of a call's arguments, for init_noiser
_BINDING = re.compile(r"^(?:[\w.]+\.)?init_noiser\(\) (?:got an unexpected keyword argument|missing \d+ required)")


def _init_refused(exc: BaseException) -> bool:
    """Whether `exc` is init_noiser refusing its arguments: raised by the call's binding, or by init_noiser's own
    body (its innermost frame); a TypeError raised deeper is the reference's own failure."""
    frames = _frames(exc)
    return bool(_BINDING.match(str(exc))) or bool(frames and frames[-1].f_code.co_name == "init_noiser")


def _frames(exc: BaseException) -> list:
    tb, frames = exc.__traceback__, []
    while tb is not None:
        frames.append(tb.tb_frame)
        tb = tb.tb_next
    return frames


def explain(exc: BaseException, noisers, ops) -> NotDriven | None:
    """The NotDriven of an exception any op raised (the driver's own and its siblings' alike) when it is the
    driver reading a name a later commit renamed: a KeyError of a noiser name the ops ask for and
    ALL_NOISERS lacks, or init_noiser refusing the keywords it was given; None otherwise (the reference's
    own failure, said as such)."""
    table = getattr(noisers, "ALL_NOISERS", None)
    asked = {op.get("noiser") for op in ops if isinstance(op, dict)}
    if isinstance(exc, KeyError) and isinstance(table, dict) and exc.args and exc.args[0] in asked - set(table):
        return NotDriven(f"it reads ALL_NOISERS[{exc.args[0]!r}] of {INIT}, which has no {exc.args[0]!r} "
                         f"(it has {', '.join(map(repr, table))})")
    if isinstance(exc, TypeError) and _init_refused(exc):
        frames = _frames(exc)
        cls = frames[-1].f_locals.get("cls") if frames and frames[-1].f_code.co_name == "init_noiser" else None
        name = f"{cls.__name__}.init_noiser" if isinstance(cls, type) else "init_noiser"
        return NotDriven(f"{name} refused the keywords the driver passes: TypeError: {exc}")
    return None
