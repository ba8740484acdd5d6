"""HyperscaleES's numerics in numpy (docs/hyperscale.md): JAX's threefry keys and normal, XLA's math, shaping.

Known answers: Random123's Threefry-2x32-20 vectors, and G1/G2 of the
real code (docs/hyperscale.md §6), bit for bit. Differential tests run the
installed JAX library (Apache-2.0; skipped without it) on the same keys
and compare bit patterns. The package itself must never import jax.
"""
from __future__ import annotations

import hashlib
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from esverify.references.hyperscale_es import jaxrandom as R
from esverify.references.hyperscale_es import shaping as S
from esverify.references.hyperscale_es import xlamath as X


def _bits(x, dtype: str) -> np.ndarray:
    """Bit patterns of a draw of `dtype` as our functions return it."""
    x = np.asarray(x)
    if dtype == "bf16":
        return X.bf16_bits(x)
    return x.view(np.uint16 if dtype == "f16" else np.uint32)


def _hex(bits) -> list[str]:
    return [f"{int(v):0{2 * np.asarray(bits).itemsize}x}" for v in np.asarray(bits).ravel()]


# ----------------------------------------------------------------------------- known answers

@pytest.mark.parametrize("key,ctr,want", [
    ((0, 0), (0, 0), ("6b200159", "99ba4efe")),
    ((0xFFFFFFFF, 0xFFFFFFFF), (0xFFFFFFFF, 0xFFFFFFFF), ("1cb996fc", "bb002be7")),
    ((0x13198A2E, 0x03707344), (0x243F6A88, 0x85A308D3), ("c4923a9c", "483df7a0")),
])
def test_threefry_random123_vectors(key, ctr, want):
    o0, o1 = R.threefry2x32(np.array(key, np.uint32), [ctr[0]], [ctr[1]])
    assert (_hex(o0)[0], _hex(o1)[0]) == want


def test_keys_from_seeds_and_the_key_tree():
    assert R.key(7).tolist() == [0, 7]
    assert R.key(2**32 + 5).tolist() == [0, 5]                  # jax's default 32-bit mode truncates
    assert R.key(2**32 + 5, x64=True).tolist() == [1, 5]
    assert R.key(-5).tolist() == [0, 2**32 - 5]
    assert R.key(-5, x64=True).tolist() == [2**32 - 1, 2**32 - 5]
    with pytest.raises(ValueError, match="int64"):
        R.key(2**63)
    k = R.key(9)
    # partitionable split: key i is fold_in(k, i); the original mode is not
    assert all(R.split(k, 4)[i].tolist() == R.fold_in(k, i).tolist() for i in range(4))
    assert R.split(k, 4, partitionable=False).tolist() != R.split(k, 4).tolist()
    with pytest.raises(ValueError, match="uint32 array of shape"):
        R.fold_in(np.array([1, 2, 3], np.uint32), 0)


G1 = {  # dtype -> B[0], A[0] (times -0.25), SHA-256[:16] of the (8, 2) draw's bytes
    "f32": (("c0097e31", "3ecda9c6"), ("3c62e9b4", "3e56abb8"), "0e40cddce7cfbbe4"),
    "bf16": (("bf31", "400d"), ("bcfc", "3e61"), "2a846e06625934e3"),
    "f16": (("b641", "b426"), ("2eae", "2231"), "476224b3601eb404"),
}


@pytest.mark.parametrize("dtype", sorted(G1))
def test_g1_noise_of_one_thread(dtype):
    """G1: key(7), leaf 0, epoch 4, pair 2 (thread 5, odd: -sigma), rank 2, parameter (3, 5)."""
    k = R.fold_in(R.fold_in(R.fold_in(R.key(7), 0), 4), 2)
    draw = R.normal(k, (8, 2), dtype)
    a = draw[5:].astype(np.float32) * np.float32(-0.25)            # exact: a power of two
    a = R.round_to(a, dtype)
    b0, a0, digest = G1[dtype]
    assert tuple(_hex(_bits(draw, dtype)[0])) == b0
    assert tuple(_hex(_bits(a, dtype)[0])) == a0
    assert hashlib.sha256(_bits(draw, dtype).tobytes()).hexdigest()[:16] == digest


