"""The golden area `eggroll`: EGGROLL's low-rank streams and profile (docs/CONTRACT.md §10, docs/numerics.md §9).

Vector kinds (inputs -> expected; every float a bit array):

- ``lowrank-stream-seed``: seed, generation, pairs, layers, and a list of
  [pair, layer] -> ``stream_seeds`` (u64), docs/CONTRACT.md §10.
- ``lowrank-factors``: noise ``contract`` (seed, mapping) or ``native``
  (base_seed), generation, pairs, layers, pair, layer, rank, out, in ->
  ``a`` (f32, r*in row-major), ``b`` (f32, out*r).
- ``lowrank-adapters``: the same noise inputs plus sigma and members ->
  per member ``m<m>.A``, ``m<m>.B`` (f16) and ``m<m>.BA`` (f16, the
  evaluated perturbation).
- ``lowrank-shaping``: F (f64, members x prompts row-major), members,
  prompts, normalize_with_std -> ``f`` (f64), ``std`` (f64), ``d`` (f32).
- ``lowrank-update``: a model (dims), dtype, the vLLM tensors' bits,
  shaped fitness (f64), sigma, lr, rank, es_step, steps_per_adapter,
  chunk_size, scale_lr_in_grad, noise -> every vLLM tensor after one
  update (``w.<vLLM name>``).
- ``lowrank-loop``: the same run settings plus steps and prescribed
  rewards F per step (the reward ignores the weights) -> per step the
  shaped fitness ``s<k>.f`` (f64), the pair differences ``s<k>.d`` (f32)
  and every vLLM tensor ``s<k>.w.<name>``.

Where expected values come from: contract factors from the scalar RNG
reference (`esverify.rng.scalar`); shaping from numpy (what the profile
calls); adapters, updates and loops from this package's torch
implementation, whose kernels ARE the profile's definition (torch.mm /
torch.bmm as the reference calls them, docs/numerics.md §9.4) and whose
native-noise known answers G1-G4 of the real code are tests
(tests/test_eggroll_lowrank.py). Native vectors need torch's CPU
generator (any backend recomputes them the same way); the --impl protocol
has no operation for any kind here (its vectors are `unsupported`).
Recompute: on CPU, with each target of `esverify.rng.backend_targets()`
other than CUDA as the contract noise's backend. The area's version is
the contract area's (`contract.VERSION`); the profile's own version
(`lowrank.VERSION`) moves with it.
"""
from __future__ import annotations

import numpy as np
import torch

from ...goldens.area import Area
from ...goldens.compare import decode, encode, encode_ints
from . import contract as C
from . import lowrank as LR
from . import shapes as S

NAME = "eggroll"
DTYPES = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}
_INT = {"f32": (np.uint32, np.int32), "f16": (np.uint16, np.int16), "bf16": (np.uint16, np.int16)}


def _f64s(xs) -> dict:
    return encode(np.asarray(xs, dtype=np.float64).reshape(-1))


def _f64(array: dict) -> np.ndarray:
    if array["format"] != "f64":
        raise ValueError(f"expected an f64 bit array, got {array['format']}")
    return decode(array).view(np.float64)


def _tensor(array: dict, shape) -> torch.Tensor:
    fmt = array["format"]
    if fmt not in _INT:
        raise ValueError(f"expected f32/f16/bf16 bits, got {fmt}")
    unsigned, signed = _INT[fmt]
    raw = decode(array).astype(unsigned).view(signed).copy()
    return torch.from_numpy(raw).view(DTYPES[fmt]).reshape(tuple(shape))


def _model(dims: dict):
    return S.model_shapes(dims["hidden"], dims["intermediate"], dims["heads"], dims["kv_heads"], dims["head_dim"],
                          dims["layers"])


