"""Which functions of the clone ran in the parity child (docs/references.md §5 "Coverage").

Runs ONLY in the child; the esverify package never imports it.

The interpreter that runs a reference (its own venv, often Python 3.12)
rarely has coverage.py, and a parity pass must still say what it covered.
So the function table comes from the interpreter itself:

- Python 3.12+: `sys.monitoring` PY_START events under a tool id of our
  own; each code object reports once and is then disabled, so a function
  costs one callback for the whole run. It coexists with coverage.py. A
  row's record (row_start) enables the events again for every function
  (`restart_events`), so each reports once more in that row.
- Python 3.11: profile hooks, never a trace function: during a command
  the per-row recorder (row_start: cProfile's C profiler in the calling
  thread, a Python hook in the threads it starts), between commands the
  same recorder, so code run at import or between rows counts too. A
  global trace function (coverage.py's CTracer, or a Python one) puts
  every frame of the child under tracing; it cost 2-5 s of the children's
  CPU in a default parity run of the stand-ins.

Line counts (`lines`) come from coverage.py, and only when the run asks
for them (`configure(lines=True)`: `parity --line-coverage`), for the
same reason. The record is cumulative over the child's life (and over a
restarted child: `save` merges what the predecessor saved in the same
run folder).
"""
from __future__ import annotations

import ast
import functools
import json
import os
import platform
import sys
import time
from pathlib import Path

_STATE = {"clone": None, "prefix": None, "cov": None, "how": "", "lines": {}, "ran": {}, "merged": False,
          "error": "", "want_lines": False, "between_rows": False}
_TOOL_IDS = (3, 4, 2)   # unnamed ids first: the debugger (0), coverage (1) and optimizer (5) ids stay free


def _qualname(code) -> str:
    # co_qualname spells nested functions "f.<locals>.g"; functions_of spells them "f.g"
    return getattr(code, "co_qualname", code.co_name).replace(".<locals>.", ".")


def _record(code):
    if code.co_filename.startswith(_STATE["prefix"]):
        _STATE["ran"].setdefault(code.co_filename, set()).add(_qualname(code))


def _start_monitoring() -> bool:
    mon = getattr(sys, "monitoring", None)
    if mon is None:
        return False
    for tool in _TOOL_IDS:
        try:
            mon.use_tool_id(tool, "esverify-parity")
        except ValueError:   # in use by another tool
            continue

        def on_start(code, offset, _disable=mon.DISABLE):
            _record(code)
            if _ROW["monitored"] and code.co_filename.startswith(_ROW["prefix"]):   # a row records (row_start)
                _ROW["ran"].setdefault(code.co_filename, set()).add(_qualname(code))
            return _disable
        mon.register_callback(tool, mon.events.PY_START, on_start)
        mon.register_callback(tool, mon.events.PY_RESUME, on_start)   # a generator resumed in a row ran in it
        mon.set_events(tool, mon.events.PY_START | mon.events.PY_RESUME)
        _ROW["tool"] = tool
        return True
    return False


def configure(lines: bool = False):
    """Before `start`: whether to count the clone's executed lines with coverage.py (child_server.serve
    sets it from the driver's --line-coverage)."""
    _STATE["want_lines"] = bool(lines)


def start(clone: Path):
    """Record the clone's functions from now on (before any reference file is imported, so module-level
    code counts too), and its lines with coverage.py when `configure` asked for them and it is
    importable."""
    if _STATE["between_rows"] and _ROW["prefix"] is not None:
        _recorder_off()   # started again (another clone): what ran under the last one is kept first
    clone = Path(clone).resolve()
    _STATE.update(clone=clone, prefix=str(clone) + os.sep)
    _ROW["prefix"] = _STATE["prefix"]   # _recorder_on's hooks record files under it
    if _STATE["want_lines"]:
        try:
            import coverage
        except ImportError:
            coverage = None
        if coverage is not None:
            cov = coverage.Coverage(data_file=None, source=[str(clone)], branch=False, config_file=False)
            cov.start()
            _STATE["cov"] = cov
    if _start_monitoring():
        how = "sys.monitoring"
    else:
        _STATE["between_rows"] = True
        how = "profile hooks (cProfile's recorder)" if _recorder_on() else "a profile hook"
    if _STATE["want_lines"]:
        how += "; lines: coverage.py" if _STATE["cov"] is not None else \
            f"; no line counts: coverage.py is not installed for the child Python {platform.python_version()}"
    _STATE["how"] = how


