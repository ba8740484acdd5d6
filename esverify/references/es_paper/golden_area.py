"""The `es-paper` golden area: the paper's scripts' loop on our side (docs/references.md §6; docs/numerics.md §3).

Design record:
- ``paper-loop`` vectors are whole short runs of the scripts' ``main()``:
  initial parameters (bit arrays), the constants (POPULATION_SIZE, SIGMA,
  ALPHA, initial_seed, gpu_threads), the variant (plain = correlated,
  ``_iid``), the noise (contract or native) and a reward. Expected values
  come from the straight-line reference (esverify.references.es_paper.model.loop:
  numpy roundings, scalar-RNG contract noise); native noise is torch's own
  generator by definition, so native vectors draw it with ``torch.randn``
  and hold CPU values (bitwise only on torch CPU of the same version).
  The gate recomputes through esverify.references.es_paper.loop.run_paper_loop on
  every CPU target of esverify.rng.backend_targets() (the vectors hold
  rule `cpu` values; rule `cuda` divides by a reciprocal, so no CUDA target).
- The reward must be language-neutral and exact: prompt k of a copy with
  parameters x (every slot widened to f64, concatenated in slot order) is
  ``math.fsum([bias_k] + [w_k,i * x_i for i])`` (f64 products, one
  correctly rounded sum); the member reward is the script's
  ``sum(prompt rewards) / number of prompts``.
- ``seed-schedule`` vectors pin numpy's legacy stream: expected from
  numpy's global generator itself (``np.random.seed`` then
  ``np.random.randint``, state saved and restored around it), recomputed
  through the private ``RandomState`` of esverify.references.es_paper.schedule.
- The area's version is the profile's (esverify.references.es_paper.profile.VERSION).
"""
from __future__ import annotations

import math

import numpy as np

from . import profile as es_paper
from esverify.goldens import chain
from esverify.goldens.area import Area
from esverify.goldens.compare import decode, encode, encode_ints
from esverify.goldens.es_area import f64_array, f64_from_bits, numel_of, param_inputs, tensor_from_bits

MIXED = [("w", (5, 3), "f32"), ("b", (), "f16"), ("v", (9,), "bf16"), ("h", (6,), "f16")]
SAME = {d: [("w", (4, 3), d), ("b", (), d), ("v", (9,), d)] for d in ("f32", "f16", "bf16")}
PROMPTS = 3


def _initial(layout, seed: int, scale: float = 1.0) -> list:
    from esverify.es import reference as R
    rng = np.random.default_rng(seed)
    return [np.asarray(rng.standard_normal(shape) * scale).astype(np.float32).astype(R.NP_DTYPES[dt])
            for _, shape, dt in layout]


def prompt_rewards_of(weights: np.ndarray, bias: np.ndarray):
    """The vectors' reward: arrays (numpy or torch, slot order) -> PROMPTS f64 rewards (module docstring)."""
    def rewards(arrays):
        x = np.concatenate([_as_f64(a) for a in arrays]) if arrays else np.zeros(0)
        return [math.fsum([float(bias[k])] + (weights[k] * x).tolist()) for k in range(len(bias))]
    return rewards


def _as_f64(a) -> np.ndarray:
    if hasattr(a, "detach"):        # a torch tensor: widen exactly through f32
        import torch
        return a.detach().to(torch.float32).cpu().numpy().astype(np.float64).reshape(-1)
    return np.asarray(a).astype(np.float32).astype(np.float64).reshape(-1)