TINY = {"hidden": 4, "intermediate": 6, "heads": 2, "kv_heads": 1, "head_dim": 2, "layers": 1}
TWO_LAYERS = {"hidden": 8, "intermediate": 12, "heads": 2, "kv_heads": 1, "head_dim": 4, "layers": 2}


# ----------------------------------------------------------------------------- cases

def _noise_inputs(noise: str, seed: int, mapping: str = "poly32") -> dict:
    if noise == "native":
        return {"noise": "native", "base_seed": seed}
    return {"noise": "contract", "seed": f"0x{seed:016x}", "mapping": mapping}


def _source(x: dict, pairs: int, layers: int, backend):
    if x["noise"] == "native":
        return C.factor_source("native", x["base_seed"], pairs, layers)
    return C.factor_source("contract", x.get("base_seed", 0), pairs, layers, seed=int(x["seed"], 16),
                           mapping=x["mapping"], backend=backend)


def _stream_seed_vectors() -> list[dict]:
    out = []
    for id_, seed, gen, pairs, layers, comment in (
            ("stream-seed-small", 7, 3, 4, 14, "the counter (s*P + k)*L + l over every (pair, layer) of a small run"),
            ("stream-seed-wrap", 2**64 - 1, 2**62 + 5, 2**10, 2**7,
             "a generation so large that (s*P + k)*L wraps mod 2**64; seed 2**64 - 1 xor the domain")):
        cells = [[k, l] for k in range(min(pairs, 3)) for l in (0, 1, layers - 1)]
        want = [C.lowrank_stream_seed(seed, gen, pairs, layers, k, l) for k, l in cells]
        out.append({"id": id_, "comment": comment,
                    "inputs": {"kind": "lowrank-stream-seed", "seed": f"0x{seed:016x}", "generation": gen,
                               "pairs": pairs, "layers": layers, "cells": cells},
                    "expected": {"stream_seeds": encode_ints(want, "u64")}})
    return out


def _scalar_factors(x: dict):
    from ...rng import scalar
    stream = C.lowrank_stream_seed(int(x["seed"], 16), x["generation"], x["pairs"], x["layers"], x["pair"],
                                   x["layer"])
    r, o, i = x["rank"], x["out"], x["in"]
    vals = np.array(scalar.gaussian(stream, r * i + o * r, 0, x["mapping"]), dtype=np.float32)
    return vals[:r * i], vals[r * i:]


FACTOR_CASES = [
    ("factors-contract-poly32-r1", "contract", 11, "poly32", 0, 4, 7, 3, 5, 1, 6, 4),
    ("factors-contract-poly32-r2-odd", "contract", 2**63 + 1, "poly32", 5, 2, 7, 1, 6, 2, 3, 5),
    ("factors-contract-poly32-r16", "contract", 12345, "poly32", 1, 8, 14, 7, 13, 16, 4, 6),
    ("factors-contract-libm64-r4", "contract", 99, "libm64", 2, 4, 7, 2, 0, 4, 6, 3),
    ("factors-native-g1", "native", 0, None, 0, 4, 14, 1, 3, 2, 16, 8),
    ("factors-native-g2", "native", 3, None, 1, 2, 7, 0, 0, 2, 4, 4),
]


def _factor_inputs(case) -> dict:
    _, noise, seed, mapping, gen, pairs, layers, pair, layer, rank, out_f, in_f = case
    x = {"kind": "lowrank-factors", "generation": gen, "pairs": pairs, "layers": layers, "pair": pair,
         "layer": layer, "rank": rank, "out": out_f, "in": in_f}
    x.update(_noise_inputs(noise, seed, mapping or "poly32"))
    return x


def _factors(x: dict, backend) -> tuple[torch.Tensor, torch.Tensor]:
    source = _source(x, x["pairs"], x["layers"], backend)
    return source(x["generation"], x["pair"], x["layer"], x["rank"], x["out"], x["in"])


