"""The EGGROLL stand-in (tests/standins/eggroll-vllm) driven by the child's eggroll driver
(oracles/driver_eggroll.py), in-process, with torch's own noise: the golden values G1-G4 of
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

import numpy as np
import pytest
import torch
from safetensors.torch import save_file

from esverify.paths import oracles_dir
from standins.mutants import STANDINS

sys.path.insert(0, str(oracles_dir()))
import driver_eggroll as driver  # noqa: E402
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
    assert "es_lora_multinode" not in sys.modules and "ray" not in sys.modules


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
    with np.load(step["adapters"]) as data:
        return {k: torch.from_numpy(data[k].astype(np.int16)).view(torch.float16) for k in data.files}


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


def g4_update(tmp_path, dtype, r, fill, noise="native", clone=CLONE, **extra):
    case = {"out": str(tmp_path), "dtype": dtype, "fill": fill, "noise": noise, "es_step": 5,
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
    reply = g4_update(tmp_path, dtype, r, fill)
    assert reply["returned"] == [True] and reply["failed_adds"] == []
    assert g4_report(reply) == (dq, dd, digest, unchanged)
    # embeddings and norms are never targets
    after, before = load_bits(reply["results"]), load_bits(reply["before"])
    for name, a, b in zip(reply["names"], after, before):
        if not name.endswith(".base_layer.weight"):
            assert same_bits(a, b), name


def test_g4_lora_alpha_is_not_read(tmp_path):
    base = g4_report(g4_update(tmp_path / "a", "f32", 2, 0.0))
    assert g4_report(g4_update(tmp_path / "b", "f32", 2, 0.0, lora_alpha=8)) == base


def test_a_worker_of_another_rank_changes_nothing(tmp_path):
    case = {"out": str(tmp_path), "dtype": "f32", "fill": 0.0, "noise": "native", "es_step": 0,
            "fitnesses": [0.5, -1.25], "args": {"population_size": 2, "lora_r": 1}}
    row = driver.Row(case, tmp_path)
    with driver.imported(CLONE, "es_lora_multinode.py", row) as module:
        engine = module.ESNcclLLM(model="x", worker_extension_cls="es_lora_multinode.WorkerExtension")
        engine.collective_rpc("init_inter_engine_group", args=("127.0.0.1", 1, 1, 2))
        before = [t.clone() for t in engine.esverify_tensors]
        shapes = dict(stubs.peft_shapes(driver.TINY))
        assert engine.collective_rpc("apply_lora_es_update",
                                     args=(np.array([0.5, -1.25]), shapes, 0, module.Args(population_size=2))) == [False]
        assert all(same_bits(a, b) for a, b in zip(before, engine.esverify_tensors))
