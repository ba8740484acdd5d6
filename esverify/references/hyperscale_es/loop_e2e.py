"""Our side of the end-to-end loop row: one epoch's update of the test's parameter tree, replayed in numpy
(docs/hyperscale.md §13).

The end-to-end test's jitted step (convert_fitnesses, then do_updates with optax adamw) on a tree of f32
leaves, each EggRoll `MM_PARAM` matrix (rank r) or full-rank `PARAM` vector, N threads, noise_reuse and
the leaf keys as the child recorded them. Arithmetic as XLA CPU runs that whole step (jaxlib 0.10.2, x86
with FMA; measured on the stand-in, whose step is written from docs/hyperscale.md):

- matrix leaf (d0, d1): the estimate of `update` (jit): s = rd(sigma * rd(1/rd(sqrt r))), X_t =
  rd(f_t * rd(draw_A * +-s)), G by the dot's order (`dot_order`), g = rd(G * rd(rd(1/N) * rd(sqrt N)));
  the gradient -g;
- full-rank leaf of more than one element: XLA folds the normal's sqrt(2) into the broadcast scale, so
  thread t's noise is rd(erf_inv(u) * rd(sqrt 2 * +-sigma)); a one-element leaf (the output bias, (1,))
  keeps the draw's own rounding, rd(rd(sqrt 2 * erf_inv(u)) * +-sigma) (its scale is a bitcast there);
  the products rd(f_t * noise) are summed over the threads in 32-value windows (`shaping.xla_sum`), the
  mean is the sum times rd(1/N), the gradient -rd(sqrt N * mean);
- other codes (EMB_PARAM, EXCLUDED): a zero gradient;
- adamw (`adamw_step`): the moments fuse the state's product, mu' = fma(mu, b1, rd(rd(1 - b1) g)),
  nu' = fma(nu, b2, rd(rd(1 - b2) rd(g g))), except nu' of a one-element leaf, which fuses the gradient's:
  fma(rd(g g), rd(1 - b2), rd(b2 nu)) (LLVM picks the other multiply in that scalar kernel);
  XLA rewrites (mu'/bc1) / (sqrt(nu'/bc2) + eps) as mu' / (bc1 * (sqrt(nu'/bc2) + eps)), with true
  divisions: den = rd(bc1 * rd(rd(sqrt(rd(nu'/bc2))) + eps)), u0 = rd(mu'/den); then u = fma(p, wd, u0)
  and p' = fma(u, -lr, p). bc = 1 - rd(b)**count, the power correctly rounded (counts 1 ... 684).

The dot orders, measured on this host's XLA for the test's products (M x K x N, K = N threads * r):
four round-robin accumulators combined as ((a0 + a1) + (a2 + a3)) for 16x512x3 and 16x512x16,
sequential for a single row (1x512x16). With `--xla_cpu_experimental_ynn_fusion_type=-individual_dot`
(XLA's own dot emitter): sequential fma within blocks of 256 k, the block sums added in order, for
16x512x3 and 16x512x16; sequential for a single row. With `--xla_cpu_enable_platform_dependent_math=false`
(which the row needs to compare the jitted shaping): sequential for all three. Other shapes, or both
flags at once: a ValueError (not measured).
"""
from __future__ import annotations

import math

import numpy as np

from . import jaxrandom as R
from . import noise as N
from . import shaping as S
from . import update as U
from .optim import MAX_COUNT, AdamState, adam_init
from .xlamath import erf_inv32, fma32

F32 = np.float32
MM_PARAM, PARAM = 1, 0
YNN_OFF = "--xla_cpu_experimental_ynn_fusion_type=-individual_dot"
EXACT_MATH = "--xla_cpu_enable_platform_dependent_math=false"
#: (M, K, N) -> order of the f32 dot under XLA's default (YNNPACK) kernel, with YNN_OFF, with EXACT_MATH
_ORDERS = {"default": {(16, 512, 3): "acc4", (16, 512, 16): "acc4"},
           "ynn-off": {(16, 512, 3): "block256", (16, 512, 16): "block256"},
           "exact-math": {(16, 512, 3): "seq", (16, 512, 16): "seq"}}


