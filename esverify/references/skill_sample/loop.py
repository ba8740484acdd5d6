"""Our side of the ES fine-tuning skill page's sample loop (docs/numerics.md §8).

Design record:
- `run_skill_loop` computes what the page's ``es_train_loop`` computes, on
  one flat parameter vector (``parameters_to_vector``), with the roundings
  of the `skill-sample` profile (esverify.references.skill_sample.profile). It is
  a loop of its own, not the Trainer: the page's algorithm differs from the
  paper's (f64 noise from numpy, utilities weights by member number, f64
  accumulation, lr / sigma as the step scale).
- Seeds: member m of generation g draws seed ``seed_base + g * N + m``.
  Noise of a seed, f64, as numpy returns it to the page:
  ``native``: numpy's own legacy MT19937 stream,
  ``np.random.RandomState(seed).randn(n)`` (equal to ``np.random.seed(seed);
  np.random.randn(n)``; this module never touches numpy's global
  generator); ``contract``: the esverify RNG contract's f32 gaussian
  stream of the u64 member seed = that integer seed, ``correlated`` scheme
  (the flat vector is one tensor, slot 0, so the stream seed is the seed
  itself; docs/CONTRACT.md §4), widened exactly to f64: what the child's
  numpy hook returns from ``np.random.randn``.
- Memory: one member's f64 noise at a time, plus the f64 accumulator and
  the vectors the page itself holds (params_current, the perturbed copy).
- The page's defects are computed, not repaired (a parity run must see
  them): utilities indexed by member number, a global sized for 30
  members (a larger population is refused here with the IndexError the
  page raises, named), the model left at the last member's perturbed
  vector, overlapping seeds between runs. `utilities_by_member_demo` and
  `seed_overlaps` / `seed_overlap_finding` are pure helpers for the
  adapter that reports them as findings.

Checks: ``python -m pytest -q tests/test_skill_sample_profile.py``.
"""
from __future__ import annotations

import math
from typing import Callable

import numpy as np
import torch

from esverify import bits as _bits
from esverify import rng as _rng
from . import profile as P

NOISES = ("native", "contract")
#: numpy's legacy seeding refuses seeds outside [0, 2**32)
SEED_BOUND = 1 << 32
#: the page's defaults: es_train_loop(..., generations=100, population_size=30, sigma=0.017, lr=0.001, seed_base=42)
DEFAULTS = {"generations": 100, "population": 30, "sigma": 0.017, "lr": 0.001, "seed_base": 42}


def member_seed(seed_base: int, generation: int, population: int, member: int) -> int:
    """The page's seed of (generation, member): ``seed_base + generation * population + member``."""
    return seed_base + generation * population + member


def check_seed(seed) -> int:
    """`seed` as an int in [0, 2**32); ValueError otherwise (numpy's legacy ``np.random.seed`` raises there)."""
    if isinstance(seed, (bool, np.bool_)) or not isinstance(seed, (int, np.integer)):
        raise TypeError(f"seed must be an int, got {type(seed).__name__} {seed!r}")
    seed = int(seed)
    if not 0 <= seed < SEED_BOUND:
        raise ValueError(f"seed {seed} is outside [0, 2**32): numpy's legacy np.random.seed refuses it, "
                         f"so the page's es_train_loop raises there")
    return seed


def native_noise(seed: int, n: int) -> np.ndarray:
    """numpy's legacy stream: ``np.random.RandomState(seed).randn(n)``, f64 of shape (n,).

    Equal to ``np.random.seed(seed); np.random.randn(n)``, the page's draw,
    without touching numpy's global generator. ValueError for a seed outside [0, 2**32).
    """
    return np.random.RandomState(check_seed(seed)).randn(int(n))


def contract_noise(seed: int, n: int, mapping: str = "poly32", backend: str | None = None) -> np.ndarray:
    """The contract's f32 gaussian stream of u64 member seed `seed`, slot 0, correlated, widened to f64.

    Shape (n,), dtype float64 (every value an exact f32). mapping: "poly32"
    or "libm64"; backend: an esverify.rng backend name or None (poly32
    values never depend on it). ValueError for a seed outside [0, 2**32)
    (the page seeds numpy's legacy generator, which refuses it).
    """
    stream = _rng.stream_seed(check_seed(seed), 0, "correlated")
    return np.asarray(_rng.gaussian(stream, int(n), 0, mapping, backend=backend), dtype=np.float64)


def noise_source(noise: str, mapping: str = "poly32", backend: str | None = None) -> Callable[[int, int], np.ndarray]:
    """(seed, n) -> f64 noise for `noise` ("native" or "contract"); ValueError naming a bad `noise`."""
    if noise == "native":
        if backend is not None:
            raise ValueError(f"backend {backend!r} applies only to noise='contract' (native noise is numpy's)")
        return native_noise
    if noise == "contract":
        _rng.get_mapping(mapping)                           # fail before the first member
        if backend is not None:
            _rng.backends.check_backend(backend)
        return lambda seed, n: contract_noise(seed, n, mapping, backend)
    raise ValueError(f"noise: unknown value {noise!r}; known: {NOISES}")