def functions_of(path: Path) -> list[tuple[str, int, int, list]]:
    """(qualified name, first body line, last line, nested ranges) of every function in a Python file
    ([] for a file that cannot be read or parsed)."""
    try:
        source = Path(path).read_text()
    except (OSError, ValueError):
        return []
    return list(_functions_in(source, str(path)))


@functools.lru_cache(maxsize=512)
def _functions_in(source: str, filename: str) -> tuple:
    """functions_of for one file's text: cached by the text itself, because every save (one per loop
    command) tabulates every loaded file of the clone and parsing them again was a tenth of a parity
    run's CPU; a mutant clone's edited file is other text, so it is parsed anew."""
    try:
        tree = ast.parse(source, filename=filename)
    except (SyntaxError, ValueError):
        return ()
    found = []

    def walk(node, prefix):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                name = f"{prefix}{child.name}"
                nested = [(n.lineno, n.end_lineno) for n in ast.walk(child)
                          if n is not child and isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))]
                found.append((name, child.body[0].lineno, child.end_lineno, nested))
                walk(child, f"{name}.")
            elif isinstance(child, ast.ClassDef):
                walk(child, f"{prefix}{child.name}.")
            else:
                walk(child, prefix)
    walk(tree, "")
    return tuple(found)


@functools.lru_cache(maxsize=4096)
def _relative(path: str, clone: Path) -> str | None:
    """The clone-relative posix path of a file (None outside the clone): cached, as every save asks it
    for every file again and resolving symbolic links walks the folders each time."""
    try:
        return Path(path).resolve().relative_to(clone).as_posix()
    except ValueError:
        return None


def _loaded_files() -> set:
    """The clone's Python files imported so far (a file that was never imported ran nothing)."""
    files = set()
    for module in list(sys.modules.values()):
        origin = getattr(module, "__file__", None) or ""
        if origin.startswith(_STATE["prefix"]) and origin.endswith(".py"):
            files.add(origin)
    return files


def table() -> dict:
    """{"files": {relpath: {"functions": {qualname: ran}, "lines": n or None, "function_lines": {qualname: n}}},
    "how": str, "error": str}: `lines` (the file's executed lines) and `function_lines` (each function's own,
    nested functions apart) only where coverage.py counted lines, else None and {}."""
    clone = _STATE["clone"]
    if clone is None:
        return {"files": {}, "how": "", "error": "coverage was not started"}
    _harvest()
    cov = _STATE["cov"]
    if cov is not None:
        data = cov.get_data()
        for path in data.measured_files():
            _STATE["lines"].setdefault(path, set()).update(data.lines(path) or [])
    files = {}
    loaded = _loaded_files()
    # coverage.py also lists the source folder's files that never executed (0 lines): a file this child
    # neither imported nor ran is another target's (the es-at-scale clone holds the paper's scripts too)
    paths = loaded | set(_STATE["ran"]) | {k for k, v in _STATE["lines"].items() if v}
    for path in sorted(paths):
        p = Path(path)
        rel = _relative(path, clone)
        if rel is None:
            continue
        ran, lines = _STATE["ran"].get(path, set()), _STATE["lines"].get(path)
        functions, function_lines = {}, {}
        for name, first, last, nested in functions_of(p):
            own = sum(1 for ln in lines or () if first <= ln <= last and not any(a <= ln <= b for a, b in nested))
            functions[name] = name in ran or own > 0
            if lines is not None:
                function_lines[name] = own
        files[rel] = {"functions": functions, "lines": len(lines) if lines is not None else None,
                      "function_lines": function_lines}
    return {"files": files, "how": _STATE["how"], "error": _STATE["error"]}


