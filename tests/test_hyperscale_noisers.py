"""The sparse, AltEggRoll and EggRollBS noisers: our numpy model (.noisers), the child's ops on the stand-in,
its mutants, and parity's rows (docs/hyperscale.md §14).

The model tests need no jax. The child tests run the driver under an interpreter with jax, jaxlib and
optax (tests/test_hyperscale_child.py's `_python`), and are skipped without one.
"""
from __future__ import annotations

import os

import numpy as np
import pytest

from esverify.references.hyperscale_es import jaxrandom as R
from esverify.references.hyperscale_es import noise as N
from esverify.references.hyperscale_es import noiser_ops
from esverify.references.hyperscale_es import noisers as M
from esverify.references.hyperscale_es import shaping as S

F32 = np.float32


# ----------------------------------------------------------------------------- the model alone

def test_sparse_positions_are_floor_of_the_uniform_times_a_times_b_row_major():
    k1 = R.key(5)
    u = R.uniform(k1, (8,))
    rows, cols = M.sparse_positions(k1, (8, 5))
    pos = np.floor(u.astype(np.float64) * 40)          # u*8 and then *5 are exact here (u has 24 bits)
    assert rows.dtype == np.int32 and rows.shape == (8,)
    assert (rows * 5 + cols).tolist() == pos.astype(int).tolist()
    assert rows.max() < 8 and cols.max() < 5
    with pytest.raises(ValueError, match="2-D shape"):
        M.sparse_positions(k1, (8,))


def test_sparse_keys_are_fold_ins_of_the_pair_key():
    k = R.key(9)
    k1, k2 = M.sparse_keys(k)
    assert k1.tolist() == R.fold_in(k, 0).tolist() and k2.tolist() == R.fold_in(k, 1).tolist()


def test_sparse_forward_adds_a_repeated_position_twice_in_index_order():
    w = np.zeros((2, 2), F32)
    out = M.sparse_perturbed(w, np.array([1, 1, 0]), np.array([0, 0, 1]), np.array([0.5, 0.25, -1.0], F32))
    assert out.tolist() == [[0.0, -1.0], [0.75, 0.0]]
    # bf16: 1 + 2**-9 + 2**-9 rounds after each add (1 stays), the sum of both first would not
    one = np.ones((1, 1), F32)
    tiny = np.array([2.0**-9, 2.0**-9], F32)
    assert M.sparse_perturbed(one, np.array([0, 0]), np.array([0, 0]), tiny, "bf16").item() == 1.0


def test_sparse_update_jit_and_eager_on_exact_inputs():
    """One entry per thread, values and fitnesses powers of two: every product exact; g = mean * k/(a*b)."""
    w = np.zeros((2, 2), F32)
    entries = [(np.array([0, 1]), np.array([0, 1]), np.array([1.0, 0.0], F32)),
               (np.array([0, 1]), np.array([0, 1]), np.array([-1.0, 0.0], F32)),
               (np.array([1, 0]), np.array([0, 1]), np.array([2.0, 0.0], F32)),
               (np.array([1, 0]), np.array([0, 1]), np.array([-2.0, 0.0], F32))]
    f = np.array([1.0, -1.0, 0.5, -0.5], F32)
    for mode in ("jit", "eager"):
        out = M.sparse_update(w, f, entries, 0.5, mode)
        # total: (0,0) 1 + 1 = 2, (1,0) 1 + 1 = 2; g = total / 4 * (2/4) * sqrt(4) = total / 4; step lr g
        assert out.tolist() == [[0.25, 0.0], [0.25, 0.0]], mode
    with pytest.raises(ValueError, match="mode"):
        M.sparse_update(w, f, entries, 0.5, "fast")


