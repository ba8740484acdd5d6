"""The parity runner: clones -> children -> cases -> bitwise rows -> report.

For each target whose clone is usable, ONE long-lived child runs the
target's driver (esverify/references/<name>/child/driver.py, by path) under `--python`; the
runner checks up front that the child has torch and numpy and which
devices it sees, then runs each case on our side (esverify.es, through
`ours`) and on the reference side (the child, same noise through the
hook, same backend), and compares the results bitwise (docs/numerics.md §7).

Statuses (STATUSES): pass, fail, error (the reference, the child or our
side could not run the case; timeouts and child deaths included: the child
is restarted and the run goes on), skipped (not checked here, with the
reason and how to check it: a device the child does not see, a reference
file that needs a newer child Python, a target whose clone was not given),
unverifiable (an iid row whose own draws were all attributed to one slot:
eager consumption, docs/references.md §3), artifact (an iid row where the
reference reused one slot's noise for another, as a reference's `caching=True`
does, and ours with the same reuse agrees bit for bit), unsupported (a case
the `--impl` wrapper does not claim) and not-run (a row an interrupted run
did not reach). Each row's status and named diagnoses (advanced, eager,
skip, reuse, extra) come from its own comparison and draw accounting only
(compare.diagnose; docs/parity.md "Diagnoses").

Order of a run: the report destinations are checked and the report folder
claimed, then every setup fault is looked for (clones, the child Python,
the case selection, each child's start, the devices) and reported as ONE
line (SetupError/UsageError, exit 2) before any case runs (a child that
fails to start also leaves a report of error rows); then the cases, the two
targets side by side; then the report, which opens with the verdict.

Exit code: 0 when at least one row passed and every row is pass, skipped
or artifact; 1 on any fail, error or unverifiable row, when nothing passed,
or with `require_all` when a row was skipped; 2 on a usage or setup error;
128 + the signal number (130 SIGINT, 143 SIGTERM, 129 SIGHUP) when the run
was interrupted: the children are killed and the partial report is written
with the verdict `interrupted` (esverify.interrupt).
"""
from __future__ import annotations

import contextlib
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING

from ..interrupt import Interrupted, catching, deferred
from ..outputs import OutputError, check_file, claim_report_folder, missing_folders, remove_empty
from ..report import report_patterns, utc_now
from . import adapters as _adapters
from . import repeat as _repeat
from .clones import inspect_clone
from .options import ChildStartError, Options, SetupError, UsageError, check_numerics, validate
from .rows import make_row
from .session import Session, startup_timeout
from .setup import NotAskedFor, clones_line, probe_python, resolve_clones, select_cases, wanted_adapters

if TYPE_CHECKING:
    from .run_report import RunResult

# What our side computes and reports with (torch, numba's kernels, pandas: about 2 s of CPU) is imported
# by _our_side, after the warm start server was launched, so the two imports overlap: this
# module and what it imports above stay free of torch, numba and pandas (tests/test_cli_imports.py).

#: the files of one parity report in its folder (an earlier one is refused unless --overwrite)
REPORT_PATTERNS = report_patterns("parity") + ("child-*.log", "tensors")


def not_given_detail(adapter) -> str:
    """The detail of the rows of a reference whose clone was not given."""
    return (f"not checked here: no {adapter.name} clone was given; to check it: pass "
            f"{' '.join(adapter.rerun_args('PATH'))} (docs/parity.md, 'The reference clones')")


