"""The golden area of a Trainer profile (`trainer_area`; es-at-scale's and es-awd's): update goldens
(docs/numerics.md §2-§5). A reference declares its area in its own package (its `golden_area.py`), with its own
es-run cases (`extra_cases`); this module names no reference and asks the profile what it needs.

Each vector is a short training run: a config, initial parameters of
several dtypes (as bit arrays), and per iteration the member to perturb
and the rewards. Expected values come from the straight-line reference
(`esverify.es.reference`, scalar RNG noise, exact-rational fma): after
perturb(member), after its restore, the shaped coefficients (f64) and the
parameters after each update, every slot as a bit array. es-awd vectors
hold rule `cpu` values.

Generation needs the reference, hence ml_dtypes (a test extra): it is
imported only by `generate`; `recompute` (the gate's check) needs only
numpy and torch. `recompute` runs the real `Trainer` on each target of
`esverify.rng.backend_targets()` (numpy, numba, torch-cpu: CPU parameters
with that noise backend; torch-cuda, es-at-scale only since it is
device-independent, when a GPU is present). Each area's version is its profile's version.

Two more kinds pin what short runs cannot:
- ``shaping`` (the file of the area declared with ``shaping=True``, es-at-scale's; docs/numerics.md §2 is the
  same for every profile):
  z-score coefficients, numpy's mean and std, and centered ranks of one
  reward set, at populations on both sides of every boundary of numpy's
  pairwise summation (2-9: the plain loop below 8; 15-17, 30-33 inside
  the 8-accumulator block; 127-130: the 128-element block; 255-257 and
  1000: the recursive split), each with four reward sets (wide dynamic
  range, near-equal, negative, mixed magnitudes). A numpy whose summation
  order changes fails the gate here.
- ``seed-schedule`` (both files): the member seeds each reference's
  loop draws from numpy (``default_rng((seed or 42) + i [+ 1]).integers(0,
  2**30)``, docs/references.md §5), expected from PCG64 named explicitly,
  recomputed through ``default_rng``: a numpy whose stream changes fails.
- subnormal ``es-run`` vectors (both files): parameters, noise products
  sigma*eps and alpha/N*acc, and results in each dtype's subnormal range
  (f32 and bf16 below 2**-126, f16 below 2**-14), so a process that
  flushes subnormals to zero cannot pass.
"""
from __future__ import annotations

import numpy as np

from ..es.profiles import get_profile
from .area import Area
from .compare import decode, encode, encode_ints

U64 = (1 << 64) - 1
_UINT = {"f32": np.uint32, "f16": np.uint16, "bf16": np.uint16, "f64": np.uint64}


def f64_array(x: float) -> dict:
    return encode(np.array([x], dtype=np.float64))


def _f64s(xs) -> dict:
    return encode(np.asarray(xs, dtype=np.float64))


def f64_from_bits(array: dict) -> np.ndarray:
    if array["format"] != "f64":
        raise ValueError(f"expected an f64 bit array, got {array['format']}")
    return decode(array).view(np.float64)


def tensor_from_bits(array: dict, shape, device):
    """A torch tensor of the array's float format with exactly its bits."""
    import torch
    from ..es.numerics import NAME_DTYPES
    fmt = array["format"]
    signed = np.int32 if fmt == "f32" else np.int16
    raw = decode(array).astype(_UINT[fmt]).view(signed).copy()
    return torch.from_numpy(raw).view(NAME_DTYPES[fmt]).reshape(shape).to(device)


def config_inputs(cfg: dict) -> dict:
    out = {}
    for k, v in cfg.items():
        if k in ("sigma", "alpha", "anchor_lambda"):
            out[k] = f64_array(v)
        elif k == "seed":
            out[k] = f"0x{v:016x}"
        else:
            out[k] = v
    return out


def config_from_inputs(x: dict) -> dict:
    out = dict(x)
    for k in ("sigma", "alpha", "anchor_lambda"):
        out[k] = float(f64_from_bits(x[k])[0])
    out["seed"] = int(x["seed"], 16)
    return out


