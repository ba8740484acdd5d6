"""numba CPU kernel for es-awd's scaled add on f16/bf16 parameters (docs/numerics.md §3).

Why: the torch form of the rule (widen x and y, the numba fma32, round to
the dtype, a separate tail, torch.cat) is five to eight elementwise torch
ops per call, and the parity matrix calls it tens of thousands of times on
tensors of a few hundred elements: about 130 us a call, a tenth of a parity
run's CPU (measured with benchmarks/bench_parity.py). Here it is one loop.

The conversions are spelled in bits, because numba has no f16 on the CPU
(where the CPU has F16C, f16's are its own instructions, reached through
LLVM's half type: the same bits, the loop 2.6-2.9x as fast; `F16C` says which):

- widening f16/bf16 -> f32 is exact (f16 subnormals are `m * 2**-24`,
  exact in f32);
- narrowing f32 -> f16/bf16 is IEEE round-to-nearest-even, overflow to
  infinity included (f16: F. Giesen's branch-free form, whose subnormal
  branch lets the f32 adder round; bf16: add 0x7fff plus the lowest kept
  bit, keep the top half).

Which NaN a conversion returns is the one thing these lines would not
match: torch's vector and scalar conversions give different NaN bits. So
a call with a NaN anywhere (an input, the noise or a result) returns None,
having written only its own new buffer, and the caller takes the torch lines; every
other value is IEEE-defined. tests/test_half_kernels.py compares every
rounding boundary of both formats with torch's conversions, and the kernel
with the torch lines of esverify.references.es_awd.profile.scaled_add.

Checks: ``python -m pytest -q tests/test_half_kernels.py tests/test_es_kernels.py``
"""
from __future__ import annotations

import numpy as np
import torch

from esverify.es import cpu_kernels

try:
    import numba
    from llvmlite import ir
    from numba.core import types
    from numba.extending import intrinsic

    from ..jitcache import njit as njit_cached
    from ..rng.numba_backend import bits_to_f32, f32_to_bits
    from .cpu_kernels import fmaf
except ImportError:  # pragma: no cover - numba is a dependency; the torch lines still work
    numba = None

#: the parameter dtypes this kernel handles
HALF_DTYPES = (torch.float16, torch.bfloat16)


def _targets_f16c() -> bool:
    """True when numba compiles for a CPU with F16C (the f16 <-> f32 conversion instructions). numba's JIT
    takes NUMBA_CPU_FEATURES when set (NUMBA_CPU_NAME=generic sets it empty), else the host's features, the
    CPU name aside; these are the features read here, and part of numba's cache key, so a cached kernel was
    built for the same choice. Without F16C, LLVM would turn the conversions into calls the JIT cannot link."""
    try:
        from numba.core import config
        features = config.CPU_FEATURES
        if features is None:
            from numba.core.codegen import get_host_cpu_features
            features = get_host_cpu_features()
        return "+f16c" in str(features).split(",")
    except Exception:  # noqa: BLE001 - no way to tell: the portable conversions
        return False


#: whether the f16 conversions are the CPU's own instructions (F16C) or the portable bit forms below
F16C = numba is not None and _targets_f16c()
#: NUMBA_DISABLE_JIT: the kernel's intrinsics do not run as Python, so the callers take the torch lines
_NO_JIT = numba is not None and bool(numba.config.DISABLE_JIT)

