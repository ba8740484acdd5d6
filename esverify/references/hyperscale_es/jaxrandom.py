"""JAX's Threefry-2x32 keys and its uniform and normal draws, in numpy, bit for bit (docs/hyperscale.md §2).

A key is a pair of uint32 words (numpy uint32 array of shape (2,)).
Two modes, as jax's ``jax_threefry_partitionable`` flag (True is jax 0.10's
default and the one HyperscaleES runs under):

- `threefry2x32`: Random123's Threefry-2x32 with 20 rounds;
- `key(seed)` for a Python int seed (jax makes it an int64): (0, seed mod 2**32)
  under jax's default 32-bit mode, (seed mod 2**64 >> 32, seed mod 2**32)
  with ``jax_enable_x64``; a seed outside [-2**63, 2**63) is an error in jax
  (OverflowError) and a ValueError here;
- `fold_in(k, d)` = threefry(k, (0, d)), in both modes;
- `split(k, n)`: partitionable, key i = threefry(k, (hi(i), lo(i))); original,
  threefry(k, counters 0 .. 2n-1 split in halves) read as n rows of two words;
- `random_bits(k, bits, shape)`: partitionable, element i hashes the 64-bit
  counter i as (hi, lo) and takes o1 XOR o2 (its low 8 or 16 bits for narrow
  draws); original, threefry over ceil(bits*size/32) counters, narrow draws
  read as the little-endian bytes/halves of each word.

`uniform` maps the bits as jax does (mantissa bits OR 1.0, minus 1, times
(hi - lo), plus lo, at least lo); `normal` is sqrt(2)*erf_inv(uniform on
[nextafter(-1, 0), 1)), with XLA CPU's erf_inv and log1p (`xlamath`).
f16/bf16 draws compute erf_inv in f32 from the exact widened uniform, round
to the dtype, then multiply by the dtype's sqrt(2) and round again. Results:
float32 arrays, or float16 for "f16", or float32 holding bfloat16 values for
"bf16" (`xlamath.bf16_bits` gives their patterns). ValueError for an unknown
dtype, a bad key or a negative size.
"""
from __future__ import annotations

import math

import numpy as np

from . import xlamath as X

U32 = np.uint32
_ROTATIONS = ((13, 15, 26, 6), (17, 29, 16, 24))
_PARITY = 0x1BD11BDA
DTYPES = ("f32", "f16", "bf16")


def _rotl(v: np.ndarray, r: int) -> np.ndarray:
    return (v << U32(r)) | (v >> U32(32 - r))


def threefry2x32(key, x0, x1) -> tuple[np.ndarray, np.ndarray]:
    """Threefry-2x32, 20 rounds: key (2,) uint32, counters x0, x1 (uint32 arrays of one shape) -> (o0, o1)."""
    k0, k1 = (U32(w) for w in _key(key))
    ks = (k0, k1, U32(k0 ^ k1 ^ U32(_PARITY)))
    x = [np.array(x0, dtype=U32, copy=True), np.array(x1, dtype=U32, copy=True)]
    with np.errstate(over="ignore"):
        x[0] += ks[0]
        x[1] += ks[1]
        for i in range(5):
            for r in _ROTATIONS[i % 2]:
                x[0] += x[1]
                x[1] = _rotl(x[1], r) ^ x[0]
            x[0] += ks[(i + 1) % 3]
            x[1] += ks[(i + 2) % 3] + U32(i + 1)
    return x[0], x[1]


def _key(key) -> np.ndarray:
    k = np.asarray(key)
    if k.shape != (2,) or k.dtype != U32:
        raise ValueError(f"a threefry key is a uint32 array of shape (2,), got {k.dtype} {k.shape}")
    return k


