"""The replay of one work unit (docs/replay.md §3, §5).

Per iteration, on the unit's elements of the saved weights:

1. the engine residue: every (seed, sign) the saved weights' engine
   evaluated is perturbed with s = sign * sigma and restored with -s, in
   the logged order (`(x + s) - s` is not always `x`, so this changes bits);
2. the update: acc = sum over seeds of coefficient * noise (the profile's
   accumulator), theta <- theta + (alpha / population) * acc;
3. the anchored decay toward the base weights, when the log has it on.

The naive replay (updates and decay only, step 2-3) runs alongside on the
same noise, so the report can show what the residue changes. All
roundings are the numerics profile's (docs/numerics.md §3, §5): the same
kernels the clean-room trainer uses. Noise: `native` is torch's own
generator exactly as es-awd draws it (per tensor a new torch.Generator
seeded with the member seed, torch.randn of the tensor's shape and dtype),
`contract` the contract's counter-based stream (docs/CONTRACT.md §4).
Every operation is elementwise, so the bits do not depend on the unit or
chunk boundaries (docs/replay.md §5).
"""
from __future__ import annotations

import functools
import os
from dataclasses import dataclass
from pathlib import Path

import torch
import xxhash

from esverify import bitcompare
from esverify.es.decay import decay_chunk
from esverify.es.profiles import get_profile

from . import scratch
from .units import Unit
from .weights import WeightsError, open_weights

#: noise elements an iteration may keep so that a residue seed's draw is reused by the update
CACHE_ELEMENTS = 1 << 25

#: a replay's elements per window (Job.chunk's default): one kernel call runs an iteration on a window, so fewer,
#: larger windows spend less in Python per member-element (measured 1-2% of a replay against the 2**18 of
#: esverify.es.numerics.DEFAULT_CHUNK); the window's accumulator is 4 MiB of f32 beside a unit's own tensors
REPLAY_CHUNK = 1 << 20


@dataclass(frozen=True)
class Job:
    """Everything a worker needs to replay any unit (picklable; docs/replay.md §5).

    base, expect: checkpoint paths (read by the worker itself: on Ray they
    must be readable from every node); profile: "es-awd" or "es-at-scale";
    noise: "native" | "contract"; mapping, scheme: the contract noise's;
    slots: tensor names in slot order (the contract's stream seeds depend on
    the slot under the iid scheme); sigma, alpha (f64), population (the
    divisor N); decay ("none" | "l1" | "l2"), lam; iterations: per
    iteration (seeds, coeffs, evaluated (seed index, sign) pairs); device:
    "cpu" or "cuda" (the run's device type); chunk: elements per kernel
    call (never changes a bit; default REPLAY_CHUNK); pieces: None, or a folder where each
    unit's reconstructed elements are saved (for --out).
    """

    base: str
    expect: str
    profile: str
    noise: str
    mapping: str
    scheme: str
    slots: tuple
    sigma: float
    alpha: float
    population: int
    decay: str
    lam: float
    iterations: tuple
    device: str = "cpu"
    chunk: int = REPLAY_CHUNK
    pieces: str | None = None

    @property
    def decay_on(self) -> bool:
        return self.decay != "none" and self.lam > 0


_OPEN: dict = {}


def _weights(path: str):
    """One lazy reader per file and process: a pool worker replays many units of the same files.

    Keyed on the file's identity too (inode, size, mtime of every file), so that a file replaced
    between two replays in one process is never read through a stale reader."""
    p = Path(path)
    try:
        files = sorted(q for q in p.iterdir() if q.is_file()) if p.is_dir() else [p]
        key = (path,) + tuple((str(q), st.st_ino, st.st_size, st.st_mtime_ns) for q in files for st in [q.stat()])
    except FileNotFoundError:
        raise WeightsError(f"{path}: no such file or folder") from None
    except OSError as exc:
        raise WeightsError(f"{path}: cannot be read ({exc})") from None
    if key not in _OPEN:
        for old in [k for k in _OPEN if k[0] == path]:
            del _OPEN[old]
        _OPEN[key] = open_weights(path)
    return _OPEN[key]