if numba is not None:
    _TWO_M24 = np.float32(2.0 ** -24)
    #: 0.5, whose ulp is 2**-24, an f16 subnormal's unit: adding it puts those bits at the bottom, rounded
    _DENORM_MAGIC = ((127 - 15) + (23 - 10) + 1) << 23
    _DENORM_MAGIC_F32 = np.float32(0.5)

    # The conversions are branch-free (every case computed, one selected), and the loops below have no
    # early exit, so LLVM vectorises them: with branches the f16 kernel ran at 8 ns an element, slower
    # than the torch lines it replaces.
    @numba.njit(inline="always")
    def _f16_widen_portable(h):
        h = np.int64(h) & 0xFFFF        # the bits arrive as int16 (torch has no uint16 view numpy takes)
        exp = (h >> 10) & 0x1F
        mant = h & 0x3FF
        sign = (h & 0x8000) << 16
        sub = np.float32(mant) * _TWO_M24                           # zero or subnormal: exact (mant < 2**10)
        sub = bits_to_f32(np.uint32(f32_to_bits(sub) | sign))
        big = bits_to_f32(np.uint32(sign | 0x7F800000 | (mant << 13)))    # inf or NaN
        normal = bits_to_f32(np.uint32(sign | ((exp + 112) << 23) | (mant << 13)))
        return sub if exp == 0 else (big if exp == 0x1F else normal)

    @numba.njit(inline="always")
    def _f16_narrow_portable(v):
        # round to nearest even; v NaN gives unspecified bits (the loops discard such a result)
        u = np.int64(f32_to_bits(v))
        sign = u & 0x80000000
        u ^= sign
        # the f32 adder rounds the subnormal case
        sub = np.int64(f32_to_bits(bits_to_f32(np.uint32(u)) + _DENORM_MAGIC_F32)) - _DENORM_MAGIC
        normal = (u - (112 << 23) + 0xFFF + ((u >> 13) & 1)) >> 13   # a carry into the exponent is right, to inf
        o = sub if u < 113 << 23 else (normal if u < (127 + 16) << 23 else 0x7C00)
        return np.int16(o | (sign >> 16))     # the low 16 bits, as the int16 view of the result stores them

    # With F16C, LLVM's fpext/fptrunc between half and float are single instructions (vcvtph2ps, vcvtps2ph:
    # IEEE, subnormals kept, rounding by the CPU's current mode: to nearest even unless a program changes it,
    # as nothing here does; torch's conversion rounds to nearest even always) that vectorise: the f16 kernel
    # loop is 2.6-2.9x as fast (1,000 to 1M elements) as with the bit forms above, which give the same bits
    # (tests/test_half_kernels.py checks both forms).
    @intrinsic
    def _f16_bits_to_f32(typingctx, h):
        sig = types.float32(types.int16)

        def codegen(context, builder, signature, args):
            return builder.fpext(builder.bitcast(args[0], ir.HalfType()), ir.FloatType())
        return sig, codegen

    @intrinsic
    def _f32_to_f16_bits(typingctx, v):
        sig = types.int16(types.float32)

        def codegen(context, builder, signature, args):
            return builder.bitcast(builder.fptrunc(args[0], ir.HalfType()), ir.IntType(16))
        return sig, codegen

    @numba.njit(inline="always")
    def _f16_widen_f16c(h):
        return _f16_bits_to_f32(np.int16(h))

    @numba.njit(inline="always")
    def _f16_narrow_f16c(v):
        return _f32_to_f16_bits(v)     # v NaN: a NaN's bits (the loops discard such a result)

    _f16_widen, _f16_narrow = ((_f16_widen_f16c, _f16_narrow_f16c) if F16C else
                               (_f16_widen_portable, _f16_narrow_portable))

    @numba.njit(inline="always")
    def _bf16_widen(h):
        return bits_to_f32(np.uint32((np.int64(h) & 0xFFFF) << 16))

    @numba.njit(inline="always")
    def _bf16_narrow(v):
        u = np.int64(f32_to_bits(v))   # not NaN: the carry cannot leave the exponent except into infinity
        return np.int16((u + 0x7FFF + ((u >> 16) & 1)) >> 16)

    @numba.njit(inline="always")
    def _same(e, widen, narrow):
        return widen(e)             # y holds the dtype's bits

    @numba.njit(inline="always")
    def _rounded(e, widen, narrow):
        return widen(narrow(e))     # y holds f32 noise: rd_dt(e) first

    @numba.njit(inline="always")
    def _loop(x, y, k, split, out, load, widen, narrow):
        # out[i] <- rd_dt(fma32(x, y, k)) for i < split, rd_dt(x + f32(rd_dt(y * k))) after. False when a NaN
        # appeared (in y itself, in y * k, or in a result): then `out` holds unspecified bits.
        bad = False
        for i in range(split):
            e = y[i]
            r = fmaf(load(e, widen, narrow), k, widen(x[i]))
            bad |= (e != e) | (r != r)
            out[i] = narrow(r)
        for i in range(split, x.size):
            e = y[i]
            p = load(e, widen, narrow) * k
            r = widen(x[i]) + widen(narrow(p))
            bad |= (e != e) | (p != p) | (r != r)
            out[i] = narrow(r)
        return not bad

    # one compiled loop per format and noise dtype: a flag tested in the loop measured 2x slower elsewhere
    @njit_cached(nogil=True)
    def _f16_dt(x, y, k, split, out):
        return _loop(x, y, np.float32(k), split, out, _same, _f16_widen, _f16_narrow)

    @njit_cached(nogil=True)
    def _f16_f32(x, y, k, split, out):
        return _loop(x, y, np.float32(k), split, out, _rounded, _f16_widen, _f16_narrow)

    @njit_cached(nogil=True)
    def _bf16_dt(x, y, k, split, out):
        return _loop(x, y, np.float32(k), split, out, _same, _bf16_widen, _bf16_narrow)

    @njit_cached(nogil=True)
    def _bf16_f32(x, y, k, split, out):
        return _loop(x, y, np.float32(k), split, out, _rounded, _bf16_widen, _bf16_narrow)

    _KERNELS = {(torch.float16, False): _f16_dt, (torch.float16, True): _f16_f32,
                (torch.bfloat16, False): _bf16_dt, (torch.bfloat16, True): _bf16_f32}

    @njit_cached(nogil=True)
    def _widen_all(bits, out, bf16):
        for i in range(bits.size):
            out[i] = _bf16_widen(bits[i]) if bf16 else _f16_widen(bits[i])

    @njit_cached(nogil=True)
    def _narrow_all(values, out, bf16):
        for i in range(values.size):
            out[i] = _bf16_narrow(values[i]) if bf16 else _f16_narrow(values[i])

    @njit_cached(nogil=True)
    def _widen_all_portable(bits, out):
        for i in range(bits.size):
            out[i] = _f16_widen_portable(bits[i])

    @njit_cached(nogil=True)
    def _narrow_all_portable(values, out):
        for i in range(values.size):
            out[i] = _f16_narrow_portable(values[i])


