"""The HyperscaleES child driver on the stand-in, against our numpy model (docs/hyperscale.md).

The driver (esverify/references/hyperscale_es/child/driver.py) runs under an interpreter
that has jax, jaxlib and optax: $ESVERIFY_JAX_PYTHON, else this one when it
can import them; without one these tests are skipped. The stand-in
(tests/standins/hyperscale-es) is JAX code written from the docs; XLA runs
it, so its bits test our model of XLA's arithmetic: G1-G3 and updates on
every dot shape the model knows.
"""
from __future__ import annotations

import functools
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from esverify.references.hyperscale_es import jaxrandom as R
from esverify.references.hyperscale_es import noise as N
from esverify.references.hyperscale_es import shaping as S
from esverify.references.hyperscale_es import update as U

#: the tests run jax children (skipped without jax): most share one, the module's `shared` fixture
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
DRIVER = ROOT / "esverify" / "references" / "hyperscale_es" / "child" / "driver.py"
STANDIN = ROOT / "tests" / "standins" / "hyperscale-es"


@functools.cache
def _has_jax(chosen: str) -> bool:
    return subprocess.run([chosen, "-c", "import jax, optax"], capture_output=True).returncode == 0


def _python() -> str:
    chosen = os.environ.get("ESVERIFY_JAX_PYTHON") or sys.executable
    if not _has_jax(chosen):
        pytest.skip(f"no interpreter with jax and optax ({chosen}); set ESVERIFY_JAX_PYTHON")
    return chosen


