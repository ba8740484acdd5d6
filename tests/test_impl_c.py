"""A second implementation in C, built from the docs alone, checked by the gate through the protocol.

examples/impl_c/ builds with exactly ``cc -std=c11 -O2 examples/impl_c/*.c -lm``.
Every vector it claims must pass; built with -DPLANTED_FAULT (bf16 rounding
truncates instead of rounding to nearest even) the gate must fail on
exactly the vectors that hold a bf16 parameter, and only on their bf16
fields. Skipped, with the reason, where no C compiler is installed.
"""
import json
import platform
import shutil
import subprocess
from pathlib import Path

import pytest

from esverify.goldens import gate
from esverify.goldens.impl_target import ImplTarget

ROOT = Path(__file__).resolve().parents[1]
SOURCES = sorted(str(p) for p in (ROOT / "examples" / "impl_c").glob("*.c"))
CC = shutil.which("cc")
pytestmark = pytest.mark.skipif(CC is None, reason="no C compiler: `cc` is not on PATH, the C implementation "
                                                   "cannot be built here")


def build(tmp_path_factory, *flags) -> Path:
    out = tmp_path_factory.mktemp("impl_c") / "esimpl"
    cmd = [CC, "-std=c11", "-O2", *flags, *SOURCES, "-lm", "-o", str(out)]
    done = subprocess.run(cmd, capture_output=True, text=True)
    assert done.returncode == 0, f"{' '.join(cmd)} failed:\n{done.stderr}"
    return out


@pytest.fixture(scope="module")
def esimpl(tmp_path_factory):
    return build(tmp_path_factory)


@pytest.fixture(scope="module")
def esimpl_faulty(tmp_path_factory):
    return build(tmp_path_factory, "-DPLANTED_FAULT")


def check(binary, tmp_path):
    target = ImplTarget(str(binary), log_path=tmp_path / "impl.log", deadline_s=30)
    try:
        return gate.check(ROOT / "goldens", impl=target), target
    finally:
        target.close()


def bf16_vectors(area: str) -> dict:
    """id -> names of the bf16 slots, for the vectors of `area` claimed by the C implementation (not `step`)."""
    doc = json.loads((ROOT / "goldens" / f"{area}.json").read_text())
    out = {}
    for v in doc["vectors"]:
        if v["inputs"]["kind"] == "step":
            continue
        names = [p["name"] for p in v["inputs"].get("params", []) if p["dtype"] == "bf16"]
        if names:
            out[v["id"]] = names
    return out


@pytest.mark.slow   # 2 s (--durations, 2026-12-03): out of the fast tier
def test_every_claimed_vector_passes(esimpl, tmp_path):
    result, target = check(esimpl, tmp_path)
    assert result.errors == []
    failing = [r for r in result.rows if r["status"] != "unsupported"]
    assert failing == []
    assert result.exit_code(strict=True) == 0
    unsupported = {(r["area"], r["vector"]) for r in result.rows}
    # what esimpl does not claim: the es-awd profile, the `step` op, and the numpy seed schedules (no
    # protocol op: numpy's own stream, pinned for esverify's backends; docs/PROTOCOL.md §5), the es-paper
    # area, the skill-sample loop, the eggroll and hyperscale-es areas (no protocol op for any), nothing else
    awd = {v["id"] for v in json.loads((ROOT / "goldens" / "es-awd.json").read_text())["vectors"]}
    paper = {v["id"] for v in json.loads((ROOT / "goldens" / "es-paper.json").read_text())["vectors"]}
    skill = {v["id"] for v in json.loads((ROOT / "goldens" / "skill-sample.json").read_text())["vectors"]}
    eggroll = {v["id"] for v in json.loads((ROOT / "goldens" / "eggroll.json").read_text())["vectors"]}
    jax = {v["id"] for v in json.loads((ROOT / "goldens" / "hyperscale-es.json").read_text())["vectors"]}
    at_scale = json.loads((ROOT / "goldens" / "es-at-scale.json").read_text())["vectors"]
    schedules = {v["id"] for v in at_scale if v["inputs"]["kind"] in ("seed-schedule", "step")}
    assert len(schedules) == 5 + 3
    assert unsupported == ({("es-awd", v) for v in awd} | {("es-at-scale", v) for v in schedules}
                           | {("es-paper", v) for v in paper} | {("skill-sample", v) for v in skill}
                           | {("eggroll", v) for v in eggroll} | {("hyperscale-es", v) for v in jax})
    claimed = sum(s["vectors"] - s["unsupported"] for s in result.summary)
    n_rng = len(json.loads((ROOT / "goldens" / "rng.json").read_text())["vectors"])
    assert claimed == n_rng + len(at_scale) - len(schedules)   # every other rng and es-at-scale vector
    assert target.identity()["name"] == "esimpl-c" and target.process.restarts == 0


