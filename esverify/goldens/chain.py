"""Chained Monte Carlo ES vectors (kind ``es-chain``): hundreds of steps, each feeding the next.

One vector per numerics profile (the profile registry, `esverify.es.profiles.PROFILES`;
docs/goldens.md, *Chained Monte Carlo vectors*), registered by the area that pins
the profile. It runs ITERATIONS iterations on one f32, one f16 and one bf16
parameter; each iteration perturbs and restores every member (population
POPULATION, the member's reward computed from its perturbed parameters), then
updates with those rewards: every iteration's output is the next one's input,
so a rounding fault anywhere is carried to the end, as in the cryptographic
validation programmes' Monte Carlo tests (NIST ACVP).

- Inputs: the config (as an es-run vector's), the layout, the initial
  parameters as a rule (element k of slot s is rd_dt of element k of the
  poly32 gaussian stream of ``init_seed + s``), the iteration count.
- Reward of a member: ``math.fsum`` of its perturbed parameters' values
  (every element of every slot, widened exactly to f64): exact and
  language-neutral.
- Expected: ``trace`` (one u64 per iteration: the first 8 bytes, big-endian,
  of the SHA-256 of the state after that iteration's update, every slot's
  bits little-endian in slot order), ``final.sha256`` (the whole SHA-256 of
  the final state) and checkpoints ``it<k>.<slot>`` (the first CHECKPOINT_VALUES
  values of each slot after iterations 0, ITERATIONS/2 and ITERATIONS-1).
- A mismatch is located (`locate`): the first iteration whose trace differs,
  then, by running the chain again to that iteration on the checked backend
  and on a second one (which must reproduce the golden trace), the first slot
  and element that differ, both values and the ulp distance.

The expected values come from esverify's trainer (`esverify.es.Trainer`) on CPU
with the numba noise backend (numpy when numba is missing: every backend gives the
same bits, which the gate itself checks): the trainer is pinned against the
straight-line reference `esverify.es.reference` by the es-run vectors, bit for bit
on small tensors; these vectors pin it, and every other backend and implementation,
at scale. Generation also counts how often the profile's double-rounding kinds are
reached (`count_kinds`) and writes the counts in the comment.
"""
from __future__ import annotations

import dataclasses
import hashlib
import math

import numpy as np

from .. import bits
from .compare import encode, encode_ints, row

KIND = "es-chain"
ITERATIONS = 200
POPULATION = 2
#: (name, shape, dtype): f16 and bf16 slots large enough that a 1-in-14,000 rounding is met many times
LAYOUT = [("w32", (8, 32), "f32"), ("w16", (2048,), "f16"), ("wb", (2048,), "bf16")]
CHECKPOINT_VALUES = 8
INIT_SEED = 2029