def test_alteggroll_update_uses_signs_only():
    """Scaling a thread's draw by a positive factor changes nothing; flipping the sign of its A rows does."""
    rng = np.random.default_rng(3)
    w = rng.uniform(-1, 1, (8, 5)).astype(F32)
    f = S.convert_fitnesses(rng.normal(size=8).astype(F32))
    draws = [rng.normal(size=(13, 2)).astype(F32) for _ in range(8)]
    base = M.alteggroll_update_from_draws(w, f, draws, 0.05, 0.1, 2, "jit")
    scaled = [d * F32(4) for d in draws]
    assert base.view(np.uint32).tolist() == M.alteggroll_update_from_draws(w, f, scaled, 0.05, 0.1, 2,
                                                                           "jit").view(np.uint32).tolist()
    flipped = [np.concatenate([d[:5], -d[5:]]) for d in draws]
    assert not np.array_equal(base, M.alteggroll_update_from_draws(w, f, flipped, 0.05, 0.1, 2, "jit"))


def test_eggrollbs_masks_and_shaping():
    assert [M.bs_live(t, 4) for t in range(8)] == [False, False, True, True] * 2
    assert not any(M.bs_live(t, 0) for t in range(8))              # jnp's modulo by 0 is 0: every thread
    a, b = M.eggrollbs_factors(N.leaf_key(R.key(1), 0), 3, 1, (8, 5), 1, 0.1, 4, noise_reuse=1)
    assert not a.any() and np.signbit(a).any() and b.any()          # an odd thread's zero is -0 where draw > 0
    out = M.eggrollbs_shaping(np.array([1, 2, 3, 5, 1, 1, 1, 1], F32), 4)
    assert out.shape == (4,) and out[:2].tolist() == [0.0, 0.0]    # G values, columns 0 and 1 zero
    assert out[2] == F32(F32(2) * (F32(1) / F32(np.sqrt(F32(2.1875)) + F32(1e-8)))) * F32(0.5)
    with pytest.raises(ZeroDivisionError):
        M.eggrollbs_shaping(np.ones(8, F32), 0)
    with pytest.raises(ValueError, match="group size"):
        M.eggrollbs_shaping(np.ones(8, F32), 3)


def test_the_op_tables_are_the_adapter_s():
    from esverify.references.hyperscale_es import adapter
    assert set(noiser_ops.OPS) <= set(adapter.OPS)
    assert {op.rsplit("-", 1)[0] for op in noiser_ops.UPDATE_OPS} == {"update-alteggroll", "update-sparse"}


# ----------------------------------------------------------------------------- the child on the stand-in

def _child():
    from test_hyperscale_child import STANDIN, _hex32, _u32, drive_all, mutant_clone
    return STANDIN, _hex32, _u32, drive_all, mutant_clone


W = (np.arange(40, dtype=F32) / F32(64) + F32(0.01)).reshape(8, 5)
SCORES = np.array([3, 1, 4, 1, 5, 9, 2, 6], F32)


def _ops(_hex32):
    base = {"seed": 3, "epoch": 5, "noise_reuse": 1, "shape": [8, 5], "w": _hex32(W), "sigma": 0.07}
    ops = [dict(base, op="forward", noiser="sparse", threads=[0, 1, 2, 3], one_d=True, dtype=dt,
                options={"noise_reuse": 1, "rank": 2}) for dt in ("f32", "bf16", "f16")]
    ops.append(dict(base, op="forward", noiser="eggrollbs", threads=list(range(8)), dtype="f32",
                    options={"group_size": 4, "noise_reuse": 1, "rank": 1}))
    ops.append(dict(base, op="probe", noiser="eggrollbs", dtype="f32", scores=_hex32(SCORES),
                    options={"group_size": 4, "noise_reuse": 1}))
    upd = dict(base, op="noiser-update", scores=_hex32(SCORES), lr=0.1, dtype="f32")
    for mode in ("jit", "eager"):
        ops.append(dict(upd, noiser="alteggroll", mode=mode, options={"noise_reuse": 1, "rank": 2}))
        ops.append(dict(upd, noiser="sparse", mode=mode, options={"noise_reuse": 1}))
    return ops


