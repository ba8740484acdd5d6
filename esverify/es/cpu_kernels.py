"""numba CPU kernels for f32 parameters: es-at-scale's lines and es-awd's fma32 (the hot path;
docs/numerics.md §3).

Why: torch's elementwise ops each open an OpenMP parallel region; the
update calls several per member and chunk, and on a loaded 2-core machine
those regions (barriers spinning against the RNG's worker threads) were
measured up to 100x slower than one thread. These loops are plain
single-threaded numba code without fastmath, so LLVM never contracts a
multiply and an add into an FMA: every line is one correctly rounded f32
operation, exactly the profile's lines. The one fused operation, es-awd's
fma32, is asked for by name (LLVM's llvm.fma.f32), never formed by the
compiler. tests/test_es_kernels.py proves them bitwise equal to the torch
path and to the straight-line reference.

Used only for contiguous CPU f32 tensors; everything else takes the torch
path. Arguments are numpy f32 views of torch tensors (shared memory).

Checks: ``python -m pytest -q tests/test_es_kernels.py``
(test_numba_cpu_path_equals_torch_path, and the reference tests).
"""
from __future__ import annotations

import numpy as np
import torch

from esverify.rng.mappings import MAPPINGS

try:
    import numba
    from llvmlite import ir
    from numba import types
    from numba.core import cgutils
    from numba.extending import intrinsic

    from ..jitcache import njit as njit_cached
    from ..rng.numba_backend import libm64_pair, libm64_range, poly32_pair, poly32_range
    from ..rng.splitmix import GAMMA, MASK64
    _GAMMA = np.uint64(GAMMA)
    _STEP = np.uint64((2 * GAMMA) & MASK64)
except ImportError:  # pragma: no cover - numba is a dependency; the torch path still works
    numba = None

