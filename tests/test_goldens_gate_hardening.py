"""Gate hardening: numpy's summation order, systematic libm divergence, subnormals.

- A numpy-style pairwise sum re-implemented with 8 accumulators (numpy's blocking) passes the es
  goldens bit for bit; the same with 16 accumulators fails them: the shaping vectors pin numpy's
  reduction order at populations on both sides of every block boundary.
- A libm64 backend that rounds one way (toward zero) fails as `systematic-divergence`; a single
  one-ulp difference passes, and the verdict never says "bit-equal" when a value differs.
- A process flushing subnormals (torch.set_flush_denormal(True)) is refused before anything runs,
  and (probe bypassed) the subnormal vectors catch it.
"""
from __future__ import annotations

import json
import types

import numpy as np
import pytest
import torch

from esverify import numerics_probe
from esverify.es import shaping
from esverify.goldens import es_area, gate
from esverify.references.es_at_scale import golden_area as at_scale_area
from test_goldens_support import COMMITTED, copy_goldens, load, of_kind, run, save, vector, without_kind

LIBM = "gaussian-libm64-seed-99-first-0-n-2053-chunk-256"


def pairwise_sum(a, acc: int = 8, block: int = 128) -> float:
    """numpy's pairwise summation of f64 values (its `pairwise_sum` with `acc` accumulators), in Python.

    n < acc: a plain loop from 0.0; n <= block: `acc` strided accumulators combined as a balanced tree,
    then the remainder; larger: split at n/2 rounded down to a multiple of `acc`.
    """
    n = len(a)
    if n < acc:
        res = 0.0
        for x in a:
            res += x
        return res
    if n <= block:
        r = list(a[:acc])
        i = acc
        while i < n - n % acc:
            for j in range(acc):
                r[j] += a[i + j]
            i += acc
        while len(r) > 1:
            r = [r[k] + r[k + 1] for k in range(0, len(r), 2)]
        res = r[0]
        for x in a[i:]:
            res += x
        return res
    n2 = n // 2
    n2 -= n2 % acc
    return pairwise_sum(a[:n2], acc, block) + pairwise_sum(a[n2:], acc, block)


def numpy_like(acc: int, first_as_initial: bool = False, buffer: int | None = None):
    """A stand-in for the `np` module seen by esverify.es.shaping whose mean/std sum with `acc` accumulators
    (and, with `first_as_initial`, start from the first value and pairwise-sum the rest, as a reduction
    without an identity would)."""
    def total(values):
        if buffer is not None:   # numpy's buffered reduction: one pairwise sum per buffer, added in order
            res = 0.0
            for start in range(0, len(values), buffer):
                res += pairwise_sum(values[start:start + buffer], acc)
            return res
        if first_as_initial:
            return values[0] + pairwise_sum(values[1:], acc)
        return pairwise_sum(values, acc)

    def mean(r):
        values = [float(x) for x in np.asarray(r, dtype=np.float64)]
        return np.float64(total(values) / len(values))

    def std(r):
        values = [float(x) for x in np.asarray(r, dtype=np.float64)]
        m = total(values) / len(values)
        d = [(x - m) * (x - m) for x in values]
        return np.float64(np.sqrt(total(d) / len(values)))

    shim = types.SimpleNamespace(**{k: getattr(np, k) for k in dir(np) if not k.startswith("__")})
    shim.mean, shim.std = mean, std
    return shim


def test_the_emulated_reduction_is_numpys_own():
    """Differential check of the emulation: with 8 accumulators it equals numpy's sum, mean and std bit for
    bit on every shaping reward set, so a failure with 16 is the blocking alone."""
    shim = numpy_like(8)
    for n in es_area.SHAPING_POPULATIONS:
        for r in es_area._reward_sets(n).values():
            assert pairwise_sum(r.tolist()) == float(np.add.reduce(r))
            assert shim.mean(r) == np.mean(r) and shim.std(r) == np.std(r), n


