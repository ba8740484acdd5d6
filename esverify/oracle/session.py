"""One reference child and everything a row needs from it (CONTRIBUTING.md, "Adding a reference").

Design record: a `Session` owns ONE child (the adapter's driver
run on one clone) and the request/timeout/death path that single-op rows,
loop rows and adapter-owned rows (`Adapter.run_row`) all go through; it
holds the run's shared parameter sets through its runner. It is the whole
API an adapter may use; every name below is public and documented, and the
core's own rows use nothing else. A reference's own rows reach the child
through session.tools.exchange (esverify.oracle.row_tools) and build no
row (`row`, `reference_error_row` and `keep` serve the core:
esverify.oracle.verdict).
The backend policy (which noise backend the child is told to use,
`noise_backend`) is one function for every row.
"""
from __future__ import annotations

import re
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from ..paths import oracles_dir
from .child_process import Child, ChildError, ChildTimeout
from .interpreters import standalone
from .noise_policy import BackendRefused, noise_backend
from .row_tools import RowTools
from .rows import make_row


def startup_timeout(timeout: float) -> float:
    """Seconds a child (or the interpreter probe) gets to start and send its hello: max(--timeout, 60),
    since importing torch and compiling the noise kernels can take longer than one case."""
    return max(float(timeout), 60.0)


