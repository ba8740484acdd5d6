"""`replay(...)`: rebuild a checkpoint from its base weights and run log, and judge it (docs/replay.md).

Steps: read and check the log (esverify.replay.log), open both
checkpoints lazily and check they hold the same tensors and shapes
(esverify.replay.weights), plan the work units (units), skip the units a
previous run of the same replay verified (state), run the rest (runners:
here, a process pool or Ray), fold the results into the report (report),
write the report (and with `out` the reconstructed weights) atomically.
Everything that can be checked before the work starts is checked first:
a bad input costs no compute and writes nothing.

Exit codes (docs/replay.md §7): 0 bit-equal, 1 differs, 2 usage or setup error or input that cannot
be replayed, 3 an infrastructure failure (a worker killed, a lost Ray node), 128 + signal when
interrupted (130 SIGINT, 143 SIGTERM, 129 SIGHUP).
"""
from __future__ import annotations

import hashlib
import os
import sys
from pathlib import Path

from esverify import __version__, interrupt, jsonin

from .log import LogError, log_digest, read_log
from .units import DEFAULT_SHARD, FLOATS, Unit, default_workers, plan_units
from .weights import WeightsError, open_weights

EXIT_BIT_EQUAL, EXIT_DIFFERS, EXIT_SETUP, EXIT_INFRASTRUCTURE = 0, 1, 2, 3
NOISES = ("native", "contract")


class ReplayError(ValueError):
    """A replay that cannot run (bad log, weights, options or state); one message naming the file. Exit 2."""


class ReplayInfrastructureError(RuntimeError):
    """The machinery failed while the units ran (a worker killed, a lost Ray node); one line. Exit 3."""


def _fingerprint(paths: list, parts: dict) -> str:
    h = hashlib.sha256(jsonin.dumps(parts, sort_keys=True).encode())
    for path in paths:   # names only: contents are checked per unit (kernel.input_digest), never size or mtime
        h.update(f"{Path(path).resolve()}\0".encode())
    return h.hexdigest()


def _weight_files(path: str) -> list:
    p = Path(path)
    return sorted(str(q) for q in p.iterdir() if q.is_file()) if p.is_dir() else [str(p)]


def _notes(log, share: bool, profile: str, noise: str, device: str, batching: str) -> list[str]:
    notes = []
    if share:   # the log's format leaves the evaluated members to num_engines (RunLogFormat.engine_share)
        notes.append(f"the saved weights depend on num_engines (here {log.num_engines}): the engine whose weights "
                     f"are saved also perturbed and restored the members it evaluated (the first of every "
                     f"batch of {log.num_engines}, batching {batching!r}), and (x + s) - s is not always x; the "
                     f"same seeds and coefficients on another number of engines give other weights")
    if noise == "native":
        notes.append(f"native noise is torch's own generator on device type {device!r}: a run trained on a GPU "
                     f"replays bit for bit only on a CUDA device (CPU and CUDA generators give different numbers, "
                     f"and torch's CUDA normal kernel can depend on the launch configuration): use the same GPU "
                     f"model and torch version")
        if log.caching:
            notes.append("caching was on: it reuses the noise of equal-shape tensors, which torch's generator, "
                         "re-seeded per tensor, gives identically anyway; it changes no bit")
    notes.append(f"numerics profile {profile!r} (docs/numerics.md §3); a replay with another profile than the "
                 f"run's reports differences that are not tampering")
    return notes