@pytest.mark.slow   # 2 s (--durations, 2026-12-03): out of the fast tier
def test_planted_fault_fails_exactly_the_bf16_vectors(esimpl_faulty, tmp_path):
    result, _ = check(esimpl_faulty, tmp_path)
    assert result.errors == []
    failing = [r for r in result.rows if r["status"] == "mismatch"]
    expected = bf16_vectors("es-at-scale")
    assert {r["vector"] for r in failing} == set(expected)
    assert all(r["area"] == "es-at-scale" for r in failing)
    for r in failing:                                   # only bf16 slots change: f32/f16 slots stay exact
        if r["vector"].startswith("chain-"):              # a chain couples its slots through the rewards:
            continue                                        # located at the first differing slot of that iteration
        assert r["field"].split(".")[-1] in expected[r["vector"]], r
    assert result.exit_code(strict=False) == 1


def _is_x86_gcc() -> bool:
    if CC is None or platform.machine() not in ("x86_64", "AMD64"):
        return False
    return "free software foundation" in subprocess.run([CC, "--version"], capture_output=True, text=True).stdout.lower()


@pytest.mark.skipif(not _is_x86_gcc(), reason="the FMA-contraction probe reads x86-64 gcc assembly")
def test_no_fma_contraction_under_iso_c11(tmp_path):
    """poly32 forbids FMA contraction: even with FMA instructions available, -std=c11 emits none.

    The probe is checked on the gnu11 dialect (where gcc contracts by default) to prove it can fail.
    """
    def fmas(std):
        asm = tmp_path / f"rng-{std}.s"
        subprocess.run([CC, f"-std={std}", "-O2", "-mfma", "-S", str(ROOT / "examples/impl_c/rng.c"), "-o",
                        str(asm)], check=True, capture_output=True)
        return asm.read_text().count("vfmadd") + asm.read_text().count("vfmsub") + asm.read_text().count("vfnmadd")
    assert fmas("gnu11") > 0            # the probe sees contraction when the compiler does it
    assert fmas("c11") == 0


def test_shaping_matches_numpy_summation_order(esimpl, tmp_path):
    """The C shaping (numpy's pairwise summation written out, docs/CONTRACT.md §7) against numpy itself.

    Lengths cross numpy's 8-element blocks and its 128-element split; rewards span magnitudes so
    that a different summation order would change last bits.
    """
    import numpy as np
    from esverify.es import shape_rewards
    from esverify.impl import client, wire
    rng = np.random.default_rng(11)
    with client.ImplProcess(str(esimpl), log_path=tmp_path / "log") as proc:
        proc.start()
        for n in (1, 2, 7, 8, 9, 15, 16, 17, 30, 127, 128, 129, 255, 300, 1000):
            rewards = rng.standard_normal(n) * 10.0 ** rng.integers(-3, 6, n)
            for shaping in ("zscore", "centered_ranks", "none"):
                if shaping == "centered_ranks" and n < 2:
                    continue
                got = proc.call("shaping", {"shaping": shaping, "rewards": wire.Tensor.of(rewards)})
                want = shape_rewards(rewards, shaping)[0]
                assert got["coefficients"].bits.tolist() == want.view(np.uint64).tolist(), (n, shaping)