def key(seed: int, x64: bool = False) -> np.ndarray:
    """jax.random.key(seed) / PRNGKey(seed) of a Python int under threefry, as uint32 (2,).

    x64 False (jax's default): (0, seed mod 2**32), the seed truncated to 32 bits;
    True (``jax_enable_x64``): (seed mod 2**64 >> 32, seed mod 2**32).
    ValueError outside [-2**63, 2**63), where jax raises OverflowError."""
    seed = int(seed)
    if not -2**63 <= seed < 2**63:
        raise ValueError(f"seed {seed} is outside the int64 range jax accepts for a Python int")
    seed %= 2**64
    return np.array([(seed >> 32) if x64 else 0, seed & 0xFFFFFFFF], dtype=U32)


def fold_in(k, data: int) -> np.ndarray:
    """jax.random.fold_in(k, data): threefry(k, (0, data mod 2**32)) as the new key (both modes)."""
    o0, o1 = threefry2x32(k, np.zeros(1, U32), np.array([int(data) % 2**32], dtype=U32))
    return np.array([o0[0], o1[0]], dtype=U32)


def _counters64(n: int) -> tuple[np.ndarray, np.ndarray]:
    i = np.arange(n, dtype=np.uint64)
    return (i >> np.uint64(32)).astype(U32), (i & np.uint64(0xFFFFFFFF)).astype(U32)


def _threefry_flat(k, counts: np.ndarray) -> np.ndarray:
    """jax's `threefry_2x32(key, counts)` of the original mode: halves of the (zero-padded) counters."""
    odd = counts.size % 2
    c = np.concatenate([counts.ravel(), np.zeros(odd, U32)])
    h = c.size // 2
    o0, o1 = threefry2x32(k, c[:h], c[h:])
    out = np.concatenate([o0, o1])
    return out[:counts.size]


def split(k, n: int = 2, partitionable: bool = True) -> np.ndarray:
    """jax.random.split(k, n): uint32 (n, 2), one key per row."""
    if n < 0:
        raise ValueError(f"split into {n} keys")
    if partitionable:
        hi, lo = _counters64(n)
        o0, o1 = threefry2x32(k, hi, lo)
        return np.stack([o0, o1], axis=1)
    return _threefry_flat(k, np.arange(2 * n, dtype=U32)).reshape(n, 2)


