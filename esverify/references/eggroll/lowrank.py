"""Our side of EGGROLL's loop: the `lowrank` numerics profile (docs/numerics.md §9).

Design record:
- Noise is per (generation s, pair k, weight l), never per member
  (`contract.factor_source`); s = es_step // steps_per_adapter, so one
  generation serves `steps_per_adapter` steps and every update of those
  steps redraws the same streams.
- Members are evaluated with f16 adapters (`adapter_factors`): A =
  f16(a·rd32(√σ)), B = f16(±b·rd32(√(σ/r))), + for an even member, - for
  an odd one (the sign on B only). What decides a member's reward is the
  perturbation B·A the engine applies, `evaluated_perturbation`: f64
  products of the f16 values (exact), summed in j = 0..r-1 order, one
  rounding to f16. Parity compares that, not the factors' bytes, so a fork
  that moves the sign onto A evaluates the same members.
- The update uses the unrounded f32 factors, in chunks of pairs, with
  torch's own kernels as the reference calls them (`torch.mm` on the
  rank-1 path, `torch.bmm` then ``sum(0)`` above): their summation order
  is torch's, so our side calls the same ops on the same shapes rather
  than restating them. Δ is rounded to the parameter dtype and then added
  in place (two roundings in f16/bf16).
- Memory: one chunk of pairs' factors and one (out x in) accumulator per
  weight; no N x P tensor. `run_lowrank_loop` keeps, for the parity rows,
  every member's evaluated perturbation (switch off with
  ``keep_perturbations=False``) and engine 0's weights after every update.

Checks: ``python -m pytest -q tests/test_eggroll_lowrank.py`` (G1-G4 of
the real code, properties) and ``esverify goldens check --area eggroll``.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Callable, Mapping, Sequence

import numpy as np
import torch

from .contract import factor_source

#: The profile's version (docs/numerics.md §9); a change of any computed bit bumps it (CHANGELOG ``## lowrank v<N>``).
VERSION = 1
#: the guard of the update's divisor: 1 / (N·σ + 1e-8)
UPDATE_EPS = 1e-8
#: the guard of the std normalisation: f / (std(f) + 1e-8)
STD_EPS = 1e-8
PARAM_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


@dataclass(frozen=True)
class LowRankProfile:
    """The profile `lowrank` as the profile registry's named value (docs/numerics.md §9).

    Neither a Trainer `Profile` (no chunk kernels) nor the skill sample's loop profile: its kernels are
    this module's functions (adapter_factors, evaluated_perturbation, shape_fitness, pair_differences,
    update_delta, apply_delta_), which run_lowrank_loop drives. name, version, version_constant: as for
    every profile (a change of any computed bit bumps `version`, with ``## lowrank v<N>`` in CHANGELOG.md)."""
    name: str
    version: int
    version_constant: str


PROFILE = LowRankProfile(name="lowrank", version=VERSION, version_constant="esverify.references.eggroll.lowrank.VERSION")


# ----------------------------------------------------------------------------- adapters

def adapter_factors(a: torch.Tensor, b: torch.Tensor, sigma: float, rank: int,
                    member: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The f16 LoRA factors member `member` is evaluated with (docs/numerics.md §9.2).

    a: f32 (r, in), b: f32 (out, r) of the member's pair. Returns
    (A f16 (r, in), B f16 (out, r)) on a's device: A = f16(rd32(a ·
    rd32(√σ))), B = f16(rd32(b · rd32(s·√(σ/r)))) with s = +1 for an even
    member, -1 for an odd one (√ of Python floats, f64, correctly rounded;
    the tensor-by-scalar product rounds the scalar to f32, as torch does).
    """
    if a.dtype != torch.float32 or b.dtype != torch.float32:
        raise ValueError(f"factors must be f32, got a {a.dtype}, b {b.dtype}")
    sign = 1.0 if int(member) % 2 == 0 else -1.0
    A = (a * math.sqrt(sigma)).to(torch.float16)
    B = (b * (sign * math.sqrt(sigma / rank))).to(torch.float16)
    return A, B


def evaluated_perturbation(A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
    """B·A in f16, as our side defines the engine's applied perturbation (docs/numerics.md §9.2).

    A: f16 (r, in), B: f16 (out, r). Each product B[i, j]·A[j, k] is exact
    in f64 (11 + 11 significant bits); the r products are summed in f64 in
    j order (an elementwise numpy loop, no BLAS, so the order is fixed)
    and the sum is rounded once to f16 (numpy's f64 -> f16 conversion,
    nearest-even). Returns an f16 CPU tensor (out, in). Changing the sign
    of A instead of B gives the same bits (negation is exact).
    """
    if A.dtype != torch.float16 or B.dtype != torch.float16 or A.shape[0] != B.shape[1]:
        raise ValueError(f"want f16 A (r, in) and B (out, r), got A {A.dtype} {tuple(A.shape)}, "
                         f"B {B.dtype} {tuple(B.shape)}")
    a64 = A.detach().cpu().numpy().astype(np.float64)
    b64 = B.detach().cpu().numpy().astype(np.float64)
    # the sum starts from the first product, not from +0.0: +0.0 + (-0.0) is +0.0, and a product of -0.0
    # (one rank, or every product -0.0) must keep its sign, as torch's B @ A keeps it
    acc = np.multiply.outer(b64[:, 0], a64[0, :]) if a64.shape[0] else np.zeros((b64.shape[0], a64.shape[1]))
    for j in range(1, a64.shape[0]):
        acc += np.multiply.outer(b64[:, j], a64[j, :])
    with np.errstate(over="ignore"):     # beyond f16's range the IEEE result is +-inf
        return torch.from_numpy(acc.astype(np.float16))


_LORA = re.compile(r"^(?P<stem>.*_proj)\.lora_(?P<which>[AB])(?:\.default)?\.weight$")


def adapter_perturbations(adapter: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """B·A per targeted weight from an adapter's tensors (the safetensors file a member is served).

    adapter: ``<stem>_proj.lora_A.weight`` (r, in) and ``<stem>_proj.lora_B.weight``
    (out, r) f16 tensors, peft names (``.default`` tolerated). Returns
    ``<stem>_proj.base_layer.weight`` -> `evaluated_perturbation(A, B)`,
    the keys of `run_lowrank_loop`'s perturbations. ValueError naming an
    unpaired factor or a name of another form.
    """
    pairs: dict[str, dict] = {}
    for name, tensor in adapter.items():
        m = _LORA.match(name)
        if m is None:
            raise ValueError(f"adapter tensor {name!r} is not <...>_proj.lora_A.weight or .lora_B.weight")
        pairs.setdefault(m["stem"], {})[m["which"]] = tensor
    out = {}
    for stem, factors in pairs.items():
        if set(factors) != {"A", "B"}:
            raise ValueError(f"adapter has lora_{''.join(factors)} but not both factors for {stem!r}")
        out[f"{stem}.base_layer.weight"] = evaluated_perturbation(factors["A"], factors["B"])
    return out


# ----------------------------------------------------------------------------- shaping

def shape_fitness(F, normalize_with_std: bool, nonfinite: bool = False) -> tuple[np.ndarray, float]:
    """Per-prompt centring and optional std normalisation (docs/numerics.md §9.3).

    F: (N members, P prompts) rewards, converted to a C-contiguous f64
    numpy array. mu_j = mean over members of column j; f_m = mean over
    prompts of (F_mj - mu_j) (subtract, then average); with
    `normalize_with_std`, f <- f / (std(f) + 1e-8), numpy's ddof-0 std.
    Returns (f: new f64 array (N,), std of the unnormalised f as a float).
    ValueError for a non-2-D F or a non-finite reward (named by member and prompt); nonfinite: take NaN and
    infinite rewards as the reference does, through the same arithmetic (the parity rows of non-finite
    rewards, docs/parity.md "Reward populations").
    """
    F = np.ascontiguousarray(np.asarray(F, dtype=np.float64))
    if F.ndim != 2 or F.shape[0] < 2 or F.shape[1] < 1:
        raise ValueError(f"fitness matrix must be (members >= 2, prompts >= 1), got shape {F.shape}")
    bad = np.argwhere(~np.isfinite(F))
    if len(bad) and not nonfinite:
        m, j = bad[0]
        raise ValueError(f"reward of member {m}, prompt {j} is {F[m, j]!r}: not finite")
    with np.errstate(invalid="ignore", over="ignore"):
        mu = F.mean(axis=0)
        f = (F - mu).mean(axis=1)
        std = float(f.std())
        if normalize_with_std:
            f = f / (std + STD_EPS)
    return f, std


def pair_differences(f) -> np.ndarray:
    """d_k = rd32(f_2k - f_2k+1): the f64 difference rounded once to f32; (N/2,) float32 numpy."""
    f = np.asarray(f, dtype=np.float64)
    if f.ndim != 1 or f.shape[0] % 2:
        raise ValueError(f"shaped fitness must be 1-D with an even length, got shape {f.shape}")
    return (f[0::2] - f[1::2]).astype(np.float32)


# ----------------------------------------------------------------------------- update

def default_chunk(rank: int, pairs: int, chunk_size: int | None = None) -> int:
    """Pairs per update chunk: `chunk_size` capped at `pairs`; else min(128|64|32, pairs) for r <= 2 | <= 8 | above."""
    if chunk_size is not None:
        if isinstance(chunk_size, bool) or not isinstance(chunk_size, (int, np.integer)) or chunk_size < 1:
            raise ValueError(f"chunk_size must be a positive int or None, got {chunk_size!r}")
        return min(int(chunk_size), pairs)
    return min(128 if rank <= 2 else 64 if rank <= 8 else 32, pairs)


def update_delta(factors: Callable[[int], tuple], out_features: int, in_features: int, rank: int,
                 differences, sigma: float, lr: float, population: int, chunk: int,
                 scale_lr_in_grad: bool = False) -> torch.Tensor:
    """Δ of one targeted weight (docs/numerics.md §9.4), an f32 CPU tensor (out, in).

    factors(k) -> (a f32 (r, in), b f32 (out, r)) of pair k; differences:
    the P f32 pair differences. G (f32, zero) accumulates, per chunk of
    `chunk` consecutive pairs, the product of the stacked a·rd32(√σ) and
    b·rd32(√(σ/r)) weighted by d_k: for r = 1 ``torch.mm((b·d)ᵀ, a)`` of
    the (c x out) and (c x in) matrices, for r > 1 ``(torch.bmm(b, a) ·
    d).sum(0)``. Then Δ = (G · rd32(1/(N·σ + 1e-8))) · rd32(lr), and with
    `scale_lr_in_grad` · rd32(√N): separate f32 multiplies in that order.
    """
    d = torch.from_numpy(np.ascontiguousarray(np.asarray(differences, dtype=np.float32)))
    pairs = d.shape[0]
    sa, sb = math.sqrt(sigma), math.sqrt(sigma / rank)
    G = torch.zeros((out_features, in_features), dtype=torch.float32)
    for k0 in range(0, pairs, chunk):
        ks = range(k0, min(k0 + chunk, pairs))
        drawn = [factors(k) for k in ks]
        a = torch.stack([x[0] for x in drawn]) * sa          # (c, r, in)
        b = torch.stack([x[1] for x in drawn]) * sb          # (c, out, r)
        dc = d[k0:k0 + len(ks)]
        if rank == 1:
            part = torch.mm((b.squeeze(-1) * dc.unsqueeze(1)).t(), a.squeeze(1))
        else:
            part = (torch.bmm(b, a) * dc.view(-1, 1, 1)).sum(0)
        G += part
    delta = (G * (1.0 / (population * sigma + UPDATE_EPS))) * lr
    if scale_lr_in_grad:
        delta = delta * math.sqrt(population)
    return delta


def apply_delta_(target: torch.Tensor, delta: torch.Tensor) -> torch.Tensor:
    """target += rd_dt(Δ), in place: Δ rounded to target's dtype, then the add rounds again (f16/bf16)."""
    if tuple(target.shape) != tuple(delta.shape):
        raise ValueError(f"update of shape {tuple(delta.shape)} does not fit its slice {tuple(target.shape)}")
    target.add_(delta.to(target.dtype))
    return target


