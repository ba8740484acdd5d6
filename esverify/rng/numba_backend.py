"""numba CPU kernels of the gaussian mappings (docs/CONTRACT.md §3), the fastest CPU backend.

One compiled serial loop over aligned pairs computes both Box-Muller halves
of each pair straight into the output, so the kernels need no work memory.
The loop is branch-free enough for LLVM to vectorise it (AVX-512 here,
~850 M poly32 values/s on one core); numba's `parallel=True`/`prange`
defeats that vectorisation (measured 4x slower), so threads come from
Python instead: the kernels release the GIL (`nogil=True`) and a large
range is split into even-aligned parts run on `threads()` Python threads
(default NUMBA_NUM_THREADS, i.e. the usable cores; `set_threads` changes
it). numba's own threading layer is never launched: its OpenMP workers
and torch's spin-wait and starve each other (measured: libm64 fell from
137 to 40 M/s after `numba.set_num_threads(2)`). The values are a pure
function of the element index, so the split never changes a bit.
Compiled with ``@njit`` without fastmath and with ``cache=True`` (without the
cache in a read-only install, `esverify.jitcache`; the same code): LLVM then
emits no `contract` flag and never fuses ``p * f + c`` into an FMA (the
tests check the generated assembly for FMA instructions as well as the
bits). Every poly32 literal is an np.float32 global (rounded from
`esverify.rng.constants`; numba freezes globals at compile time, so the
assembly is the same as with inline literals) and every integer an
explicitly typed one: in numba, mixing uint64 with int64, or float32 with
a Python float, silently promotes to float64.

poly32 reads the f32 bit pattern of ua32 through an LLVM bitcast
intrinsic; sqrt is taken in f64 of the f32 value and rounded once (the
correctly rounded f32 square root, docs/CONTRACT.md §9). libm64 calls LLVM's f64
log/sqrt/cos/sin, i.e. glibc's libm here (no SVML), the same functions
Python's `math` uses; LLVM merges cos(t) and sin(t) into one glibc
`sincos` call (seen in the assembly), whose results the tests find equal
to `math.cos`/`math.sin` (0 differences in 48,000 values).

Kernel signature: `esverify.rng.mappings`. Checks: ``python -m pytest -q
tests/test_rng_backends.py`` (bits against the scalar reference, threads,
fork, no FMA in the assembly) and ``esverify goldens check``.
"""
from __future__ import annotations

import math
import os
from concurrent.futures import ThreadPoolExecutor

import numba
import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.extending import intrinsic

from ..jitcache import njit as njit_cached
from . import constants as K
from .splitmix import GAMMA, MASK64, MUL1, MUL2

U = np.uint64
F = np.float32
# Globals, not locals: numba freezes module-level values into the compiled code
# as typed constants (the assembly is the same as with inline literals).
_GAMMA, _MUL1, _MUL2 = U(GAMMA), U(MUL1), U(MUL2)
_STEP = U((2 * GAMMA) & MASK64)
_S30, _S27, _S31, _S11 = U(30), U(27), U(31), U(11)
_ONE_U = U(1)
_TWO_M53 = K.TWO_M53
_SQRT_HALF = F(K.SQRT_HALF)
_P0 = F(K.LOG_P0)
_P1, _P2, _P3, _P4, _P5, _P6, _P7, _P8 = (F(c) for c in K.LOG_COEFFS)
_Q1, _Q2 = F(K.LOG_Q1), F(K.LOG_Q2)
_HALF_PI = F(K.HALF_PI)
_S0, _S1, _S2 = (F(c) for c in K.SIN_COEFFS)
_C0, _C1, _C2 = (F(c) for c in K.COS_COEFFS)
_F1, _FH, _FM2, _F4 = F(1.0), F(0.5), F(-2.0), F(4.0)
_MANT, _HALF_EXP = np.uint32(K.F32_MANTISSA), np.uint32(K.F32_HALF_EXPONENT)
_S23, _BIAS = np.uint32(23), np.int32(K.EXP_OFFSET)
_TWO_PI = K.TWO_PI


@intrinsic
def f32_to_bits(typingctx, x):
    """In numba code: the u32 bit pattern of the f32 `x` (an LLVM bitcast, no conversion)."""
    sig = types.uint32(types.float32)

    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.IntType(32))
    return sig, codegen


