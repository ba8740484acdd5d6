"""esverify.exactsum.array_fsum: bitwise equal to math.fsum over arbitrary float64 arrays."""
import math
import struct

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import esverify.exactsum as exactsum
from esverify.exactsum import array_fsum


@pytest.fixture(autouse=True, params=["numba", "numpy"])
def path(request, monkeypatch):
    """Every test runs on both ways to the exact sum: the numba kernel and the numpy chunks."""
    if request.param == "numba" and exactsum.numba is None:
        pytest.skip("numba is not installed")
    monkeypatch.setattr(exactsum, "_USE_NUMBA", request.param == "numba")
    return request.param


def _bits(x: float) -> int:
    return struct.unpack("<Q", struct.pack("<d", x))[0]


def _same(values) -> None:
    """array_fsum and math.fsum agree bit for bit, or both raise the same error (OverflowError for a
    sum beyond the f64 range, ValueError for inf + -inf)."""
    try:
        want = math.fsum(np.asarray(values, dtype=np.float64).reshape(-1).tolist())
    except (OverflowError, ValueError) as error:
        with pytest.raises(type(error)):
            array_fsum(values)
        return
    got = array_fsum(values)
    assert _bits(got) == _bits(want) or (math.isnan(got) and math.isnan(want)), (got, want)


def _tiled(values):
    """The example repeated to at least 1,500 values (below that, 400 with numba, array_fsum hands
    math.fsum the array)."""
    return np.tile(values, -(-1500 // len(values))) if len(values) else values


@settings(max_examples=400, deadline=None)
@given(hnp.arrays(np.float64, st.integers(0, 60), elements=st.floats(allow_nan=True, allow_infinity=True)))
@example(np.array([1e308, 1e308]))                      # overflow: math.fsum raises
@example(np.array([-0.0, -0.0]))                        # signed zero of an exact zero sum
@example(np.array([math.inf, -math.inf]))               # math.fsum raises ValueError
@example(np.array([5e-324, -5e-324, 5e-324]))           # subnormals
@example(np.array([1.0, 2.0 ** -53]))                   # a tie: rounds to even (1.0)
@example(np.array([1.0, 2.0 ** -53, 2.0 ** -105]))      # just above the tie: rounds up
@example(np.array([1.7976931348623157e308, -1.7976931348623157e308, 1.0]))
def test_equals_math_fsum_bitwise(values):
    _same(values)
    _same(_tiled(values))


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 2 ** 32 - 1), st.integers(1, 13000), st.sampled_from([1e-300, 1e-8, 1.0, 1e8, 1e300]))
@pytest.mark.filterwarnings("ignore:overflow encountered")
def test_equals_math_fsum_on_long_mixed_arrays(seed, n, scale):
    """Long arrays of mixed signs and magnitudes (cancellation across many exponents), as the loop
    rewards' squared differences and beyond."""
    rng = np.random.default_rng(seed)
    values = rng.standard_normal(n) * scale * np.exp2(rng.integers(-60, 60, n))
    _same(values)
    _same(values * values)


@pytest.mark.parametrize("order", ["small first", "large first"])
def test_chunks_of_different_exponents_combine_exactly(order):
    """The sum is made per 4,096-value chunk, each with its own lowest exponent: a chunk of tiny values
    before or after a chunk of large ones, with a half-way tie only the tiny ones decide."""
    large = np.full(5000, 1.0)
    tiny = np.full(5000, 2.0 ** -80)
    values = np.concatenate([tiny, large] if order == "small first" else [large, tiny])
    _same(values)
    values[0] += 2.0 ** -40                  # the exact sum is now above the halfway point of one ulp
    _same(values)


def test_known_answers():
    assert array_fsum(np.array([0.1] * 10)) == 1.0               # the naive sum gives 0.9999999999999999
    assert array_fsum(np.array([0.1] * 2000)) == 200.0
    assert array_fsum(np.array([1e100, 1.0, -1e100] * 600)) == 600.0    # the naive sum gives 0.0
    assert array_fsum(np.array([])) == 0.0
    _same(np.array([-0.0]))                                     # whatever sign this Python's fsum gives
    assert array_fsum(np.array([math.inf, 1.0])) == math.inf
    with pytest.raises(ValueError):
        array_fsum(np.array([math.inf, -math.inf]))
    assert array_fsum(np.array([[1.0, 2.0], [3.0, 4.5]])) == 10.5    # any shape


