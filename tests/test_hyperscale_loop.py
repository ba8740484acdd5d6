"""The hyperscale-es loop row `loop-e2e`: the end-to-end test replayed update by update (docs/hyperscale.md §13).

Without JAX: our side's pieces (the dot orders, the block order, what the replay refuses, the G4 check and the
final hash). With an interpreter that has jax and optax (tests/test_hyperscale_child.py's `_python`): the
child runs the stand-in's tests/end_to_end_test.py and our replay equals every update bit for bit; a mutant
that unfreezes the noise fails the row through parity.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from esverify.references.hyperscale_es import loop_e2e as L
from esverify.references.hyperscale_es import rows_loop as RL
from test_hyperscale_child import DRIVER, STANDIN, _python

F32 = np.float32
#: the stand-in's final parameters, SHA-256[:16], from a plain run of its test (no recording) on jax/jaxlib 0.10.2,
#: an x86 CPU with FMA, no XLA flags: the recorded run must give the same bits (recording changes no arithmetic)
STANDIN_FINAL = "31d276a82a34cf86"
FROZEN = 'e = 0 if reuse == 0 else epoch // reuse'
UNFROZEN = 'e = epoch if reuse == 0 else epoch // reuse'
INIT = {"noiser": "EggRoll", "sigma": 0.2, "lr": 0.03, "solver": "adamw", "solver_kwargs": {"b1": 0.9, "b2": 0.999},
        "options": {"rank": 8}}
LAYOUT = {"names": ["['w']"], "shapes": [[1, 16]], "dtypes": ["float32"], "codes": [1]}


def test_the_loop_s_dot_orders_are_the_measured_ones():
    assert L.dot_order(16, 512, 3) == L.dot_order(16, 512, 16) == "acc4"
    assert L.dot_order(1, 512, 16) == "seq"
    assert L.dot_order(16, 512, 3, f"--foo {L.YNN_OFF}") == "block256"
    assert L.dot_order(16, 512, 16, L.EXACT_MATH) == "seq"
    with pytest.raises(ValueError, match="under both"):
        L.dot_order(16, 512, 3, f"{L.YNN_OFF} {L.EXACT_MATH}")
    with pytest.raises(ValueError, match="16x256x3 was not measured"):
        L.dot_order(16, 256, 3)


def test_block256_sums_each_block_in_order_then_the_blocks():
    # 2**24 then 511 ones: one sequential sum loses every one (ties to even), two blocks keep the second's 256
    x = np.ones((1, 512), F32)
    x[0, 0] = 2.0 ** 24
    b = np.ones((1, 512), F32)
    assert L.contract(x, b, "seq")[0, 0] == 2.0 ** 24
    assert L.contract(x, b, "block256")[0, 0] == 2.0 ** 24 + 256


@pytest.mark.parametrize("change, why", [
    ({"solver": "sgd"}, "only adamw is modelled"),
    ({"noiser": "OpenES"}, "not EggRoll"),
    ({"options": {"rank": 8, "group_size": 4}}, "group_size > 0"),
    ({"solver_kwargs": {"b1": 0.9, "nesterov": True}}, "adamw options ['nesterov']"),
])
def test_the_replay_refuses_what_it_does_not_model(change, why):
    with pytest.raises(ValueError, match=f".*{why}".replace("[", r"\[").replace("]", r"\]")):
        L.replay({**INIT, **change}, LAYOUT, [[np.zeros((1, 16), F32)]], [[[0, 1]]], [np.zeros(64, F32)], [0])
    with pytest.raises(ValueError, match="scanned leaves"):
        L.replay(INIT, LAYOUT, [[np.zeros((1, 16), F32)]], [[[[0, 1], [0, 2]]]], [np.zeros(64, F32)], [0])


def test_a_zero_fitness_update_moves_a_leaf_by_weight_decay_alone():
    """All-zero shaped fitnesses: a zero gradient, so adamw's step is lr * wd * p: p' = fma(p * wd, -lr, p)."""
    p = np.array([[1.0, -2.0, 0.5] + [0.25] * 13], F32)
    (after,), = L.replay(INIT, LAYOUT, [[p]], [[[0, 7]]], [np.zeros(64, F32)], [0])
    decay = (p * F32(1e-4)).astype(np.float64)                      # rd(wd * p): u with mu' = 0
    assert np.array_equal(after, (p.astype(np.float64) + decay * np.float64(F32(-0.03))).astype(F32))
    assert np.count_nonzero(after != p) == p.size


def test_final_hash_and_ulps():
    leaves = [np.arange(3, dtype=F32), np.array([[0.5]], F32)]
    import hashlib
    assert RL.final_hash(leaves) == hashlib.sha256(np.array([0, 1, 2, 0.5], F32).tobytes()).hexdigest()[:16]
    one = np.array([1.0, 0.0, 1.0], F32)
    bits = np.array([np.nextafter(F32(1), F32(2)), -0.0, -1.0], F32).view(np.uint32)
    assert RL._ulps(one, bits).tolist() == [1, 0, 2 * 0x3F800000]


class _Session:
    def __init__(self, path, env):
        self.clone_path, self.environment = path, env


@pytest.mark.parametrize("commit, env, applies", [
    ("b77f7d6" + "0" * 33, {"jax": "0.10.2", "jaxlib": "0.10.2", "cpu_fma": True, "XLA_FLAGS": ""}, True),
    ("b77f7d6" + "0" * 33, {"jax": "0.10.2", "jaxlib": "0.10.2", "cpu_fma": False, "XLA_FLAGS": ""}, False),
    ("b77f7d6" + "0" * 33, {"jax": "0.10.2", "jaxlib": "0.10.2", "cpu_fma": True, "XLA_FLAGS": "--x"}, False),
    ("1234567" + "0" * 33, {"jax": "0.10.2", "jaxlib": "0.10.2", "cpu_fma": True, "XLA_FLAGS": ""}, False),
])
def test_the_g4_golden_is_checked_only_where_it_holds(monkeypatch, tmp_path, commit, env, applies):
    from esverify import gitinfo
    monkeypatch.setattr(gitinfo, "commit_and_dirty", lambda path: (commit, False))
    session = _Session(tmp_path, env)
    note, diff = RL._g4(session, RL.G4)
    assert (note.endswith("= G4") and diff == "") if applies else ("does not apply" in note and diff == "")
    note, diff = RL._g4(session, "0123456789abcdef")
    assert diff == (f"G4: final parameters SHA-256[:16] 0123456789abcdef, golden {RL.G4}" if applies else "")


def test_the_loop_modules_never_import_jax():
    code = ("import sys\n"
            "import numpy as np\n"
            "from esverify.references.hyperscale_es import loop_e2e, rows_loop\n"
            "loop_e2e.leaf_gradient(0, (3,), np.array([0, 1], np.uint32), 0, np.ones(4, np.float32), 0.1, 1, 0)\n"
            "bad = sorted(m for m in sys.modules if m == 'jax' or m.startswith(('jax.', 'jaxlib')))\n"
            "assert not bad, bad\n")
    subprocess.run([sys.executable, "-c", code], check=True)


# ------------------------------------------------------------------ with a jax child (slow)

def _loop(clone: Path, hf_home: Path) -> dict:
    env = {**os.environ, "XLA_FLAGS": "", "HF_HOME": str(hf_home)}
    done = subprocess.run([_python(), str(DRIVER)], input=json.dumps({"clone": str(clone), "ops": [{"op": "loop-e2e"}]}),
                          capture_output=True, text=True, timeout=600, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


def _f32(hexes, shape):
    return np.array([int(h, 16) for h in hexes], np.uint32).view(F32).reshape(tuple(shape))


@pytest.mark.slow
def test_the_stand_in_s_end_to_end_test_replays_bit_for_bit(tmp_path):
    hf_home = tmp_path / "user-hf-home"
    reply = _loop(STANDIN, hf_home)
    env, r = reply["environment"], reply["results"][0]
    assert r["init"] == [INIT] and r["ran"] == "__main__"
    assert r["layout"]["shapes"] == [[16], [16, 3], [16], [16, 16], [1], [1, 16]]
    assert r["layout"]["codes"] == [0, 1, 0, 1, 0, 1]
    ups = r["updates"]
    assert [u["epochs"] for u in ups] == [[e] for e in range(10)] and len(r["shapings"]) == 10
    # the test's cache went to a scratch HF_HOME in the child's temporary folder, never the user's
    assert r["hf_home_under_tmp"] and not hf_home.exists()
    assert r["cache_files"] and all(f.startswith("hyperscaleescomp/") for f in r["cache_files"])
    assert r["frozen"] == {"epochs": [0, 9], "identical": True, "leaf": "['layer0']['w']"}
    assert sum("LORA UPDATE" in line for line in r["printed"]) == 3
    shapes = r["layout"]["shapes"]
    ours = L.replay(r["init"][0], r["layout"], [[_f32(h, s) for h, s in zip(u["before"], shapes)] for u in ups],
                    [u["keys"] for u in ups], [_f32(u["shaped"], (-1,)) for u in ups], [u["epochs"][0] for u in ups])
    for u, (mine, rec) in enumerate(zip(ours, ups)):
        for name, m, h, s in zip(r["layout"]["names"], mine, rec["after"], shapes):
            assert np.array_equal(m.view(np.uint32), _f32(h, s).view(np.uint32)), (u, name)
    final = RL.final_hash([_f32(h, s) for h, s in zip(ups[-1]["after"], shapes)])
    assert f"final params sha256[:16] {final}" in r["printed"]
    if env["jaxlib"] == "0.10.2" and env["cpu_fma"]:
        assert final == STANDIN_FINAL


@pytest.mark.slow
def test_unfrozen_noise_fails_the_loop_row(tmp_path):
    """A stand-in whose noise_reuse 0 draws each epoch's own noise: its first update still agrees, every later
    one differs from our replay (noise_reuse 0 reuses epoch 0's keys), and no frozen-noise finding is recorded."""
    clone = tmp_path / "unfrozen"
    shutil.copytree(STANDIN, clone, ignore=shutil.ignore_patterns("__pycache__"))
    noiser = clone / "src" / "hyperscalees" / "noiser" / "base_noiser.py"
    src = noiser.read_text(encoding="utf-8")
    assert src.count(FROZEN) == 1
    noiser.write_text(src.replace(FROZEN, UNFROZEN), encoding="utf-8")
    out = tmp_path / "report"
    done = subprocess.run([sys.executable, "-m", "esverify", "parity", "--ref", str(clone), "--target", "hyperscale-es",
                           "--python", f"hyperscale-es={_python()}", "--devices", "cpu", "--out", str(out),
                           "--format", "csv", "--dtypes", "f32", "--noise", "native", "--case", "loop-e2e/N64"],
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 1, (done.stdout + done.stderr)[-3000:]
    rows = pd.read_csv(out / "parity-cases.csv", keep_default_na=False)
    assert list(rows["status"]) == ["fail"] and rows["mismatches"][0] > 0
    assert "mismatches/max ulp per update 0:0/0 1:" in rows["detail"][0]
    assert "1:0/0" not in rows["detail"][0]
    findings = pd.read_csv(out / "parity-findings.csv", keep_default_na=False)
    assert "frozen-noise" not in set(findings["finding"]) and "compilation-cache" in set(findings["finding"])