class Session:
    """One adapter's child on one clone, and the row helpers of that adapter's cases.

    Public API (for adapters and the core alike):
      opts: the run's runner.Options; work: Path of the run's scratch folder; adapter; clone (CloneInfo);
      environment: dict, the child's hello environment ({} before it started);
      start_error: str, why the child last failed to start ("" when it runs);
      ensure_child() -> bool; close();
      fresh(dtype, big, variant, device, shapes=None, ties=()) -> (names, tensors on device);
      set_path(dtype, big, variant, shapes=None, ties=()) -> Path of that set's .npz (shared by the run);
      case_dir(case) -> Path, created: where the child writes the case's results; discard_case(case), once
      the case's row is judged (the runner's: the folder is removed in the background);
      exchange(case, command, compute=None) -> (reply, computed, error row or None);
      reference_error_row(case, err) -> row; row(case, **fields) -> row (columns rows.COLUMNS);
      record_finding(key, case, observed: str): a documented quirk (adapter.findings) this row showed;
      keep(case_id, ours_path, theirs_path): tensors kept for --keep-tensors;
      note(text): a run-level warning (metadata), once;
      hello: the child's whole hello (its `modules` load errors included); child: the child_process.Child;
      impl_side: the `--impl` wrapper or None; clock(case); record_profile(case_id, profile);
      tools: the RowTools (esverify.oracle.row_tools) a reference's run_row reaches the core's services through;
      ours_cache: Runner.session's esverify.oracle.ours_cache.OursCache (our side of a case computed once for
      every variant clone), None in a parity run; ours_once(case, compute, **reads): a reference's own
      row's our side through it.
    """

    def __init__(self, runner, adapter, clone):
        self.runner, self.adapter, self.clone = runner, adapter, clone
        opts = runner.opts
        # the driver is a file of the reference's own package (a built-in's child/driver.py), run beside oracles/
        self.child = Child(opts.python_for(adapter.name), Path(adapter.driver), adapter.clone_root(clone.path),
                           runner.work / f"child-{adapter.name}.log", env=opts.child_env, workdir=runner.work,
                           max_memory=opts.max_memory, max_output=opts.max_output, target=adapter.name,
                           shared=oracles_dir(),   # a standalone child imports no torch: no warm server forks it
                           warm=None if standalone(adapter) else getattr(runner, "warm", None),
                           driver_args=("--line-coverage",) if opts.line_coverage else ())
        self.hello = None
        self.start_error = ""
        self.pool = ThreadPoolExecutor(max_workers=1)   #: waits for the child's reply beside our side
        self.variant_clone = None    #: Runner.session: the clone the next case runs on
        self.ours_cache = None       #: Runner.session: our side of each case, once (esverify.oracle.ours_cache)
        self.last_theirs = None      #: (case id, the reference's result bits) of the case just run
        self.last_ran = None         #: {clone file: [functions]} the child ran for the last command, or None
        self._changes = {}           #: clone root -> blame.Changes (git is asked once per clone)
        self.placeholders = {}       #: the placeholder notes of this child, in order (placeholder_notes)
        self.ran_all = {}            #: {clone file: {function: None}} every row of this session ran
        self.tools = RowTools(self)  #: the core's row services a reference's run_row uses (row_tools)

    # -- the run's state, read through the runner
    @property
    def opts(self):
        return self.runner.opts

    @property
    def work(self) -> Path:
        return self.runner.work

    @property
    def clone_path(self) -> Path:
        """The clone the next case runs on: Runner.session's variant clone when one is set, else this
        session's clone (a folder, or a reference's one file)."""
        return Path(self.variant_clone) if self.variant_clone else self.clone.path

    @property
    def environment(self) -> dict:
        return dict((self.hello or {}).get("environment") or {})

    @property
    def impl_side(self):
        """The `--impl` wrapper that is our side (esverify.oracle.impl_side), or None: the clean-room trainer."""
        return self.runner.impl_side

    # -- the child
    def close(self):
        self.child.close()              # a start in flight in self.pool then ends at once: its child is gone
        self.pool.shutdown(wait=True)
        self.child.close()              # a child that start made meanwhile (close is idempotent)

    def ensure_child(self) -> bool:
        """Start the child if it is not running (at most 3 failed starts); False with start_error set.
        The start runs in the session's own thread (`start_child`), whichever thread asks."""
        return self.start_child().result()

    def start_child(self):
        """`ensure_child` in the session's own thread, as a future of its result: a child started fresh
        dies with the thread that started it (its supervisor's PR_SET_PDEATHSIG), and this thread lives
        as long as the session, where a reference's worker thread ends before the children are closed."""
        return self.pool.submit(self._ensure_child)

    def _ensure_child(self) -> bool:
        if self.child.alive():
            return True
        if self.start_error and self.child.starts >= 3:
            return False
        try:
            self.hello = self.child.start(startup_timeout(self.opts.timeout))
            self.start_error = ""
            self.note_placeholders(self.hello)
            return True
        except ChildError as exc:
            tail = exc.log_tail.strip().splitlines()[-3:] if exc.log_tail else []
            self.start_error = f"{exc}; child log: {' | '.join(tail)}" if tail else str(exc)
            return False

    def exchange(self, case, command: dict, compute=None):
        """Send `command` to the child and run `compute()` (our side; None when it already ran) while the
        child works: one request in flight per child. Returns (reply, computed, None), or (None, None,
        error row) when the child timed out, died or broke the protocol, or our side raised. The time
        of each side goes to the reference's clock (metadata seconds_per_side)."""
        opts = self.opts
        if self.variant_clone:   # the child switches to that clone for this command (oracles/child_server.py)
            command.setdefault("clone", str(self.adapter.clone_root(self.variant_clone)))
        clock = self.clock(case)
        computed = ours_error = None
        if compute is not None and self.child.served and self.draws_slower():
            compute, computed, ours_error = None, *_ours_first(compute, clock)   # served: the child reads our draws
        started = time.perf_counter()
        pending = self.pool.submit(self.child.request, command, opts.timeout)
        if compute is not None:
            mark = time.perf_counter()
            try:
                computed = compute()
            except Exception as exc:  # noqa: BLE001 - our side failing is a row, not a crash
                ours_error = exc
            clock["ours_s"] += time.perf_counter() - mark
        try:
            reply = pending.result()
        except ChildTimeout:
            return None, None, self.row(case, status="error", detail=f"timeout: {case.op} did not finish within "
                                                                     f"{opts.timeout:g} s; the child's process group "
                                                                     "was killed and the child restarted")
        except ChildError as exc:   # died (its real exit status), or broke the protocol
            tail = " | ".join(exc.log_tail.strip().splitlines()[-2:])
            return None, None, self.row(case, status="error", detail=f"{case.op}: {exc}; restarting it for the "
                                                                     "next case" + (f"; child log: {tail}" if tail
                                                                                    else ""))
        finally:
            clock["reference_s"] += time.perf_counter() - started
        self.last_ran = _ran_of(reply)
        for rel, names in (self.last_ran or {}).items():   # every row's, for the clone's distance line
            self.ran_all.setdefault(rel, {}).update(dict.fromkeys(names))
        self.note_placeholders(reply)
        if ours_error is not None:
            return None, None, self.row(case, status="error", detail=f"{case.op}: our side raised "
                                                                     f"{type(ours_error).__name__}: {ours_error}")
        return reply, computed, None

    def draws_slower(self) -> bool:
        """Whether the child lacks numba where our side has it: it would draw its contract noise with numpy
        (three times the CPU), so `exchange` runs our side first and the child reads the ranges our side drew
        (esverify.oracle.noise_memo, docs/parity.md "Served noise") instead of overlapping the two sides."""
        from ..rng import backends
        return "numba" not in (self.environment.get("noise_backends") or {}).get("cpu", ["numba"]) \
            and backends.numba_available()

    def note_placeholders(self, said) -> None:
        """A run-level note per placeholder the child served (oracles/placeholders.py): a name of a
        stand-in module the driver does not know, or a module the child's Python lacks, that a clone file
        asked for at its top; `said`: a hello or a reply (ignored unless a dict)."""
        for p in placeholder_notes(self.adapter.name, said):
            self.placeholders.setdefault(p, None)
            self.note(p)

    def reference_error_row(self, case, err: dict) -> dict:
        """The error row of a reply with status 'error': the reference's message, and the child's limit
        when it is what the reference ran into (--max-memory, --max-output)."""
        if err.get("kind") == "interface":   # esverify could not drive the clone: ours to say, not the reference's
            return self.row(case, status="error", diagnosis="interface", detail=f"{case.op}: {err['message']}")
        hint = ""
        if err.get("kind") == "MemoryError" and self.child.max_memory:
            hint = f" (the child's memory is limited to {self.child.max_memory} bytes by --max-memory)"
        elif "[Errno 27]" in err["message"] and self.child.file_limit:     # EFBIG: over RLIMIT_FSIZE
            hint = f" (each file the child writes is limited to {self.child.file_limit} bytes, see --max-output)"
        return self.row(case, status="error", detail=f"{case.op}: the reference side raised {err['message']}{hint}")

    def backend(self, case) -> tuple:
        """noise_backend for `case` in this child (our backend, the child's, a note); BackendRefused."""
        ours, theirs, note = noise_backend(case.device, self.environment, self.opts.mapping, case.noise)
        if note:
            self.note(note)
        return ours, theirs

    def changes(self):
        """blame.Changes of the clone the last case ran on (asked of git once per clone)."""
        from .blame import clone_changes
        root = Path(self.adapter.clone_root(self.clone_path)).resolve()
        if root not in self._changes:
            self._changes[root] = clone_changes(root, getattr(self.opts, "blame_base", None)
                                                or self.adapter.validated_commit, python=self.child.python)
        return self._changes[root]

    def distance_line(self) -> str:
        """blame.distance_line of this session's clone, over every function its rows ran, with the count of
        placeholders its child served; "" when there is nothing to say."""
        from .blame import clone_changes, distance_line
        root = Path(self.adapter.clone_root(self.clone.path)).resolve()
        # the distance is from the validated commit, whatever --blame-base the failing rows counted from
        changes = (None if getattr(self.opts, "blame_base", None) else self._changes.get(root)) or clone_changes(root, self.adapter.validated_commit,
                                                           python=self.child.python)
        line = distance_line(self.adapter.name, changes, {k: list(v) for k, v in self.ran_all.items()}
                             if self.ran_all else None)
        if self.placeholders:
            line = (line or self.adapter.name) + (f"; {len(self.placeholders)} placeholder"
                                                  f"{'s' if len(self.placeholders) != 1 else ''} (see the notes)")
        return line

    def blame(self, case) -> str:
        """The row's blame line (esverify.oracle.blame.explain): the clone's changes this case ran."""
        from .blame import explain
        return explain(self.changes(), self.last_ran, self.adapter.computes_for(case))

    # -- rows and the run's shared state
    def row(self, case, **fields) -> dict:
        return make_row(case, **fields)

    def fresh(self, dtype: str, big: bool, variant: str, device: str, shapes=None, ties=()):
        return self.runner.fresh(dtype, big, variant, device, shapes, ties)

    def set_path(self, dtype: str, big: bool, variant: str, shapes=None, ties=()) -> Path:
        return self.runner.set_path(dtype, big, variant, shapes, ties)

    def ours_once(self, case, compute, **reads):
        """compute(): our side of a reference's own row of `case`; in Runner.session, where every variant
        clone runs the same cases, a copy (tensors cloned, containers rebuilt) of what it returned for an
        earlier row of the same case, adapter, --seed, --mapping and `reads` (every other value compute
        reads that the case does not fix: the noise backend, values taken from the child's reply, ...;
        esverify.oracle.ours_cache).
        What compute raises is not kept: it raises again on the next row."""
        from . import ours_cache
        if self.ours_cache is None or self.impl_side is not None:
            return compute()
        key = ours_cache.key("reference", case, adapter=self.adapter.name, seed=self.opts.seed,
                             mapping=self.opts.mapping, **reads)
        kept = self.ours_cache.get(key)
        return kept if kept is not None else self.ours_cache.storing(key, compute)()

    def case_dir(self, case) -> Path:
        out = self._case_folder(case)
        out.mkdir(parents=True, exist_ok=True)
        return out

    def _case_folder(self, case) -> Path:
        return self.work / "cases" / re.sub(r"[^A-Za-z0-9_.-]+", "_", case.case_id)

    def discard_case(self, case) -> None:
        """The judged case's folder (case_dir) is removed in the background, unless it holds kept tensors."""
        self.runner.sweep(case.case_id, self._case_folder(case))

    def record_finding(self, key: str, case, observed: str):
        self.runner.record_finding(self.adapter, key, case, observed)

    def clock(self, case) -> dict:
        """The reference's clock {"ours_s", "reference_s"} (metadata seconds_per_side), added to in place."""
        return self.runner.clock(case.target)

    def record_profile(self, case_id: str, profile):
        """Keep the ulp profile of a fail/artifact row (compare.Comparison.profile) for the HTML plots."""
        self.runner.ulp_profiles[case_id] = profile

    def keep(self, case_id: str, ours_path, theirs_path):
        self.runner.kept.append((case_id, ours_path, theirs_path))

    def note(self, text: str):
        self.runner.notes.add(text)