def _shaping_check(tmp_path, monkeypatch, acc, first_as_initial=False, buffer=None):
    # the shaping vectors alone: the emulated reduction reaches the gate through their recompute, and the
    # assertions below read only their rows (the whole area on numpy is test_goldens_gate.py's)
    goldens = copy_goldens(tmp_path / f"g{acc}", areas=("es-at-scale",), keep=of_kind("shaping"))
    monkeypatch.setattr(shaping, "np", numpy_like(acc, first_as_initial, buffer))
    return run("goldens", "check", "--area", "es-at-scale", "--backend", "numpy", "--goldens-dir", str(goldens),
               "--json", str(tmp_path / f"r{acc}.json"))


@pytest.mark.slow   # 5 s (--durations, 2026-12-03): out of the fast tier
def test_a_changed_numpy_reduction_order_fails_the_gate(tmp_path, monkeypatch):
    same = _shaping_check(tmp_path, monkeypatch, 8)
    assert same.exit_code == 0, same.output
    changed = _shaping_check(tmp_path, monkeypatch, 16)
    assert changed.exit_code == 1, changed.output
    rows = json.loads((tmp_path / "r16.json").read_text())["sections"]["differences"]
    failing = {r["vector"] for r in rows if r["status"] == "mismatch"}
    populations = {int(v.split("-")[1][1:]) for v in failing if v.startswith("shaping-")}
    # 16 accumulators differ from 8 only from n = 8 on (below, both are the plain loop): every population
    # from 8 up is caught by at least one of its four reward sets
    assert populations == {n for n in [*es_area.SHAPING_POPULATIONS, *es_area.LARGE_SHAPING_POPULATIONS] if n >= 8}
    assert "numpy " + np.__version__ in changed.output


@pytest.mark.slow   # 3 s (--durations, 2026-12-03): out of the fast tier
def test_a_reduction_seeded_with_the_first_value_fails_at_small_populations(tmp_path, monkeypatch):
    """Another order change, visible below 8 members too: populations 2-9 pin numpy's plain loop."""
    result = _shaping_check(tmp_path, monkeypatch, 8, first_as_initial=True)
    assert result.exit_code == 1, result.output
    rows = json.loads((tmp_path / "r8.json").read_text())["sections"]["differences"]
    failing = {r["vector"] for r in rows if r["status"] == "mismatch"}
    populations = {int(v.split("-")[1][1:]) for v in failing if v.startswith("shaping-")}
    # at n = 2 both orders are a[0] + a[1]; from 3 on every population is caught
    assert populations == {n for n in [*es_area.SHAPING_POPULATIONS, *es_area.LARGE_SHAPING_POPULATIONS]
                           if n >= 3}, sorted(populations)


def test_shaping_vectors_cover_every_boundary_and_reward_set():
    doc = load(COMMITTED / "es-at-scale.json")
    ids = {v["id"] for v in doc["vectors"]}
    for n in [*range(2, 10), 15, 16, 17, 30, 31, 32, 33, 127, 128, 129, 130, 255, 256, 257, 1000]:
        for name in ("wide", "near-equal", "negative", "mixed"):
            assert f"shaping-n{n}-{name}" in ids
    assert doc["generator"]["numpy"] == np.__version__ or doc["generator"]["numpy"]


def _one_way_libm(monkeypatch):
    """Make the numpy backend's libm64 round toward zero (a systematically biased libm)."""
    from esverify.rng import numpy_backend
    from esverify.rng import constants as K

    def toward_zero(v):
        f = v.astype(np.float32)
        away = np.abs(f.astype(np.float64)) > np.abs(v)
        return np.where(away, np.nextafter(f, np.float32(0)), f)

    def halves(a, b):
        ua, ub = numpy_backend.uniforms64(a, b)
        r = np.sqrt(-2.0 * np.log(ua))
        t = K.TWO_PI * ub
        return toward_zero(r * np.cos(t)), toward_zero(r * np.sin(t))

    monkeypatch.setattr(numpy_backend, "_libm64_halves", halves)


