"""The setup of a parity run: the child Python, the clones, the cases (docs/parity.md, "Setup errors").

Design record: every setup fault is found here, before any case
runs, and is ONE line (what, why, the fix): UsageError/SetupError, exit 2.
Clone paths are generic: each `--ref` path is offered to every adapter
(`Adapter.recognise`; several may claim one path); an adapter not claimed
by a path falls back to its environment variable, then its default path.
Nothing here names a reference.
"""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

from .. import jsonin
from . import adapters as _adapters
from . import cases as _cases
from .clones import CloneError, inspect_clone
from .options import SetupError, UsageError, ref_paths

#: the interpreter's version and path, and whether torch, numpy and each module named in argv are found
#: (importlib.util.find_spec: nothing imported; a module whose lookup raises is not found)
_PROBE = ("import importlib.util as u, json, platform, sys\n"
          "def found(n):\n"
          "    try:\n"
          "        return u.find_spec(n) is not None\n"
          "    except (ImportError, ValueError):\n"
          "        return False\n"
          "print(json.dumps({'python': platform.python_version(), 'executable': sys.executable, "
          "'torch': found('torch'), 'numpy': found('numpy'), 'found': {n: found(n) for n in sys.argv[1:]}}))")


def probe_python(python: str, timeout: float, explicit: bool = True, modules=()) -> dict:
    """Interpreter facts without importing torch: version, has torch, has numpy, and under "found" whether
    each of `modules` is found, all from one start of the interpreter. UsageError, one line each, for a
    folder, a file that is not executable, a missing one, a program that is not Python."""
    where = Path(python).expanduser()
    if where.is_dir():
        hint = next((str(where / c) for c in ("bin/python", "bin/python3", "python") if (where / c).is_file()),
                    None)
        raise UsageError(f"--python {python}: is a folder, not an interpreter; pass the interpreter itself"
                         + (f", e.g. --python {hint}" if hint else " (e.g. VENV/bin/python)"))
    if where.is_file() and not os.access(where, os.X_OK):
        raise UsageError(f"--python {python}: is not executable (chmod +x, or pass another interpreter)")
    try:
        out = subprocess.run([python, "-c", _PROBE, *modules], capture_output=True, text=True, timeout=timeout)
    except FileNotFoundError:
        raise UsageError(f"--python {python}: no such interpreter") from None
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise UsageError(f"--python {python}: cannot run it ({exc})") from None
    if out.returncode:
        said = " | ".join(line.strip() for line in out.stderr.splitlines() if line.strip())   # one line
        raise UsageError(f"--python {python}: the interpreter failed to start: {said[-500:]}")
    try:
        facts = jsonin.loads(out.stdout.strip().splitlines()[-1], "the interpreter probe's answer")
        if not isinstance(facts, dict) or not {"python", "torch", "numpy"} <= set(facts):
            raise ValueError(facts)
    except (IndexError, ValueError):
        printed = out.stdout.strip()[-200:]
        raise UsageError(f"--python {python}: is not a Python 3 interpreter (does not behave like a Python 3 "
                         f"interpreter: the probe printed {printed!r}); pass e.g. --python /usr/bin/python3") from None
    return facts


def wanted_adapters(opts) -> list[str]:
    """The adapter names a run is for: --target's, or every registered one."""
    return _adapters.names() if opts.target in (None, "all") else [opts.target]


def _source(opts, option: str, setting: str | None) -> str:
    """Whence an explicit path came: the option, or the [tool.esverify] file that gave it."""
    said = opts.settings.get(setting) or {} if setting else {}
    return said["source"] if "[tool.esverify]" in str(said.get("source", "")) else option


