"""The `es-at-scale` and `es-awd` golden areas: update goldens (issue 3 part 3; docs/numerics.md §2-§5).

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
"""
from __future__ import annotations

import numpy as np

from ..es.profiles import es_at_scale, es_awd
from .area import Area
from .compare import decode, encode

U64 = (1 << 64) - 1
_UINT = {"f32": np.uint32, "f16": np.uint16, "bf16": np.uint16, "f64": np.uint64}


def _f64(x: float) -> dict:
    return encode(np.array([x], dtype=np.float64))


def _f64s(xs) -> dict:
    return encode(np.asarray(xs, dtype=np.float64))


def _f64_from_bits(array: dict) -> np.ndarray:
    if array["format"] != "f64":
        raise ValueError(f"expected an f64 bit array, got {array['format']}")
    return decode(array).view(np.float64)


def _tensor_from_bits(array: dict, shape, device):
    """A torch tensor of the array's float format with exactly its bits."""
    import torch
    from ..es.numerics import NAME_DTYPES
    fmt = array["format"]
    signed = np.int32 if fmt == "f32" else np.int16
    raw = decode(array).astype(_UINT[fmt]).view(signed).copy()
    return torch.from_numpy(raw).view(NAME_DTYPES[fmt]).reshape(shape).to(device)


def _config_inputs(cfg: dict) -> dict:
    out = {}
    for k, v in cfg.items():
        if k in ("sigma", "alpha", "anchor_lambda"):
            out[k] = _f64(v)
        elif k == "seed":
            out[k] = f"0x{v:016x}"
        else:
            out[k] = v
    return out


def _config_from_inputs(x: dict) -> dict:
    out = dict(x)
    for k in ("sigma", "alpha", "anchor_lambda"):
        out[k] = float(_f64_from_bits(x[k])[0])
    out["seed"] = int(x["seed"], 16)
    return out


# (name, shape, dtype): odd sizes, a 0-dim tensor, and two equal-size slots (35 elements)
MIXED = [("w", (5, 7), "f32"), ("b", (), "f16"), ("v", (35,), "bf16"), ("h", (33,), "f16")]
SAME = {d: [("w", (5, 7), d), ("b", (), d), ("v", (35,), d), ("h", (70,), d)] for d in ("f32", "f16", "bf16")}


def _params(layout, seed: int) -> list[np.ndarray]:
    from ..es import reference as R
    rng = np.random.default_rng(seed)
    return [np.asarray(rng.standard_normal(shape)).astype(np.float32).astype(R.NP_DTYPES[dt])
            for _, shape, dt in layout]


def _case(profile: str, id_: str, comment: str, layout, iterations, **cfg) -> dict:
    from ..es import Config
    config = Config(profile=profile, **cfg).to_dict()
    params = _params(layout, 7 + len(id_))
    return {"id": id_, "comment": comment, "config": config, "layout": layout, "params": params,
            "iterations": iterations}


def _rewards(n: int, seed: int) -> list[float]:
    return np.random.default_rng(seed).standard_normal(n).round(6).tolist()


