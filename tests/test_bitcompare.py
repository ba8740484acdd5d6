"""esverify.bitcompare, the one comparator of parity, replay and the goldens: a property over every
dtype pair. Two tensors of different dtypes are never equal, whatever their values
(a cast that preserves every value included); two of one dtype differ exactly where their raw bytes
differ; float distances agree with a slow reference ulp."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from esverify import bitcompare

DTYPES = [torch.bool, torch.uint8, torch.int8, torch.int16, torch.uint16, torch.int32, torch.uint32, torch.int64,
          torch.uint64, torch.float16, torch.bfloat16, torch.float32, torch.float64]
DTYPES += [getattr(torch, n) for n in ("float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz",
                                      "float8_e8m0fnu") if hasattr(torch, n)]
FLOATS_WITH_ULP = [torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.float8_e4m3fn,
                   torch.float8_e5m2]


def _tensor(raw: bytes, dtype) -> torch.Tensor:
    """A tensor of `dtype` whose bytes are `raw` (bool bytes reduced to 0/1, the only valid ones)."""
    t = torch.tensor(list(raw), dtype=torch.uint8)
    if dtype == torch.bool:
        return (t & 1).view(torch.bool)
    return t.view(dtype)


def _elements(dtype, n, data):
    size = torch.empty(0, dtype=dtype).element_size()
    return data.draw(st.binary(min_size=n * size, max_size=n * size))


@settings(max_examples=300, deadline=None)
@given(a=st.sampled_from(DTYPES), b=st.sampled_from(DTYPES), n=st.integers(0, 9), data=st.data())
def test_another_dtype_is_always_a_difference_naming_both(a, b, n, data):
    x = _tensor(_elements(a, n, data), a)
    try:
        y = x.to(b)     # the value-preserving cast where torch has one: still not equal
    except (RuntimeError, TypeError):
        y = _tensor(_elements(b, n, data), b)
    diff = bitcompare.compare(x, y)
    if a == b:
        assert diff.layout == "" and diff.mismatches == 0
        return
    name = lambda d: str(d).removeprefix("torch.")  # noqa: E731
    assert diff.layout == f"dtype {name(b)} where {name(a)} is expected"
    assert diff.mismatches == max(n, 1) and diff.first() is None


@settings(max_examples=300, deadline=None)
@given(dtype=st.sampled_from(DTYPES), n=st.integers(1, 12), data=st.data())
def test_same_dtype_differs_exactly_where_the_bytes_differ(dtype, n, data):
    size = torch.empty(0, dtype=dtype).element_size()
    x = _tensor(_elements(dtype, n, data), dtype)
    flips = data.draw(st.lists(st.integers(0, n - 1), max_size=n))
    raw = bytearray(x.view(torch.uint8).numpy().tobytes()) if dtype != torch.bool else \
        bytearray(x.to(torch.uint8).numpy().tobytes())
    for i in flips:      # change one byte of element i (bool: its only valid bit)
        raw[i * size] ^= 1 if dtype == torch.bool else data.draw(st.integers(1, 255))
    y = _tensor(bytes(raw), dtype)
    before = (x.to(torch.uint8) if dtype == torch.bool else x.view(torch.uint8)).numpy().tobytes()
    want = [i for i in range(n) if raw[i * size:(i + 1) * size] != before[i * size:(i + 1) * size]]
    diff = bitcompare.compare(x, y)
    assert diff.layout == "" and diff.index.tolist() == want and diff.mismatches == len(want)
    if want:
        assert diff.first(100)["index"] == 100 + want[0]


def _reference_ulp(p: int, q: int, dtype) -> int | None:
    """|ord(p) - ord(q)| of two patterns, ord(x) = -(magnitude) for a set sign bit; None for NaN/inf."""
    width = 8 * torch.empty(0, dtype=dtype).element_size()
    ints = {8: torch.uint8, 16: torch.int16, 32: torch.int32, 64: torch.int64}[width]

    def value(v):
        signed = v - (1 << width) if width > 8 and v >= 1 << (width - 1) else v
        return torch.tensor([signed], dtype=ints).view(dtype).to(torch.float64).item()
    if not all(np.isfinite(value(v)) for v in (p, q)):
        return None
    sign = 1 << (width - 1)
    ordinal = lambda v: -(v & (sign - 1)) if v & sign else v  # noqa: E731
    return abs(ordinal(p) - ordinal(q))


@settings(max_examples=300, deadline=None)
@given(dtype=st.sampled_from(FLOATS_WITH_ULP), data=st.data())
@pytest.mark.slow   # 1 s (--durations, 2026-12-03): out of the fast tier
def test_float_distances_match_a_slow_reference(dtype, data):
    width = 8 * torch.empty(0, dtype=dtype).element_size()
    p = data.draw(st.integers(0, (1 << width) - 1))
    q = data.draw(st.integers(0, (1 << width) - 1).filter(lambda v: v != p))
    x, y = (_tensor(v.to_bytes(width // 8, "little"), dtype) for v in (p, q))
    diff = bitcompare.compare(x, y)
    assert diff.mismatches == 1 and diff.first()["ulp"] == _reference_ulp(p, q, dtype)


def test_shapes_and_formats():
    assert bitcompare.compare(torch.zeros(2, 3), torch.zeros(3, 2)).layout == \
        "shape (3, 2) where (2, 3) is expected"
    with pytest.raises(ValueError, match="do not all fit f32"):
        bitcompare.of_format(np.array([1 << 32], dtype=np.uint64), "f32")
    # patterns of one format agree whatever integer array holds them: no cast changes a pattern
    a = bitcompare.of_format(np.array([0x3f800000], dtype=np.uint64), "f32")
    b = bitcompare.of_format(np.array([0x3f800000], dtype=np.uint32), "f32")
    assert bitcompare.compare(a, b).mismatches == 0
    # the format's own unsigned type is taken as it is (the result files' arrays); a byte-swapped one or a
    # signed one is read by value, and a negative pattern is refused
    own = np.array([0x3f80, 0xffff, 0], dtype=np.uint16)
    p = bitcompare.of_format(own, "bf16")
    assert p.bits.dtype == np.uint16 and p.bits.tolist() == [0x3f80, 0xffff, 0]
    swapped = bitcompare.of_format(own.astype(">u2"), "bf16")
    assert swapped.bits.dtype == np.uint16 and swapped.bits.tolist() == [0x3f80, 0xffff, 0]
    assert bitcompare.compare(p, swapped).mismatches == 0
    with pytest.raises(ValueError, match="do not all fit bf16"):
        bitcompare.of_format(np.array([-1], dtype=np.int16), "bf16")
    with pytest.raises(ValueError, match="do not all fit f16"):
        bitcompare.of_format(np.array([1 << 16], dtype=np.uint32), "f16")


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64, np.int32, np.uint64])
def test_a_big_endian_array_has_the_patterns_of_its_values(dtype):
    """Patterns are of the values, whatever the bytes' order in memory: an array and its big-endian copy are
    equal, and a difference is found where the values differ."""
    x = np.arange(1, 8).astype(dtype)
    swapped = x.astype(np.dtype(dtype).newbyteorder(">"))
    assert bitcompare.patterns(swapped).bits.tolist() == bitcompare.patterns(x).bits.tolist()
    assert bitcompare.compare(x, swapped).mismatches == 0
    other = swapped.copy()
    other[3] = other[3] + 1
    diff = bitcompare.compare(x, other)
    assert diff.index.tolist() == [3] and bitcompare.patterns(other).dtype == np.dtype(dtype).name