def _ran_of(reply) -> dict | None:
    """The reply's `ran` ({clone file: [function names]}) when it has that shape, else None."""
    ran = reply.get("ran") if isinstance(reply, dict) else None
    if not isinstance(ran, dict) or not all(isinstance(k, str) and isinstance(v, list) for k, v in ran.items()):
        return None
    return {k: [str(n) for n in v] for k, v in ran.items()}


def _ours_first(compute, clock) -> tuple:
    """(computed, error) of our side run before the child's request (Session.exchange), timed on its clock."""
    mark = time.perf_counter()
    try:
        return compute(), None
    except Exception as exc:  # noqa: BLE001 - our side failing is a row, not a crash
        return None, exc
    finally:
        clock["ours_s"] += time.perf_counter() - mark


def placeholder_notes(target: str, said) -> list[str]:
    """One line per placeholder in `said["placeholders"]` (a child's hello or reply; each {"module",
    "name", "file", "why"}), naming the reference, what stands in for what, who asked and why; [] when
    there are none or the entry is malformed."""
    items = said.get("placeholders") if isinstance(said, dict) else None
    out = []
    for p in items if isinstance(items, list) else ():
        if not isinstance(p, dict) or not all(isinstance(p.get(k), str) for k in ("module", "name", "file", "why")):
            continue
        what = f"module {p['module']}" if p["name"] == "*" else f"{p['module']}.{p['name']}"
        out.append(f"{target}: placeholder for {what}, imported at the top of {p['file']} ({p['why']}): inert "
                   "until used; a row that uses it is an error naming it")
    return out
