"""The run log of our low-rank loop and its replay (docs/replay.md §10; docs/numerics.md §9.6).

Design record:
- The reference logs no per-member fitness, so its runs can only be
  re-run; our `run_lowrank_loop(..., run_log=DIR)` writes what a replay
  needs: `args.json` (the settings, with ``esverify.format`` =
  `FORMAT`) and per step ``iteration_updates/iteration_NNNNNN.json``
  holding the step, its generation, the reward matrix F and the shaped
  fitnesses the update used (JSON floats: Python's repr round-trips an f64
  exactly). Each file is written atomically.
- `replay_lowrank` rebuilds engine 0's weights from the base weights and
  the logged F, step by step, with the profile's own update, and compares
  every tensor bit for bit (esverify.replay.kernel.compare). The update
  never reads the members' perturbed weights, so nothing else is needed.
  It reads the whole model into memory: a low-rank replay is one pass per
  step over the targeted tensors, not the sharded work of an es-awd replay.
- `esverify replay` hands a log of this format here (esverify.replay.api).

Checks: ``python -m pytest -q tests/test_eggroll_lowrank.py -k replay``.
"""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from ... import jsonin
from ...replay.log import RunLogFormat
from ...replay.report import REPORT_FORMAT, sides
from ...report import write_atomic
from . import lowrank as LR
from .contract import factor_source
# the writing side lives in `logfiles` (the loop imports it; this module imports the loop): names kept here
from .logfiles import FORMAT, SETTINGS, STEPS_DIR, settings_of, step_file, write_args, write_step  # noqa: F401


class LowRankLogError(ValueError):
    """A low-rank run log that cannot be replayed; the message starts with the file."""


def is_lowrank_log(folder) -> bool:
    """True when `folder/args.json` carries this module's format tag (never raises)."""
    try:
        args = jsonin.load_path(Path(folder) / "args.json")
        return isinstance(args, dict) and (args.get("esverify") or {}).get("format") == FORMAT
    except (OSError, ValueError, AttributeError):
        return False


def _load(path: Path):
    try:
        return jsonin.load_path(path)
    except OSError as exc:
        raise LowRankLogError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    except ValueError as exc:
        raise LowRankLogError(f"{path}: not JSON ({exc})") from None



def _peft_shapes(value) -> list:
    """args.json's peft_shapes as [(name, (out, in))]; ValueError unless a list of [name, [out >= 1, in >= 1]]."""
    if not isinstance(value, list) or not value:
        raise ValueError(f"peft_shapes must be a non-empty list of [name, [out, in]], got {value!r}"[:300])
    out = []
    for k, entry in enumerate(value):
        ok = isinstance(entry, list) and len(entry) == 2 and isinstance(entry[0], str) and isinstance(entry[1], list) \
            and len(entry[1]) == 2 and all(LR.is_int(d) and d >= 1 for d in entry[1])
        if not ok:
            raise ValueError(f"peft_shapes[{k}] must be [name, [out >= 1, in >= 1]], got {entry!r}"[:300])
        out.append((entry[0], tuple(entry[1])))
    return out


