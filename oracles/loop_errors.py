"""Tell "esverify could not drive this clone" from a failure in the reference's own logic.

Runs ONLY in the parity child; the esverify package never imports it.

A loop is driven through its entry point with stand-ins for the engines,
the data, the tokenizer, the process pool and the packages the loop
imports (docs/references.md §5). When the reference reads something the
driver does not provide, Python raises AttributeError, KeyError or
TypeError at the name it read. `interface_error(exc, clone, op)` returns
`InterfaceError` for exactly those (the missing name belongs to an object
or function of ours), naming the reference's file and line, the name, and
the next step; any other exception is left as it is, so a failure inside
the reference's own logic keeps its plain wording.
"""
from __future__ import annotations

import os
import re
import traceback
from pathlib import Path

#: the child's own files: an object defined there, or a TypeError raised there, is the driver's side
_OURS = {"loop_stubs", "child_loops", "loop_seams", "child_server", "loop_errors"}
_CALL = re.compile(r"^(?P<name>[\w.<>]+)\(\) (?:got an unexpected keyword argument '(?P<kw>\w+)'|"
                   r"missing \d+ required (?:positional|keyword-only) arguments?: (?P<missing>.+)|"
                   r"takes .+ but .+ given|got multiple values for argument '(?P<dup>\w+)')")
_OBJECT = re.compile(r"'(?P<cls>\w+)' object")

NEXT = ("next: compare the clone with this target's interface findings in the report and with "
        "docs/references.md §5 (the interface esverify drives); a clone at another commit than the one documented "
        "there may need a driver that provides this: report it to esverify with this row")


class InterfaceError(RuntimeError):
    """A loop failed because the reference read a name the driver does not provide; `info` is the
    child's error record (kind "interface", file, line, name, message)."""

    def __init__(self, info: dict):
        super().__init__(info["message"])
        self.info = info


class SuppliedKeyError(KeyError):
    """A key the reference read from a dict the driver supplied (a data item, an eval set)."""


class Supplied(dict):
    """A dict handed to the reference (a data item): a missing key raises SuppliedKeyError."""

    def __missing__(self, key):
        raise SuppliedKeyError(key)


def _is_ours(stem: str) -> bool:
    return stem in _OURS


def claim(stem: str):
    """Count the child file `stem` (a driver holding its reference's loop op) as the driver's side too."""
    _OURS.add(stem)


def _ours(obj) -> bool:
    module = getattr(type(obj), "__module__", "") or ""
    if _is_ours(module.split(".")[-1]) or module == "stub" or getattr(obj, "__esverify_stub__", False):
        return True
    fn = getattr(obj, "__func__", obj)
    code = getattr(fn, "__code__", None)
    return code is not None and _is_ours(Path(code.co_filename).stem)


def _frames(exc):
    return traceback.extract_tb(exc.__traceback__)


def _clone_frame(exc, clone: Path):
    prefix = str(Path(clone).resolve()) + os.sep
    inside = [f for f in _frames(exc) if os.path.abspath(f.filename).startswith(prefix)]
    if not inside:
        return None, prefix
    return inside[-1], prefix


def _what(exc, to_reference: bool):
    """(name, phrase) when the failure is at something the driver supplies, else None. The phrase
    completes "{where} ..." in the message. to_reference: the driver called a reference entry point
    and the call itself failed (no frame of the clone in between)."""
    if isinstance(exc, SuppliedKeyError):
        return str(exc.args[0]), f"reads the key {exc.args[0]!r} of a data item esverify supplied, which has no such key"
    if isinstance(exc, AttributeError):
        obj = getattr(exc, "obj", None)
        name = getattr(exc, "name", None)
        if name and obj is not None and _ours(obj):
            kind = obj.__name__ if isinstance(obj, type) else type(obj).__name__
            return name, f"reads the attribute {name!r} of esverify's stand-in {kind}, which does not provide it"
        return None
    if isinstance(exc, TypeError):
        text = str(exc)
        last = _frames(exc)[-1] if _frames(exc) else None
        raised_by_us = last is not None and _is_ours(Path(last.filename).stem)
        call = _CALL.match(text)
        if call:
            name = call.group("kw") or call.group("missing") or call.group("dup") or call.group("name")
            fn = call.group("name").rsplit(".", 1)[-1]
            if to_reference and raised_by_us:
                return name, f"needs {name} (its signature differs from the one esverify passes arguments to)"
            if fn in SUPPLIED_CALLABLES or raised_by_us:
                return name, f"calls esverify's stand-in {call.group('name')}() in a way it does not take"
            return None
        obj = _OBJECT.search(text)
        if obj and (obj.group("cls") in SUPPLIED_CLASSES or raised_by_us):
            return obj.group("cls"), f"uses esverify's stand-in {obj.group('cls')} in a way it does not support"
    return None


#: names of the callables and classes the driver and the stand-in modules hand the reference (filled by
#: loops and loop_stubs at import): a TypeError that names one is the driver's
SUPPLIED_CALLABLES: set = set()
SUPPLIED_CLASSES: set = {"Inert", "StandInEngine", "LoopModel", "StandInModel", "StandInModelRunner", "Tokenizer",
                         "SamplingParams", "ImmediatePool", "Supplied"}


def _callee_frame(callee, prefix: str):
    """(relpath, line, name) of the reference callable the driver called, when its code is in the clone."""
    fn = getattr(callee, "__init__", None) if isinstance(callee, type) else callee
    code = getattr(getattr(fn, "__func__", fn), "__code__", None)
    if code is None or not os.path.abspath(code.co_filename).startswith(prefix):
        return None
    return os.path.abspath(code.co_filename)[len(prefix):].replace(os.sep, "/"), code.co_firstlineno, \
        getattr(code, "co_qualname", code.co_name)


def interface_error(exc: BaseException, clone, op: str, commit_note: str = "", callee=None) -> BaseException:
    """InterfaceError for a failure at a name the driver supplies, else `exc` itself. `callee`: the
    reference's entry point the driver called (a class or function), named when the failure is in the
    call itself (a new required parameter: the TypeError has no frame inside the clone)."""
    if not isinstance(exc, (AttributeError, KeyError, TypeError)):
        return exc
    frame, prefix = _clone_frame(exc, clone)
    entry = _callee_frame(callee, prefix) if frame is None and callee is not None else None
    what = _what(exc, entry is not None)
    if what is None:
        return exc
    name, phrase = what
    if frame is not None:
        rel = os.path.abspath(frame.filename)[len(prefix):].replace(os.sep, "/")
        where = f"{rel}:{frame.lineno} (in {frame.name})"
        info = {"file": rel, "line": frame.lineno, "function": frame.name}
    elif entry is not None:
        rel, line, qual = entry
        where = f"{rel}:{line} ({qual}, called by esverify's driver)"
        info = {"file": rel, "line": line, "function": qual}
    else:
        where = "the clone (no frame of it in the traceback)"
        info = {"file": "", "line": None, "function": ""}
    message = (f"esverify could not drive this clone: {where} {phrase} ({type(exc).__name__}: {exc})"
               f"{commit_note}; {NEXT}")
    return InterfaceError({"kind": "interface", "name": str(name).strip("'\""), "message": message, **info})
