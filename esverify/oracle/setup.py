"""The setup of a parity run: the child Python, the clones, the cases (docs/parity.md, "Setup errors").

Design record (issue 21): every setup fault is found here, before any case
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

_PROBE = ("import importlib.util as u, json, platform, sys; print(json.dumps({'python': platform.python_version(), "
          "'executable': sys.executable, 'torch': u.find_spec('torch') is not None, "
          "'numpy': u.find_spec('numpy') is not None}))")


def probe_python(python: str, timeout: float, explicit: bool = True) -> dict:
    """Interpreter facts without importing torch: version, has torch, has numpy. UsageError, one line
    each, for a folder, a file that is not executable, a missing one, a program that is not Python."""
    where = Path(python).expanduser()
    if where.is_dir():
        hint = next((str(where / c) for c in ("bin/python", "bin/python3", "python") if (where / c).is_file()),
                    None)
        raise UsageError(f"--python {python}: is a folder, not an interpreter; pass the interpreter itself"
                         + (f", e.g. --python {hint}" if hint else " (e.g. VENV/bin/python)"))
    if where.is_file() and not os.access(where, os.X_OK):
        raise UsageError(f"--python {python}: is not executable (chmod +x, or pass another interpreter)")
    try:
        out = subprocess.run([python, "-c", _PROBE], capture_output=True, text=True, timeout=timeout)
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
    for. Then, for each wanted adapter no path claimed: its environment variable (a bad path there is a
    SetupError naming the variable), then its default path (missing: not given, or with --target a
    SetupError saying which option to pass)."""
    clones, not_given = {}, {}
    explicit = [(p, _source(opts, "--ref", "ref"), None) for p in ref_paths(opts)]
    by_flag = {a.alias_flag: a for a in _adapters.all_adapters() if a.alias_flag}
    for flag, path in (opts.aliases or {}).items():
        if path:
            if flag not in by_flag:
                raise UsageError(f"{flag}: no reference adapter has this option; use --ref PATH")
            explicit.append((str(path), _source(opts, flag, flag.lstrip("-").replace("-", "_")), by_flag[flag]))
    for path, source, only in explicit:
        where = Path(path).expanduser()
        if not where.exists():
            raise SetupError(f"{source} {path}: does not exist; fix: pass the top folder of a reference clone "
                             "(docs/parity.md, 'The reference clones')")
        candidates = [only] if only is not None else _adapters.all_adapters()
        if not where.is_dir() and not any(a.accepts_file() for a in candidates):
            raise SetupError(f"{source} {path}: is not a directory; fix: pass the top folder of a reference "
                             "clone (docs/parity.md, 'The reference clones')")
        claimed = [a for a in candidates if a.recognise(where) is None]
        if not claimed:
            if only is None and len(wanted) > 1:
                raise SetupError(f"{source} {_adapters.not_recognised_message(path)}; fix: pass the top folder "
                                 "of a reference clone (docs/parity.md, 'The reference clones')")
            adapter = only or _adapters.get(wanted[0])
            raise SetupError(f"{source} {path}: {adapter.recognise(where)}; fix: pass the top folder of your "
                             f"{adapter.name} clone (docs/parity.md, 'The reference clones')")
        for adapter in claimed:
            if adapter.name not in wanted:
                continue
            if adapter.name in clones:
                raise SetupError(f"{source} {path}: a second {adapter.name} clone (the first: "
                                 f"{clones[adapter.name].path}); fix: pass one clone per reference")
            clones[adapter.name] = _inspect(adapter, where, source)
    for name in wanted:
        if name in clones:
            continue
        adapter = _adapters.get(name)
        if os.environ.get(adapter.env_var):
            path = os.environ[adapter.env_var]
            clones[name] = _inspect(adapter, path, f"${adapter.env_var}")
            continue
        try:
            clones[name] = inspect_clone(adapter, adapter.default_path)
        except CloneError as exc:
            if opts.target is None:
                not_given[name] = str(exc)
                continue
            raise SetupError(f"--target {opts.target} needs the {name} clone: pass {adapter.how_to_give()}; the "
                             f"default {adapter.default_path} does not exist. Where to get it: docs/parity.md, "
                             "'The reference clones'") from None
    if not clones:
        raise UsageError("no reference clone found: pass --ref PATH (repeatable: one per reference), or set "
                         + " / ".join(f"${_adapters.get(n).env_var}" for n in wanted) + "; tried: "
                         + "; ".join(not_given.values()))
    return clones, not_given


def _inspect(adapter, path, source: str):
    try:
        return inspect_clone(adapter, path)
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