def _check_tensors(base, expect, base_path: str, expect_path: str, slots, precision):
    """(name, shape, replay dtype, layout) per tensor of the checkpoint (docs/replay.md §4).

    The replay's dtype comes from the base and the log, never from the checkpoint under test: a
    replayed float tensor has the log's `precision` (else the checkpoint's float dtype, as a run
    loading the model in that precision, else the base's); every other tensor keeps the base's dtype.
    `layout` names what differs ("" when the checkpoint's dtype and shape are the replay's): such a
    tensor is a difference, compared in no element. A tensor missing on either side is an error.
    """
    import torch
    tensors = []
    base_names = set(base.names())
    run_dtype = getattr(torch, precision) if precision else None
    for name in expect.names():
        shape, dtype = expect.info(name)
        if name not in base_names:
            raise ReplayError(f"{base_path}: has no tensor {name!r}, which {expect_path} has")
        bshape, bdtype = base.info(name)
        replayed = bdtype in FLOATS and (slots is None or name in slots)
        if replayed:
            run = run_dtype or (dtype if dtype in FLOATS else bdtype)
        else:
            run = bdtype
        problems = []
        if dtype != run:
            problems.append(f"dtype {str(dtype).removeprefix('torch.')} where the replay has "
                            f"{str(run).removeprefix('torch.')}")
        if tuple(bshape) != tuple(shape):
            problems.append(f"shape {tuple(shape)} where the replay (the base {base_path}) has {tuple(bshape)}")
        tensors.append((name, tuple(bshape) if problems else tuple(shape), run,
                        f"{expect_path}: tensor {name}: " + "; ".join(problems) if problems else ""))
    extra = sorted(base_names - {t[0] for t in tensors})
    if extra:
        raise ReplayError(f"{expect_path}: has no tensor {extra[0]!r}, which the base {base_path} has")
    return tensors


def _layout_units(units, tensors) -> list:
    """One whole-tensor unit, marked with its `layout`, per tensor whose dtype or shape differs (the
    replay still runs, for --out; the checkpoint's elements are not compared)."""
    layout = {name: msg for name, _, _, msg in tensors if msg}
    out, seen = [], set()
    for u in units:
        if u.name in layout:
            if u.name in seen:
                continue
            seen.add(u.name)
            u = Unit(0, u.name, 0, u.numel, u.numel, u.shape, u.dtype, u.kind, layout[u.name])
        out.append(Unit(len(out), u.name, u.start, u.end, u.numel, u.shape, u.dtype, u.kind, u.layout))
    return out


def replay(base, log, expect, *, out=None, profile=None, noise=None, workers=None, ray=None, state_dir=None,
           shard_elements=None, device="cpu", report_path=None, progress=None, after_unit=None,
           batching="passes"):
    """Replay the run logged in `log` on `base` and compare with `expect` (docs/replay.md).

    base, expect: checkpoint paths (safetensors, torch state_dict,
    Hugging Face folder); log: the run's logging folder; out: optional path
    for the reconstructed weights (.safetensors or torch); profile, noise:
    override what the log implies (a trainer log names both; a reference's
    log: its run-log format's profile, and native noise);
    workers: local processes (None: from the work, `units.default_workers`); ray: None, or a
    Ray address ("auto") to run the units as Ray tasks; state_dir: the
    resume folder (None: ./esverify-replay-<fingerprint>); shard_elements:
    elements per unit under contract noise; device: the run's device type;
    report_path: optional extra copy of report.json; progress: None (a bar
    when stderr is a terminal), True or False; after_unit: a callable run
    after each unit is recorded (tests use it to interrupt); batching:
    how the run handed members to engines, "members" or "passes", for a log
    whose format leaves them to num_engines (docs/replay.md §3; RunLog.evaluated).
    Returns (report dict, exit code): 0 bit-equal, 1 differs, or 128 + the
    signal number when SIGINT, SIGTERM or SIGHUP stopped it (the workers
    stopped, the verified units kept, the partial report written with the
    verdict "interrupted"). Raises ReplayError (exit 2) for every usage or
    setup error, before any work, and for input that turns out unreadable
    while the units run (the units verified so far kept);
    ReplayInfrastructureError (exit 3) when a worker or Ray node fails.
    """
    from esverify import registry

    # the one registered format that recognises the log decides (esverify.replay.log.RunLogFormat), never
    # the first of several; none: a trainer log, or an error that read_log names
    try:
        fmt = registry.runlog_format_for(log)
    except registry.AmbiguousLog as exc:
        raise ReplayError(f"--log {log}: {exc}") from None
    if fmt is not None and fmt.replay is not None:   # a format with its own replay (docs/replay.md §10)
        return _replay_by_format(fmt, base, log, expect, profile=profile, noise=noise, out=out,
                                 report_path=report_path, state_dir=state_dir)

    from . import kernel
    from .report import build_report, render_text
    run_log, profile, noise, shard = _settings(log, fmt, profile=profile, noise=noise, batching=batching,
                                               device=device, shard_elements=shard_elements, workers=workers)
    share = fmt is not None and fmt.engine_share
    tensors, slots, units = _plan(base, expect, log, run_log, noise, shard)
    iterations = tuple((it.seeds, it.coeffs, tuple(run_log.evaluated(it, batching))) for it in run_log.iterations)
    workers = workers or default_workers(units, iterations, os.cpu_count() or 1)
    parts = {"version": __version__, "log": log_digest(log), "profile": profile, "noise": noise, "shard": shard,
             "device": device, "batching": batching if share else None}
    state_dir, state = _open_state(base, expect, parts, state_dir, out=out, report_path=report_path)
    job = kernel.Job(base=str(Path(base).resolve()), expect=str(Path(expect).resolve()), profile=profile,
                     noise=noise, mapping=run_log.mapping,
                     scheme=run_log.scheme, slots=tuple(slots), sigma=run_log.sigma, alpha=run_log.alpha,
                     population=run_log.population, decay=run_log.decay, lam=run_log.lam, iterations=iterations,
                     device=device, pieces=str(state.pieces) if out is not None else None)
    results, reverified = _reusable(state, units, base, expect, need_pieces=out is not None)
    resumed = len(results)
    todo = [u for u in units if u.index not in results]
    stopped = _run_units(job, todo, units, results, state, state_dir, workers=workers, ray=ray, progress=progress,
                         after_unit=after_unit)
    context = {"esverify_version": __version__, "base": str(base), "expect": str(expect), "log": str(log),
               "units": len(units), "resumed_units": resumed,
               "reverified_units": reverified, "state_dir": str(state_dir),
               "runner": f"ray {ray}" if ray is not None else f"pool of {min(workers, max(len(todo), 1))}",
               "model": _model(run_log, profile, noise, device, share, batching),
               "notes": _notes(run_log, share, profile, noise, device, batching) + registry.problems()}
    if stopped is not None:
        context["signal"] = stopped.signal_name
        report = build_report(units, results, context, verdict=interrupt.VERDICT)
        _write_report(report, state_dir, report_path)
        report["text"] = render_text(report)
        return report, stopped.exit_code
    report = build_report(units, results, context)
    report["notes"].extend(_batching_hint(report, run_log, share, batching))
    _write_results(report, units, state, tensors, state_dir, out=out, report_path=report_path,
                   kept=_kept(results, units, state_dir))
    report["text"] = render_text(report)
    return report, EXIT_BIT_EQUAL if report["verdict"] == "bit-equal" else EXIT_DIFFERS