def zscore(rewards) -> np.ndarray:
    """The page's z-score: r = np.array(rewards, f64); ``(r - r.mean()) / (r.std() + 1e-8)`` (ddof 0).

    Returns a new f64 array of the rewards' length; NaN rewards propagate (the page does not check).
    """
    r = np.array(rewards, dtype=np.float64)
    return (r - r.mean()) / (r.std() + P.ZSCORE_EPS)


def check_population(population) -> int:
    """`population` as an int in [1, 30]; ValueError naming the page's IndexError above 30."""
    if isinstance(population, bool) or not isinstance(population, (int, np.integer)) or population < 1:
        raise ValueError(f"population must be an int >= 1, got {population!r}")
    if population > P.GLOBAL_POPULATION:
        raise ValueError(f"population {population} > {P.GLOBAL_POPULATION}: the page's module global "
                         f"`utilities` has {P.GLOBAL_POPULATION} entries and is indexed by member number, so "
                         f"es_train_loop raises IndexError: index {P.GLOBAL_POPULATION} is out of bounds "
                         f"(docs/numerics.md §8)")
    return int(population)


def _check_args(flat, generations, population, sigma, lr, seed_base) -> int:
    P.check_dtype(flat)
    population = check_population(population)
    if isinstance(generations, bool) or not isinstance(generations, (int, np.integer)) or generations < 0:
        raise ValueError(f"generations must be an int >= 0, got {generations!r}")
    for name, v in (("sigma", sigma), ("lr", lr)):
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            raise ValueError(f"{name} must be a finite float, got {v!r}")
    if sigma == 0:
        raise ValueError("sigma must be non-zero: the page divides lr by sigma (ZeroDivisionError)")
    check_seed(seed_base)
    if generations:
        check_seed(member_seed(seed_base, generations - 1, population, population - 1))
    return population


def run_skill_loop(flat: torch.Tensor, *, generations: int, population: int, sigma: float, lr: float,
                   seed_base: int = 42, noise: str = "native", mapping: str = "poly32",
                   backend: str | None = None, reward: Callable[[torch.Tensor], float]) -> dict:
    """The page's es_train_loop on our side, profile `skill-sample` v1 (docs/numerics.md §8).

    flat: the flat parameter vector (1-D CPU or CUDA tensor, f32, f16 or bf16;
    ``parameters_to_vector(model.parameters())``); it is not modified.
    generations >= 0, 1 <= population <= 30, sigma != 0 and lr finite
    Python floats, seed_base an int. noise: "native" (numpy's legacy
    stream) or "contract" (mapping "poly32"/"libm64" on esverify.rng
    `backend`, None for the fastest). reward: called with each member's
    perturbed flat vector (a tensor of flat's dtype, shape and device) in
    member order, returns a real number, taken with ``float`` (the page's
    ``np.array`` of the Python floats its reward_fn returns is f64).

    Per generation g: member m draws seed ``seed_base + g*N + m``, its f64
    noise, and is evaluated at ``perturb(params, noise, sigma)``; then
    z = the page's z-score of the rewards, acc = sum over m in member order
    of ``utilities[m] * noise_m * z[m]`` (f64, the noise regenerated), and
    ``params = apply(params, acc, lr, sigma)``.

    Returns {"params": the final flat vector (the page's params_current,
    flat's dtype), "tape": one dict per generation with "generation" (int),
    "seeds" (list of N ints), "rewards" (f64 array, N), "z" (f64 array, N),
    "model" (the vector the page leaves in the model after the generation:
    the LAST member's perturbed vector, not params_current), "params"
    (params_current after the update); "utilities": the f64 weights used
    (utilities[:N]), "profile", "version", "noise", "mapping" (None for native)}.

    Raises ValueError before any work for a population above 30 (the
    page's IndexError, named), a seed outside [0, 2**32) (numpy refuses
    it), sigma = 0, a non-flat tensor or another dtype or device, an unknown
    noise, mapping or backend; and whatever `reward` raises.
    """
    population = _check_args(flat, generations, population, sigma, lr, seed_base)
    draw = noise_source(noise, mapping, backend)
    weights = P.utilities()[:population]
    params = flat.detach().clone()
    numel = params.numel()
    tape = []
    for g in range(generations):
        seeds = [member_seed(seed_base, g, population, m) for m in range(population)]
        rewards, model = [], None
        for seed in seeds:
            model = P.perturb(params, draw(seed, numel), sigma)     # one member's noise alive at a time
            rewards.append(float(reward(model)))
        z = zscore(rewards)
        acc = np.zeros(numel, dtype=np.float64)
        for m, seed in enumerate(seeds):
            P.accumulate(acc, draw(seed, numel), weights[m], z[m])
        params = P.apply(params, acc, lr, sigma)
        tape.append({"generation": g, "seeds": seeds, "rewards": np.array(rewards, dtype=np.float64), "z": z,
                     "model": model, "params": params})
    return {"params": params, "tape": tape, "utilities": weights, "profile": P.PROFILE.name,
            "version": P.VERSION, "noise": noise, "mapping": mapping if noise == "contract" else None}