@pytest.mark.parametrize("kind, lam", [("l1", 0.5), ("l1", 40.0), ("l2", 3.0)])
@pytest.mark.parametrize("dtype", ["f32", "f16", "bf16"])
def test_decay_matches_the_clean_room_kernel(esimpl, tmp_path, kind, lam, dtype):
    """The C `decay` op against esverify.es.apply_anchor_decay_, bitwise, on deltas that hit the edges:
    zero deltas, |d| equal to the l1 step (u = +0), tiny and huge values."""
    import numpy as np
    import torch
    from esverify.es import apply_anchor_decay_
    from esverify.es.numerics import NAME_DTYPES
    from esverify.impl import client, wire
    alpha = 0.01
    dt = NAME_DTYPES[dtype]
    gen = np.random.default_rng(5)
    anchor = torch.from_numpy(gen.standard_normal(257).astype(np.float32)).to(dt)
    step = torch.tensor(alpha * lam, dtype=torch.float32).to(dt)
    delta = torch.cat([torch.tensor([0.0, -0.0, 1e-30, -1e-30, 6e4, -6e4]).to(dt), step.reshape(1), -step.reshape(1),
                       torch.from_numpy(gen.standard_normal(249).astype(np.float32) * 0.01).to(dt)])
    theta = (anchor.float() + delta.float()).to(dt)
    theta[:2] = anchor[:2]                                     # d = +0 exactly
    config = {"profile": "es-at-scale", "mapping": "poly32", "scheme": "iid", "seed": wire.u64_hex(1),
              "population": 2, "sigma": wire.f64_hex(0.1), "alpha": wire.f64_hex(alpha), "shaping": "none",
              "antithetic": False, "restore": "regenerate", "anchor_decay": kind, "anchor_lambda": wire.f64_hex(lam)}
    with client.ImplProcess(str(esimpl), log_path=tmp_path / "log") as proc:
        proc.start()
        got = proc.call("decay", {"config": config, "params": [wire.Tensor.of(theta)],
                                  "anchor": [wire.Tensor.of(anchor)]})["params"][0]
    want = theta.clone()
    apply_anchor_decay_([want], [anchor], kind, lam, alpha)
    assert got.bits.tolist() == wire.Tensor.of(want).bits.tolist()


def test_bad_requests_are_error_replies_and_the_wrapper_lives_on(esimpl, tmp_path):
    """The C wrapper answers every malformed request with ok:false and a message; it never dies or hangs."""
    import numpy as np
    from esverify.impl import client, wire
    u64s = wire.Tensor.of(np.arange(3, dtype=np.uint64))
    config = {"profile": "es-at-scale", "mapping": "poly32", "scheme": "iid", "seed": wire.u64_hex(1),
              "population": 2, "sigma": wire.f64_hex(0.1), "alpha": wire.f64_hex(0.01), "shaping": "none",
              "antithetic": False, "restore": "regenerate", "anchor_decay": "none", "anchor_lambda": wire.f64_hex(0)}
    theta = [wire.Tensor.of(np.ones(3, dtype=np.float32))]
    cases = [
        ("fly", {}, "unsupported operation 'fly'"),
        ("at", {"seed": wire.u64_hex(1)}, "missing field 'indices'"),
        ("at", {"seed": wire.u64_hex(1), "indices": {"dtype": "u64", "shape": [5], "offset": 1000}},
         "outside the payload"),
        ("at", {"seed": "0x12", "indices": u64s}, "seed must be '0x' plus 16 hex digits"),
        ("at", {"seed": wire.u64_hex(1), "indices": wire.Tensor.of(np.ones(2, np.float32))}, "must be a u64 tensor"),
        ("gaussian", {"mapping": "cubic", "seed": wire.u64_hex(1), "first": wire.u64_hex(0), "n": wire.u64_hex(3)},
         "unknown mapping 'cubic'"),
        ("perturb", {"config": config, "params": theta, "iteration": wire.u64_hex(0), "member": 99},
         "member 99 is outside the population"),
        ("update", {"config": config, "params": theta, "iteration": wire.u64_hex(0),
                    "rewards": wire.Tensor.of(np.ones(3))}, "rewards has 3 entries, the population is 2"),
        ("update", {"config": {**config, "profile": "es-awd"}, "params": theta, "iteration": wire.u64_hex(0),
                    "rewards": wire.Tensor.of(np.ones(2))}, "profile 'es-awd' is not implemented"),
        ("shaping", {"shaping": "zscore", "rewards": wire.Tensor.of(np.array([1.0, np.nan]))},
         "reward of member 1 is not finite"),
    ]
    with client.ImplProcess(str(esimpl), log_path=tmp_path / "log", deadline_s=10) as proc:
        proc.start()
        for op, args, message in cases:
            with pytest.raises(client.WrapperError, match=message):
                proc.call(op, args)
        got = proc.call("at", {"seed": wire.u64_hex(1234567), "indices": u64s})["outputs"].bits.tolist()
        assert got[:2] == [6457827717110365317, 3203168211198807973]
        assert proc.restarts == 0