# ----------------------------------------------------------------------------- where the update lands

_PEFT = re.compile(r"^base_model\.model\.(?P<rest>.*\.(?P<proj>q|k|v|o|gate|up|down)_proj)\.base_layer\.weight$")
_FUSED = {"q": "qkv", "k": "qkv", "v": "qkv", "gate": "gate_up", "up": "gate_up"}
_FUSED_ORDER = {"qkv": ("q", "k", "v"), "gate_up": ("gate", "up")}


@dataclass(frozen=True)
class Target:
    """Where one targeted weight's update lands: rows [row_start, row_stop) of vLLM tensor `name`."""
    name: str
    row_start: int
    row_stop: int


def slice_map(peft_shapes: Sequence[tuple[str, tuple]]) -> dict[str, Target]:
    """peft weight name -> Target (docs/numerics.md §9.5), for the (name, (out, in)) list in peft order.

    ``base_model.model.<rest>.<p>_proj.base_layer.weight`` lands in vLLM
    tensor ``<rest>.<fused>_proj.base_layer.weight``: q, k, v in rows
    [0, q), [q, q+k), [q+k, q+k+v) of qkv_proj; gate, up in rows [0, I),
    [I, 2I) of gate_up_proj; o_proj and down_proj whole. ValueError names
    a name that does not have this form.
    """
    shapes = {}
    parsed = []
    for name, shape in peft_shapes:
        m = _PEFT.match(name)
        if m is None:
            raise ValueError(f"targeted weight {name!r} is not a peft name "
                             f"base_model.model.<...>.<q|k|v|o|gate|up|down>_proj.base_layer.weight")
        parsed.append((name, m["rest"], m["proj"]))
        shapes[m["rest"]] = (int(shape[0]), int(shape[1]))
    out = {}
    for name, rest, proj in parsed:
        prefix = rest[: -len(proj + "_proj")]
        fused = _FUSED.get(proj)
        if fused is None:
            out[name] = Target(f"{rest}.base_layer.weight", 0, shapes[rest][0])
            continue
        start = 0
        for part in _FUSED_ORDER[fused]:
            if part == proj:
                break
            sibling = shapes.get(f"{prefix}{part}_proj")
            if sibling is None:
                raise ValueError(f"{name!r} lands in {fused}_proj after {part}_proj, which is not targeted")
            start += sibling[0]
        out[name] = Target(f"{prefix}{fused}_proj.base_layer.weight", start, start + shapes[rest][0])
    return out