# -- findings helpers (pure; the adapter reports the page's defects with them) --------------------------
def _update(params: torch.Tensor, noises, rewards, lr: float, sigma: float, by_rank: bool = False) -> torch.Tensor:
    """The page's update (weights by member number), or with by_rank the weights its pitfalls describe:
    utilities[k] for the member of k-th highest reward (ties by member number)."""
    z = zscore(rewards)
    u = P.utilities()
    weights = u[:len(rewards)]
    if by_rank:
        order = sorted(range(len(rewards)), key=lambda m: (-rewards[m], m))
        weights = np.empty(len(rewards), dtype=np.float64)
        weights[order] = u[:len(rewards)]
    acc = np.zeros(params.numel(), dtype=np.float64)
    for m, eps in enumerate(noises):
        P.accumulate(acc, eps, weights[m], z[m])
    return P.apply(params, acc, lr, sigma)


def utilities_by_member_demo(numel: int = 4, rewards=(1.0, 0.0), lr: float = 0.001, sigma: float = 0.017,
                             dtype: torch.dtype = torch.float32, seed: int = 42) -> str:
    """One line showing that the page's `utilities` follow member NUMBER, not reward rank.

    Two members share one f64 noise vector (``RandomState(seed).randn(numel)``),
    the parameters are zeros of `dtype`; the page's update is computed with
    `rewards` (two floats) and with them swapped, and so is the update with
    weights by reward rank (what the page's pitfalls say utilities do),
    which is bitwise unchanged by the swap (the same two terms, and
    0 + a + b = 0 + b + a). Returns the text, with the number of differing
    elements of each and the largest ulp distance of the page's
    (docs/numerics.md §7); ValueError unless `rewards` has two values.
    """
    if len(rewards) != 2:
        raise ValueError(f"rewards must be two values, got {len(rewards)}")
    eps = native_noise(seed, numel)
    params = torch.zeros(numel, dtype=dtype)
    a = _update(params, [eps, eps], list(rewards), lr, sigma)
    b = _update(params, [eps, eps], list(rewards)[::-1], lr, sigma)
    (ba, fmt), (bb, _) = _bits.array_bits(a), _bits.array_bits(b)
    dist = [d for d in _bits.ulp_distance(ba, bb, fmt) if d is not None]
    differ = int((ba != bb).sum())
    flips = bool(differ) and bool(torch.equal(a, -b))
    swapped = list(rewards)[::-1]
    ra, rb = (_bits.array_bits(_update(params, [eps, eps], r, lr, sigma, by_rank=True))[0]
              for r in (list(rewards), swapped))
    rank_differ = int((ra != rb).sum())
    r0, r1 = rewards
    return (f"utilities are indexed by member number, not by reward rank: members 0 and 1 share one noise "
            f"vector and swapping their rewards ({r0:g}, {r1:g}) -> ({r1:g}, {r0:g}) changes the update in "
            f"{differ} of {numel} {fmt} elements (largest distance {max(dist, default=0)} ulp"
            f"{'; it flips sign' if flips else ''}); weights by reward rank change {rank_differ} of {numel}")


def run_seeds(seed_base: int, generations: int, population: int) -> range:
    """Every seed one run draws, in draw order: ``range(seed_base, seed_base + generations * population)``."""
    return range(seed_base, seed_base + generations * population)


def seed_overlaps(a: tuple, b: tuple) -> list[tuple]:
    """Seeds two runs both draw, as (seed, generation_a, member_a, generation_b, member_b), ascending.

    a, b: (seed_base, generations, population) of each run. A seed is the
    page's ``seed_base + g*N + m``, so two runs share noise wherever their
    seed ranges meet: (42, G, 30) and (72, G, 30) share every seed of 42's
    generations 1.. with 72's generations 0.. .
    """
    (sa, ga, na), (sb, gb, nb) = a, b
    ra, rb = run_seeds(sa, ga, na), run_seeds(sb, gb, nb)
    lo, hi = max(ra.start, rb.start), min(ra.stop, rb.stop)
    return [(s, (s - sa) // na, (s - sa) % na, (s - sb) // nb, (s - sb) % nb) for s in range(lo, hi)]


def seed_overlap_finding(a: tuple, b: tuple) -> str:
    """One line naming the seeds two runs share (seed_overlaps), or saying there are none."""
    shared = seed_overlaps(a, b)
    head = (f"runs seed_base={a[0]} ({a[1]} generation(s) x {a[2]} members) and seed_base={b[0]} ({b[1]} "
            f"generation(s) x {b[2]} members)")
    if not shared:
        return f"{head} draw no seed in common"
    s, ga, ma, gb, mb = shared[0]
    return (f"{head} draw {len(shared)} seeds in common, so the same noise: seed {s} is generation {ga} member "
            f"{ma} of the first and generation {gb} member {mb} of the second")
