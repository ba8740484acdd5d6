"""adamw and tree updates of HyperscaleES's noisers: our numpy model (optim.py, tree.py) against optax and the
stand-in's do_updates, bit for bit (docs/hyperscale.md §8).

optax's own steps run in this process (the JAX library, Apache-2.0; skipped without it); the stand-in's
do_updates runs in the jax child (tests/test_hyperscale_child.py's interpreter), as do its mutants.
"""
from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from esverify.references.hyperscale_es import jaxrandom as R
from esverify.references.hyperscale_es import noise as N
from esverify.references.hyperscale_es import optim as O
from esverify.references.hyperscale_es import shaping as S
from esverify.references.hyperscale_es import tree as T
from test_hyperscale_child import STANDIN, drive_all, mutant_clone

F32 = np.float32
_NOISER = "src/hyperscalees/noiser/"
_COMMON = "src/hyperscalees/models/common.py"
#: name -> (shape, es_map code, scanned); flatten order = sorted names
TREE = {"bias": ((5,), T.PARAM, False), "frozen": ((3,), T.EXCLUDED, False), "w": ((8, 5), T.MM_PARAM, False),
        "w_layers": ((3, 8, 5), T.MM_PARAM, True)}


def _u32(x) -> np.ndarray:
    return np.ascontiguousarray(x, F32).view(np.uint32)


def _hex(a) -> list:
    return [f"0x{int(v):08x}" for v in _u32(a).ravel()]


def _from_hex(h) -> np.ndarray:
    return np.array([int(v, 16) for v in h], np.uint32)


# --- adamw and sgd against optax, in this process ---------------------------------------------------------

def _optax():
    jax = pytest.importorskip("jax", reason="the JAX library is not installed")
    optax = pytest.importorskip("optax", reason="optax is not installed")
    return jax, optax


def _grads(rng, shapes) -> dict:
    """Gradients spanning nine decades, some leaves zero (an excluded leaf's)."""
    out = {}
    for k, s in shapes.items():
        g = rng.normal(size=s) * 10.0 ** rng.integers(-6, 3, size=s)
        out[k] = (g * (rng.random() > 0.2)).astype(F32)
    return out


@pytest.mark.parametrize("mode", ["jit", "eager"])
@pytest.mark.parametrize("shapes", [{"a": (40, 9)}, {"a": (16, 9), "b": (7,)}, {"a": (6, 5), "b": (7,), "c": (2, 3, 4)}],
                         ids=["one-leaf", "two-leaves", "three-leaves"])
def test_adamw_equals_optax_bit_for_bit(shapes, mode):
    """Twelve steps from a random count (up to 600) and random moments, three learning rates: every parameter
    and both moments of every leaf equal optax's, jitted and eager (no step compared by tolerance)."""
    jax, optax = _optax()
    jnp = jax.numpy
    compared = 0
    for lr in (0.01, 0.03, 0.1737):
        tx = optax.adamw(lr)

        def step(g, st, p, tx=tx):
            u, st2 = tx.update(g, st, p)
            return optax.apply_updates(p, u), st2

        run = jax.jit(step) if mode == "jit" else step
        rng = np.random.default_rng(int(lr * 1e4) + len(shapes))
        p = {k: rng.normal(size=s).astype(F32) for k, s in shapes.items()}
        count = int(rng.integers(0, 600))
        ours = {k: O.AdamState(count, (rng.normal(size=s) * 0.1).astype(F32),
                               (np.abs(rng.normal(size=s)) * 0.01).astype(F32)) for k, s in shapes.items()}
        st = tx.init(jax.tree.map(jnp.asarray, p))
        st = (st[0]._replace(count=jnp.int32(count), mu={k: jnp.asarray(v.mu) for k, v in ours.items()},
                             nu={k: jnp.asarray(v.nu) for k, v in ours.items()}),) + tuple(st[1:])
        theirs = jax.tree.map(jnp.asarray, p)
        for _ in range(12):
            g = _grads(rng, shapes)
            theirs, st = run(jax.tree.map(jnp.asarray, g), st, theirs)
            for k in shapes:
                p[k], ours[k] = O.adamw_step(p[k], g[k], ours[k], lr, mode, leaves=len(shapes))
                assert _u32(theirs[k]).tolist() == _u32(p[k]).tolist(), (lr, k)
                assert _u32(st[0].mu[k]).tolist() == _u32(ours[k].mu).tolist(), (lr, k)
                assert _u32(st[0].nu[k]).tolist() == _u32(ours[k].nu).tolist(), (lr, k)
                compared += 3 * p[k].size
    assert compared >= 3 * 12 * 3 * sum(int(np.prod(s)) for s in shapes.values())