@intrinsic
def bits_to_f32(typingctx, x):
    """In numba code: the f32 whose bit pattern is the u32 `x` (an LLVM bitcast, no conversion)."""
    sig = types.float32(types.uint32)

    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.FloatType())
    return sig, codegen


@njit_cached(inline="always")
def _mix(z):
    z = (z ^ (z >> _S30)) * _MUL1
    z = (z ^ (z >> _S27)) * _MUL2
    return z ^ (z >> _S31)


@njit_cached(inline="always")
def poly32_pair(z):
    """(even, odd) poly32 values of the pair whose first counter word is mix(z) (inlined by the fill kernels
    here and by esverify.es.cpu_kernels' update that draws as it accumulates)."""
    a = _mix(z)
    b = _mix(z + _GAMMA)
    ua32 = F(np.float64((a >> _S11) + _ONE_U) * _TWO_M53)
    ub32 = F(np.float64(b >> _S11) * _TWO_M53)
    # ln(ua32), Cephes logf
    bits = f32_to_bits(ua32)
    e = F(np.int32(bits >> _S23) - _BIAS)
    m = bits_to_f32((bits & _MANT) | _HALF_EXP)
    if m < _SQRT_HALF:
        e = e - _F1
        m = m + m
    f = m - _F1
    zz = f * f
    p = _P0
    p = p * f + _P1
    p = p * f + _P2
    p = p * f + _P3
    p = p * f + _P4
    p = p * f + _P5
    p = p * f + _P6
    p = p * f + _P7
    p = p * f + _P8
    y = (f * zz) * p
    y = y + e * _Q1
    y = y - _FH * zz
    y = f + y
    ln = y + e * _Q2
    r = F(math.sqrt(np.float64(_FM2 * ln)))
    # sin and cos of the turn fraction ub32
    t4 = ub32 * _F4
    q_f = F(math.floor(t4 + _FH))
    yy = t4 - q_f
    x = yy * _HALF_PI
    z2 = x * x
    s = _S0
    s = s * z2 + _S1
    s = s * z2 + _S2
    sin_x = x + (x * z2) * s
    c = _C0
    c = c * z2 + _C1
    c = c * z2 + _C2
    cos_x = (_F1 - _FH * z2) + (z2 * z2) * c
    q = np.int32(q_f) & 3
    if q & 1:
        sin_b, cos_b = cos_x, sin_x
    else:
        sin_b, cos_b = sin_x, cos_x
    sin_v = -sin_b if q & 2 else sin_b
    cos_v = -cos_b if (q + 1) & 2 else cos_b
    return r * cos_v, r * sin_v


@njit_cached(inline="always")
def libm64_pair(z):
    """(even, odd) libm64 values of the pair whose first counter word is mix(z)."""
    a = _mix(z)
    b = _mix(z + _GAMMA)
    ua = np.float64((a >> _S11) + _ONE_U) * _TWO_M53
    ub = np.float64(b >> _S11) * _TWO_M53
    r = math.sqrt(-2.0 * math.log(ua))
    t = _TWO_PI * ub
    return F(r * math.cos(t)), F(r * math.sin(t))


