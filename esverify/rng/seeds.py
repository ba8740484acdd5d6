"""Member and stream seeds for evolution strategies (docs/CONTRACT.md §4).

A member's perturbation is a pure function of (seed, iteration, population,
member, slot, scheme): `member_seed` draws the member's counter from the
run seed's "es_seeds" domain; `stream_seed` gives each parameter tensor
(slot, in registration order) its own stream under ``iid`` or reuses the
member seed for every tensor under ``correlated``. Antithetic pairs are
the caller's business: members 2k and 2k+1 both use member_seed(..., 2k).
All counter arithmetic is u64, wrapping.

Checks: ``python -m pytest -q tests/test_rng.py`` (the spec formulas, u64
wrap, correlated vs iid) and the seed vectors of ``esverify goldens check``.
"""
from __future__ import annotations

from .splitmix import MASK64, at, check_u64

SEED_DOMAIN = 0x65735F7365656473   # ASCII "es_seeds"
NOISE_DOMAIN = 0x65735F6E6F697365  # ASCII "es_noise"
SCHEMES = ("iid", "correlated")


def member_seed(seed, iteration, population, member) -> int:
    """at(seed ^ SEED_DOMAIN, iteration * population + member) as a u64 int (docs/CONTRACT.md §4).

    Every argument is an int in [0, 2**64) (ValueError/TypeError naming it);
    the counter wraps mod 2**64.
    """
    seed = check_u64(seed, "seed")
    iteration = check_u64(iteration, "iteration")
    population = check_u64(population, "population")
    member = check_u64(member, "member")
    return at(seed ^ SEED_DOMAIN, (iteration * population + member) & MASK64)


def stream_seed(member_seed, slot, scheme) -> int:
    """The seed of the gaussian stream of (member, slot) (docs/CONTRACT.md §4).

    scheme "iid": at(member_seed ^ NOISE_DOMAIN, slot); "correlated":
    member_seed itself for every slot. Raises ValueError naming `scheme`
    for an unknown scheme, and naming `member_seed`/`slot` when they are
    not ints in [0, 2**64).
    """
    ms = check_u64(member_seed, "member_seed")
    slot = check_u64(slot, "slot")
    if scheme == "iid":
        return at(ms ^ NOISE_DOMAIN, slot)
    if scheme == "correlated":
        return ms
    raise ValueError(f"scheme must be one of {list(SCHEMES)}, got {scheme!r}")