def checkpoints(iterations: int) -> list[int]:
    return sorted({0, iterations // 2, iterations - 1})


def _config(profile: str) -> dict:
    return {"profile": profile, "mapping": "poly32", "scheme": "iid", "population": POPULATION,
            "sigma": 0.01, "alpha": 0.005, "shaping": "zscore", "antithetic": False, "restore": "regenerate",
            "anchor_decay": "none", "anchor_lambda": 0.0, "seed": 0xC0FFEE + 29}


def _numel(shape) -> int:
    return int(np.prod(shape, dtype=np.int64)) if len(shape) else 1


def initial_params(x: dict) -> list[np.ndarray]:
    """The vector's initial parameters as numpy arrays of their dtypes (the rule in the module docstring)."""
    from ..es.reference import NP_DTYPES
    from ..rng import gaussian
    out = []
    for s, p in enumerate(x["params"]):
        values = np.asarray(gaussian(int(x["init_seed"], 16) + s, _numel(p["shape"]), 0, "poly32", backend="numpy"),
                            dtype=np.float32)
        out.append(values.astype(NP_DTYPES[p["dtype"]]).reshape(p["shape"]))
    return out


def reward(perturbed) -> float:
    """math.fsum of every value of every slot (numpy arrays or torch tensors), widened exactly to f64."""
    parts = []
    for p in perturbed:
        a = p.detach().to("cpu").double().numpy() if hasattr(p, "detach") else np.asarray(p, dtype=np.float64)
        parts.append(a.reshape(-1))
    return math.fsum(np.concatenate(parts).tolist())


def state_bytes(params) -> bytes:
    """Every slot's bit patterns, little-endian, in slot order (numpy arrays of f32/f16/bf16 bits)."""
    return b"".join(np.ascontiguousarray(a).reshape(-1).view(f"<u{a.dtype.itemsize}").tobytes() for a in params)


def _as_numpy(t):
    """A torch tensor of f32/f16/bf16 as a numpy array of the same dtype and bits (ml_dtypes for bf16)."""
    import torch
    from ..es.reference import NP_DTYPES
    name = {torch.float32: "f32", torch.float16: "f16", torch.bfloat16: "bf16"}[t.dtype]
    signed = t.detach().to("cpu").contiguous().view(torch.int32 if name == "f32" else torch.int16).numpy()
    return signed.view(NP_DTYPES[name]).copy()


class Recorder:
    """The expected fields, built as the chain runs (trace, checkpoints, final digest)."""

    def __init__(self, x: dict):
        self.x, self.trace, self.fields, self.states = x, [], {}, {}
        self.marks = set(checkpoints(x["iterations"]))

    def record(self, it: int, params: list) -> None:
        h = hashlib.sha256(state_bytes(params)).digest()
        self.trace.append(int.from_bytes(h[:8], "big"))
        if it in self.marks:
            for p, a in zip(self.x["params"], params):
                self.fields[f"it{it}.{p['name']}"] = encode(a.reshape(-1)[:CHECKPOINT_VALUES])
        if it == self.x["iterations"] - 1:
            self.fields["final.sha256"] = encode_ints([int.from_bytes(h[8 * k: 8 * k + 8], "big") for k in range(4)],
                                                      "u64")

    def result(self) -> dict:
        return {"trace": encode_ints(self.trace, "u64"), **self.fields}


def _trainer(x: dict, noise_backend: str, device: str, profile=None):
    import torch
    from ..es import Config, Trainer
    from .es_area import config_from_inputs
    from ..es.numerics import NAME_DTYPES
    tensors = []
    for p, a in zip(x["params"], initial_params(x)):
        raw = a.view(np.int32 if p["dtype"] == "f32" else np.int16).copy()
        tensors.append(torch.from_numpy(raw).view(NAME_DTYPES[p["dtype"]]).reshape(p["shape"]).to(device))
    tr = Trainer([(p["name"], t) for p, t in zip(x["params"], tensors)], Config(**config_from_inputs(x["config"])),
                 backend=noise_backend)
    if profile is not None:
        tr.profile = profile
    return tr, tensors


def run(x: dict, noise_backend: str, device: str, stop: int | None = None, profile=None) -> tuple[dict, list]:
    """Run the chain with the trainer; (expected fields, the state after iteration `stop` or the last)."""
    tr, tensors = _trainer(x, noise_backend, device, profile)
    rec = Recorder(x)
    last = x["iterations"] - 1 if stop is None else stop
    state = None
    for it in range(last + 1):
        rewards = []
        for member in range(x["config"]["population"]):
            tr.perturb(member)
            rewards.append(reward(tensors))
            tr.restore(member)
        tr.update(rewards)
        state = [_as_numpy(t) for t in tensors]
        rec.record(it, state)
    return rec.result(), state


def label_target(label: str) -> tuple[str, str]:
    """(rng backend name, device) of the backend label `label` ("torch-cpu", "numba", ...); ValueError naming
    the labels available here when it is unknown or unavailable."""
    from ..rng import backend_targets
    targets = {lab: (name, device or "cpu") for lab, name, device in backend_targets()}
    if label not in targets:
        raise ValueError(f"backend {label!r} is unknown or not available here; available: {sorted(targets)}")
    return targets[label]


def recompute(vector: dict, backend: str) -> dict:
    """The vector's expected fields recomputed by the trainer on `backend` (an rng backend label)."""
    return run(vector["inputs"], *label_target(backend))[0]


def reference_label(backend: str) -> str:
    """A backend other than the checked one, to locate against (torch-cpu, or numba when checking it)."""
    from ..rng import backend_targets
    labels = [lab for lab, _, _ in backend_targets() if lab != backend and lab != "torch-cuda"]
    return "torch-cpu" if "torch-cpu" in labels else labels[0]


def first_iteration(vector: dict, got: dict) -> int | None:
    want = vector["expected"]["trace"]["values"]
    have = got.get("trace", {}).get("values", [])
    for it, w in enumerate(want):
        if it >= len(have) or have[it] != w:
            return it
    return None


def located_rows(area: str, backend: str, vector: dict, it: int, want: list, have: list, detail: str) -> list:
    """Rows for the first differing element of the state after iteration `it` (want: the reference's)."""
    for p, a, b in zip(vector["inputs"]["params"], want, have):
        fmt = p["dtype"]
        ua = np.ascontiguousarray(a).reshape(-1).view(f"<u{a.dtype.itemsize}").astype(np.uint64)
        ub = np.ascontiguousarray(b).reshape(-1).view(f"<u{b.dtype.itemsize}").astype(np.uint64)
        if ua.shape != ub.shape:
            return [row(area, backend, vector["id"], f"it{it}.{p['name']}",
                        detail=f"state of {ub.size} values where the reference has {ua.size}; {detail}")]
        diff = np.flatnonzero(ua != ub)
        if diff.size:
            i = int(diff[0])
            ulp = bits.ulp_distance(ua[i:i + 1], ub[i:i + 1], fmt)[0]
            return [row(area, backend, vector["id"], f"it{it}.{p['name']}", i, bits.describe(int(ua[i]), fmt),
                        bits.describe(int(ub[i]), fmt), None if ulp is None else int(ulp), "mismatch",
                        f"first iteration and element of the chain that differ ({diff.size} of {ua.size} values of "
                        f"{p['name']} differ there); {detail}")]
    return [row(area, backend, vector["id"], f"it{it}", detail=f"the trace differs at iteration {it} but no "
                f"value of the state does: {detail}")]


def locate(area: str, vector: dict, backend: str, got: dict) -> list | None:
    """The first iteration and element where `backend`'s chain differs (None: not an es-chain vector)."""
    if vector["inputs"].get("kind") != KIND:
        return None
    it = first_iteration(vector, got)
    if it is None:
        return None
    ref = reference_label(backend)
    ref_fields, want = run(vector["inputs"], *label_target(ref), stop=it)
    if ref_fields["trace"]["values"] != vector["expected"]["trace"]["values"][:it + 1]:
        return None      # the second backend does not reproduce the golden either: keep the compared rows
    _, have = run(vector["inputs"], *label_target(backend), stop=it)
    return located_rows(area, backend, vector, it, want, have, f"located against {ref}")


def check_sizes(vector: dict) -> list[str]:
    """A trace of one value per iteration, bounded iterations and parameter sizes (before computing)."""
    x, exp = vector["inputs"], vector["expected"]
    out = []
    if not isinstance(x.get("iterations"), int) or not 1 <= x["iterations"] <= 10_000:
        return [f"iterations must be an integer in [1, 10000], got {x.get('iterations')!r}"]
    if len(exp.get("trace", {}).get("values", [])) != x["iterations"]:
        out.append(f"trace has {len(exp.get('trace', {}).get('values', []))} values for {x['iterations']} iterations")
    numel = sum(_numel(p["shape"]) for p in x["params"])
    if numel > 1 << 20:
        out.append(f"{numel} parameter elements, over the 2**20 a chain vector may hold")
    if x["config"]["population"] > 64:
        out.append(f"population {x['config']['population']} over the 64 a chain vector may hold")
    return out


# -- generation -------------------------------------------------------------------
def inputs(profile: str, iterations: int = ITERATIONS, layout=LAYOUT) -> dict:
    from .es_area import config_inputs
    return {"kind": KIND, "config": config_inputs(_config(profile)), "iterations": iterations,
            "init_seed": f"0x{INIT_SEED:016x}",
            "params": [{"name": n, "shape": list(s), "dtype": d} for n, s, d in layout]}


def _round_once(exact, dtype):
    """f64 -> dtype rounded once to nearest even: round to odd in f32, then to the dtype (exact)."""
    import torch
    f = exact.float()
    back = f.double()
    inexact = back != exact
    b = f.view(torch.int32)
    b = torch.where(inexact & (back.abs() > exact.abs()), b - 1, b)
    b = torch.where(inexact, b | 1, b)
    return b.view(torch.float32).to(dtype)


def counting_profile(profile, counts: dict):
    """`profile` with its perturb and apply kernels wrapped to count, per dtype, the steps where rounding
    the exact f64 product once to the dtype gives another bit than rounding it to f32 first.

    The products are those of docs/numerics.md §3's es-at-scale lines: perturb's rd_dt(eps) x rd32(s),
    the update's acc x rd32(alpha / N) (both exact in f64); for a profile whose lines differ (a fused
    step, a scale in two roundings) the count is that of a porter who would compute these products
    and round them once. They differ about once in 14,000 f16 products. Generation only: the wrapped
    kernels write the profile's own bits.
    """
    import torch
    names = {torch.float16: "f16", torch.bfloat16: "bf16"}

    def count(kind, dtype, p64):
        key = (kind, names[dtype])
        differs = _round_once(p64, dtype) != p64.float().to(dtype)
        counts[key] = counts.get(key, 0) + int(differs.sum())
        counts[(kind, "products")] = counts.get((kind, "products"), 0) + p64.numel()

    def perturb(theta, eps, s, rule, first, numel, out):
        if theta.dtype in names:
            count("perturb/restore", theta.dtype, eps.to(theta.dtype).double() * float(np.float32(s)))
        return profile.perturb(theta, eps, s, rule, first, numel, out)

    def apply(theta, acc, scale, rule, first, numel, out):
        if theta.dtype in names and isinstance(scale, float):
            count("update", theta.dtype, acc.double() * float(np.float32(scale)))
        return profile.apply(theta, acc, scale, rule, first, numel, out)
    return dataclasses.replace(profile, perturb=perturb, apply=apply)


def _noise_backend() -> str:
    try:
        import numba  # noqa: F401
        return "numba"
    except ImportError:
        return "numpy"


def vectors(profile: str) -> list[dict]:
    """The chain vector of `profile` (a name of the profile registry), expected from the trainer."""
    from ..es.profiles import get_profile
    x = inputs(profile)
    expected, _ = run(x, _noise_backend(), "cpu")
    counts: dict = {}
    counted, _ = run(x, _noise_backend(), "cpu", profile=counting_profile(get_profile(profile), counts))
    if counted != expected:
        raise AssertionError("the counting kernels changed a bit of the chain")
    said = "; ".join(f"{kind} {dt}: {counts.get((kind, dt), 0)}" for kind in ("perturb/restore", "update")
                     for dt in ("f16", "bf16"))
    comment = (f"{profile}: {x['iterations']} chained iterations (perturb and restore of {POPULATION} members, "
               f"rewards = fsum of the perturbed parameters, zscore update), each feeding the next, on "
               f"{', '.join(f'{n} {d}{list(s)}' for n, s, d in LAYOUT)}; pinned by the SHA-256 of the state after "
               f"every iteration (trace), of the final state, and checkpoints at iterations "
               f"{checkpoints(x['iterations'])}. Products whose f64 value rounds to another f16/bf16 bit once than "
               f"through f32 (counted at generation among {counts.get(('update', 'products'), 0)} update and "
               f"{counts.get(('perturb/restore', 'products'), 0)} perturb/restore products): {said}")
    return [{"id": f"chain-{profile}-{x['iterations']}-iterations", "comment": comment, "inputs": x,
             "expected": expected}]


# -- registration -----------------------------------------------------------------
def with_chain(area):
    """`area` plus the chain vector of the profile it pins (its name in the profile registry).

    The area's own generate, recompute and check_sizes are kept for its other kinds; es-chain vectors
    are generated, recomputed (on the area's backends), size-checked and located here. An area whose
    name is not a registered profile is returned unchanged.
    """
    from ..es.profiles import PROFILES
    if area.name not in PROFILES:
        return area
    own_generate, own_recompute, own_sizes, own_locate = area.generate, area.recompute, area.check_sizes, area.locate

    def generate():
        return own_generate() + vectors(area.name)

    def recompute_(vector, backend):
        if vector["inputs"].get("kind") != KIND:
            return own_recompute(vector, backend)
        if backend not in area.backends():
            raise ValueError(f"{area.name} backend {backend!r} is unknown or not available here")
        problems = check_sizes(vector)
        if problems:
            raise ValueError(f"vector {vector['id']!r} is inconsistent: {problems[0]}")
        return recompute(vector, backend)

    def sizes(vector):
        if vector["inputs"].get("kind") == KIND:
            return check_sizes(vector)
        return own_sizes(vector) if own_sizes is not None else []

    def locate_(vector, backend, got):
        if vector["inputs"].get("kind") == KIND:
            return locate(area.name, vector, backend, got)
        return own_locate(vector, backend, got) if own_locate is not None else None

    return dataclasses.replace(area, generate=generate, recompute=recompute_, check_sizes=sizes, locate=locate_)