if numba is not None:
    @njit_cached(nogil=True)
    def _perturb(theta, eps, s, out):
        for i in range(theta.size):
            t = eps[i] * s                      # rd32(q * rd32(s))
            out[i] = theta[i] + t               # rd32(theta + t)

    @njit_cached(nogil=True)
    def _accumulate(acc, eps, c):
        for i in range(acc.size):
            p = eps[i] * c                      # rd32(q * rd32(C))
            acc[i] = acc[i] + p                 # rd32(acc + p)

    @njit_cached(nogil=True)
    def _apply(theta, acc, scale, out):
        for i in range(theta.size):
            step = acc[i] * scale               # rd32(acc * rd32(alpha / N))
            out[i] = theta[i] + step            # rd32(theta + step)

    @intrinsic
    def fmaf(typingctx, a, b, c):
        """fmaf(a, b, c) in numba code: a*b + c as f32 with one rounding (also esverify.es.half_kernels')."""
        # LLVM's llvm.fma.f32: a*b + c rounded ONCE to f32 (IEEE 754 fusedMultiplyAdd). LLVM lowers it to
        # the CPU's fused multiply-add (vfmadd on x86 with FMA3) or, on a CPU without one, to libm's fmaf;
        # both are correctly rounded. numba has no fma of its own, and without fastmath it never forms one.
        sig = types.float32(types.float32, types.float32, types.float32)

        def codegen(context, builder, signature, args):
            f32 = ir.FloatType()
            fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(f32, [f32, f32, f32]),
                                                "llvm.fma.f32")
            return builder.call(fn, args)
        return sig, codegen

    @njit_cached(nogil=True)
    def _fma32(x, y, k, out):
        # rd32(x + y*k) with one rounding is exactly fmaf(y, k, x): the hardware's fused multiply-add, 18x
        # faster than the f64 round-to-odd lines of fma32_torch it replaces (measured: 0.22 against 3.96 ns
        # per element on 2**20). Which NaN a NaN result carries is the hardware's choice, as it is for
        # every line of these kernels and of torch's: the tests compare NaN inputs bit for bit too.
        k32 = np.float32(k)
        for i in range(x.size):
            out[i] = fmaf(y[i], k32, x[i])

    @numba.njit(inline="always")
    def _add(a, e, c32, fused):
        if fused:
            return fmaf(e, c32, a)   # rd32(a + e*c32), one rounding (es-awd's fma32)
        p = e * c32                   # rd32(e * c32)
        return a + p                  # rd32(a + p)

    @numba.njit(inline="always")
    def _element(seed, i, pair):
        # element i of the stream `seed` alone (the pair of even element e has counter word seed + (e + 1) *
        # GAMMA, esverify.rng.numba_backend)
        if i & np.uint64(1):
            return pair(seed + i * _GAMMA)[1]
        return pair(seed + (i + np.uint64(1)) * _GAMMA)[0]

    # `_element` of each mapping compiled once, not inlined: the loops below peel their odd ends with it, and every
    # inlined copy of a pair function is seconds of compile time
    @njit_cached(nogil=True)
    def _poly32_at(seed, i):
        return _element(seed, i, poly32_pair)

    @njit_cached(nogil=True)
    def _libm64_at(seed, i):
        return _element(seed, i, libm64_pair)

    @numba.njit(inline="always")
    def _drawn_loop(acc, seed, first, c32, pair, at, fused, term):
        # acc[i] <- term(acc[i], eps[i]), eps[i] = element first + i of the stream `seed`, computed here pair by
        # pair instead of written to memory and read back: the update then costs what drawing alone costs. The
        # odd first element and a lone last one are peeled off, so the main loop has no branch (with one it ran
        # at half the speed). len(acc) >= 1.
        n = acc.size
        start = 0
        if first & np.uint64(1):   # the odd half of the pair of element first - 1
            acc[0] = term(acc[0], at(seed, first), c32, fused)
            start = 1
        m = (n - start) // 2
        # the counter word of pair k is z0 + k * (2 * GAMMA), the form of numba_backend.poly32_pairs (the same
        # words mod 2**64): a running sum where seed + (e + 2k + 1) * GAMMA is a 64-bit multiply per pair, which
        # measured 4% of the whole loop; the body is indexed from 0 as there
        z0 = seed + (first + np.uint64(start + 1)) * _GAMMA
        body = acc[start:]
        for k in range(m):
            ev, od = pair(z0 + np.uint64(k) * _STEP)
            body[2 * k] = term(body[2 * k], ev, c32, fused)
            body[2 * k + 1] = term(body[2 * k + 1], od, c32, fused)
        if (n - start) & 1:        # the even half of the last pair
            acc[n - 1] = term(acc[n - 1], at(seed, first + np.uint64(n - 1)), c32, fused)

    @numba.njit(inline="always")
    def _drawn_pair_loop(acc, seed0, seed1, first, c0, c1, pair, at, fused):
        # _drawn_loop with _add of two members at once: acc[i] <- add(add(acc[i], eps0[i], c0), eps1[i], c1), the
        # order of two _drawn_loop calls element by element. Why: the two members' pair functions are
        # independent work the CPU overlaps, and acc is read and written once for both: measured 5-7% less time
        # for an iteration of 30 members than one member per pass, about the rate of drawing the noise alone.
        # len(acc) >= 1.
        n = acc.size
        start = 0
        if first & np.uint64(1):
            acc[0] = _add(_add(acc[0], at(seed0, first), c0, fused), at(seed1, first), c1, fused)
            start = 1
        m = (n - start) // 2
        w = (first + np.uint64(start + 1)) * _GAMMA
        z0 = seed0 + w
        z1 = seed1 + w
        body = acc[start:]
        for k in range(m):
            d = np.uint64(k) * _STEP
            ev0, od0 = pair(z0 + d)
            ev1, od1 = pair(z1 + d)
            body[2 * k] = _add(_add(body[2 * k], ev0, c0, fused), ev1, c1, fused)
            body[2 * k + 1] = _add(_add(body[2 * k + 1], od0, c0, fused), od1, c1, fused)
        if (n - start) & 1:
            i = first + np.uint64(n - 1)
            acc[n - 1] = _add(_add(acc[n - 1], at(seed0, i), c0, fused), at(seed1, i), c1, fused)

    @numba.njit(inline="always")
    def _drawn_apply_loop(theta, naive, acc, seed, first, c32, scale32, pair, at, fused):
        # _drawn_loop with _add, then the update applied where acc[i] is final: theta[i] <- add(theta[i], acc[i],
        # scale32) and naive[i] likewise (cpu_kernels.apply's lines, or fma32's when fused), in the same pass: the
        # last member's. Per element the order of accumulate_drawn followed by two apply passes, without the two
        # passes over the window (2-3% of an iteration). len(acc) >= 1.
        n = acc.size
        start = 0
        if first & np.uint64(1):
            a = _add(acc[0], at(seed, first), c32, fused)
            acc[0] = a
            theta[0] = _add(theta[0], a, scale32, fused)
            naive[0] = _add(naive[0], a, scale32, fused)
            start = 1
        m = (n - start) // 2
        z0 = seed + (first + np.uint64(start + 1)) * _GAMMA
        ac = acc[start:]
        th = theta[start:]
        nv = naive[start:]
        for k in range(m):
            ev, od = pair(z0 + np.uint64(k) * _STEP)
            a = _add(ac[2 * k], ev, c32, fused)
            b = _add(ac[2 * k + 1], od, c32, fused)
            ac[2 * k] = a
            ac[2 * k + 1] = b
            th[2 * k] = _add(th[2 * k], a, scale32, fused)
            th[2 * k + 1] = _add(th[2 * k + 1], b, scale32, fused)
            nv[2 * k] = _add(nv[2 * k], a, scale32, fused)
            nv[2 * k + 1] = _add(nv[2 * k + 1], b, scale32, fused)
        if (n - start) & 1:
            a = _add(acc[n - 1], at(seed, first + np.uint64(n - 1)), c32, fused)
            acc[n - 1] = a
            theta[n - 1] = _add(theta[n - 1], a, scale32, fused)
            naive[n - 1] = _add(naive[n - 1], a, scale32, fused)

    @numba.njit(inline="always")
    def _stepped(t, e, s0, s1, s2, s3, four, fused):
        # t after the steps s0, s1, and s2, s3 when `four` (a constant once inlined, so the test folds away), in
        # order: a residue member evaluated once (+s, -s) or twice (+-s again, under mirroring)
        t = _add(t, e, s0, fused)
        t = _add(t, e, s1, fused)
        if four:
            t = _add(t, e, s2, fused)
            t = _add(t, e, s3, fused)
        return t

    @numba.njit(inline="always")
    def _drawn_steps_loop(theta, acc, seed, first, c32, s0, s1, s2, s3, four, pair, at, fused):
        # as _drawn_loop with _add, and theta[i] <- its 2 or 4 steps by eps[i] first, in the same pass: a residue
        # member's noise is never written to memory either. Per element the order is the buffered path's
        # (theta's steps in order, then acc); theta and acc are distinct. Measured 88% of the generation rate
        # with two steps, against 73% drawing into a buffer and running a loop per step over it. len(acc) >= 1.
        n = acc.size
        start = 0
        if first & np.uint64(1):
            v = at(seed, first)
            theta[0] = _stepped(theta[0], v, s0, s1, s2, s3, four, fused)
            acc[0] = _add(acc[0], v, c32, fused)
            start = 1
        m = (n - start) // 2
        z0 = seed + (first + np.uint64(start + 1)) * _GAMMA
        th = theta[start:]
        ac = acc[start:]
        for k in range(m):
            ev, od = pair(z0 + np.uint64(k) * _STEP)
            th[2 * k] = _stepped(th[2 * k], ev, s0, s1, s2, s3, four, fused)
            th[2 * k + 1] = _stepped(th[2 * k + 1], od, s0, s1, s2, s3, four, fused)
            ac[2 * k] = _add(ac[2 * k], ev, c32, fused)
            ac[2 * k + 1] = _add(ac[2 * k + 1], od, c32, fused)
        if (n - start) & 1:
            v = at(seed, first + np.uint64(n - 1))
            theta[n - 1] = _stepped(theta[n - 1], v, s0, s1, s2, s3, four, fused)
            acc[n - 1] = _add(acc[n - 1], v, c32, fused)

    #: elements of a residue member's noise held at once when its steps are not two or four: with theta's and acc's
    #: blocks 24 KiB, within the first level of cache (512 measured 2x slower: the vector loops' set-up per block)
    _BLOCK = 2048

    @numba.njit(inline="always")
    def _drawn_members(theta, acc, seeds, first, coeffs, offsets, steps, naive, scale32, apply, pair, at, fill,
                       fused):
        # member m in order: theta <- add(theta, eps_m, s) for s in steps[offsets[m]:offsets[m+1]] (the engine
        # residue), then acc <- add(acc, eps_m, coeffs[m]). A member with no steps, two or four (one or two
        # evaluations: the residue's steps come in pairs) never writes its noise (one loop per step count: the
        # count must be a constant for LLVM to vectorise the loop; each loop is seconds of compile time, so
        # only these); one with other counts draws a block at a time (`fill`, the mapping's range kernel, compiled
        # once in esverify.rng.numba_backend) and reuses it from the first level of cache. Two members in a row
        # without steps share one pass (_drawn_pair_loop). The blocks are views indexed from 0 (indexing
        # theta[b0 + i] measured 2x slower: numba cannot prove b0 + i >= 0 and keeps the negative-index branch,
        # which stops LLVM from vectorising the loop). With `apply`, the update is then applied to theta and
        # naive (add(x, acc, scale32)): in the last member's pass when it has no steps, else in a pass after it.
        n = acc.size
        if n == 0:
            return
        buf = np.empty(_BLOCK, np.float32)
        z = np.float32(0)
        last = seeds.size - 1 if apply else seeds.size   # a member the pairs leave alone: it applies the update
        m = -1
        while m + 1 < seeds.size:
            m += 1
            lo, hi = offsets[m], offsets[m + 1]
            c32 = coeffs[m]
            if lo == hi and m + 1 < last and offsets[m + 2] == hi:
                _drawn_pair_loop(acc, seeds[m], seeds[m + 1], first, c32, coeffs[m + 1], pair, at, fused)
                m += 1
                continue
            if lo == hi and m == last:
                _drawn_apply_loop(theta, naive, acc, seeds[m], first, c32, scale32, pair, at, fused)
                return
            if lo == hi:
                _drawn_loop(acc, seeds[m], first, c32, pair, at, fused, _add)
                continue
            if hi - lo == 2:
                _drawn_steps_loop(theta, acc, seeds[m], first, c32, steps[lo], steps[lo + 1], z, z, False, pair,
                                  at, fused)
                continue
            if hi - lo == 4:
                _drawn_steps_loop(theta, acc, seeds[m], first, c32, steps[lo], steps[lo + 1], steps[lo + 2],
                                  steps[lo + 3], True, pair, at, fused)
                continue
            for b0 in range(0, n, _BLOCK):
                nb = min(_BLOCK, n - b0)
                e = buf[:nb]
                th = theta[b0:b0 + nb]
                ac = acc[b0:b0 + nb]
                fill(e, seeds[m], first + np.uint64(b0))
                for j in range(lo, hi):
                    s = steps[j]
                    for i in range(nb):
                        th[i] = _add(th[i], e[i], s, fused)
                for i in range(nb):
                    ac[i] = _add(ac[i], e[i], c32, fused)
        if apply:   # the last member had steps
            for i in range(n):
                theta[i] = _add(theta[i], acc[i], scale32, fused)
            for i in range(n):
                naive[i] = _add(naive[i], acc[i], scale32, fused)

    # one compiled loop per mapping and rounding: a flag tested in the loop measured 2x slower
    @njit_cached(nogil=True)
    def _drawn_poly32(theta, acc, seeds, first, coeffs, offsets, steps, naive, scale32, apply):
        _drawn_members(theta, acc, seeds, first, coeffs, offsets, steps, naive, scale32, apply, poly32_pair, _poly32_at,
                       poly32_range, False)

    @njit_cached(nogil=True)
    def _drawn_poly32_fma(theta, acc, seeds, first, coeffs, offsets, steps, naive, scale32, apply):
        _drawn_members(theta, acc, seeds, first, coeffs, offsets, steps, naive, scale32, apply, poly32_pair, _poly32_at,
                       poly32_range, True)

    @njit_cached(nogil=True)
    def _drawn_libm64(theta, acc, seeds, first, coeffs, offsets, steps, naive, scale32, apply):
        _drawn_members(theta, acc, seeds, first, coeffs, offsets, steps, naive, scale32, apply, libm64_pair, _libm64_at,
                       libm64_range, False)

    @njit_cached(nogil=True)
    def _drawn_libm64_fma(theta, acc, seeds, first, coeffs, offsets, steps, naive, scale32, apply):
        _drawn_members(theta, acc, seeds, first, coeffs, offsets, steps, naive, scale32, apply, libm64_pair, _libm64_at,
                       libm64_range, True)

    _DRAWN = {("poly32", False): _drawn_poly32, ("poly32", True): _drawn_poly32_fma,
              ("libm64", False): _drawn_libm64, ("libm64", True): _drawn_libm64_fma}

