"""The low-rank noise of EGGROLL's loop: contract area `eggroll` v1 and torch's native draws.

Sources: docs/CONTRACT.md §10 (the contract streams) and docs/numerics.md
§9.1 (native noise). One stream per (generation s, pair k, weight l):

- contract: ``lowrank_stream_seed(seed, s, P, L, k, l) = at(seed ^
  LOWRANK_DOMAIN, (s*P + k)*L + l)`` (u64, wrapping); a is elements
  [0, r*in) of that seed's gaussian stream as (r, in) row-major, b is
  elements [r*in, r*in + out*r) as (out, r) row-major, both f32.
- native: a new CPU ``torch.Generator`` seeded with ``id = base_seed +
  P*L*s + L*k + l``, then exactly two draws ``torch.normal(mean=0.0,
  std=1.0, size=(r, in))`` and ``size=(out, r)`` (f32): torch's CPU
  sampler depends on each draw's size, so one flat draw split afterwards
  is NOT the same noise.

This module is shared: our trainer draws through it and the child
driver's hook serves the reference's ``torch.normal`` from it
(`decode_native_id` turns the reference's generator seed back into
(s, k, l)), so both sides spell the stream once.

Checks: ``python -m pytest -q tests/test_eggroll_lowrank.py`` (G1, the
stream slicing as a property) and ``esverify goldens check --area eggroll``.
"""
from __future__ import annotations

from typing import Callable

import numpy as np
import torch

from ...rng import gaussian, get_mapping
from ...rng.backends import check_backend
from ...rng.splitmix import MASK64, at, check_u64

#: The contract area's version (docs/CONTRACT.md §10); a change of any bit is a new version.
VERSION = 1
#: ASCII "es_lowrk": the low-rank streams' domain, disjoint from SEED_DOMAIN and NOISE_DOMAIN.
LOWRANK_DOMAIN = 0x65735F6C6F77726B
NOISES = ("native", "contract")


def _count(value, name: str, minimum: int = 0) -> int:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be an int, got {type(value).__name__} {value!r}")
    if int(value) < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return int(value)


def lowrank_counter(generation, pairs, layers, pair, layer) -> int:
    """``(generation*pairs + pair)*layers + layer`` mod 2**64: the stream's counter (docs/CONTRACT.md §10)."""
    generation, pairs, layers = (check_u64(v, n) for v, n in
                                 ((generation, "generation"), (pairs, "pairs"), (layers, "layers")))
    pair, layer = check_u64(pair, "pair"), check_u64(layer, "layer")
    return (((generation * pairs + pair) & MASK64) * layers + layer) & MASK64


def lowrank_stream_seed(seed, generation, pairs, layers, pair, layer) -> int:
    """The u64 seed of the gaussian stream of (generation, pair, layer) (docs/CONTRACT.md §10).

    ``at(seed ^ LOWRANK_DOMAIN, (generation*pairs + pair)*layers + layer)``,
    every operation u64 wrapping. Arguments: ints in [0, 2**64)
    (ValueError/TypeError naming the argument otherwise).
    """
    seed = check_u64(seed, "seed")
    return at(seed ^ LOWRANK_DOMAIN, lowrank_counter(generation, pairs, layers, pair, layer))


