"""Where the default parity matrix spends its time: a per-phase breakdown.

Runs `esverify parity` with its defaults (every reference, CPU, contract and native noise,
training-loop rows included; cuda rows are skipped without a GPU) against the stand-ins of
tests/standins/ (the five references: es-at-scale with the paper's scripts, es-awd, the skill
sample, EGGROLL; and HyperscaleES when hyperscale-es's interpreter finds jax, jaxlib and optax, else
one printed line says it is left out), or against the clones given with --ref, and prints, measured
in the same run:

- CPU time (user + sys of this process and of every child process it reaped: the children that run
  the references) and wall time, rows per CPU second and per wall second, and their shares of the
  goal (30 s of CPU, 25 s wall on 2 idle cores for the five references; docs/benchmarks.md, "Parity");
- the breakdown: the parent's own imports, the warm start server's launch, our side's imports (torch,
  numba, pandas: Runner._our_side, while the server imports), the rest of the server's start (its
  hello, once; docs/parity.md "Warm starts"), child start and imports (each reference's child, until
  its hello; forked from the server), each op family (the rows of one op, their wall seconds as the runner times them; the training loops summed on
  their own line), our side (esverify.es computing the expected values), the reference side (a
  request in flight in the child), waiting (the part of the reference side our side did not
  overlap) and report writing;
- CPU by process (this one, each reference's child, the rest) and this process's peak resident
  memory (our side's noise memo is most of what a run adds to it; docs/parity.md, "Our side's noise");
- with --one-core: the same run again under `taskset -c 0` (one core), and the ratios one core /
  all cores of CPU and wall time;
- with --cold: the same run again with every child started fresh (`parity --no-warm-start`), and the
  ratios warm / cold;
- with --python PATH (every reference's child) or --python NAME=PATH (one reference's; repeatable, as
  `parity --python`): the children under that interpreter, a user's reference environment (a 3.12 venv
  with torch and no numba, say); how much of each child's contract noise the parent served and how much
  it drew (docs/parity.md, "Served noise"), and each child's interpreter;
- with --versus-default (and --python): the default run (the parent's own interpreter) and the --python
  run in turn, on the same references (hyperscale-es's stand-in in both only where the --python run's
  interpreter for it has JAX), --turns times each, every run in a fresh process, and the ratios --python / default of
  CPU and wall time, with the load average around each run; a Markdown row for docs/benchmarks.md
  (date, commit, load, interpreter) with --markdown.

The references run side by side (one thread and one child each; the children start side by side
too) and a child works while our side computes, so the phases overlap: their sum exceeds the wall
time. The breakdown is taken by
wrapping the runner's own functions in this process (Session.start_child, run_report.finish) and
reading its clocks (metadata seconds_per_side, per-row seconds); nothing in esverify changes.
Nothing is asserted: machines are noisy. Say the load (printed) with every figure.

    python benchmarks/bench_parity.py [--small] [--ref PATH ...] [--one-core] [--cold] [--out DIR]
        [--python [NAME=]PATH ...] [--versus-default [--turns N] [--markdown]]

(The loop rows' share, once a second run with --no-loops, is the "all training loops" line.)
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from contextlib import contextmanager
from pathlib import Path

STANDINS = Path(__file__).resolve().parents[1] / "tests" / "standins"
#: the five references' stand-ins (es-at-scale's holds the paper's scripts, es-paper)
DEFAULT_REFS = [str(STANDINS / "es-at-scale"), str(STANDINS / "es-awd"), str(STANDINS / "skill-sample"),
                str(STANDINS / "eggroll-vllm")]
#: HyperscaleES's stand-in: a JAX child, run when its interpreter has what its child needs
HYPERSCALE = str(STANDINS / "hyperscale-es")
_FINDS = "import importlib.util as u, sys; sys.exit(not all(u.find_spec(m) for m in sys.argv[1:]))"


def _cpu() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def _tree_cpu(pid: int) -> float:
    """CPU seconds (user + sys) used so far by process `pid` and its live descendants, from /proc (0.0 where
    there is none): a reference child's figure, read just before the runner stops it."""
    tick = os.sysconf("SC_CLK_TCK")
    parents, used = {}, {}
    for entry in os.listdir("/proc") if os.path.isdir("/proc") else []:
        if entry.isdigit():
            try:
                fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            parents[int(entry)] = int(fields[1])
            used[int(entry)] = (int(fields[11]) + int(fields[12])) / tick
    tree, todo = set(), [pid]
    while todo:
        p = todo.pop()
        if p in used and p not in tree:
            tree.add(p)
            todo.extend(c for c, parent in parents.items() if parent == p)
    return sum(used[p] for p in tree)