@njit_cached(nogil=True)
def poly32_pairs(out, z0):
    """out[2k], out[2k+1] = the pair with first counter word mix(z0 + k*2*GAMMA); len(out) even.

    out: 1-D float32 numpy array; z0: np.uint64, seed + (P + 1) * GAMMA for
    the first pair's even element P (mod 2**64). Releases the GIL.
    """
    for k in range(out.shape[0] // 2):
        ev, od = poly32_pair(z0 + U(k) * _STEP)
        out[2 * k] = ev
        out[2 * k + 1] = od


@njit_cached(nogil=True)
def libm64_pairs(out, z0):
    """As poly32_pairs, for libm64."""
    for k in range(out.shape[0] // 2):
        ev, od = libm64_pair(z0 + U(k) * _STEP)
        out[2 * k] = ev
        out[2 * k + 1] = od


@njit(inline="always")
def _range(out, seed, first, pair):
    # elements first .. first+len(out)-1 of `seed` in one call: the odd first element (the second half of
    # the pair of element first - 1, counter word seed + first * GAMMA) and a lone last one peeled off,
    # the pairs between as in poly32_pairs
    n = out.shape[0]
    i = 0
    e = first
    if n and (e & _ONE_U):
        out[0] = pair(seed + e * _GAMMA)[1]
        i = 1
        e = e + _ONE_U
    body = out[i:]   # indexed from 0, as in poly32_pairs (an offset index measured up to 40% slower for libm64)
    z0 = seed + (e + _ONE_U) * _GAMMA
    m = body.shape[0] // 2
    for k in range(m):
        ev, od = pair(z0 + U(k) * _STEP)
        body[2 * k] = ev
        body[2 * k + 1] = od
    if body.shape[0] & 1:
        body[2 * m] = pair(z0 + U(m) * _STEP)[0]


@njit_cached(nogil=True)
def poly32_range(out, seed, first):
    """out = poly32 elements first .. first+len(out)-1 of `seed` (np.uint64 each), any length and parity:
    one call where `_fill` makes up to three (a draw of a few hundred elements spent more time in the
    calls than in the values). Releases the GIL."""
    _range(out, seed, first, poly32_pair)


@njit_cached(nogil=True)
def libm64_range(out, seed, first):
    """As poly32_range, for libm64."""
    _range(out, seed, first, libm64_pair)


#: below this many elements one thread does the work (thread hand-off costs ~10s of us)
MIN_ELEMENTS_PER_THREAD = 1 << 16
_pool: ThreadPoolExecutor | None = None
_pool_size = 0
_threads = max(1, int(numba.config.NUMBA_NUM_THREADS))


def _forget_pool() -> None:
    # A forked child inherits the executor object but not its threads: submitting
    # to it would wait forever on workers that do not exist.
    global _pool
    _pool = None


os.register_at_fork(after_in_child=_forget_pool)


def threads() -> int:
    """Number of threads the numba kernels use for a large range."""
    return _threads


def set_threads(count: int) -> None:
    """Use `count` (>= 1) threads for large ranges; ValueError naming `count` otherwise."""
    global _threads
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise ValueError(f"count must be a positive int, got {count!r}")
    _threads = count


def _threaded(pairs, out: np.ndarray, seed: int, j: int) -> None:
    """Run the pair kernel on an even-length `out` starting at even element j, split over threads."""
    n = out.shape[0]
    threads = max(1, min(_threads, n // MIN_ELEMENTS_PER_THREAD))
    if threads == 1:
        pairs(out, U((seed + (j + 1) * GAMMA) & MASK64))
        return
    global _pool, _pool_size
    if _pool is None or _pool_size < threads:
        if _pool is not None:
            _pool.shutdown(wait=False)   # idle workers of the smaller pool exit instead of leaking
        _pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="esverify-rng")
        _pool_size = threads
    part = -(-n // threads) + (-(-n // threads) & 1)  # even, so every part starts on a pair
    futures = [_pool.submit(pairs, out[s:s + part], U((seed + (j + s + 1) * GAMMA) & MASK64))
               for s in range(0, n, part)]
    for fut in futures:
        fut.result()


def _fill(pairs, out: np.ndarray, seed: int, first: int, one_call=None) -> None:
    """Serve an arbitrary [first, first + len(out)) from the even-aligned pair kernel (or, for a range one
    thread takes, from `one_call`, the same mapping's range kernel)."""
    n = out.shape[0]
    if n == 0:
        return
    if one_call is not None and n < 2 * MIN_ELEMENTS_PER_THREAD and first + n <= MASK64 + 1:
        one_call(out, U(seed & MASK64), U(first))   # masked as the pair path masks its counter words
        return
    pos, j = 0, first
    if j & 1:  # odd start: the sine half of the pair (j - 1, j)
        tmp = np.empty(2, dtype=F)
        pairs(tmp, U((seed + j * GAMMA) & MASK64))
        out[0] = tmp[1]
        pos, j = 1, j + 1
    body = (n - pos) & ~1
    if body:
        _threaded(pairs, out[pos:pos + body], seed, j)
        pos, j = pos + body, j + body
    if pos < n:  # one element left: the cosine half of the pair (j, j + 1)
        tmp = np.empty(2, dtype=F)
        pairs(tmp, U((seed + (j + 1) * GAMMA) & MASK64))
        out[pos] = tmp[0]


def poly32(out: np.ndarray, seed: int, first: int) -> None:
    """Fill float32 `out` with poly32 elements first .. first+len(out)-1 of `seed`."""
    _fill(poly32_pairs, out, seed, first, poly32_range)


def libm64(out: np.ndarray, seed: int, first: int) -> None:
    """Fill float32 `out` with libm64 elements first .. first+len(out)-1 of `seed`."""
    _fill(libm64_pairs, out, seed, first, libm64_range)