class Runner:
    """Runs one parity matrix: `Runner(options).run()`; UsageError (exit 2, no report) on bad options."""

    def __init__(self, opts: Options):
        self.opts = validate(opts)
        self.alpha = opts.alpha
        self.rows: list[dict] = []
        self.sets: dict = {}
        self.kept: list = []             #: (case id, ours .npz, theirs .npz) for --keep-tensors
        self.notes: set = set()          #: run-level warnings (metadata)
        self.timing: dict = {}           #: reference -> {"ours_s": ..., "reference_s": ...}
        self.row_seconds: dict = {}      #: case id -> wall seconds of its row (JUnit `time`)
        self.ulp_profiles: dict = {}     #: case id -> compare.Comparison.profile of a fail/artifact row
        self.findings: dict = {}         #: (reference, finding key) -> the report's finding entry
        self.impl_side = None            #: esverify.oracle.impl_side.ImplSide under `parity --impl`
        self.sessions: dict = {}         #: reference name -> Session, whose child is started before any case
        self.warm = None                 #: the run's esverify.oracle.warm_start.WarmStart, while it runs
        self._own_warm = False           #: whether this run started self.warm (else keep_warm holds it)
        self.started_utc = utc_now()
        self._lock = threading.Lock()    #: the references run in parallel threads and share sets and state
        self._stop = threading.Event()   #: set when the run is interrupted: the reference threads stop
        self._sweeper = None             #: esverify.oracle.sweeper.Sweeper of the private folder, once a case is judged

    # -- what the sessions share
    def set_path(self, dtype: str, big: bool, variant: str, shapes=None, ties=()) -> Path:
        """The .npz of a parameter set (esverify.oracle.paramsets), written once per run."""
        from . import paramsets
        key = (dtype, big, variant, shapes, tuple(ties or ()))
        with self._lock:
            if key not in self.sets:
                names, tensors = paramsets.build(dtype, big, variant, shapes)
                label = f"{dtype}-{'big' if big else 'small'}-{variant}" + (f"-{len(self.sets)}" if shapes else "")
                path = paramsets.write(self.work / "sets" / f"{label}.npz", names, tensors, ties)
                self.sets[key] = (path, names, tensors)
            return self.sets[key][0]

    def fresh(self, dtype: str, big: bool, variant: str, device: str, shapes=None, ties=()):
        """(names, copies of the set's tensors on `device`)."""
        self.set_path(dtype, big, variant, shapes, ties)
        with self._lock:
            _, names, tensors = self.sets[(dtype, big, variant, shapes, tuple(ties or ()))]
        return names, [t.clone().to(device) for t in tensors]

    def clock(self, reference: str) -> dict:
        with self._lock:
            return self.timing.setdefault(reference, {"ours_s": 0.0, "reference_s": 0.0})

    def record_finding(self, adapter, key: str, case, observed: str):
        """Note that a row of `case` showed the documented quirk `key` of `adapter` (its `findings`)."""
        with self._lock:
            entry = self.findings.setdefault((adapter.name, key), {
                "target": adapter.name, "finding": key, "description": adapter.finding(key), "observed": [],
                "rows": 0})
            entry["rows"] += 1
            if observed not in entry["observed"]:
                entry["observed"].append(observed)

    def findings_list(self) -> list:
        return [dict(f, observed=list(f["observed"])) for f in self.findings.values()]

    # -- a run
    def run(self) -> RunResult:
        with contextlib.ExitStack() as self._restore:   # what _our_side changed, given back at the end
            return self._run()

    def _our_side(self):
        """Import what our side computes and reports with, then run it on one torch thread and one noise
        thread until `run` returns: the profiles and the noise are thread-count independent
        (docs/numerics.md §6), the references' threads run beside ours, and idle-spinning or handed-off
        worker threads would compete with the children for the same cores. Called once the warm start
        server was launched: its imports and these run side by side."""
        with deferred():   # a Ctrl-C here would leave torch half-imported, and the report needs it
            import torch

            from ..rng import backends
            from . import console, loop_report, paramsets, row_runner, run_report  # noqa: F401 - imported here
            from .noise_memo import keeping
        check_numerics()   # what importing them set (UsageError: exit 2, no report, the server closed)
        self._restore.enter_context(keeping())   # our side's noise, kept for the run's rows only
        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        self._restore.callback(torch.set_num_threads, threads)
        rng_threads = backends.set_numba_threads(1)
        if rng_threads is not None:
            self._restore.callback(backends.set_numba_threads, rng_threads)

    def _run(self) -> RunResult:
        opts = self.opts
        started = time.monotonic()
        self.started_utc = utc_now()
        # where the report goes, before any work; a run refused at setup
        # removes every folder it made for its reports again
        base = Path(opts.reports).expanduser() if opts.reports else Path("reports")
        made = missing_folders(opts.out or base, *(Path(p).expanduser().parent for p in (opts.junit, opts.summary)
                                                   if p))
        try:
            if opts.junit:
                check_file(opts.junit, "--junit")
            if opts.summary:
                check_file(opts.summary, "--summary")
            folder = claim_report_folder(opts.out, "parity", REPORT_PATTERNS, overwrite=opts.overwrite, base=base)
        except OutputError as exc:
            remove_empty(made)
            raise UsageError(str(exc)) from None
        try:
            with catching():
                try:
                    return self._run_in(folder.path, started)
                except UsageError:
                    folder.release()
                    remove_empty([folder.path] if opts.out is None else [])   # the fresh folder of this run
                    remove_empty(made)
                    raise
        finally:
            folder.release()

    def _start_sessions(self, clones, selected):
        """One session per reference with cases, every child started before any case runs (side by side;
        a failure is reported for the first reference in case order, as one at a time would)."""
        from .noise_memo import served_folder
        opts = self.opts
        names = [name for name in dict.fromkeys(c.target for c in selected) if name in clones]
        for name in names:
            self.sessions[name] = Session(self, _adapters.get(name), clones[name])
            self.sessions[name].child.served = served_folder()   # the noise our side drew, read by the child
        sessions = [self.sessions[name] for name in names]
        started = _all_of([s.start_child() for s in sessions],   # each in its session's own thread
                          on_interrupt=lambda: [s.child.kill() for s in sessions])
        if any(s.child.served and s.hello is not None and s.draws_slower() for s in sessions):
            from .noise_memo import materializing   # such a child reads every range our side draws
            self._restore.enter_context(materializing())
        else:   # nothing is written (noise_memo._serve): the children draw, without looking for ranges
            for session in sessions:
                session.child.served = None
        for name, ok in zip(names, started):
            session = self.sessions[name]
            if not ok:
                from . import interpreters as _interpreters
                python = opts.python_for(name)
                raise ChildStartError(f"the {name} child did not start under {python}: {session.start_error}; "
                                      f"fix: the child's own last log lines are quoted here; check that "
                                      f"{python} runs `import "
                                      f"{', '.join(_interpreters.child_needs(_adapters.get(name)))}`")
            if opts.devices_explicit and "cuda" in opts.devices and not session.environment.get("cuda"):
                raise SetupError("--devices names cuda but the child sees no CUDA device; fix: run on a machine "
                                 "with a CUDA GPU and a CUDA build of torch, or leave cuda out of --devices")

    def _start_warm(self, selected, clones):
        """The warm start servers the children are forked from (esverify.oracle.warm_start.WarmStarts), one
        per child interpreter (the path each reference's child is launched with, Options.python_for): the
        one esverify.oracle.warm_kept.keep_warm holds when this run may use it for that interpreter (one
        reference or more), else one of the run's own when more than one child is to start under it,
        launched here and waited for by `_await_warm`. A server that does not start costs nothing but its
        attempt: its children then start fresh (metadata warnings say so)."""
        from . import interpreters as _interpreters
        from .child_process import warm_start_server
        from .warm_kept import kept, usable_for
        from .warm_start import WarmStartError, WarmStarts
        opts = self.opts
        pythons: dict = {}   # interpreter path -> the references whose children it runs
        for name in dict.fromkeys(c.target for c in selected if c.target in clones):
            if not _interpreters.standalone(_adapters.get(name)):   # its child is never forked (it imports no torch)
                pythons.setdefault(opts.python_for(name), []).append(name)
        gone = kept()
        if gone is not None and gone.why_not() and opts.warm_start and gone.python in pythons:
            self.notes.add(f"warm start: {gone.why_not()} (the server keep_warm holds); this run's children "
                           "start as without it")
        if not opts.warm_start or not pythons:
            return
        self.warm, self._own_warm = WarmStarts(), True
        for n, (python, names) in enumerate(pythons.items()):
            held = usable_for(opts, python)
            if held is not None:   # keep_warm's (esverify.oracle.warm_kept): not ours to close
                self.warm.add(held, own=False)
                continue
            if len(names) < 2:     # one child: a server would import what the child imports, then fork it
                continue
            server = None
            try:
                server = warm_start_server(python, opts.child_env, self.work,
                                           self.work / ("warm-start.log" if not n else f"warm-start-{n}.log"),
                                           mappings=(opts.mapping,))
                self.warm.add(server, own=True)
                server.launch()    # closed by _close_warm, also when interrupted
            except (WarmStartError, OSError) as exc:
                self._without_warm(exc, server, python)

    def _await_warm(self):
        """The hello of each server _start_warm launched (their imports ran beside _our_side's)."""
        from .warm_start import WarmStartError
        for server in self.warm.own() if self.warm is not None else ():
            try:
                server.wait(startup_timeout(self.opts.timeout))
            except WarmStartError as exc:
                self._without_warm(exc, server, server.python)

    def _without_warm(self, exc, server, python):
        """A server of the run did not start (its launch or its hello failed): a note, and fresh children."""
        self.notes.add(f"warm start: {exc}; every child under {python} started a fresh interpreter")
        if server is not None:
            self.warm.drop(server)
            server.close()

    def _close_warm(self):
        warm, self.warm = self.warm, None
        for server in warm if warm is not None else ():
            if server.hello is not None and server.why_not():   # it died: the children after it started fresh
                self.notes.add(f"warm start: {server.why_not()}; the children started after it started fresh")
        if warm is not None:
            warm.close()   # the run's own servers; keep_warm's stays running

    def _close_sessions(self, kill: bool = False):
        """Close every child (politely, or at once with `kill`: an interrupted op is not waited for), side
        by side: a polite close waits for its child to save its coverage record and exit."""
        def close(session):
            try:
                if kill:
                    session.child.kill()   # the whole process group
            finally:
                session.close()
        sessions = list(self.sessions.values())
        if len(sessions) < 2:
            for session in sessions:
                close(session)
            return
        with ThreadPoolExecutor(max_workers=len(sessions)) as pool:
            _all_of([pool.submit(close, session) for session in sessions])

    def _run_in(self, out_dir: Path, started: float) -> RunResult:
        opts = self.opts
        run = {"interrupted": None, "start_error": None, "environments": {}, "selected": [], "clones": {},
               "not_given": {}, "probe": {}, "wanted": [], "fuzz": None}
        with tempfile.TemporaryDirectory(prefix="esverify-parity-") as work:
            self.work = Path(work)
            progress = None
            try:
                # every setup fault is one line (what, why, the fix) before any case runs
                wanted = run["wanted"] = wanted_adapters(opts)
                clones, not_given = run["clones"], run["not_given"] = resolve_clones(opts, wanted)
                # a reference --ref did not name runs no case: not even as skipped rows
                wanted = run["wanted"] = [n for n in wanted if not isinstance(not_given.get(n), NotAskedFor)]
                run["clones_line"] = clones_line(clones, not_given)
                # each reference's interpreter and what its child needs, before any row (interpreters.py)
                from . import interpreters as _interpreters
                probes, lacking = _interpreters.check(opts, [n for n in wanted if n in clones],
                                                      startup_timeout(opts.timeout))
                run["probe"] = probes.get(next((n for n in wanted if n in clones and not opts.pythons.get(n)), ""))\
                    or next(iter(probes.values()), None) or probe_python(opts.python, startup_timeout(opts.timeout),
                                                                         opts.python_explicit)
                if not probes:   # no reference with a clone: the default interpreter, checked as before
                    _check_child_packages(opts, run["probe"])
                self.interpreters = {n: {"python": p.get("python"), "executable": p.get("executable"),
                                         "given": opts.python_for(n)} for n, p in probes.items()}
                selected = run["selected"] = select_cases(opts, wanted, self.alpha)
                self.rows += [make_row(c, status="skipped", detail=not_given_detail(_adapters.get(c.target)))
                              for c in selected if c.target in not_given]
                self.rows += [make_row(c, status="skipped", detail=_interpreters.skipped_detail(lacking[c.target]))
                              for c in selected if c.target in lacking]
                for why in dict.fromkeys(lacking.values()):
                    self.notes.add(why)
                clones = {n: c for n, c in clones.items() if n not in lacking}   # their children never start
                self._start_warm(selected, clones)
                self._our_side()
                self._await_warm()
                try:
                    self._start_sessions(clones, selected)
                except ChildStartError as exc:   # a child that cannot start: one line, exit 2, and a report
                    run["start_error"] = exc
                    self.rows += [make_row(c, status="error", detail=f"setup: {exc}") for c in selected
                                  if c.target in clones]
                if run["start_error"] is None:
                    from .console import progress_bar
                    progress = progress_bar(len(selected), opts.quiet)
                    progress.update(len(self.rows))
                    self._run_sessions(selected, progress, run["environments"])
            except Interrupted as exc:
                run["interrupted"] = exc
            finally:
                if progress is not None:
                    progress.close()
                try:
                    self._close_sessions(kill=run["interrupted"] is not None or run["start_error"] is not None)
                finally:
                    self._close_warm()
            if run["interrupted"] is not None:
                done = {r["case"] for r in self.rows}
                reason = f"not run: the run was interrupted by {run['interrupted'].signal_name}"
                self.rows += [make_row(c, status="not-run", detail=reason) for c in run["selected"]
                              if c.case_id not in done]
            from .loop_report import read_coverage
            from .run_report import finish
            for name, session in self.sessions.items():
                run["environments"].setdefault(name, session.environment)
                drift = session.distance_line() if run.get("clones_line") else ""
                if drift:   # how far the clone is past its validated commit, on the first screen
                    run["clones_line"] += f"; {drift}"
                # the children saved their coverage record at exit (oracles/child_coverage.py)
                run["environments"][name]["coverage"] = read_coverage(self.work, session.adapter.name)
            if opts.fuzz and run["interrupted"] is None and run["start_error"] is None:
                from . import fuzz as _fuzz
                run["fuzz"] = lambda frame: _fuzz.shrink_failures(self, run["clones"], run["selected"], frame,
                                                                  time.monotonic() - started)
            run["wall"] = lambda: time.monotonic() - started
            try:
                return finish(self, out_dir, run)
            finally:
                self._close_sweeper()

    def sweep(self, case_id: str, folder: Path) -> None:
        """Remove `folder`, the judged case `case_id`'s files in the private folder, in the background
        (esverify.oracle.sweeper), unless --keep-tensors keeps tensors from it."""
        with self._lock:
            if any(kept[0] == case_id for kept in self.kept):
                return
            if self._sweeper is None:
                from .sweeper import Sweeper
                self._sweeper = Sweeper(self.work / "swept")
        self._sweeper.discard(folder)

    def _close_sweeper(self) -> None:
        sweeper, self._sweeper = self._sweeper, None
        if sweeper is not None:
            sweeper.close()

    def _run_sessions(self, selected, progress, environments):
        """The references side by side, one thread each (rows are put back in case order by finish)."""
        by_reference = {}
        for case in selected:
            if case.target in self.sessions:
                by_reference.setdefault(case.target, []).append(case)
        with ThreadPoolExecutor(max_workers=max(1, len(by_reference))) as pool:
            futures = {name: pool.submit(self._run_reference, self.sessions[name], cases, progress)
                       for name, cases in by_reference.items()}
            try:
                for name, future in futures.items():
                    environments[name] = future.result()
            except BaseException:   # Ctrl-C or a crash: stop the other references too, do not wait
                self._stop.set()
                for session in list(self.sessions.values()):
                    session.child.kill()
                raise

    def _run_reference(self, session, cases, progress) -> dict:
        """Run `cases` on the started `session` (in a thread of its own), then the repeat check."""
        from .row_runner import checked_case
        env = session.environment
        # the repeat check's cases, among those this child can run (no cuda rows without a GPU)
        runnable = [k for k, c in enumerate(cases) if c.device != "cuda" or env.get("cuda")]
        again = {runnable[k] for k in _repeat.choose([cases[k] for k in runnable],
                                                     exclude_ops=session.adapter.loop_ops)} \
            if not self.opts.fuzz else set()
        history = []
        for position, case in enumerate(cases, 1):
            if self._stop.is_set():
                break
            session.last_theirs = None
            mark = time.perf_counter()
            row = checked_case(session, case)
            session.discard_case(case)
            self.row_seconds[case.case_id] = time.perf_counter() - mark
            if self._stop.is_set() and row["status"] == "error":
                break   # the interrupt killed its child mid-case: the row is not-run, not a child death
            self.rows.append(row)
            if position - 1 in again:
                history.append((position, case, row, session.last_theirs, None))
            progress.update(1)
        env["repeat"] = _repeat.run_again(session, history[::-1], len(cases), self._stop)
        env["restarts"] = max(0, session.child.starts - 1)
        env["start"] = session.child.last_start   # "warm": forked from the warm start server; "fresh"
        return env

    @contextlib.contextmanager
    def session(self, target: str, clone_path):
        """One child for the reference `target` on the clone at `clone_path`, to run cases one at a time
        (fuzz shrinking, mutant catalogs): yields run(case, clone=None) -> row dict (rows.COLUMNS).
        `clone`, a path to another clone of the same reference, switches the child to it for that case
        (its modules are loaded then; a load failure is that row's error). `run.repeat()` runs the cases
        run since the last repeat() or `run.forget()` again, in the reverse order (the repeat check: rows
        whose reference result changed are failed with `state`, in place) and returns its record;
        `run.session` is the Session. Our side of a case is computed once and a copy handed to every later
        row of the same case, whichever clone it runs on (`run.session.ours_cache`, an
        esverify.oracle.ours_cache.OursCache; set it to None and every row computes its own). The child is
        closed at the end."""
        import torch

        from .noise_memo import keeping, served_folder
        from .ours_cache import OursCache
        from .row_runner import checked_case
        check_numerics()
        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        adapter = _adapters.get(target)
        clone = inspect_clone(adapter, clone_path)
        with contextlib.ExitStack() as stack:
            stack.enter_context(keeping())   # our side's noise, kept for the session's cases only
            if not getattr(self, "work", None) or not Path(self.work).is_dir():   # else: inside a run (fuzz)
                self.work = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="esverify-parity-")))
                stack.callback(self._close_sweeper)   # before the folder itself is removed
            if self.warm is None:
                from .warm_kept import usable_for
                from .warm_start import WarmStarts
                held = usable_for(self.opts, self.opts.python_for(target))
                if held is not None:    # keep_warm's (esverify.oracle.warm_kept): left running at the end
                    self.warm, self._own_warm = WarmStarts(), False
                    self.warm.add(held, own=False)
                    stack.callback(setattr, self, "warm", None)
            session = Session(self, adapter, clone)
            session.child.served = served_folder()   # the noise our side drew, read by the child
            session.ours_cache = OursCache()   # every variant runs the same cases: our side once per case
            history, count = [], [0]

            def run(case, clone=None):
                session.variant_clone = Path(clone).resolve() if clone else None
                session.last_theirs = None
                count[0] += 1
                row = checked_case(session, case)
                session.discard_case(case)
                history.append((count[0], case, row, session.last_theirs, session.variant_clone))
                return row

            def repeat():
                done, todo = count[0], history[::-1]
                history.clear()
                record = _repeat.run_again(session, todo, done)
                count[0] += len(record)
                return record
            run.repeat, run.forget, run.session = repeat, history.clear, session
            try:
                if not session.ensure_child():
                    raise UsageError(f"the {target} child did not start: {session.start_error}")
                yield run
            finally:
                session.close()
                torch.set_num_threads(threads)