def check_settings(args: dict, path) -> None:
    """Every setting of args.json (`path`) validated as the loop that wrote it validates its arguments
    (`lowrank.check_settings`, `default_chunk`, `factor_source`, `slice_map`): LowRankLogError naming the
    file and the setting, before any work (docs/replay.md §10)."""
    try:
        LR.check_settings(args["population"], args["sigma"], args["lr"], args["rank"], args["steps_per_adapter"],
                          args["start_step"])
        for flag in ("normalize_with_std", "scale_lr_in_grad"):
            if not isinstance(args[flag], bool):
                raise ValueError(f"{flag} must be true or false, got {args[flag]!r}")
        if not LR.is_int(args["base_seed"]):
            raise ValueError(f"base_seed must be an int, got {args['base_seed']!r}")
        if args["seed"] is not None and not LR.is_int(args["seed"]):
            raise ValueError(f"seed must be an int or null, got {args['seed']!r}")
        LR.default_chunk(args["rank"], args["population"] // 2, args["chunk_size"])
        peft = _peft_shapes(args["peft_shapes"])
        LR.slice_map(peft)
        factor_source(args["noise"], args["base_seed"], args["population"] // 2, len(peft), args["seed"],
                      args["mapping"])
    except (ValueError, TypeError) as exc:
        raise LowRankLogError(f"{path}: {exc}") from None


def read_lowrank_log(folder) -> tuple[dict, list[dict]]:
    """(settings, steps in order) of a low-rank run log; LowRankLogError naming the file on any defect.

    Steps must be consecutive from `start_step`, each file's `iteration`
    must equal its name, `fitness` must be N rows of one positive length of
    finite numbers and `shaped` N finite numbers.
    """
    folder = Path(folder)
    args = _load(folder / "args.json")
    if not isinstance(args, dict) or (args.get("esverify") or {}).get("format") != FORMAT:
        raise LowRankLogError(f"{folder / 'args.json'}: not a low-rank run log (esverify.format is not {FORMAT!r})")
    missing = [k for k in SETTINGS if k not in args]
    if missing:
        raise LowRankLogError(f"{folder / 'args.json'}: missing setting {missing[0]!r}")
    check_settings(args, folder / "args.json")
    n = args["population"]
    files = sorted((folder / STEPS_DIR).glob("iteration_*.json"))
    steps = []
    for k, path in enumerate(files):
        want = args["start_step"] + k
        if path.name != step_file(folder, want).name:
            raise LowRankLogError(f"{path}: expected {step_file(folder, want).name} (steps must be consecutive "
                                  f"from start_step {args['start_step']})")
        doc = _load(path)
        if not isinstance(doc, dict) or doc.get("iteration") != want:
            said = doc.get("iteration") if isinstance(doc, dict) else doc
            raise LowRankLogError(f"{path}: its iteration is {said!r}, the name says {want}")
        F = doc.get("fitness")
        try:
            F = np.asarray(F, dtype=np.float64)
        except (TypeError, ValueError):
            raise LowRankLogError(f"{path}: fitness is not a matrix of numbers") from None
        if F.ndim != 2 or F.shape[0] != n or F.shape[1] < 1 or not np.isfinite(F).all():
            raise LowRankLogError(f"{path}: fitness must be {n} rows of finite per-prompt numbers, got shape {F.shape}")
        shaped = doc.get("shaped")
        if not isinstance(shaped, list) or len(shaped) != n or not all(
                isinstance(v, (int, float)) and math.isfinite(v) for v in shaped):
            raise LowRankLogError(f"{path}: shaped must be {n} finite numbers")
        steps.append({"iteration": want, "fitness": F, "shaped": np.asarray(shaped, dtype=np.float64),
                      "path": str(path)})
    if not steps:
        raise LowRankLogError(f"{folder / STEPS_DIR}: no iteration_*.json files")
    return args, steps


def replay_lowrank(base, log, expect, *, out=None, report_path=None, state_dir=None, extra_notes=()) -> tuple[dict, int]:
    """Replay a low-rank run log on `base` and compare with `expect` (docs/replay.md §10).

    base, expect: checkpoints (esverify.replay.weights formats) holding the
    vLLM-named tensors; log: the run log folder. Per logged step: the
    shaping of its F (checked against the logged shaped fitnesses), then
    one update (docs/numerics.md §9.4). Returns (report, 0 bit-equal | 1
    differs). report.json is written to `state_dir` (default
    ./esverify-replay-<log digest>) and to `report_path` when given.
    Raises LowRankLogError / esverify.replay.weights.WeightsError for what
    cannot be replayed (a setting the loop would refuse, a destination that
    cannot be written: `state_dir`, `out`, `report_path`), before any update.
    extra_notes: lines the core adds at the end of the report's notes (the registry's problems).
    """
    from ...replay.log import log_digest
    from ...replay.weights import save_weights
    args, steps = read_lowrank_log(log)
    state_dir = Path(state_dir) if state_dir else Path.cwd() / f"esverify-replay-{log_digest(log)[:12]}"
    _check_destinations(state_dir, out, report_path)
    names, weights, expected = _open_pair(base, expect)
    peft = [(name, tuple(shape)) for name, shape in args["peft_shapes"]]
    targets = LR.slice_map(peft)
    for name, shape in peft:
        t = targets[name]
        if t.name not in weights or weights[t.name].dim() != 2 or weights[t.name].shape[0] < t.row_stop \
                or weights[t.name].shape[1] != shape[1]:
            raise LowRankLogError(f"{expect}: {name!r} does not fit rows [{t.row_start}, {t.row_stop}) of {t.name!r}")
    notes = _apply_steps(weights, peft, targets, args, steps)
    report = _report(names, weights, expected, args, steps, notes, base=base, expect=expect, log=log)
    report["notes"] += list(extra_notes)
    if out is not None:
        save_weights(out, weights)
        report["out"] = str(out)
    report["state_dir"] = str(state_dir)
    text = jsonin.dumps(report, indent=1) + "\n"
    write_atomic(state_dir / "report.json", text)
    if report_path is not None:
        write_atomic(report_path, text)
    from ...replay.report import render_text
    report["text"] = render_text(report)
    return report, 0 if report["verdict"] == "bit-equal" else 1


def _check_destinations(state_dir: Path, out, report_path) -> None:
    """Every destination checked before any work, as the trainer-log replay probes its own; a
    LowRankLogError names the one that cannot be written."""
    from ...outputs import OutputError, check_file, check_folder
    try:
        check_folder(state_dir, "--state-dir")
        for path, option in ((out, "--out"), (report_path, "--report")):
            if path is not None:
                check_file(path, option)
    except OutputError as exc:
        raise LowRankLogError(str(exc)) from None


def _open_pair(base, expect) -> tuple[list, dict, dict]:
    """(tensor names, the base's tensors in the checkpoint's dtypes and shapes, the checkpoint's tensors);
    LowRankLogError when the two do not hold the same tensors of the same shapes."""
    from ...replay.weights import open_weights
    base_w, exp_w = open_weights(base), open_weights(expect)
    names = list(exp_w.names())
    if set(names) != set(base_w.names()):
        odd = sorted(set(names) ^ set(base_w.names()))[0]
        raise LowRankLogError(f"{expect}: the base {base} and the checkpoint do not hold the same tensors ({odd!r})")
    for n in names:
        if tuple(base_w.info(n)[0]) != tuple(exp_w.info(n)[0]):
            raise LowRankLogError(f"{expect}: tensor {n} has shape {tuple(exp_w.info(n)[0])}, the base {base} has "
                                  f"{tuple(base_w.info(n)[0])}")
    expected = {n: exp_w.read(n).reshape(tuple(exp_w.info(n)[0])) for n in names}
    weights = {n: base_w.read(n).to(expected[n].dtype).reshape(expected[n].shape).clone() for n in names}
    return names, weights, expected


def _apply_steps(weights: dict, peft, targets, args: dict, steps) -> list[str]:
    """Apply every logged step's update to `weights` in place (the shaping of its F, then the update);
    the notes on steps whose logged shaped fitnesses are not that shaping."""
    n = args["population"]
    source = factor_source(args["noise"], args["base_seed"], n // 2, len(peft), args["seed"], args["mapping"])
    notes = []
    for st in steps:
        shaped, _ = LR.shape_fitness(st["fitness"], args["normalize_with_std"])
        if shaped.tobytes() != st["shaped"].tobytes():
            notes.append(f"{st['path']}: the logged shaped fitnesses are not the shaping of the logged F; "
                         f"the replay uses the shaping of F")
        LR.apply_update_(weights, peft, shaped, sigma=args["sigma"], lr=args["lr"], rank=args["rank"],
                         generation=st["iteration"] // args["steps_per_adapter"], source=source,
                         chunk=args["chunk_size"], scale_lr_in_grad=args["scale_lr_in_grad"], targets=targets)
    return notes


def _report(names, weights: dict, expected: dict, args: dict, steps, notes, *, base, expect, log) -> dict:
    """The replay report (esverify.replay.report's format): each tensor compared bit for bit, the verdict,
    the run's settings and the notes."""
    from ...replay.kernel import compare
    tensors = []
    for name in names:
        got = sides(compare(weights[name].reshape(-1), expected[name].reshape(-1), 0))
        tensors.append({"name": name, "shape": list(expected[name].shape), "dtype": str(expected[name].dtype),
                        "elements": int(expected[name].numel()), "kind": "lowrank", "units": 1, "replay": got,
                        "naive": got})
    mismatches = sum(t["replay"]["mismatches"] for t in tensors)
    return {"format": REPORT_FORMAT, "verdict": "bit-equal" if mismatches == 0 else "differs",
            "elements": sum(t["elements"] for t in tensors), "mismatches": mismatches,
            "naive_mismatches": mismatches, "tensors": tensors, "base": str(base), "expect": str(expect),
            "log": str(log), "units": len(tensors), "resumed_units": 0,
            "model": {"source": "esverify-lowrank", "profile": "lowrank", "noise": args["noise"],
                      "device": "cpu", "iterations": len(steps), "population_size": args["population"],
                      "sigma": args["sigma"], "lr": args["lr"], "rank": args["rank"],
                      "steps_per_adapter": args["steps_per_adapter"],
                      "residue": "none: members are evaluated through adapters, never on the base weights"},
            "notes": notes + ["numerics profile 'lowrank' (docs/numerics.md §9); the perturbations never touch "
                              "the base weights, so the naive replay is the replay"]}


#: this log's entry in the references registry (`runlog_formats`): esverify replay detects and dispatches it
RUNLOG_FORMAT = RunLogFormat(name=FORMAT, detect=is_lowrank_log, replay=replay_lowrank, profile="lowrank")