G2_SCORES = [1, 2, 0.5, 0, 3, -1, 0.25, 2]
G2 = {0: "3cd2be97 3f59548c bec592ae bf4c28a2 3fd60991 bfcf739d bf1778fd 3f59548c",
      4: "3dd2be97 3f6d166a be9e0ef1 bf3866c4 3fcc28a2 bfd9548c bf2b3adb 3f4592ae"}


@pytest.mark.parametrize("group", sorted(G2))
def test_g2_convert_fitnesses(group):
    assert " ".join(_hex(S.convert_fitnesses(G2_SCORES, group).view(np.uint32))) == G2[group]


def test_grouped_shaping_uses_the_global_variance():
    s = np.array([0, 1, 10, 30], np.float32)
    got = S.convert_fitnesses(s, 2)
    # each pair centred on its own mean (+-0.5, +-10), both divided by the spread of all four (12.05);
    # a per-group variance would give +-1 in both groups
    assert got[0] == -got[1] and got[2] == -got[3]
    assert 0.04 < got[1] < 0.045 and 0.82 < got[3] < 0.84


def test_shaping_bad_input_and_limits():
    assert not S.convert_fitnesses([3.0] * 8).any()                  # constant scores: zeros
    with pytest.raises(ValueError, match="does not divide"):
        S.convert_fitnesses(np.arange(8), 3)
    with pytest.raises(ValueError, match="modelled up to 1024"):
        S.convert_fitnesses(np.arange(1025.0))
    with pytest.raises(ValueError, match="modelled up to 32"):
        S.convert_fitnesses(np.arange(128.0), 64)
    with pytest.raises(ValueError, match="1-D"):
        S.convert_fitnesses(np.ones((2, 4)))


def test_fma_is_one_rounding():
    a = np.float32(1 + 2.0**-12)
    # a*a = 1 + 2^-11 + 2^-24: rounded alone it ties to 1 + 2^-11, fused the 2^-24 survives the subtraction
    assert X.fma32(a, a, np.float32(-1)) == np.float32(2.0**-11 + 2.0**-24)
    assert np.float32(a * a) - np.float32(1) == np.float32(2.0**-11)
    # round-to-odd keeps a sticky bit that plain f64 addition would lose (a double-rounding case)
    # a*a is the midpoint 1 + 2^-11 + 2^-24 of two f32 values; 2^-70 above it must round up
    got = X.fma32(a, a, np.float32(2.0**-70))
    assert got == np.float32(1 + 2.0**-11 + 2.0**-23)
    assert np.float32(float(a) * float(a) + 2.0**-70) == np.float32(1 + 2.0**-11)    # plain f64 gets it wrong
    x = np.array([1 + 2.0**-23, -3.5, 1e-30], np.float32)
    y = np.array([1 - 2.0**-24, 2.0**-20, 1e-10], np.float32)
    z = np.array([-1.0, 7.0, -1e-40], np.float32)
    want = [np.float32(float(a) * float(b) + float(c)) for a, b, c in zip(x, y, z)]   # exact in f64 here
    assert X.fma32(x, y, z).tolist() == want


def test_normal_without_fma_differs_in_f32_only():
    k = R.fold_in(R.key(3), 1)
    with_fma, without = R.normal(k, (4000,), "f32"), R.normal(k, (4000,), "f32", fma=False)
    assert 0 < np.count_nonzero(with_fma != without) < 400
    for dtype in ("f16", "bf16"):
        assert np.array_equal(_bits(R.normal(k, (4000,), dtype), dtype),
                              _bits(R.normal(k, (4000,), dtype, fma=False), dtype))


def test_bf16_normals_take_few_values():
    draw = R.normal(R.key(1), (20000,), "bf16")
    assert len(np.unique(draw)) <= 128 and draw.dtype == np.float32
    assert np.array_equal(draw, X.round_bf16(draw))


def test_package_never_imports_jax():
    code = ("import sys\n"
            "import esverify.references.hyperscale_es as p\n"
            "from esverify.references.hyperscale_es import jaxrandom, shaping, xlamath\n"
            "jaxrandom.normal(jaxrandom.key(1), (3,), 'bf16'); shaping.convert_fitnesses([1, 2])\n"
            "bad = sorted(m for m in sys.modules if m == 'jax' or m.startswith(('jax.', 'jaxlib')))\n"
            "assert not bad, bad\n")
    subprocess.run([sys.executable, "-c", code], check=True)