def _factor_vectors() -> list[dict]:
    out = []
    for case in FACTOR_CASES:
        x = _factor_inputs(case)
        if x["noise"] == "contract":
            a, b = _scalar_factors(x)
            comment = (f"contract stream ({x['mapping']}) of generation {x['generation']}, pair {x['pair']}, "
                       f"layer {x['layer']}: a then b, one stream")
        else:
            a, b = (t.numpy().reshape(-1) for t in _factors(x, None))
            known = "G1" if case[0].endswith("g1") else "G2's draw"
            comment = ("native: torch's CPU generator seeded base_seed + P*L*s + L*k + l, two torch.normal "
                       f"draws (known answer {known} of the real code)")
        out.append({"id": case[0], "comment": comment, "inputs": x,
                    "expected": {"a": encode(np.asarray(a, np.float32)), "b": encode(np.asarray(b, np.float32))}})
    return out


ADAPTER_CASES = [
    ("adapters-native-g2", "native", 3, 1, 2, 7, 0, 0, 2, 4, 4, 0.01),
    ("adapters-contract-r1", "contract", 5, 0, 4, 7, 3, 6, 1, 4, 6, 0.001),
    ("adapters-contract-r3-large-sigma", "contract", 6, 2, 2, 7, 1, 4, 3, 6, 5, 0.5),
]


def _adapter_inputs(case) -> dict:
    id_, noise, seed, gen, pairs, layers, pair, layer, rank, out_f, in_f, sigma = case
    x = {"kind": "lowrank-adapters", "generation": gen, "pairs": pairs, "layers": layers, "pair": pair,
         "layer": layer, "rank": rank, "out": out_f, "in": in_f, "sigma": _f64s([sigma]),
         "members": [2 * pair, 2 * pair + 1]}
    x.update(_noise_inputs(noise, seed))
    return x


def _adapters(x: dict, backend) -> dict:
    a, b = _factors(x, backend)
    sigma = float(_f64(x["sigma"])[0])
    got = {}
    for m in x["members"]:
        A, B = LR.adapter_factors(a, b, sigma, x["rank"], m)
        got[f"m{m}.A"], got[f"m{m}.B"] = encode(A), encode(B)
        got[f"m{m}.BA"] = encode(LR.evaluated_perturbation(A, B))
    return got


def _shaping_cases() -> list[tuple]:
    g3 = [[1, 2, 0.5], [0, 3, 0.25], [2, -1, 1], [0.5, 0.5, 0.5]]
    rng = np.random.default_rng([31, 5])
    wide = rng.standard_normal((10, 7)).round(4)
    many = rng.standard_normal((12, 130))
    out = []
    for std in (False, True):
        tag = "std" if std else "plain"
        out.append((f"shaping-g3-{tag}", "known answer G3 of the real code: 4 members, 3 prompts", g3, std))
        out.append((f"shaping-10x7-{tag}", "10 members, 7 prompts, 4-decimal rewards", wide, std))
        out.append((f"shaping-12x130-{tag}", "130 prompts: numpy's pairwise row mean over more than 128 values",
                    many, std))
    return out


def _shaping(x: dict) -> dict:
    F = _f64(x["F"]).reshape(x["members"], x["prompts"])
    f, std = LR.shape_fitness(F, x["normalize_with_std"])
    return {"f": _f64s(f), "std": _f64s([std]), "d": encode(LR.pair_differences(f))}