def _case(id_, comment, layout, *, population=5, iterations=2, sigma=0.01, alpha=0.05, initial_seed=33,
          gpu_threads=1, iid=False, noise="contract", mapping="poly32", scale=1.0, constant=None) -> dict:
    params = _initial(layout, 100 + len(id_), scale)
    total = sum(numel_of(shape) for _, shape, _ in layout)
    rng = np.random.default_rng(200 + len(id_))
    if constant is None:
        weights, bias = rng.standard_normal((PROMPTS, total)), rng.standard_normal(PROMPTS).round(3)
    else:   # every member gets the same reward: normalisation at std ~ 0
        weights, bias = np.zeros((PROMPTS, total)), np.full(PROMPTS, constant)
    return {"id": id_, "comment": comment, "layout": layout, "params": params, "weights": weights, "bias": bias,
            "run": dict(iterations=iterations, population=population, sigma=sigma, alpha=alpha,
                        initial_seed=initial_seed, gpu_threads=gpu_threads, iid=iid, noise=noise,
                        mapping=mapping)}


def _cases() -> list[dict]:
    out = []
    for noise in ("contract", "native"):
        for iid in (False, True):
            for g in (1, 3):
                script = "the _iid scripts (seed + k per parameter)" if iid else "the plain scripts (correlated)"
                out.append(_case(f"loop-{noise}-{'iid' if iid else 'correlated'}-threads{g}",
                                 f"{script}, {noise} noise, mixed dtypes (f32, 0-dim f16, bf16, f16), population 5 "
                                 f"in batches of gpu_threads = {g}"
                                 + (": members 3 and 4 run on copies that carry the restore drift of members 0 "
                                    "and 1" if g > 1 else ": one copy serves every member")
                                 + ", two iterations", MIXED, gpu_threads=g, iid=iid, noise=noise))
    for dt in ("f32", "f16", "bf16"):
        out.append(_case(f"loop-contract-{dt}", f"every parameter {dt}, contract noise (plain scripts), 6 members "
                         "on 2 copies: the accumulator, its division by N and alpha * update all round to "
                         f"{dt}", SAME[dt], population=6, gpu_threads=2))
    for dt, tiny in (("f32", 1e-39), ("f16", 1e-6), ("bf16", 1e-39)):
        out.append(_case(f"loop-subnormal-{dt}", f"every parameter {dt} with subnormal values (scale {tiny:g}), "
                         f"sigma = {tiny:g}, alpha = {tiny:g}: perturbations and steps are subnormal in {dt}; a "
                         "process flushing subnormals to zero fails here", SAME[dt], sigma=tiny, alpha=tiny,
                         scale=tiny, population=4, gpu_threads=2))
    out.append(_case("loop-paper-defaults-equal-rewards", "the paper's constants (population 30, sigma 0.001, "
                     "alpha 0.0005, initial seed 33, gpu_threads 4) with every member's reward 0.1: numpy's f32 "
                     "mean of equal values is not exact, so the coefficients (r - mean) / (std + 1e-8) are not "
                     "zero (normalisation at std ~ 0)", MIXED, population=30, sigma=0.001, alpha=0.0005,
                     gpu_threads=4, constant=0.1, iterations=1))
    out.append(_case("loop-native-paper-defaults", "the paper's constants with torch's own noise (native, plain "
                     "scripts), 30 members on 4 copies, one iteration", MIXED, population=30, sigma=0.001,
                     alpha=0.0005, gpu_threads=4, noise="native", iterations=1))
    return out


def _native_draw(iid: bool):
    import torch
    from esverify.es import reference as R
    from esverify.es.numerics import NAME_DTYPES

    def draw(seed, slot, shape, name):
        g = torch.Generator(device="cpu")
        g.manual_seed(seed + slot if iid else seed)
        noise = torch.randn(tuple(shape), generator=g, dtype=NAME_DTYPES[name])
        return noise.to(torch.float32).numpy().astype(R.NP_DTYPES[name])
    return draw


def _contract_draw(iid: bool, mapping: str):
    from . import model   # numpy and ml_dtypes: generation only

    def draw(seed, slot, shape, name):
        return model.contract_noise(seed, slot, numel_of(shape), iid, mapping, name).reshape(shape)
    return draw


