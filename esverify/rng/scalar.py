"""The slow, obviously-correct scalar reference of the RNG contract (docs/CONTRACT.md §2-§4).

Plain Python ints (masked to 64 bits) and `math`, one element at a time.
It exists to be read next to docs/CONTRACT.md and to pin the fast backends: tests
and the golden generator use it, the trainer never does. libm64 values
here come from Python's `math` (glibc's libm), which is what the golden
files record.

Every poly32 step is a binary32 operation emulated as "compute in f64,
round once to f32" (`rd32`). For +, -, * and sqrt of f32 operands this is
the correctly rounded f32 result: f64 has 53 >= 2*24 + 2 significand bits,
so the double rounding is innocuous (Figueroa 1995).

Self-contained on purpose: it repeats the constants that the fast backends
take from `esverify.rng.constants`, so that a wrong literal there cannot
hide in both. Checks: ``python -m pytest -q tests/test_rng.py`` (docs/CONTRACT.md §2
known answers) and ``esverify goldens check`` (the goldens were generated
from this module).
"""
from __future__ import annotations

import math
import struct

MASK64 = (1 << 64) - 1
GAMMA = 0x9E3779B97F4A7C15
SEED_DOMAIN = 0x65735F7365656473   # ASCII "es_seeds"
NOISE_DOMAIN = 0x65735F6E6F697365  # ASCII "es_noise"


def mix(z: int) -> int:
    """splitmix64's output function on a u64 (docs/CONTRACT.md §2)."""
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
    return z ^ (z >> 31)


def at(seed: int, i: int) -> int:
    """The i-th output of splitmix64 started at `seed`, by counter."""
    return mix((seed + (i + 1) * GAMMA) & MASK64)


def sequential(seed: int, n: int) -> list[int]:
    """The first n outputs of the sequential generator (state += GAMMA; mix)."""
    state, out = seed & MASK64, []
    for _ in range(n):
        state = (state + GAMMA) & MASK64
        out.append(mix(state))
    return out


def member_seed(seed: int, iteration: int, population: int, member: int) -> int:
    """docs/CONTRACT.md §4: at(seed ^ SEED_DOMAIN, iteration * population + member)."""
    return at(seed ^ SEED_DOMAIN, (iteration * population + member) & MASK64)


def stream_seed(member_seed_: int, slot: int, scheme: str) -> int:
    """docs/CONTRACT.md §4: iid derives a per-slot seed; correlated reuses the member seed."""
    if scheme == "iid":
        return at(member_seed_ ^ NOISE_DOMAIN, slot)
    if scheme == "correlated":
        return member_seed_
    raise ValueError(f"unknown scheme {scheme!r}")


# compiled once: struct.pack("<f", x) looks its format up on every call, a third of rd32's time, and
# rd32 is most of this module's time (the rng goldens' 2^20-value digests call it 80 million times)
_F32 = struct.Struct("<f")
_U32 = struct.Struct("<I")


def rd32(x: float) -> float:
    """Round an f64 to the nearest f32 (ties to even), returned as a Python float."""
    return _F32.unpack(_F32.pack(x))[0]


def f32_bits(x: float) -> int:
    """The u32 bit pattern of `x`, a Python float holding an f32 value (IEEE binary32)."""
    return _U32.unpack(_F32.pack(x))[0]


def _f32_from_bits(b: int) -> float:
    return _F32.unpack(_U32.pack(b))[0]


def uniforms(seed: int, j: int) -> tuple[float, float]:
    """(ua, ub) of element j's aligned pair: ua in (0, 1], ub in [0, 1), exact f64."""
    p = j - (j % 2)
    a, b = at(seed, p), at(seed, p + 1)
    return ((a >> 11) + 1) * 2.0 ** -53, (b >> 11) * 2.0 ** -53


def libm64_pair(seed: int, p: int) -> tuple[float, float]:
    """Elements p and p + 1 (p even: one aligned pair, one (ua, ub)) of the libm64 gaussian stream
    (docs/CONTRACT.md §3a): the cosine half and the sine half, Python floats holding f32 values."""
    ua, ub = uniforms(seed, p)
    r = math.sqrt(-2.0 * math.log(ua))
    t = 2.0 * math.pi * ub
    return rd32(r * math.cos(t)), rd32(r * math.sin(t))


def libm64(seed: int, j: int) -> float:
    """Element j of the libm64 gaussian stream (docs/CONTRACT.md §3a), as a Python float holding an f32."""
    return libm64_pair(seed, j - j % 2)[j % 2]


_LOG_COEFFS = (-1.1514610310e-1, 1.1676998740e-1, -1.2420140846e-1, 1.4249322787e-1,
               -1.6668057665e-1, 2.0000714765e-1, -2.4999993993e-1, 3.3333331174e-1)