def dot_order(m: int, k: int, n: int, xla_flags: str = "") -> str:
    """The accumulation order of the update's f32 dot m x k x n on this host's XLA ("seq", "acc4",
    "block256"); ValueError for a shape not measured."""
    flags = xla_flags.split()
    if YNN_OFF in flags and EXACT_MATH in flags:
        raise ValueError(f"XLA's dot order under both {YNN_OFF} and {EXACT_MATH} was not measured")
    if m == 1:
        return "seq"
    table = _ORDERS["ynn-off" if YNN_OFF in flags else "exact-math" if EXACT_MATH in flags else "default"]
    if (m, k, n) not in table:
        raise ValueError(f"XLA's dot order for {m}x{k}x{n} was not measured (docs/hyperscale.md §13)")
    return table[(m, k, n)]


def contract(xk: np.ndarray, bk: np.ndarray, order: str) -> np.ndarray:
    """G[m, n] = sum_k xk[m, k] * bk[n, k] in f32 in `order` (update.contract's, or "block256")."""
    if order != "block256":
        return U.contract(xk, bk, order)
    total = np.zeros((xk.shape[0], bk.shape[0]), F32)
    for s in range(0, xk.shape[1], 256):
        total = (total + U.contract(xk[:, s:s + 256], bk[:, s:s + 256], "seq")).astype(F32)
    return total