def engine_members(population: int, engines: int) -> list[range]:
    """Members of each engine: engine i holds i·N/E .. (i+1)·N/E - 1; ValueError unless E divides N."""
    if engines < 1 or population % engines:
        raise ValueError(f"population {population} must be divisible by the engine count {engines}")
    per = population // engines
    return [range(i * per, (i + 1) * per) for i in range(engines)]


def apply_update_(weights: Mapping[str, torch.Tensor], peft_shapes: Sequence[tuple[str, tuple]], shaped, *,
                  sigma: float, lr: float, rank: int, generation: int, source, chunk: int | None = None,
                  scale_lr_in_grad: bool = False, targets: dict | None = None) -> np.ndarray:
    """One update of engine 0 (docs/numerics.md §9.4-§9.5), in place on `weights`; returns the f32 pair differences.

    weights: vLLM-named CPU tensors; shaped: the N f64 shaped fitnesses;
    source: `contract.factor_source(...)` of the run; generation: es_step
    // steps_per_adapter; chunk: pairs per chunk or None for the default
    of `rank` (capped at the pair count). Every targeted weight, in peft order, gets its Δ added to
    its slice (`slice_map`).
    """
    targets = slice_map(peft_shapes) if targets is None else targets
    d = pair_differences(shaped)
    population = 2 * d.shape[0]
    chunk = default_chunk(rank, d.shape[0], chunk)
    for l, (name, (out_f, in_f)) in enumerate(peft_shapes):
        delta = update_delta(lambda k, l=l, o=out_f, i=in_f: source(generation, k, l, rank, o, i), out_f, in_f,
                             rank, d, sigma, lr, population, chunk, scale_lr_in_grad)
        t = targets[name]
        apply_delta_(weights[t.name][t.row_start:t.row_stop], delta)
    return d


