"""One child interpreter per reference, and what each child needs (docs/parity.md, "What each child needs").

Design record: references need different Pythons (one reference's files
are in 3.12 syntax; another's driver needs safetensors), so
`--python` takes `NAME=PATH` (repeatable) besides a bare `PATH` (every
reference without its own), the same in $ESVERIFY_PYTHON and
`[tool.esverify] python` (entries separated by commas, or a TOML list).
An interpreter is a plain string, the path as given: `Options.python_for`
gives each reference's, and whatever keeps state per interpreter (warm
start servers, probes) keys it by that string.

Before any row runs, each reference's interpreter is probed once per
distinct path (esverify.oracle.setup.probe_python, which also looks up the
references' `child_needs` there with importlib in the same start, nothing imported). A
reference whose interpreter lacks a need costs only its own rows: they are
`skipped` with one line naming the reference, the interpreter and the
module; when no reference can run, that is a SetupError (exit 2).
`interpreter_gaps` turns such rows, and the rows skipped because a file
needs a newer Python than the child's, into the clause the first line of
the console and of every report carries, so a PASS never stands over a
row family that did not run.
"""
from __future__ import annotations

import os
import re

from ..cliutil import PYTHON_NAME
from .options import SetupError, UsageError

#: what every reference's child imports (esverify.rng and the shared child code), but a standalone one's
BASE_NEEDS = ("torch", "numpy")
#: the pip line that installs a need (torch pinned to the version the goldens were made with)
PINS = {"torch": "torch==2.13.0"}


def parse_python(value) -> tuple[str | None, dict]:
    """(the bare interpreter or None, {reference name: interpreter}) of a --python value: a sequence of
    entries (the repeated option, a TOML list) or one string of entries separated by commas (an
    environment variable, a TOML string). An entry is `PATH` or `NAME=PATH`; UsageError (one line) for an
    empty entry, two bare paths, or one reference given twice with different paths. Names are checked
    against the references by esverify.oracle.options.validate."""
    if value is None:
        return None, {}
    entries = [value] if isinstance(value, str) else list(value)
    items = [part.strip() for entry in entries for part in str(entry).split(",")]
    bare, named = None, {}
    for item in items:
        if not item:
            raise UsageError("--python: an empty entry; give PATH or NAME=PATH (NAME a reference)")
        name, sep, path = item.partition("=")
        path = os.path.expanduser(path)   # a shell leaves the ~ of NAME=~/venv/bin/python to us
        if sep and PYTHON_NAME.match(name) and "/" not in name:
            if not path:
                raise UsageError(f"--python {item}: no interpreter after '='; give {name}=PATH")
            if named.get(name, path) != path:
                raise UsageError(f"--python: {name} is given two interpreters ({named[name]} and {path}); give one")
            named[name] = path
        else:
            if bare not in (None, item):
                raise UsageError(f"--python: two interpreters for every reference ({bare} and {item}); give one "
                                 "bare PATH and NAME=PATH for the others")
            bare = os.path.expanduser(item)
    return bare, named


def child_needs(adapter) -> tuple:
    """The modules `adapter`'s child imports beyond the standard library: BASE_NEEDS, then the adapter's
    own `child_needs` (e.g. safetensors, for a reference that writes safetensors files), in order, once each.
    A standalone child's (the spec's CloneSpec.standalone_child: its driver imports none of the shared child
    runtime, e.g. a JAX reference's) are its own `child_needs` alone, so a JAX environment without torch runs it."""
    own = tuple(getattr(adapter, "child_needs", ()))
    return tuple(dict.fromkeys(own if standalone(adapter) else (*BASE_NEEDS, *own)))


def standalone(adapter) -> bool:
    """Whether `adapter`'s child imports nothing of the shared child runtime (and so no torch): no warm start
    server (which imports torch) forks it, and its interpreter is asked for its own needs only."""
    return bool(getattr(adapter, "standalone_child", False))