def _cases(profile: str) -> list[dict]:
    base = dict(sigma=0.05, alpha=0.02, population=4, chunk_elements=16)
    two = [(3, _rewards(4, 1)), (0, _rewards(4, 2))]
    out = []
    for scheme in ("iid", "correlated"):
        for mapping in ("poly32", "libm64"):
            out.append(_case(profile, f"zscore-two-iterations-{scheme}-{mapping}",
                             f"z-score shaping over two iterations, mixed dtypes (f32, 0-dim f16, bf16, f16) with "
                             f"two equal-size slots (35 elements: identical noise under correlated), {scheme}, "
                             f"{mapping}, chunks of 16 elements", MIXED, two, scheme=scheme, mapping=mapping, **base))
    for dt in ("f32", "f16", "bf16"):
        out.append(_case(profile, f"zscore-{dt}-odd-sizes", f"z-score, every slot {dt}: 35, 0-dim, 35 and 70 "
                         f"elements (70 crosses es-awd's 32-element tail at 64)", SAME[dt],
                         [(1, _rewards(4, 3))], scheme="iid", **base))
    ties = [(5, [1.0, 3.0, 1.0, -2.0, 3.0, 0.5]), (2, [0.0] * 6)]
    out.append(_case(profile, "centered-ranks-ties", "centered ranks with tied rewards (ties break by member "
                     "index), then all-equal rewards (full spread, a mean-zero step)", MIXED, ties,
                     **{**base, "population": 6, "shaping": "centered_ranks"}))
    out.append(_case(profile, "antithetic-zscore", "antithetic pairs: member 5 perturbs with -sigma on member 4's "
                     "noise; the update folds D_k = C_2k - C_2k+1 with divisor N = 6", MIXED,
                     [(5, _rewards(6, 4)), (2, _rewards(6, 5))], **{**base, "population": 6, "antithetic": True}))
    out.append(_case(profile, "raw-rewards", "shaping none: the rewards are the coefficients", MIXED,
                     [(1, [0.25, -1.5, 2.0, 0.125])], **{**base, "shaping": "none"}))
    for decay, lam in (("l1", 0.5), ("l2", 3.0)):
        out.append(_case(profile, f"anchor-decay-{decay}", f"anchored weight decay {decay}, lambda {lam}, after each "
                         "of two updates, anchor = the initial parameters", MIXED, two,
                         **{**base, "alpha": 0.1, "anchor_decay": decay, "anchor_lambda": lam}))
    if profile == "es-at-scale":
        out.append(_case(profile, "snapshot-restore", "snapshot restore copies the bytes back", MIXED,
                         [(2, _rewards(4, 6))], **{**base, "restore": "snapshot"}))
        out.append(_case(profile, "paper-defaults-population-30", "the paper's defaults: sigma 0.001, alpha = "
                         "sigma/2, population 30, correlated, z-score", MIXED, [(29, _rewards(30, 7))]))
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
    inputs = {"kind": "es-run", "config": _config_inputs(case["config"]),
              "params": [{"name": name, "shape": list(shape), "dtype": dt, "bits": encode(p)}
                         for (name, shape, dt), p in zip(case["layout"], case["params"])],
              "iterations": [{"member": m, "rewards": _f64s(r)} for m, r in case["iterations"]]}
    return {"id": case["id"], "comment": case["comment"], "inputs": inputs, "expected": _run_reference(case)}


def _generate(profile: str):
    return lambda: [_vector(c) for c in _cases(profile)]


def _targets(profile: str) -> dict[str, tuple[str, str]]:
    """label -> (noise backend, device), labels as `esverify.rng.backend_targets()`.

    es-awd goldens hold rule `cpu` values, so that area is recomputed on
    CPU targets only; es-at-scale is device-independent (docs/numerics.md §3).
    """
    from ..rng import backend_targets
    return {label: (name, device or "cpu") for label, name, device in backend_targets()
            if profile == "es-at-scale" or device != "cuda"}


def _backends(profile: str):
    return lambda: list(_targets(profile))


def recompute(vector: dict, backend: str) -> dict:
    """Run the Trainer on `backend` (a label of `esverify.rng.backend_targets()`: the noise
    backend and the device of the parameters) and return the expected fields."""
    from ..es import Config, Trainer
    x = vector["inputs"]
    targets = _targets(x["config"]["profile"])
    if backend not in targets:
        raise ValueError(f"es backend {backend!r} is unknown or not available here; available: {sorted(targets)}")
    noise_backend, device = targets[backend]
    cfg = _config_from_inputs(x["config"])
    tensors = [_tensor_from_bits(p["bits"], tuple(p["shape"]), device) for p in x["params"]]
    layout = [(p["name"], tuple(p["shape"]), p["dtype"]) for p in x["params"]]
    tr = Trainer([(p["name"], t) for p, t in zip(x["params"], tensors)], Config(**cfg), backend=noise_backend)
    got = {}
    for it, step in enumerate(x["iterations"]):
        member = step["member"]
        tr.perturb(member)
        perturbed = [t.clone() for t in tensors]
        tr.restore(member)
        restored = [t.clone() for t in tensors]
        stats = tr.update(_f64_from_bits(step["rewards"]).tolist())
        _record(got, it, perturbed, restored, stats["coefficients"], tensors, layout)
    return got


AREAS = {
    "es-at-scale": Area(name="es-at-scale", version=es_at_scale.VERSION,
                        version_constant="esverify.es.profiles.es_at_scale.VERSION",
                        generate=_generate("es-at-scale"), backends=_backends("es-at-scale"), recompute=recompute),
    "es-awd": Area(name="es-awd", version=es_awd.VERSION, version_constant="esverify.es.profiles.es_awd.VERSION",
                   generate=_generate("es-awd"), backends=_backends("es-awd"), recompute=recompute),
}