ENABLED = numba is not None


def _host_has_fma() -> bool:
    # without an FMA unit LLVM lowers llvm.fma.f32 to a call of libm's fmaf, which the JIT must find at
    # link time; such a CPU (x86 before 2013) takes the torch lines instead of risking a failed link
    if numba is None:
        return False
    import llvmlite.binding as llvm
    features = set(llvm.get_host_cpu_features().flatten().split(","))
    return "+fma" in features or any(f.startswith("+neon") or f == "+fp-armv8" for f in features)


#: whether `fma32` runs the numba kernel (the CPU has a fused multiply-add); else the torch lines
FMA = _host_has_fma()


def usable(*tensors: torch.Tensor) -> bool:
    """True when every tensor is a contiguous CPU f32 tensor and numba is available."""
    return ENABLED and all(t.device.type == "cpu" and t.dtype == torch.float32 and t.is_contiguous()
                           for t in tensors)


def fma_usable(*tensors: torch.Tensor) -> bool:
    """`usable`, and this CPU has a fused multiply-add (`FMA`): the condition for `fma32`."""
    return FMA and usable(*tensors)


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
    Check with `fma_usable` (a CPU without a fused multiply-add takes the torch lines).
    """
    _fma32(_np(x), _np(y), float(k), _np(out))


#: the mappings `accumulate_drawn` computes inline, each with the numba kernel it inlines: a mapping whose
#: registered numba kernel is another one (a plug-in's, a test's deliberate fault) takes the caller's path,
#: so the inline noise is always the noise `gaussian_into` would draw
DRAWN_MAPPINGS = {"poly32": "esverify.rng.numba_backend:poly32", "libm64": "esverify.rng.numba_backend:libm64"}


def _drawable(mapping: str, fused: bool, *tensors) -> bool:
    """Whether the drawn kernels serve `mapping` (its registered numba kernel is the one they inline) on these
    tensors (contiguous CPU f32; fused: and a CPU with a fused multiply-add)."""
    registered = MAPPINGS[mapping].kernels.get("numba") if mapping in MAPPINGS else None
    if registered is None or registered != DRAWN_MAPPINGS.get(mapping):
        return False
    return fma_usable(*tensors) if fused else usable(*tensors)


def accumulate_drawn(acc, stream_seeds, first: int, mapping: str, coeffs32, fused: bool, theta=None,
                     steps=None) -> bool:
    """Member by member in order: theta <- theta + eps_m * s for each s of steps[m] (the engine residue's
    perturb and restore, docs/replay.md §3), then acc <- acc + eps_m * coeffs32[m]; eps_m = elements first ..
    first+len(acc)-1 of the contract stream stream_seeds[m] under `mapping` (esverify.rng.gaussian_into's
    values, computed inside the kernel: a member without steps never writes its noise to memory). Each
    `+ e*c` is two f32 roundings rd32(x + rd32(e * c)), or one (fused: es-awd's fma32).

    acc, theta: 1-D contiguous CPU f32 tensors of one length (theta: None, or the tensor the steps change,
    never acc; a theta given is checked like acc even without steps); stream_seeds: u64 values; first:
    int >= 0; coeffs32: one exact f32 value per member; steps: None, or per member a sequence of exact f32
    values. Returns False, changing nothing, when it cannot (a tensor not contiguous CPU f32, numba missing,
    another mapping or another numba kernel registered for it, fused without an FMA unit): the caller draws
    and accumulates. Raises ValueError, changing nothing, for arguments that do not fit together (as many
    coefficients and lists of steps as seeds; steps without a theta of acc's length, or with theta = acc).
    tests/test_replay_drawn.py and tests/test_replay_fused.py prove it bitwise the draw followed by
    `perturb`/`accumulate` or `fma32`.
    """
    return _drawn(acc, stream_seeds, first, mapping, coeffs32, fused, theta, steps, 0.0, None)


def _drawn(acc, stream_seeds, first, mapping, coeffs32, fused, theta, steps, scale32, naive) -> bool:
    """accumulate_drawn (naive None) or accumulate_drawn_apply: the checks, then the compiled kernel."""
    tensors = (acc,) if theta is None else (acc, theta)
    if not _drawable(mapping, fused, *tensors, *(() if naive is None else (naive,))):
        return False
    seeds = np.asarray(stream_seeds, dtype=np.uint64).reshape(-1)
    coeffs = np.asarray(coeffs32, dtype=np.float32).reshape(-1)
    if coeffs.size != seeds.size:
        raise ValueError(f"accumulate_drawn: {seeds.size} stream seeds but {coeffs.size} coefficients")
    per = [()] * seeds.size if steps is None else [tuple(x) for x in steps]
    if len(per) != seeds.size:
        raise ValueError(f"accumulate_drawn: {seeds.size} stream seeds but {len(per)} lists of steps")
    if any(per) and (theta is None or theta.numel() != acc.numel()
                     or (acc.numel() and theta.data_ptr() == acc.data_ptr())):   # empty tensors share pointer 0
        raise ValueError("accumulate_drawn: steps need a theta of acc's length, distinct from acc")
    offsets = np.zeros(seeds.size + 1, dtype=np.int64)
    np.cumsum([len(x) for x in per], out=offsets[1:])
    flat = np.array([v for x in per for v in x], dtype=np.float32)
    th = _np(acc if theta is None else theta)
    _DRAWN[mapping, bool(fused)](th, _np(acc), seeds, np.uint64(first), coeffs, offsets, flat,
                                 th if naive is None else _np(naive), np.float32(scale32), naive is not None)
    return True


def accumulate_drawn_apply(acc, stream_seeds, first: int, mapping: str, coeffs32, fused: bool, theta, steps,
                           scale32: float, naive) -> bool:
    """`accumulate_drawn`, then the update applied to theta and to naive: x <- rd32(x + rd32(acc * scale32)),
    or rd32(x + acc*scale32) with one rounding when fused (`apply`'s lines, or `fma32`'s), in the last member's
    pass when it has no steps (else in one pass after it); acc ends as accumulate_drawn leaves it.

    acc, theta, naive: 1-D contiguous CPU f32 tensors of one length, theta and naive distinct from acc and
    each other; scale32: an exact f32 value; the rest as accumulate_drawn's. Returns False, changing
    nothing, when accumulate_drawn would; ValueError as accumulate_drawn's, and for a theta or naive
    missing, not of acc's length, or not distinct from acc and each other. Why: the two apply passes over
    the window cost 2-3% of a replay's iteration (docs/replay.md §9). tests/test_replay_fused.py proves it
    bitwise accumulate_drawn followed by `apply` (or `fma32`) of theta and of naive.
    """
    if theta is None or naive is None:
        raise ValueError("accumulate_drawn_apply: needs theta and naive")
    if not _drawable(mapping, fused, acc, theta, naive):
        return False
    if theta.numel() != acc.numel() or naive.numel() != acc.numel() or (acc.numel() and len(
            {acc.data_ptr(), theta.data_ptr(), naive.data_ptr()}) < 3):
        raise ValueError("accumulate_drawn_apply: theta and naive must be tensors of acc's length, distinct from "
                         "acc and from each other")
    return _drawn(acc, stream_seeds, first, mapping, coeffs32, fused, theta, steps, scale32, naive)