def native_noise(seed: int, shape: tuple, dtype: torch.dtype, device: str) -> torch.Tensor:
    """es-awd's noise of one tensor: a new torch.Generator on `device` seeded `seed`, randn(shape, dtype).

    Returns it flat and widened to f32 (exact); the profile rounds it back to dtype.
    """
    generator = torch.Generator(device=device)
    generator.manual_seed(seed)
    return torch.randn(shape, dtype=dtype, device=device, generator=generator).reshape(-1).to(torch.float32)


def _contract_draw(job: Job, slot: int):
    from esverify.es.noise import NoiseSource
    from esverify.rng import stream_seed
    source = NoiseSource(job.mapping)

    def draw(seed, first, n, out=None):
        return source.draw(stream_seed(seed, slot, job.scheme), first, n, torch.device(job.device), out)
    return draw


def _subs(n: int, chunk: int):
    return [(s, min(n, s + chunk)) for s in range(0, n, chunk)] or [(0, 0)]


def _residue_steps(sigma: float, seeds, coeffs, evaluated):
    """Per member, the residue's perturb steps (+-sign * sigma, f64, in logged order), when running each member's
    steps just before its accumulate keeps the logged order on theta (the evaluated members are logged in
    member order; theta and the accumulator are separate, so only the order on theta matters); else None."""
    ks = [k for k, _ in evaluated]
    if ks != sorted(ks) or len(coeffs) != len(seeds) or any(not 0 <= k < len(coeffs) for k in ks):
        return None
    steps = [[] for _ in coeffs]
    for k, sign in evaluated:
        steps[k] += [sign * sigma, -sign * sigma]
    return steps


def _replay_window(job: Job, prof, rule, theta, naive, anchor, eps_of, first: int, numel: int, drawn=None,
                   plan=None, new_acc=None, drawn_apply=None):
    """Run every iteration on one window (1-D views theta, naive, anchor of elements [first, first+len)).
    drawn: None, or drawn(k, first, acc, coeffs, theta=None, steps=None) -> bool, the profile's
    accumulate_drawn on this window's streams of the members k (iteration, member indices): when the
    residue's order allows, one call runs the whole residue and update of an iteration, drawing each
    member's noise inside the kernel; else it is called per member whose draw the residue did not keep
    (whose noise is then never written to memory). plan: per iteration `_residue_steps`, computed once per
    replay instead of per window (None: computed here). new_acc: the profile's new_acc, or a stand-in that
    hands out a zeroed reused buffer of the same dtype (None: the profile's). drawn_apply: None, or
    drawn_apply(i, first, acc, theta, steps, naive) -> bool, the profile's accumulate_drawn_apply on this
    window: the call `drawn` would make for a whole iteration, the update then applied to theta and naive in
    the kernel's last pass (then the apply passes here are skipped)."""
    n, dt = theta.numel(), theta.dtype
    subs = _subs(n, job.chunk)
    scale = prof.scale(job.alpha, job.population)
    step = job.alpha * job.lam if job.decay_on else None
    # buffers drawn into again and again: a fresh tensor per draw costs its pages (a quarter of a replay)
    scratch = []   # the one buffer of draws used at once
    kept = []      # the residue's kept draws, one buffer per member, reused from one iteration to the next
    acc = None
    for i, (seeds, coeffs, evaluated) in enumerate(job.iterations):
        # shared by both replays (it does not depend on theta); zeroed again rather than allocated anew: fresh
        # pages cost their faults in every iteration
        acc = (new_acc or prof.new_acc)(n, dt, theta.device) if acc is None else acc.zero_()
        if drawn is None:
            steps = None
        else:
            steps = plan[i] if plan is not None else _residue_steps(job.sigma, seeds, coeffs, evaluated)
        applied = steps is not None and drawn_apply is not None and drawn_apply(i, first, acc, theta, steps, naive)
        if not applied and (steps is None or not drawn((i, None), first, acc, coeffs, theta, steps)):
            _residue_and_update(job, prof, rule, theta, acc, eps_of, first, numel, drawn, subs, scratch, kept, i,
                                seeds, coeffs, evaluated)
        for target in (theta, naive):
            for a, b in subs:
                if not applied:
                    prof.apply(target[a:b], acc[a:b], scale, rule, first + a, numel, target[a:b])
                if step is not None:
                    target[a:b].copy_(decay_chunk(target[a:b], anchor[a:b], job.decay, step, rule))