def resolve_clones(opts, wanted: list[str]) -> tuple[dict, dict]:
    """({adapter name: CloneInfo}, {adapter name: why no clone was found}) for the `wanted` adapters.

    Explicit paths first (`opts.ref`, then the adapters' deprecated options in `opts.aliases`): a path
    that does not exist, or that no adapter recognises, is a SetupError naming what each adapter looks
    for (or, when one adapter matched a generic file name only, what that clone lacks). When explicit
    paths were given, they are what runs: a wanted adapter none of them claims is not run (its
    environment variable and default path are looked at only with `opts.discover`). With no
    explicit path, for each wanted adapter: its environment variable (a bad path there is a SetupError
    naming the variable), then its default path (missing: not given, or with --target a SetupError
    saying which option to pass). Each CloneInfo's `source` says whence it came."""
    clones, not_given = {}, {}
    explicit = _explicit_paths(opts)
    for path, source, only in explicit:
        where = Path(path).expanduser()
        for adapter in _claimants(path, where, source, only, wanted):
            if adapter.name not in wanted:
                continue
            if adapter.name in clones:
                raise SetupError(f"{source} {path}: a second {adapter.name} clone (the first: "
                                 f"{clones[adapter.name].path}); fix: pass one clone per reference")
            clones[adapter.name] = _inspect(adapter, where, source)
    discover = not explicit or getattr(opts, "discover", False)
    for name in wanted:
        if name in clones:
            continue
        adapter = _adapters.get(name)
        if not discover:
            not_given[name] = _not_asked_for(opts, name, adapter)
            continue
        clone, why = _clone_elsewhere(opts, name, adapter)
        if clone is not None:
            clones[name] = clone
        else:
            not_given[name] = why
    if not clones:
        raise UsageError("no reference clone found: pass --ref PATH (repeatable: one per reference), or set "
                         + " / ".join(f"${_adapters.get(n).env_var}" for n in wanted) + "; tried: "
                         + "; ".join(not_given.values()))
    return clones, not_given


def _explicit_paths(opts) -> list[tuple]:
    """The clone paths given explicitly, as (path, whence, the one adapter it is for or None): every
    --ref first, then the adapters' deprecated options (UsageError for an option no adapter has)."""
    explicit = [(p, _source(opts, "--ref", "ref"), None) for p in ref_paths(opts)]
    by_flag = {a.alias_flag: a for a in _adapters.all_adapters() if a.alias_flag}
    for flag, path in (opts.aliases or {}).items():
        if path:
            if flag not in by_flag:
                raise UsageError(f"{flag}: no reference adapter has this option; use --ref PATH")
            explicit.append((str(path), _source(opts, flag, flag.lstrip("-").replace("-", "_")), by_flag[flag]))
    return explicit


def _claimants(path: str, where: Path, source: str, only, wanted: list[str]) -> list:
    """The adapters (`only`, when given, else every one) that recognise the explicit clone path; a
    SetupError saying what the path lacks when it does not exist or none does."""
    if not where.exists():
        raise SetupError(f"{source} {path}: does not exist; fix: pass the top folder of a reference clone "
                         "(docs/parity.md, 'The reference clones')")
    candidates = [only] if only is not None else _adapters.all_adapters()
    if not where.is_dir() and not any(a.accepts_file() for a in candidates):
        raise SetupError(f"{source} {path}: is not a directory; fix: pass the top folder of a reference "
                         "clone (docs/parity.md, 'The reference clones')")
    claimed = [a for a in candidates if a.recognise(where) is None]
    if claimed:
        return claimed
    near = [(a, a.near_miss(where)) for a in candidates if a.near_miss(where)]
    if len(near) == 1:   # one adapter matched a generic file name only: say what that clone lacks
        adapter, reason = near[0]
        raise SetupError(f"{source} {path}: {reason}; fix: pass the top folder of your {adapter.name} "
                         "clone (docs/parity.md, 'The reference clones')")
    if only is None and len(wanted) > 1:
        raise SetupError(f"{source} {_adapters.not_recognised_message(path)}; fix: pass the top folder "
                         "of a reference clone (docs/parity.md, 'The reference clones')")
    adapter = only or _adapters.get(wanted[0])
    raise SetupError(f"{source} {path}: {adapter.recognise(where)}; fix: pass the top folder of your "
                     f"{adapter.name} clone (docs/parity.md, 'The reference clones')")


