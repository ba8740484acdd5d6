"""The `skill-sample` golden area: the skill page's sample loop on our side (docs/numerics.md §8; docs/goldens.md).

Each ``skill-run`` vector is a short run of the page's es_train_loop on a
flat vector: dtype (f32, f16, bf16), noise (``native``: numpy's legacy
RandomState stream; ``contract``: poly32, the libm64 class is not used
here), population N (2, 5, 30), sigma, lr, seed_base, the initial
parameters and PRESCRIBED rewards per generation (a reward function that
returns them in member order). Expected, per generation g: ``g<g>.model``
(the last member's perturbed vector, what the page leaves in the model),
``g<g>.z`` (f64 z-scores) and ``g<g>.params`` (params_current after the
update). One ``skill-utilities`` vector pins the 30 f64 weights.

Expected values come from `esverify.references.skill_sample.model` (numpy and
ml_dtypes, the scalar RNG reference), imported only by `generate`;
`recompute` runs `esverify.references.skill_sample.loop.run_skill_loop` (torch) on CPU
with the noise backend of each target of `esverify.rng.backend_targets()`
(native vectors do not use it; torch-cuda is not a target: the vectors
hold rule `cpu` values, computed on the CPU). The area's version is the profile's version.

Hand-picked vectors pin the measured roundings random runs rarely reach:
``noise-double-rounding-f16`` / ``-bf16`` (zero parameters, sigma 1: the
perturbed vector IS q(noise), and seed 170 / 4133 has elements whose
f64 -> f16/bf16 rounding differs through f32, as torch rounds, from the
direct one), ``update-double-rounding-f16`` / ``-bf16`` (the same for the
f64 sum of the update, with lr = sigma) and ``scalar-double-rounding-f16`` / ``-bf16`` (a sigma whose
product with an element of seed 46's q rounds differently through f32).
"""
from __future__ import annotations

import numpy as np

from . import profile as P
from esverify.goldens.area import Area
from esverify.goldens.compare import decode, encode

KIND = "skill-run"
DTYPES = ("f32", "f16", "bf16")
NUMEL = 37
#: (dtype, seed, elements): seeds whose native noise (64 elements) rounds differently f64 -> dt directly and via f32
NOISE_DOUBLE_ROUNDING = {"f16": (170, [25, 27]), "bf16": (4133, [55])}
#: (dtype, seed_base, element): N = 2, rewards (1, 0), native noise: acc's element rounds to dt differently
#: through f32 (torch.tensor(acc, dtype)) than directly; with lr = sigma the step is a = rd_dt(rd32(acc)) itself
UPDATE_DOUBLE_ROUNDING = {"f16": (376, 18), "bf16": (2493, 30)}
#: (dtype, sigma): with seed 46's native q (64 elements), element 29 of rd_dt(rd32(q * rd32(sigma))) differs
#: from the one-rounding rd_dt(q * rd32(sigma)) (searched; docs/numerics.md §8)
SCALAR_DOUBLE_ROUNDING = {"f16": 0.0995868593454361, "bf16": 0.08914877474308014}


def _f64s(xs) -> dict:
    return encode(np.asarray(xs, dtype=np.float64))


def f64_from_bits(array: dict) -> np.ndarray:
    if array["format"] != "f64":
        raise ValueError(f"expected an f64 bit array, got {array['format']}")
    return decode(array).view(np.float64)


def _rewards(n: int, generations: int, seed: int) -> list[list[float]]:
    rng = np.random.default_rng([n, generations, seed, 22])
    return [rng.standard_normal(n).round(6).tolist() for _ in range(generations)]


def _params(name: str, numel: int, seed: int, scale: float = 1.0) -> np.ndarray:
    from . import model as R
    x = np.random.default_rng([numel, seed]).standard_normal(numel) * scale
    return x.astype(np.float32).astype(R.NP_DTYPES[name])


def _case(id_, comment, dtype, noise, population, rewards, sigma=0.05, lr=0.02, seed_base=42, params=None) -> dict:
    return {"id": id_, "comment": comment, "dtype": dtype, "noise": noise, "population": population,
            "rewards": rewards, "sigma": sigma, "lr": lr, "seed_base": seed_base,
            "params": params if params is not None else _params(dtype, NUMEL, population)}