def store_path(command: dict, target: str) -> Path:
    """Where the cumulative record goes: the run's work folder, the one holding `cases/` above a command's
    `out` (work/cases/<case>, or a folder inside it: a resume row's two runs write to <case>/first and
    <case>/resumed), else the working folder; the parent reads it there (loop_report.read_coverage).
    Counting two levels up put a resume row's record in work/cases/, where no one read it, and the report
    then said that load_checkpoint did not run beside a row that had resumed through it."""
    out = command.get("out")
    if not out:
        return Path.cwd() / f"coverage-{target}.json"
    out = Path(out).resolve()
    folder = next((p.parent for p in out.parents if p.name == "cases"), out.parents[1])
    return folder / f"coverage-{target}.json"


#: seconds between two saves of the record: a save tabulates every loaded file of the clone (a tenth of a
#: loop row's child time when every command saved); the last one is made when the driver leaves its
#: command loop (`flush`)
SAVE_INTERVAL = 1.0
_SAVES = {"last": None, "pending": None}


def save(command: dict, target: str, extra: dict | None = None, force: bool = False):
    """Write the cumulative record (merged once with what a predecessor child saved), atomically, with
    `extra` top-level fields (the loops' interface findings): at once when `force` or when the last save
    is SAVE_INTERVAL seconds old, else at the next save or at `flush()` (when the driver leaves its
    command loop, however it leaves it). A child killed mid-command (a timeout) leaves out that command, as
    before, and also the commands it finished in the SAVE_INTERVAL seconds before it began."""
    if _STATE["clone"] is None:
        return
    now = time.monotonic()
    last = _SAVES["last"]
    if not force and last is not None and now - last < SAVE_INTERVAL:
        _SAVES["pending"] = (command, target, extra)
        return
    _SAVES["last"], _SAVES["pending"] = now, None
    store = store_path(command, target)
    if not _STATE["merged"]:   # a restarted child keeps what the previous one measured
        _STATE["merged"] = True
        try:
            saved = json.loads(store.read_text())
            for path, lines in saved.get("lines", {}).items():
                _STATE["lines"].setdefault(path, set()).update(lines)
            for path, names in saved.get("ran", {}).items():
                _STATE["ran"].setdefault(path, set()).update(names)
        except (OSError, ValueError, AttributeError):
            pass
    payload = {"lines": {k: sorted(v) for k, v in _STATE["lines"].items()},
               "ran": {k: sorted(v) for k, v in _STATE["ran"].items()}, **table(), **(extra or {})}
    tmp = store.with_name(store.name + ".tmp")
    tmp.write_text(json.dumps(payload))
    os.replace(tmp, store)


def flush():
    """Make the save that SAVE_INTERVAL held back (child_server.serve calls it when it leaves its command
    loop; the parent reads the record after its children exited)."""
    pending = _SAVES["pending"]
    if pending is not None:
        save(*pending, force=True)


#: tool: the sys.monitoring tool id of start_monitoring (Python 3.12+), None elsewhere; monitored: a row records
_ROW = {"ran": {}, "prefix": None, "last": None, "seen": set(), "profiler": None, "tool": None, "monitored": False}


def _on_profile(frame, event, arg):
    # runs for every Python and C call of the command: a code object already seen this row returns at
    # once (the hook was a tenth of a loop row's child time when every call tested the file name)
    if event == "call":
        code = frame.f_code
        seen = _ROW["seen"]
        if code in seen:
            return
        seen.add(code)
        if code.co_filename.startswith(_ROW["prefix"]):
            _ROW["ran"].setdefault(code.co_filename, set()).add(_qualname(code))


def _profiler():
    """cProfile's C profiler without builtins and subcalls, or None where it cannot be made or is not
    per-thread: the calling thread's recorder for a row. A Python hook (`_on_profile`) was 5-6% of a
    loop child's time, every call and C call of the command paying a Python callback; this one records
    in C and is read at the row's end. Python 3.12 and newer: None. There cProfile is a sys.monitoring
    tool that sees every thread, hides from sys.getprofile (so `unprofiled` could not pause it) and
    allows one profiler at a time (a reference's own would fail)."""
    if sys.version_info >= (3, 12):
        return None
    try:
        import cProfile
        return cProfile.Profile(subcalls=False, builtins=False)
    except Exception:  # noqa: BLE001 - any failure: the Python hook records instead
        return None