def test_a_one_way_rounding_libm_fails_as_systematic_divergence(tmp_path, monkeypatch):
    goldens = copy_goldens(tmp_path / "g")
    _one_way_libm(monkeypatch)
    result = run("goldens", "check", "--area", "rng", "--backend", "numpy", "--goldens-dir", str(goldens),
                 "--json", str(tmp_path / "r.json"), "--junit", str(tmp_path / "r.xml"))
    assert result.exit_code == 1, result.output
    assert "bit-equal" not in result.output
    import xml.etree.ElementTree as ET
    failures = [f.get("message", "") + (f.text or "") for f in ET.parse(tmp_path / "r.xml").iter("failure")]
    assert any("systematic-divergence" in f for f in failures)
    doc = json.loads((tmp_path / "r.json").read_text())
    rows = doc["sections"]["differences"]
    systematic = [r for r in rows if r["status"] == "systematic-divergence"]
    divergent = sum(r["status"] == "libm-divergence" for r in rows)
    assert len(systematic) == 1 and divergent > 1000
    assert f"{divergent} libm-divergence values among" in systematic[0]["detail"]
    summary = doc["sections"]["summary"][0]
    # the cap counts the libm-class values of the file: 3438 values and three 2**20-value digests
    n_libm = sum(gate._libm_values(v) for v in load(COMMITTED / "rng.json")["vectors"])
    assert n_libm == 3438 + 3 * 2**20
    assert summary["libm_divergences"] == divergent and summary["libm_cap"] == gate.libm_allowance(n_libm)


def test_libm_allowance():
    assert [gate.libm_allowance(n) for n in (0, 3460, 99_999, 100_000, 250_000)] == [1, 1, 1, 1, 2]


def test_one_libm_divergence_passes_without_claiming_bit_equality(tmp_path):
    goldens = copy_goldens(tmp_path / "g")
    doc = load(goldens / "rng.json")
    values = vector(doc, LIBM)["expected"]["values"]["values"]
    values[100] = f"0x{int(values[100], 16) + 1:08x}"
    save(goldens / "rng.json", doc)
    result = run("goldens", "check", "--area", "rng", "--backend", "numpy", "--goldens-dir", str(goldens))
    assert result.exit_code == 0, result.output
    assert "bit-equal" not in result.output
    assert "1 value(s) differ by one f32 ulp (libm-divergence" in result.output


@pytest.fixture
def flushing():
    if not torch.set_flush_denormal(True):
        pytest.skip("this CPU has no FTZ/DAZ control (torch.set_flush_denormal returned False)")
    try:
        yield
    finally:
        torch.set_flush_denormal(False)


def test_probe_sees_a_flushing_process(flushing):
    status = numerics_probe.flush_to_zero_status()
    assert status.flushing and any("FTZ" in f for f in status.findings)
    assert "set_flush_denormal" in status.message()


def test_probe_reports_a_clean_process():
    assert numerics_probe.flush_to_zero_status() == numerics_probe.FlushStatus(False, ())


def test_gate_refuses_a_flushing_process_before_running(tmp_path, flushing):
    goldens = copy_goldens(tmp_path / "g", areas=("rng", "es-at-scale", "es-awd"))
    result = run("goldens", "check", "--goldens-dir", str(goldens))
    assert result.exit_code == 2, result.output
    assert "flushes subnormals to zero" in result.output and "vector recomputations" not in result.output
    out = tmp_path / "out"
    gen = run("goldens", "generate", "--area", "rng", "--out", str(out), "--goldens-dir", str(goldens))
    # the destination is checked (and may be created) before any work; no golden file is written
    assert gen.exit_code == 2 and "flushes subnormals" in gen.output
    assert not out.exists() or not any(out.iterdir())