def _cases() -> list[dict]:
    out = []
    for dtype in DTYPES:
        for noise in ("native", "contract"):
            for n in (2, 5, 30):
                out.append(_case(f"skill-{dtype}-{noise}-n{n}",
                                 f"two generations, {n} members, {dtype} flat vector of {NUMEL} elements, {noise} "
                                 f"noise, sigma 0.05, lr 0.02 (step lr/sigma = 0.4, visible in {dtype})",
                                 dtype, noise, n, _rewards(n, 2, 1)))
        out.append(_case(f"skill-{dtype}-page-defaults", "the page's defaults: 30 members, sigma 0.017, lr 0.001, "
                         f"seed_base 42, native noise, {dtype}, two generations", dtype, "native", 30,
                         _rewards(30, 2, 2), sigma=0.017, lr=0.001))
        out.append(_case(f"skill-{dtype}-zero-std-n5", "equal rewards 0.1 at N = 5: numpy's mean is exact, the std "
                         f"is 0, every z is exactly 0 and the update adds rd_dt(+0); {dtype}, native noise",
                         dtype, "native", 5, [[0.1] * 5] * 2))
        out.append(_case(f"skill-{dtype}-equal-rewards-n30", "equal rewards 0.1 at N = 30: numpy's mean is inexact, "
                         "the std is 2.8e-17 (not 0) and every z is -2.8e-9: tiny but not zero; "
                         f"{dtype}, native noise", dtype, "native", 30, [[0.1] * 30]))
    out.append(_case("skill-f16-seed-base-72", "seed_base 72 at N = 30: its generation 0 draws the seeds of "
                     "seed_base 42's generation 1 (the seed overlap the page does not prevent)", "f16", "contract",
                     30, _rewards(30, 1, 3), seed_base=72))
    for dtype, (seed, elements) in NOISE_DOUBLE_ROUNDING.items():
        out.append(_case(f"noise-double-rounding-{dtype}",
                         f"zero parameters, sigma 1, N = 2, the last member draws seed {seed}: the model is exactly "
                         f"q(noise); elements {elements} of its native noise round to {dtype} differently through "
                         f"f32 (as torch.tensor(f64, dtype) does) than directly", dtype, "native", 2,
                         [[1.0, 0.0]], sigma=1.0, lr=0.5, seed_base=seed - 1, params=_params(dtype, 64, 0, 0.0)))
    for dtype, (seed_base, element) in UPDATE_DOUBLE_ROUNDING.items():
        out.append(_case(f"update-double-rounding-{dtype}",
                         f"zero parameters, N = 2, rewards (1, 0), seed_base {seed_base}, lr = sigma = 0.5: the "
                         f"updated parameters are a = rd_dt(rd32(acc)) exactly, and element {element} of the f64 sum "
                         f"rounds to {dtype} differently through f32 (as torch.tensor(acc, dtype) does) than "
                         f"directly", dtype, "native", 2, [[1.0, 0.0]], sigma=0.5, lr=0.5, seed_base=seed_base,
                         params=_params(dtype, 64, 0, 0.0)))
    for dtype, sigma in SCALAR_DOUBLE_ROUNDING.items():
        out.append(_case(f"scalar-double-rounding-{dtype}",
                         f"zero parameters, N = 5, seed_base 42 (last member seed 46), sigma {sigma!r}: element 29 "
                         f"of rd_dt(rd32(q * rd32(sigma))) differs from a single rounding rd_dt(q * rd32(sigma)); "
                         f"torch keeps the Python scalar in f32 and rounds the product twice", dtype, "native", 5,
                         [[0.5, -1.0, 2.0, 0.0, 1.5]], sigma=sigma, lr=0.01, params=_params(dtype, 64, 0, 0.0)))
    return out


def _vector(case: dict) -> dict:
    from . import model as R
    gens = R.run(case["params"], case["rewards"], case["population"], case["sigma"], case["lr"], case["seed_base"],
                 case["noise"])
    expected = {}
    for g, rec in enumerate(gens):
        expected[f"g{g}.model"] = encode(rec["model"])
        expected[f"g{g}.z"] = _f64s(rec["z"])
        expected[f"g{g}.params"] = encode(rec["params"])
    inputs = {"kind": KIND, "dtype": case["dtype"], "noise": case["noise"], "population": case["population"],
              "sigma": _f64s([case["sigma"]]), "lr": _f64s([case["lr"]]), "seed_base": case["seed_base"],
              "params": encode(case["params"]), "generations": [{"rewards": _f64s(r)} for r in case["rewards"]]}
    if case["noise"] == "contract":
        inputs["mapping"] = "poly32"
    return {"id": case["id"], "comment": case["comment"], "inputs": inputs, "expected": expected}