def _recorder_on() -> bool:
    """Record the clone's functions into _ROW["ran"] from now on: in the calling thread with cProfile's
    recorder (`_profiler`; the Python hook `_on_profile` where there is none), in the threads started from
    now on with the Python hook. Both are profile hooks: sys.setprofile is apart from sys.settrace, which
    coverage.py may hold; sys.monitoring's per-code DISABLE does not affect it. True: cProfile's."""
    import threading
    if _ROW["tool"] is not None:
        # Python 3.12+: the row reuses sys.monitoring's callback (start_monitoring), its events enabled again
        # for every function, so each reports once in the row. A profile hook there costs every call and C
        # call a Python callback through sys.monitoring: 4 s of es-awd's child CPU in a default run
        _ROW["monitored"] = True
        sys.monitoring.restart_events()
        return False
    profiler = _profiler()
    if profiler is not None:
        try:
            profiler.enable()
        except Exception:  # noqa: BLE001 - it would not start: the Python hook records instead
            profiler = None
    _ROW["profiler"] = profiler
    if profiler is None:
        sys.setprofile(_on_profile)
    threading.setprofile(_on_profile)
    return profiler is not None


def _recorder_off() -> dict:
    """Stop `_recorder_on`'s recording; {file: {qualified names}} it recorded, also added to the
    cumulative table."""
    import threading
    _ROW["monitored"] = False
    profiler, _ROW["profiler"] = _ROW.get("profiler"), None
    if profiler is not None:
        profiler.disable()
    sys.setprofile(None)
    threading.setprofile(None)
    ran, _ROW["ran"], _ROW["seen"] = _ROW["ran"], {}, set()
    if profiler is not None:
        for entry in profiler.getstats():
            code = entry.code
            if not isinstance(code, str) and code.co_filename.startswith(_ROW["prefix"]):
                ran.setdefault(code.co_filename, set()).add(_qualname(code))
    for path, names in ran.items():
        _STATE["ran"].setdefault(path, set()).update(names)
    return ran


def _harvest():
    """The recording between rows (Python 3.11), added to the cumulative table, and recording on."""
    if _STATE["between_rows"] and _ROW["prefix"] is not None:
        _recorder_off()
        _recorder_on()


def row_start():
    """Record which of the clone's functions the next command runs (`_recorder_on`); what ran since the
    last row (Python 3.11: recorded between rows too) goes to the cumulative table first."""
    _ROW["prefix"] = _STATE["prefix"]
    if _ROW["prefix"] is None:
        return
    _recorder_off()   # the row records from here on only (a thread's hook that outlived a row included)
    _ROW["last"] = None
    _recorder_on()


def row_end() -> dict | None:
    """{clone-relative file: [qualified names]} the command ran since row_start (None: not recorded)."""
    if _ROW["prefix"] is None:
        return None
    ran = _recorder_off()
    if _STATE["between_rows"]:
        _recorder_on()
    clone = _STATE["clone"]
    out = {}
    for path, names in ran.items():
        rel = _relative(path, clone)
        if rel is None:
            continue
        out[rel] = sorted(names)
    _ROW["last"] = out
    return out


def unprofiled(fn):
    """`fn` with the per-row profile hook (row_start) off while it runs, in the calling thread: for the
    child's own machinery that a row calls into (the noise hook, the loops' reward, the results files).
    Its calls were most of a loop row's profile events (a third of the child's time in the loop rows)
    and none of them is the clone's code; a clone object such code calls back (a tensor subclass of the
    clone handed to torch.randn as `out`) would not be recorded."""
    @functools.wraps(fn)
    def run(*args, **kwargs):
        hook = sys.getprofile()
        if hook is None:
            return fn(*args, **kwargs)
        profiler = _ROW.get("profiler")
        if profiler is not None and hook is profiler:   # cProfile's: paused, not replaced (its record stays)
            profiler.disable()
            try:
                return fn(*args, **kwargs)
            finally:
                profiler.enable()
        sys.setprofile(None)
        try:
            return fn(*args, **kwargs)
        finally:
            sys.setprofile(hook)
    return run


def last_row() -> dict | None:
    """What the last command ran (row_end's value), for its reply; forgotten once asked."""
    last, _ROW["last"] = _ROW["last"], None
    return last


def note_error(message: str):
    _STATE["error"] = message