@pytest.mark.parametrize("area", ["es-at-scale", "es-awd"])
@pytest.mark.slow   # 5 s (--durations, 2026-12-03): out of the fast tier
def test_subnormal_vectors_catch_flushing_when_the_probe_is_bypassed(tmp_path, monkeypatch, flushing, area):
    monkeypatch.setattr(numerics_probe, "flush_to_zero_status", lambda: numerics_probe.FlushStatus(False, ()))
    # the subnormal vectors alone (the claim is theirs; the rest of the area on torch-cpu, the chain most of
    # all, cost about ten times as much and are test_goldens_gate.py's)
    goldens = copy_goldens(tmp_path / "g", areas=(area,), keep=lambda v: v["id"].startswith("subnormal-"))
    result = run("goldens", "check", "--area", area, "--backend", "torch-cpu", "--goldens-dir", str(goldens),
                 "--json", str(tmp_path / "r.json"))
    assert result.exit_code == 1, result.output
    rows = json.loads((tmp_path / "r.json").read_text())["sections"]["differences"]
    hit = {r["vector"] for r in rows if r["status"] == "mismatch"}
    # f16 subnormals are normal f32 values and the profiles compute in f32: FTZ/DAZ of f32 arithmetic
    # cannot touch them (their vector pins f16 subnormal conversions instead); f32 and bf16 are caught
    assert {"subnormal-f32", "subnormal-bf16"} <= hit, sorted(hit)


def test_subnormal_vectors_are_subnormal_in_their_dtype():
    """Parameters, perturbations and updated parameters of the subnormal vectors lie in each dtype's
    subnormal range (nonzero, below the smallest normal)."""
    smallest_normal = {"f32": 2.0 ** -126, "bf16": 2.0 ** -126, "f16": 2.0 ** -14}
    width = {"f32": 32, "f16": 16, "bf16": 16}
    doc = load(COMMITTED / "es-at-scale.json")
    for dt in ("f32", "f16", "bf16"):
        v = vector(doc, f"subnormal-{dt}")
        fields = [p["bits"] for p in v["inputs"]["params"]] + [f for k, f in v["expected"].items()
                                                               if ".perturb." in k or ".update." in k]
        for field in fields:
            raw = np.array([int(h, 16) for h in field["values"]], dtype=np.uint64)
            exponent_bits = {"f32": 0x7F800000, "f16": 0x7C00, "bf16": 0x7F80}[dt]
            sub = ((raw & exponent_bits) == 0) & ((raw & ((1 << (width[dt] - 1)) - 1)) != 0)
            assert sub.mean() > 0.9, (dt, smallest_normal[dt])


def test_parity_refuses_a_flushing_process_before_running(tmp_path, flushing):
    """`esverify parity` calls numerics_probe.flush_to_zero_status() once it imported torch, before any case."""
    from click.testing import CliRunner
    from esverify.cli import main
    from standins.mutants import STANDINS
    result = CliRunner().invoke(main, ["parity", "--ref", str(STANDINS / "es-at-scale"), "--devices", "cpu",
                                       "--small", "--dtypes", "f32", "--iterations", "1", "--quiet",
                                       "--out", str(tmp_path / "out")])
    assert result.exit_code == 2, result.output
    assert "flushes subnormals to zero" in result.output and not (tmp_path / "out" / "parity-cases.csv").exists()


@pytest.mark.slow   # 3 s (--durations, 2026-12-03): out of the fast tier
def test_gate_refuses_a_process_that_loaded_a_fast_math_library(tmp_path):
    """A shared library built with -ffast-math sets FTZ/DAZ when it is loaded (crtfastmath.o): the real case."""
    import shutil
    import subprocess
    import sys
    from test_goldens_support import ROOT
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler to build a -ffast-math library")
    (tmp_path / "fm.c").write_text("double twice(double x) { return x * 2; }\n")
    lib = tmp_path / "libfm.so"
    subprocess.run([cc, "-shared", "-fPIC", "-O2", "-ffast-math", tmp_path / "fm.c", "-o", lib], check=True)
    goldens = copy_goldens(tmp_path / "g")
    script = (f"import ctypes, sys; ctypes.CDLL({str(lib)!r}); from esverify.cli import main; "
              f"sys.argv = ['esverify', 'goldens', 'check', '--area', 'rng', '--goldens-dir', {str(goldens)!r}]; main()")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=tmp_path,
                          env={**__import__("os").environ, "PYTHONPATH": str(ROOT)}, timeout=300)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "flushes subnormals to zero (FTZ/DAZ)" in done.stderr and "(DAZ)" in done.stderr