def _own_cpu() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    return own.ru_utime + own.ru_stime


def interpreters(values) -> tuple:
    """(bare interpreter or None, {reference: interpreter}) of --python values (PATH or NAME=PATH, as
    `parity --python`); exit 2 with one line naming the value for an unknown reference or an empty path."""
    from esverify.oracle.adapters import names
    bare, per = None, {}
    for value in values or ():
        name, sep, path = value.partition("=")
        if sep and "/" not in name:
            if name not in names():
                _usage(f"--python {value}: unknown reference {name!r}; choose from {', '.join(names())}")
            per[name] = path
        else:
            bare, path = value, value
        if not path:
            _usage(f"--python {value!r}: no interpreter path")
    return bare, per


def default_refs(python_args) -> tuple[list, str]:
    """(the stand-ins a run without --ref checks, "" or the one line saying why hyperscale-es is left out): its
    child needs jax, jaxlib and optax (looked up, not imported) in its interpreter: the --python NAME=PATH it
    is given, else the bare --python, else this one."""
    from esverify.oracle import adapters
    from esverify.oracle.interpreters import child_needs
    bare, per = interpreters(python_args)
    python = per.get("hyperscale-es") or bare or sys.executable
    needs = child_needs(adapters.get("hyperscale-es"))
    try:
        found = subprocess.run([python, "-c", _FINDS, *needs], capture_output=True, timeout=120).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        found = False
    if found:
        return [*DEFAULT_REFS, HYPERSCALE], ""
    return list(DEFAULT_REFS), (f"hyperscale-es left out: {python} does not have {', '.join(needs)} (give "
                                "--python hyperscale-es=PATH with a JAX environment)")


def _usage(message: str):
    print(f"bench_parity.py: {message}", file=sys.stderr)
    sys.exit(2)


class _Probes:
    """The clocks and counters a run is measured with: this process's wrappers around the runner's own
    functions (Session.start_child, Runner._start_warm/_await_warm/_our_side, run_report.finish,
    Child.request and Child._stop), put in place by `installed()` and taken out at its end, whatever the
    run did. Nothing in esverify changes; the wrappers only read clocks and replies."""

    LABELS = {"_start_warm": "warm start server (launch)", "_our_side": "our side's imports (torch, numba, pandas)",
              "_await_warm": "warm start server (the rest of its start)"}

    def __init__(self):
        self.starts = defaultdict(float)       # phase or child -> wall seconds until its hello
        self.report_s = 0.0
        self.child_cpu = defaultdict(float)    # child -> CPU seconds of its process tree when stopped
        self.noise = defaultdict(lambda: defaultdict(int))   # child -> {"served": elements, "drawn": elements}
        self._finish = {}

    @contextmanager
    def installed(self):
        from esverify.oracle import child_process, runner as runner_mod, session as session_mod
        saved = [(session_mod.Session, "start_child"), (child_process.Child, "_stop"),
                 (child_process.Child, "request")] + [(runner_mod.Runner, name) for name in self.LABELS]
        saved = [(owner, name, getattr(owner, name)) for owner, name in saved]
        originals = {name: fn for _, name, fn in saved}
        session_mod.Session.start_child = self._start_child(originals["start_child"])
        child_process.Child._stop = self._stop(originals["_stop"])
        child_process.Child.request = self._request(originals["request"])
        for name, label in self.LABELS.items():
            setattr(runner_mod.Runner, name, self._phase(originals[name], label))
        try:
            yield self
        finally:
            for owner, name, fn in saved:
                setattr(owner, name, fn)
            if self._finish:
                self._finish["module"].finish = self._finish["fn"]

    def _start_child(self, start_child):
        starts = self.starts

        def timed_start_child(session):   # from the request until the child's hello (the children start side by side)
            mark = time.perf_counter()
            alive = session.child.alive()
            future = start_child(session)
            if not alive:
                future.add_done_callback(lambda _: starts.__setitem__(
                    session.adapter.name, starts[session.adapter.name] + time.perf_counter() - mark))
            return future
        return timed_start_child

    def _phase(self, fn, label):
        def run(runner, *args):
            mark = time.perf_counter()
            try:
                return fn(runner, *args)
            finally:
                self.starts[label] += time.perf_counter() - mark
                # the runner imports run_report (pandas) in Runner._our_side, beside the warm start server's
                # imports: its finish is wrapped once that ran, so that this benchmark imports nothing
                # earlier than a run does
                module = sys.modules.get("esverify.oracle.run_report")
                if module is not None and not self._finish:
                    self._finish.update(module=module, fn=module.finish)
                    module.finish = self._timed_finish
        return run

    def _timed_finish(self, *args, **kwargs):
        mark = time.perf_counter()
        try:
            return self._finish["fn"](*args, **kwargs)
        finally:
            self.report_s += time.perf_counter() - mark

    def _request(self, request):
        noise = self.noise

        def counted_request(child, command, timeout):
            reply = request(child, command, timeout)
            for kind, n in (reply.get("noise_elements") or {}).items():
                noise[child.target or "?"][kind] += int(n)
            return reply
        return counted_request

    def _stop(self, stop):
        child_cpu = self.child_cpu

        def measured_stop(child, *args, **kwargs):
            if child.proc is not None:
                child_cpu[Path(child.log_path).stem.removeprefix("child-")] += _tree_cpu(child.proc.pid)
            return stop(child, *args, **kwargs)
        return measured_stop


