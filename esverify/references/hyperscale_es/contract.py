"""Contract noise for HyperscaleES's draws: which stream serves (epoch, pair, leaf) (docs/hyperscale.md §10).

The noisers draw one `jax.random.normal(key, shape, dtype)` per (leaf, e′, pair), with e′ the
epoch after `noise_reuse` (`noise.thread_key`). Under contract noise the child serves that call
from the RNG contract (docs/CONTRACT.md §4) with the pair as the member and the leaf as the slot:
member seed ``member_seed(seed, e′, pairs, pair)``, stream ``stream_seed(member, leaf, "iid")``,
the draw its first rows·cols gaussians (f32, row-major), rounded to the dtype. Both sides read
the draw from here, so they spell the stream once.
"""
from __future__ import annotations

import math

import numpy as np

from ...rng import gaussian, member_seed, stream_seed
from . import jaxrandom as R


def contract_draw(seed: int, epoch: int, pairs: int, leaf: int, pair: int, shape, dtype: str,
                  mapping: str = "poly32") -> np.ndarray:
    """The contract's draw of (epoch e′, pair, leaf), `shape`, in the dtype's numpy form (`jaxrandom.round_to`:
    f32, float16, or f32 holding bf16 values). seed: the run's u64 ES seed; pairs: the population / 2 (the
    member count of the seed schedule). ValueError from esverify.rng for arguments out of range."""
    n = math.prod(int(d) for d in shape)
    stream = stream_seed(member_seed(seed, epoch, pairs, pair), leaf, "iid")
    return R.round_to(np.asarray(gaussian(stream, n, mapping=mapping), np.float32).reshape(tuple(shape)), dtype)