UPDATE_CASES = [
    # id, dims, dtype, value, rank, N, shaped seed (None: G4's), chunk, scale, noise, seed, es_step, spa, comment
    ("update-g4-r2-f32", TINY, "f32", 0.0, 2, 4, None, None, False, "native", 3, 5, 4, "known answer G4 (r 2, f32)"),
    ("update-g4-r2-bf16", TINY, "bf16", 0.0625, 2, 4, None, None, False, "native", 3, 5, 4,
     "known answer G4 (r 2, bf16): two roundings"),
    ("update-g4-r1-f32", TINY, "f32", 0.0, 1, 4, None, None, False, "native", 3, 5, 4,
     "known answer G4 (r 1, f32): the torch.mm path"),
    ("update-g4-r1-bf16", TINY, "bf16", 0.0625, 1, 4, None, None, False, "native", 3, 5, 4,
     "known answer G4 (r 1, bf16): 3 of 120 elements unchanged"),
    ("update-r2-f16-native", TINY, "f16", 0.0625, 2, 4, None, None, False, "native", 3, 5, 4,
     "G4's run in f16"),
    ("update-r1-chunk3-n16", TWO_LAYERS, "f32", None, 1, 16, 7, 3, False, "native", 0, 0, 1,
     "rank-1 path over 8 pairs in chunks of 3 (3, 3, 2), two decoder layers (L 14)"),
    ("update-r4-chunk3-n16-scale", TWO_LAYERS, "bf16", None, 4, 16, 8, 3, True, "native", 0, 2, 2,
     "batched path, chunks of 3, --scale-lr-in-grad (times rd32(sqrt(16)))"),
    ("update-r16-default-chunk", TINY, "f16", None, 16, 8, 9, None, False, "native", 1, 0, 4,
     "rank above 8: default chunk min(32, P)"),
    ("update-contract-r2-f32", TWO_LAYERS, "f32", None, 2, 8, 10, None, False, "contract", 17, 3, 2,
     "contract noise (poly32), generation 1"),
    ("update-contract-r1-bf16-scale", TINY, "bf16", None, 1, 6, 11, None, True, "contract", 2**40 + 3, 1, 1,
     "contract noise, rank 1, bf16, scaled lr"),
]


def _initial(dims, dtype, value, seed):
    _, vllm = _model(dims)
    if value is not None:
        return S.filled(vllm, DTYPES[dtype], value)
    g = torch.Generator().manual_seed(1000 + seed)
    return {n: (torch.randn(s, generator=g) * 0.02).to(DTYPES[dtype]) for n, s in vllm.items()}


def _update_vector(case) -> dict:
    id_, dims, dtype, value, rank, n, shaped_seed, chunk, scale, noise, seed, step, spa, comment = case
    weights = _initial(dims, dtype, value, shaped_seed or 0)
    shaped = ([0.5, -1.25, 2.0, 0.75] if shaped_seed is None
              else np.random.default_rng([31, shaped_seed]).standard_normal(n).tolist())
    x = {"kind": "lowrank-update", "model": dict(dims), "dtype": dtype, "rank": rank, "population": n,
         "shaped": _f64s(shaped), "sigma": _f64s([0.01 if shaped_seed is None else 0.001]),
         "lr": _f64s([0.05 if shaped_seed is None else 0.002]), "chunk_size": chunk, "scale_lr_in_grad": scale,
         "es_step": step, "steps_per_adapter": spa,
         "weights": {k: encode(v) for k, v in weights.items()}}
    x.update(_noise_inputs(noise, seed))
    vector = {"id": id_, "comment": comment + f"; N {n}, {dtype}", "inputs": x, "expected": {}}
    vector["expected"] = _update(x, None)
    return vector


def _weights_in(x: dict) -> dict:
    _, vllm = _model(x["model"])
    if set(x["weights"]) != set(vllm):
        raise ValueError(f"weights name {sorted(x['weights'])}, the model has {sorted(vllm)}")
    return {n: _tensor(x["weights"][n], vllm[n]) for n in vllm}