def lowrank_factors(seed, generation, pairs, layers, pair, layer, rank, out_features, in_features,
                    mapping: str = "poly32", backend: str | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Contract noise (a, b) of (generation, pair, layer) for an (out_features x in_features) weight.

    a: f32 CPU tensor (rank, in_features) = elements [0, rank*in) of the
    stream of `lowrank_stream_seed(...)`, row-major; b: f32 CPU tensor
    (out_features, rank) = elements [rank*in, rank*in + out*rank).
    mapping: "poly32" or "libm64" (docs/CONTRACT.md §3); backend: an
    esverify.rng backend or None (poly32 bits never depend on it).
    ValueError/TypeError naming a bad argument.
    """
    rank = _count(rank, "rank", 1)
    out_features, in_features = _count(out_features, "out_features", 1), _count(in_features, "in_features", 1)
    stream = lowrank_stream_seed(seed, generation, pairs, layers, pair, layer)
    n_a, n_b = rank * in_features, out_features * rank
    flat = gaussian(stream, n_a + n_b, 0, mapping, backend=backend)
    flat = torch.from_numpy(np.ascontiguousarray(flat))
    return flat[:n_a].reshape(rank, in_features).clone(), flat[n_a:].reshape(out_features, rank).clone()


def native_id(base_seed, generation, pairs, layers, pair, layer) -> int:
    """The reference's generator seed ``base_seed + P*L*s + L*k + l`` (docs/numerics.md §9.1), an int."""
    return (int(base_seed) + _count(pairs, "pairs") * _count(layers, "layers") * _count(generation, "generation")
            + int(layers) * _count(pair, "pair") + _count(layer, "layer"))


def decode_native_id(seed_id, base_seed, pairs, layers) -> tuple[int, int, int]:
    """(generation, pair, layer) of a generator seed `seed_id` of a run with `base_seed`, P pairs, L weights.

    The inverse of `native_id` within one run (its ids are distinct there);
    ValueError when ``seed_id - base_seed`` is negative.
    """
    pairs, layers = _count(pairs, "pairs", 1), _count(layers, "layers", 1)
    offset = int(seed_id) - int(base_seed)
    if offset < 0:
        raise ValueError(f"generator seed {seed_id} is below base_seed {base_seed}: not a low-rank stream id")
    generation, rest = divmod(offset, pairs * layers)
    pair, layer = divmod(rest, layers)
    return generation, pair, layer


def native_factors(base_seed, generation, pairs, layers, pair, layer, rank, out_features,
                   in_features) -> tuple[torch.Tensor, torch.Tensor]:
    """torch's own noise (a, b): a new CPU generator seeded `native_id(...)`, then two ``torch.normal`` draws.

    a: f32 (rank, in_features), drawn first; b: f32 (out_features, rank),
    drawn second from the same generator (docs/numerics.md §9.1). Needs
    the torch whose sampler the reference runs (G1 pins torch 2.13 CPU).
    """
    rank = _count(rank, "rank", 1)
    out_features, in_features = _count(out_features, "out_features", 1), _count(in_features, "in_features", 1)
    g = torch.Generator(device="cpu")
    g.manual_seed(native_id(base_seed, generation, pairs, layers, pair, layer))
    a = torch.normal(mean=0.0, std=1.0, size=(rank, in_features), generator=g)
    b = torch.normal(mean=0.0, std=1.0, size=(out_features, rank), generator=g)
    return a, b


#: (generation, pair, layer, rank, out_features, in_features) -> (a, b)
FactorSource = Callable[[int, int, int, int, int, int], tuple]


def factor_source(noise: str, base_seed: int, pairs: int, layers: int, seed=None, mapping: str = "poly32",
                  backend: str | None = None) -> FactorSource:
    """The noise of one run: (generation, pair, layer, rank, out, in) -> (a, b), f32 CPU tensors.

    noise "native": `native_factors` with `base_seed`; "contract":
    `lowrank_factors` with `seed` (a u64; None means `base_seed`),
    `mapping` and `backend`. ValueError naming a bad `noise`, mapping or
    backend (checked here, before the first draw).
    """
    pairs, layers = _count(pairs, "pairs", 1), _count(layers, "layers", 1)
    if noise == "native":
        if backend is not None:
            raise ValueError(f"backend {backend!r} applies only to noise='contract' (native noise is torch's)")
        base = int(base_seed)
        return lambda s, k, l, r, o, i: native_factors(base, s, pairs, layers, k, l, r, o, i)
    if noise == "contract":
        get_mapping(mapping)
        if backend is not None:
            check_backend(backend)
        run_seed = check_u64(base_seed if seed is None else seed, "seed")
        return lambda s, k, l, r, o, i: lowrank_factors(run_seed, s, pairs, layers, k, l, r, o, i, mapping, backend)
    raise ValueError(f"noise: unknown value {noise!r}; known: {NOISES}")