def test_adamw_model_fails_where_xla_rewrites_differently():
    """The measured rewrites matter: with the one-leaf division on a two-leaf tree, or the other fused product
    in the moments, our model differs from optax in some elements (the test above is not vacuous)."""
    jax, optax = _optax()
    jnp = jax.numpy
    tx = optax.adamw(0.03)
    rng = np.random.default_rng(3)
    p = {"a": rng.normal(size=(16, 9)).astype(F32), "b": rng.normal(size=(7,)).astype(F32)}
    g = _grads(rng, {"a": (16, 9), "b": (7,)})
    g["a"] = (rng.normal(size=(16, 9)) * 10.0 ** rng.integers(-6, 3, size=(16, 9))).astype(F32)
    st = tx.init(jax.tree.map(jnp.asarray, p))
    u, _ = tx.update(jax.tree.map(jnp.asarray, g), st, jax.tree.map(jnp.asarray, p))
    eager = np.asarray(optax.apply_updates(jnp.asarray(p["a"]), u["a"]))
    right = O.adamw_step(p["a"], g["a"], O.adam_init(p["a"]), 0.03, "eager", leaves=2)[0]
    wrong = O.adamw_step(p["a"], g["a"], O.adam_init(p["a"]), 0.03, "eager", leaves=1)[0]
    assert _u32(eager).tolist() == _u32(right).tolist()
    assert np.sum(_u32(eager) != _u32(wrong)) > 0
    state = O.AdamState(4, (rng.normal(size=(16, 9)) * 0.1).astype(F32),
                        np.abs(rng.normal(size=(16, 9)) * .01).astype(F32))
    fused = O.adamw_step(p["a"], g["a"], state, 0.03, "jit", leaves=2, grad_fused=True)[1].mu
    alone = O.adamw_step(p["a"], g["a"], state, 0.03, "jit", leaves=2, grad_fused=False)[1].mu
    assert np.sum(_u32(fused) != _u32(alone)) > 0


def test_bias_correction_power_and_its_limit():
    """XLA's f32 power of 0.9 and 0.999 by the step count equals the correctly rounded power for counts
    1..684 (jitted and vectorised, as optax's step computes it); beyond, a ValueError, not a guess."""
    jax, _ = _optax()
    jnp = jax.numpy
    counts = np.arange(1, O.MAX_COUNT + 1)
    for b in (O.B1, O.B2):
        got = np.asarray(jax.jit(lambda c, b=b: b ** c)(jnp.asarray(counts, jnp.int32)))
        assert _u32(got).tolist() == [int(np.asarray(O.power32(b, int(c))).view(np.uint32)) for c in counts]
    with pytest.raises(ValueError, match="1..684"):
        O.power32(O.B1, O.MAX_COUNT + 1)
    with pytest.raises(ValueError, match="count 685"):
        O.adamw_step(np.ones(2, F32), np.ones(2, F32), O.AdamState(684, np.zeros(2, F32), np.zeros(2, F32)), 0.1)


