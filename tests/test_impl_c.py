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
from esverify.impl.target import ImplTarget

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
    """id -> names of the bf16 slots, for the vectors of `area` that the C implementation claims."""
    doc = json.loads((ROOT / "goldens" / f"{area}.json").read_text())
    out = {}
    for v in doc["vectors"]:
        c = v["inputs"]["config"]
        if c["anchor_decay"] != "none":          # esimpl claims no anchored decay
            continue
        names = [p["name"] for p in v["inputs"]["params"] if p["dtype"] == "bf16"]
        if names:
            out[v["id"]] = names
    return out


def test_every_claimed_vector_passes(esimpl, tmp_path):
    result, target = check(esimpl, tmp_path)
    assert result.errors == []
    failing = [r for r in result.rows if r["status"] != "unsupported"]
    assert failing == []
    assert result.exit_code(strict=True) == 0
    unsupported = {(r["area"], r["vector"]) for r in result.rows}
    # what esimpl does not claim: anchored decay and the es-awd profile, nothing else
    awd = {v["id"] for v in json.loads((ROOT / "goldens" / "es-awd.json").read_text())["vectors"]}
    assert unsupported == {("es-at-scale", "anchor-decay-l1"), ("es-at-scale", "anchor-decay-l2")} | \
        {("es-awd", v) for v in awd}
    claimed = sum(s["vectors"] - s["unsupported"] for s in result.summary)
    assert claimed == 47 + 12                   # every rng vector, 12 of 14 es-at-scale vectors
    assert target.identity()["name"] == "esimpl-c" and target.process.restarts == 0


def test_planted_fault_fails_exactly_the_bf16_vectors(esimpl_faulty, tmp_path):
    result, _ = check(esimpl_faulty, tmp_path)
    assert result.errors == []
    failing = [r for r in result.rows if r["status"] == "mismatch"]
    expected = bf16_vectors("es-at-scale")
    assert {r["vector"] for r in failing} == set(expected)
    assert all(r["area"] == "es-at-scale" for r in failing)
    for r in failing:                                   # only bf16 slots change: f32/f16 slots stay exact
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
    """The C shaping (numpy's pairwise summation written out, CONTRACT.md §7) against numpy itself.

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
