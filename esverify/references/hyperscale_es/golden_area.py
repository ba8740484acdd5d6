"""The golden area `hyperscale-es`: JAX's keys and noise and HyperscaleES's shaping, in numpy (docs/hyperscale.md §7).

Vector kinds (inputs -> expected; every float a bit array):

- ``jax-keys``: seed, x64, a fold_in path, partitionable, split n -> ``key``
  (u32, the two words after the path) and ``split`` (u32, n rows of two).
- ``jax-normal``: seed, path, shape, dtype (f32/f16/bf16), fma,
  partitionable -> ``bits`` (u32: the raw 32/16/8-bit draws, widened) and
  ``normal`` (the dtype's bits).
- ``eggroll-noise``: seed, leaf, epoch, noise_reuse, thread, shape (d0, d1),
  rank, scale (f32), dtype -> ``a`` (d0 x r) and ``b`` (d1 x r), the
  dtype's bits. Known answer G1 of the real code is one of them.
- ``shaping``: scores (f32), group -> ``shaped`` (f32); G2 among them.
- ``xla-math``: x (f32), fma -> ``log1p`` and ``erf_inv`` (f32).
- ``eggroll-update``: one sgd update on JAX's own noise: seed, leaf,
  epoch, noise_reuse, w (f32 bits of d0 x d1 values of the dtype), scores
  (f32) and group (shaped by `convert_fitnesses`), sigma, lr (f32), rank,
  mode (jit/eager), dtype (absent: f32; bf16, f16) -> ``w`` in the dtype;
  known answer G3 in all three dtypes among them.
- ``eggroll-update-draws``: the same from given draws (f32, threads x
  (d0 + d1) x r) and shaped fitness, with dyadic values that keep every
  sum exact, on a shape whose dot order was not measured -> ``w``.

Where expected values come from: keys and raw bits from a scalar
Threefry-2x32 on Python integers (this module, slow and independent of
`jaxrandom`'s vectorised one); floats from `xlamath`'s arithmetic on those
bits; shaping from `shaping`; updates from `update` (the dot's order per
shape is part of its model; its exact-sum vectors hold for any order). The one backend, ``numpy``, recomputes every
vector through `jaxrandom`, `noise` and `shaping`. The values hold for
jaxlib 0.10.2 on an x86 CPU (with FMA where ``fma`` is true): they are
JAX's own bits there, which tests/test_hyperscale_numerics.py checks
against the installed JAX library.
"""
from __future__ import annotations

import math

import numpy as np

from ...goldens.area import Area
from ...goldens.compare import decode, encode_ints
from . import jaxrandom as R
from . import noise as N
from . import shaping as S
from . import update as U
from . import xlamath as X

NAME = "hyperscale-es"
#: the area's version: bump it (and add `## hyperscale-es v<N>` to CHANGELOG.md) when a vector's bits change
VERSION = 1
BACKENDS = ("numpy",)
_FMT = {"f32": "f32", "f16": "f16", "bf16": "bf16"}
_M32 = 0xFFFFFFFF


# ----------------------------------------------------------------------------- the slow reference

def _slow_threefry(key: tuple, x0: int, x1: int) -> tuple[int, int]:
    """Threefry-2x32-20 on Python ints (Random123's rounds and key schedule)."""
    ks = (key[0], key[1], key[0] ^ key[1] ^ 0x1BD11BDA)
    x0, x1 = (x0 + ks[0]) & _M32, (x1 + ks[1]) & _M32
    for i in range(5):
        for r in ((13, 15, 26, 6), (17, 29, 16, 24))[i % 2]:
            x0 = (x0 + x1) & _M32
            x1 = (((x1 << r) | (x1 >> (32 - r))) & _M32) ^ x0
        x0 = (x0 + ks[(i + 1) % 3]) & _M32
        x1 = (x1 + ks[(i + 2) % 3] + i + 1) & _M32
    return x0, x1