@pytest.mark.parametrize("mode", ["jit", "eager"])
def test_sgd_step_equals_optax(mode):
    jax, optax = _optax()
    jnp = jax.numpy
    tx = optax.sgd(0.0731)
    rng = np.random.default_rng(7)
    p = rng.normal(size=(33, 17)).astype(F32)
    g = (rng.normal(size=(33, 17)) * 10.0 ** rng.integers(-6, 3, size=(33, 17))).astype(F32)

    def step(g, st, p):
        u, _ = tx.update(g, st, p)
        return optax.apply_updates(p, u)

    theirs = (jax.jit(step) if mode == "jit" else step)(jnp.asarray(g), tx.init(jnp.asarray(p)), jnp.asarray(p))
    assert _u32(theirs).tolist() == _u32(O.sgd_step(p, g, 0.0731, mode)).tolist()


def test_bad_input_is_a_clear_error():
    w = np.ones((8, 5), F32)
    with pytest.raises(ValueError, match="mode"):
        O.sgd_step(w, w, 0.1, "lazy")
    with pytest.raises(ValueError, match="solver"):
        T.tree_update({"w": w}, {"w": T.EXCLUDED}, np.zeros(4, F32), {"w": None}, 0.1, 0.1, 1, solver="adam")
    with pytest.raises(ValueError, match="es_map code"):
        T.gradients({"w": w}, {"w": 7}, np.zeros(4, F32), {"w": None}, 0.1, 1)
    with pytest.raises(ValueError, match="draw has shape"):
        T.gradients({"w": w}, {"w": T.MM_PARAM}, np.zeros(2, F32), {"w": [np.zeros((13, 2), F32)] * 2}, 0.1, 1)
    keys = T.leaf_keys(R.key(1), {"b": np.ones(3, F32)})
    draws = T.native_draws({"b": np.ones(3, F32)}, {"b": T.PARAM}, keys, 0, 10, 1, 1)
    with pytest.raises(ValueError, match="modelled for"):
        T.gradients({"b": np.ones(3, F32)}, {"b": T.PARAM}, np.ones(10, F32), draws, 0.1, 1, "jit")
    one = {"b": np.ones(1, F32)}
    draws = T.native_draws(one, {"b": T.PARAM}, T.leaf_keys(R.key(1), one), 0, 4, 1, 1)
    with pytest.raises(ValueError, match="one-element PARAM"):
        T.gradients(one, {"b": T.PARAM}, np.ones(4, F32), draws, 0.1, 1, "jit")
    with pytest.raises(ValueError, match="one-element leaf"):
        T.tree_update(one, {"b": T.EXCLUDED}, np.ones(4, F32), {"b": None}, 0.1, 0.1, 1, "jit", "adamw")


def test_leaf_keys_follow_sorted_names_and_fold_in_per_slice():
    params = {"z": np.ones((2, 3), F32), "a": np.ones(4, F32), "m": {"y": np.ones(2, F32), "b": np.ones(1, F32)}}
    assert [p for p, _ in T.flatten(params)] == ["a", "m/b", "m/y", "z"]
    keys = T.leaf_keys(R.key(9), params, {"z": (0,), "a": (), "m": {"y": (), "b": ()}})
    assert keys["m/y"].tolist() == R.fold_in(R.key(9), 2).tolist()
    assert keys["z"].tolist() == [R.fold_in(R.fold_in(R.key(9), 3), i).tolist() for i in range(2)]
    assert keys["z"].tolist() == R.split(R.fold_in(R.key(9), 3), 2).tolist()


