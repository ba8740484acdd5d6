"""Shared helpers of the es tests (torch <-> numpy with exact bits, strategies), and their own check."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
import torch
from hypothesis import strategies as st

from esverify.es import reference as R

TORCH = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}


def to_np(t: torch.Tensor) -> np.ndarray:
    """A numpy copy with the same bits (bf16 as ml_dtypes.bfloat16)."""
    t = t.detach().cpu().contiguous()
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().view(np.uint16).view(ml_dtypes.bfloat16).copy()
    return t.numpy().copy()


def to_torch(a: np.ndarray) -> torch.Tensor:
    a = np.array(a, copy=True)
    if a.dtype == np.dtype(ml_dtypes.bfloat16):
        return torch.from_numpy(a.view(np.uint16).view(np.int16).copy()).view(torch.bfloat16)
    return torch.from_numpy(a.copy())


def bits(a) -> np.ndarray:
    a = to_np(a) if isinstance(a, torch.Tensor) else np.asarray(a)
    return a.reshape(-1).view({4: np.uint32, 2: np.uint16}[a.dtype.itemsize])


def assert_bitwise(got, want, what=""):
    gb, wb = bits(got), bits(want)
    assert gb.shape == wb.shape, f"{what}: shapes {gb.shape} vs {wb.shape}"
    bad = np.flatnonzero(gb != wb)
    assert bad.size == 0, (f"{what}: {bad.size} of {gb.size} elements differ; first at {bad[0]}: "
                           f"got {gb[bad[0]]:#x} want {wb[bad[0]]:#x}")


def make_param(rng: np.random.Generator, shape, dtype: str, scale=1.0) -> np.ndarray:
    return np.asarray(rng.standard_normal(shape) * scale).astype(np.float32).astype(R.NP_DTYPES[dtype])


shapes = st.one_of(st.just(()), st.tuples(st.integers(0, 70)), st.tuples(st.integers(1, 5), st.integers(1, 13)))
dtypes = st.sampled_from(["f32", "f16", "bf16"])
seeds = st.one_of(st.just(0), st.just((1 << 64) - 1), st.integers(0, (1 << 64) - 1))


def test_helpers_roundtrip_bits_exactly():
    """to_torch / to_np keep every bit pattern (NaN payloads, -0, subnormals) of each dtype."""
    raw16 = np.array([0x0000, 0x8000, 0x0001, 0x7C00, 0xFC00, 0x7E01, 0x3C00, 0xFBFF], np.uint16)
    raw32 = np.array([0, 0x80000000, 1, 0x7F800000, 0x7FC00001, 0x3F800000], np.uint32)
    for a in (raw16.view(np.float16), raw16.view(ml_dtypes.bfloat16), raw32.view(np.float32)):
        back = to_np(to_torch(a))
        assert back.dtype == a.dtype and np.array_equal(bits(back), bits(a))
        assert np.array_equal(bits(to_torch(a)), bits(a))


def examples(n: int) -> int:
    """n examples by default; the active profile's count when it asks for more (HYPOTHESIS_PROFILE=thorough)."""
    from hypothesis import settings
    return max(n, settings.default.max_examples)


@pytest.mark.parametrize("value", [0.0, -0.0, 1e-8, -3.5, 70000.0, 1e-45, 0.1, float("inf"), 3.4e38])
def test_cached_scalars_keep_every_bit(value):
    """rd_dt32 and scalar32 are cached by the value's bit pattern: -0.0 and 0.0 (equal as floats, one
    key for a plain float cache) each get their own, and a cached answer equals a fresh computation."""
    import struct

    import torch

    from esverify.es.numerics import rd32, rd_dt32, scalar32

    def bits(x):
        return struct.pack("<d", x)
    for _ in range(2):                       # the second round answers from the caches
        for dtype in (torch.float16, torch.bfloat16, torch.float32):
            fresh = float(torch.tensor(rd32(value), dtype=torch.float32).to(dtype).to(torch.float32).item())
            assert bits(rd_dt32(value, dtype)) == bits(fresh)
        tensor = scalar32(rd32(value), "cpu")
        assert tensor.dtype == torch.float32 and tensor.shape == () and bits(tensor.item()) == bits(rd32(value))