def _run(refs, small: bool, out: str, case, warm_start: bool, python_args, probes: _Probes):
    """One parity run under `probes`: (Runner, RunResult)."""
    from esverify.oracle import Options, Runner
    bare, per = interpreters(python_args)
    pythons = {"python": bare, "python_explicit": True} if bare else {}
    with probes.installed():
        runner = Runner(Options(ref=tuple(refs), small=small, out=out, quiet=True, case=case, warm_start=warm_start,
                                pythons=per, **pythons))
        return runner, runner.run()


def _figures(runner, result, probes: _Probes) -> dict:
    """The run's rows, per-op seconds, sides, children and noise counts (JSON-able; no clock of this
    process: `measure` adds those)."""
    from esverify.oracle.adapters import all_adapters
    loop_ops = {op for a in all_adapters() for op in a.loop_ops}
    frame = result.frame
    seconds = frame["case"].map(runner.row_seconds).fillna(0.0)
    families = {op: float(seconds[frame["op"] == op].sum()) for op in dict.fromkeys(frame["op"])}
    sides = result.metadata["seconds_per_side"]
    ours = sum(s["ours_s"] for s in sides.values())
    theirs = sum(s["reference_s"] for s in sides.values())
    children = result.metadata["children"]
    given = result.metadata.get("child_interpreters") or {}   # a JAX child's hello names no interpreter
    return {"rows": len(frame), "ran": int((frame["status"] != "skipped").sum()),
            "counts": {str(k): int(v) for k, v in frame["status"].value_counts().items()},
            "exit": result.exit_code, "child_start": dict(probes.starts), "child_cpu": dict(probes.child_cpu),
            "families": families, "family_rows": {op: int((frame["op"] == op).sum()) for op in families},
            "loop_ops": sorted(loop_ops & set(families)), "ours": ours, "reference": theirs,
            "waiting": max(theirs - ours, 0.0), "report": probes.report_s, "sides": sides,
            "started": {name: child.get("start") for name, child in children.items()},
            "targets": sorted(set(frame["target"])),
            "interpreters": {name: f"{child.get('executable') or given.get(name, {}).get('executable')} "
                                   f"({child.get('python') or given.get(name, {}).get('python')}, "
                                   + (f"jax {child.get('jax')}, " if "jax" in child else f"torch {child.get('torch')}, ")
                                   + f"noise backends {'/'.join((child.get('noise_backends') or {}).get('cpu', []))})"
                             for name, child in children.items()},
            "noise": {name: dict(kinds) for name, kinds in probes.noise.items()},
            "rows_table": _rows_table(frame)}


def measure(refs, small: bool, out: str, case: str | None = None, warm_start: bool = True,
            python_args=()) -> dict:
    """Run the default matrix once here and return the figures (JSON-able); `python_args`: --python values."""
    cpu0, own0, wall0 = _cpu(), _own_cpu(), time.perf_counter()
    from esverify.oracle import Runner, child_process, session  # noqa: F401  (the parent's imports, timed alone)
    from esverify.oracle.adapters import all_adapters  # noqa: F401
    imports_cpu, imports_wall = _cpu() - cpu0, time.perf_counter() - wall0
    probes = _Probes()
    runner, result = _run(refs, small, out, case, warm_start, python_args, probes)
    figures = _figures(runner, result, probes)
    figures.update(wall=time.perf_counter() - wall0, cpu=_cpu() - cpu0, own_cpu=_own_cpu() - own0,
                   imports_wall=imports_wall, imports_cpu=imports_cpu, load=os.getloadavg(),
                   peak_rss=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2 ** 20)
    return figures