# (name, shape, dtype): odd sizes, a 0-dim tensor, and two equal-size slots (35 elements)
MIXED = [("w", (5, 7), "f32"), ("b", (), "f16"), ("v", (35,), "bf16"), ("h", (33,), "f16")]
SAME = {d: [("w", (5, 7), d), ("b", (), d), ("v", (35,), d), ("h", (70,), d)] for d in ("f32", "f16", "bf16")}


def _params(layout, seed: int, scale: float = 1.0) -> list[np.ndarray]:
    from ..es import reference as R
    rng = np.random.default_rng(seed)
    return [np.asarray(rng.standard_normal(shape) * scale).astype(np.float32).astype(R.NP_DTYPES[dt])
            for _, shape, dt in layout]


def es_run_case(profile: str, id_: str, comment: str, layout, iterations, scale: float = 1.0, set_elements=None,
                **cfg) -> dict:
    """One ``es-run`` case of Trainer profile `profile`: its config (Config fields `cfg`), initial parameters of
    `layout` drawn from a seed of the id's length (times `scale`; `set_elements` {(slot, index): value} set
    by hand) and `iterations` [(member, rewards)]. A reference adds its own cases with it (`trainer_area`)."""
    from ..es import Config
    config = Config(profile=profile, **cfg).to_dict()
    params = _params(layout, 7 + len(id_), scale)
    for (slot, index), value in (set_elements or {}).items():   # hand-chosen elements (the fma vectors)
        params[slot].reshape(-1)[index] = value
    return {"id": id_, "comment": comment, "config": config, "layout": layout, "params": params,
            "iterations": iterations}


def sample_rewards(n: int, seed: int) -> list[float]:
    """n rewards (f64, rounded to 6 decimals) from numpy's default_rng(seed), for a case's iterations."""
    return np.random.default_rng(seed).standard_normal(n).round(6).tolist()


def _cases(profile: str, extra_cases, odd_sizes_note: str) -> list[dict]:
    base = dict(sigma=0.05, alpha=0.02, population=4, chunk_elements=16)
    _case = es_run_case
    two = [(3, sample_rewards(4, 1)), (0, sample_rewards(4, 2))]
    out = []
    for scheme in ("iid", "correlated"):
        for mapping in ("poly32", "libm64"):
            out.append(_case(profile, f"zscore-two-iterations-{scheme}-{mapping}",
                             f"z-score shaping over two iterations, mixed dtypes (f32, 0-dim f16, bf16, f16) with "
                             f"two equal-size slots (35 elements: identical noise under correlated), {scheme}, "
                             f"{mapping}, chunks of 16 elements", MIXED, two, scheme=scheme, mapping=mapping, **base))
    for dt in ("f32", "f16", "bf16"):
        out.append(_case(profile, f"zscore-{dt}-odd-sizes", f"z-score, every slot {dt}: 35, 0-dim, 35 and 70 "
                         f"elements{odd_sizes_note}", SAME[dt],
                         [(1, sample_rewards(4, 3))], scheme="iid", **base))
    ties = [(5, [1.0, 3.0, 1.0, -2.0, 3.0, 0.5]), (2, [0.0] * 6)]
    out.append(_case(profile, "centered-ranks-ties", "centered ranks with tied rewards (ties break by member "
                     "index), then all-equal rewards (full spread, a mean-zero step)", MIXED, ties,
                     **{**base, "population": 6, "shaping": "centered_ranks"}))
    out.append(_case(profile, "antithetic-zscore", "antithetic pairs: member 5 perturbs with -sigma on member 4's "
                     "noise; the update folds D_k = C_2k - C_2k+1 with divisor N = 6", MIXED,
                     [(5, sample_rewards(6, 4)), (2, sample_rewards(6, 5))], **{**base, "population": 6, "antithetic": True}))
    out.append(_case(profile, "raw-rewards", "shaping none: the rewards are the coefficients", MIXED,
                     [(1, [0.25, -1.5, 2.0, 0.125])], **{**base, "shaping": "none"}))
    for decay, lam in (("l1", 0.5), ("l2", 3.0)):
        out.append(_case(profile, f"anchor-decay-{decay}", f"anchored weight decay {decay}, lambda {lam}, after each "
                         "of two updates, anchor = the initial parameters", MIXED, two,
                         **{**base, "alpha": 0.1, "anchor_decay": decay, "anchor_lambda": lam}))
    # subnormal parameters, products and results: f32/bf16 below 2**-126 (~1.2e-38), f16 below 2**-14
    for dt, tiny in (("f32", 1e-39), ("f16", 1e-5), ("bf16", 1e-39)):
        out.append(_case(profile, f"subnormal-{dt}", f"every slot {dt} with subnormal parameters (scale {tiny:g}), "
                         f"sigma = alpha = {tiny:g}: perturbations sigma*eps and updates alpha/N*acc are subnormal "
                         "in this dtype; a process flushing subnormals to zero (FTZ/DAZ) fails here", SAME[dt],
                         [(1, sample_rewards(4, 8)), (2, sample_rewards(4, 9))], scale=tiny,
                         **{**base, "sigma": tiny, "alpha": tiny, "scheme": "iid"}))
    if extra_cases is not None:
        out += extra_cases(profile, dict(base))   # the reference's own cases, after the shared ones
    return out