def _residue_and_update(job: Job, prof, rule, theta, acc, eps_of, first, numel, drawn, subs, scratch, kept, it,
                        seeds, coeffs, evaluated):
    """One iteration's residue on theta, then its accumulator acc (in place), member by member with the noise
    drawn into memory (a residue member's draw kept for the update when the window is small enough)."""
    n, dt = theta.numel(), theta.dtype
    keep = n * len({k for k, _ in evaluated}) <= CACHE_ELEMENTS
    cache = {}

    def eps(k):   # the residue's draw: kept for the update when the window is small enough
        if k in cache:
            return cache[k]
        if not keep:
            return eps_once(k)
        spare = kept[len(cache)] if len(cache) < len(kept) else None
        e = eps_of(seeds[k], spare)
        if spare is None:
            kept.append(e)
        cache[k] = e
        return e

    def eps_once(k):   # a draw used at once: by the residue's two steps, or by the update
        if k in cache:
            return cache[k]
        e = eps_of(seeds[k], scratch[0] if scratch else None)
        if not scratch:
            scratch.append(e)
        return e
    for k, sign in evaluated:                 # the engine residue (docs/replay.md §3)
        e = eps(k)
        for s in (sign * job.sigma, -sign * job.sigma):
            for a, b in subs:
                prof.perturb(theta[a:b], e[a:b], s, rule, first + a, numel, theta[a:b])
    for k, c in enumerate(coeffs):
        if k not in cache and drawn is not None and drawn((it, k), first, acc, (c,)):
            continue
        e = eps_once(k)
        for a, b in subs:
            part = acc[a:b]
            new = prof.accumulate(part, e[a:b], c, dt, rule, first + a, numel)
            if new is not part:
                part.copy_(new)


@functools.lru_cache(maxsize=8)
def _streams_and_steps(iterations: tuple, slot: int, scheme: str, sigma: float) -> tuple:
    """Per iteration the members' stream seeds and `_residue_steps`: once per worker and slot, not per unit,
    window and iteration (a stream seed depends on the member seed and slot only, the steps on the log only;
    recomputed per unit they were about 1% of a replay). Read only: shared by every unit of a tensor."""
    from esverify.rng import stream_seed
    streams = tuple(tuple(stream_seed(seed, slot, scheme) for seed in seeds) for seeds, _, _ in iterations)
    plan = tuple(_residue_steps(sigma, *it) for it in iterations)
    return streams, plan


def _copy_of(t: torch.Tensor, role: str, buffers) -> torch.Tensor:
    """A copy of t: a new tensor, or the `role` buffer of `buffers` (a scratch.Scratch; CPU tensors only)."""
    if buffers is None or t.device.type != "cpu":
        return t.clone()
    out = buffers.take(role, t.numel(), t.dtype)
    out.copy_(t)
    return out


def _scratch_acc(prof, dtype: torch.dtype, device, buffers):
    """None, or a new_acc for `_replay_window` that hands out `buffers`' "acc" buffer zeroed, in the dtype the
    profile's new_acc gives (one accumulator of a window at a time: the window's last iteration is done with it
    before the next window takes it)."""
    if buffers is None or torch.device(device).type != "cpu":
        return None
    acc_dtype = prof.new_acc(0, dtype, device).dtype

    def new_acc(n, dt, dev):
        acc = buffers.take("acc", n, acc_dtype)
        acc.view(torch.uint8).numpy().fill(0)   # memset, no parallel fill region; all-zero bytes are +0.0
        return acc
    return new_acc