def _model():
    """Our side of `_ops`, in order, as uint bit lists."""
    out = []
    key = N.leaf_key(R.key(3), 0)
    for dt in ("f32", "bf16", "f16"):
        w = R.round_to(W, dt)
        out.append([N.bits_of(M.sparse_perturbed(w, *M.sparse_entries(key, 5, t, (8, 5), 0.07, dt, 1), dt),
                              dt).ravel().tolist() for t in range(4)])
    bs = []
    for t in range(8):
        a, b = M.eggrollbs_factors(key, 5, t, (8, 5), 1, float(F32(0.07)), 4, "f32", 1)
        bs.append((W + (b * a.T).T.astype(F32)).astype(F32).view(np.uint32).ravel().tolist())
    out.append(bs)
    out.append(M.eggrollbs_shaping(SCORES, 4).view(np.uint32).tolist())
    shaped = S.convert_fitnesses(SCORES)
    for mode in ("jit", "eager"):
        draws = [R.normal(N.thread_key(key, 5, t, 1), (13, 2)) for t in range(8)]
        alt = M.alteggroll_update_from_draws(W, shaped, draws, 0.07, 0.1, 2, mode)
        out.append(alt.view(np.uint32).ravel().tolist())
        entries = [M.sparse_entries(key, 5, t, (8, 5), 0.07, "f32", 1) for t in range(8)]
        out.append(M.sparse_update(W, shaped, entries, 0.1, mode).view(np.uint32).ravel().tolist())
    return out


def _theirs(results, _u32):
    got = []
    for res in results:
        if res["op"] == "forward":
            got.append([_u32(p).tolist() for p in res["perturbed"]])
        elif res["op"] == "probe":
            got.append(_u32(res["shaping"].get("value", [])).tolist())
        else:
            got.append(_u32(res["w"]).tolist())
    return got


def _defect_ops(_hex32):
    base = {"seed": 3, "epoch": 5, "noise_reuse": 1, "shape": [8, 5], "w": _hex32(W), "sigma": 0.07, "dtype": "f32"}
    return [dict(base, op="probe", noiser="sparse", batch=True, options={"noise_reuse": 1, "rank": 2}),
            dict(base, op="probe", noiser="eggrollbs", scores=_hex32(SCORES), int_epoch=True, options={}),
            dict(base, op="forward", noiser="eggrollbs", threads=[0, 1, 2, 3], options={})]


@pytest.fixture(scope="module")
def shared(tmp_path_factory):
    """The stand-in's ops, its defects' ops and every mutant's clone through ONE child (tests/test_hyperscale_child.py's
    `drive_all`): (environment, {request name: results})."""
    STANDIN, _hex32, _, drive_all, mutant_clone = _child()
    folder = tmp_path_factory.mktemp("noiser-mutants")
    requests = {"stand-in": (STANDIN, _ops(_hex32)), "defects": (STANDIN, _defect_ops(_hex32))}
    for name, (rel, text, replacement, _) in sorted(MUTANTS.items()):
        requests[name] = (mutant_clone(folder / name, rel, text, replacement), _ops(_hex32))
    return drive_all(requests)


@pytest.mark.slow
def test_the_new_noisers_through_the_child_equal_our_model(shared):
    _, _, _u32, _, _ = _child()
    env, results = shared
    if not env["cpu_fma"]:
        pytest.skip("the model is of a host with FMA")
    got, ours = _theirs(results["stand-in"], _u32), _model()
    names = ["sparse f32", "sparse bf16", "sparse f16", "eggrollbs", "eggrollbs shaping", "alteggroll jit",
             "sparse jit", "alteggroll eager", "sparse eager"]
    for name, g, o in zip(names, got, ours):
        assert g == o, name
    # the sparse values' draws: keyed by fold_in(pair key, 1), the positions' uniform by fold_in(pair key, 0)
    first = results["stand-in"][0]
    pair = N.thread_key(N.leaf_key(R.key(3), 0), 5, 0, 1)
    assert first["draws"][0]["key"] == R.fold_in(pair, 1).tolist() and first["draws"][0]["shape"] == [8]
    assert first["uniforms"][0]["key"] == R.fold_in(pair, 0).tolist()
    assert _u32(first["uniforms"][0]["bits"]).tolist() == R.uniform(R.fold_in(pair, 0), (8,)).view(np.uint32).tolist()
    # two groups: do_updates fails on the G values convert_fitnesses returns
    assert "broadcasting" in results["stand-in"][4]["update"]["error"]