def _run_reference(case: dict) -> dict:
    from ..es import reference as R
    cfg, params = case["config"], [p.copy() for p in case["params"]]
    anchor = [p.copy() for p in params]
    expected = {}
    for it, (member, rewards) in enumerate(case["iterations"]):
        perturbed = R.perturb(cfg, params, it, member)
        restored = ([p.copy() for p in params] if cfg["restore"] == "snapshot"
                    else R.perturb(cfg, perturbed, it, member, restore=True))
        params, coeffs = R.update(cfg, restored, it, rewards, anchor=anchor)
        _record(expected, it, perturbed, restored, coeffs, params, case["layout"])
    return expected


def _record(expected, it, perturbed, restored, coeffs, updated, layout):
    for k, (name, _, _) in enumerate(layout):
        expected[f"it{it}.perturb.{name}"] = encode(perturbed[k])
        expected[f"it{it}.restore.{name}"] = encode(restored[k])
        expected[f"it{it}.update.{name}"] = encode(updated[k])
    expected[f"it{it}.coefficients"] = _f64s(coeffs)


def _vector(case: dict) -> dict:
    inputs = {"kind": "es-run", "config": config_inputs(case["config"]),
              "params": [{"name": name, "shape": list(shape), "dtype": dt, "bits": encode(p)}
                         for (name, shape, dt), p in zip(case["layout"], case["params"])],
              "iterations": [{"member": m, "rewards": _f64s(r)} for m, r in case["iterations"]]}
    return {"id": case["id"], "comment": case["comment"], "inputs": inputs, "expected": _run_reference(case)}


#: populations on both sides of every boundary of numpy's pairwise summation
SHAPING_POPULATIONS = [*range(2, 10), 15, 16, 17, 30, 31, 32, 33, 127, 128, 129, 130, 255, 256, 257, 1000]


def _reward_sets(n: int) -> dict[str, np.ndarray]:
    """Four f64 reward sets of n members, deterministic per (n, set)."""
    def rng(k):
        return np.random.default_rng([n, k, 2026])
    r = rng(0)
    wide = r.choice([-1.0, 1.0], n) * 10.0 ** r.uniform(-8, 8, n)            # 16 decades, both signs
    near = 0.1 * (1.0 + rng(1).integers(-4, 5, n) * 2.0 ** -50)             # a few ulps around 0.1
    negative = -rng(2).uniform(1.0, 100.0, n)
    r = rng(3)
    mixed = r.standard_normal(n) * r.choice([1e-3, 1.0, 1e3, 1e6], n)
    return {"wide": wide, "near-equal": near, "negative": negative, "mixed": mixed}


#: populations above numpy's 8192-element buffer (one reward set each: the files stay small). For a
#: contiguous f64 array numpy's pairwise rule runs over the whole array, not per 8192-element buffer
#: (docs/CONTRACT.md §7); these pin that
LARGE_SHAPING_POPULATIONS = [8194, 10000]


