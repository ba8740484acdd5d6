"""The literals of the gaussian mappings, written once for every fast backend (docs/CONTRACT.md §3).

What: the decimal constants of poly32 (docs/CONTRACT.md §3b: Cephes logf, sinf and
cosf kernels, the sqrt(1/2) threshold, the f32 bit-field masks) and the
shared f64 constants of the uniforms and of libm64 (docs/CONTRACT.md §3, §3a), as
plain Python numbers exactly as the spec writes them.

Invariants: each backend rounds these f64 decimals to f32 itself
(``np.float32(c)``); that rounding is the spec's "the f32 value nearest to
the decimal given", so the values every kernel uses are the spec's.
numba reads module-level globals as compile-time constants, so taking
them from here compiles the same machine code as inline literals (checked
by diffing the kernels' assembly). `esverify.rng.scalar` keeps its own
copy on purpose: it is the self-contained reference the backends are
tested against, and a typo here must not be able to hide in both.

Checks: ``python -m pytest -q tests/test_rng*.py`` and
``esverify goldens check`` (every backend bit-equal to the goldens).
"""
from __future__ import annotations

import math

#: 2**-53: the u64 -> (0, 1] / [0, 1) uniform scale of docs/CONTRACT.md §3 (exact in f64)
TWO_M53 = 2.0 ** -53
#: 2*pi in f64, the libm64 angle factor (docs/CONTRACT.md §3a)
TWO_PI = 2.0 * math.pi

# -- poly32 (docs/CONTRACT.md §3b); each is rounded to f32 by the backend --------------
#: threshold m is compared against (sqrt(1/2)): below it, m doubles and e drops by one
SQRT_HALF = 0.7071067811865476
#: leading coefficient of the logf polynomial in f
LOG_P0 = 7.0376836292e-2
#: the remaining logf coefficients, in Horner order (p = p * f + c)
LOG_COEFFS = (-1.1514610310e-1, 1.1676998740e-1, -1.2420140846e-1, 1.4249322787e-1,
              -1.6668057665e-1, 2.0000714765e-1, -2.4999993993e-1, 3.3333331174e-1)
#: ln(2) split in two: e * LOG_Q1 is added early, e * LOG_Q2 (exact in f32) last
LOG_Q1 = -2.12194440e-4
LOG_Q2 = 0.693359375
#: pi/2: turns the quarter-turn remainder into radians
HALF_PI = 1.5707963267948966
#: sinf kernel coefficients, Horner order in z = x*x
SIN_COEFFS = (-1.9515295891e-4, 8.3321608736e-3, -1.6666654611e-1)
#: cosf kernel coefficients, Horner order in z = x*x
COS_COEFFS = (2.443315711809948e-5, -1.388731625493765e-3, 4.166664568298827e-2)

# -- f32 bit fields of the logf argument reduction (docs/CONTRACT.md §3b) ---------------
#: mantissa bits of an f32
F32_MANTISSA = 0x007FFFFF
#: exponent field of 0.5: OR-ed into the mantissa to give m in [0.5, 1)
F32_HALF_EXPONENT = 0x3F000000
#: e = (bits >> 23) - 126 is the exponent that goes with m in [0.5, 1)
EXP_OFFSET = 126
