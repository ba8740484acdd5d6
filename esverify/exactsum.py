"""The correctly rounded sum of a float64 array, equal bit for bit to ``math.fsum(x.tolist())``.

The training loops' reward is ``-fsum((theta - target)**2)`` over every element of a member's
parameters, computed by both sides of a loop row for every member of every iteration. ``math.fsum``
over ``tolist()`` spends about 1.0 ms per 20,370-element model (a third of it making Python
floats; a sixth of a loop row's CPU time in a profile of the parity matrix); this computes the same
value in about 0.06 ms with numba and 0.3 ms with numpy alone (benchmarks/bench_exactsum.py
prints both ratios):

- every finite f64 is ``mantissa * 2**(exponent - 53)`` with an integer ``|mantissa| < 2**53``
  (``np.frexp``, exact, subnormals included);
- the mantissa is split into two 27-bit pieces, and each piece is summed per exponent: with numpy
  by ``np.bincount`` per 4,096-value chunk (which keeps the temporaries in cache), exact because a
  sum of at most 2**26 integers below 2**27 is an integer below 2**53; with numba, when it imports,
  from the value's IEEE fields into int64 bins in one compiled pass;
- the bins are combined into one Python integer ``N`` (exact), and ``N * 2**k`` is rounded once by
  Python's int-to-float conversion or int/int true division, both correctly rounded to nearest,
  ties to even -- the rounding ``math.fsum`` documents.

What the shortcut cannot decide, and arrays under 400 values (1,500 without numba), where it is
slower, go to ``math.fsum`` itself: a NaN or an infinity among the
values, an exact sum of zero (its sign depends on the signed zeros summed), values whose magnitudes
add up to 2**1020 or more (``math.fsum`` raises OverflowError when a partial sum overflows, even if
the exact sum is in range), arrays too long for exact bins. The property test
(tests/test_exactsum.py) checks bitwise equality with ``math.fsum`` over arbitrary f64 arrays.
"""
from __future__ import annotations

import math

import numpy as np

try:
    import numba

    from .jitcache import njit as njit_cached
except ImportError:  # pragma: no cover - numba is a dependency; the numpy path gives the same bits
    numba = None

_PIECE = 27
_MASK = (1 << _PIECE) - 1
#: bins stay exact below 2**53: at most 2**(53 - 27) pieces below 2**27 per bin
_MAX_LENGTH = 1 << (53 - _PIECE)
#: values per pass: a chunk's temporaries stay in the core's cache (4x faster than whole 20k arrays)
_CHUNK = 4096
#: below this many values math.fsum itself is faster: the numpy path (46 us against 58 us at 1,000
#: values) and the numba one (a fixed 10 us: 6 us against 14 us at 200 values, 34 against 17 at 1,000)
_SMALL = 1500
#: the fewest values array_fsum and squared_distance_fsum hand to their numba kernels (fewer: math.fsum);
#: the warm start server calls them at this size so that numba loads the kernels once (warm_server.py)
SMALLEST_COMPILED = 400
_SMALL_NUMBA = SMALLEST_COMPILED
_TWO_53 = float(1 << 53)
_SAFE_TOTAL = 2.0 ** 1020


def array_fsum(x) -> float:
    """Correctly rounded sum of the values of `x` (any shape, converted to float64; a numpy array or
    anything np.asarray takes), bitwise equal to ``math.fsum(np.ravel(x).tolist())``, including its
    results for NaN, infinities, signed zeros and its errors (OverflowError when a partial sum
    overflows, ValueError for inf + -inf). Source: Python's math.fsum contract (the exact sum, rounded
    once to nearest, ties to even)."""
    values = np.asarray(x, dtype=np.float64).reshape(-1)
    compiled = numba is not None and _USE_NUMBA
    if values.size < (_SMALL_NUMBA if compiled else _SMALL):
        return math.fsum(values.tolist())
    # below 2**1020 in total, no partial sum of math.fsum can overflow, so it raises nothing the exact
    # sum would not show; a NaN or an infinity fails the comparison too
    with np.errstate(over="ignore", invalid="ignore"):     # an inf magnitude only means: math.fsum decides
        magnitude = np.abs(values).sum()
    if values.size >= _MAX_LENGTH or not magnitude < _SAFE_TOTAL:
        return math.fsum(values.tolist())
    total, low = _exact_numba(values) if compiled else _exact_numpy(values)
    if total == 0:
        return math.fsum(values.tolist())
    shift = low - 53
    return float(total << shift) if shift >= 0 else total / (1 << -shift)