def _record(tape, layout, to_np) -> dict:
    expected = {}
    for i, (seeds, r, norm) in enumerate(zip(tape["seeds"], tape["rewards"], tape["normalised"])):
        expected[f"it{i}.seeds"] = encode_ints(seeds, "u64")
        expected[f"it{i}.rewards"] = encode(np.asarray(r, np.float32))
        expected[f"it{i}.normalised"] = encode(np.asarray(norm, np.float32))
    for (name, _, _), p in zip(layout, tape["params"]):
        expected[f"final.{name}"] = encode(to_np(p))
    for j, copy in enumerate(tape["copies_before_update"]):
        for (name, _, _), p in zip(layout, copy):
            expected[f"before_update.copy{j}.{name}"] = encode(to_np(p))
    return expected


def _vector(case: dict) -> dict:
    from . import model
    run = case["run"]
    draw = _native_draw(run["iid"]) if run["noise"] == "native" else _contract_draw(run["iid"], run["mapping"])
    tape = model.loop([p.copy() for p in case["params"]], iterations=run["iterations"],
                      population=run["population"], sigma=run["sigma"], alpha=run["alpha"],
                      initial_seed=run["initial_seed"], gpu_threads=run["gpu_threads"],
                      prompt_rewards=prompt_rewards_of(case["weights"], case["bias"]),
                      dataset_size=PROMPTS, draw=draw)
    inputs = {"kind": "paper-loop", "params": param_inputs(case["layout"], case["params"]),
              "iterations": run["iterations"], "population": run["population"], "sigma": f64_array(run["sigma"]),
              "alpha": f64_array(run["alpha"]), "initial_seed": run["initial_seed"], "gpu_threads": run["gpu_threads"],
              "iid": run["iid"], "noise": run["noise"], "mapping": run["mapping"] if run["noise"] == "contract"
              else None, "reward": {"prompts": PROMPTS, "bias": encode(np.asarray(case["bias"], np.float64)),
                                    "weights": encode(np.asarray(case["weights"], np.float64).reshape(-1))}}
    return {"id": case["id"], "comment": case["comment"], "inputs": inputs,
            "expected": _record(tape, case["layout"], np.asarray)}


SCHEDULE_CASES = [(33, 30, 3), (0, 7, 2), (2 ** 32 - 1, 4, 2), (12345, 1000, 1)]


def _schedule_vectors() -> list[dict]:
    """numpy's legacy global generator itself (state saved and restored): what the scripts draw."""
    out = []
    for seed, count, iterations in SCHEDULE_CASES:
        state = np.random.get_state()
        try:
            np.random.seed(seed)
            draws = [np.random.randint(0, 2 ** 30, size=count, dtype=np.int64).tolist() for _ in range(iterations)]
        finally:
            np.random.set_state(state)
        out.append({"id": f"seed-schedule-seed-{seed}-n{count}",
                    "comment": f"the scripts' seeds: np.random.seed({seed}) once, then per iteration "
                               f"np.random.randint(0, 2**30, size={count}, dtype=np.int64) on numpy's legacy "
                               "global MT19937 (docs/references.md §6); fails when numpy's legacy stream changes",
                    "inputs": {"kind": "seed-schedule", "initial_seed": seed, "count": count,
                               "iterations": iterations},
                    "expected": {f"it{i}.seeds": encode_ints(d, "u64") for i, d in enumerate(draws)}})
    return out


def generate() -> list[dict]:
    return [_vector(c) for c in _cases()] + _schedule_vectors()


def _targets() -> list[str]:
    from esverify.rng import backend_targets
    return [label for label, _, device in backend_targets() if device != "cuda"]


def _noise_backend(label: str) -> str:
    from esverify.rng import backend_targets
    return {lab: name for lab, name, _ in backend_targets()}[label]