# ---------------------------------------------------------------- squared_distance_fsum (the loops' reward)

def _same_squared(values, target) -> None:
    """squared_distance_fsum(values, target) is math.fsum of numpy's (values - target) * (values - target),
    bit for bit, or raises the same error."""
    with np.errstate(over="ignore", invalid="ignore"):
        d = np.asarray(values, dtype=np.float64) - target
        squares = d * d
    try:
        want = math.fsum(squares.tolist())
    except (OverflowError, ValueError) as error:
        with pytest.raises(type(error)):
            exactsum.squared_distance_fsum(values, target)
        return
    got = exactsum.squared_distance_fsum(values, target)
    assert _bits(got) == _bits(want) or (math.isnan(got) and math.isnan(want)), (got, want)


@given(st.integers(0, 2 ** 32 - 1), st.integers(0, 5000),
       st.sampled_from([1e-300, 1e-160, 1e-8, 0.05, 1.0, 1e8, 1e150, 1e300]),
       st.sampled_from([0.0, -0.0, 0.005, -1.5, 1e-310, 1e150]))
@settings(max_examples=120, deadline=None)
@example(seed=0, n=401, scale=1e300, target=0.0)      # the squares overflow: math.fsum's inf
@example(seed=1, n=400, scale=1e150, target=0.0)      # finite squares whose sum overflows: OverflowError
@example(seed=2, n=4000, scale=1e-160, target=0.0)    # squares in the subnormal range and zeros
def test_squared_distance_fsum_is_math_fsum_of_numpys_squares(seed, n, scale, target):
    rng = np.random.default_rng(seed)
    values = rng.normal(0.0, scale, n)
    values[::17] = 0.0
    values[1::19] = target   # exact zeros of the difference
    _same_squared(values, target)


@given(st.integers(0, 2 ** 32 - 1), st.integers(0, 60))
@settings(max_examples=60, deadline=None)
def test_pieces_are_the_bins_values_exactly(seed, used):
    """_pieces_numba: every nonzero bin's two pieces, low * 2**(e - 1075) and high * 2**(e - 1075 + 27),
    as exact floats (numpy's ldexp of the same integers), zero pieces left out; bins 1 (the subnormal
    unit 2**-1074) and 2046 included; a sum of nothing is +0.0."""
    if exactsum.numba is None:
        pytest.skip("numba is not installed")
    rng = np.random.default_rng(seed)
    low, high = np.zeros(2048, np.int64), np.zeros(2048, np.int64)
    bins = rng.choice(np.arange(1, 2047), size=used, replace=False)
    bins[: min(2, used)] = [1, 2046][: min(2, used)]
    low[bins] = rng.integers(0, 1 << 53, used) * rng.integers(0, 2, used)     # some zero pieces
    high[bins] = rng.integers(0, 1 << 26, used) * rng.integers(0, 2, used)
    low[2046], high[2046] = low[2046] >> 10, 0    # as in use: every piece below 2**1020 (the total's bound)
    e = np.arange(2048)
    want = np.concatenate([np.ldexp(low.astype(np.float64), e - 1075)[low != 0],
                           np.ldexp(high.astype(np.float64), e - 1075 + 27)[high != 0]])
    got = exactsum._pieces_numba(low, high)
    assert sorted(_bits(x) for x in got.tolist()) == sorted(_bits(x) for x in want.tolist())
    assert all(x > 0 for x in got.tolist())
    assert _bits(exactsum.squared_distance_fsum(np.full(600, 0.25), 0.25)) == _bits(0.0)   # every p +0: no piece


def test_squared_distance_fsum_keeps_nan_and_infinities():
    base = np.random.default_rng(3).normal(0.0, 1.0, 1000)
    for bad in (math.nan, math.inf, -math.inf):
        values = base.copy()
        values[500] = bad
        _same_squared(values, 0.25)


