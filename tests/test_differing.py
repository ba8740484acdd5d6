"""esverify.differing, bitcompare's search for the differing elements, against `numpy.flatnonzero(a != b)`.

The compiled pass and numpy's must give the same int64 indices for every width bitcompare compares
(uint8/16/32/64 patterns), at every length (the compiled pass works in blocks of 256 elements and skips an
equal prefix of `SKIP_FROM` or more, so lengths and positions around those edges are drawn), and the
properties must catch a wrong search: the same differential run on planted wrong kernels fails.
"""
from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from esverify import bitcompare, differing as dmod
from esverify.differing import differing

WIDTHS = (np.uint8, np.uint16, np.uint32, np.uint64)
#: lengths at the edges of the compiled pass's blocks, of SKIP_FROM and of NUMPY_BELOW
EDGES = sorted({0, 1, 255, 256, 257, 511, 512, 4095, 4096, 4097, dmod.NUMPY_BELOW - 1, dmod.NUMPY_BELOW,
                dmod.NUMPY_BELOW + 1, dmod.NUMPY_BELOW + 300})
#: a length past the numpy cut-over as shipped (read at import: the fixture below lowers the module's)
LONG = dmod.NUMPY_BELOW + 5


@pytest.fixture(params=["as shipped", "compiled at every length"])
def threshold(request, monkeypatch):
    """The module as it ships, and with its numpy cut-over at 0 so that short arrays take the compiled pass."""
    if request.param != "as shipped":
        monkeypatch.setattr(dmod, "NUMPY_BELOW", 0)
    return request.param


def _pair(dtype, n: int, flips, seed: int):
    """a (random patterns of dtype, length n) and b: a with the bits `mask` flipped at each (position, mask)."""
    info = np.iinfo(dtype)
    a = np.random.default_rng(seed).integers(0, info.max, size=n, dtype=dtype, endpoint=True)
    b = a.copy()
    for pos, mask in flips:
        if n:
            b[pos % n] ^= dtype(mask & int(info.max))
    return a, b


def _check(a, b):
    got = differing(a, b)
    want = np.flatnonzero(a != b)
    assert got.dtype == np.int64 and want.dtype == np.int64
    assert got.tolist() == want.tolist()


flip = st.tuples(st.integers(0, 1 << 20), st.integers(1, (1 << 64) - 1))


@pytest.mark.parametrize("dtype", WIDTHS, ids=lambda d: d.__name__)
# the fixture sets one value for the whole test, which no example changes: its sharing across examples is meant
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(n=st.one_of(st.sampled_from(EDGES), st.integers(0, 3 * dmod.NUMPY_BELOW)),
       flips=st.lists(flip, max_size=12), seed=st.integers(0, 2**32 - 1))
def test_differing_is_numpys_flatnonzero_for_every_width(dtype, n, flips, seed, threshold):
    a, b = _pair(dtype, n, flips, seed)
    _check(a, b)


@pytest.mark.parametrize("dtype", WIDTHS, ids=lambda d: d.__name__)
@pytest.mark.parametrize("n", EDGES)
def test_equal_all_different_last_and_first_differing(dtype, n, threshold):
    a, b = _pair(dtype, n, [], 7)
    assert differing(a, b).tolist() == []                         # all equal (empty arrays included)
    assert differing(a, ~a).tolist() == list(range(n))            # all different
    if n:
        last = b.copy()
        last[-1] ^= 1
        assert differing(a, last).tolist() == [n - 1]
        first = b.copy()
        first[0] ^= 1 << 7
        assert differing(a, first).tolist() == [0]
    if n > dmod.SKIP_FROM + 2:   # a difference past SKIP_FROM: numpy's pass reads from there, indices shifted back
        far = b.copy()
        far[[dmod.SKIP_FROM, dmod.SKIP_FROM + 1, n - 1]] ^= 1
        assert differing(a, far).tolist() == [dmod.SKIP_FROM, dmod.SKIP_FROM + 1, n - 1]