@pytest.mark.slow
def test_the_documented_defects_show_through_the_child(shared):
    _, _hex32, _, _, _ = _child()
    sparse, defaults, zero = shared[1]["defects"]
    assert "broadcasting" in sparse["small_batch"]["error"]
    assert sparse["batch"]["value"] != sparse["batch_rows"]["value"]                   # runs, wrong values
    assert "rank" not in sparse["frozen"] and "q_multiplier" in sparse["frozen"]
    assert sparse["missing_paths"] and sparse["missing_paths"][0].endswith(os.path.join("noiser", "..", "src"))
    assert defaults["shaping"]["error"].startswith("ZeroDivisionError")
    assert defaults["update"]["error"].startswith("ZeroDivisionError")
    assert defaults["int_epoch"]["error"].startswith("ZeroDivisionError")
    assert all(p == _hex32(W) for p in zero["perturbed"]) and len(zero["perturbed"]) == 4  # all-zero noise


_NOISER = "src/hyperscalees/noiser/"
#: name -> (file, text, replacement, caught)
MUTANTS = {
    "sparse-position-scale": (_NOISER + "sparse.py", "(k,)) * a * b)", "(k,)) * a * (b - 1))", True),
    "sparse-key-swap": (_NOISER + "sparse.py", "k1, k2 = jax.random.split(", "k2, k1 = jax.random.split(", True),
    "alteggroll-sign": (_NOISER + "alteggroll.py", 'jnp.einsum("nir,njr->ij", x, jnp.sign(b))',
                        'jnp.einsum("nir,njr->ij", x, b)', True),
    "eggrollbs-mask": (_NOISER + "eggrollbs.py", "(slot == 0) | (slot == 1)", "(slot == 0)", True),
    "equivalent-trunc": (_NOISER + "sparse.py", "jnp.floor(", "jnp.trunc(", False),
    "equivalent-mask": (_NOISER + "eggrollbs.py", "(slot == 0) | (slot == 1)", "slot < 2", False),
    "equivalent-comment": (_NOISER + "alteggroll.py", "        def matrix(param, key):\n",
                           "        def matrix(param, key):\n            # signs only: magnitudes drop out\n",
                           False),
}


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(MUTANTS))
def test_a_mutant_of_each_new_noiser_fails_and_equivalent_edits_pass(name, shared):
    """Each mutant's clone runs after the stand-in's requests in the shared child (`shared`)."""
    _, _, _u32, _, _ = _child()
    caught = MUTANTS[name][3]
    assert (_theirs(shared[1][name], _u32) != _model()) == caught


@pytest.mark.slow
def test_parity_runs_the_new_rows_passing_with_their_findings(tmp_path_factory):
    """Read from the stand-in's default f32 and bf16 run that tests/test_hyperscale_parity.py asserts on too
    (`standin_report`: one run per test session)."""
    from test_hyperscale_parity import SETTINGS, standin_report
    code, cases, findings, text = standin_report(tmp_path_factory)
    ours = cases[cases["op"].isin(noiser_ops.OPS)]
    assert set(ours["op"]) == set(noiser_ops.OPS), sorted(set(cases["op"]))
    assert set(ours["status"]) == {"pass"}, ours[ours["status"] != "pass"][["case", "detail"]].to_string()
    assert (ours["mismatches"] == 0).all() and (ours["elements"] > 0).all()
    assert all(all(s in d for s in SETTINGS) for d in ours["detail"])
    assert {"sparse-batch", "sparse-options", "eggrollbs-defaults", "eggrollbs-groups"} <= set(findings["finding"])
    assert code == 0, text[-4000:]