def _all_of(futures: list, on_interrupt=None) -> list:
    """The results of `futures` in order, once every one is done (the first exception raised then). An
    exception in the calling thread while it waits (Interrupted: Ctrl-C): on_interrupt() (kill the
    children, so that a start waiting for its hello ends), every future waited for, on_interrupt() once
    more (a child started meanwhile), and the exception goes on."""
    try:
        for future in futures:
            future.exception()   # waits, whether it raised or not
    except BaseException:
        if on_interrupt is not None:
            on_interrupt()
            for future in futures:
                future.exception()
            on_interrupt()
        raise
    return [future.result() for future in futures]


def _check_child_packages(opts, probe: dict):
    """SetupError when the child Python lacks torch or numpy, naming the pip line that fixes it."""
    missing = [p for p in ("torch", "numpy") if not probe[p]]
    if not missing:
        return
    pins = " ".join({"torch": "torch==2.13.0", "numpy": "numpy"}[p] for p in missing)
    fix = f"install {'them' if len(missing) > 1 else 'it'} there ({probe['executable']} -m pip install {pins})"
    if not opts.python_explicit:   # with --python given, naming it again would not help
        fix += " or pass --python with an interpreter that has them"
    raise SetupError(f"the child Python {probe['executable']} ({probe['python']}) lacks {' and '.join(missing)}, "
                     "which the reference needs; fix: " + fix)