def _slow_key(x: dict) -> tuple:
    seed = int(x["seed"]) % 2**64
    k = ((seed >> 32) if x.get("x64") else 0, seed & _M32)
    for d in x.get("path", []):
        k = _slow_threefry(k, 0, d)
    return k


def _slow_split(k: tuple, n: int, partitionable: bool) -> list:
    if partitionable:
        return [w for i in range(n) for w in _slow_threefry(k, i >> 32, i & _M32)]
    return _slow_words(k, list(range(2 * n)))


def _slow_words(k: tuple, counts: list) -> list:
    """jax's original-mode threefry over a counter list: halves of the zero-padded list, outputs joined."""
    c = counts + [0] * (len(counts) % 2)
    h = len(c) // 2
    pairs = [_slow_threefry(k, c[i], c[h + i]) for i in range(h)]
    return ([p[0] for p in pairs] + [p[1] for p in pairs])[:len(counts)]


def _slow_bits(k: tuple, width: int, size: int, partitionable: bool) -> list:
    mask = (1 << width) - 1
    if partitionable:
        out = []
        for i in range(size):
            o0, o1 = _slow_threefry(k, i >> 32, i & _M32)
            out.append((o0 ^ o1) & mask)
        return out
    words = _slow_words(k, list(range(-(-width * size // 32))))
    per = 32 // width
    return [(words[i // per] >> (width * (i % per))) & mask for i in range(size)]


# ----------------------------------------------------------------------------- cases

def _u32(values) -> dict:
    return encode_ints([int(v) for v in np.asarray(values).ravel()], "u32")


def _floats(x, dtype: str) -> dict:
    return encode_ints(N.bits_of(x, dtype).ravel().tolist(), _FMT[dtype])


def _f32_in(array: dict) -> np.ndarray:
    if array["format"] != "f32":
        raise ValueError(f"expected an f32 bit array, got {array['format']}")
    return decode(array).astype(np.uint32).view(np.float32)


KEY_CASES = [
    # id, seed, x64, path, split n, partitionable, comment
    ("keys-seed0", 0, False, [], 3, True, "key(0) and its partitionable split: key i = threefry(k, (0, i))"),
    ("keys-g1-path", 7, False, [0, 4, 2], 4, True, "G1's key: key(7), leaf 0, epoch 4, pair 2"),
    ("keys-original-split", 9, False, [5], 5, False, "the original (non-partitionable) split: counters 0..9 in halves"),
    ("keys-negative-seed", -5, False, [2**32 - 1], 2, True, "a negative seed: 32-bit mode keeps its low word"),
    ("keys-x64-seed", 2**40 + 3, True, [1, 2], 2, True, "jax_enable_x64: the seed's high word is the key's first"),
]

NORMAL_CASES = [
    # id, seed, path, shape, dtype, fma, partitionable
    ("normal-f32-fma", 3, [1, 4, 2], (7, 13), "f32", True, True),
    ("normal-f32-nofma", 3, [1, 4, 2], (7, 13), "f32", False, True),
    ("normal-f16", 3, [1, 4, 2], (5, 9), "f16", True, True),
    ("normal-bf16", 3, [1, 4, 2], (5, 9), "bf16", True, True),
    ("normal-f32-original", 11, [3], (33,), "f32", True, False),
    ("normal-f16-original-odd", 11, [3], (7,), "f16", True, False),
    ("normal-bf16-original-odd", 11, [3], (5,), "bf16", True, False),
]

NOISE_CASES = [
    # id, seed, leaf, epoch, noise_reuse, thread, shape, rank, scale, dtype, comment
    ("eggroll-g1-f32", 7, 0, 4, 1, 5, (3, 5), 2, 0.25, "f32", "known answer G1 (f32): thread 5, odd, -scale"),
    ("eggroll-g1-bf16", 7, 0, 4, 1, 5, (3, 5), 2, 0.25, "bf16", "known answer G1 (bf16)"),
    ("eggroll-g1-f16", 7, 0, 4, 1, 5, (3, 5), 2, 0.25, "f16", "known answer G1 (f16)"),
    ("eggroll-reuse0-epoch49", 11, 1, 49, 0, 2, (8, 5), 2, 0.05 / math.sqrt(2), "f32",
     "noise_reuse 0: epoch 49 draws epoch 0's noise (the frozen-noise quirk); even thread, +scale"),
    ("eggroll-reuse3-r4-bf16", 5, 2, 7, 3, 6, (6, 4), 4, 0.01, "bf16",
     "noise_reuse 3 (epoch 7 -> 2), rank 4, bf16: the scale rounded to bf16 before the product"),
]

SHAPING_CASES = [
    ("shaping-g2-group0", [1, 2, 0.5, 0, 3, -1, 0.25, 2], 0, "known answer G2, group size 0"),
    ("shaping-g2-group4", [1, 2, 0.5, 0, 3, -1, 0.25, 2], 4, "known answer G2, group size 4: per-group means, "
     "the variance of all eight scores"),
    ("shaping-constant", [2.5] * 6, 0, "constant scores: zeros"),
    ("shaping-one-minus-zero", [-0.0], 0, "one score -0: XLA drops the one-element sum, the result is +0"),
]


def _shaping_scores(case) -> np.ndarray:
    return np.asarray(case[1], np.float32)


def _extra_shaping_cases() -> list:
    rng = np.random.default_rng([56, 1])
    return [("shaping-n32-group0", rng.standard_normal(32).astype(np.float32) * 100, 0,
             "32 scores, the longest reduction modelled"),
            ("shaping-n30-group6", rng.standard_normal(30).astype(np.float32), 6,
             "30 scores in groups of 6: the variance is divided by 30, not multiplied by rd(1/30)"),
            ("shaping-n24-group8", rng.standard_normal(24).astype(np.float32) * 1e-3, 8, "24 small scores, groups of 8"),
            ("shaping-n64-group0", rng.standard_normal(64).astype(np.float32), 0,
             "64 scores (the end-to-end test's population): two 32-value windows, rounded squares"),
            ("shaping-n1000-group8", rng.standard_normal(1000).astype(np.float32) * 10, 8,
             "1000 scores in groups of 8: 32 windows with 12 zeros in front and 12 behind")]


def _math_inputs() -> np.ndarray:
    edges = [0.0, -0.0, 1.0, -1.0, 0.5, -0.64359, 0.64360, 0.99999994, -0.99999994, 1e-20, 0.9, 0.999]
    rng = np.random.default_rng([56, 2])
    return np.concatenate([np.asarray(edges, np.float32), rng.uniform(-1, 1, 40).astype(np.float32)])


def _key_vector(case) -> dict:
    id_, seed, x64, path, n, part, comment = case
    x = {"kind": "jax-keys", "seed": seed, "x64": x64, "path": path, "split": n, "partitionable": part}
    k = _slow_key(x)
    return {"id": id_, "comment": comment, "inputs": x,
            "expected": {"key": _u32(k), "split": _u32(_slow_split(k, n, part))}}


def _normal_vector(case) -> dict:
    id_, seed, path, shape, dtype, fma, part = case
    x = {"kind": "jax-normal", "seed": seed, "x64": False, "path": path, "shape": list(shape), "dtype": dtype,
         "fma": fma, "partitionable": part}
    bits = np.asarray(_slow_bits(_slow_key(x), R.draw_width(dtype), math.prod(shape), part))
    comment = (f"jax.random.normal {dtype} {tuple(shape)}, {'partitionable' if part else 'original'} threefry, "
               f"{'with' if fma else 'without'} fused multiply-adds")
    return {"id": id_, "comment": comment, "inputs": x,
            "expected": {"bits": _u32(bits), "normal": _floats(R.normal_from_bits(bits, dtype, fma), dtype)}}


def _noise_inputs(case) -> dict:
    id_, seed, leaf, epoch, reuse, thread, shape, rank, scale, dtype, _ = case
    return {"kind": "eggroll-noise", "seed": seed, "leaf": leaf, "epoch": epoch, "noise_reuse": reuse,
            "thread": thread, "shape": list(shape), "rank": rank, "dtype": dtype,
            "scale": encode_ints(np.asarray([scale], np.float32).view(np.uint32).tolist(), "f32")}


def _noise_slow(x: dict) -> dict:
    d0, d1 = x["shape"]
    r = x["rank"]
    e = x["epoch"] // x["noise_reuse"] if x["noise_reuse"] else 0
    k = _slow_key({"seed": x["seed"], "path": [x["leaf"], e, x["thread"] // 2]})
    bits = np.asarray(_slow_bits(k, R.draw_width(x["dtype"]), (d0 + d1) * r, True))
    draw = R.normal_from_bits(bits, x["dtype"]).reshape(d0 + d1, r)
    a = N.scale_draw(draw[d1:], float(_f32_in(x["scale"])[0]), x["thread"], x["dtype"])
    return {"a": _floats(a, x["dtype"]), "b": _floats(draw[:d1], x["dtype"])}


def _shaping_vector(id_, scores, group, comment) -> dict:
    x = {"kind": "jax-shaping", "group": group, "scores": encode_ints(np.asarray(scores, np.float32).view(np.uint32)
                                                                   .tolist(), "f32")}
    return {"id": id_, "comment": comment, "inputs": x,
            "expected": {"shaped": _floats(S.convert_fitnesses(_f32_in(x["scores"]), group), "f32")}}


def _math(x: dict) -> dict:
    v = _f32_in(x["x"])
    return {"log1p": _floats(X.log1p32(-v * v, x["fma"]), "f32"), "erf_inv": _floats(X.erf_inv32(v, x["fma"]), "f32")}


def _f32s(values) -> dict:
    return _floats(np.asarray(values, np.float32), "f32")


UPDATE_CASES = [
    # id, seed, leaf, epoch, reuse, (d0, d1), scores, group, sigma, lr, rank, mode, comment
    ("update-g3-jit", 11, 0, 3, 1, (8, 5), list(range(8)), 0, 0.05, 0.1, 2, "jit",
     "known answer G3 (f32): W = arange(40)/64, scores arange(8); 8x16x5 dot, four accumulators; W2 = fma(g, lr, W)"),
    ("update-g3-eager", 11, 0, 3, 1, (8, 5), list(range(8)), 0, 0.05, 0.1, 2, "eager",
     "known answer G3 (f32), eager arithmetic: plain divisions, the step rounded before the add"),
    ("update-one-row-seq", 4, 2, 5, 2, (1, 6), [3, -1, 0.5, 2, 0, 7], 2, 0.02, 0.5, 3, "jit",
     "a single-row leaf (1x18x6: sequential fma accumulation), rank 3, grouped shaping, noise_reuse 2"),
]
#: (id, dtype, mode, comment): G3 in low precision (W = arange(40)/64 rounded to the dtype)
LOW_UPDATE_CASES = [
    ("update-g3-bf16-jit", "bf16", "jit", "known answer G3 (bf16, jit: A = draw * s unrounded, XLA's excess "
     "precision); 15 of 40 elements unchanged"),
    ("update-g3-bf16-eager", "bf16", "eager", "known answer G3 (bf16, eager: A rounded to bf16)"),
    ("update-g3-f16-jit", "f16", "jit", "known answer G3 (f16: A rounded to f16 in both modes)"),
]


def _update_inputs(case, dtype: str = "f32") -> dict:
    id_, seed, leaf, epoch, reuse, (d0, d1), scores, group, sigma, lr, rank, mode, _ = case
    w = R.round_to((np.arange(d0 * d1, dtype=np.float32) / np.float32(64)).reshape(d0, d1), dtype)
    x = {"kind": "eggroll-update", "seed": seed, "leaf": leaf, "epoch": epoch, "noise_reuse": reuse,
         "shape": [d0, d1], "w": _f32s(w), "scores": _f32s(scores), "group": group, "sigma": _f32s([sigma]),
         "lr": _f32s([lr]), "rank": rank, "mode": mode}
    if dtype != "f32":
        x["dtype"] = dtype                     # w holds values of the dtype, as f32 bits
    return x


def _update(x: dict) -> dict:
    w = _f32_in(x["w"]).reshape(x["shape"])
    sigma, lr = float(_f32_in(x["sigma"])[0]), float(_f32_in(x["lr"])[0])
    if x["kind"] == "eggroll-update":
        shaped = S.convert_fitnesses(_f32_in(x["scores"]), x["group"])
        key = N.leaf_key(R.key(x["seed"]), x["leaf"])
        dtype = x.get("dtype", "f32")
        w2 = U.eggroll_update(w, shaped, key, x["epoch"], sigma, lr, x["rank"], x["noise_reuse"], x["mode"],
                              dtype=dtype)
        return {"w": _floats(w2, dtype)}
    else:
        d0, d1 = x["shape"]
        draws = _f32_in(x["draws"]).reshape(-1, d0 + d1, x["rank"])
        w2 = U.update_from_draws(w, _f32_in(x["shaped"]), list(draws), sigma, lr, x["rank"], x["mode"])
    return {"w": _f32s(w2)}


def _draws_vector(mode: str) -> dict:
    rng = np.random.default_rng([56, 5])
    n, r, d0, d1 = 6, 4, 3, 7
    draws = rng.integers(-8, 9, (n, d0 + d1, r)) / 8.0       # dyadic: every product and sum exact
    shaped = rng.integers(-4, 5, n) / 4.0
    w = rng.integers(-64, 65, (d0, d1)) / 64.0
    x = {"kind": "eggroll-update-draws", "shape": [d0, d1], "rank": r, "mode": mode, "w": _f32s(w),
         "shaped": _f32s(shaped), "draws": _f32s(draws), "sigma": _f32s([0.5]), "lr": _f32s([0.25])}
    return {"id": f"update-draws-exact-{mode}", "comment": "given dyadic draws and fitness (3x24x7: a dot order not "
            "measured, every sum exact), sigma 0.5, lr 0.25, rank 4 (s = 1/4): " + mode, "inputs": x, "expected": _update(x)}


def generate() -> list[dict]:
    out = [_key_vector(c) for c in KEY_CASES] + [_normal_vector(c) for c in NORMAL_CASES]
    for case in NOISE_CASES:
        x = _noise_inputs(case)
        out.append({"id": case[0], "comment": case[-1], "inputs": x, "expected": _noise_slow(x)})
    for id_, scores, group, comment in SHAPING_CASES + _extra_shaping_cases():
        out.append(_shaping_vector(id_, scores, group, comment))
    for fma in (True, False):
        x = {"kind": "xla-math", "fma": fma, "x": _floats(_math_inputs(), "f32")}
        out.append({"id": f"xla-math-{'fma' if fma else 'nofma'}", "comment": "XLA CPU's log1p(-x*x) and erf_inv(x) "
                    f"in f32 {'with' if fma else 'without'} fused multiply-adds; both branches of each",
                    "inputs": x, "expected": _math(x)})
    for case in UPDATE_CASES:
        x = _update_inputs(case)
        out.append({"id": case[0], "comment": case[-1], "inputs": x, "expected": _update(x)})
    out += [_draws_vector(mode) for mode in ("jit", "eager")]
    for id_, dtype, mode, comment in LOW_UPDATE_CASES:
        base = list(UPDATE_CASES[0])
        base[11] = mode
        x = _update_inputs(base, dtype)
        out.append({"id": id_, "comment": comment, "inputs": x, "expected": _update(x)})
    return out


# ----------------------------------------------------------------------------- checking

def _lengths(x: dict) -> dict:
    kind = x.get("kind")
    if kind == "jax-keys":
        return {"key": 2, "split": 2 * x["split"]}
    if kind == "jax-normal":
        n = math.prod(x["shape"])
        return {"bits": n, "normal": n}
    if kind == "eggroll-noise":
        return {"a": x["shape"][0] * x["rank"], "b": x["shape"][1] * x["rank"]}
    if kind == "jax-shaping":
        return {"shaped": len(x["scores"]["values"])}
    if kind == "xla-math":
        return {"log1p": len(x["x"]["values"]), "erf_inv": len(x["x"]["values"])}
    if kind in ("eggroll-update", "eggroll-update-draws"):
        d0, d1 = x["shape"]
        if len(x["w"]["values"]) != d0 * d1:
            raise ValueError(f"w has {len(x['w']['values'])} values, the shape is {d0} x {d1}")
        return {"w": d0 * d1}
    raise ValueError(f"unknown kind {kind!r}")


def check_sizes(vector: dict) -> list[str]:
    """Sizes the vector declares (shapes, ranks, split counts) that disagree with its expected values."""
    exp = vector["expected"]
    try:
        want = _lengths(vector["inputs"])
    except (ValueError, KeyError, TypeError) as exc:
        return [f"inputs not understood: {exc}"]
    out = [f"{f} has {len(exp[f]['values']) if f in exp else None} values, want {n}"
           for f, n in want.items() if f not in exp or len(exp[f]["values"]) != n]
    return out + [f"unexpected field {f}" for f in exp if f not in want]


def recompute(vector: dict, backend: str) -> dict:
    """The vectorised numpy model (`jaxrandom`, `noise`, `shaping`, `xlamath`); ValueError for another backend."""
    if backend not in BACKENDS:
        raise ValueError(f"hyperscale-es backend {backend!r} is unknown; available: {list(BACKENDS)}")
    problems = check_sizes(vector)
    if problems:
        raise ValueError(f"vector {vector['id']!r} is inconsistent: {problems[0]}")
    x = vector["inputs"]
    kind = x["kind"]
    if kind in ("jax-keys", "jax-normal"):
        k = R.key(x["seed"], x["x64"])
        for d in x["path"]:
            k = R.fold_in(k, d)
        if kind == "jax-keys":
            return {"key": _u32(k), "split": _u32(R.split(k, x["split"], x["partitionable"]))}
        dt, shape = x["dtype"], tuple(x["shape"])
        bits = R.random_bits(k, R.draw_width(dt), shape, x["partitionable"])
        return {"bits": _u32(bits),
                "normal": _floats(R.normal(k, shape, dt, x["fma"], x["partitionable"]), dt)}
    if kind == "eggroll-noise":
        key = N.leaf_key(R.key(x["seed"]), x["leaf"])
        a, b = N.eggroll_factors(key, x["epoch"], x["thread"], x["shape"], x["rank"],
                                 float(_f32_in(x["scale"])[0]), x["dtype"], x["noise_reuse"])
        return {"a": _floats(a, x["dtype"]), "b": _floats(b, x["dtype"])}
    if kind == "jax-shaping":
        return {"shaped": _floats(S.convert_fitnesses(_f32_in(x["scores"]), x["group"]), "f32")}
    if kind == "xla-math":
        return _math(x)
    return _update(x)


AREA = Area(name=NAME, version=VERSION, version_constant="esverify.references.hyperscale_es.golden_area.VERSION",
            generate=generate, backends=lambda: list(BACKENDS), recompute=recompute, check_sizes=check_sizes)
