"""esverify.bits: hex round trips, ordinals and ulp distances (docs/numerics.md §7)."""
import struct

import ml_dtypes
import numpy as np
import pytest
import torch
from hypothesis import example, given
from hypothesis import strategies as st

from esverify import bits


def f32_bits(x):
    return struct.unpack("<I", struct.pack("<f", x))[0]


def test_known_ulp_distances_f32():
    one = f32_bits(1.0)
    nxt = f32_bits(np.nextafter(np.float32(1), np.float32(2)))
    assert list(bits.ulp_distance([one], [nxt], "f32")) == [1]
    # +0 and -0 are both ordinal 0: distance 0, yet a bitwise mismatch.
    assert list(bits.ulp_distance([0x00000000], [0x80000000], "f32")) == [0]
    # smallest subnormals either side of zero are two ulps apart
    assert list(bits.ulp_distance([0x00000001], [0x80000001], "f32")) == [2]
    # 1.0 and -1.0: 2 * ord(1.0)
    assert list(bits.ulp_distance([one], [one | 0x80000000], "f32")) == [2 * one]


def test_specials_get_no_distance_and_are_named():
    nan, pinf, ninf = 0x7FC00000, 0x7F800000, 0xFF800000
    assert list(bits.ulp_distance([nan, pinf, 0], [0, 0, ninf], "f32")) == [None, None, None]
    assert list(bits.classify([nan, pinf, ninf, 0x3F800000], "f32")) == ["nan", "+inf", "-inf", ""]
    assert list(bits.classify([0x7E00, 0x7C00, 0xFC00], "f16")) == ["nan", "+inf", "-inf"]
    assert list(bits.classify([0x7FC0, 0x7F80], "bf16")) == ["nan", "+inf"]


def test_f64_distance_does_not_overflow():
    big = struct.unpack("<Q", struct.pack("<d", 1.7e308))[0]
    neg = struct.unpack("<Q", struct.pack("<d", -1.7e308))[0]
    d = bits.ulp_distance([big], [neg], "f64")[0]
    assert d == 2 * big and d > 2 ** 63


@given(st.floats(width=32, allow_nan=False, allow_infinity=False),
       st.integers(min_value=-5, max_value=5))
@example(0.0, 1)
@example(-0.0, -1)
@example(-1e-45, 2)
def test_ulp_distance_counts_nextafter_steps(x, k):
    x = np.float32(x)
    y = x
    step = np.float32(np.inf) if k > 0 else np.float32(-np.inf)
    with np.errstate(over="ignore"):
        for _ in range(abs(k)):
            y = np.nextafter(y, step)
    if not np.isfinite(y):
        return
    # nextafter visits exactly one zero when it crosses it, so each step is one ulp
    assert bits.ulp_distance([f32_bits(x)], [f32_bits(y)], "f32")[0] == abs(k)


@pytest.mark.parametrize("fmt,text", [("f32", "0x3f800000"), ("u64", "0xffffffffffffffff"),
                                      ("f16", "0x3c00"), ("bf16", "0x3f80"), ("f64", "0x3ff0000000000000")])
def test_hex_round_trip(fmt, text):
    assert bits.to_hex(bits.from_hex(text, fmt), fmt) == text


@pytest.mark.parametrize("bad", ["3f800000", "0x3f80000", "0x3f8000000", 0x3F800000])
def test_malformed_hex_is_rejected(bad):
    with pytest.raises(ValueError, match="malformed"):
        bits.from_hex(bad, "f32")


def test_array_bits_of_tensors_and_arrays_agree():
    values = [1.0, -0.0, 3.5, 1e-3]
    for torch_dtype, np_dtype, fmt in [(torch.float32, np.float32, "f32"), (torch.float16, np.float16, "f16"),
                                       (torch.bfloat16, ml_dtypes.bfloat16, "bf16")]:
        tb, tf = bits.array_bits(torch.tensor(values, dtype=torch_dtype))
        nb, nf = bits.array_bits(np.array(values, dtype=np_dtype))
        assert tf == nf == fmt
        assert tb.tolist() == nb.tolist()
    assert bits.array_bits(torch.tensor([-1], dtype=torch.int64))[0].tolist() == [2 ** 64 - 1]


def test_describe_shows_pattern_and_value():
    assert bits.describe(0x3F800000, "f32") == "0x3f800000 (1.0)"
    assert bits.describe(0x3F80, "bf16") == "0x3f80 (1.0)"


@given(st.sampled_from(sorted(bits.FLOAT_FORMATS)), st.lists(st.integers(0, 2 ** 64 - 1), min_size=1, max_size=40))
@example("f32", [0x7FC00000, 0x7F800000, 0xFF800000, 0x3F800000, 0x80000000])
@example("f8e4m3fn", [0x7F, 0xFF, 0x7E, 0x78])
def test_nonfinite_is_where_classify_names_a_special(fmt, raw):
    """bitcompare's mask of NaN and infinities is classify's non-empty names, in every float format."""
    w = bits.FLOAT_FORMATS[fmt][0]
    patterns = np.array([x % (1 << w) for x in raw], dtype=bits.UINT_OF_WIDTH[w])
    assert bits.nonfinite(patterns, fmt).tolist() == [name != "" for name in bits.classify(patterns, fmt)]