def replay_elements(job: Job, unit: Unit, base: torch.Tensor, owned: bool = False,
                    buffers=None) -> tuple[torch.Tensor, torch.Tensor]:
    """(replayed, naive) elements [unit.start, unit.end) of tensor unit.name from its base elements.

    base: flat tensor of those elements in the run's dtype on job.device; left unchanged unless `owned`
    (a copy the caller hands over: without a decay anchor it becomes the replayed tensor, one copy of
    the unit fewer). buffers: None, or a scratch.Scratch whose buffers hold the copies and accumulators on
    the CPU (the results then live in its "theta" or the caller's base, and "naive" buffers: valid until
    the next call with the same Scratch). Native noise needs a whole-tensor unit (ValueError otherwise).
    """
    prof = get_profile(job.profile)
    rule = prof.rule_for(torch.device(job.device))
    anchor = base if job.decay_on else None
    theta = base if owned and anchor is None else _copy_of(base, "theta", buffers)
    naive = _copy_of(base, "naive", buffers)
    new_acc = _scratch_acc(prof, base.dtype, base.device, buffers)
    n = unit.end - unit.start
    if job.noise == "native":
        if (unit.start, unit.end) != (0, unit.numel):
            raise ValueError(f"unit {unit.index} ({unit.name}): native noise replays whole tensors only")
        dtype = base.dtype
        _replay_window(job, prof, rule, theta, naive, anchor,
                       lambda seed, out=None: native_noise(seed, unit.shape, dtype, job.device), 0, unit.numel,
                       new_acc=new_acc)
        return theta, naive
    slot = job.slots.index(unit.name) if unit.name in job.slots else None
    if slot is None and job.scheme == "iid":
        raise ValueError(f"tensor {unit.name}: not in the log's slot list; iid noise needs its slot")
    draw = _contract_draw(job, slot or 0)
    drawn = drawn_apply = None
    if prof.accumulate_drawn is not None:
        try:
            streams, plan = _streams_and_steps(job.iterations, slot or 0, job.scheme, job.sigma)
        except TypeError:   # iterations built with lists (a caller's own Job): not hashable, so not kept
            streams, plan = _streams_and_steps.__wrapped__(job.iterations, slot or 0, job.scheme, job.sigma)

        def drawn(key, at, acc, coeffs, theta=None, steps=None):
            i, k = key   # iteration; member, or None for all of them
            return prof.accumulate_drawn(acc, streams[i] if k is None else streams[i][k:k + 1], at, job.mapping,
                                         coeffs, base.dtype, rule, theta, steps)

        if prof.accumulate_drawn_apply is not None:
            scale = prof.scale(job.alpha, job.population)

            def drawn_apply(i, at, acc, theta, steps, naive):
                return prof.accumulate_drawn_apply(acc, streams[i], at, job.mapping, job.iterations[i][1],
                                                   base.dtype, rule, theta, steps, scale, naive)
    for a, b in _subs(n, job.chunk):
        first = unit.start + a
        _replay_window(job, prof, rule, theta[a:b], naive[a:b], None if anchor is None else anchor[a:b],
                       lambda seed, out=None: draw(seed, first, b - a, out), first, unit.numel, drawn,
                       plan if drawn is not None else None, new_acc, drawn_apply)
    return theta, naive


#: an integer dtype of each width, to compare bit patterns (torch.equal on floats would take -0 for 0 and NaN for
#: unequal)
_SAME_WIDTH = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def compare(got: torch.Tensor, expected: torch.Tensor, start: int) -> dict:
    """Bitwise comparison of two flat tensors through esverify.bitcompare (docs/numerics.md §7).

    Nothing is converted: a dtype or shape that differs is a difference of every element, with
    `layout` naming both. Returns {"mismatches": count, "first": None or {"index" (flat, in the whole
    tensor), "expected", "got" (hex and value), "ulp" (None for NaN/inf or non-float)}, "max_ulp":
    largest finite distance or None}, plus "layout" when dtypes or shapes differ.
    """
    same = (got.dtype == expected.dtype and got.shape == expected.shape and got.device == expected.device
            and got.dtype.itemsize in _SAME_WIDTH and got.is_contiguous() and expected.is_contiguous())
    if same and got.device.type != "cpu":
        # on a GPU a genuine checkpoint's agreement is one pass there, where bitcompare would first copy both to
        # the host
        view = _SAME_WIDTH[got.dtype.itemsize]
        if torch.equal(got.view(view), expected.view(view)):
            return {"mismatches": 0, "first": None, "max_ulp": None}
    return bitcompare.summary(expected, got, start)


def _save_piece(job: Job, unit: Unit, values: torch.Tensor) -> None:
    from .weights import save_weights
    save_weights(os.path.join(job.pieces, f"unit-{unit.index:08d}.safetensors"), {"values": values.cpu()})