def _update(x: dict, backend) -> dict:
    peft, _ = _model(x["model"])
    w = _weights_in(x)
    n = x["population"]
    source = _source(x, n // 2, len(peft), backend)
    LR.apply_update_(w, peft, _f64(x["shaped"]), sigma=float(_f64(x["sigma"])[0]), lr=float(_f64(x["lr"])[0]),
                     rank=x["rank"], generation=x["es_step"] // x["steps_per_adapter"], source=source,
                     chunk=x["chunk_size"], scale_lr_in_grad=x["scale_lr_in_grad"])
    return {f"w.{k}": encode(v) for k, v in w.items()}


LOOP_CASES = [
    ("loop-native-spa2-3steps-std", "native", 5, "f32", 2, 8, 3, 2, True, "three steps across an adapter "
     "generation boundary (steps_per_adapter 2), std normalisation, native noise"),
    ("loop-contract-spa2-3steps-bf16", "contract", 6, "bf16", 1, 8, 3, 2, False, "the same with contract "
     "noise (poly32), rank 1, bf16"),
]


def _loop_vector(case) -> dict:
    id_, noise, seed, dtype, rank, n, steps, spa, std, comment = case
    weights = _initial(TINY, dtype, None, seed)
    rng = np.random.default_rng([31, 100 + seed])
    rewards = [rng.standard_normal((n, 3)).round(3) for _ in range(steps)]
    x = {"kind": "lowrank-loop", "model": dict(TINY), "dtype": dtype, "rank": rank, "population": n,
         "steps": steps, "steps_per_adapter": spa, "normalize_with_std": std, "scale_lr_in_grad": False,
         "chunk_size": None, "sigma": _f64s([0.01]), "lr": _f64s([0.02]),
         "rewards": [{"F": _f64s(F), "prompts": 3} for F in rewards],
         "weights": {k: encode(v) for k, v in weights.items()}}
    x.update(_noise_inputs(noise, seed))
    return {"id": id_, "comment": comment, "inputs": x, "expected": _loop(x, None)}


def _loop(x: dict, backend) -> dict:
    peft, _ = _model(x["model"])
    n = x["population"]
    F = [_f64(r["F"]).reshape(n, r["prompts"]) for r in x["rewards"]]
    contract = x["noise"] == "contract"
    run = LR.run_lowrank_loop(_weights_in(x), peft, population=n, sigma=float(_f64(x["sigma"])[0]),
                              lr=float(_f64(x["lr"])[0]), rank=x["rank"], steps=x["steps"],
                              reward=lambda step, m, w, d: F[step][m], steps_per_adapter=x["steps_per_adapter"],
                              normalize_with_std=x["normalize_with_std"], scale_lr_in_grad=x["scale_lr_in_grad"],
                              chunk_size=x["chunk_size"], noise=x["noise"],
                              base_seed=x.get("base_seed", 0), seed=int(x["seed"], 16) if contract else None,
                              mapping=x.get("mapping", "poly32"), backend=backend if contract else None,
                              keep_perturbations=False)
    got = {}
    for k, step in enumerate(run.steps):
        got[f"s{step}.f"] = _f64s(run.shaped[k])
        got[f"s{step}.d"] = encode(run.differences[k])
        for name, t in run.weights[k].items():
            got[f"s{step}.w.{name}"] = encode(t)
    return got


def generate() -> list[dict]:
    out = _stream_seed_vectors() + _factor_vectors()
    for case in ADAPTER_CASES:
        x = _adapter_inputs(case)
        out.append({"id": case[0], "comment": f"f16 adapters of both members of pair {x['pair']} and their B·A "
                    f"(rank {x['rank']}, {x['noise']} noise); the sign sits on B", "inputs": x,
                    "expected": _adapters(x, None)})
    for id_, comment, F, std in _shaping_cases():
        F = np.asarray(F, dtype=np.float64)
        x = {"kind": "lowrank-shaping", "members": F.shape[0], "prompts": F.shape[1], "F": _f64s(F),
             "normalize_with_std": std}
        out.append({"id": id_, "comment": comment + (", std-normalised" if std else ""), "inputs": x,
                    "expected": _shaping(x)})
    out += [_update_vector(c) for c in UPDATE_CASES]
    out += [_loop_vector(c) for c in LOOP_CASES]
    return out


def _targets() -> dict:
    from ...rng import backend_targets
    return {label: name for label, name, device in backend_targets() if device != "cuda"}


def _lengths(vector: dict) -> dict:
    """field -> the number of values the vector's inputs declare for it (None: not computable here)."""
    x = vector["inputs"]
    kind = x.get("kind")
    if kind == "lowrank-stream-seed":
        return {"stream_seeds": len(x["cells"])}
    if kind == "lowrank-factors":
        return {"a": x["rank"] * x["in"], "b": x["out"] * x["rank"]}
    if kind == "lowrank-adapters":
        out = {}
        for m in x["members"]:
            out.update({f"m{m}.A": x["rank"] * x["in"], f"m{m}.B": x["out"] * x["rank"],
                        f"m{m}.BA": x["out"] * x["in"]})
        return out
    if kind == "lowrank-shaping":
        return {"f": x["members"], "std": 1, "d": x["members"] // 2}
    _, vllm = _model(x["model"])
    sizes = {n: int(np.prod(s)) for n, s in vllm.items()}
    if kind == "lowrank-update":
        return {f"w.{n}": v for n, v in sizes.items()}
    if kind == "lowrank-loop":
        out = {}
        for step in range(x["steps"]):
            out.update({f"s{step}.f": x["population"], f"s{step}.d": x["population"] // 2})
            out.update({f"s{step}.w.{n}": v for n, v in sizes.items()})
        return out
    raise ValueError(f"unknown kind {kind!r}")


def check_sizes(vector: dict) -> list[str]:
    """Sizes the vector declares (ranks, shapes, members, model dims) that disagree with its expected values."""
    x, exp = vector["inputs"], vector["expected"]
    want = _lengths(vector)
    problems = [f"{f} has {len(exp[f]['values']) if f in exp else None} values, want {n}"
                for f, n in want.items() if f not in exp or len(exp[f]["values"]) != n]
    problems += [f"unexpected field {f}" for f in exp if f not in want]
    if x["kind"] == "lowrank-shaping" and len(x["F"]["values"]) != x["members"] * x["prompts"]:
        problems.append(f"F has {len(x['F']['values'])} values, want {x['members']} x {x['prompts']}")
    if x["kind"] in ("lowrank-update", "lowrank-loop"):
        _, vllm = _model(x["model"])
        for n, s in vllm.items():
            got = len(x["weights"].get(n, {}).get("values", []))
            if got != int(np.prod(s)):
                problems.append(f"weights {n} has {got} values, want {s[0]} x {s[1]}")
    return problems


def recompute(vector: dict, backend: str) -> dict:
    """Our implementation on CPU; `backend` (a label of backend_targets) computes the contract noise."""
    targets = _targets()
    if backend not in targets:
        raise ValueError(f"eggroll backend {backend!r} is unknown or not available here; available: {sorted(targets)}")
    problems = check_sizes(vector)
    if problems:
        raise ValueError(f"vector {vector['id']!r} is inconsistent: {problems[0]}")
    x, name = vector["inputs"], targets[backend]
    kind = x["kind"]
    if kind == "lowrank-stream-seed":
        seed = int(x["seed"], 16)
        return {"stream_seeds": encode_ints([C.lowrank_stream_seed(seed, x["generation"], x["pairs"], x["layers"],
                                                                   k, l) for k, l in x["cells"]], "u64")}
    if kind == "lowrank-factors":
        a, b = _factors(x, name)
        return {"a": encode(a), "b": encode(b)}
    if kind == "lowrank-adapters":
        return _adapters(x, name)
    if kind == "lowrank-shaping":
        return _shaping(x)
    if kind == "lowrank-update":
        return _update(x, name)
    return _loop(x, name)


AREA = Area(name=NAME, version=C.VERSION, version_constant="esverify.references.eggroll.contract.VERSION",
            generate=generate, backends=lambda: list(_targets()), recompute=recompute, check_sizes=check_sizes)
