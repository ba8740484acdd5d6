"""The EGGROLL stand-in (tests/standins/eggroll-vllm) driven by the child's eggroll driver
(esverify/references/eggroll/child/driver.py), in-process, with torch's own noise: the golden values G1-G4 of
docs/references.md (the eggroll-vllm section) bit for bit, the shaping through `main`, and whole runs
through `main` across dtypes, ranks, engine counts and flags, each checked against a slow restatement
of the documented update written here (per pair, no batching tricks beyond the documented chunk
order), plus the run's side effects (seeds and signal handlers put back, adapters in the scratch
folder, checkpoints and resume)."""
from __future__ import annotations

import hashlib
import json
import math
import signal
import struct
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given, settings, strategies as st
from safetensors.torch import save_file

from esverify.references.eggroll import tape_arrays
import child_files
from standins.mutants import STANDINS

driver = child_files.driver("eggroll")
import eggroll_stubs as stubs  # noqa: E402
from child_server import tensor_bits  # noqa: E402

CLONE = STANDINS / "eggroll-vllm"
DTYPES = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}


def load_bits(path) -> list:
    """The tensors of a child_server .npz as torch tensors (bit-exact)."""
    out = []
    with np.load(path) as data:
        dtypes = [str(d) for d in data["dtypes"]]
        for k, dt in enumerate(dtypes):
            raw = np.ascontiguousarray(data[f"slot{k}"])
            signed = {"f32": np.int32, "f16": np.int16, "bf16": np.int16, "f64": np.int64}[dt]
            out.append(torch.from_numpy(raw.view(signed).copy()).view(DTYPES.get(dt, torch.float64)))
    return out


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and np.array_equal(tensor_bits(a), tensor_bits(b))


# ----------------------------------------------------------------- G1: the noise

def test_g1_get_rng_noise_values_and_digests(tmp_path):
    row = driver.Row({"out": str(tmp_path)}, tmp_path)
    ray_before = sys.modules.get("ray")   # the real Ray, when an earlier test imported it; else None
    with driver.imported(CLONE, "es_lora_multinode.py", row) as module:
        a, b = module.get_rng_noise(base_seed=0, num_pop_pairs=4, pop_pair_idx=1, num_layers=14, layer_idx=3,
                                    step=0, shapes=[(2, 8), (16, 2)])
    assert a.dtype == b.dtype == torch.float32 and a.shape == (2, 8) and b.shape == (16, 2)
    assert a[0, :4].tolist() == [-1.0461914539337158, 1.2305212020874023, 1.866212248802185, -0.34353330731391907]
    assert b[:4, 0].tolist() == [0.004945157095789909, -1.1596639156341553, 0.35184893012046814, 0.9566794633865356]
    assert hashlib.sha256(a.numpy().tobytes()).hexdigest()[:16] == "675811b1cce88a80"
    assert hashlib.sha256(b.numpy().tobytes()).hexdigest()[:16] == "2bbb2311843dd7e5"
    # id 17 = 0 + 4*14*0 + 14*1 + 3: two torch.normal draws of exactly these sizes from one generator
    g = torch.Generator().manual_seed(17)
    assert same_bits(a, torch.normal(0.0, 1.0, size=(2, 8), generator=g))
    assert same_bits(b, torch.normal(0.0, 1.0, size=(16, 2), generator=g))
    # the stand-in modules are gone again: sys.modules is as the driver found it
    assert "es_lora_multinode" not in sys.modules and sys.modules.get("ray") is ray_before


# ----------------------------------------------------------------- G2: the adapters, through main

def checkpoint_at(folder, es_step: int, case: dict):
    """A checkpoint folder of the stand-in engine's initial weights at `es_step` (resume starts after it)."""
    row = driver.Row(case, folder)
    folder.mkdir(parents=True, exist_ok=True)
    save_file(dict(zip(row.names, [t.contiguous() for t in row.initial])), str(folder / "model_weights.safetensors"))
    (folder / "training_state.json").write_text(json.dumps({"es_step": es_step, "args": {}, "fitnesses_so_far": [],
                                                            "task_state": {}}))
    return folder


def adapters_of(step: dict) -> dict:
    return {k: torch.from_numpy(v.astype(np.int16)).view(torch.float16)
            for k, v in tape_arrays.read(step["adapters"]).items()}