# ----------------------------------------------------------------------------- the loop

#: reward(es_step, member, weights (vLLM name -> tensor, read only), perturbations (peft name -> f16 (out, in)))
#: -> one float per prompt
Reward = Callable[[int, int, Mapping[str, torch.Tensor], Mapping[str, torch.Tensor]], Sequence[float]]


@dataclass
class LowRankRun:
    """What a parity row compares (docs/numerics.md §9.6), per step in es_step order.

    steps: the es_step values run. rewards: per step the (N, P) f64 matrix
    F. shaped: per step the f64 (N,) fitnesses the update used. stds: per
    step the std of the unnormalised f. differences: per step the f32 (N/2,)
    pair differences. perturbations: generation -> per member a dict peft
    name -> f16 (out, in) B·A (empty with keep_perturbations=False).
    weights: per step engine 0's vLLM-named tensors after that update
    (every engine holds the same bits after the step's synchronisation).
    updates: the number of updates applied.
    """
    steps: list = field(default_factory=list)
    rewards: list = field(default_factory=list)
    shaped: list = field(default_factory=list)
    stds: list = field(default_factory=list)
    differences: list = field(default_factory=list)
    perturbations: dict = field(default_factory=dict)
    weights: list = field(default_factory=list)
    updates: int = 0

    def generation(self, step: int, steps_per_adapter: int) -> int:
        return step // steps_per_adapter