def test_the_loops_reward_is_the_formula_it_documents():
    """loop_reward / loop_rewards: -fsum over the tensors of fsum((f64(t) - target)**2), numpy's squares."""
    import torch

    from esverify.oracle import paramsets
    from esverify.exactsum import loop_rewards
    from esverify.oracle.rewards import loop_reward
    for dtype, engine in (("f32", None), ("bf16", torch.bfloat16), ("mixed", torch.float16)):
        _, tensors = paramsets.build(dtype, False)
        targets = [0.005, -0.015, 0.0]
        want = []
        for target in targets:
            per = []
            for t in tensors:
                d = (t if engine is None else t.to(engine)).double().numpy().reshape(-1) - target
                per.append(math.fsum((d * d).tolist()))
            want.append(-math.fsum(per))
        assert [_bits(x) for x in loop_rewards(tensors, targets, engine)] == [_bits(x) for x in want]
        assert _bits(loop_reward(tensors, targets[1], engine)) == _bits(want[1])


# ---------------------------------------------------------------- loop_rewards over any tensors and targets

def _want_rewards(arrays, targets):
    """The loops' reward by its definition: -math.fsum over the tensors of math.fsum of numpy's squares,
    or the error math.fsum raises."""
    out = []
    for target in targets:
        per = []
        for a in arrays:
            with np.errstate(over="ignore", invalid="ignore"):
                d = a - target
                per.append(math.fsum((d * d).tolist()))
        out.append(-math.fsum(per))
    return out


def _same_rewards(arrays, targets) -> None:
    import torch

    from esverify.exactsum import loop_rewards
    tensors = [torch.from_numpy(np.asarray(a, dtype=np.float64)) for a in arrays]
    try:
        want = _want_rewards([np.asarray(a, dtype=np.float64) for a in arrays], targets)
    except (OverflowError, ValueError) as error:
        with pytest.raises(type(error)):
            loop_rewards(tensors, targets)
        return
    got = loop_rewards(tensors, targets)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert _bits(g) == _bits(w) or (math.isnan(g) and math.isnan(w)), (got, want)


_SCALES = st.sampled_from([1e-300, 1e-160, 1e-8, 0.05, 1.0, 1e8, 1e150, 1e300])


@given(st.integers(0, 2 ** 32 - 1), st.lists(st.integers(0, 3000), max_size=9), _SCALES,
       st.lists(st.sampled_from([0.0, -0.0, 0.005, -1.5, 1e-310, 1e150, 0.05]), max_size=4))
@settings(max_examples=150, deadline=None)
@example(seed=0, sizes=[401, 3], scale=1e300, targets=[0.0])        # the squares overflow: inf
@example(seed=1, sizes=[400, 400], scale=1e150, targets=[0.0])      # a sum overflows: OverflowError
@example(seed=1, sizes=[300, 300, 300], scale=3e153, targets=[0.0])  # some squares overflow: -inf
@example(seed=2, sizes=[4000, 0, 1], scale=1e-160, targets=[0.0, 1e-310])   # subnormal squares, an empty tensor
@example(seed=3, sizes=[], scale=1.0, targets=[0.5])                # no tensors: -0.0
@example(seed=4, sizes=[5, 5], scale=1.0, targets=[])               # no targets
def test_loop_rewards_are_the_two_fsums_bit_for_bit(seed, sizes, scale, targets):
    """loop_rewards is -fsum(fsum(squares) per tensor) per target, bit for bit, errors included, over tensors
    of any sizes (empty ones, ones below the compiled kernels' 400 values) and any number of targets."""
    rng = np.random.default_rng(seed)
    arrays = []
    for k, n in enumerate(sizes):
        values = rng.normal(0.0, scale, n) * rng.choice([1.0, 1e-3, 1e3], n)
        values[k::17] = 0.0
        values[1::19] = targets[0] if targets else 0.0     # exact zeros of the difference
        arrays.append(values)
    _same_rewards(arrays, targets)


def test_loop_rewards_keeps_nan_and_infinities():
    base = np.random.default_rng(5).normal(0.0, 1.0, 1000)
    for bad in (math.nan, math.inf, -math.inf):
        values = base.copy()
        values[500] = bad
        _same_rewards([base, values, base[:7]], [0.25, -0.5])
    _same_rewards([base], [math.nan, 0.0])
    _same_rewards([base], [math.inf])
    # each tensor's sum in range (about 1.02e307 < 2**1020), the sum over 20 tensors beyond f64's: math.fsum
    # raises OverflowError, which the reward raises too
    _same_rewards([np.array([3.2e153])] * 20, [0.0])
    with pytest.raises(OverflowError):
        _want_rewards([np.array([3.2e153])] * 20, [0.0])