def _exact_numpy(values: np.ndarray) -> tuple[int, int]:
    """(N, e) with sum(values) == N * 2**(e - 53) exactly, per cache-sized chunk with numpy."""
    chunks = [_exact_chunk(values[start:start + _CHUNK]) for start in range(0, values.size, _CHUNK)]
    low = min(e for _, e in chunks)
    return sum(n << (e - low) for n, e in chunks), low


def _exact_chunk(values: np.ndarray) -> tuple[int, int]:
    """(N, e) with sum(values) == N * 2**(e - 53) exactly (finite values, fewer than _MAX_LENGTH)."""
    fraction, exponent = np.frexp(values)
    fraction *= _TWO_53                      # exact: |fraction| < 1 holds 53 bits
    mantissa = fraction.astype(np.int64)
    low = int(exponent.min())
    exponent -= low
    # two's complement pieces: mantissa == (high << 27) + low_bits with high signed (arithmetic shift)
    # and low_bits in [0, 2**27), so neither piece needs the sign handled apart
    high = (mantissa >> _PIECE).astype(np.float64)
    mantissa &= _MASK
    total = 0
    for offset, part in ((0, mantissa.astype(np.float64)), (_PIECE, high)):
        sums = np.bincount(exponent, weights=part)
        for b in np.flatnonzero(sums):
            total += int(sums[b]) << (int(b) + offset)
    return total, low


#: the numba kernel when numba imports (tests switch it off to check the numpy path alone)
_USE_NUMBA = True

if numba is not None:
    @njit_cached(nogil=True, inline="always")
    def _bin(b, low_bits, high_bits):
        # the IEEE fields of the value whose bits are b: value == m * 2**(e - 1075) with the biased
        # exponent e (1 for subnormals) and the signed integer m, |m| < 2**53; added to bin e as two's
        # complement pieces m == ((m >> 27) << 27) + (m & (2**27 - 1)), each below 2**27 in magnitude,
        # so an int64 bin cannot overflow below 2**36 values (the callers pass fewer than 2**26)
        e = (b >> 52) & 0x7FF
        m = b & 0xFFFFFFFFFFFFF
        if e == 0:
            e = 1
        else:
            m |= 0x10000000000000
        if b < 0:
            m = -m
        low_bits[e] += m & 0x7FFFFFF
        high_bits[e] += m >> 27

    @njit_cached(nogil=True)
    def _bins_numba(values):
        raw = values.view(np.int64)
        low_bits = np.zeros(2048, np.int64)
        high_bits = np.zeros(2048, np.int64)
        for i in range(raw.size):
            _bin(raw[i], low_bits, high_bits)
        return low_bits, high_bits

    @njit_cached(nogil=True)
    def _squared_bins_numba(values, target):
        # _bins_numba of p = (v - target) * (v - target), each p rounded as numpy rounds it (two f64
        # operations, no fused multiply-add: numba contracts nothing without fastmath), with the sum of
        # the p as the magnitude (p >= 0; NaN when a p is NaN)
        low_bits = np.zeros(2048, np.int64)
        high_bits = np.zeros(2048, np.int64)
        magnitude = 0.0
        cell = np.empty(1, np.float64)
        cell_bits = cell.view(np.int64)   # p's IEEE fields, read through a one-element view
        for i in range(values.size):
            d = values[i] - target
            p = d * d
            magnitude += p
            cell[0] = p
            _bin(cell_bits[0], low_bits, high_bits)
        return low_bits, high_bits, magnitude

    @njit_cached(nogil=True)
    def _pieces_numba(low_bits, high_bits):
        # each used bin's two pieces as floats, exactly: a piece is an integer below 2**53 (fewer than
        # 2**26 values) times a power of two no smaller than 2**-1074, and no larger than the total (every
        # p >= 0, so every piece too), which is below 2**1020; math.fsum of exact values is the correctly
        # rounded exact sum, as the integer sum of array_fsum is, without Python's big integers. Zero
        # pieces are left out (they change no sum: every p is >= 0, so no -0.0 is among them)
        pieces = np.empty(2 * low_bits.size, np.float64)
        n = 0
        for e in range(low_bits.size):
            if low_bits[e] != 0:
                pieces[n] = math.ldexp(float(low_bits[e]), e - 1075)
                n += 1
            if high_bits[e] != 0:
                pieces[n] = math.ldexp(float(high_bits[e]), e - 1075 + _PIECE)
                n += 1
        return pieces[:n]


