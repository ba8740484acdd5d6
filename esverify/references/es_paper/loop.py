"""Our side of the paper's original scripts: what their ``main()`` computes (docs/references.md §6).

Design record:
- One function, `run_paper_loop`, computes from the same inputs exactly the
  bits the scripts' loop does: `gpu_threads` identical model copies;
  members in batches of `gpu_threads`, member j of a batch on copy j (the
  script's thread j), so every copy carries the restore drift of the
  members it served earlier in the iteration (the restore ``add_(-SIGMA *
  noise)`` is not exact, docs/numerics.md §3 `es-paper`); the update on
  copy 0 with ITS drift; then every other copy takes copy 0's bits.
- The threads are not reproduced: each copy is touched by one member at a
  time and the reward is a function of that copy's bits, so running the
  members one after the other in member order gives the same bits.
- Numerics: the `es-paper` profile's kernels (esverify.references.es_paper.profile),
  the seed schedule `es-paper` (esverify.references.es_paper.schedule.seed_stream: a
  private legacy ``RandomState``, numpy's global generator is never
  touched) and `normalise` (numpy's own f32 mean and std).
- Noise: ``native`` is torch's own generator drawn the way the scripts
  draw it (a new ``torch.Generator`` per parameter, seeded `seed`, or
  ``seed + k`` for the k-th parameter in the ``_iid`` scripts;
  ``torch.randn(shape, dtype=param.dtype)``): bitwise only on the same
  device type and torch version. ``contract`` is the esverify RNG
  contract's noise for that seed (docs/references.md §3, §3a): the 30-bit
  seed IS the u64 member seed; the plain scripts are the `correlated`
  scheme, the ``_iid`` scripts' ``seed + k`` is the member's `iid` stream
  of slot k; ``randn(dtype=dt)`` is the f32 stream rounded to dt.
- Memory: one parameter's noise at a time (never N x P), plus the copies.

Checks: ``python -m pytest -q tests/test_es_paper_profile.py`` (against the
straight-line esverify.references.es_paper.model.loop, bitwise) and ``esverify
goldens check`` (goldens/es-paper.json).
"""
from __future__ import annotations

import math
from typing import Callable

import numpy as np
import torch

from esverify.rng import stream_seed as stream_seed_u64

from esverify.es.noise import NoiseSource
from esverify.es.numerics import DTYPES, widen
from . import profile as es_paper
from .schedule import seed_stream

NOISES = ("native", "contract")


def normalise(member_rewards) -> tuple[np.ndarray, np.ndarray]:
    """The scripts' reward normalisation: (r, (r - r.mean()) / (r.std() + 1e-8)), both f32 (N,).

    member_rewards: the N f64 member rewards in member order; each is
    rounded to f32 first (the script gathers them in a float32 tensor),
    then numpy computes in float32 (its pairwise mean, ddof-0 std; the
    1e-8 enters as an f32). Equal rewards give a tiny std: the coefficients
    are then (r - mean) / (std + 1e-8), not zeros (docs/numerics.md §3).
    NaN rewards propagate, as in the scripts.
    """
    r = np.asarray([float(x) for x in member_rewards], dtype=np.float64).astype(np.float32)
    with np.errstate(all="ignore"):
        norm = (r - r.mean()) / (r.std() + 1e-8)
    return r, np.asarray(norm, dtype=np.float32)


