"""Explicit roundings for the numerics profiles (docs/numerics.md §3, docs/CONTRACT.md §9).

Every kernel spells its roundings with these helpers instead of trusting a
torch op's semantics: Python scalars enter as exact f32 (or f16/bf16)
values held in 0-dim f32 tensors, so no op can widen or narrow them
behind our back, and the one fused operation the profiles need, `fma32`,
is emulated exactly (round-to-odd in f64, Boldo and Melquiond 2008), never
by plain f64 arithmetic, which double-rounds in rare cases.

All tensor helpers are elementwise, so results do not depend on chunking,
torch's thread count or the device; they run on the tensor's own device.

Checks: ``python -m pytest -q tests/test_es_kernels.py`` (fma32 against
exact rationals; the profiles built on these helpers against the reference).
"""
from __future__ import annotations

import functools
import struct

import numpy as np
import torch

_F64 = struct.Struct("<d")

#: elements per work chunk when Config.chunk_elements is None: bounds the extra
#: memory of every kernel (about 40 MiB of temporaries at 2**20 was measured too much).
DEFAULT_CHUNK = 1 << 18

#: the parameter dtypes a profile can handle
DTYPES = (torch.float32, torch.float16, torch.bfloat16)
DTYPE_NAMES = {torch.float32: "f32", torch.float16: "f16", torch.bfloat16: "bf16"}
NAME_DTYPES = {v: k for k, v in DTYPE_NAMES.items()}


def rd32(a: float) -> float:
    """rd32(a): the f64 `a` rounded to the nearest f32 (ties to even), as a Python float.

    Beyond the f32 range the result is +-inf, as IEEE rounding says; callers
    that must refuse that (Config) check for it, so numpy's warning is muted.
    """
    if -3.4028234663852886e38 <= a <= 3.4028234663852886e38:   # within f32's range: no overflow to mute
        return float(np.float32(a))
    with np.errstate(over="ignore"):
        return float(np.float32(a))


def rd_dt32(a: float, dtype: torch.dtype) -> float:
    """rd_dt(rd32(a)) as a Python float: torch's scalar-to-dtype conversion (docs/numerics.md §3)."""
    x = rd32(a)
    if dtype == torch.float32:
        return x
    return _rd_dt32_of(_f64_bits(x), dtype)


def scalar32(a: float, device) -> torch.Tensor:
    """A 0-dim f32 tensor holding the exact f32 value `a` (already rounded by the caller), on `device`.
    The tensor is shared between calls with the same bits and device (a member's update asks the same
    few scalars for every slot, and making one cost 3 us): use it as an operand, never change it in
    place."""
    return _scalar32_of(_f64_bits(a), str(torch.device(device)))


def _f64_bits(a: float) -> int:
    """The bit pattern of `a`: the caches' key, which tells -0.0 from 0.0 (equal as floats)."""
    return int.from_bytes(_F64.pack(a), "little", signed=True)


def _f64_of(bits: int) -> float:
    return _F64.unpack(bits.to_bytes(8, "little", signed=True))[0]


@functools.lru_cache(maxsize=4096)
def _rd_dt32_of(bits: int, dtype: torch.dtype) -> float:
    x = _f64_of(bits)
    return float(torch.tensor(x, dtype=torch.float32).to(dtype).to(torch.float32).item())


@functools.lru_cache(maxsize=4096)
def _scalar32_of(bits: int, device: str) -> torch.Tensor:
    x = _f64_of(bits)
    return torch.tensor(x, dtype=torch.float32, device=device)


def widen(x: torch.Tensor) -> torch.Tensor:
    """f32(x): exact widening of an f32/f16/bf16 tensor (no copy for f32)."""
    return x if x.dtype == torch.float32 else x.to(torch.float32)


def round_to(x32: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """rd_dt(x32): one round-to-nearest-even from f32 to `dtype` (identity for f32)."""
    return x32 if dtype == torch.float32 else x32.to(dtype)


def fma32(x32: torch.Tensor, y32: torch.Tensor, k: float) -> torch.Tensor:
    """rd32(x + y*k) with ONE rounding, elementwise, as an f32 tensor.

    x32, y32: f32 tensors of one shape on one device; k: a Python float
    holding an exact f32 value. y*k is exact in f64 (48 significant bits,
    exponents well inside f64's range); the sum x + y*k is formed in f64 with
    its rounding error (TwoSum, Knuth), then rounded to odd (an inexact sum
    gets its last f64 bit forced to 1), so the final rounding to f32 is the
    correctly rounded result (53 >= 24 + 2). Signs of exact zeros follow
    IEEE addition, as fma does.
    """
    from . import cpu_kernels   # the same lines in numba for CPU f32 (tests/test_es_kernels.py proves them equal)
    if x32.shape == y32.shape and cpu_kernels.fma_usable(x32, y32):
        out = torch.empty(x32.shape, dtype=torch.float32)
        cpu_kernels.fma32(x32.reshape(-1), y32.reshape(-1), k, out.view(-1))
        return out
    return fma32_torch(x32, y32, k)


def fma32_torch(x32: torch.Tensor, y32: torch.Tensor, k: float) -> torch.Tensor:
    """fma32 in torch ops on any device (the specification of the numba path `fma32` takes on CPU)."""
    x = x32.to(torch.float64)
    p = y32.to(torch.float64) * k
    s = x + p
    bb = s - x
    err = (x - (s - bb)) + (p - bb)
    bits = s.view(torch.int64)
    inexact = (err != 0) & torch.isfinite(s) & ((bits & 1) == 0)
    step = torch.where((err > 0) == (s > 0), 1, -1)
    bits = torch.where(inexact, bits + step, bits)
    return bits.view(torch.float64).to(torch.float32)