#: the default matrix's goal on the 2-core machine, the stand-ins and the real clones alike: 30 s of CPU for
#: the five references (25 s wall); a run under a user's reference environment (--python: a 3.12 venv
#: without numba) at most GOAL_PYTHON_RATIO times the default run's CPU
GOAL_CPU_S, GOAL_WALL_S, GOAL_PYTHON_RATIO = 30.0, 25.0, 1.2

#: the columns of a row that say its verdict (what must not change with the interpreter or an optimisation)
ROW_COLUMNS = ("case", "status", "diagnosis", "mismatches", "max_ulp_diff", "first_mismatch_index")


def _rows_table(frame) -> dict:
    """{case: [verdict columns]} of a run's rows, JSON-able, to compare two runs row by row."""
    cols = [c for c in ROW_COLUMNS if c in frame.columns]
    return {str(r[0]): [str(v) for v in r[1:]] for r in frame[cols].itertuples(index=False)}


def rows_differing(a: dict, b: dict) -> tuple:
    """(rows that ran in both runs and differ, rows that ran in one run only) of two _rows_table results:
    skipped rows (a reference's rows its interpreter cannot run, say) are not compared."""
    ran = {k for k, v in a.items() if v[0] != "skipped"} & {k for k, v in b.items() if v[0] != "skipped"}
    one = ({k for k, v in a.items() if v[0] != "skipped"} ^ {k for k, v in b.items() if v[0] != "skipped"})
    return sorted(k for k in ran if a[k] != b[k]), sorted(one)


def _print(m: dict, label: str) -> None:
    load = " ".join(f"{x:.2f}" for x in m["load"])
    print(f"{label}: {m['rows']} rows ({m['ran']} ran) {m['counts']}; exit {m['exit']}; load average {load}")
    print(f"  CPU {m['cpu']:.2f} s, wall {m['wall']:.2f} s; {m['ran'] / m['cpu']:.2f} rows per CPU second, "
          f"{m['ran'] / m['wall']:.2f} rows per wall second")
    if "hyperscale-es" in m.get("targets", ()):
        print("  (hyperscale-es's rows included: the goal below is the five torch references')")
    print(f"  against the goal of {GOAL_CPU_S:g} s of CPU and {GOAL_WALL_S:g} s wall on 2 idle cores (docs/benchmarks.md, "
          f"\"Parity\"): {m['cpu'] / GOAL_CPU_S:.2f} and {m['wall'] / GOAL_WALL_S:.2f} of it")
    print(f"  {'phase':44s} {'wall s':>8s} {'of wall':>8s}")

    def line(name, s):
        print(f"  {name:44s} {s:8.2f} {s / m['wall']:8.0%}")
    line("parent imports (esverify.oracle)", m["imports_wall"])
    for name, s in m["child_start"].items():
        line(name if name.startswith(("warm start server", "our side")) else
             f"child start and imports: {name} ({m['started'].get(name) or 'not started'})", s)
    loops = sum(m["families"][op] for op in m["loop_ops"])
    for op, s in sorted(m["families"].items(), key=lambda kv: -kv[1]):
        if op not in m["loop_ops"]:
            line(f"op {op} ({m['family_rows'][op]} rows)", s)
    for op in m["loop_ops"]:
        line(f"loop {op} ({m['family_rows'][op]} rows)", m["families"][op])
    line(f"all training loops ({sum(m['family_rows'][op] for op in m['loop_ops'])} rows)", loops)
    line("our side (esverify.es, expected values)", m["ours"])
    line("reference side (a request in flight)", m["reference"])
    line("waiting (reference side not overlapped)", m["waiting"])
    line("report writing", m["report"])
    for target, s in m["sides"].items():
        print(f"    {target}: ours {s['ours_s']:.2f} s, reference {s['reference_s']:.2f} s")
    print(f"  CPU by process: this one (our side, imports, report) {m['own_cpu']:.2f} s; "
          + ", ".join(f"{name}'s child {s:.2f} s" for name, s in sorted(m["child_cpu"].items()))
          + f"; the rest (warm start server, supervisors) {m['cpu'] - m['own_cpu'] - sum(m['child_cpu'].values()):.2f} s")
    print(f"  peak resident memory of this process (our side, the noise memo of docs/parity.md): {m['peak_rss']:.2f} GB")
    for name, label in sorted(m.get("interpreters", {}).items()):
        kinds = m.get("noise", {}).get(name, {})
        print(f"  {name}'s child: {label}; contract noise served by the parent {kinds.get('served', 0) / 1e6:.1f} M "
              f"elements, drawn by the child {kinds.get('drawn', 0) / 1e6:.1f} M (docs/parity.md, \"Served noise\")")