def random_bits(k, bit_width: int, shape, partitionable: bool = True) -> np.ndarray:
    """jax's raw random bits: unsigned ints of `bit_width` (8, 16, 32) bits, of `shape` (row-major counters)."""
    shape = tuple(int(d) for d in shape)
    if bit_width not in (8, 16, 32) or any(d < 0 for d in shape):
        raise ValueError(f"random bits of width {bit_width} and shape {shape}: want 8/16/32 and sizes >= 0")
    size = math.prod(shape)
    dtype = {8: np.uint8, 16: np.uint16, 32: U32}[bit_width]
    if partitionable:
        hi, lo = _counters64(size)
        o0, o1 = threefry2x32(k, hi, lo)
        bits = (o0 ^ o1).astype(dtype)               # narrow draws keep the low bits
    else:
        words = _threefry_flat(k, np.arange(-(-bit_width * size // 32), dtype=U32))
        bits = words.view(dtype)[:size] if words.size else np.zeros(0, dtype)   # little-endian parts
        if words.size and words.dtype.byteorder == ">":
            raise ValueError("a big-endian host is not modelled")
    return bits.reshape(shape)


_LAYOUT = {"f32": (32, 23, np.uint32, 0x3F800000), "f16": (16, 10, np.uint16, 0x3C00),
           "bf16": (8, 7, np.uint16, 0x3F80)}


def _check_dtype(dtype: str):
    if dtype not in DTYPES:
        raise ValueError(f"dtype {dtype!r} is not modelled; known: {list(DTYPES)}")


def _from_bits(bits: np.ndarray, dtype: str) -> np.ndarray:
    """uint16 bf16/f16 or uint32 f32 patterns -> float32 (f32, bf16) or float16 (f16)."""
    if dtype == "f32":
        return bits.view(np.float32)
    if dtype == "f16":
        return bits.view(np.float16)
    return (bits.astype(np.uint32) << U32(16)).view(np.float32)


def round_to(x, dtype: str) -> np.ndarray:
    """An f32 result rounded to the dtype (bf16 held in f32)."""
    x = np.asarray(x, dtype=np.float32)
    if dtype == "f32":
        return x
    if dtype == "f16":
        return x.astype(np.float16)
    return X.round_bf16(x)


def draw_width(dtype: str) -> int:
    """How many random bits jax draws per value of `dtype` (f32 32, f16 16, bf16 8)."""
    _check_dtype(dtype)
    return _LAYOUT[dtype][0]


def uniform_unit(k, shape, dtype: str = "f32", partitionable: bool = True) -> np.ndarray:
    """The [0, 1) grid jax's uniform starts from: mantissa bits OR 1.0, minus 1 (exact), in the dtype."""
    return unit_from_bits(random_bits(k, draw_width(dtype), shape, partitionable), dtype)


def unit_from_bits(bits, dtype: str) -> np.ndarray:
    """`uniform_unit` of raw bits already drawn (unsigned ints of `draw_width(dtype)` bits, any shape)."""
    _check_dtype(dtype)
    rng_bits, nmant, udt, one = _LAYOUT[dtype]
    bits = np.asarray(bits).astype(udt)
    shift = rng_bits - nmant
    fbits = (bits >> udt(shift)) | udt(one)
    return (_from_bits(fbits, dtype) - (np.float16(1) if dtype == "f16" else np.float32(1)))


def uniform(k, shape, dtype: str = "f32", minval: float = 0.0, maxval: float = 1.0,
            partitionable: bool = True) -> np.ndarray:
    """jax.random.uniform(k, shape, dtype, minval, maxval): floats*(hi - lo) + lo, at least lo; every
    step rounded to the dtype (the f32 product fused into the add, as XLA CPU does with FMA)."""
    return scaled_uniform(uniform_unit(k, shape, dtype, partitionable), dtype, minval, maxval)


def scaled_uniform(f, dtype: str, minval: float, maxval: float) -> np.ndarray:
    lo, hi = round_to(np.float32(minval), dtype), round_to(np.float32(maxval), dtype)
    span = round_to(np.float32(hi) - np.float32(lo), dtype)
    if dtype == "f32":
        out = X.fma32(f, span, lo)
    else:
        out = round_to(round_to(np.float32(f) * np.float32(span), dtype).astype(np.float32) + np.float32(lo), dtype)
    return np.maximum(lo, out).astype(out.dtype)


def _nextafter_minus_one(dtype: str) -> float:
    """nextafter(-1, 0) in the dtype, as a Python float."""
    return {"f32": -(1 - 2.0**-24), "f16": -(1 - 2.0**-11), "bf16": -(1 - 2.0**-8)}[dtype]


def normal(k, shape, dtype: str = "f32", fma: bool = True, partitionable: bool = True) -> np.ndarray:
    """jax.random.normal(k, shape, dtype) on XLA CPU: sqrt(2)*erf_inv(u), u uniform on [nextafter(-1, 0), 1).

    fma: whether the host contracts multiply-adds (x86 with FMA: True; `--xla_cpu_max_isa=AVX`: False).
    Shapes: any; dtypes "f32" (float32), "f16" (float16), "bf16" (float32 holding bfloat16 values)."""
    return normal_from_bits(random_bits(k, draw_width(dtype), shape, partitionable), dtype, fma)


def normal_from_bits(bits, dtype: str = "f32", fma: bool = True) -> np.ndarray:
    """`normal` of raw bits already drawn (unsigned ints of `draw_width(dtype)` bits, any shape)."""
    u = scaled_uniform(unit_from_bits(bits, dtype), dtype, _nextafter_minus_one(dtype), 1.0)
    e = X.erf_inv32(np.asarray(u, dtype=np.float32), fma)
    if dtype == "f32":
        return (np.float32(math.sqrt(2)) * e).astype(np.float32)
    root2 = round_to(np.float32(math.sqrt(2)), dtype)
    return round_to(np.float32(root2) * np.asarray(round_to(e, dtype), np.float32), dtype)
