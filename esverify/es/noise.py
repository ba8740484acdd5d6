"""Where a member's noise comes from (docs/CONTRACT.md §4, docs/numerics.md §1 and §4).

The noise of (iteration, member, slot) is the contract's gaussian stream of
``stream_seed(member_seed(seed, iteration, population, member'), slot,
scheme)``, where member' = 2k for both members 2k and 2k+1 of an
antithetic pair. It is regenerated on demand, one bounded element range at
a time, on the parameter's own device: never stored.

`NoiseSource` wraps `esverify.rng.gaussian` (any backend) and counts the
elements it draws, so tests can prove that each antithetic pair's noise is
regenerated once per update.

Checks: ``python -m pytest -q tests/test_es_invariants.py`` (antithetic
fold draws each pair once) and ``tests/test_es_kernels.py`` (the trainer's
noise equals esverify.es.reference.noise, from the scalar RNG).
"""
from __future__ import annotations

import threading

import torch

from esverify import rng as _rng
from esverify.rng import CONTRACT_VERSION
from esverify.rng import member_seed as member_seed_u64
from esverify.rng import stream_seed as stream_seed_u64
from esverify.rng.backends import check_backend


def noise_member(member: int, antithetic: bool) -> int:
    """The member whose counter seeds `member`'s noise: 2k for both halves of pair k."""
    return member - (member % 2) if antithetic else member


def sign_of(member: int, antithetic: bool) -> int:
    """+1, or -1 for the odd (mirrored) half of an antithetic pair (docs/numerics.md §4)."""
    return -1 if antithetic and member % 2 else 1


def noise_seed(config, iteration: int, member: int) -> int:
    """The u64 member seed the trainer uses for `member` at `iteration` (docs/CONTRACT.md §4).

    Antithetic members 2k and 2k+1 both get ``member_seed(..., member=2k)``.
    This is the map an oracle needs from a reference's seed handles to ours.
    """
    return member_seed_u64(config.seed, iteration, config.population,
                           noise_member(member, config.antithetic))


class NoiseSource:
    """Draws f32 noise ranges on a device and counts the elements drawn.

    Parameters: mapping ("poly32" or "libm64"); backend (an esverify.rng
    backend name, or None for the fastest available; ValueError naming
    `mapping`/`backend` when unknown). Thread-safe.
    """

    def __init__(self, mapping: str, backend: str | None = None):
        _rng.get_mapping(mapping)                       # fail at construction, not at the first draw
        if backend is not None:
            check_backend(backend)
        self.mapping = mapping
        self.backend = backend
        self.elements = 0
        self._lock = threading.Lock()

    def draw(self, stream_seed: int, first: int, n: int, device: torch.device) -> torch.Tensor:
        """Elements first .. first+n-1 of the stream, an f32 tensor of shape (n,) on `device`.

        stream_seed: u64 (docs/CONTRACT.md §4); first, n: ints >= 0 with first + n <=
        2**64. A bad stream_seed or first raises what esverify.rng.gaussian_into
        raises (ValueError/TypeError naming the argument).
        """
        with self._lock:
            self.elements += n
        out = torch.empty(n, dtype=torch.float32, device=device)
        if n:
            _rng.gaussian_into(out, stream_seed, first, self.mapping, backend=self.backend)
        return out