def test_the_tree_modules_never_import_jax():
    code = ("import sys\nfrom esverify.references.hyperscale_es import optim, tree, rows_tree\n"
            "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('jax', 'jaxlib', 'optax'))\n"
            "assert not bad, bad\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]


# --- the stand-in's do_updates in the jax child ------------------------------------------------------------

def _case(seed=5, n=4, rank=4, steps=2):
    rng = np.random.default_rng(seed)
    params = {k: rng.uniform(-1, 1, s).astype(F32) for k, (s, _, _) in TREE.items()}
    scores = [rng.normal(size=n).astype(F32) for _ in range(steps)]
    return params, scores, 0.0687, 0.13, rank


def _op(params, scores, sigma, lr, rank, mode, solver, seed=5, served=None) -> dict:
    return {"op": "update-tree", "noiser": "eggroll", "seed": seed, "epoch": 3, "noise_reuse": 1, "rank": rank,
            "sigma": sigma, "lr": lr, "group": 0, "mode": mode, "solver": solver,
            "leaves": {k: {"shape": list(s), "w": _hex(params[k]), "code": c, "scan": sc}
                       for k, (s, c, sc) in TREE.items()},
            "scores": [_hex(s) for s in scores], **({"served": served} if served else {})}


COMBOS = [(s, m) for s in ("sgd", "adamw") for m in ("jit", "eager")]
#: the (n, rank) of the tests on JAX's own noise
JAX_NOISE = [(4, 4), (8, 2)]


@pytest.fixture(scope="module")
def shared(tmp_path_factory) -> dict:
    """Every test's do_updates on the stand-in, then each mutant's clone, through ONE child
    (tests/test_hyperscale_child.py's `drive_all`): {request name: results}."""
    requests = {}
    for n, rank in JAX_NOISE:
        params, scores, sigma, lr, rank = _case(n=n, rank=rank)
        requests[f"jax {n} {rank}"] = (STANDIN, [_op(params, scores, sigma, lr, rank, m, s) for s, m in COMBOS])
    requests["served"] = (STANDIN, _served_ops()[0])
    folder = tmp_path_factory.mktemp("tree-mutants")
    params, scores, sigma, lr, rank = _case()
    for name, (rel, text, replacement, _) in sorted(TREE_MUTANTS.items()):
        requests[name] = (mutant_clone(folder / name, rel, text, replacement),
                          [_op(params, scores, sigma, lr, rank, "jit", s) for s in ("sgd", "adamw")])
    return drive_all(requests)[1]


def _scan_map():
    return {k: (0,) if sc else () for k, (_, _, sc) in TREE.items()}


def _model(params, scores, sigma, lr, rank, mode, solver, draws_of):
    es_map = {k: c for k, (_, c, _) in TREE.items()}
    p, st = dict(params), None
    for i, raw in enumerate(scores):
        p, st = T.tree_update(p, es_map, S.convert_fitnesses(raw), draws_of(i), sigma, lr, rank, mode, solver, st)
    return p, st


def _native(params, rank, n, seed=5):
    keys = T.leaf_keys(R.key(seed), params, _scan_map())
    es_map = {k: c for k, (_, c, _) in TREE.items()}
    return lambda i: T.native_draws(params, es_map, keys, 3 + i, n, rank, 1)


def _assert_equal(got, ours, state):
    for k in TREE:
        assert _from_hex(got["w"][k]).tolist() == _u32(ours[k]).ravel().tolist(), k
        if state is not None:
            assert _from_hex(got["mu"][k]).tolist() == _u32(state[k].mu).ravel().tolist(), k
            assert _from_hex(got["nu"][k]).tolist() == _u32(state[k].nu).ravel().tolist(), k


@pytest.mark.slow
@pytest.mark.parametrize("n,rank", JAX_NOISE)
def test_tree_updates_on_jax_noise_equal_the_stand_in(n, rank, shared):
    """sgd and adamw, jitted and eager, two steps of a tree with a matrix, a bias, an EXCLUDED and a scanned
    leaf on JAX's own noise: every leaf, both moments and the leaf keys are our model's bits (at 4 threads
    the jitted bias sums sequentially, at 8 in eight lanes); adamw moves the EXCLUDED leaf (weight decay),
    sgd does not."""
    params, scores, sigma, lr, rank = _case(n=n, rank=rank)
    keys = T.leaf_keys(R.key(5), params, _scan_map())
    for (solver, mode), got in zip(COMBOS, shared[f"jax {n} {rank}"]):
        assert got["keys"] == {k: v.tolist() for k, v in keys.items()}
        ours, state = _model(params, scores, sigma, lr, rank, mode, solver, _native(params, rank, n))
        _assert_equal(got, ours, state)
        moved = _from_hex(got["w"]["frozen"]) != _u32(params["frozen"])
        assert moved.all() if solver == "adamw" else not moved.any()


def _served_ops():
    """The ops of the served-noise test and the draws per step our model takes."""
    params, scores, sigma, lr, rank = _case(seed=11, n=8, rank=2)
    rng = np.random.default_rng(0)
    keys = T.leaf_keys(R.key(5), params, _scan_map())
    served, per_step = [], []
    for i in range(len(scores)):
        step = {}
        for k, (shape, code, scanned) in TREE.items():
            if code == T.EXCLUDED:
                step[k] = None
                continue

            def draws(key, leaf_shape, code=code):
                pairs = []
                for p in range(4):
                    d = rng.normal(size=(leaf_shape[0] + leaf_shape[1], rank) if code == T.MM_PARAM
                                   else leaf_shape).astype(F32)
                    served.append({"key": N.thread_key(key, 3 + i, 2 * p, 1).tolist(), "shape": list(d.shape),
                                   "dtype": "f32", "bits": _hex(d)})
                    pairs.append(d)
                return [pairs[t // 2] for t in range(8)]

            step[k] = [draws(kk, shape[1:]) for kk in keys[k]] if scanned else draws(keys[k], shape)
        per_step.append(step)
    return [_op(params, scores, sigma, lr, rank, m, s, served=served) for s, m in COMBOS], per_step


@pytest.mark.slow
def test_tree_updates_on_served_noise_equal_the_stand_in(shared):
    """The same tree at N 8 on noise the runner serves by key (the host callback): the jitted bias reduction is
    then sequential too (the draw is opaque to XLA)."""
    params, scores, sigma, lr, rank = _case(seed=11, n=8, rank=2)
    _, per_step = _served_ops()
    for (solver, mode), got in zip(COMBOS, shared["served"]):
        ours, state = _model(params, scores, sigma, lr, rank, mode, solver, lambda i: per_step[i])
        _assert_equal(got, ours, state)


# --- mutants of the stand-in: each fault fails, equivalent edits pass ----------------------------------------

TREE_MUTANTS = {
    # a leaf whose gradient is zero keeps its value (the step is taken, then discarded: the fused step stays)
    "decay-skips-excluded": (_NOISER + "base_noiser.py",
                             '    return {**dyn, "opt_state": opt_state}, optax.apply_updates(params, updates)\n',
                             '    new = optax.apply_updates(params, updates)\n'
                             '    return {**dyn, "opt_state": opt_state}, jax.tree_util.tree_map(\n'
                             '        lambda p, q, g: jnp.where(jnp.any(g != 0), q, p), params, new, grads)\n',
                             {"adamw"}),
    "slice-keys-not-folded": (_COMMON, "jax.random.split(key, leaf.shape[0])",
                              "jax.numpy.stack([key] * leaf.shape[0])", {"sgd", "adamw"}),
    "leaf-keys-unsorted": (_COMMON, "keys = jax.random.split(base_key, len(leaves))",
                           "keys = jax.random.split(base_key, len(leaves))[::-1]", {"sgd", "adamw"}),
    "equivalent-split-as-fold-in": (_COMMON, "jax.random.split(key, leaf.shape[0])",
                                    "jax.numpy.stack([jax.random.fold_in(key, i) for i in range(leaf.shape[0])])",
                                    set()),
    "equivalent-stack-comment": (_NOISER + "base_noiser.py", "            return jnp.stack(",
                                 "            # one slice at a time, as separate 2-D leaves\n"
                                 "            return jnp.stack(", set()),
}


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(TREE_MUTANTS))
def test_a_tree_mutant_of_each_kind_fails_and_equivalent_edits_pass(name, shared):
    """Each mutant's clone runs after the stand-in's requests in the shared child (`shared`)."""
    caught = TREE_MUTANTS[name][3]
    params, scores, sigma, lr, rank = _case()
    for solver, got in zip(("sgd", "adamw"), shared[name]):
        ours, _ = _model(params, scores, sigma, lr, rank, "jit", solver, _native(params, rank, 4))
        differs = any(_from_hex(got["w"][k]).tolist() != _u32(ours[k]).ravel().tolist() for k in TREE)
        assert differs == (solver in caught), (name, solver)