def is_int(value) -> bool:
    """True for a Python or numpy integer, never for a bool (JSON's true must not pass as 1)."""
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool)


def check_settings(population, sigma, lr, rank, steps_per_adapter, start_step, steps=None, engines: int = 1) -> None:
    """The loop's own checks of its scalar settings (docs/numerics.md §9.6), shared by `run_lowrank_loop` and
    the replay of its run log (which has no `steps`: None checks start_step >= 0 alone). ValueError naming
    the first bad setting and its value; never a ZeroDivisionError or a math domain error later."""
    if not is_int(population) or population < 2 or population % 2:
        raise ValueError(f"population must be an even int >= 2, got {population!r}")
    engine_members(population, engines)
    for name, value in (("sigma", sigma), ("lr", lr)):
        if isinstance(value, bool) or not isinstance(value, (int, float, np.floating, np.integer)) \
                or not math.isfinite(float(value)):
            raise ValueError(f"{name} must be a finite number, got {value!r}")
    if not float(sigma) > 0:
        raise ValueError(f"sigma must be > 0, got {sigma!r}")
    if not is_int(rank) or rank < 1:
        raise ValueError(f"rank must be an int >= 1, got {rank!r}")
    if not is_int(steps_per_adapter) or steps_per_adapter < 1:
        raise ValueError(f"steps_per_adapter must be an int >= 1, got {steps_per_adapter!r}")
    if steps is None:
        if not is_int(start_step) or start_step < 0:
            raise ValueError(f"start_step must be an int >= 0, got {start_step!r}")
    elif not is_int(steps) or not is_int(start_step) or not 0 <= start_step <= steps:
        raise ValueError(f"want ints 0 <= start_step <= steps, got start_step {start_step!r}, steps {steps!r}")


def _check_run(weights, peft_shapes, population, sigma, lr, rank, steps, steps_per_adapter, engines, start_step):
    check_settings(population, sigma, lr, rank, steps_per_adapter, start_step, steps, engines)
    targets = slice_map(peft_shapes)
    for name, shape in peft_shapes:
        t = targets[name]
        if t.name not in weights:
            raise ValueError(f"{name!r} lands in vLLM tensor {t.name!r}, which the weights do not have")
        w = weights[t.name]
        if w.dtype not in PARAM_DTYPES or w.device.type != "cpu":
            raise ValueError(f"{t.name!r} is {w.dtype} on {w.device}; the profile runs f32/f16/bf16 on CPU")
        if w.dim() != 2 or w.shape[1] != shape[1] or w.shape[0] < t.row_stop:
            raise ValueError(f"{name!r} ({shape[0]} x {shape[1]}) does not fit rows [{t.row_start}, "
                             f"{t.row_stop}) of {t.name!r} {tuple(w.shape)}")
    return targets