def squared_distance_fsum(values: np.ndarray, target: float) -> float:
    """math.fsum(((values - target) * (values - target)).tolist()) bit for bit, the p = (v - target)**2
    formed in f64 as numpy forms them: the training loops' reward per tensor (esverify.oracle.rewards).
    values: a 1-D float64 numpy array; target: a float. Without numba, or for fewer than 400 values, or
    when the total may overflow (or is NaN or infinite), it is that expression itself; else one compiled
    pass with no temporaries (no d, no d*d, no magnitude pass of their own)."""
    values = np.ascontiguousarray(values, dtype=np.float64).reshape(-1)
    target = float(target)
    if numba is None or not _USE_NUMBA or values.size < _SMALL_NUMBA or values.size >= _MAX_LENGTH:
        return array_fsum(_squares(values, target))
    low, high, magnitude = _squared_bins_numba(values, target)
    if not magnitude < _SAFE_TOTAL:   # as array_fsum: math.fsum decides (overflow, NaN, infinities)
        return math.fsum(_squares(values, target).tolist())
    pieces = _pieces_numba(low, high)
    if pieces.size == 0:    # every p is +0: math.fsum's sum of +0.0
        return 0.0
    return math.fsum(pieces.tolist())


def loop_rewards(tensors, targets, dtype=None) -> list[float]:
    """The training loops' reward of one member for each target: -fsum over the tensors of
    squared_distance_fsum(f64(tensor), target), i.e. math.fsum per tensor, then over the tensors
    (docs/parity.md, "The training loops"). tensors: torch tensors of any dtype and device;
    targets: floats; dtype: the precision the engine computing it runs in (a torch dtype; None: each
    tensor's own), each tensor rounded to it first. Each tensor is converted to f64 once for all targets.
    Both sides of a loop row call this one function (esverify.oracle.rewards, the child's
    oracles/child_server.py `reward`), so they hand out identical rewards."""
    arrays = [(t.detach() if dtype is None else t.detach().to(dtype)).to("cpu").double().numpy().reshape(-1)
              for t in tensors]
    return [-math.fsum([squared_distance_fsum(a, float(target)) for a in arrays]) for target in targets]


def _squares(values: np.ndarray, target: float) -> np.ndarray:
    with np.errstate(over="ignore", invalid="ignore"):   # an infinite square is a value math.fsum takes
        d = values - target
        return d * d


def _exact_numba(values: np.ndarray) -> tuple[int, int]:
    """(N, e) with sum(values) == N * 2**(e - 53) exactly, in one compiled pass (finite values)."""
    low, high = _bins_numba(np.ascontiguousarray(values))
    used = np.flatnonzero(low | high)
    if used.size == 0:
        return 0, 0
    first = int(used[0])
    total = 0
    for e in used.tolist():
        total += (int(low[e]) + (int(high[e]) << _PIECE)) << (e - first)
    # a bin's unit is 2**(e - 1075); as N * 2**(k - 53) that is k = e - 1022
    return total, first - 1022
