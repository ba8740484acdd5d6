"""Contract noise for numpy's LEGACY global generator (docs/references.md §7).

Runs ONLY in the parity child; the esverify package never imports it.

The skill page's sample draws its noise as ``np.random.seed(seed);
np.random.randn(numel)``: numpy's process-wide MT19937 generator, f64.
Under contract noise this hook replaces those two functions:

- ``seed(s)`` calls numpy's own ``seed`` first (so every refusal numpy
  makes, e.g. a seed >= 2**32, is raised unchanged, and the global state
  is what the reference expects), then starts the contract stream of the
  u64 member seed ``s`` at element 0 (a reseed rewinds, as in the torch
  hook's generator semantics, docs/references.md §3a);
- ``randn(*shape)`` returns the next ``prod(shape)`` elements of that
  stream: the contract's f32 gaussians widened exactly to f64 (numpy's
  randn is f64), and advances the position. A draw with no seed set in
  this case, or after ``seed(None)``, raises NoiseAttributionError:
  numpy's own noise never gets in.

The flat parameter vector of that loop is one tensor: the stream is the
member's stream of slot 0 of the case's scheme (`correlated`: the member
seed itself). Under native noise both functions are numpy's own; the hook
only records the seeds and draws. A contract range the parent drew already is read from
it, not drawn (child_server.contract_range, docs/parity.md "Served noise"). `draws` holds (seed, position,
elements) per randn call, `seeds` every seed call, for the draw
accounting the parent reports.
"""
from __future__ import annotations

import math

import numpy as np

from child_server import NoiseAttributionError, contract_range
from esverify import rng as es_rng

ORIGINAL = {"seed": np.random.seed, "randn": np.random.randn}


class NumpyLegacyHook:
    """np.random.seed / np.random.randn replaced for one case (see the module docstring)."""

    def __init__(self):
        self.reset()

    def reset(self):
        self.noise, self.scheme, self.mapping, self.backend = "native", "correlated", "poly32", None
        self.current, self.position = None, 0
        self.draws, self.seeds = [], []

    def configure(self, noise: str, scheme: str = "correlated", mapping: str = "poly32", backend=None):
        self.reset()
        if noise not in ("contract", "native"):
            raise ValueError(f"noise must be 'contract' or 'native', got {noise!r}")
        self.noise, self.scheme, self.mapping, self.backend = noise, scheme, mapping, backend

    def seed(self, seed=None):
        ORIGINAL["seed"](seed)     # numpy's own refusals first (a seed >= 2**32 raises ValueError)
        self.seeds.append(None if seed is None else int(seed))
        self.current = None if seed is None else int(seed)
        self.position = 0

    def randn(self, *shape):
        numel = math.prod(int(s) for s in shape)
        if self.noise == "native":
            self.draws.append((self.current, self.position, numel))
            self.position += numel
            return ORIGINAL["randn"](*shape)
        if self.current is None:
            raise NoiseAttributionError(
                "np.random.randn was called before np.random.seed(seed) in this case (or after seed(None)): "
                "the draw cannot be attributed to a member, and numpy's own noise is never let in "
                "(docs/references.md §7)")
        stream = es_rng.stream_seed(self.current, 0, self.scheme)
        # the parent's copy when it serves this range, else drawn here (child_server.contract_range)
        values = contract_range(stream, self.position, numel, self.mapping, self.backend, None)
        self.draws.append((self.current, self.position, numel))
        self.position += numel
        out = values.astype(np.float64).reshape(tuple(int(s) for s in shape))   # f32 to f64: exact
        return float(out) if not shape else out

    def install(self):
        np.random.seed, np.random.randn = self.seed, self.randn

    def uninstall(self):
        np.random.seed, np.random.randn = ORIGINAL["seed"], ORIGINAL["randn"]


HOOK = NumpyLegacyHook()