def run_lowrank_loop(weights: Mapping[str, torch.Tensor], peft_shapes: Sequence[tuple[str, tuple]], *,
                     population: int, sigma: float, lr: float, rank: int, steps: int, reward: Reward,
                     steps_per_adapter: int = 4, normalize_with_std: bool = False,
                     scale_lr_in_grad: bool = False, chunk_size: int | None = None, engines: int = 1,
                     noise: str = "native", base_seed: int = 0, seed=None, mapping: str = "poly32",
                     backend: str | None = None, start_step: int = 0,
                     keep_perturbations: bool = True, run_log=None, nonfinite: bool = False) -> LowRankRun:
    """EGGROLL's loop on our side (docs/numerics.md §9.6): es_step = start_step .. steps - 1.

    weights: vLLM-named CPU tensors (f32/f16/bf16), engine 0's at
    `start_step` (copied, never modified). peft_shapes: (peft name,
    (out, in)) of the targeted weights in peft order (its index is the
    weight index l). Per step: generation s = es_step // steps_per_adapter;
    every member m (pair k = m // 2, engine m // (N/E)) gets its B·A per
    weight and `reward(es_step, m, weights, perturbations)` returns its
    P per-prompt fitnesses; F (N x P) is shaped, the pair differences
    taken, and every targeted weight, in peft order, receives its Δ in its
    slice. noise: "native" (torch's generator, `base_seed`) or "contract"
    (`seed`, default base_seed, `mapping`, `backend`). A resume passes the
    checkpoint's weights and start_step = its es_step + 1. run_log: a
    folder to write the run log `esverify replay` verifies (args.json and
    one file per step, esverify.references.eggroll.logfile).
    Raises ValueError (named) before any work on bad arguments, and on a
    reward list of the wrong length or a non-finite reward (nonfinite: a
    NaN or infinite reward goes through the reference's arithmetic instead,
    for the parity rows of non-finite rewards).
    """
    targets = _check_run(weights, peft_shapes, population, sigma, lr, rank, steps, steps_per_adapter,
                         engines, start_step)
    pairs, layers = population // 2, len(peft_shapes)
    chunk = default_chunk(rank, pairs, chunk_size)
    source = factor_source(noise, base_seed, pairs, layers, seed, mapping, backend)
    state = {name: t.detach().clone() for name, t in weights.items()}
    run = LowRankRun()
    if run_log is not None:
        from . import logfiles
        logfiles.write_args(run_log, logfiles.settings_of(
            peft_shapes, population=population, sigma=float(sigma), lr=float(lr), rank=rank,
            steps_per_adapter=steps_per_adapter, normalize_with_std=bool(normalize_with_std),
            scale_lr_in_grad=bool(scale_lr_in_grad), chunk_size=chunk_size, noise=noise, base_seed=int(base_seed),
            seed=None if seed is None else int(seed), mapping=mapping, start_step=start_step))
    for step in range(start_step, steps):
        s = step // steps_per_adapter
        rows = []
        perturbations = run.perturbations.get(s) if keep_perturbations else None
        fresh = perturbations is None
        if fresh:
            perturbations = _member_perturbations(source, s, peft_shapes, population, sigma, rank)
        view = {name: t for name, t in state.items()}
        for m in range(population):
            got = np.asarray(reward(step, m, view, perturbations[m]), dtype=np.float64)
            if got.ndim != 1 or (rows and got.shape != rows[0].shape) or not got.size:
                raise ValueError(f"step {step}: reward of member {m} has shape {got.shape}; every member "
                                 f"must return the same number (>= 1) of per-prompt fitnesses")
            rows.append(got)
        if keep_perturbations and fresh:
            run.perturbations[s] = perturbations
        F = np.stack(rows)
        f, std = shape_fitness(F, normalize_with_std, nonfinite)
        d = apply_update_(state, peft_shapes, f, sigma=sigma, lr=lr, rank=rank, generation=s, source=source,
                          chunk=chunk, scale_lr_in_grad=scale_lr_in_grad, targets=targets)
        if run_log is not None:
            logfiles.write_step(run_log, step, s, F, f)
        run.steps.append(step)
        run.rewards.append(F)
        run.shaped.append(f)
        run.stds.append(std)
        run.differences.append(d)
        run.weights.append({name: t.clone() for name, t in state.items()})
        run.updates += 1
    return run


def _member_perturbations(source, generation, peft_shapes, population, sigma, rank) -> list[dict]:
    """Per member, peft name -> f16 B·A for one generation (each pair's factors drawn once)."""
    out = [dict() for _ in range(population)]
    for k in range(population // 2):
        for l, (name, (out_f, in_f)) in enumerate(peft_shapes):
            a, b = source(generation, k, l, rank, out_f, in_f)
            for m in (2 * k, 2 * k + 1):
                A, B = adapter_factors(a, b, sigma, rank, m)
                out[m][name] = evaluated_perturbation(A, B)
    return out