# -- numpy's Generator stream behind the references' seed schedules ------------
@pytest.fixture(scope="module")
def chainless(tmp_path_factory):
    """Both es files without their es-chain vector: 200 iterations of the trainer that the es-run vectors
    run for one or two (the same Trainer, profile and noise code), about two thirds of each file's cost on
    numpy; the chains on every backend are test_goldens_gate.py's."""
    return copy_goldens(tmp_path_factory.mktemp("chainless"), areas=("es-at-scale", "es-awd"),
                        keep=without_kind("es-chain"))


@pytest.mark.parametrize("bit_generator", [np.random.Philox, np.random.SFC64, np.random.MT19937])
@pytest.mark.slow   # 4 s (--durations, 2026-12-03): out of the fast tier
def test_a_changed_numpy_stream_fails_the_seed_schedule_vectors(monkeypatch, bit_generator, chainless):
    """default_rng backed by another bit generator changes the references' member seeds: the gate
    fails on exactly the seed-schedule vectors of both es files (and nothing else changes)."""
    from esverify.es import seeds
    seeds.default_rng_draw.cache_clear()
    monkeypatch.setattr(np.random, "default_rng", lambda seed=None: np.random.Generator(bit_generator(seed)))
    try:
        result = gate.check(chainless, ["es-at-scale", "es-awd"], backends=["numpy"])
    finally:
        seeds.default_rng_draw.cache_clear()
    failed = {(r["area"], r["vector"]) for r in result.rows if r["status"] == "mismatch"}
    want = {(area, v["id"]) for area in ("es-at-scale", "es-awd") for v in load(COMMITTED / f"{area}.json")["vectors"]
            if v["inputs"]["kind"] == "seed-schedule"}
    assert len(want) == 10 and failed == want
    assert result.exit_code(False) == 1


@pytest.mark.slow   # 2 s (--durations, 2026-12-03): out of the fast tier
def test_the_seed_schedule_vectors_pass_with_numpys_stream(tmp_path):
    goldens = copy_goldens(tmp_path, areas=("es-awd",), keep=of_kind("seed-schedule"))
    result = gate.check(goldens, ["es-awd"], backends=["numpy"])
    assert result.exit_code(False) == 0 and not result.rows and result.summary[0]["vectors"] == 5


# -- es-awd's fused multiply-add rounded twice -----------------------------------
@pytest.mark.slow   # 2 s (--durations, 2026-12-03): out of the fast tier
def test_fma_as_an_f64_product_and_sum_rounded_twice_fails_the_gate(monkeypatch, chainless):
    """rd32(rd64(x + y*a)) instead of one rounding passed every vector before; now exactly the
    fma-double-rounding vector fails, on its perturbed theta_0 (one ulp), and nothing else does."""
    from esverify.references.es_awd import profile as es_awd
    monkeypatch.setattr(es_awd, "fma32", lambda x, y, k: (x.to(torch.float64) + y.to(torch.float64) * k)
                        .to(torch.float32))
    # the f32 CPU lines also have a compiled form of the same fma32 (esverify.es.cpu_kernels, bitwise equal
    # by tests/test_es_kernels.py): send them through the patched one, so the fault reaches every line
    monkeypatch.setattr(es_awd.cpu_kernels, "usable", lambda *tensors: False)
    result = gate.check(chainless, ["es-awd"], backends=["numpy"])
    bad = [r for r in result.rows if r["status"] == "mismatch"]
    assert {r["vector"] for r in bad} == {"fma-double-rounding-f32"}
    first = bad[0]
    assert (first["field"], first["element"], first["ulp"]) == ("it0.perturb.w", 0, 1)
    assert first["expected"].startswith("0x482aaaad") and first["got"].startswith("0x482aaaac")
    assert result.exit_code(False) == 1