def _replay_by_format(fmt, base, log, expect, *, profile, noise, out, report_path, state_dir):
    """Replay a log whose run-log format brings its own replay (docs/replay.md §10); its errors exit 2."""
    from esverify import registry
    if profile not in (None, fmt.profile) or noise is not None:
        raise ReplayError(f"--log {log}: a {fmt.name} run log fixes its profile ({fmt.profile}) and noise; "
                          f"drop --profile/--noise")
    try:
        return fmt.replay(base, log, expect, out=out, report_path=report_path, state_dir=state_dir,
                          extra_notes=registry.problems())
    except (ValueError, WeightsError) as exc:   # the format's own errors and named argument errors
        raise ReplayError(f"--log {log}: {exc}") from None


def _settings(log, fmt, *, profile, noise, batching, device, shard_elements, workers):
    """Read the run log and settle the options against it: (run log, profile, noise, shard elements).

    Raises ReplayError for an unreadable log or an option out of range, before anything is opened.
    """
    from esverify.es.profiles import get_profile
    try:
        run_log = read_log(log, fmt)
    except LogError as exc:
        raise ReplayError(f"--log {log}: {exc}") from None
    profile = profile or run_log.profile or (fmt.profile if fmt is not None else None)
    if profile is None:
        raise ReplayError(f"--log {log}: args.json: names no numerics profile (the replay needs one: give "
                          f"--profile)")
    try:
        get_profile(profile)
    except ValueError as exc:
        raise ReplayError(f"--profile: {exc}") from None
    noise = noise or {"torch": "native", "contract": "contract"}.get(run_log.noise or "", "native")
    if noise not in NOISES:
        raise ReplayError(f"--noise: unknown value {noise!r}; known: {NOISES}")
    if batching not in ("members", "passes"):
        raise ReplayError(f"--batching: unknown value {batching!r}; known: ('members', 'passes')")
    if device not in ("cpu", "cuda"):
        raise ReplayError(f"--device: {device!r} is not cpu or cuda")
    shard = DEFAULT_SHARD if shard_elements is None else shard_elements
    if isinstance(shard, bool) or not isinstance(shard, int) or shard < 1:
        raise ReplayError(f"--shard-elements must be an integer >= 1, got {shard!r}")
    if workers and workers < 1:   # 0 or None: chosen from the work below
        raise ReplayError(f"--workers must be >= 1, got {workers}")
    return run_log, profile, noise, shard