def _run(ops: list, xla_flags: str = "") -> dict:
    env = {**os.environ, "XLA_FLAGS": xla_flags}
    done = subprocess.run([_python(), str(DRIVER)], input=json.dumps({"clone": str(STANDIN), "ops": ops}),
                          capture_output=True, text=True, timeout=600, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


#: the driver run by path in a process where torch cannot be imported (the JAX child needs none)
NO_TORCH = ("import runpy, sys\nsys.modules['torch'] = None\nsys.argv = ['driver.py']\n"
            f"runpy.run_path({str(DRIVER)!r}, run_name='__main__')\n")


def drive_all(requests: dict) -> tuple[dict, dict]:
    """{name: (clone, ops)} through ONE one-shot child (no XLA flags, torch unimportable), the clones switched
    in turn: (environment, {name: results}). A child's jax import and jax's own compilations (the threefry,
    normal and eager kernels) are paid once for all the requests; each clone's own functions are traced and
    compiled afresh, so a mutant is never served a compilation of another clone's code."""
    names = list(requests)
    body = [{"clone": str(requests[n][0]), "ops": requests[n][1]} for n in names]
    done = subprocess.run([_python(), "-c", NO_TORCH], input=json.dumps(body), capture_output=True, text=True,
                          timeout=900, env={**os.environ, "XLA_FLAGS": ""})
    assert done.returncode == 0, done.stderr[-3000:]
    reply = json.loads(done.stdout)
    assert len(reply["results"]) == len(names)
    return reply["environment"], dict(zip(names, reply["results"]))


def mutant_clone(folder: Path, rel: str, text: str, replacement: str) -> Path:
    """A copy of the stand-in at `folder` with the one `text` of file `rel` replaced."""
    import shutil
    shutil.copytree(STANDIN, folder, ignore=shutil.ignore_patterns("__pycache__"))
    path = folder / rel
    src = path.read_text(encoding="utf-8")
    assert src.count(text) == 1, (rel, text)
    path.write_text(src.replace(text, replacement), encoding="utf-8")
    return folder


def _hex32(a) -> list:
    return [f"0x{int(v):08x}" for v in np.asarray(a, np.float32).ravel().view(np.uint32)]


def _u32(hexes) -> np.ndarray:
    return np.array([int(h, 16) for h in hexes], np.uint32)


G2_SCORES = [1, 2, 0.5, 0, 3, -1, 0.25, 2]


def _g_ops() -> list:
    g1 = [{"op": "noise", "noiser": "eggroll", "seed": 7, "leaf": 0, "epoch": 4, "noise_reuse": 1, "thread": 5,
           "shape": [3, 5], "rank": 2, "sigma": 0.35355339, "dtype": dt} for dt in ("f32", "bf16", "f16")]
    g2 = [{"op": "shaping", "noiser": "eggroll", "scores": _hex32(G2_SCORES), "group": g} for g in (0, 4)]
    w = np.arange(40, dtype=np.float32) / np.float32(64)
    g3 = [{"op": "update", "noiser": "eggroll", "seed": 11, "epoch": 3, "noise_reuse": 1, "shape": [8, 5],
           "w": _hex32(w), "scores": _hex32(np.arange(8)), "group": 0, "sigma": 0.05, "lr": 0.1, "rank": 2,
           "mode": mode} for mode in ("jit", "eager")]
    return g1 + g2 + g3


def test_g1_g2_g3_through_the_child_equal_our_model(shared):
    g1, scores = _g_ops()[:3], G2_SCORES
    env, res = shared
    res = res["g123"]
    assert env["jaxlib"] and "XLA_FLAGS" in env and isinstance(env["cpu_fma"], bool)
    assert env["platform"] == "cpu"   # pinned by the driver: the rows model XLA's CPU arithmetic
    if not env["cpu_fma"] or env["XLA_FLAGS"] or env["jaxlib"] != "0.10.2":
        pytest.skip(f"the known answers hold for jaxlib 0.10.2 with FMA and no XLA flags; here {env}")
    key = N.thread_key(N.leaf_key(R.key(7), 0), 4, 5, 1)
    for op, out in zip(g1, res[:3]):
        (draw,) = out["draws"]                                      # one draw of (d0 + d1, r)
        assert draw["key"] == key.tolist() and draw["shape"] == [8, 2]
        ours = N.bits_of(R.normal(key, (8, 2), op["dtype"]), op["dtype"]).ravel()
        assert [int(h, 16) for h in draw["bits"]] == ours.tolist()
    assert " ".join(h[2:] for h in res[4]["shaped"]) == ("3dd2be97 3f6d166a be9e0ef1 bf3866c4 3fcc28a2 bfd9548c "
                                                          "bf2b3adb 3f4592ae")
    assert _u32(res[3]["shaped"]).tolist() == S.convert_fitnesses(scores, 0).view(np.uint32).tolist()
    for out in res[5:]:
        w2 = _u32(out["w"]).view(np.float32)
        assert " ".join(h[2:] for h in out["w"][:5]) == "39c26dab 3c836212 3cf8a8d0 3d3f2b5e 3d8206f7"
        assert hashlib.sha256(w2.tobytes()).hexdigest()[:16] == "8a61d973369a9e46"
        assert out["printed"] == ["LORA UPDATE (8, 8, 2) (8, 5, 2)"]      # at trace time, once per call here


#: (d0, d1, N, rank): one shape per dot order the model knows (M x N*r x d1)
SHAPES = [(8, 5, 8, 2), (2, 16, 4, 4), (64, 17, 8, 2), (64, 32, 8, 2), (1, 6, 6, 3), (16, 16, 16, 1),
          (40, 24, 64, 2), (33, 17, 64, 3), (64, 64, 64, 4)]


def _shape_ops() -> tuple[list, list]:
    """The updates of `SHAPES`, jit and eager: (ops, [(w, scores, seed)] of each)."""
    rng = np.random.default_rng([56, 7])
    ops, inputs = [], []
    for d0, d1, n, r in SHAPES:
        for mode in ("jit", "eager"):
            w = rng.standard_normal((d0, d1)).astype(np.float32)
            scores = rng.standard_normal(n).astype(np.float32)
            seed = int(rng.integers(0, 1000))
            ops.append({"op": "update", "noiser": "eggroll", "seed": seed, "epoch": 2, "noise_reuse": 1,
                        "shape": [d0, d1], "w": _hex32(w), "scores": _hex32(scores), "group": 0, "sigma": 0.03,
                        "lr": 0.2, "rank": r, "mode": mode})
            inputs.append((w, scores, seed))
    return ops, inputs


def test_updates_on_every_known_dot_order_equal_our_model(shared):
    ops, inputs = _shape_ops()
    env, results = shared
    if not env["cpu_fma"] or env["XLA_FLAGS"]:
        pytest.skip("the model is of a host with FMA and no XLA flags")
    for op, out, (w, scores, seed) in zip(ops, results["shapes"], inputs):
        mine = U.eggroll_update(w, S.convert_fitnesses(scores), N.leaf_key(R.key(seed), 0), 2, 0.03, 0.2, op["rank"],
                                1, op["mode"])
        assert _u32(out["w"]).tolist() == mine.ravel().view(np.uint32).tolist(), (op["shape"], op["rank"], op["mode"])


def _low_precision_ops(rng, shapes, modes=("jit", "eager")):
    ops, ours = [], []
    for dtype in ("bf16", "f16"):
        for d0, d1, n, r in shapes:
            for mode in modes:
                w = np.asarray(R.round_to(rng.standard_normal((d0, d1)).astype(np.float32) * 0.1, dtype), np.float32)
                scores = rng.standard_normal(n).astype(np.float32)
                seed = int(rng.integers(0, 1000))
                ops.append({"op": "update", "noiser": "eggroll", "seed": seed, "epoch": 2, "noise_reuse": 1,
                            "shape": [d0, d1], "w": _hex32(w), "scores": _hex32(scores), "group": 0, "sigma": 0.03,
                            "lr": 0.2, "rank": r, "mode": mode, "dtype": dtype})
                ours.append((w, scores, seed))
    return ops, ours


def _ours(op, w, scores, seed, excess=None):
    out = U.eggroll_update(w, S.convert_fitnesses(scores), N.leaf_key(R.key(seed), 0), 2, 0.03, 0.2, op["rank"], 1,
                           op["mode"], dtype=op["dtype"], excess_precision=excess)
    return N.bits_of(out, op["dtype"]).ravel().tolist()


def _low_ops() -> tuple[list, list]:
    return _low_precision_ops(np.random.default_rng([56, 9]), [(8, 5, 8, 2), (64, 17, 8, 2), (1, 6, 6, 3), (40, 24, 64, 2)])


def test_low_precision_updates_equal_our_model(shared):
    """bf16 and f16, jit and eager: bf16 under jit keeps A = draw * s in f32 (XLA's excess precision)."""
    ops, inputs = _low_ops()
    env, results = shared
    if not env["cpu_fma"]:
        pytest.skip("the model is of a host with FMA")
    excess_mattered = False
    for op, out, (w, scores, seed) in zip(ops, results["low"], inputs):
        got = _u32(out["w"]).tolist()
        assert got == _ours(op, w, scores, seed), (op["dtype"], op["shape"], op["mode"])
        if op["dtype"] == "bf16" and op["mode"] == "jit":
            excess_mattered |= got != _ours(op, w, scores, seed, excess=False)
    assert excess_mattered


def test_bf16_jit_without_excess_precision_is_the_strict_model():
    ops, inputs = _low_precision_ops(np.random.default_rng([56, 10]), [(64, 17, 8, 2)], modes=("jit",))
    reply = _run(ops, "--xla_allow_excess_precision=false")
    assert reply["environment"]["XLA_FLAGS"] == "--xla_allow_excess_precision=false"
    for op, out, (w, scores, seed) in zip(ops, reply["results"], inputs):
        got = _u32(out["w"]).tolist()
        assert got == _ours(op, w, scores, seed, excess=False)
        if op["dtype"] == "bf16":
            assert got != _ours(op, w, scores, seed)          # the default (excess) model differs here


# ----------------------------------------------------------------------------- mutants of the stand-in

_NOISER = "src/hyperscalees/noiser/"
#: name -> (file, text, replacement, caught): a fault of each kind, and edits that change nothing
MUTANTS = {
    "fold-in-order": (_NOISER + "base_noiser.py", "jax.random.fold_in(jax.random.fold_in(key, e), thread // 2)",
                      "jax.random.fold_in(jax.random.fold_in(key, thread // 2), e)", True),
    "antithetic-sign": (_NOISER + "base_noiser.py", "jnp.where(thread % 2 == 0, 1.0, -1.0)",
                        "jnp.where(thread % 2 == 1, 1.0, -1.0)", True),
    "sigma-over-r": (_NOISER + "eggroll.py", 'dyn["sigma"] / jnp.sqrt(r)', 'dyn["sigma"] / r', True),
    "shaping-variance": (_NOISER + "base_noiser.py", "jnp.sqrt(jnp.var(s) + 1e-5)",
                         "jnp.sqrt(jnp.var(s, ddof=1) + 1e-5)", True),
    "noise-dtype": (_NOISER + "eggroll.py", "(d0 + d1, r), dtype=param.dtype)", "(d0 + d1, r), dtype=jnp.float32)",
                    True),
    "equivalent-pair-shift": (_NOISER + "base_noiser.py", "thread // 2)", "thread >> 1)", False),
    "equivalent-rename": (_NOISER + "eggroll.py", "x = fitnesses.reshape((n, 1, 1)) * a",
                          "weighted = fitnesses.reshape((n, 1, 1)) * a\n            x = weighted", False),
    "equivalent-comment": (_NOISER + "base_noiser.py", "def sign_of(thread):\n",
                           "def sign_of(thread):\n    # the even thread of a pair adds, the odd one subtracts\n", False),
}


def _mutant_ops():
    w = np.arange(40, dtype=np.float32) / np.float32(64)
    base = {"op": "update", "noiser": "eggroll", "seed": 11, "epoch": 3, "noise_reuse": 1, "shape": [8, 5],
            "w": _hex32(w), "scores": _hex32([3, 1, 4, 1, 5, 9, 2, 6]), "group": 4, "sigma": 0.05, "lr": 0.1,
            "rank": 2, "mode": "jit"}
    ops = [dict(base, dtype=dt) for dt in ("f32", "bf16")]
    ours = []
    for dt in ("f32", "bf16"):
        w0 = np.asarray(R.round_to(w.reshape(8, 5), dt), np.float32)
        out = U.eggroll_update(w0, S.convert_fitnesses([3, 1, 4, 1, 5, 9, 2, 6], 4), N.leaf_key(R.key(11), 0), 3,
                               0.05, 0.1, 2, 1, "jit", dtype=dt)
        ours.append(N.bits_of(out, dt).ravel().tolist())
    return ops, ours


@pytest.mark.parametrize("name", sorted(MUTANTS))
def test_a_mutant_of_each_kind_fails_and_equivalent_edits_pass(name, shared):
    """Each mutant's clone runs after the stand-in's requests in the shared child (`shared`)."""
    caught = MUTANTS[name][3]
    _, ours = _mutant_ops()
    got = [_u32(out["w"]).tolist() for out in shared[1][f"mutant {name}"]]
    assert (got != ours) == caught


def _reuse_ops() -> list:
    return [{"op": "noise", "noiser": "eggroll", "seed": 3, "leaf": 0, "epoch": e, "noise_reuse": reuse, "thread": 2,
             "shape": [4, 3], "rank": 1, "sigma": 0.1, "dtype": "f32"} for reuse in (0, 1) for e in (0, 49)]


def test_noise_reuse_zero_freezes_the_noise_in_the_child_and_in_the_model(shared):
    """A finding, not a copy: with noise_reuse 0 (the default) epoch 49 draws epoch 0's noise."""
    draws = [out["draws"][0] for out in shared[1]["reuse"]]
    assert draws[0] == draws[1] and draws[2] != draws[3]
    key = N.leaf_key(R.key(3), 0)
    assert N.thread_key(key, 49, 2, 0).tolist() == N.thread_key(key, 0, 2, 0).tolist() == draws[1]["key"]
    assert N.thread_key(key, 49, 2, 1).tolist() == draws[3]["key"]


def _served_case(rng, d0, d1, n, r, dyadic: bool):
    key = N.leaf_key(R.key(21), 0)
    draws, served = [], []
    for pair in range(n // 2):
        if dyadic:
            d = (rng.integers(-8, 9, (d0 + d1, r)) / 8).astype(np.float32)
        else:
            d = rng.standard_normal((d0 + d1, r)).astype(np.float32)
        k = N.thread_key(key, 5, 2 * pair, 1)
        served.append({"key": k.tolist(), "shape": [d0 + d1, r], "dtype": "f32", "bits": _hex32(d)})
        draws += [d, d]
    return draws, served


def _served_ops() -> tuple[list, list]:
    rng = np.random.default_rng([56, 11])
    ops, ours = [], []
    for (d0, d1, n, r), dyadic in (((8, 5, 8, 2), False), ((2, 16, 4, 4), True), ((1, 6, 6, 3), False)):
        draws, served = _served_case(rng, d0, d1, n, r, dyadic)
        w = (rng.integers(-64, 65, (d0, d1)) / 64).astype(np.float32)
        scores = rng.integers(-4, 5, n).astype(np.float32)
        for mode in ("jit", "eager"):
            ops.append({"op": "update", "noiser": "eggroll", "seed": 21, "epoch": 5, "noise_reuse": 1,
                        "shape": [d0, d1], "w": _hex32(w), "scores": _hex32(scores), "group": 0, "sigma": 0.5,
                        "lr": 0.25, "rank": r, "mode": mode, "served": served})
            ours.append((w, scores, draws, r, mode))
    return ops, ours


def test_served_noise_inside_the_jitted_update_equals_our_model(shared):
    """The runner's noise served by key through a host callback (the analogue of the torch hooks)."""
    _, inputs = _served_ops()
    for out, (w, scores, draws, r, mode) in zip(shared[1]["served"], inputs):
        mine = U.update_from_draws(w, S.convert_fitnesses(scores), draws, 0.5, 0.25, r, mode)
        assert _u32(out["w"]).tolist() == mine.ravel().view(np.uint32).tolist()


def _no_torch_ops() -> list:
    return [{"op": "shaping", "noiser": "eggroll", "scores": _hex32([1, 2, 0.5, 0]), "group": 0},
           {"op": "perturb", "noiser": "open_es", "seed": 3, "epoch": 1, "noise_reuse": 1, "shape": [2, 3],
            "w": _hex32(np.ones(6)), "sigma": 0.5, "dtype": "f32", "threads": [0, 1], "standard": True},
           {"op": "update", "noiser": "eggroll", "seed": 3, "epoch": 1, "noise_reuse": 1, "shape": [2, 3],
            "w": _hex32(np.ones(6)), "scores": _hex32([1, 2]), "group": 0, "sigma": 0.5, "lr": 0.25, "rank": 1,
            "mode": "jit"}]


def test_the_driver_runs_where_torch_cannot_be_imported(shared):
    """Parity's JAX child needs no torch: the driver speaks the child protocol itself (docs/hyperscale.md §9).
    The shared child (`drive_all`) makes torch unimportable before the driver runs, one-shot, every op."""
    assert "sys.modules['torch'] = None" in NO_TORCH
    assert [r["op"] for r in shared[1]["no torch"]] == ["shaping", "perturb", "update"]


def test_served_noise_refuses_a_key_it_cannot_attribute():
    rng = np.random.default_rng([56, 12])
    _, served = _served_case(rng, 8, 5, 8, 2, False)
    op = {"op": "update", "noiser": "eggroll", "seed": 21, "epoch": 5, "noise_reuse": 1, "shape": [8, 5],
          "w": _hex32(np.zeros(40)), "scores": _hex32(np.arange(8)), "group": 0, "sigma": 0.5, "lr": 0.25,
          "rank": 2, "mode": "jit", "served": served[:-1]}                 # pair 3's key is missing
    done = subprocess.run([_python(), str(DRIVER)], input=json.dumps({"clone": str(STANDIN), "ops": [op]}),
                          capture_output=True, text=True, timeout=600)
    assert done.returncode != 0
    assert f"key {served[-1]['key']} is not one the runner can attribute" in done.stderr


@pytest.mark.parametrize("request_text,message", [
    ("not json", "the request is not a JSON object"),
    ("[]", "the request is not a JSON object"),
    (json.dumps({"clone": "/nonexistent", "ops": []}), "is not a HyperscaleES clone"),
    (json.dumps({"clone": str(STANDIN), "ops": [{"op": "train"}]}), "unknown op 'train'"),
])
def test_bad_requests_are_one_line_and_exit_2(request_text, message):
    done = subprocess.run([_python(), str(DRIVER)], input=request_text, capture_output=True, text=True, timeout=600)
    assert done.returncode == 2 and done.stdout == ""
    assert message in done.stderr and len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr


@pytest.fixture(scope="module")
def shared(tmp_path_factory) -> tuple[dict, dict]:
    """Every stand-in request of this module's tests, then each mutant's clone, through ONE child
    (`drive_all`): (environment, {request name: results})."""
    folder = tmp_path_factory.mktemp("mutants")
    ops, _ = _mutant_ops()
    requests = {"g123": (STANDIN, _g_ops()), "shapes": (STANDIN, _shape_ops()[0]), "low": (STANDIN, _low_ops()[0]),
                "reuse": (STANDIN, _reuse_ops()), "served": (STANDIN, _served_ops()[0]),
                "no torch": (STANDIN, _no_torch_ops())}
    for name, (rel, text, replacement, _) in sorted(MUTANTS.items()):
        requests[f"mutant {name}"] = (mutant_clone(folder / name, rel, text, replacement), ops)
    return drive_all(requests)