def _drawer(noise: str, iid: bool, mapping: str, backend):
    """draw(seed, slot, tensor) -> the script's draw for that parameter as a flat f32 tensor
    (exact widening of the dtype-dt noise) on the tensor's device."""
    if noise == "native":
        if backend is not None:
            raise ValueError(f"backend {backend!r} applies only to noise='contract' (torch draws its own noise)")

        def draw(seed, slot, t):
            g = torch.Generator(device=t.device)
            g.manual_seed(seed + slot if iid else seed)
            return widen(torch.randn(tuple(t.shape), generator=g, dtype=t.dtype, device=t.device).reshape(-1))
        return draw
    if noise == "contract":
        source = NoiseSource(mapping, backend)
        scheme = "iid" if iid else "correlated"

        def draw(seed, slot, t):
            eps = source.draw(stream_seed_u64(seed, slot, scheme), 0, t.numel(), t.device)
            return widen(eps.to(t.dtype))          # randn(dtype=dt) is the f32 contract value rounded to dt
        return draw
    raise ValueError(f"noise: unknown value {noise!r}; known: {NOISES}")


def _check(names, tensors, iterations, population, gpu_threads, dataset_size, sigma, alpha):
    if len(names) != len(tensors):
        raise ValueError(f"names has {len(names)} entries but tensors has {len(tensors)}")
    for name, t in zip(names, tensors):
        if not isinstance(t, torch.Tensor) or t.dtype not in DTYPES:
            raise ValueError(f"parameter {name!r} must be an f32/f16/bf16 torch tensor, got {type(t).__name__} "
                             f"{getattr(t, 'dtype', '')}")
    for field, v, low in (("iterations", iterations, 0), ("population", population, 1),
                          ("gpu_threads", gpu_threads, 1), ("dataset_size", dataset_size, 1)):
        if isinstance(v, bool) or not isinstance(v, int) or v < low:
            raise ValueError(f"{field} must be an int >= {low}, got {v!r}")
    for field, v in (("sigma", sigma), ("alpha", alpha)):
        if not isinstance(v, (int, float)) or not math.isfinite(v):
            raise ValueError(f"{field} must be a finite float, got {v!r}")


def run_paper_loop(names, tensors, *, iterations: int, population: int = 30, sigma: float = 0.001,
                   alpha: float = 0.0005, initial_seed: int = 33, gpu_threads: int = 4, iid: bool = False,
                   noise: str = "native", mapping: str = "poly32", backend: str | None = None,
                   prompt_rewards: Callable, dataset_size: int, record_copies: bool = False,
                   record_starts: bool = False) -> dict:
    """What ``main()`` of the paper's scripts computes, bit for bit (docs/references.md §6).

    names: parameter names in ``named_parameters()`` order; tensors: the
    initial parameters (f32/f16/bf16 torch tensors, any shapes, one device
    each; never modified: the copies are clones). iterations, population
    (POPULATION_SIZE), sigma (SIGMA), alpha (ALPHA), initial_seed (numpy's
    legacy seed, [0, 2**32)), gpu_threads (model copies): the script's
    constants and flag. iid: the ``_iid`` scripts (seed + k per parameter).
    noise: "native" (torch's generator) or "contract" (mapping "poly32" or
    "libm64", backend an esverify.rng backend name or None).
    prompt_rewards(params) -> the per-prompt f64 rewards of a model copy
    whose current parameters are `params` (a list of tensors in slot
    order; read them, do not keep or change them): the script's
    ``evaluate_model``. A member's reward is ``sum(those) / dataset_size``.
    record_copies: also return every copy's parameters before the last
    update (one more copy of every model copy, made once, at the last iteration).
    record_starts: also return copy 0's parameters as each iteration starts (a copy per iteration).

    Returns a plain dict (the tape):
      names: list[str]; profile "es-paper", profile_version int; noise, scheme ("correlated"/"iid"),
      mapping (None for native); gpu_threads int;
      seeds: list (per iteration) of lists of N ints in [0, 2**30);
      rewards: list of f32 numpy arrays (N,): the member rewards as the script's f32 tensor holds them;
      normalised: list of f32 numpy arrays (N,): the coefficients ``float(r_norm)`` the update uses;
      params: list of tensors: copy 0 after the last update (what the script saves);
      copies: per copy, its tensors at the end (all equal to params: the script's copy_);
      copies_before_update (only with record_copies): per copy, its tensors after the last
      iteration's members, before the update (the restore drift each copy carried; the
      initial tensors when iterations = 0);
      starts (only with record_starts): per iteration k, copy 0's tensors as it starts (after k updates:
      what ``run_paper_loop(..., iterations=k)["params"]`` returns, without running the loop again).

    Raises ValueError naming the argument for bad sizes, dtypes, noise, mapping or backend, and
    an initial_seed outside [0, 2**32).
    """
    names, tensors = list(names), list(tensors)
    _check(names, tensors, iterations, population, gpu_threads, dataset_size, sigma, alpha)
    draw = _drawer(noise, iid, mapping, backend)
    seeds_of = seed_stream(initial_seed, population)
    prof = es_paper.PROFILE
    rule = es_paper.rule_for(tensors[0].device) if tensors else es_paper.RULE
    with torch.no_grad():
        copies = [[t.detach().clone().contiguous() for t in tensors] for _ in range(gpu_threads)]
        tape = {"names": names, "profile": prof.name, "profile_version": prof.version, "noise": noise,
                "scheme": "iid" if iid else "correlated", "mapping": mapping if noise == "contract" else None,
                "gpu_threads": gpu_threads, "seeds": [], "rewards": [], "normalised": []}
        starts = []
        before = [[t.clone() for t in c] for c in copies] if record_copies else None
        for it in range(iterations):
            if record_starts:
                starts.append([t.clone() for t in copies[0]])
            seeds = next(seeds_of)
            rewards = _evaluate(prof, rule, copies, draw, seeds, sigma,
                                lambda model: sum(prompt_rewards(model)) / dataset_size)
            r, norm = normalise(rewards)
            if record_copies and it == iterations - 1:
                before = [[t.clone() for t in c] for c in copies]
            _update(prof, rule, copies, draw, seeds, [float(c) for c in norm], prof.scale(alpha, population))
            tape["seeds"].append(list(seeds))
            tape["rewards"].append(r)
            tape["normalised"].append(norm)
    tape["params"] = copies[0]
    tape["copies"] = copies
    if record_copies:
        tape["copies_before_update"] = before
    if record_starts:
        tape["starts"] = starts
    return tape