def _plan(base, expect, log, run_log, noise, shard):
    """Check both checkpoints against each other and the log, and cut the work into units.

    Returns (tensors as `_check_tensors` gives them, the replayed slot names, the units). Raises
    ReplayError for unreadable weights, a tensor one side lacks, or a noise scheme the log does not know.
    """
    try:
        base_w, expect_w = open_weights(base), open_weights(expect)
        tensors = _check_tensors(base_w, expect_w, str(base), str(expect), run_log.slots, run_log.precision)
        base_dtypes = {name: base_w.info(name)[1] for name in base_w.names()}
    except WeightsError as exc:
        raise ReplayError(str(exc)) from None
    slots = run_log.slots if run_log.slots is not None else tuple(n for n, *_ in tensors
                                                                  if base_dtypes[n] in FLOATS)
    missing = [s for s in slots if s not in {n for n, *_ in tensors}]
    if missing:
        raise ReplayError(f"{expect}: has no tensor {missing[0]!r}, which the log's slot list names")
    if noise == "contract" and run_log.scheme not in ("correlated", "iid"):
        raise ReplayError(f"--log {log}: args.json: unknown noise scheme {run_log.scheme!r}")
    units = plan_units([(n, shape, dtype) for n, shape, dtype, _ in tensors], noise, shard)
    if run_log.slots is not None:   # a trainer log: tensors it did not register were never changed
        units = [Unit(u.index, u.name, u.start, u.end, u.numel, u.shape, u.dtype,
                      u.kind if u.name in slots else "static") for u in units]
    return tensors, slots, _layout_units(units, tensors)


def _open_state(base, expect, parts: dict, state_dir, *, out, report_path):
    """Open the resume folder of this replay (docs/replay.md §6): (its path, the State).

    The output paths are checked first, so a bad --out or --report writes nothing; ReplayError for
    either, or for a folder that holds another replay's state.
    """
    from esverify.outputs import OutputError, check_file

    from .state import State, StateError
    fingerprint = _fingerprint(_weight_files(base) + _weight_files(expect), parts)
    state_dir = Path(state_dir).resolve() if state_dir else Path.cwd() / f"esverify-replay-{fingerprint[:12]}"
    try:
        for path, option in ((out, "--out"), (report_path, "--report")):
            if path is not None:
                check_file(path, option)
    except OutputError as exc:
        raise ReplayError(str(exc)) from None
    try:
        return state_dir, State(state_dir, fingerprint)
    except StateError as exc:
        raise ReplayError(str(exc)) from None


def _reusable(state, units, base, expect, *, need_pieces: bool):
    """The results a previous run of this replay recorded that still hold: ({unit index: result}, the
    number of recorded units to verify again). A result is reused only on the same bytes (docs/replay.md §6).
    """
    from . import kernel
    recorded = state.done(need_pieces=need_pieces)
    results = {}
    try:
        if recorded:
            base_w, expect_w = open_weights(base), open_weights(expect)
        for k, result in recorded.items():
            if k < len(units) and result.get("key") == kernel.unit_key(units[k]) and \
                    result.get("inputs") == kernel.current_digest(units[k], base_w, expect_w):
                results[k] = result
    except WeightsError as exc:
        raise ReplayError(str(exc)) from None
    return results, len(recorded) - len(results)


def _kept(results, units, state_dir) -> str:
    """Where the units verified so far are kept, for an error that stops the replay."""
    return f"the {len(results)} of {len(units)} units verified so far are kept in {state_dir}"