def _fix(name: str, probe: dict, missing: list, own: bool) -> str:
    pins = " ".join(PINS.get(m, m) for m in missing)
    fix = f"install {'them' if len(missing) > 1 else 'it'} there ({probe['executable']} -m pip install {pins})"
    if not own:   # with NAME=PATH given, naming the option again would not help
        fix += f" or give --python {name}=PATH with an interpreter that has {'them' if len(missing) > 1 else 'it'}"
    return fix


def check(opts, names, timeout: float, probe=None) -> tuple[dict, dict]:
    """({reference: probe facts of its interpreter}, {reference: why its rows cannot run}) for the
    references `names` (their adapters' child_needs looked up in opts.python_for(name)); each distinct
    interpreter is probed once. UsageError for an interpreter that is no Python (setup.probe_python);
    SetupError when no reference in `names` can run (one line per interpreter that lacks something)."""
    from . import adapters as _adapters
    from .setup import probe_python
    probe = probe or probe_python
    needs = {name: child_needs(_adapters.get(name)) for name in names}
    asked = {}   # interpreter -> the modules beyond torch and numpy that its references need, in order
    for name in names:
        asked.setdefault(opts.python_for(name), {}).update(dict.fromkeys(m for m in needs[name] if m not in BASE_NEEDS))
    facts, lacking = {}, {}
    for name in names:
        python = opts.python_for(name)
        if python not in facts:
            try:
                facts[python] = probe(python, timeout, opts.explicit_for(name), tuple(asked[python]))
            except UsageError as exc:   # name the entry as given: --python NAME=PATH
                said = str(exc)
                if name in opts.pythons:
                    said = said.replace(f"--python {python}", f"--python {name}={python}", 1)
                raise UsageError(said) from None
        f = facts[python]
        # a module the probe did not answer for counts as found (the child's start then says what is wrong)
        found = {**f.get("found", {}), **{m: f[m] for m in BASE_NEEDS if m in f}}
        missing = [m for m in needs[name] if not found.get(m, True)]
        if missing:
            lacking[name] = (f"the child Python {f['executable']} ({f['python']}) lacks {' and '.join(missing)}, "
                             f"which {name} needs; fix: {_fix(name, f, missing, name in opts.pythons)}")
    by_name = {name: facts[opts.python_for(name)] for name in names}
    if names and len(lacking) == len(names):
        raise SetupError("; ".join(dict.fromkeys(lacking.values())))
    return by_name, lacking


def skipped_detail(why: str) -> str:
    """The detail of a row not run because its reference's interpreter lacks a need (see `check`)."""
    return f"not checked here: {why}"


_NEEDS_PYTHON = re.compile(r"needs (Python \d+\.\d+)")
_LACKS = re.compile(r"the child Python (\S+) \([^)]*\) lacks (.+?), which")


def interpreter_gaps(frame) -> str:
    """"NAME: 36 rows not run: they need Python 3.12; give --python NAME=PATH" (one clause per
    reference, joined by "; "): the rows a run did not check because of a child's interpreter (a file
    that needs a newer Python, a module the interpreter lacks); "" when there are none. `frame`: the
    run's rows (columns target, status, detail)."""
    if frame is None or frame.empty:
        return ""
    said = []
    rows = frame[frame["status"].isin(("skipped", "not-run", "unsupported"))]
    for target, part in rows.groupby("target", sort=False):
        newer = part["detail"].astype(str).str.extract(_NEEDS_PYTHON)[0].dropna()
        lacks = part["detail"].astype(str).str.extract(_LACKS)[1].dropna()
        if len(newer):
            said.append(f"{target}: {len(newer)} row{'s' if len(newer) != 1 else ''} not run: "
                        f"{'they need' if len(newer) != 1 else 'it needs'} {' or '.join(sorted(set(newer)))}; "
                        f"give --python {target}=PATH")
        if len(lacks):
            said.append(f"{target}: {len(lacks)} row{'s' if len(lacks) != 1 else ''} not run: the interpreter "
                        f"lacks {' and '.join(sorted(set(lacks)))}; give --python {target}=PATH")
    return "; ".join(said)