# ----------------------------------------------------------------------------- against the JAX library

def _jax():
    jax = pytest.importorskip("jax", reason="the JAX library is not installed (pip install jax jaxlib)")
    return jax


_JDT = {"f32": "float32", "f16": "float16", "bf16": "bfloat16"}


def _jax_bits(x, dtype: str) -> np.ndarray:
    import ml_dtypes  # noqa: F401  (jax's own dependency: the bfloat16 numpy dtype)
    a = np.asarray(x)
    return a.view(np.uint32 if dtype == "f32" else np.uint16)


@given(seed=st.integers(-2**31, 2**31 - 1), path=st.lists(st.integers(0, 2**32 - 1), max_size=3),
       shape=st.lists(st.integers(1, 40), min_size=1, max_size=2), dtype=st.sampled_from(sorted(_JDT)),
       partitionable=st.booleans())
def test_normal_equals_jax(seed, path, shape, dtype, partitionable):
    jax = _jax()
    import jax.numpy as jnp
    with jax.threefry_partitionable(partitionable):
        jk = jax.random.PRNGKey(seed)
        k = R.key(seed)
        for d in path:
            jk, k = jax.random.fold_in(jk, d), R.fold_in(k, d)
        assert np.asarray(jk).tolist() == k.tolist()
        want = _jax_bits(jax.random.normal(jk, tuple(shape), dtype=getattr(jnp, _JDT[dtype])), dtype)
        got = _bits(R.normal(k, tuple(shape), dtype, partitionable=partitionable), dtype)
        assert np.array_equal(got, want.reshape(got.shape))
        n = int(np.prod(shape)) % 7 + 1
        assert np.asarray(jax.random.split(jk, n)).tolist() == R.split(k, n, partitionable).tolist()


def test_normal_equals_jax_on_a_large_draw():
    """One (333, 1001) draw per dtype: about 1 in 24 f32 values need the fused multiply-adds."""
    jax = _jax()
    import jax.numpy as jnp
    jk = jax.random.fold_in(jax.random.fold_in(jax.random.PRNGKey(3), 1), 4)
    k = R.fold_in(R.fold_in(R.key(3), 1), 4)
    for dtype in sorted(_JDT):
        want = _jax_bits(jax.random.normal(jk, (333, 1001), dtype=getattr(jnp, _JDT[dtype])), dtype)
        assert np.array_equal(_bits(R.normal(k, (333, 1001), dtype), dtype), want)


@given(scores=st.lists(st.floats(-1e4, 1e4, width=32), min_size=1, max_size=1024), group=st.integers(0, 32))
@example(scores=[0.0, 1.2988439284041724e-39], group=0)       # a subnormal score is read as zero (DAZ)
@example(scores=[1e-39, -1e-39, 3.0, 3.0], group=2)
@example(scores=[1.2e-38, 1.18e-38], group=0)                  # normal scores, a subnormal centred value (FTZ)
@example(scores=[1.2e-38, 1.18e-38] * 50, group=0)             # the same in 32-value windows
@example(scores=[1e-39, 5e-39, 1.2e-38, 1.18e-38] * 25, group=4)
@example(scores=[1.2e-38, 1.18e-38] * 512, group=32)
def test_convert_fitnesses_equals_jax_formula(scores, group):
    """The shaping formula, eager in jax, against our arithmetic model (both written from the docs), subnormal
    scores and steps included (XLA CPU flushes them: hypothesis found the first example)."""
    jax = _jax()
    import jax.numpy as jnp
    n = len(scores)
    if group and n % group:
        group = 0
    s = jnp.asarray(np.array(scores, np.float32))
    den = jnp.sqrt(jnp.var(s) + 1e-5)
    if group == 0:
        want = (s - jnp.mean(s)) / den
    else:
        rows = s.reshape(-1, group)
        want = ((rows - jnp.mean(rows, axis=1, keepdims=True)) / den).ravel()
    got = S.convert_fitnesses(scores, group)
    assert np.array_equal(got.view(np.uint32), np.asarray(want).view(np.uint32))