def test_nan_payloads_and_signed_zeros_differ_by_their_bits_alone(threshold):
    """Floats are compared as their patterns: two NaNs differing only in payload bits differ, the same NaN
    pattern on both sides does not (where `x != x` on the floats would say every NaN differs), -0 is not 0."""
    n = LONG
    x = np.ones(n, dtype=np.float32)
    x[[3, n - 1]] = np.float32("nan")
    y = x.copy()
    y_bits = y.view(np.uint32)
    y_bits[n - 1] = 0x7FC00001                                     # x's NaN there is 0x7FC00000
    x[10], y[10] = np.float32(0.0), np.float32(-0.0)
    got = differing(x.view(np.uint32), y_bits)
    assert got.tolist() == [10, n - 1]
    assert bitcompare.compare(x, y).index.tolist() == [10, n - 1]
    for dtype, bits in ((np.float64, np.uint64), (np.float16, np.uint16)):
        u = np.full(n, np.nan, dtype=dtype).view(bits)
        v = u.copy()
        v[n // 2] ^= 1                                             # a payload bit: still a NaN, another pattern
        assert np.isnan(v.view(dtype)[n // 2])
        assert differing(u, v).tolist() == [n // 2]


def test_other_dtypes_and_shapes_take_numpys_pass():
    """Anything but two native 1-D unsigned arrays of one dtype gets numpy's own answer."""
    n = dmod.NUMPY_BELOW + 1
    a = np.arange(n, dtype=np.uint32)
    b = a.copy()
    b[5] = 0
    assert differing(a.astype(">u4"), b.astype(">u4")).tolist() == [5]
    assert differing(a.astype(np.int64), b.astype(np.int64)).tolist() == [5]
    assert differing(a.reshape(1, n), b.reshape(1, n)).tolist() == [5]
    assert differing(a[::2], b[::2]).tolist() == np.flatnonzero(a[::2] != b[::2]).tolist()


def test_numpys_pass_alone_without_numba(monkeypatch):
    """Where numba cannot be imported the answer is numpy's (a child interpreter without numba)."""
    monkeypatch.setattr(dmod, "_kernels", False)
    a, b = _pair(np.uint32, dmod.NUMPY_BELOW + 9, [(5, 1), (dmod.NUMPY_BELOW + 8, 2)], 3)
    assert differing(a, b).tolist() == [5, dmod.NUMPY_BELOW + 8]


def test_importing_bitcompare_does_not_import_numba():
    """numba is loaded at the first comparison long enough to take the compiled pass, never at import."""
    code = ("import sys, numpy as np, esverify.bitcompare, esverify.differing as d\n"
            "assert 'numba' not in sys.modules\n"
            "d.differing(np.zeros(10, np.uint8), np.ones(10, np.uint8))\n"
            "assert 'numba' not in sys.modules\n"
            "print('ok')")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "ok"


def _skips_the_last(a, b):
    n = a.size
    for k in range(n - 1):
        if a[k] != b[k]:
            return k
    return -1


def _one_past(a, b):
    k = dmod._first(a, b)
    return k + 1 if k >= 0 else k


@pytest.mark.parametrize("wrong, n, flips", [
    (_skips_the_last, 300, [(299, 1)]),
    (_one_past, dmod.SKIP_FROM + 10, [(dmod.SKIP_FROM + 3, 1), (dmod.SKIP_FROM + 7, 1)]),
], ids=["skips the last element", "first index one past"])
def test_the_checks_catch_a_wrong_kernel(wrong, n, flips, monkeypatch):
    """Planted wrong kernels (run as Python in place of the compiled one) fail the check the tests above make."""
    monkeypatch.setattr(dmod, "_kernels", (wrong, dmod._tally))
    monkeypatch.setattr(dmod, "NUMPY_BELOW", 0)
    a, b = _pair(np.uint32, n, flips, 1)
    with pytest.raises(AssertionError):
        _check(a, b)


# bitcompare.summary: the count, first difference and largest distance from differing.tally's one pass, against
# what compare's BitDiff gives (its index, patterns and distances)

#: (numpy dtype of the values, their patterns' dtype, bitcompare's format): every format of at most 32 bits
FLOATS = [(np.float32, np.uint32, "f32"), (np.float16, np.uint16, "f16")]
try:
    import ml_dtypes
except ImportError:  # pragma: no cover - ml_dtypes comes with jax
    ml_dtypes = None
else:
    FLOATS += [(ml_dtypes.bfloat16, np.uint16, "bf16"), (ml_dtypes.float8_e5m2, np.uint8, "f8e5m2"),
               (ml_dtypes.float8_e4m3fn, np.uint8, "f8e4m3fn")]


def _from_compare(e, g, start):
    d = bitcompare.compare(e, g)
    out = {"mismatches": d.mismatches, "first": d.first(start), "max_ulp": d.max_ulp}
    if d.layout:
        out["layout"] = d.layout
    return out


def _hostile(bits_dtype, n: int, flips, seed: int):
    """Two pattern arrays: random patterns, with NaNs, infinities, both zeros and the largest magnitudes of
    the format planted on both sides at the flipped positions, so that distances across the sign, to and from
    the specials and the largest ones all occur."""
    a, b = _pair(bits_dtype, n, flips, seed)
    if n:
        w = 8 * np.dtype(bits_dtype).itemsize
        r = np.random.default_rng(seed + 1)
        picks = r.integers(0, n, size=min(n, 16))
        top = (1 << (w - 1)) - 1
        values = [0, 1 << (w - 1), top, (1 << w) - 1, top >> 1, (top >> 1) | (1 << (w - 1)), 1, (1 << (w - 1)) | 1]
        a[picks] = r.choice(values, size=picks.size).astype(bits_dtype)
        b[picks[::2]] = r.choice(values, size=picks[::2].size).astype(bits_dtype)
    return a, b


@pytest.mark.parametrize("values, bits_dtype, fmt", FLOATS, ids=[f for *_, f in FLOATS])
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(n=st.one_of(st.sampled_from(EDGES), st.integers(0, 3 * dmod.NUMPY_BELOW)),
       flips=st.lists(flip, max_size=40), seed=st.integers(0, 2**32 - 1), start=st.integers(0, 1 << 40))
def test_summary_is_compares_count_first_and_largest_distance(values, bits_dtype, fmt, n, flips, seed, start,
                                                               threshold):
    a, b = _hostile(bits_dtype, n, flips, seed)
    e, g = a.view(values), b.view(values)
    assert bitcompare.summary(e, g, start) == _from_compare(e, g, start)
    pe, pg = bitcompare.of_format(a, fmt), bitcompare.of_format(b, fmt)
    assert bitcompare.summary(pe, pg, start) == _from_compare(pe, pg, start)


@pytest.mark.parametrize("dtype", WIDTHS, ids=lambda d: d.__name__)
@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(n=st.sampled_from(EDGES), flips=st.lists(flip, max_size=12), seed=st.integers(0, 2**32 - 1))
def test_summary_of_integer_patterns_has_no_distance(dtype, n, flips, seed, threshold):
    a, b = _pair(dtype, n, flips, seed)
    for e, g in ((a, b), (a.view(np.dtype(dtype.__name__.removeprefix("u"))), b.view(np.dtype(dtype.__name__.removeprefix("u"))))):
        want = _from_compare(e, g, 3)
        assert bitcompare.summary(e, g, 3) == want
        assert want["max_ulp"] is None


def test_summary_of_layouts_and_wide_formats_is_compares():
    """A dtype or shape that differs, f64 and 64-bit integers (the general path) give compare's answer."""
    n = LONG
    x = np.random.default_rng(5).standard_normal(n)
    y = x.copy()
    y[[7, n - 1]] = [np.nan, -y[n - 1]]
    for e, g in ((x, y), (x.view(np.int64), y.view(np.int64)), (x, y.astype(np.float32)), (x, y[:-1])):
        assert bitcompare.summary(e, g, 11) == _from_compare(e, g, 11)
    assert bitcompare.summary(x, y)["max_ulp"] == _from_compare(x, y, 0)["max_ulp"] > 2 ** 62


def test_a_subclass_takes_numpys_pass():
    """A masked array is not what the compiled pass takes (numba refuses it): numpy's answer, not an error."""
    a = np.ma.array(np.zeros(LONG, np.uint32))
    b = np.zeros(LONG, np.uint32)
    b[[1, LONG - 1]] = 1
    assert differing(a, b).tolist() == np.flatnonzero(a != b).tolist() == [1, LONG - 1]


def test_the_formats_width_not_the_item_size_decides_the_compiled_tally():
    """A Patterns of format f64 over 32-bit integers (made by hand; `patterns` never makes one) gives compare's
    answer, also after a 32-bit summary compiled the tally for int64 arguments: its sign, 2**63, is no int64."""
    a = np.zeros(LONG, np.uint32)
    b = a.copy()
    b[-1] = 1
    assert bitcompare.summary(a.view(np.float32), b.view(np.float32))["max_ulp"] == 1   # the narrow tally first
    e, g = (bitcompare.Patterns(x, "hand-made", "f64", (LONG,)) for x in (a, b))
    assert bitcompare.summary(e, g, 3) == _from_compare(e, g, 3)
    assert dmod.tally(a, b, 1 << 63, 0x7FF << 52) is None


def _tally_without_abs(a, b, sign, special):      # a negative distance never counts
    count, best = 0, -1
    for i in range(a.size):
        u, v = int(a[i]), int(b[i])
        if u != v:
            count += 1
            if (u & special) != special and (v & special) != special:
                ou = -(u & (sign - 1)) if u & sign else u & (sign - 1)
                ov = -(v & (sign - 1)) if v & sign else v & (sign - 1)
                best = max(best, ou - ov)
    return count, best


def _tally_one_side_special(a, b, sign, special):  # only expected's NaN/inf kept out
    count, best = 0, -1
    for i in range(a.size):
        u, v = int(a[i]), int(b[i])
        if u != v:
            count += 1
            if (u & special) != special:
                ou = -(u & (sign - 1)) if u & sign else u & (sign - 1)
                ov = -(v & (sign - 1)) if v & sign else v & (sign - 1)
                best = max(best, abs(ou - ov))
    return count, best


def _tally_skips_the_last(a, b, sign, special):
    return dmod._tally(a[:-1], b[:-1], sign, special)


@pytest.mark.parametrize("wrong", [_tally_without_abs, _tally_one_side_special, _tally_skips_the_last],
                         ids=["no absolute value", "one side's specials", "skips the last element"])
def test_the_summary_check_catches_a_wrong_tally(wrong, monkeypatch):
    """Planted wrong tallies (run as Python in place of the compiled one) fail the summary's check."""
    monkeypatch.setattr(dmod, "NUMPY_BELOW", 0)
    first = dmod._compiled()[0]
    monkeypatch.setattr(dmod, "_kernels", (first, wrong))
    x = np.ones(300, dtype=np.float32)
    y = x.copy()
    y[[5, 299]] = [np.float32(0.5), np.float32(np.inf)]   # expected above got; got's last one infinite
    y[7] = np.float32(3.0)
    with pytest.raises(AssertionError):
        assert bitcompare.summary(x, y, 0) == _from_compare(x, y, 0)