def _shaping_vectors() -> list[dict]:
    from ..es import reference as R
    out = []
    sets = [(n, _reward_sets(n).items()) for n in SHAPING_POPULATIONS]
    sets += [(n, [("wide", _reward_sets(n)["wide"])]) for n in LARGE_SHAPING_POPULATIONS]
    for n, named in sets:
        for name, r in named:
            r = np.ascontiguousarray(r, dtype=np.float64)
            out.append({"id": f"shaping-n{n}-{name}",
                        "comment": f"z-score (numpy's own mean and std, docs/numerics.md §2) and centered ranks of {n} "
                                   f"{name} rewards: pins numpy's pairwise-summation order at population {n}",
                        "inputs": {"kind": "shaping", "population": n, "rewards": _f64s(r)},
                        "expected": {"zscore.coefficients": _f64s(R.shape(r, "zscore")),
                                     "zscore.mean": f64_array(float(np.mean(r))), "zscore.std": f64_array(float(np.std(r))),
                                     "centered_ranks.coefficients": _f64s(R.shape(r, "centered_ranks"))}})
    return out


#: (seed, count, iterations) of the seed-schedule vectors: the default seed (0 stands for 42), a
#: population of 1, the default population 30, a 64-member one, and seeds past 2**32 and 2**63
SCHEDULE_CASES = [(0, 30, [0, 1, 2, 3]), (7, 1, [0, 1, 1000]), (12345, 64, [0, 5]),
                  ((1 << 40) + 3, 8, [0, 1]), ((1 << 63) + 11, 4, [0, 2])]


def _schedule_vectors(profile: str) -> list[dict]:
    """The reference's numpy seed schedule (docs/references.md §5): the member seeds its loop draws.

    Expected values are drawn from numpy's PCG64 named explicitly (what
    ``default_rng`` is today); the gate recomputes through
    `esverify.es.schedule.reference_seeds`, i.e. through ``default_rng``, so a
    numpy whose default bit generator, seeding or ``integers`` stream changes fails here.
    """
    from ..es import schedule
    out = []
    for seed, count, iterations in SCHEDULE_CASES:
        expected = {}
        for i in iterations:
            base = (seed or schedule.DEFAULT_GLOBAL_SEED) + i + schedule.FIRST_ITERATION[profile]
            draw = np.random.Generator(np.random.PCG64(base)).integers(0, schedule.SEED_BOUND, size=count,
                                                                      dtype=np.int64)
            expected[f"it{i}.member_seeds"] = encode_ints(draw.tolist(), "u64")
        out.append({"id": f"seed-schedule-seed-{seed}-n{count}",
                    "comment": f"the {profile} loop's member seeds at global seed {seed} (0 stands for 42), "
                               f"{count} per iteration: numpy default_rng((seed or 42) + i"
                               f"{' + 1' if schedule.FIRST_ITERATION[profile] else ''}).integers(0, 2**30, "
                               f"size={count}, dtype=int64), docs/references.md §5; fails when numpy's stream changes",
                    "inputs": {"kind": "seed-schedule", "schedule": profile, "seed": f"0x{seed:016x}",
                               "count": count, "iterations": list(iterations)},
                    "expected": expected})
    return out


def _recompute_schedule(vector: dict) -> dict:
    """The schedule through esverify's own path (numpy's default_rng); backend-independent."""
    from ..es import schedule
    x = vector["inputs"]
    return {f"it{i}.member_seeds": encode_ints(schedule.reference_seeds(x["schedule"], int(x["seed"], 16), i,
                                                                        x["count"]), "u64")
            for i in x["iterations"]}


def param_inputs(layout, arrays) -> list[dict]:
    return [{"name": name, "shape": list(shape), "dtype": dt, "bits": encode(p)}
            for (name, shape, dt), p in zip(layout, arrays)]