def usable(x: torch.Tensor, y: torch.Tensor) -> bool:
    """True when the kernel applies: numba compiling (not NUMBA_DISABLE_JIT) with an FMA unit (esverify.es.
    cpu_kernels.FMA), x a contiguous CPU f16/bf16 tensor, y a contiguous CPU tensor of x's dtype or f32, both
    of one element count."""
    return (cpu_kernels.ENABLED and cpu_kernels.FMA and not _NO_JIT and x.dtype in HALF_DTYPES
            and y.dtype in (x.dtype, torch.float32) and x.device.type == "cpu" and y.device.type == "cpu"
            and x.is_contiguous() and y.is_contiguous() and x.numel() == y.numel())


def _bits(t: torch.Tensor) -> np.ndarray:
    return t.detach().view(torch.int16).numpy()   # 1-D contiguous here: a view of the same memory


def scaled_add(x: torch.Tensor, y: torch.Tensor, k: float, split: int) -> torch.Tensor | None:
    """es-awd's scaled add of a chunk on f16/bf16 (esverify.references.es_awd.profile.scaled_add's bits).

    x: 1-D contiguous CPU f16/bf16 tensor; y: 1-D, the same dtype, or f32 noise that is rounded to the
    dtype first (rd_dt(y), as the profile's perturb and accumulate do); k: a Python float holding the exact
    f32 scalar; split: elements [0, split) take the body line rd_dt(fma32(x, y, k)), the rest the tail line
    rd_dt(x + f32(rd_dt(y * k))) (split clamped to [0, len(x)]). Returns a new 1-D tensor of x's dtype, or
    None when the kernel does not apply (see `usable`) or any NaN appears: then nothing was changed and the
    caller takes the torch lines, which decide NaN bits as torch does. Raises nothing of its own.
    """
    if not usable(x, y) or x.dim() != 1 or y.dim() != 1:
        return None
    split = min(max(int(split), 0), x.numel())   # the loops index with it: never past the buffers
    out = np.empty(x.numel(), np.int16)
    noise_f32 = y.dtype == torch.float32
    done = _KERNELS[x.dtype, noise_f32](_bits(x), y.detach().numpy() if noise_f32 else _bits(y), float(k),
                                         split, out)
    return torch.from_numpy(out).view(x.dtype) if done else None


def widen(bits: np.ndarray, dtype: torch.dtype, portable: bool = False) -> np.ndarray:
    """The f32 values of f16/bf16 bit patterns (u16 array, any length), exactly: the kernel's own widening,
    for tests (tests/test_half_kernels.py compares it with torch's on all 65,536 patterns). portable: f16
    through the bit form the kernel takes without F16C, whatever this CPU has."""
    out = np.empty(bits.size, np.float32)
    raw = np.ascontiguousarray(bits, np.uint16).reshape(-1).view(np.int16)
    if portable and dtype == torch.float16:
        _widen_all_portable(raw, out)
    else:
        _widen_all(raw, out, dtype == torch.bfloat16)
    return out


def narrow(values: np.ndarray, dtype: torch.dtype, portable: bool = False) -> np.ndarray:
    """The f16/bf16 bit patterns (u16) of non-NaN f32 `values` rounded to nearest even: the kernel's own
    narrowing, for tests (NaN gives unspecified bits: the kernel never narrows one). portable: as `widen`."""
    out = np.empty(values.size, np.int16)
    raw = np.ascontiguousarray(values, np.float32).reshape(-1)
    if portable and dtype == torch.float16:
        _narrow_all_portable(raw, out)
    else:
        _narrow_all(raw, out, dtype == torch.bfloat16)
    return out.view(np.uint16)