def _same_or_both_nan(a, b) -> bool:
    a, b = np.asarray(a, np.float32), np.asarray(b, np.float32)
    nan = np.isnan(a)
    return bool(np.array_equal(nan, np.isnan(b)) and np.array_equal(a[~nan].view(np.uint32), b[~nan].view(np.uint32)))


def test_log_log1p_erf_inv_equal_jax():
    """XLA CPU's own functions on 300k inputs: log over the whole range (subnormals read as zero), log1p on
    both branches, erf_inv on [-1, 1]; NaN payloads are not compared (not modelled)."""
    jax = _jax()
    import jax.numpy as jnp
    rng = np.random.default_rng([56, 3])
    edges = np.array([0, -0.0, np.inf, -1, -2, np.nan, 1e-45, -7e-40, 3e38, 1e-30, -0.4142135, 0.4142136],
                     np.float32)
    x = np.concatenate([rng.uniform(-1, 1, 100000), rng.uniform(-1, 1, 20000) ** 9,
                        np.exp(rng.uniform(-100, 88, 50000)), edges]).astype(np.float32)
    with np.errstate(all="ignore"):
        assert _same_or_both_nan(X.log32(x), jnp.log(x))
        assert _same_or_both_nan(X.log1p32(x), jnp.log1p(x))
    u = np.concatenate([rng.uniform(-1, 1, 100000), [1, -1, 0, -0.0, 0.99999994, -1e-40]]).astype(np.float32)
    assert _same_or_both_nan(X.erf_inv32(u), jax.lax.erf_inv(u))


def test_golden_area_recomputes_its_own_vectors_and_pins_g1_g2():
    from esverify.references.hyperscale_es import golden_area as A
    vectors = {v["id"]: v for v in A.generate()}
    for v in vectors.values():
        assert A.check_sizes(v) == [], v["id"]
        assert A.recompute(v, "numpy") == v["expected"], v["id"]
    b0, a0, _ = G1["bf16"]
    g1 = vectors["eggroll-g1-bf16"]["expected"]
    assert [h[2:] for h in g1["b"]["values"][:2]] == list(b0) and [h[2:] for h in g1["a"]["values"][:2]] == list(a0)
    assert " ".join(h[2:] for h in vectors["shaping-g2-group4"]["expected"]["shaped"]["values"]) == G2[4]
    with pytest.raises(ValueError, match="unknown"):
        A.recompute(vectors["eggroll-g1-f32"], "torch")
    broken = dict(vectors["keys-seed0"], expected={"key": vectors["keys-seed0"]["expected"]["key"]})
    assert A.check_sizes(broken) == ["split has None values, want 6"]


# ----------------------------------------------------------------------------- the update (f32)

G3_F32 = ("39c26dab 3c836212 3cf8a8d0 3d3f2b5e 3d8206f7", "8a61d973369a9e46")


@pytest.mark.parametrize("mode", ["jit", "eager"])
def test_g3_one_eggroll_update_f32(mode):
    from esverify.references.hyperscale_es import noise as N
    from esverify.references.hyperscale_es import update as U
    w = (np.arange(40, dtype=np.float32) / np.float32(64)).reshape(8, 5)
    shaped = S.convert_fitnesses(np.arange(8), 0)
    w2 = U.eggroll_update(w, shaped, N.leaf_key(R.key(11), 0), 3, 0.05, 0.1, 2, noise_reuse=1, mode=mode)
    assert " ".join(_hex(w2[0].view(np.uint32))) == G3_F32[0]
    assert hashlib.sha256(w2.tobytes()).hexdigest()[:16] == G3_F32[1]
    # the measured 4-accumulator order matters here: a sequential dot gives other bits
    draws = [R.normal(N.thread_key(N.leaf_key(R.key(11), 0), 3, t, 1), (13, 2)) for t in range(8)]
    seq = U.update_from_draws(w, shaped, draws, 0.05, 0.1, 2, mode, order="seq")
    assert hashlib.sha256(seq.tobytes()).hexdigest()[:16] != G3_F32[1]