def _commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True,
                              cwd=Path(__file__).resolve().parent).stdout.strip() + (
            "+changes" if subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], capture_output=True,
                                         text=True, cwd=Path(__file__).resolve().parent).stdout.strip() else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def _in_process(args, extra=(), label="run", refs=None) -> dict:
    """One run in a fresh process (its own CPU accounting, memo and children), its figures; its report goes
    to --out/<label> when --out is given. refs: the references to check (default: --ref, else the run's own
    choice)."""
    with tempfile.TemporaryDirectory(prefix="bench-parity-turn-") as scratch:
        out = Path(args.out) / label if args.out else Path(scratch) / "out"
        cmd = [sys.executable, __file__, "--json", "--out", str(out),
               *(["--small"] if args.small else []), *(["--case", args.case] if args.case else []),
               *[a for r in (refs or args.ref or []) for a in ("--ref", r)], *extra]
        before = os.getloadavg()
        figures = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout.splitlines()[-1])
    figures["load_before"] = before
    return figures


def versus_default(args) -> None:
    """The default run and the --python run in turn, --turns times each; the ratios and the row check."""
    import statistics
    python = [a for v in args.python for a in ("--python", v)]
    # both runs check the same references: hyperscale-es's stand-in only where the --python run's interpreter
    # for it has JAX (the default run's own would add it, and its child's CPU, to one side only)
    refs, left_out = (args.ref, "") if args.ref else default_refs(args.python)
    if left_out:
        print(f"{left_out}; so in both runs")
    runs = {"default": [], "python": []}
    for turn in range(args.turns):
        for label, extra in (("default", []), ("python", python)):
            m = _in_process(args, extra, f"{label}-{turn + 1}", refs)
            runs[label].append(m)
            load = " ".join(f"{x:.2f}" for x in m["load"])
            print(f"turn {turn + 1} {label:8s}: CPU {m['cpu']:7.2f} s, wall {m['wall']:7.2f} s, rows {m['counts']}, "
                  f"load average {load}", flush=True)
    cpu = {k: statistics.median(m["cpu"] for m in v) for k, v in runs.items()}
    wall = {k: statistics.median(m["wall"] for m in v) for k, v in runs.items()}
    ratios = [p["cpu"] / d["cpu"] for d, p in zip(runs["default"], runs["python"])]
    loads = [m["load"][0] for v in runs.values() for m in v]
    print(f"median CPU: default {cpu['default']:.2f} s, --python {cpu['python']:.2f} s; ratio {cpu['python'] / cpu['default']:.2f} "
          f"(per turn {', '.join(f'{r:.2f}' for r in ratios)}; goal {GOAL_PYTHON_RATIO:g}); median wall: "
          f"default {wall['default']:.2f} s, --python {wall['python']:.2f} s; 1-minute load {min(loads):.1f}-{max(loads):.1f}")
    print(f"default run against the goal of {GOAL_CPU_S:g} s of CPU: {cpu['default'] / GOAL_CPU_S:.2f} of it")
    base = runs["default"][0]["rows_table"]
    for label, v in runs.items():
        for m in v:
            differ, one = rows_differing(base, m["rows_table"])
            if differ:
                print(f"ROWS DIFFER ({label}): {len(differ)} rows, e.g. {differ[:3]}")
    differ, one = rows_differing(base, runs["python"][0]["rows_table"])
    print(f"rows that ran in both configurations: {'identical' if not differ else f'{len(differ)} differ'}; "
          f"ran in one only: {len(one)}" + (f" (e.g. {one[:2]})" if one else ""))
    _print(runs["default"][-1], "the last default run")
    last = runs["python"][-1]
    _print(last, "the last --python run")
    if args.markdown:   # the columns of docs/benchmarks.md's table, the interpreters on a line of their own
        names = sorted(set(last["interpreters"]))
        print("the --python run's children: " + "; ".join(sorted({last["interpreters"][n] for n in names})))

        def cells(v):
            return (", ".join(f"{m['cpu']:.1f}" for m in v) + f" s ({min(m['wall'] for m in v):.0f}-"
                    f"{max(m['wall'] for m in v):.0f} s)")
        print("docs/benchmarks.md row:")
        print(f"| {time.strftime('%Y-%m-%d', time.gmtime())} | {_commit()} | {min(loads):.1f}-{max(loads):.1f} | "
              f"{cells(runs['default'])} | {cells(runs['python'])} | {', '.join(f'{r:.2f}' for r in ratios)} "
              f"({cpu['python'] / cpu['default']:.2f}) |")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", action="store_true", help="leave out the 1M-element tensor")
    parser.add_argument("--ref", action="append", default=None,
                        help="a reference clone (repeatable; default: the test stand-ins)")
    parser.add_argument("--awd-ref", action="append", dest="ref", help="the same as --ref (kept for old command lines)")
    parser.add_argument("--out", default=None, help="report folder (default: a temporary one)")
    parser.add_argument("--case", default=None, help="only the cases matching this pattern (as parity --case)")
    parser.add_argument("--one-core", action="store_true", help="also run under `taskset -c 0` and print the ratios")
    parser.add_argument("--cold", action="store_true",
                        help="also run with every child started fresh (--no-warm-start) and print the ratios")
    parser.add_argument("--no-warm-start", action="store_true", help=argparse.SUPPRESS)   # the --cold run
    parser.add_argument("--python", action="append", default=[], metavar="[NAME=]PATH",
                        help="the children's interpreter: PATH for every reference, NAME=PATH for one (repeatable; "
                             "as parity --python)")
    parser.add_argument("--versus-default", action="store_true",
                        help="with --python: the default run and the --python run in turn, each in a fresh process, "
                             "and the ratios")
    parser.add_argument("--turns", type=int, default=1, help="with --versus-default: runs of each (default 1)")
    parser.add_argument("--markdown", action="store_true",
                        help="with --versus-default: also print a row for docs/benchmarks.md")
    parser.add_argument("--json", action="store_true", help=argparse.SUPPRESS)   # the --one-core run's output
    args = parser.parse_args()
    if args.versus_default and not args.python:
        parser.error("--versus-default compares a --python run with the default one: give --python")
    if args.turns < 1:
        parser.error(f"--turns must be >= 1, got {args.turns}")
    interpreters(args.python)   # an unknown reference name: one line, before anything runs
    if args.versus_default:
        versus_default(args)
        return
    refs, left_out = (args.ref, "") if args.ref else default_refs(args.python)
    if left_out and not args.json:
        print(left_out)
    out = args.out or tempfile.mkdtemp(prefix="bench-parity-")
    figures = measure(refs, args.small, out, args.case, warm_start=not args.no_warm_start, python_args=args.python)
    if args.json:
        print(json.dumps(figures))
        return
    _print(figures, f"default matrix{' --small' if args.small else ''} on "
                    f"{'the stand-ins' if args.ref is None else ', '.join(refs)}; report {out}")
    if args.one_core:
        with tempfile.TemporaryDirectory(prefix="bench-parity-1core-") as scratch:
            cmd = ["taskset", "-c", "0", sys.executable, __file__, "--json", "--out", str(Path(scratch) / "out"),
                   *(["--small"] if args.small else []), *(["--case", args.case] if args.case else []),
                   *[a for r in (args.ref or []) for a in ("--ref", r)], *[a for v in args.python for a in ("--python", v)]]
            one = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout.splitlines()[-1])
        _print(one, "the same run on one core (taskset -c 0)")
        print(f"one core / all cores: CPU {one['cpu'] / figures['cpu']:.2f}, wall {one['wall'] / figures['wall']:.2f}")
    if args.cold:
        with tempfile.TemporaryDirectory(prefix="bench-parity-cold-") as scratch:
            cmd = [sys.executable, __file__, "--json", "--no-warm-start", "--out", str(Path(scratch) / "out"),
                   *(["--small"] if args.small else []), *(["--case", args.case] if args.case else []),
                   *[a for r in (args.ref or []) for a in ("--ref", r)], *[a for v in args.python for a in ("--python", v)]]
            cold = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout.splitlines()[-1])
        _print(cold, "the same run, every child started fresh (--no-warm-start)")
        print(f"warm / cold: CPU {figures['cpu'] / cold['cpu']:.2f}, wall {figures['wall'] / cold['wall']:.2f}; "
              f"rows {figures['counts']} / {cold['counts']}")


if __name__ == "__main__":
    main()