def _signed_zero_anchor(layout, seed: int) -> tuple[list, list]:
    """(params, anchor) whose first 8 elements pair every sign of zero with tiny deltas (docs/numerics.md §5).

    anchor -0, theta -0 / +0 / -tiny / +tiny; anchor +0, theta -0 / +0 / -tiny / +tiny: l1 sets each
    delta to a zero whose sign follows IEEE (sign(d) * +0, then + theta0), so -0 survives only where
    sign(d) is negative and the anchor is -0; an implementation writing theta0 or +0 for "decayed to
    the anchor" differs there. The other elements are ordinary random values.
    """
    from ..es import reference as R
    params, anchor = _params(layout, seed), _params(layout, seed + 1)
    theta0 = np.array([-0.0, -0.0, -0.0, -0.0, 0.0, 0.0, 0.0, 0.0])
    tiny = 1e-4
    theta = np.array([-0.0, 0.0, -tiny, tiny, -0.0, 0.0, -tiny, tiny])
    for (_, _, dt), p, a in zip(layout, params, anchor):
        if p.size >= 8:
            p.reshape(-1)[:8] = theta.astype(np.float32).astype(R.NP_DTYPES[dt])
            a.reshape(-1)[:8] = theta0.astype(np.float32).astype(R.NP_DTYPES[dt])
    return params, anchor


#: (decay, lambda, alpha): l1 large enough to zero the tiny deltas, l2 a plain shrink
DECAY_CASES = [("l1", 0.5, 0.1), ("l1", 3.0, 0.1), ("l2", 3.0, 0.1)]
ZERO_LAYOUT = {d: [("w", (37,), d), ("b", (), d)] for d in ("f32", "f16", "bf16")}


def _decay_vectors(profile: str) -> list[dict]:
    """`decay` kind: anchored weight decay alone (the protocol's `decay` op), with the signed-zero anchor."""
    from ..es import Config, reference as R
    out = []
    for dt, layout in ZERO_LAYOUT.items():
        for k, (decay, lam, alpha) in enumerate(DECAY_CASES):
            config = Config(profile=profile, anchor_decay=decay, anchor_lambda=lam, alpha=alpha).to_dict()
            params, anchor = _signed_zero_anchor(layout, 31 + k)
            got = [R.anchor_decay(p, a, decay, alpha * lam) for p, a in zip(params, anchor)]
            out.append({"id": f"decay-{decay}-lambda-{lam:g}-{dt}",
                        "comment": f"anchored weight decay {decay} alone (lambda {lam:g}, alpha {alpha:g}, {dt}; "
                                   "docs/numerics.md §5): theta -0/+0/-tiny/+tiny against anchors -0 and +0 pin "
                                   "the sign of each zero the decay writes",
                        "inputs": {"kind": "decay", "config": config_inputs(config),
                                   "params": param_inputs(layout, params), "anchor": param_inputs(layout, anchor)},
                        "expected": {f"decay.{name}": encode(g) for (name, _, _), g in zip(layout, got)}})
    return out


def _step_vectors(profile: str) -> list[dict]:
    """`step` kind: perturb and restore every member in order, then update (the protocol's `step` op)."""
    from ..es import Config, reference as R
    base = dict(sigma=0.05, alpha=0.02, population=4, scheme="iid")
    cases = [("step-zscore", {}, 0), ("step-antithetic-snapshot", {"antithetic": True, "restore": "snapshot"}, 3),
             ("step-l1-decay", {"anchor_decay": "l1", "anchor_lambda": 0.5, "alpha": 0.1}, 1)]
    out = []
    for id_, extra, iteration in cases:
        cfg = Config(profile=profile, **{**base, **extra}).to_dict()
        params = _params(MIXED, 50 + iteration)
        anchor = [p.copy() for p in params]
        rewards = sample_rewards(cfg["population"], 60 + iteration)
        cur = [p.copy() for p in params]
        for m in range(cfg["population"]):
            perturbed = R.perturb(cfg, cur, iteration, m)
            if cfg["restore"] != "snapshot":
                cur = R.perturb(cfg, perturbed, iteration, m, restore=True)
        cur, coeffs = R.update(cfg, cur, iteration, rewards, anchor=anchor)
        expected = {f"step.{name}": encode(p) for (name, _, _), p in zip(MIXED, cur)}
        expected["coefficients"] = _f64s(coeffs)
        out.append({"id": id_, "comment": f"one step at iteration {iteration} (docs/numerics.md §6): perturb, "
                                          f"restore ({cfg['restore']}) every member in order, then update "
                                          f"({', '.join(f'{k}={v}' for k, v in extra.items()) or 'defaults'}); "
                                          "the anchor is the initial parameters",
                    "inputs": {"kind": "step", "config": config_inputs(cfg), "iteration": iteration,
                               "params": param_inputs(MIXED, params), "rewards": _f64s(rewards)},
                    "expected": expected})
    return out