def test_dot_order_table_and_exact_sums():
    from esverify.references.hyperscale_es import update as U
    assert [U.dot_order(*s) for s in ((1, 300, 9), (8, 16, 5), (64, 16, 17), (64, 16, 32), (40, 128, 24),
                                      (8, 24, 5))] == ["seq", "acc4", "acc4", "acc2", "seq", None]
    rng = np.random.default_rng([56, 6])
    xk, bk = rng.integers(-8, 9, (3, 24)) / 8, rng.integers(-8, 9, (7, 24)) / 4
    assert U.sums_exact(xk, bk)
    got = {U.contract(xk.astype(np.float32), bk.astype(np.float32), o).tobytes() for o in U.ORDERS}
    assert len(got) == 1 and np.array_equal(U.contract(xk.astype(np.float32), bk.astype(np.float32), "seq"),
                                            (xk @ bk.T).astype(np.float32))
    assert not U.sums_exact(np.array([[1, 2.0**-30]]), np.array([[1, 1]]))
    with pytest.raises(ValueError, match="not modelled and the sums are not exact"):
        U.update_from_draws(np.zeros((3, 7), np.float32), np.ones(6, np.float32),
                            [rng.standard_normal((10, 4)).astype(np.float32) for _ in range(6)], 0.1, 0.1, 4)
    with pytest.raises(ValueError, match="want 6 draws"):
        U.update_from_draws(np.zeros((3, 7), np.float32), np.ones(6, np.float32), [], 0.1, 0.1, 4)


def test_jit_fuses_the_step_and_eager_rounds_it():
    """W2 = fma(g, lr, W) under jit, W + rd(g*lr) eager: equal for most elements, not all."""
    from esverify.references.hyperscale_es import update as U
    rng = np.random.default_rng([56, 4])
    differ = 0
    for _ in range(10):
        w = rng.standard_normal((8, 5)).astype(np.float32)
        f = S.convert_fitnesses(rng.standard_normal(8).astype(np.float32))
        draws = [rng.standard_normal((13, 2)).astype(np.float32) for _ in range(8)]
        jit, eager = (U.update_from_draws(w, f, draws, 0.05, 0.1, 2, m) for m in ("jit", "eager"))
        differ += int(np.count_nonzero(jit != eager))
        assert np.count_nonzero(jit != eager) <= 2
    assert differ > 0


@pytest.mark.parametrize("n", [33, 64, 100, 333, 1000, 1024])
def test_long_shaping_equals_jax_formula(n):
    """Beyond 32 scores: 32-value windows (floor(padding/2) zeros in front), rounded squares in the variance."""
    jax = _jax()
    import jax.numpy as jnp
    rng = np.random.default_rng([56, 8, n])
    for group in (0, 4, 32):
        if group and n % group:
            continue
        s = (rng.standard_normal(n) * 100).astype(np.float32)
        x = jnp.asarray(s)
        den = jnp.sqrt(jnp.var(x) + 1e-5)
        want = ((x - jnp.mean(x)) / den if group == 0 else
                ((x.reshape(-1, group) - jnp.mean(x.reshape(-1, group), axis=1, keepdims=True)) / den).ravel())
        assert np.array_equal(S.convert_fitnesses(s, group).view(np.uint32), np.asarray(want).view(np.uint32))
    assert jax is not None


G3_LOW = {"bf16": ("3a40 3c5b 3cf9 3d38 3d84", "447d670ea984ca1b", 15),
          "f16": ("9243 240e 27f6 2a20 2bda", "afbd53b0c27f70bd", 1)}


@pytest.mark.parametrize("mode", ["jit", "eager"])
@pytest.mark.parametrize("dtype", sorted(G3_LOW))
def test_g3_one_eggroll_update_low_precision(dtype, mode):
    from esverify.references.hyperscale_es import noise as N
    from esverify.references.hyperscale_es import update as U
    w = np.asarray(R.round_to((np.arange(40, dtype=np.float32) / np.float32(64)).reshape(8, 5), dtype), np.float32)
    w2 = U.eggroll_update(w, S.convert_fitnesses(np.arange(8)), N.leaf_key(R.key(11), 0), 3, 0.05, 0.1, 2,
                          noise_reuse=1, mode=mode, dtype=dtype)
    bits = N.bits_of(w2, dtype)
    row, digest, unchanged = G3_LOW[dtype]
    assert " ".join(_hex(bits[0])) == row
    assert hashlib.sha256(bits.tobytes()).hexdigest()[:16] == digest
    assert np.count_nonzero(np.asarray(w2, np.float32) == w) == unchanged