def _run_units(job, todo, units, results, state, state_dir, *, workers, ray, progress, after_unit):
    """Run the units in `todo`, recording each result in `state` and `results` as it comes.

    Returns None, or the interrupt.Interrupted that stopped the run (the units verified so far kept).
    Raises ReplayError for input found unreplayable while the units run, ReplayInfrastructureError
    when a worker or Ray node fails.
    """
    from tqdm import tqdm

    from . import runners
    show = sys.stderr.isatty() if progress is None else progress
    bar = tqdm(total=len(units), initial=len(results), unit="unit", disable=not show, file=sys.stderr,
               desc="replay")

    def on_result(result):
        state.record(result)
        results[result["unit"]] = result
        bar.update(1)
        if after_unit is not None:
            after_unit(result)
    try:
        with interrupt.catching():   # SIGINT, SIGTERM, SIGHUP: stop the workers, write the partial report
            if ray is not None:
                runners.run_ray(job, todo, None if ray == "" else ray, on_result)
            else:
                runners.run_local(job, todo, workers, on_result)
    except interrupt.Interrupted as exc:
        return exc
    except runners.RunnerError as exc:
        raise ReplayError(str(exc)) from None
    except WeightsError as exc:   # input that cannot be replayed, found while the units ran
        raise ReplayError(f"{exc}; {_kept(results, units, state_dir)}") from None
    except runners.InfrastructureError as exc:
        raise ReplayInfrastructureError(f"{exc}; {_kept(results, units, state_dir)}; run the same command "
                                        f"again to continue") from None
    finally:
        bar.close()
    return None


def _model(run_log, profile: str, noise: str, device: str, share: bool, batching: str) -> dict:
    """The report's description of the replayed run (docs/replay.md §7)."""
    return {"source": run_log.source, "profile": profile, "noise": noise, "device": device,
            "iterations": len(run_log.iterations), "num_engines": run_log.num_engines,
            "sigma": run_log.sigma, "alpha": run_log.alpha, "population_size": run_log.population,
            "mirror_sampling": run_log.mirror, "caching": run_log.caching,
            "weight_decay_type": run_log.decay, "weight_decay_lambda": run_log.lam,
            "precision": run_log.precision,
            "residue": f"engine 0 of {run_log.num_engines}, batching {batching}" if share else
            "logged per iteration"}


def _batching_hint(report: dict, run_log, share: bool, batching: str) -> list[str]:
    """A note suggesting the other --batching, when a differing replay may have guessed it wrong."""
    seeds = len(run_log.iterations[0].seeds) if run_log.iterations else 0
    if report["verdict"] == "differs" and share and seeds % run_log.num_engines:
        other = "passes" if batching == "members" else "members"
        return [f"{seeds} seeds per iteration are not a multiple of num_engines "
                f"({run_log.num_engines}): the two ways members can be handed to engines differ "
                f"here; try --batching {other} (docs/replay.md §3)"]
    return []


def _write_results(report: dict, units, state, tensors, state_dir: Path, *, out, report_path, kept: str) -> None:
    """Write the reconstructed weights (with `out`) and the report; ReplayError saying what is `kept`
    when either cannot be written."""
    try:
        if out is not None:
            _write_out(out, units, state, tensors)
            report["out"] = str(out)
        _write_report(report, state_dir, report_path)
    except (OSError, WeightsError) as exc:
        raise ReplayError(f"cannot write the results ({exc}); {kept}") from None


def _write_report(report: dict, state_dir: Path, report_path) -> None:
    """Write report.json into the state folder, and to `report_path` when given, each atomically."""
    from esverify.report import write_atomic
    text = jsonin.dumps(report, indent=1) + "\n"   # strict: never NaN or Infinity (docs/replay.md §7)
    write_atomic(state_dir / "report.json", text)
    if report_path is not None:
        write_atomic(report_path, text)


def _write_out(out, units, state, tensors) -> None:
    """Assemble the reconstructed weights from the unit pieces and write them to `out` atomically."""
    import torch

    from .weights import open_weights as _open
    from .weights import save_weights
    shapes = {name: shape for name, shape, *_ in tensors}
    pieces = {}
    for unit in units:
        pieces.setdefault(unit.name, []).append(_open(state.piece(unit.index)).read("values"))
    save_weights(out, {name: torch.cat(parts).reshape(shapes[name]) for name, parts in pieces.items()})
