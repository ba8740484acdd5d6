"""esverify.rng: the RNG contract v1 (docs/CONTRACT.md, RNG.md) in numpy, numba and torch.

Public API (issue 2): `CONTRACT_VERSION`, `at`, `gaussian`, `member_seed`,
`stream_seed`; plus `gaussian_into` (fill a caller's float32 buffer),
the mapping registry `MAPPINGS`, `available_backends`, `default_backend`.
The slow reference lives in `esverify.rng.scalar` (tests and goldens only);
`esverify.rng.checks` counts backend differences against it.
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
