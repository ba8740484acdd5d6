"""esverify.rng: the RNG contract v1 (docs/CONTRACT.md) in numpy, numba and torch.

Public API: `CONTRACT_VERSION`, `at`, `gaussian`, `member_seed`,
`stream_seed`; plus `gaussian_into` (fill a caller's float32 buffer),
the mapping registry `MAPPINGS`, `available_backends`, `default_backend`.
The slow reference lives in `esverify.rng.scalar` (tests and goldens only);
`esverify.rng.checks` counts backend differences against it. The poly32
literals of the fast backends live once in `esverify.rng.constants`.

Invariants: every value is a pure function of (seed, element index,
mapping); poly32 is bitwise identical on every backend and device, libm64
bit-exact per backend. Bumping the contract means a new CONTRACT_VERSION,
a CHANGELOG heading ``## rng v<N>`` and regenerated goldens.
Checks: ``python -m pytest -q tests/test_rng*.py`` and ``esverify goldens check``.
"""
from __future__ import annotations

from .backends import BACKENDS, available_backends, backend_targets, default_backend
from .gaussian import gaussian, gaussian_into
from .mappings import MAPPINGS, Mapping, get_mapping
from .seeds import NOISE_DOMAIN, SCHEMES, SEED_DOMAIN, member_seed, stream_seed
from .splitmix import GAMMA, at

#: Version of the RNG contract implemented here; recorded in goldens and trainer state.
CONTRACT_VERSION = 1

__all__ = ["CONTRACT_VERSION", "at", "gaussian", "gaussian_into", "member_seed", "stream_seed",
           "MAPPINGS", "Mapping", "get_mapping", "BACKENDS", "available_backends", "backend_targets",
           "default_backend", "SEED_DOMAIN", "NOISE_DOMAIN", "SCHEMES", "GAMMA"]