def _not_asked_for(opts, name: str, adapter) -> NotAskedFor:
    """Why a reference no explicit path claims does not run (saying where its clone was seen, if
    anywhere); with --target naming it, a SetupError saying what to pass."""
    found = _found_elsewhere(adapter)
    if opts.target not in (None, "all"):
        raise SetupError(f"--target {opts.target} needs the {name} clone, and no --ref path is one; fix: "
                         f"pass {adapter.how_to_give().split(' or set ')[0]}"
                         + (f", or --discover to run the one at {found}" if found else ""))
    why = NotAskedFor(
        f"not asked for: only the clones given with --ref run"
        + (f"; found {found}: pass --discover to run it too" if found else ""))
    why.found = found
    return why


def _clone_elsewhere(opts, name: str, adapter) -> tuple:
    """The clone of a reference found without an explicit path: its environment variable, then its
    default path. (CloneInfo, None), or (None, why) when there is none and no --target needs it."""
    if os.environ.get(adapter.env_var):
        path = os.environ[adapter.env_var]
        return _inspect(adapter, path, f"${adapter.env_var}"), None
    try:
        clone = inspect_clone(adapter, adapter.default_path)
        clone.source = f"./{adapter.default_path} (the default path)"
        return clone, None
    except CloneError as exc:
        if opts.target is None:
            return None, str(exc)
        raise SetupError(f"--target {opts.target} needs the {name} clone: pass {adapter.how_to_give()}; the "
                         f"default {adapter.default_path} does not exist. Where to get it: docs/parity.md, "
                         "'The reference clones'") from None


class NotAskedFor(str):
    """The not-given reason of a reference that was not asked for (--ref named others, no --discover):
    its cases are left out of the run, not listed as skipped rows; `found`: where a clone was seen."""
    found = ""


def _found_elsewhere(adapter) -> str:
    """Where a clone of `adapter` would have been found without --ref ("$VAR PATH", "./refs/NAME"), or ""."""
    value = os.environ.get(adapter.env_var)
    if value:
        return f"${adapter.env_var} {value}"
    if adapter.default_path and adapter.recognise(Path(adapter.default_path)) is None:
        return f"./{adapter.default_path}"
    return ""


def clones_line(clones: dict, not_given: dict) -> str:
    """One line: which clones run, from where; and the references found elsewhere that did not run."""
    said = [f"{name} {info.path} (from {info.source or '?'})" for name, info in clones.items()]
    line = "clones: " + ("; ".join(said) or "none")
    unasked = [f"{n} at {r.found}" for n, r in not_given.items() if isinstance(r, NotAskedFor) and r.found]
    if unasked:
        line += "; found elsewhere, not run (--discover runs them): " + "; ".join(unasked)
    return line


def _inspect(adapter, path, source: str):
    try:
        info = inspect_clone(adapter, path)
        info.source = source
        return info
    except CloneError as exc:
        raise SetupError(f"{source} {path}: {exc}; fix: pass the top folder of your {adapter.name} clone "
                         "(docs/parity.md, 'The reference clones')") from None


def select_cases(opts, wanted: list[str], alpha) -> list:
    """The cases of the run (--case-json, --fuzz or the matrix), narrowed by --case; UsageError when
    --case matches nothing."""
    if opts.case_json is not None:
        all_cases = [_cases.from_json(opts.case_json)]
    elif opts.fuzz:
        from . import fuzz as _fuzz
        all_cases = _fuzz.draw_cases(wanted, opts)
    else:
        all_cases = _cases.build_matrix(wanted, opts.devices, opts.dtypes, opts.schemes, opts.population,
                                        opts.sigma, alpha, opts.iterations, opts.small, opts.noises,
                                        opts.case_seed, opts.loops)
    selected = _cases.select(all_cases, opts.case)
    if opts.case and not selected:
        example = all_cases[0].case_id if all_cases else f"{wanted[0]}/cpu/f32/iid/perturb/N7"
        raise UsageError(f"--case {opts.case!r} matches no case; case ids look like {example}")
    return selected