# -- decay and step kinds; the l1 decay's sign of zero ----------------------------
@pytest.mark.slow   # 2 s (--durations, 2026-12-03): out of the fast tier
def test_an_l1_decay_that_drops_the_sign_of_zero_fails_the_decay_and_step_vectors(monkeypatch, tmp_path):
    """l1 must write sign(d) * +0 + theta0: -0 where theta = -tiny decays onto a -0 anchor. A decay
    writing +0 there passed every vector before; now the decay-l1 vectors fail on that element."""
    from esverify.es import decay, trainer
    real = decay.decay_chunk

    def plus_zero(theta, anchor, kind, a, rule=None):
        out = real(theta, anchor, kind, a, rule)
        return torch.where(out == 0, torch.zeros_like(out), out) if kind == "l1" else out
    monkeypatch.setattr(decay, "decay_chunk", plus_zero)
    monkeypatch.setattr(trainer, "decay_chunk", plus_zero)
    goldens = copy_goldens(tmp_path, areas=("es-at-scale",), keep=of_kind("decay", "step"))
    result = gate.check(goldens, ["es-at-scale"], backends=["numpy"])
    bad = {r["vector"] for r in result.rows if r["status"] == "mismatch"}
    decay_l1 = {f"decay-l1-lambda-{lam}-{dt}" for lam in ("0.5", "3") for dt in ("f32", "f16", "bf16")}
    assert decay_l1 <= bad and not any(v.startswith("decay-l2") for v in bad)
    rows = [r for r in result.rows if r["vector"] == "decay-l1-lambda-0.5-f32"]
    assert [(r["field"], r["element"], r["ulp"]) for r in rows] == [("decay.w", 2, 0)]   # a flipped zero


@pytest.mark.slow   # 5 s (--durations, 2026-12-03): out of the fast tier
def test_the_decay_and_step_kinds_are_checked_on_every_backend(tmp_path):
    vectors = load(COMMITTED / "es-awd.json")["vectors"]
    kinds = {v["inputs"]["kind"] for v in vectors}
    assert {"decay", "step", "seed-schedule", "es-run"} <= kinds
    # those two kinds alone (the whole file on every backend, its chain most of all, is test_goldens_gate.py's)
    goldens = copy_goldens(tmp_path, areas=("es-awd",), keep=of_kind("decay", "step"))
    result = gate.check(goldens, ["es-awd"])
    assert result.exit_code(True) == 0 and {s["backend"] for s in result.summary} >= {"numpy", "torch-cpu"}
    assert {s["vectors"] for s in result.summary} == {sum(v["inputs"]["kind"] in ("decay", "step") for v in vectors)}


# -- the summation rule above 8192 elements (docs/CONTRACT.md §7) ----------------------
def test_numpy_sums_a_contiguous_array_pairwise_as_a_whole_above_8192():
    """The documented rule: the same recursive split at any length, no per-buffer chunking."""
    for n in (*es_area.LARGE_SHAPING_POPULATIONS, 16385, 40000):
        r = es_area._reward_sets(n)["wide"]
        assert pairwise_sum(r.tolist()) == float(np.add.reduce(r)) == float(np.sum(r)), n
        assert numpy_like(8).mean(r) == np.mean(r) and numpy_like(8).std(r) == np.std(r), n


@pytest.mark.slow   # 2 s (--durations, 2026-12-03): out of the fast tier
def test_summing_per_8192_element_buffer_fails_the_large_shaping_vectors(tmp_path, monkeypatch):
    changed = _shaping_check(tmp_path, monkeypatch, 8, buffer=8192)
    assert changed.exit_code == 1, changed.output
    rows = json.loads((tmp_path / "r8.json").read_text())["sections"]["differences"]
    failing = {r["vector"] for r in rows if r["status"] == "mismatch"}
    assert failing == {f"shaping-n{n}-wide" for n in es_area.LARGE_SHAPING_POPULATIONS}


# -- libm-divergence granted only where the value traces back to the mapping ------
LIBM_RUN = "zscore-two-iterations-iid-libm64"


def _one_ulp_off(monkeypatch, field, element):
    """A backend whose es result is one ulp off at (field, element) of LIBM_RUN (a bug, not libm)."""
    real = at_scale_area.AREA.recompute

    def recompute(vector, backend):
        got = real(vector, backend)
        if vector["id"] == LIBM_RUN:
            values = got[field]["values"]
            values[element] = "0x%0*x" % (len(values[element]) - 2, int(values[element], 16) ^ 1)
        return got
    import dataclasses
    monkeypatch.setattr(at_scale_area, "AREA", dataclasses.replace(at_scale_area.AREA, recompute=recompute))


