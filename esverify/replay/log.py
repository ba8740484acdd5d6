"""Reading and checking a run log (docs/replay.md §2).

A run log is a folder with `args.json` (the run's settings) and one
`iteration_updates/iteration_NNNNNN.json` per iteration (`iteration`,
`seeds`, `update_coefficients`). The clean-room trainer writes it
(`Trainer(..., run_log=DIR)`, with an `esverify` block in args.json and, per
iteration, the members it perturbed and restored on the saved weights); a
reference whose own loop writes it without that block brings a
`RunLogFormat` (its package, esverify.registry) that says what the block
would: its profile, its first iteration, how its members were handed to
engines. Every inconsistency is a `LogError` whose message starts with the
file it is about; nothing is guessed.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Callable
from pathlib import Path

from esverify import jsonin
#: the `esverify` block of a clean-room trainer's args.json: the writer's own spelling (esverify.es.runlog)
from esverify.es.runlog import FORMAT as ESVERIFY_FORMAT



@dataclass(frozen=True)
class RunLogFormat:
    """A run-log format a reference package brings (esverify.registry, `runlog_formats`); replay asks each.

    The replay asks every registered format whether it `detect`s the log folder
    (esverify.registry.runlog_format_for); the one that does decides how the log is replayed, and a
    folder two formats claim is refused (exit 2), never given to the first. A folder no format claims is a
    trainer log (an `esverify` block in args.json, esverify.es.runlog) or an error.

    name: the format's tag (a log's `source` in the report when the core replays it);
    detect(log folder) -> bool, cheap, reading no more than the folder's settings file, never raising;
    replay: None (the default): the log is in the `iteration_updates/` layout of §2, read by
    `read_log(folder, this format)` and replayed by the core; else the format's own
    replay(base, log, expect, *, out, report_path, state_dir, extra_notes) -> (report dict, exit code)
    (extra_notes: lines the core adds at the end of the report's notes, the registry's problems), raising
    ValueError (or esverify.replay.weights.WeightsError) for input it cannot replay;
    profile: the numerics profile such a log is replayed with (None: none implied). With its own
    `replay` the log fixes it (`--profile` may only repeat it, and `--noise` is refused); under the
    core's replay it is the default that `--profile` overrides;
    first_iteration: the number of the layout's first iteration file (core replay only);
    engine_share: the layout's iteration files do not list the members evaluated on the saved weights:
    they are engine 0's share of `num_engines` engines, handed out as `--batching` says
    (`RunLog.evaluated`, docs/replay.md §3); the report then states the residue's engine and
    batching, that the weights depend on num_engines and, when the replay differs and the two
    batchings disagree, the other one to try; `--batching` is part of the replay's identity.
    """
    name: str
    detect: Callable
    replay: Callable | None = None
    profile: str | None = None
    first_iteration: int = 0
    engine_share: bool = False


UPDATES = "iteration_updates"
_NAME = re.compile(r"iteration_(\d{6,})\.json")
DECAYS = ("none", "l1", "l2")
#: es-awd's --precision names (the dtype its engines load the model in, docs/replay.md §2)
PRECISIONS = ("float16", "bfloat16", "float32")
NOISES = ("torch", "contract")
SCHEMES = ("correlated", "iid")


class LogError(ValueError):
    """A run log that cannot be replayed; the message names the file (docs/replay.md §2)."""


@dataclass(frozen=True)
class Iteration:
    """One logged iteration (docs/replay.md §2).

    number: the logged `iteration`; seeds: ints in [0, 2**64) (torch seeds
    under native noise, u64 member seeds under contract noise); coeffs: f64,
    one per seed; evaluated: None (not listed: derived from num_engines, §3) or
    the (seed index, sign) pairs perturbed and restored on the saved weights
    before the update, in order (trainer logs); path: the file.
    """

    number: int
    seeds: tuple
    coeffs: tuple
    evaluated: tuple | None
    path: str


@dataclass(frozen=True)
class RunLog:
    """A checked run log (docs/replay.md §2). `source`: "esverify" (a trainer log) or the name of the `RunLogFormat` it was read with."""

    folder: str
    source: str
    alpha: float
    sigma: float
    population: int
    mirror: bool
    caching: bool
    decay: str
    lam: float
    precision: str | None
    num_engines: int
    profile: str | None
    noise: str | None
    mapping: str
    scheme: str
    slots: tuple | None
    iterations: tuple

    @property
    def decay_on(self) -> bool:
        """Anchored decay applies: a decay type and lambda > 0 (lambda 0 is no decay, as in es-awd)."""
        return self.decay != "none" and self.lam > 0

    def evaluated(self, it: Iteration, batching: str = "passes") -> list[tuple[int, int]]:
        """The (seed index, sign) pairs perturbed and restored on the saved weights before `it`'s update.

        A trainer log lists them. A log that does not (a format with
        `engine_share`, docs/replay.md §3): the evaluated members are every
        seed at +sigma, then (mirror sampling) every seed at -sigma, handed
        out in batches of E = num_engines, and engine 0 takes the first of
        each batch. batching "members": batches
        over that whole list (positions 0, E, 2E, ... of the 2M members);
        "passes": batches within each sign's pass (seed positions 0, E, 2E,
        ... at +sigma, then the same at -sigma). The two agree when E divides
        the number of seeds. ValueError for another batching.
        """
        if it.evaluated is not None:
            return list(it.evaluated)
        signs = (1, -1) if self.mirror else (1,)
        m, e = len(it.seeds), self.num_engines
        if batching == "members":
            members = [(k, sign) for sign in signs for k in range(m)]
            return members[::e]
        if batching == "passes":
            return [(k, sign) for sign in signs for k in range(0, m, e)]
        raise ValueError(f"batching: unknown value {batching!r}; known: ('members', 'passes')")


def _load_json(path: Path, rel: str):
    """A log file through esverify.jsonin: strict JSON (no key given twice, no NaN or Infinity), bounded."""
    try:
        return jsonin.load_path(path, rel)
    except FileNotFoundError:
        raise LogError(f"{rel}: missing") from None
    except OSError as exc:
        raise LogError(f"{rel}: cannot be read ({exc})") from None
    except jsonin.JSONInputError as exc:
        raise LogError(f"{rel}: not valid JSON: {exc}") from None


def _real(args: dict, key: str, rel: str, default=None, required: bool = True) -> float:
    if key not in args or args[key] is None:
        if required:
            raise LogError(f"{rel}: {key} missing (the replay needs it, docs/replay.md §2)")
        return default
    value = args[key]
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise LogError(f"{rel}: {key} must be a finite number, got {value!r}")
    return float(value)


def _int(args: dict, key: str, rel: str, minimum: int, default=None) -> int:
    value = args.get(key, default)
    if value is None:
        raise LogError(f"{rel}: {key} missing (the replay needs it, docs/replay.md §2)")
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise LogError(f"{rel}: {key} must be an integer >= {minimum}, got {value!r}")
    return value


def _bool(args: dict, key: str, rel: str) -> bool:
    value = args.get(key, False)
    if not isinstance(value, bool):
        raise LogError(f"{rel}: {key} must be true or false, got {value!r}")
    return value


def _name(args: dict, key: str, rel: str, known: tuple):
    """A setting that names one of `known` (or is absent/null: None); anything else is a LogError."""
    value = args.get(key)
    if value is None:
        return None
    if not isinstance(value, str) or value not in known:
        raise LogError(f"{rel}: {key} must be one of {known}, got {value!r}")
    return value


def _read_args(folder: Path, fmt) -> dict:
    args = _load_json(folder / "args.json", "args.json")
    if not isinstance(args, dict):
        raise LogError(f"args.json: expected a JSON object, got {type(args).__name__}")
    rel = "args.json"
    block = args.get("esverify")
    if block is not None and (not isinstance(block, dict) or block.get("format") != ESVERIFY_FORMAT):
        raise LogError(f"{rel}: esverify block of an unknown format {block!r}; expected format {ESVERIFY_FORMAT!r}")
    decay = _name(args, "weight_decay_type", rel, DECAYS + ("",)) or "none"   # es-awd may leave it empty
    lam = _real(args, "weight_decay_lambda", rel, 0.0, required=False)
    if lam < 0:
        raise LogError(f"{rel}: weight_decay_lambda must be >= 0, got {lam!r}")
    out = dict(alpha=_real(args, "alpha", rel), sigma=_real(args, "sigma", rel),
               population=_int(args, "population_size", rel, 1), mirror=_bool(args, "mirror_sampling", rel),
               caching=_bool(args, "caching", rel), decay=decay, lam=lam,
               num_engines=_int(args, "num_engines", rel, 1),
               precision=_name(args, "precision", rel, PRECISIONS))
    if out["alpha"] < 0 or not out["sigma"] > 0:
        raise LogError(f"{rel}: alpha must be >= 0 and sigma > 0, got alpha {out['alpha']!r}, sigma {out['sigma']!r}")
    if out["mirror"] and out["population"] % 2:
        raise LogError(f"{rel}: population_size {out['population']} must be even with mirror_sampling")
    num_iterations = args.get("num_iterations")
    if num_iterations is not None and (isinstance(num_iterations, bool) or not isinstance(num_iterations, int)
                                       or num_iterations < 0):
        raise LogError(f"{rel}: num_iterations must be an integer >= 0, got {num_iterations!r}")
    out["num_iterations"] = num_iterations
    if block is None:
        if fmt is None:
            raise LogError(f"{rel}: has no esverify block, so it is not a trainer log, and no reference's run-log "
                           f"format recognises it (docs/replay.md §2)")
        out.update(source=fmt.name, profile=None, noise=None, mapping="poly32", scheme="correlated", slots=None,
                   first=fmt.first_iteration)
    else:
        slots = block.get("slots")
        if slots is not None and not (isinstance(slots, list) and all(isinstance(s, str) for s in slots)):
            raise LogError(f"{rel}: esverify.slots must be a list of tensor names, got {slots!r}")
        from esverify.es.profiles import PROFILES
        from esverify.rng import MAPPINGS
        rel_block = rel + " esverify"
        out.update(source="esverify", profile=_name(block, "profile", rel_block, tuple(PROFILES)),
                   noise=_name(block, "noise", rel_block, NOISES),
                   mapping=_name(block, "mapping", rel_block, tuple(MAPPINGS)) or "poly32",
                   scheme=_name(block, "scheme", rel_block, SCHEMES) or "correlated",
                   slots=tuple(slots) if slots is not None else None,
                   first=_int(block, "first_iteration", rel + " esverify", 0, default=0))
    return out


def _seed_list(value, rel: str) -> tuple:
    if not isinstance(value, list):
        raise LogError(f"{rel}: seeds must be a list of integers, got {type(value).__name__}")
    for k, s in enumerate(value):
        if isinstance(s, bool) or not isinstance(s, int) or not 0 <= s < 1 << 64:
            raise LogError(f"{rel}: seeds[{k}] = {s!r} is not an integer in [0, 2**64)")
    return tuple(value)


def _coeff_list(value, rel: str) -> tuple:
    if not isinstance(value, list):
        raise LogError(f"{rel}: update_coefficients must be a list of numbers, got {type(value).__name__}")
    for k, c in enumerate(value):
        if isinstance(c, bool) or not isinstance(c, (int, float)) or not math.isfinite(c):
            raise LogError(f"{rel}: update_coefficients[{k}] = {c!r} is not a finite number")
    return tuple(float(c) for c in value)


def _evaluated(value, n_seeds: int, rel: str) -> tuple | None:
    if value is None:
        return None
    if not isinstance(value, list):
        raise LogError(f"{rel}: evaluated_on_saved must be a list of [seed index, sign] pairs")
    pairs = []
    for k, pair in enumerate(value):
        ok = (isinstance(pair, list) and len(pair) == 2 and all(isinstance(v, int) and not isinstance(v, bool)
                                                               for v in pair)
              and 0 <= pair[0] < n_seeds and pair[1] in (1, -1))
        if not ok:
            raise LogError(f"{rel}: evaluated_on_saved[{k}] = {pair!r} is not [seed index < {n_seeds}, +1 or -1]")
        pairs.append((pair[0], pair[1]))
    return tuple(pairs)


def _read_iteration(path: Path, rel: str, number: int, expected_seeds: int, population: int, mirror: bool):
    doc = _load_json(path, rel)
    if not isinstance(doc, dict):
        raise LogError(f"{rel}: expected a JSON object, got {type(doc).__name__}")
    for key in ("iteration", "seeds", "update_coefficients"):
        if key not in doc:
            raise LogError(f"{rel}: {key} missing")
    if doc["iteration"] != number:
        raise LogError(f"{rel}: holds iteration {doc['iteration']!r}, its name says {number}")
    seeds = _seed_list(doc["seeds"], rel)
    coeffs = _coeff_list(doc["update_coefficients"], rel)
    if len(seeds) != len(coeffs):
        raise LogError(f"{rel}: {len(seeds)} seeds but {len(coeffs)} update_coefficients")
    if len(seeds) != expected_seeds:
        what = f"population_size/2 = {expected_seeds} (mirror_sampling)" if mirror else \
            f"population_size = {population}"
        raise LogError(f"{rel}: {len(seeds)} seeds, args.json says {what}")
    return Iteration(number, seeds, coeffs, _evaluated(doc.get("evaluated_on_saved"), len(seeds), rel), rel)


def read_log(folder, fmt: RunLogFormat | None = None) -> RunLog:
    """Read and check the run log in `folder` (docs/replay.md §2).

    Returns a RunLog whose iterations are consecutive, starting at the
    first iteration of the schema (`esverify.first_iteration` for a trainer
    log, `fmt.first_iteration` for a log of a reference's format) and, when
    args.json has `num_iterations`, exactly that many. fmt: the
    `RunLogFormat` that detected the folder (esverify.replay.api asks the
    registry); it reads an args.json without an `esverify` block, which
    without one is an error. Raises LogError naming the file: a missing or malformed
    args.json or iteration file, alpha/sigma/population_size/num_engines
    missing, a missing iteration, seeds and coefficients of different
    lengths or of another count than the population says.
    """
    folder = Path(folder)
    if not folder.is_dir():
        raise LogError(f"{folder}: not a folder (--log takes a run's logging folder with args.json)")
    args = _read_args(folder, fmt)
    updates = folder / UPDATES
    if not updates.is_dir():
        raise LogError(f"{UPDATES}/: missing (no iteration records in {folder})")
    numbered = {}
    for path in updates.iterdir():
        m = _NAME.fullmatch(path.name)
        if m:
            numbered[int(m.group(1))] = path
    if not numbered and not args["num_iterations"]:
        raise LogError(f"{UPDATES}/: no iteration_NNNNNN.json files")
    first = args["first"]
    count = args["num_iterations"] if args["num_iterations"] is not None else max(numbered, default=first - 1) - first + 1
    stray = sorted(n for n in numbered if not first <= n < first + count)
    if stray:
        raise LogError(f"{UPDATES}/{numbered[stray[0]].name}: iteration {stray[0]} is outside the run's "
                       f"iterations {first}..{first + count - 1}")
    expected_seeds = args["population"] // 2 if args["mirror"] else args["population"]
    iterations = []
    for number in range(first, first + count):
        rel = f"{UPDATES}/iteration_{number:06d}.json"
        if number not in numbered:
            raise LogError(f"{rel}: missing (the log has {len(numbered)} of iterations {first}..{first + count - 1}; "
                           f"a replay needs every one)")
        iterations.append(_read_iteration(numbered[number], rel, number, expected_seeds, args["population"],
                                          args["mirror"]))
    return RunLog(folder=str(folder), source=args["source"], alpha=args["alpha"], sigma=args["sigma"],
                  population=args["population"], mirror=args["mirror"], caching=args["caching"],
                  decay=args["decay"], lam=args["lam"], precision=args["precision"],
                  num_engines=args["num_engines"], profile=args["profile"], noise=args["noise"],
                  mapping=args["mapping"], scheme=args["scheme"], slots=args["slots"],
                  iterations=tuple(iterations))


def log_digest(folder) -> str:
    """sha256 of args.json and every iteration file (names and bytes): the log's part of a replay's identity."""
    import hashlib
    folder = Path(folder)
    h = hashlib.sha256()
    paths = [folder / "args.json"] + sorted((folder / UPDATES).glob("iteration_*.json"))
    for path in paths:
        h.update(path.name.encode() + b"\0")
        h.update(path.read_bytes())
        h.update(b"\0")
    return h.hexdigest()