def generate() -> list[dict]:
    from . import model as R
    util = {"id": "skill-utilities", "comment": "the page's module global utilities: max(0, log(16) - log(i+1)), "
            "i < 30, math.log (our reading), f64, divided by its numpy sum; members 15..29 get weight 0",
            "inputs": {"kind": "skill-utilities", "size": R.GLOBAL_POPULATION},
            "expected": {"utilities": _f64s(R.utilities())}}
    return [util] + [_vector(c) for c in _cases()]


def _targets() -> dict:
    from esverify.rng import backend_targets
    return {label: name for label, name, device in backend_targets() if device != "cuda"}


def check_sizes(vector: dict) -> list[str]:
    """Sizes the vector declares that disagree with its expected values (lengths only; empty when consistent)."""
    x, exp = vector["inputs"], vector["expected"]
    if x.get("kind") == "skill-utilities":
        n = len(exp.get("utilities", {}).get("values", []))
        return [] if x.get("size") == n == P.GLOBAL_POPULATION else [f"utilities: size {x.get('size')!r}, {n} values"]
    if x.get("kind") != KIND:
        return [f"unknown kind {x.get('kind')!r}"]
    out, numel, n = [], len(x["params"]["values"]), x.get("population")
    for g, gen in enumerate(x["generations"]):
        if len(gen["rewards"]["values"]) != n:
            out.append(f"generation {g} has {len(gen['rewards']['values'])} rewards, the population is {n!r}")
        for field, want in ((f"g{g}.model", numel), (f"g{g}.params", numel), (f"g{g}.z", n)):
            got = len(exp[field]["values"]) if field in exp else None
            if got != want:
                out.append(f"{field} has {got} values, want {want}")
    return out


def recompute(vector: dict, backend: str) -> dict:
    """run_skill_loop on CPU with noise backend `backend` (a label of backend_targets) and the prescribed rewards."""
    from . import loop as S
    from esverify.es.numerics import NAME_DTYPES
    from esverify.goldens.es_area import tensor_from_bits
    targets = _targets()
    if backend not in targets:
        raise ValueError(f"skill-sample backend {backend!r} is unknown or not available here; "
                         f"available: {sorted(targets)}")
    problems = check_sizes(vector)
    if problems:
        raise ValueError(f"vector {vector['id']!r} is inconsistent: {problems[0]}")
    x = vector["inputs"]
    if x["kind"] == "skill-utilities":
        return {"utilities": _f64s(P.utilities())}
    flat = tensor_from_bits(x["params"], (len(x["params"]["values"]),), "cpu")
    if flat.dtype != NAME_DTYPES[x["dtype"]]:
        raise ValueError(f"vector {vector['id']!r}: params are {x['params']['format']}, dtype says {x['dtype']}")
    rewards = [f64_from_bits(g["rewards"]).tolist() for g in x["generations"]]
    calls = iter([r for gen in rewards for r in gen])
    contract = x["noise"] == "contract"
    out = S.run_skill_loop(flat, generations=len(rewards), population=x["population"],
                           sigma=float(f64_from_bits(x["sigma"])[0]), lr=float(f64_from_bits(x["lr"])[0]),
                           seed_base=x["seed_base"], noise=x["noise"], mapping=x.get("mapping", "poly32"),
                           backend=targets[backend] if contract else None, reward=lambda v: next(calls))
    got = {}
    for rec in out["tape"]:
        g = rec["generation"]
        got[f"g{g}.model"] = encode(rec["model"])
        got[f"g{g}.z"] = _f64s(rec["z"])
        got[f"g{g}.params"] = encode(rec["params"])
    return got


AREA = Area(name="skill-sample", version=P.VERSION, version_constant=P.PROFILE.version_constant,
            generate=generate, backends=lambda: list(_targets()), recompute=recompute, check_sizes=check_sizes)