def check_sizes(vector: dict) -> list[str]:
    """Sizes the vector declares that disagree with its expected values (cheap: lengths only)."""
    x, exp = vector["inputs"], vector["expected"]

    def length(field):
        return len(exp[field]["values"]) if field in exp else None

    if x.get("kind") == "seed-schedule":
        n, its = x.get("count"), x.get("iterations")
        if not isinstance(n, int) or not isinstance(its, int) or set(exp) != {f"it{i}.seeds" for i in range(its)}:
            return [f"iterations {its!r} do not match the expected fields {sorted(exp)}"]
        return [f"it{i}.seeds has {length(f'it{i}.seeds')} values, count is {n}" for i in range(its)
                if length(f"it{i}.seeds") != n]
    if x.get("kind") != "paper-loop":
        return [f"unknown kind {x.get('kind')!r}"]
    out = []
    n, its, g = x.get("population"), x.get("iterations"), x.get("gpu_threads")
    if not all(isinstance(v, int) and v >= 1 for v in (n, its, g)):
        return [f"population {n!r}, iterations {its!r} and gpu_threads {g!r} must be ints >= 1"]
    total = 0
    for p in x["params"]:
        numel = numel_of(p["shape"])
        total += numel
        fields = [f"final.{p['name']}"] + [f"before_update.copy{j}.{p['name']}" for j in range(g)]
        if len(p["bits"]["values"]) != numel or any(length(f) != numel for f in fields):
            out.append(f"param {p['name']!r} has shape {p['shape']} but its values or expected fields disagree")
    for i in range(its):
        for f in ("seeds", "rewards", "normalised"):
            if length(f"it{i}.{f}") != n:
                out.append(f"it{i}.{f} has {length(f'it{i}.{f}')} values, the population is {n}")
    reward = x.get("reward", {})
    k = reward.get("prompts")
    if (not isinstance(k, int) or k < 1 or len(reward.get("bias", {}).get("values", [])) != k
            or len(reward.get("weights", {}).get("values", [])) != k * total):
        out.append(f"reward: {k!r} prompts need {k!r} biases and {k!r} x {total} weights")
    return out


def recompute(vector: dict, backend: str) -> dict:
    """run_paper_loop (or the private RandomState) on `backend`, a CPU label of backend_targets()."""
    from .schedule import seed_stream
    if backend not in _targets():
        raise ValueError(f"es-paper backend {backend!r} is unknown or not available here; available: {_targets()}")
    problems = check_sizes(vector)
    if problems:
        raise ValueError(f"vector {vector['id']!r} is inconsistent: {problems[0]}")
    x = vector["inputs"]
    if x["kind"] == "seed-schedule":
        stream = seed_stream(x["initial_seed"], x["count"])
        return {f"it{i}.seeds": encode_ints(next(stream), "u64") for i in range(x["iterations"])}
    from .loop import run_paper_loop
    tensors = [tensor_from_bits(p["bits"], tuple(p["shape"]), "cpu") for p in x["params"]]
    k = x["reward"]["prompts"]
    weights = decode(x["reward"]["weights"]).view(np.float64).reshape(k, -1)
    bias = f64_from_bits(x["reward"]["bias"])
    contract = x["noise"] == "contract"
    tape = run_paper_loop([p["name"] for p in x["params"]], tensors, iterations=x["iterations"],
                          population=x["population"], sigma=float(f64_from_bits(x["sigma"])[0]),
                          alpha=float(f64_from_bits(x["alpha"])[0]), initial_seed=x["initial_seed"],
                          gpu_threads=x["gpu_threads"], iid=x["iid"], noise=x["noise"],
                          mapping=x["mapping"] if contract else "poly32",
                          backend=_noise_backend(backend) if contract else None,
                          prompt_rewards=prompt_rewards_of(weights, bias), dataset_size=k, record_copies=True)
    layout = [(p["name"], tuple(p["shape"]), p["dtype"]) for p in x["params"]]
    return _record(tape, layout, lambda t: t)


AREA = Area(name="es-paper", version=es_paper.VERSION, version_constant="esverify.references.es_paper.profile.VERSION",
            generate=generate, backends=_targets, recompute=recompute, check_sizes=check_sizes)
AREA = chain.with_chain(AREA)   # the chained MC vector of the es-paper profile