# the kernels' decimal constants as f32 values, rounded once here rather than at every element (the
# same rd32 of the same literal: the same values)
_LOG_COEFFS32 = tuple(rd32(c) for c in _LOG_COEFFS)
_SQRTH32, _LOG_P0_32, _LOG_Q1_32 = rd32(0.7071067811865476), rd32(7.0376836292e-2), rd32(-2.12194440e-4)
_PIO2_32 = rd32(1.5707963267948966)
_SIN32 = (rd32(-1.9515295891e-4), rd32(8.3321608736e-3), rd32(-1.6666654611e-1))
_COS32 = (rd32(2.443315711809948e-5), rd32(-1.388731625493765e-3), rd32(4.166664568298827e-2))


def _ln32(x: float) -> float:
    """Cephes logf of an f32 in (0, 1], every step one f32 rounding (docs/CONTRACT.md §3b)."""
    bits = f32_bits(x)
    e = rd32(float((bits >> 23) - 126))
    m = _f32_from_bits((bits & 0x007FFFFF) | 0x3F000000)
    if m < _SQRTH32:
        e = rd32(e - 1.0)
        m = rd32(m + m)
    f = rd32(m - 1.0)
    z = rd32(f * f)
    p = _LOG_P0_32
    for c in _LOG_COEFFS32:
        p = rd32(rd32(p * f) + c)
    y = rd32(rd32(f * z) * p)
    y = rd32(y + rd32(e * _LOG_Q1_32))
    y = rd32(y - rd32(0.5 * z))
    y = rd32(f + y)
    return rd32(y + rd32(e * 0.693359375))


def _sincos_turn32(u: float) -> tuple[float, float]:
    """(sin, cos) of the angle 2*pi*u for an f32 u in [0, 1), Cephes kernels in f32."""
    t4 = rd32(u * 4.0)
    q_f = float(math.floor(rd32(t4 + 0.5)))
    y = rd32(t4 - q_f)
    x = rd32(y * _PIO2_32)
    z = rd32(x * x)
    s = _SIN32[0]
    s = rd32(rd32(s * z) + _SIN32[1])
    s = rd32(rd32(s * z) + _SIN32[2])
    sin_x = rd32(x + rd32(rd32(x * z) * s))
    c = _COS32[0]
    c = rd32(rd32(c * z) + _COS32[1])
    c = rd32(rd32(c * z) + _COS32[2])
    cos_x = rd32(rd32(1.0 - rd32(0.5 * z)) + rd32(rd32(z * z) * c))
    q = int(q_f) & 3
    sin_b, cos_b = (cos_x, sin_x) if q & 1 else (sin_x, cos_x)
    sin_v = -sin_b if q & 2 else sin_b
    cos_v = -cos_b if (q + 1) & 2 else cos_b
    return sin_v, cos_v


def poly32_pair(seed: int, p: int) -> tuple[float, float]:
    """Elements p and p + 1 (p even: one aligned pair, one (ua, ub)) of the poly32 gaussian stream
    (docs/CONTRACT.md §3b): the cosine half and the sine half, Python floats holding f32 values."""
    ua, ub = uniforms(seed, p)
    ua32, ub32 = rd32(ua), rd32(ub)
    ln = _ln32(ua32)
    r = rd32(math.sqrt(rd32(-2.0 * ln)))
    sin_v, cos_v = _sincos_turn32(ub32)
    return rd32(r * cos_v), rd32(r * sin_v)


def poly32(seed: int, j: int) -> float:
    """Element j of the poly32 gaussian stream (docs/CONTRACT.md §3b), as a Python float holding an f32."""
    return poly32_pair(seed, j - j % 2)[j % 2]


MAPPINGS = {"libm64": libm64, "poly32": poly32}
#: each mapping's aligned pair (both elements of one (ua, ub)): what `gaussian` computes once per pair
PAIRS = {"libm64": libm64_pair, "poly32": poly32_pair}


def gaussian(seed: int, n: int, first: int = 0, mapping: str = "poly32") -> list[float]:
    """Elements first .. first+n-1 of the gaussian stream of `seed` (docs/CONTRACT.md §3), each aligned
    pair computed once for both its elements (element by element, every pair was computed twice).

    Python floats holding f32 values; no argument checks (KeyError for an
    unknown mapping). Runs at about 200k elements/s (poly32) and 1M (libm64) on the 2-core machine at a
    load of 10 (docs/benchmarks.md, "The goldens gate"): for tests and goldens only.
    """
    pair = PAIRS[mapping]
    start = first - first % 2
    out = [value for p in range(start, first + n, 2) for value in pair(seed, p)]
    return out[first - start:first - start + n]
