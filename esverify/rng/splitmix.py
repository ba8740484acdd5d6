"""splitmix64 as a counter-based generator (docs/CONTRACT.md §2).

``at(seed, i) = mix(seed + (i + 1) * GAMMA)`` in wrapping u64 arithmetic is
the i-th output of Steele, Lea and Flood's sequential splitmix64 started at
``seed``. Three forms share one definition:

- Python ints (masked to 64 bits), for seeds and single counters;
- numpy uint64 arrays (numpy array arithmetic wraps silently);
- torch int64 tensors on any device: torch has no u64 arithmetic on CPU
  (docs/CONTRACT.md §9), but two's-complement add and multiply wrap exactly as u64
  does, and a right shift is made logical by masking the sign-extended bits.

The contract version of everything in `esverify.rng` is `CONTRACT_VERSION`.
Invariant: the three forms return the same 64 bits for the same (seed,
index). Checks: ``python -m pytest -q tests/test_rng.py`` (known answers of
docs/CONTRACT.md §2; counter == sequential; numpy/torch/int agree).
"""
from __future__ import annotations

import numpy as np

MASK64 = (1 << 64) - 1
GAMMA = 0x9E3779B97F4A7C15
MUL1 = 0xBF58476D1CE4E5B9
MUL2 = 0x94D049BB133111EB


def to_signed64(x: int) -> int:
    """The int64 holding the same 64 bits as the u64 `x` (two's complement)."""
    x &= MASK64
    return x - (1 << 64) if x >> 63 else x


def check_u64(value, name: str) -> int:
    """`value` as a Python int in [0, 2**64); TypeError/ValueError naming `name` otherwise."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be an integer in [0, 2**64), got {type(value).__name__} {value!r}")
    value = int(value)
    if not 0 <= value <= MASK64:
        raise ValueError(f"{name} must be in [0, 2**64), got {value}")
    return value


def mix_int(z: int) -> int:
    """splitmix64's output function (Steele, Lea and Flood 2014) on a u64 Python int; returns a u64 int."""
    z = ((z ^ (z >> 30)) * MUL1) & MASK64
    z = ((z ^ (z >> 27)) * MUL2) & MASK64
    return z ^ (z >> 31)


def mix_numpy(z: np.ndarray) -> np.ndarray:
    """mix on a uint64 array (a new array; wrapping products)."""
    z = (z ^ (z >> np.uint64(30))) * np.uint64(MUL1)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(MUL2)
    return z ^ (z >> np.uint64(31))


def at_numpy(seed: int, index: np.ndarray) -> np.ndarray:
    """at(seed, index) for a uint64 array `index`; returns uint64 of its shape."""
    index = np.asarray(index, dtype=np.uint64)
    z = np.uint64(seed) + (index + np.uint64(1)) * np.uint64(GAMMA)
    return mix_numpy(z)


def _lsr(z, k: int):
    """Logical right shift of an int64 tensor by k (arithmetic shift, then mask)."""
    return (z >> k) & ((1 << (64 - k)) - 1)


def mix_torch(z):
    """mix on an int64 tensor holding u64 bits."""
    z = (z ^ _lsr(z, 30)) * to_signed64(MUL1)
    z = (z ^ _lsr(z, 27)) * to_signed64(MUL2)
    return z ^ _lsr(z, 31)


def at_torch(seed: int, index):
    """at(seed, index) for an int64 tensor `index` (u64 bits) on any device; int64 result."""
    import torch
    if index.dtype != torch.int64:
        raise TypeError(f"index tensor must be torch.int64 (u64 bits), got {index.dtype}")
    z = (index + 1) * to_signed64(GAMMA) + to_signed64(seed)
    return mix_torch(z)


def at(seed, index):
    """The index-th splitmix64 output of `seed` (docs/CONTRACT.md §2).

    seed: int in [0, 2**64) (ValueError/TypeError naming `seed` otherwise).
    index: a Python int in [0, 2**64) -> int; a numpy integer array (cast
    to uint64; negative entries of a signed array are a ValueError) ->
    uint64 array of the same shape; a torch int64 tensor on any device ->
    int64 tensor on that device holding the same 64 bits as the u64 result.
    """
    seed = check_u64(seed, "seed")
    if isinstance(index, (int, np.integer)) and not isinstance(index, (bool, np.bool_)):
        return mix_int((seed + (check_u64(index, "index") + 1) * GAMMA) & MASK64)
    if isinstance(index, np.ndarray):
        if index.dtype.kind not in "ui":
            raise TypeError(f"index array must have an integer dtype (uint64), got {index.dtype}")
        if index.dtype.kind == "i" and index.size and index.min() < 0:   # would wrap silently to 2**64 - k
            raise ValueError(f"index must be in [0, 2**64), got a negative entry {int(index.min())}")
        return at_numpy(seed, index.astype(np.uint64, copy=False))
    try:
        import torch
    except ImportError:  # pragma: no cover - torch is a dependency
        torch = None
    if torch is not None and isinstance(index, torch.Tensor):
        return at_torch(seed, index)
    raise TypeError(f"index must be an int, a numpy uint64 array or a torch int64 tensor, "
                    f"got {type(index).__name__}")