def matrix_gradient(shape, key, epoch: int, shaped, sigma: float, rank: int, noise_reuse: int,
                    fma: bool = True, xla_flags: str = "") -> np.ndarray:
    """-(the EggRoll estimate) of a (d0, d1) f32 matrix leaf with leaf key `key` (2 uint32 words)."""
    d0, d1 = shape
    f = np.asarray(shaped, F32)
    n = f.size
    s = F32(F32(sigma) * (F32(1) / F32(math.sqrt(rank))))
    # every pair's draw in one elementwise pass (the same bits as one `R.normal` per pair: the normal's
    # arithmetic is per element; one call per pair was most of a replay's time in numpy's per-call overhead)
    bits = np.stack([R.random_bits(N.thread_key(key, epoch, t, noise_reuse), R.draw_width("f32"), (d0 + d1, rank))
                     for t in range(0, n, 2)])
    draws = np.asarray(R.normal_from_bits(bits, "f32", fma), F32)
    xs, bs = [], []
    for t in range(n):
        draw = draws[t // 2]
        a = (draw[d1:] * (s if t % 2 == 0 else -s)).astype(F32)
        xs.append((f[t] * a).astype(F32))
        bs.append(draw[:d1])
    xk, bk = np.concatenate(xs, axis=1), np.concatenate(bs, axis=1)
    g = contract(xk, bk, dot_order(d0, n * rank, d1, xla_flags))
    return (-(g * F32((F32(1) / F32(n)) * F32(math.sqrt(n))))).astype(F32)


def vector_gradient(shape, key, epoch: int, shaped, sigma: float, noise_reuse: int, fma: bool = True) -> np.ndarray:
    """-(sqrt N * the full-rank estimate) of an f32 leaf of any shape with leaf key `key`."""
    f = np.asarray(shaped, F32)
    n = f.size
    root2 = F32(math.sqrt(2))
    folded = math.prod(shape) > 1          # a one-element leaf's scale is a bitcast, not a broadcast: no fold
    products = []
    # every thread's erf_inv in one elementwise pass (the same bits as one call per thread, far cheaper)
    us = np.stack([np.asarray(R.uniform(N.thread_key(key, epoch, t, noise_reuse), tuple(shape), "f32",
                                        -(1 - 2.0 ** -24), 1.0), F32) for t in range(n)])
    es = erf_inv32(us, fma)
    for t in range(n):
        signed = F32(sigma if t % 2 == 0 else -sigma)
        e = es[t]
        noise = (e * F32(root2 * signed)) if folded else ((root2 * e).astype(F32) * signed)
        products.append((f[t] * noise.astype(F32)).astype(F32))
    flat = np.stack(products).reshape(n, -1).T                      # (elements, threads)
    mean = (S.xla_sum(flat) * (F32(1) / F32(n))).astype(F32).reshape(tuple(shape))
    return (-(F32(math.sqrt(n)) * mean)).astype(F32)


def _power(base: float, count: int) -> np.float32:
    if not 1 <= count <= MAX_COUNT:
        raise ValueError(f"adamw step count {count}: the bias-correction power is modelled for 1..{MAX_COUNT}")
    return F32(np.float64(F32(base)) ** count)


def adamw_step(param, grad, state: AdamState, lr: float, b1: float = 0.9, b2: float = 0.999, eps: float = 1e-8,
               weight_decay: float = 1e-4) -> tuple[np.ndarray, AdamState]:
    """optax.adamw then apply_updates on one f32 leaf as the loop's fused jitted step computes it (module
    docstring). Returns (p', the new state); ValueError for a count beyond MAX_COUNT."""
    p, g = np.asarray(param, F32), np.asarray(grad, F32)
    count = state.count + 1
    mu = fma32(state.mu, F32(b1), (g * F32(1 - b1)).astype(F32))
    gg = (g * g).astype(F32)
    if p.size == 1:     # the one-element leaf's kernel fuses the gradient's product instead (measured)
        nu = fma32(gg, F32(1 - b2), (state.nu * F32(b2)).astype(F32))
    else:
        nu = fma32(state.nu, F32(b2), (gg * F32(1 - b2)).astype(F32))
    bc1, bc2 = F32(F32(1) - _power(b1, count)), F32(F32(1) - _power(b2, count))
    root = np.sqrt((nu / bc2).astype(F32)).astype(F32)
    den = (bc1 * (root + F32(eps)).astype(F32)).astype(F32)
    u = fma32(p, F32(weight_decay), (mu / den).astype(F32))
    return fma32(u, F32(-lr), p), AdamState(count, mu, nu)


def leaf_gradient(code: int, shape, key, epoch: int, shaped, sigma: float, rank: int, noise_reuse: int,
                  fma: bool = True, xla_flags: str = "") -> np.ndarray:
    """The gradient do_updates hands the optimiser for one f32 leaf of es_map code `code`."""
    if code == MM_PARAM:
        return matrix_gradient(shape, key, epoch, shaped, sigma, rank, noise_reuse, fma, xla_flags)
    if code == PARAM:
        return vector_gradient(shape, key, epoch, shaped, sigma, noise_reuse, fma)
    return np.zeros(tuple(shape), F32)


def unmodelled(init: dict, layout: dict) -> str:
    """Why the recorded run is outside this model ('' when inside): one noiser set up once, adamw, f32
    leaves of codes 0-3 with one key each, no group size."""
    if init.get("noiser") != "EggRoll":
        return f"the test set up {init.get('noiser')}, not EggRoll"
    if init.get("solver") != "adamw":
        return f"the solver is {init.get('solver')}: only adamw is modelled in the loop"
    extra = set(init.get("solver_kwargs", {})) - {"b1", "b2", "eps", "weight_decay"}
    if extra:
        return f"adamw options {sorted(extra)} are not modelled in the loop"
    if init.get("options", {}).get("group_size", 0):
        return "group_size > 0 is not modelled in the loop"
    if any(d != "float32" for d in layout["dtypes"]) or any(c not in (0, 1, 2, 3) for c in layout["codes"]):
        return f"leaves of dtypes {sorted(set(layout['dtypes']))} and codes {sorted(set(map(str, layout['codes'])))}"
    return ""


def replay(init: dict, layout: dict, befores: list, keys: list, shaped: list, epochs: list, fma: bool = True,
           xla_flags: str = "") -> list:
    """Our params after each recorded update: per update u, per leaf (flatten order), an f32 array.

    init: init_noiser's arguments as the child recorded them (sigma, lr, solver_kwargs, options);
    layout: leaf shapes and es_map codes; befores[u][i]: the reference's leaf i before update u (f32);
    keys[u][i]: leaf i's key words; shaped[u]: the N shaped fitnesses (f32) the reference's update used;
    epochs[u]: the epoch of every thread's iterinfo. Our adamw state runs on from update to update
    (first update: count 0). ValueError for anything `unmodelled`, a scanned leaf, or a dot order not
    measured."""
    why = unmodelled(init, layout)
    if why:
        raise ValueError(why)
    opts, kw = init.get("options", {}), init.get("solver_kwargs", {})
    rank, reuse = int(opts.get("rank", 1)), int(opts.get("noise_reuse", 0))
    adam = {k: float(kw[k]) for k in ("b1", "b2", "eps", "weight_decay") if k in kw}
    states, out = None, []
    for before, leaf_keys, f, epoch in zip(befores, keys, shaped, epochs):
        states = states or [adam_init(b) for b in before]
        after = []
        for i, (b, key, code) in enumerate(zip(before, leaf_keys, layout["codes"])):
            key = np.asarray(key, np.uint32)
            if key.shape != (2,):
                raise ValueError(f"leaf {layout['names'][i]} has keys of shape {key.shape}: scanned leaves are "
                                 f"not modelled in the loop")
            g = leaf_gradient(code, b.shape, key, epoch, f, init["sigma"], rank, reuse, fma, xla_flags)
            new, states[i] = adamw_step(b, g, states[i], init["lr"], **adam)
            after.append(new)
        out.append(after)
    return out