def test_g2_adapters_of_generation_one_through_main(tmp_path):
    """N 4, sigma 0.01, base_seed 3, r 2, the step after a checkpoint at es_step 4 (steps_per_adapter 4:
    generation 1, stream of pair k, weight l is id 17 + 7k + l)."""
    case = {"out": str(tmp_path / "run"), "dtype": "f32", "fill": 0.0, "engines": 2, "noise": "native"}
    ckpt = checkpoint_at(tmp_path / "ckpt", 4, case)
    case["args"] = {"population_size": 4, "sigma": 0.01, "base_seed": 3, "lora_r": 2, "steps_per_adapter": 4,
                    "num_iterations": 6, "learning_rate": 0.05, "resume_from": str(ckpt), "save_freq": -1}
    reply = driver.run(case, CLONE)
    (step,) = reply["tape"]["steps"]
    assert step["es_step"] == 5 and reply["tape"]["updates"] == 1
    ad = adapters_of(step)
    assert ad["m1.l0.A"][0, :4].tolist() == [-0.141357421875, 0.0233612060546875, 0.0034027099609375,
                                             0.035003662109375]
    assert ad["m1.l0.B"][:4, 0].tolist() == [-0.1273193359375, -0.0108489990234375, 0.1011962890625,
                                             -0.022857666015625]
    assert ad["m0.l0.B"][:4, 0].tolist() == [0.1273193359375, 0.0108489990234375, -0.1011962890625,
                                             0.022857666015625]
    # A is the pair's: the same for both members; B differs by sign only; so does B·A
    for l in range(7):
        assert same_bits(ad[f"m0.l{l}.A"], ad[f"m1.l{l}.A"]) and same_bits(ad[f"m0.l{l}.B"], -ad[f"m1.l{l}.B"])
        assert same_bits(ad[f"m0.l{l}.BA"], -ad[f"m1.l{l}.BA"])
    # the stream of pair k, weight l: id 17 + 7k + l, a (r x in) then b (out x r), A = f16(sqrt(s) a)
    shapes = stubs.peft_shapes(driver.TINY)
    for m in range(4):
        for l, (_, (o, i)) in enumerate(shapes):
            g = torch.Generator().manual_seed(17 + 7 * (m // 2) + l)
            a = torch.normal(0.0, 1.0, size=(2, i), generator=g)
            b = torch.normal(0.0, 1.0, size=(o, 2), generator=g)
            sign = 1.0 if m % 2 == 0 else -1.0
            assert same_bits(ad[f"m{m}.l{l}.A"], (math.sqrt(0.01) * a).half())
            assert same_bits(ad[f"m{m}.l{l}.B"], sign * (math.sqrt(0.01 / 2) * b).half())
    members = step["members"]
    assert [(x["member"], x["engine"], x["lora_name"], x["lora_int_id"], x["folder"]) for x in members] == [
        (0, 0, "adapter_0", 50001, "pop_0"), (1, 0, "adapter_1", 50002, "pop_1"),
        (2, 1, "adapter_2", 50003, "pop_2"), (3, 1, "adapter_3", 50004, "pop_3")]
    assert members[0]["adapter_config"]["r"] == 2 and members[0]["adapter_config"]["lora_alpha"] == 2


# ----------------------------------------------------------------- G3: the shaping, through main

G3_F = [[1, 2, 0.5], [0, 3, 0.25], [2, -1, 1], [0.5, 0.5, 0.5]]


@pytest.mark.parametrize("std", [False, True])
def test_g3_shaping_through_main(tmp_path, std):
    case = {"out": str(tmp_path), "dtype": "f32", "engines": 2, "noise": "native", "targets": [0.0, 0.0, 0.0],
            "scripted_rewards": [G3_F],
            "args": {"population_size": 4, "sigma": 0.01, "num_iterations": 1, "lora_r": 1,
                     "normalize_with_std": std, "prompt_batch_size": 3, "save_freq": None}}
    reply = driver.run(case, CLONE)
    (step,) = reply["tape"]["steps"]
    assert [[float.fromhex(v) for v in r] for r in step["rewards"]] == G3_F
    got = [float.fromhex(v) for v in step["update"]["fitnesses"]]
    if std:
        assert got == [1.1211525989044417, 0.8221785725299239, -0.672691559342665, -1.2706396120917005]
    else:
        assert got == [0.3125, 0.22916666666666666, -0.1875, -0.3541666666666667]
        assert [float.fromhex(v) for v in step["update"]["pair_differences"]] == [0.0833333358168602,
                                                                                   0.1666666716337204]
    assert reply["tape"]["checkpoints"] == []      # save_freq None: no checkpoint (only the Python API can)


# ----------------------------------------------------------------- G4: one update on the tiny model

G4 = {
    ("f32", 2): (0.0, [-0.0409858413040638, -0.0017031237948685884, 0.0031810239888727665, 0.03768603503704071],
                 [0.014257130213081837, 0.020656032487750053], "e9c4a2f22f38b4cc", 0),
    ("bf16", 2): (0.0625, [-0.041015625, -0.001708984375, 0.0029296875, 0.03759765625],
                  [0.01416015625, 0.0205078125], "735e31d2cce5ba31", 0),
    ("f32", 1): (0.0, [-0.009314854629337788, -0.008729638531804085, 0.002021677093580365, 0.01464730966836214],
                 [0.015476924367249012, 0.015683121979236603], "ee6e67784077b158", 0),
    ("bf16", 1): (0.0625, [-0.00927734375, -0.0087890625, 0.001953125, 0.0146484375], [0.015625, 0.015625],
                  "91e48cade328d286", 3),
}
UPDATED = ("qkv_proj", "o_proj", "gate_up_proj", "down_proj")


def g4_update(tmp_path, dtype, r, fill, noise="native", clone=CLONE, extra_tensors=False, **extra):
    case = {"out": str(tmp_path), "dtype": dtype, "fill": fill, "noise": noise, "es_step": 5,
            "extra_tensors": extra_tensors,
            "fitnesses": [0.5, -1.25, 2.0, 0.75],
            "args": {"population_size": 4, "sigma": 0.01, "base_seed": 3, "lora_r": r, "steps_per_adapter": 4,
                     "learning_rate": 0.05, **extra}}
    return driver.run_update(case, clone)


def g4_report(reply) -> tuple:
    names = reply["names"]
    after = dict(zip(names, load_bits(reply["results"])))
    before = dict(zip(names, load_bits(reply["before"])))
    qkv = [n for n in names if "qkv_proj" in n][0]
    down = [n for n in names if "down_proj" in n][0]
    digest = hashlib.sha256()
    unchanged = 0
    for part in UPDATED:
        name = [n for n in names if f".{part}." in n][0]
        digest.update(after[name].contiguous().view(torch.uint8).numpy().tobytes())
        unchanged += int((tensor_bits(after[name]) == tensor_bits(before[name])).sum())
    dq = (after[qkv].double() - before[qkv].double())[0, :4].tolist()
    dd = (after[down].double() - before[down].double())[0, :2].tolist()
    return dq, dd, digest.hexdigest()[:16], unchanged


@pytest.mark.parametrize("dtype,r", sorted(G4))
def test_g4_one_update_on_the_tiny_model(tmp_path, dtype, r):
    fill, dq, dd, digest, unchanged = G4[(dtype, r)]
    reply = g4_update(tmp_path, dtype, r, fill, extra_tensors=True)
    assert reply["returned"] == [True] and reply["failed_adds"] == []
    assert g4_report(reply) == (dq, dd, digest, unchanged)
    assert len(reply["names"]) == 4 + 1 + 2 + 1
    # embeddings and norms are never targets
    after, before = load_bits(reply["results"]), load_bits(reply["before"])
    for name, a, b in zip(reply["names"], after, before):
        if not name.endswith(".base_layer.weight"):
            assert same_bits(a, b), name


def test_g4_lora_alpha_is_not_read(tmp_path):
    base = g4_report(g4_update(tmp_path / "a", "f32", 2, 0.0))
    assert g4_report(g4_update(tmp_path / "b", "f32", 2, 0.0, lora_alpha=8)) == base


def test_a_worker_of_another_rank_changes_nothing(tmp_path):
    import os
    environ = dict(os.environ)
    case = {"out": str(tmp_path), "dtype": "f32", "fill": 0.0, "noise": "native", "es_step": 0,
            "fitnesses": [0.5, -1.25], "args": {"population_size": 2, "lora_r": 1}}
    from loop_seams import Seams
    row = driver.Row(case, tmp_path)
    with Seams(), driver.imported(CLONE, "es_lora_multinode.py", row) as module:   # ESNcclLLM edits os.environ
        engine = module.ESNcclLLM(model="x", worker_extension_cls="es_lora_multinode.WorkerExtension")
        engine.collective_rpc("init_inter_engine_group", args=("127.0.0.1", 1, 1, 2))
        before = [t.clone() for t in engine.esverify_tensors]
        shapes = dict(stubs.peft_shapes(driver.TINY))
        assert engine.collective_rpc("apply_lora_es_update",
                                     args=(np.array([0.5, -1.25]), shapes, 0, module.Args(population_size=2))) == [False]
        assert all(same_bits(a, b) for a, b in zip(before, engine.esverify_tensors))
        assert os.environ.get("VLLM_ENABLE_V1_MULTIPROCESSING") == "0"
    assert {k: os.environ.get(k) for k in ("VLLM_ENABLE_V1_MULTIPROCESSING", "CUDA_VISIBLE_DEVICES")} == {
        k: environ.get(k) for k in ("VLLM_ENABLE_V1_MULTIPROCESSING", "CUDA_VISIBLE_DEVICES")}


# ----------------------------------------------------------------- whole runs through main

def chunk_size(args: dict, pairs: int) -> int:
    if args.get("es_update_chunk_size") is not None:
        return min(int(args["es_update_chunk_size"]), pairs)
    r = args["lora_r"]
    return min(128 if r <= 2 else 64 if r <= 8 else 32, pairs)


def documented_shaping(F: np.ndarray, std: bool) -> np.ndarray:
    """docs/references.md (EGGROLL, shaping): per-prompt centring, then the mean over prompts; optionally
    divided by the population std (ddof 0) + 1e-8."""
    f = (F - F.mean(axis=0)).mean(axis=1)
    return f / (f.std() + 1e-8) if std else f


def torch_noise(stream_id: int, r: int, i: int, o: int) -> tuple:
    """a (r x in), b (out x r): two torch.normal draws from one CPU generator seeded stream_id (native noise)."""
    g = torch.Generator().manual_seed(stream_id)
    return torch.normal(0.0, 1.0, size=(r, i), generator=g), torch.normal(0.0, 1.0, size=(o, r), generator=g)


def documented_update(weights: dict, fitnesses: np.ndarray, args: dict, es_step: int, dtype,
                      noise=torch_noise) -> dict:
    """docs/references.md (EGGROLL, the update and where it lands), restated slowly: per weight, pairs in
    chunks, rank 1 as one mm, rank > 1 as bmm then a sum over the pair axis; two f32 scalings (and sqrt(N));
    Δ rounded to the dtype, then added in place to its slice."""
    N, sigma, r, lr = len(fitnesses), args["sigma"], args["lora_r"], args["learning_rate"]
    P = N // 2
    shapes = stubs.peft_shapes(driver.TINY)
    L = len(shapes)
    s = es_step // args["steps_per_adapter"]
    c = chunk_size(args, P)
    diffs = torch.tensor([fitnesses[2 * k] - fitnesses[2 * k + 1] for k in range(P)], dtype=torch.float64).float()
    out = {k: v.clone() for k, v in weights.items()}
    for l, ((peft, (o, i)), (_, target, first)) in enumerate(zip(shapes, stubs.placement(driver.TINY))):
        G = torch.zeros(o, i)
        for start in range(0, P, c):
            ks = range(start, min(start + c, P))
            a_s, b_s = [], []
            for k in ks:
                a, b = noise(args["base_seed"] + P * L * s + L * k + l, r, i, o)
                a_s.append(a)
                b_s.append(b)
            A = torch.stack(a_s) * math.sqrt(sigma)
            B = torch.stack(b_s) * math.sqrt(sigma / r)
            d = diffs[start:start + len(ks)]
            if r == 1:
                G = G + torch.mm((B[:, :, 0] * d[:, None]).t(), A[:, 0, :])
            else:
                G = G + (torch.bmm(B, A) * d[:, None, None]).sum(dim=0)
        delta = (1.0 / (N * sigma + 1e-8)) * G * lr
        if args.get("scale_lr_in_grad"):
            delta = delta * math.sqrt(N)
        rows = slice(first, first + o) if target.split(".")[-3] in ("qkv_proj", "gate_up_proj") else slice(None)
        out[target][rows] = out[target][rows] + delta.to(dtype)
    return out


RUNS = {   # id: (dtype, engines, Args keywords)
    "f32-r1-e1": ("f32", 1, dict(population_size=4, num_iterations=2, lora_r=1)),
    "f16-r2-e2-std": ("f16", 2, dict(population_size=8, num_iterations=2, lora_r=2, normalize_with_std=True)),
    "bf16-r16-e4-scale": ("bf16", 4, dict(population_size=8, num_iterations=2, lora_r=16, scale_lr_in_grad=True)),
    "f32-r2-e2-spa2-3steps": ("f32", 2, dict(population_size=4, num_iterations=3, lora_r=2, steps_per_adapter=2,
                                             normalize_with_std=True)),
    "bf16-r1-e2-chunk3": ("bf16", 2, dict(population_size=14, num_iterations=2, lora_r=1, es_update_chunk_size=3,
                                          normalize_with_std=True)),
    "f16-r3-e1-std": ("f16", 1, dict(population_size=6, num_iterations=2, lora_r=3, normalize_with_std=True)),
}
BASE_ARGS = dict(sigma=0.01, learning_rate=0.05, base_seed=3, steps_per_adapter=4, save_freq=-1)


def run_case(tmp_path, dtype, engines, args, clone=CLONE, **extra):
    """(case, reply) of one run through main: weights N(0, 0.5^2) (init seed 11), targets 0.25 and -0.5."""
    case = {"out": str(tmp_path), "dtype": dtype, "engines": engines, "noise": "native", "init_seed": 11,
            "init_std": 0.5, "targets": [0.25, -0.5], "args": {**BASE_ARGS, **args}, **extra}
    return case, driver.run(case, clone)


@pytest.mark.parametrize("name", sorted(RUNS))
def test_whole_run_follows_the_documented_loop(tmp_path, name):
    dtype, engines, args = RUNS[name]
    args = {**BASE_ARGS, **args}
    handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    seed_before, np_before = torch.initial_seed(), np.random.get_state()[1].copy()
    case, reply = run_case(tmp_path, dtype, engines, args)
    tape = reply["tape"]
    # the process is as it was: handlers, seeds; during the run torch's global seed was base_seed
    assert {s: signal.getsignal(s) for s in handlers} == handlers
    assert torch.initial_seed() == seed_before and np.array_equal(np.random.get_state()[1], np_before)
    assert tape["seeds_after"] == {"torch_initial_seed": 3, "numpy_legacy": 3}
    N, T = args["population_size"], args["num_iterations"]
    assert tape["updates"] == T and [s["es_step"] for s in tape["steps"]] == list(range(T))
    assert tape["lora_folders"] == [f"es_lora_population_{i}" for i in range(engines)]
    assert [k["max_loras"] for k in tape["llm_kwargs"]] == [math.ceil(N / engines)] * engines
    assert {k["max_lora_rank"] for k in tape["llm_kwargs"]} == {max(args["lora_r"], 8)}
    weights = dict(zip(tape["names"], driver.Row(case, tmp_path).initial))
    generation_digests = {}
    for step in tape["steps"]:
        s = step["es_step"]
        F = np.array([[float.fromhex(v) for v in row] for row in step["rewards"]])
        assert F.shape == (N, 2) and step["reward_members"] == list(range(N))
        # each reward is the engine's reward of the weights at the step's start with the member's adapter
        ad = adapters_of(step)
        for m in range(N):
            adapter = {}
            for l, (peft, _) in enumerate(stubs.peft_shapes(driver.TINY)):
                module = peft[:-len(".base_layer.weight")]
                adapter[f"{module}.lora_A.weight"] = ad[f"m{m}.l{l}.A"]
                adapter[f"{module}.lora_B.weight"] = ad[f"m{m}.l{l}.B"]
            w = stubs.perturbed(weights, adapter, driver.TINY)
            assert [stubs.reward(w, t) for t in (0.25, -0.5)] == F[m].tolist()
        fitnesses = np.array([float.fromhex(v) for v in step["update"]["fitnesses"]])
        assert np.array_equal(fitnesses.view(np.uint64),
                              documented_shaping(F, args.get("normalize_with_std", False)).view(np.uint64))
        weights = documented_update(weights, fitnesses, args, s, DTYPES[dtype])
        after = load_bits(step["engines_after"])
        K = len(tape["names"])
        assert len(after) == K * engines and step["engines_identical"] is True
        for e in range(engines):
            for k, name in enumerate(tape["names"]):
                assert same_bits(after[e * K + k], weights[name]), (name, e, s)
        digest = [m["ba_sha256"] for m in step["members"]]
        generation_digests.setdefault(s // args["steps_per_adapter"], set()).add(tuple(digest))
    # one adapter set per generation (reused within it), a new one at each boundary
    assert all(len(v) == 1 for v in generation_digests.values())
    assert len({v for d in generation_digests.values() for v in d}) == len(generation_digests)
    final = load_bits(reply["results"])
    assert all(same_bits(a, weights[n]) for n, a in zip(tape["names"], final))
    # the last step is checkpointed (save_freq -1), engine 0's weights in the parameter dtype
    (ckpt,) = tape["checkpoints"]
    state = json.loads((Path(ckpt) / "training_state.json").read_text())
    assert state["es_step"] == T - 1 and len(state["fitnesses_so_far"]) == T and state["task_state"] == {"batches": T}


def test_resume_from_a_checkpoint_ends_bit_identical(tmp_path):
    args = dict(population_size=4, num_iterations=3, lora_r=2, steps_per_adapter=2, save_freq=1)
    _, full = run_case(tmp_path / "full", "bf16", 2, args)
    assert [c.rsplit("_", 1)[-1] for c in full["tape"]["checkpoints"]] == ["1", "2"]
    resume = full["tape"]["checkpoints"][0]
    _, resumed = run_case(tmp_path / "resumed", "bf16", 2, {**args, "resume_from": resume})
    steps = resumed["tape"]["steps"]
    assert [s["es_step"] for s in steps] == [2] and resumed["tape"]["updates"] == 1
    assert steps[0]["members"] == full["tape"]["steps"][2]["members"]   # adapters written on the first resumed step
    for a, b in zip(load_bits(resumed["results"]), load_bits(full["results"])):
        assert same_bits(a, b)


def test_the_moe_sibling_gives_the_same_bits_on_a_dense_model(tmp_path):
    args = dict(population_size=4, num_iterations=2, lora_r=2)
    _, dense = run_case(tmp_path / "dense", "f16", 2, args)
    _, moe = run_case(tmp_path / "moe", "f16", 2, args, file="es_lora_multinode_moe.py")
    assert moe["tape"]["llm_kwargs"][0]["worker_extension_cls"] == "es_lora_multinode_moe.WorkerExtension"
    for a, b in zip(load_bits(moe["results"]), load_bits(dense["results"])):
        assert same_bits(a, b)


# ----------------------------------------------------------------- the documented defects and quirks, kept

def test_importing_the_trainer_binds_the_documented_globals(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("SCRATCH", raising=False)
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    row = driver.Row({"out": str(tmp_path)}, tmp_path)
    with driver.imported(CLONE, "es_lora_multinode.py", row) as module:
        assert module.EXPERIMENT_DIR == "$SCRATCH/for_es_lora/experiments"
        assert module.LORA_POPULATION_PATH == f"/dev/shm/es_lora_population_async_{__import__('os').getpid()}"
        assert module.LORA_TARGET_MODULES == ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj",
                                              "down_proj"]
        args = module.Args()
        assert (args.lora_alpha, args.tensor_parallel_size, args.save_freq) == (4, 1, 50)
        assert module.Args(model_name="Qwen/Qwen3-30B-A3B", tensor_parallel_size=1).tensor_parallel_size == 2
        assert module.Args(model_name="Qwen/Qwen2.5-32B-Instruct").tensor_parallel_size == 4
        assert module.Args(model_name="Qwen/Qwen2.5-14B", tensor_parallel_size=2).tensor_parallel_size == 2
        assert module.Args(model_name="Qwen/Qwen3-4B").tensor_parallel_size == 1
    assert len([line for line in capsys.readouterr().out.splitlines() if line]) == 2


def _tasks_module(monkeypatch, with_egg_img: bool):
    import types
    for name in ("datasets", "gem", "gem.utils", "gem.utils.math_grader"):
        mod = types.ModuleType(name)
        mod.load_dataset, mod.extract_answer, mod.grade = (lambda *a, **k: []), (lambda t: t), (lambda *a: True)
        monkeypatch.setitem(sys.modules, name, mod)
    if with_egg_img:
        egg = types.ModuleType("egg_img")
        egg.EGG_IMG = egg.CHICK_IMG = ""
        monkeypatch.setitem(sys.modules, "egg_img", egg)
    import importlib.util
    spec = importlib.util.spec_from_file_location("eggroll_standin_tasks", CLONE / "tasks.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_tasks_imports_a_module_the_repository_lacks(monkeypatch):
    monkeypatch.delitem(sys.modules, "egg_img", raising=False)
    with pytest.raises(ModuleNotFoundError, match="No module named 'egg_img'"):
        _tasks_module(monkeypatch, with_egg_img=False)


@pytest.mark.parametrize("cls,args", [("ZerosTask", (2, 16)), ("RandomTask", (2, 4, 0)),
                                      ("CountdownTask", (2, 0))])
def test_the_default_tasks_cannot_take_the_loops_four_argument_call(monkeypatch, cls, args):
    tasks = _tasks_module(monkeypatch, with_egg_img=True)
    task = getattr(tasks, cls)(*args)
    with pytest.raises(TypeError, match=f"{cls}.get_fitness\\(\\) got multiple values for argument 'pass_at_k'"):
        task.get_fitness(["0"], [False], None, pass_at_k=False)
    math_task = tasks.MathTask(2, 0)
    assert math_task.get_fitness(["x"], [True], "1", pass_at_k=False)[0] == 0.0   # the four-argument form runs


def test_seed_streams_overlap_across_base_seeds(tmp_path):
    """base_seed b + 1, weight l draws the stream of (b, weight l + 1): runs with base_seed 0 and 1 (N 8,
    14 weights, 3 generations) share 167 of their 168 streams."""
    row = driver.Row({"out": str(tmp_path)}, tmp_path)
    with driver.imported(CLONE, "es_lora_multinode.py", row) as module:
        def digests(base):
            return {hashlib.sha256(module.get_rng_noise(base, 4, k, 14, l, s, [(1, 4), (4, 1)])[0].numpy()
                                   .tobytes()).hexdigest() for s in range(3) for k in range(4) for l in range(14)}
        q1, _ = module.get_rng_noise(1, 4, 0, 14, 0, 0, [(2, 4), (4, 2)])
        k0, _ = module.get_rng_noise(0, 4, 0, 14, 1, 0, [(2, 4), (4, 2)])
        zero, one = digests(0), digests(1)
    assert same_bits(q1, k0)
    assert len(zero) == len(one) == 168 and len(zero & one) == 167


def test_without_vllm_distributed_main_stops_at_the_group_setup(tmp_path):
    case = {"out": str(tmp_path), "dtype": "f32", "engines": 1, "noise": "native", "vllm_distributed": False,
            "args": {"population_size": 2, "num_iterations": 1, "lora_r": 1}}
    with pytest.raises(driver.DriverError) as info:
        driver.run(case, CLONE)
    assert info.value.info["kind"] == "ModuleNotFoundError"
    assert info.value.info["function"] == "init_inter_engine_group"
    assert info.value.info["code"] == "from vllm.distributed import get_tensor_model_parallel_rank"
    assert info.value.info["updates_before"] == 0


def test_main_without_the_global_args_stops_before_any_engine(tmp_path):
    from loop_seams import Seams
    row = driver.Row({"out": str(tmp_path)}, tmp_path)
    with Seams(), driver.imported(CLONE, "es_lora_multinode.py", row) as module:
        with pytest.raises(NameError, match="name 'args' is not defined"):
            module.main(module.Args(population_size=2, num_iterations=1))
        # main had installed its handlers by then: one exits the process with status 0
        handler = signal.getsignal(signal.SIGTERM)
        with pytest.raises(SystemExit) as exit_info:
            handler(signal.SIGTERM, None)
        assert exit_info.value.code == 0
    assert row.engine_objects == []


def test_a_failing_add_is_printed_and_skipped(tmp_path):
    """o_proj one column wider than the update: that add fails, is printed, and the rest is updated."""
    o_proj = "model.layers.0.self_attn.o_proj.base_layer.weight"
    case = {"out": str(tmp_path), "dtype": "f32", "fill": 0.0, "noise": "native", "es_step": 5,
            "vllm_shapes": {o_proj: [4, 5]}, "fitnesses": [0.5, -1.25, 2.0, 0.75],
            "args": {"population_size": 4, "sigma": 0.01, "base_seed": 3, "lora_r": 2, "steps_per_adapter": 4,
                     "learning_rate": 0.05}}
    reply = driver.run_update(case, CLONE)
    assert reply["returned"] == [True]
    (line,) = reply["failed_adds"]
    assert line.startswith(f"ERROR updating {o_proj}")
    assert set(reply["delta"][o_proj]) == {"0x0.0p+0"}
    reference = g4_update(tmp_path / "g4", "f32", 2, 0.0)
    for name in reply["names"]:
        if name != o_proj:
            assert reply["delta"][name] == reference["delta"][name], name


def test_the_driver_names_the_documented_defects_with_their_lines(tmp_path):
    _, reply = run_case(tmp_path, "f32", 1, dict(population_size=2, num_iterations=1, lora_r=1))
    tape = reply["tape"]
    static = tape["static"]
    source = (CLONE / "tasks.py").read_text().splitlines()
    egg = [f for f in static["tasks_unresolved_imports"] if f["module"] == "egg_img"]
    assert len(egg) == 1 and source[egg[0]["line"] - 1] == "from egg_img import EGG_IMG, CHICK_IMG"
    assert [f["class"] for f in static["three_argument_get_fitness"]] == ["ZerosTask", "RandomTask", "CountdownTask"]
    assert all(f["params"] == ["generations", "answer", "pass_at_k"] for f in static["three_argument_get_fitness"])
    trainer = (CLONE / "es_lora_multinode.py").read_text().splitlines()
    (shm,) = static["dev_shm"]
    assert trainer[shm["line"] - 1].startswith("LORA_POPULATION_PATH = ")
    (add,) = static["skipped_add"]
    assert "ERROR updating" in trainer[add["line"] - 1]
    assert tape["at_import"]["LORA_POPULATION_PATH"].startswith("/dev/shm/es_lora_population_async_")
    assert tape["lora_folders"] == ["es_lora_population_0"]     # the run's adapters went to the scratch folder


# ----------------------------------------------------------------- the engine's B·A

def slow_ba(A: torch.Tensor, B: torch.Tensor) -> list:
    """Python floats: per element 0.0 + B[i,0]·A[0,k] + B[i,1]·A[1,k] + ... (f64, in j order), then one
    rounding to f16 by struct's 'e' format (nearest-even); as bit patterns."""
    out = []
    for i in range(B.shape[0]):
        for k in range(A.shape[1]):
            total = 0.0
            for j in range(A.shape[0]):
                total += float(B[i, j]) * float(A[j, k])
            try:
                out.append(struct.unpack("<H", struct.pack("<e", total))[0])
            except OverflowError:
                out.append(0x7C00 if total > 0 else 0xFC00)
    return out


@settings(max_examples=60)
@given(r=st.integers(1, 4), o=st.integers(1, 4), i=st.integers(1, 4), data=st.data())
def test_the_engines_ba_is_one_f16_rounding_of_the_f64_sum(r, o, i, data):
    bits = st.integers(0, 0xFFFF).filter(lambda b: (b & 0x7C00) != 0x7C00)      # finite f16 values
    A = torch.tensor(data.draw(st.lists(bits, min_size=r * i, max_size=r * i)), dtype=torch.int32).to(torch.int16)
    B = torch.tensor(data.draw(st.lists(bits, min_size=o * r, max_size=o * r)), dtype=torch.int32).to(torch.int16)
    A, B = A.view(torch.float16).reshape(r, i), B.view(torch.float16).reshape(o, r)
    got = stubs.lowrank_product_f16(A, B)
    assert tensor_bits(got).reshape(-1).tolist() == slow_ba(A, B)


def test_the_engines_ba_keeps_positive_zero_where_the_products_are_negative_zeros():
    A = torch.tensor([[-1.0, 2.0]], dtype=torch.float16)
    B = torch.tensor([[0.0], [-0.0]], dtype=torch.float16)
    assert tensor_bits(stubs.lowrank_product_f16(A, B)).tolist() == [[0, 0], [0, 0]]


def test_tensors_that_are_no_targets_never_change_in_a_run(tmp_path):
    case, reply = run_case(tmp_path, "bf16", 2, dict(population_size=4, num_iterations=2, lora_r=2),
                           extra_tensors=True)
    names = reply["tape"]["names"]
    assert "model.embed_tokens.weight" in names and "model.norm.weight" in names
    initial = driver.Row(case, tmp_path).initial
    for name, a, b in zip(names, load_bits(reply["results"]), initial):
        assert same_bits(a, b) == (not name.endswith(".base_layer.weight")), name


def test_the_moe_siblings_launch_engines_needs_no_global_args_at_tensor_parallel_size_1(tmp_path):
    from loop_seams import Seams
    row = driver.Row({"out": str(tmp_path)}, tmp_path)
    with Seams(), driver.imported(CLONE, "es_lora_multinode_moe.py", row) as module:   # ESNcclLLM edits os.environ
        assert not hasattr(module, "args")
        engines, groups = module.launch_engines(2, "esverify/tiny-qwen2", 4, 1, 1, 16, 3)
        assert len(engines) == len(groups) == 2
        assert [k["max_num_seqs"] for k in row.llm_kwargs] == [6, 6]
        assert module.Args(model_name="Qwen/Qwen1.5-MoE-A2.7B").tensor_parallel_size == 2
        assert module.Args(model_name="openai/gpt-oss-20b").tensor_parallel_size == 4
        with pytest.raises(NameError, match="name 'args' is not defined"):
            module.launch_engines(2, "esverify/tiny-qwen2", 4, 1, 2, 16, 3)