def _generate(profile: str, extra_cases, shaping: bool, odd_sizes_note: str):
    def generate():
        out = [_vector(c) for c in _cases(profile, extra_cases, odd_sizes_note)]
        if shaping:
            out += _shaping_vectors()
        return out + _schedule_vectors(profile) + _decay_vectors(profile) + _step_vectors(profile)
    return generate


def _recompute_decay(vector: dict, device: str) -> dict:
    """esverify's apply_anchor_decay_ on the vector's params and anchor."""
    from ..es import apply_anchor_decay_
    x = vector["inputs"]
    cfg = config_from_inputs(x["config"])
    params = [tensor_from_bits(p["bits"], tuple(p["shape"]), device) for p in x["params"]]
    anchor = [tensor_from_bits(p["bits"], tuple(p["shape"]), device) for p in x["anchor"]]
    apply_anchor_decay_(params, anchor, cfg["anchor_decay"], cfg["anchor_lambda"], cfg["alpha"])
    return {f"decay.{p['name']}": encode(t) for p, t in zip(x["params"], params)}


def _recompute_step(vector: dict, noise_backend: str, device: str) -> dict:
    """Trainer.step at the vector's iteration, anchored on the initial parameters."""
    from ..es import Config, Trainer
    x = vector["inputs"]
    cfg = config_from_inputs(x["config"])
    tensors = [tensor_from_bits(p["bits"], tuple(p["shape"]), device) for p in x["params"]]
    tr = Trainer([(p["name"], t) for p, t in zip(x["params"], tensors)], Config(**cfg), backend=noise_backend)
    tr.iteration = x["iteration"]
    rewards = f64_from_bits(x["rewards"]).tolist()
    stats = tr.step(lambda member: rewards[member])
    got = {f"step.{p['name']}": encode(t) for p, t in zip(x["params"], tensors)}
    got["coefficients"] = _f64s(stats["coefficients"])
    return got


def _recompute_shaping(vector: dict) -> dict:
    """The trainer's own shaping path (Trainer.coefficients) for one reward set; backend-independent."""
    import torch
    from ..es import Config, Trainer
    x = vector["inputs"]
    rewards = f64_from_bits(x["rewards"])
    got = {}
    for shaping in ("zscore", "centered_ranks"):
        tr = Trainer([torch.zeros(1)], Config(population=x["population"], shaping=shaping))
        coeffs, stats = tr.coefficients(rewards)
        got[f"{shaping}.coefficients"] = _f64s(coeffs)
        if shaping == "zscore":
            got["zscore.mean"], got["zscore.std"] = f64_array(stats["mean"]), f64_array(stats["std"])
    return got


def numel_of(shape) -> int:
    return int(np.prod(shape, dtype=np.int64)) if len(shape) else 1


