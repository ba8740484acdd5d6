"""numba CPU kernels for es-at-scale on f32 parameters (the hot path; docs/numerics.md §3).

Why: torch's elementwise ops each open an OpenMP parallel region; the
update calls several per member and chunk, and on a loaded 2-core machine
those regions (barriers spinning against the RNG's worker threads) were
measured up to 100x slower than one thread. These loops are plain
single-threaded numba code without fastmath, so LLVM never contracts a
multiply and an add into an FMA: every line is one correctly rounded f32
operation, exactly the profile's lines. tests/test_es_kernels.py proves
them bitwise equal to the torch path and to the straight-line reference.

Used only for contiguous CPU f32 tensors; everything else takes the torch
path. Arguments are numpy f32 views of torch tensors (shared memory).

Checks: ``python -m pytest -q tests/test_es_kernels.py``
(test_numba_cpu_path_equals_torch_path, and the reference tests).
"""
from __future__ import annotations

import numpy as np
import torch

try:
    import numba
except ImportError:  # pragma: no cover - numba is a dependency; the torch path still works
    numba = None

#: elements of the f64 scratch blocks of `_fma32` (2 x 32 KiB: in the L1/L2 cache)
FMA_BLOCK = 4096

if numba is not None:
    @numba.njit(cache=True, nogil=True)
    def _perturb(theta, eps, s, out):
        for i in range(theta.size):
            t = eps[i] * s                      # rd32(q * rd32(s))
            out[i] = theta[i] + t               # rd32(theta + t)

    @numba.njit(cache=True, nogil=True)
    def _accumulate(acc, eps, c):
        for i in range(acc.size):
            p = eps[i] * c                      # rd32(q * rd32(C))
            acc[i] = acc[i] + p                 # rd32(acc + p)

    @numba.njit(cache=True, nogil=True)
    def _apply(theta, acc, scale, out):
        for i in range(theta.size):
            step = acc[i] * scale               # rd32(acc * rd32(alpha / N))
            out[i] = theta[i] + step            # rd32(theta + step)

    @numba.njit(cache=True, nogil=True)
    def _fma32(x, y, k, out):
        # the lines of esverify.es.numerics.fma32_torch: the exact product in f64, TwoSum, then round
        # to odd (an inexact sum gets its last f64 bit forced to 1) before the one rounding to f32.
        # Three plain loops over one f64 block of FMA_BLOCK elements, which stays in the cache: f64
        # buffers of the whole chunk were measured 5x slower on 2**20 elements (fresh pages on every
        # call). The bits do not depend on the block: every element is computed alone.
        n = x.size
        s = np.empty(FMA_BLOCK, dtype=np.float64)
        err = np.empty(FMA_BLOCK, dtype=np.float64)
        raw = s.view(np.int64)
        for start in range(0, n, FMA_BLOCK):
            m = min(FMA_BLOCK, n - start)
            for j in range(m):
                xd = np.float64(x[start + j])
                p = np.float64(y[start + j]) * k
                t = xd + p
                bb = t - xd
                s[j] = t
                err[j] = (xd - (t - bb)) + (p - bb)
            for j in range(m):   # a select, not a branch: about half the sums need the fix-up
                r = raw[j]
                fix = (err[j] != 0) & ((r & 1) == 0) & (np.abs(s[j]) < np.inf)   # < inf: isfinite
                step = np.int64(1) if (err[j] > 0) == (s[j] > 0) else np.int64(-1)
                raw[j] = r + (step if fix else np.int64(0))
            for j in range(m):
                out[start + j] = np.float32(s[j])

ENABLED = numba is not None


def usable(*tensors: torch.Tensor) -> bool:
    """True when every tensor is a contiguous CPU f32 tensor and numba is available."""
    return ENABLED and all(t.device.type == "cpu" and t.dtype == torch.float32 and t.is_contiguous()
                           for t in tensors)


def _np(t: torch.Tensor) -> np.ndarray:
    return t.detach().numpy()


def perturb(theta, eps, s32: float, out) -> None:
    """out <- rd32(theta + rd32(eps * s32)); s32 an exact f32 value.

    theta, eps, out: contiguous CPU f32 tensors of one element count
    (check with `usable`); out may be theta.
    """
    _perturb(_np(theta), _np(eps), np.float32(s32), _np(out))


def accumulate(acc, eps, c32: float) -> None:
    """acc <- rd32(acc + rd32(eps * c32)) in place; acc, eps: contiguous CPU f32, one element count."""
    _accumulate(_np(acc), _np(eps), np.float32(c32))


def apply(theta, acc, scale32: float, out) -> None:
    """out <- rd32(theta + rd32(acc * scale32)); contiguous CPU f32 tensors of one count, out may be theta."""
    _apply(_np(theta), _np(acc), np.float32(scale32), _np(out))


def fma32(x, y, k: float, out) -> None:
    """out <- rd32(x + y*k) with one rounding (esverify.es.numerics.fma32, bit for bit).

    x, y, out: contiguous CPU f32 tensors of one element count (check with `usable`); k: a Python
    float holding an exact f32 value. Why: the torch form of the same lines opens a dozen
    elementwise f64 passes and was 85% of an es-awd f32 replay (benchmarks/bench_replay.py).
    """
    _fma32(_np(x), _np(y), float(k), _np(out))