def _read(weights, unit: Unit, into=None) -> torch.Tensor:
    """The unit's elements of one checkpoint (a new tensor, or into(numel, dtype) filled: Weights.read); any
    failure to read them (a file changed or cut short since the up-front checks: OS errors, safetensors' own
    errors) is a WeightsError naming the file and tensor."""
    try:
        return weights.read(unit.name, unit.start, unit.end, into)
    except WeightsError:
        raise
    except Exception as exc:
        first = (str(exc).strip().splitlines() or [""])[0]
        raise WeightsError(f"{weights.path}: tensor {unit.name}: cannot be read ({type(exc).__name__}: "
                           f"{first})") from None


def unit_key(unit: Unit) -> str:
    """What a unit is, beside its inputs: a recorded result is reused only for the same key (§6)."""
    return f"{unit.name}\0{unit.start}\0{unit.end}\0{unit.shape}\0{unit.dtype}\0{unit.kind}\0{unit.layout}"


#: the algorithm `input_digest` names in each digest it returns: a unit a state folder recorded with another
#: algorithm (the bare sha256 hex digests of earlier releases) never matches, so it is simply verified again
DIGEST = "xxh3-128"


def input_digest(unit: Unit, base: torch.Tensor, expected: torch.Tensor | None) -> str:
    """"xxh3-128:" and the 32 hex digits of xxHash's XXH3 128-bit hash of the bytes a unit read (its base and
    checkpoint elements, with their dtypes; docs/replay.md §6).

    Resume trusts a recorded unit only when the bytes there now hash the same: a file edited in place with
    its size and modification time restored is re-verified. The digest detects changed bytes; it is not a
    defence against a collision crafted on purpose (the state folder is the user's own). Why XXH3 and not
    sha256: hashing a unit's 8 MB took 5.5% of a replay's CPU time with sha256 and 0.2% with XXH3
    (docs/benchmarks.md).
    """
    h = xxhash.xxh3_128(unit_key(unit).encode())
    for t in (base, expected):
        if t is None:
            h.update(b"\0none")
            continue
        t = t.detach().cpu().contiguous().reshape(-1)
        h.update(f"\0{t.dtype}\0{t.numel()}\0".encode())
        h.update(t.view(torch.uint8).numpy().data)
    return f"{DIGEST}:{h.hexdigest()}"


def current_digest(unit: Unit, base_w, expect_w) -> str:
    """`input_digest` of the bytes the unit reads now from readers freshly opened (the resume check, §6)."""
    base = _read(base_w, unit)
    expected = None if unit.layout else _read(expect_w, unit)
    return input_digest(unit, base, expected)


def run_unit(job: Job, unit: Unit) -> dict:
    """Replay one unit and compare it with the expected checkpoint (docs/replay.md §5).

    Returns a JSON-able dict: unit, name, start, end, replay and naive
    (each a `compare` result). Raises WeightsError for unreadable files.
    """
    base_w, exp_w = _weights(job.base), _weights(job.expect)
    # on the CPU every buffer of a unit is this worker's scratch, reused by the next unit (fresh pages cost
    # 3-4% of a unit); nothing of it outlives the unit but the returned dict (and the piece, written here)
    mine = scratch.scratch() if job.device == "cpu" else None
    base = _read(base_w, unit, None if mine is None else functools.partial(mine.take, "base"))
    expected = None if unit.layout else _read(exp_w, unit, None if mine is None else
                                              functools.partial(mine.take, "expected"))
    digest = input_digest(unit, base, expected)
    if unit.kind == "static":
        got = naive = base.to(job.device)     # never cast: a buffer of another dtype is a difference
    else:
        cast = base.to(device=job.device, dtype=getattr(torch, unit.dtype))
        with torch.no_grad():   # the read is this unit's own copy (hashed above): the replay may take it over
            got, naive = replay_elements(job, unit, cast, True, mine)
    if job.pieces is not None:
        _save_piece(job, unit, got)
    result = {"unit": unit.index, "name": unit.name, "start": unit.start, "end": unit.end,
              "key": unit_key(unit), "inputs": digest}
    if unit.layout:   # the checkpoint's dtype or shape is not the replay's: nothing to compare element-wise
        side = {"mismatches": max(unit.end - unit.start, 1), "first": None, "max_ulp": None, "layout": unit.layout}
        return {**result, "replay": side, "naive": dict(side)}
    return {**result, "replay": compare(got, expected, unit.start), "naive": compare(naive, expected, unit.start)}