def check_sizes(vector: dict) -> list[str]:
    """Sizes the vector declares that disagree with its expected values (empty when consistent).

    Cheap (lengths only), so a hostile vector asking for 2e7 elements costs nothing before it is refused.
    """
    x, exp, out = vector["inputs"], vector["expected"], []

    def length(field):
        return len(exp[field]["values"]) if field in exp else None

    if x.get("kind") == "shaping":
        n = x.get("population")
        if not isinstance(n, int) or len(x.get("rewards", {}).get("values", [])) != n:
            out.append(f"population {n!r} but {len(x.get('rewards', {}).get('values', []))} rewards")
        for field in ("zscore.coefficients", "centered_ranks.coefficients"):
            if length(field) != n:
                out.append(f"{field} has {length(field)} values, the population is {n!r}")
        return out
    if x.get("kind") == "seed-schedule":
        n, its = x.get("count"), x.get("iterations")
        if not isinstance(n, int) or not isinstance(its, list) or set(exp) != {f"it{i}.member_seeds" for i in its}:
            return [f"iterations {its!r} do not match the expected fields {sorted(exp)}"]
        return [f"it{i}.member_seeds has {length(f'it{i}.member_seeds')} values, count is {n}"
                for i in its if length(f"it{i}.member_seeds") != n]
    if x.get("kind") in ("decay", "step"):
        prefix = x["kind"]
        for p in x.get("params", []):
            numel = numel_of(p["shape"])
            if len(p["bits"]["values"]) != numel or length(f"{prefix}.{p['name']}") != numel:
                out.append(f"param {p['name']!r} has shape {p['shape']} but {len(p['bits']['values'])} values, "
                           f"of which {length(prefix + '.' + p['name'])} are expected")
        for a, p in zip(x.get("anchor", []), x.get("params", [])):
            if a["shape"] != p["shape"] or len(a["bits"]["values"]) != numel_of(a["shape"]):
                out.append(f"anchor {a['name']!r} does not match param {p['name']!r}")
        if prefix == "step":
            n = x["config"].get("population")
            if len(x["rewards"]["values"]) != n or length("coefficients") != n:
                out.append(f"step: {len(x['rewards']['values'])} rewards, {length('coefficients')} coefficients, "
                           f"the population is {n!r}")
        return out
    if x.get("kind") != "es-run":
        return [f"unknown kind {x.get('kind')!r}"]
    population = x["config"].get("population")
    for p in x["params"]:
        numel = numel_of(p["shape"])
        if len(p["bits"]["values"]) != numel:
            out.append(f"param {p['name']!r} has shape {p['shape']} but {len(p['bits']['values'])} values")
        for it in range(len(x["iterations"])):
            for stage in ("perturb", "restore", "update"):
                got = length(f"it{it}.{stage}.{p['name']}")
                if got != numel:
                    out.append(f"it{it}.{stage}.{p['name']} has {got} values, the shape {p['shape']} has {numel}")
    for it, step in enumerate(x["iterations"]):
        if len(step["rewards"]["values"]) != population:
            out.append(f"iteration {it} has {len(step['rewards']['values'])} rewards, the population is "
                       f"{population!r}")
        if length(f"it{it}.coefficients") != population:
            out.append(f"it{it}.coefficients has {length(f'it{it}.coefficients')} values, the population is "
                       f"{population!r}")
    return out


def _targets(profile: str | None) -> dict[str, tuple[str, str]]:
    """label -> (noise backend, device), labels as `esverify.rng.backend_targets()`.

    The goldens hold the values of the profile's CPU rule, so an area is
    recomputed on the targets whose device takes that rule: every target
    for a device-independent profile (one rule everywhere, es-at-scale),
    the CPU ones for a profile with a rule of its own on CUDA (es-awd)
    (docs/numerics.md §3). profile None: every target (the shaping vectors
    do not depend on a profile).
    """
    from ..rng import backend_targets
    rule_for = None if profile is None else get_profile(profile).rule_for
    return {label: (name, device or "cpu") for label, name, device in backend_targets()
            if rule_for is None or rule_for(device or "cpu") == rule_for("cpu")}


def _backends(profile: str):
    return lambda: list(_targets(profile))


def recompute(vector: dict, backend: str) -> dict:
    """Run the Trainer on `backend` (a label of `esverify.rng.backend_targets()`: the noise
    backend and the device of the parameters) and return the expected fields."""
    from ..es import Config, Trainer
    x = vector["inputs"]
    problems = check_sizes(vector)
    if problems:
        raise ValueError(f"vector {vector['id']!r} is inconsistent: {problems[0]}")
    if x["kind"] == "shaping":
        if backend not in _targets(None):
            raise ValueError(f"es backend {backend!r} is unknown or not available here")
        return _recompute_shaping(vector)
    if x["kind"] == "seed-schedule":
        if backend not in _targets(x["schedule"]):
            raise ValueError(f"es backend {backend!r} is unknown or not available here")
        return _recompute_schedule(vector)
    targets = _targets(x["config"]["profile"])
    if backend not in targets:
        raise ValueError(f"es backend {backend!r} is unknown or not available here; available: {sorted(targets)}")
    noise_backend, device = targets[backend]
    if x["kind"] == "decay":
        return _recompute_decay(vector, device)
    if x["kind"] == "step":
        return _recompute_step(vector, noise_backend, device)
    cfg = config_from_inputs(x["config"])
    tensors = [tensor_from_bits(p["bits"], tuple(p["shape"]), device) for p in x["params"]]
    layout = [(p["name"], tuple(p["shape"]), p["dtype"]) for p in x["params"]]
    tr = Trainer([(p["name"], t) for p, t in zip(x["params"], tensors)], Config(**cfg), backend=noise_backend)
    got = {}
    for it, step in enumerate(x["iterations"]):
        member = step["member"]
        tr.perturb(member)
        perturbed = [t.clone() for t in tensors]
        tr.restore(member)
        restored = [t.clone() for t in tensors]
        stats = tr.update(f64_from_bits(step["rewards"]).tolist())
        _record(got, it, perturbed, restored, stats["coefficients"], tensors, layout)
    return got