@pytest.fixture
def libm_run_alone(tmp_path):
    """es-at-scale's goldens holding LIBM_RUN alone: the planted fault is in its result only (_one_ulp_off)."""
    return copy_goldens(tmp_path / "g", areas=("es-at-scale",), keep=lambda v: v["id"] == LIBM_RUN)


@pytest.mark.slow   # 2 s (--durations, 2026-12-03): out of the fast tier
def test_a_one_ulp_bug_in_a_libm64_run_is_a_mismatch(monkeypatch, libm_run_alone):
    _one_ulp_off(monkeypatch, "it0.update.w", 3)
    result = gate.check(libm_run_alone, ["es-at-scale"], backends=["numpy"])
    (row,) = result.rows
    assert (row["vector"], row["field"], row["element"], row["ulp"], row["status"]) == \
        (LIBM_RUN, "it0.update.w", 3, 1, "mismatch")
    assert "no libm64 value this backend computed differs" in row["detail"]
    assert result.exit_code(False) == 1


@pytest.mark.slow   # 2 s (--durations, 2026-12-03): out of the fast tier
def test_a_one_ulp_difference_downstream_of_a_differing_libm_value_is_a_divergence(monkeypatch, libm_run_alone):
    _one_ulp_off(monkeypatch, "it0.update.w", 3)
    import dataclasses
    area = at_scale_area.AREA
    monkeypatch.setattr(at_scale_area, "AREA", dataclasses.replace(
        area, libm_trace=lambda vector, backend: {("it0.update.w", 3)}))
    result = gate.check(libm_run_alone, ["es-at-scale"], backends=["numpy"])
    assert [r["status"] for r in result.rows] == ["libm-divergence"] and result.exit_code(False) == 0


def test_the_trace_follows_a_differing_noise_element_forward():
    vector = next(v for v in load(COMMITTED / "es-at-scale.json")["vectors"] if v["id"] == LIBM_RUN)
    from esverify.rng import gaussian

    def draw(seed, numel):   # this libm differs from the reference at element 5 of every stream
        out = np.asarray(gaussian(seed, numel, 0, "libm64", backend="numpy"), np.float32).copy()
        if numel > 5:
            out.view(np.uint32)[5] ^= 1
        return out
    traced = es_area.trace_libm(vector, draw)
    assert ("it0.perturb.w", 5) in traced and ("it1.update.v", 5) in traced
    assert not any(element != 5 for _, element in traced) and not any(f.endswith("coefficients") for f, _ in traced)
    assert es_area.trace_libm(vector, lambda seed, numel: gaussian(seed, numel, 0, "libm64", backend="numpy")) == set()


def test_the_probe_without_torch_imports_none_and_a_parity_session_probes_again(tmp_path):
    """Options are checked without importing torch (flush_to_zero_status(import_torch=False): a run
    imports torch later, then probes again); Runner.session() (fuzz shrinking, mutant catalogs) probes
    itself, so a process that began flushing after its options were checked is refused there too."""
    import subprocess
    import sys

    from esverify.oracle import Options, Runner, UsageError
    from standins.mutants import STANDINS
    from test_goldens_support import ROOT
    code = ("import sys; from esverify import numerics_probe as p; s = p.flush_to_zero_status(import_torch=False); "
            "print('torch' in sys.modules, s.flushing)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env={**__import__("os").environ, "PYTHONPATH": str(ROOT)})
    assert done.stdout.split() == ["False", "False"], done.stdout + done.stderr
    runner = Runner(Options(ref=str(STANDINS / "es-awd"), devices=("cpu",), out=str(tmp_path / "out"), quiet=True))
    if not torch.set_flush_denormal(True):
        pytest.skip("this CPU has no FTZ/DAZ control (torch.set_flush_denormal returned False)")
    try:
        with pytest.raises(UsageError, match="flushes subnormals to zero"):
            with runner.session("es-awd", STANDINS / "es-awd"):
                pass
    finally:
        torch.set_flush_denormal(False)