def _evaluate(prof, rule, copies, draw, seeds, sigma: float, member_reward) -> list:
    """One iteration's member rewards, in batches of the copies: member j of a batch perturbs copy j, is
    scored by member_reward(copy), and restores it (the restore's drift stays on the copy)."""
    population, gpu_threads = len(seeds), len(copies)
    rewards = [0.0] * population
    for start in range(0, population, gpu_threads):
        for j, member in enumerate(range(start, min(population, start + gpu_threads))):
            model = copies[j]
            _perturb(prof, rule, model, draw, seeds[member], sigma)
            rewards[member] = member_reward(model)
            _perturb(prof, rule, model, draw, seeds[member], -sigma)
    return rewards


def _update(prof, rule, copies, draw, seeds, coeffs: list, scale) -> None:
    """The update on copy 0 (with its own drift), every member's noise accumulated slot by slot, then
    every other copy takes copy 0's bits."""
    for slot, t in enumerate(copies[0]):
        flat, n = t.view(-1), t.numel()
        acc = prof.new_acc(n, t.dtype, t.device)
        for member, c in enumerate(coeffs):
            acc = prof.accumulate(acc, draw(seeds[member], slot, t), c, t.dtype, rule, 0, n)
        prof.apply(flat, acc, scale, rule, 0, n, flat)
    for j in range(1, len(copies)):
        for dst, src in zip(copies[j], copies[0]):
            dst.copy_(src)


def _perturb(prof, rule, model, draw, seed: int, s: float) -> None:
    """model <- model + s * noise, parameter by parameter (one parameter's noise at a time)."""
    for slot, t in enumerate(model):
        flat, n = t.view(-1), t.numel()
        prof.perturb(flat, draw(seed, slot, t), s, rule, 0, n, flat)