def libm_trace(vector: dict, backend: str) -> set:
    """(field, element) pairs of an es vector that depend on a libm64 noise value of `backend` that
    differs from the scalar reference's: the only places a one-ulp difference is a libm-divergence."""
    from ..rng import gaussian
    x = vector["inputs"]
    targets = _targets(x["config"]["profile"]) if isinstance(x.get("config"), dict) else {}
    if backend not in targets:
        return set()
    noise_backend = targets[backend][0]
    return trace_libm(vector, lambda seed, numel: np.asarray(gaussian(seed, numel, 0, "libm64",
                                                                       backend=noise_backend), np.float32))


def trace_libm(vector: dict, draw) -> set:
    """The traced (field, element) pairs for an implementation whose libm64 stream is `draw(seed, numel)`.

    Every (iteration, member, slot) stream the vector uses is drawn by `draw` and by the scalar
    reference (esverify.rng.scalar); a differing element i of slot s at iteration j allows element i
    of that slot's fields from iteration j on. Coefficients never depend on the noise; other kinds
    and poly32 vectors have no libm values at all.
    """
    from ..rng import scalar
    x = vector["inputs"]
    if x.get("kind") not in ("es-run", "step") or x["config"].get("mapping") != "libm64":
        return set()
    cfg = config_from_inputs(x["config"])
    steps = [x["iteration"]] if x["kind"] == "step" else list(range(len(x["iterations"])))
    allowed = set()
    for j, iteration in enumerate(steps):
        for slot, p in enumerate(x["params"]):
            numel = numel_of(p["shape"])
            for member in range(cfg["population"]):
                m = member - member % 2 if cfg["antithetic"] else member
                ss = scalar.stream_seed(scalar.member_seed(cfg["seed"], iteration, cfg["population"], m), slot,
                                        cfg["scheme"])
                want = np.asarray(scalar.gaussian(ss, numel, 0, "libm64"), np.float32).view(np.uint32)
                have = np.asarray(draw(ss, numel), np.float32).reshape(-1).view(np.uint32)
                for i in np.flatnonzero(want != have).tolist():
                    if x["kind"] == "step":
                        allowed.add((f"step.{p['name']}", i))
                    for later in range(j, len(steps)):
                        for stage in ("perturb", "restore", "update"):
                            allowed.add((f"it{later}.{stage}.{p['name']}", i))
    return allowed


def trainer_area(profile, version_constant: str, *, extra_cases=None, shaping: bool = False,
                 odd_sizes_note: str = "") -> Area:
    """The golden area of the Trainer profile `profile` (a `Profile`; the area takes its name and version);
    a reference adds its chained Monte Carlo vector with esverify.goldens.chain.with_chain.

    version_constant: where that version lives, quoted by the gate's messages. A reference whose profile
    the Trainer runs declares its area as ``trainer_area(PROFILE, "<module>.VERSION")``. extra_cases:
    None, or (profile name, the shared cases' base config dict) -> the reference's own es-run cases
    (`es_run_case`), appended after the shared ones. shaping: the file also holds the ``shaping`` vectors
    (one area holds them: docs/numerics.md §2 is every profile's). odd_sizes_note: text appended to the
    comment of the shared odd-sizes vectors (a committed file's comments are part of its bytes, so an area
    keeps the note its file was generated with)."""
    name = profile.name
    return Area(name=name, version=profile.version, version_constant=version_constant,
                generate=_generate(name, extra_cases, shaping, odd_sizes_note), backends=_backends(name), recompute=recompute,
                check_sizes=check_sizes, libm_trace=libm_trace)
