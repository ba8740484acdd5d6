"""The stand-in clones behave as docs/references.md §5 says the real references do when driven through
their entry points (the es-at-scale constructor then fit(); es-awd's parse_args() on a command line then
main(args)), checked with tests/standins/drive.py's own seams, independently of the parity child:
construction side effects, seed schedules, the (label, reward) and (r, response) shapes, the
z-scores and mirrored coefficients (recomputed here from the rewards the engines answered), the
iteration records, the saves and the logging folder rules."""
from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import types
from pathlib import Path

import numpy as np
import pytest
import torch

from standins.mutants import STANDINS

DRIVE = STANDINS / "drive.py"


def drive(drives: dict, job: str, check=True):
    """What drive `job` (JOBS, or a loop mutant's name) gave: its JSON, or with check=False its exit status and
    stderr as `python drive.py ...` ends (returncode, stderr)."""
    proc = drives[job]
    if not check:
        return proc
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.out


def _rpc(calls, method):
    return [c for c in calls if c[0] == "rpc" and c[2] == method]


def _seeds(base: int, size: int) -> list:
    return np.random.default_rng(seed=base).integers(0, 2 ** 30, size=size, dtype=np.int64).tolist()


# ----------------------------------------------------------------- es-at-scale

@pytest.mark.slow   # 2 s (--durations, 2026-12-03): out of the fast tier
def test_es_at_scale_constructor_then_fit(drives):
    out = drive(drives, "es-at-scale")
    calls = out["calls"]
    assert out["handlers_installed"] == [True, True]
    assert out["environment"] == {"CUDA_VISIBLE_DEVICES": "", "RAY_ADDRESS": None}
    assert ["ray.init", "local"] in calls and ["Pool", 8] in calls
    assert [c[3] for c in _rpc(calls, "init_inter_engine_group")] == [["10.0.0.1", 29555, 0, 2],
                                                                       ["10.0.0.1", 29555, 1, 2]]
    groups = [c[1] for c in calls if c[0] == "StatelessProcessGroup.create"]
    assert groups == [{"host": "10.0.0.1", "port": 29555, "rank": r, "world_size": 2} for r in (0, 1)]
    assert [c for c in calls if c[0] == "PyNcclCommunicator"] == [["PyNcclCommunicator", "cpu"]] * 2
    assert out["eval_batches"] == {"held-out": [["T[prompt 0 <target=0.5>]", "T[prompt 1 <target=-0.25>]"],
                                                [0.5, -0.25]]}
    # num_iterations + 1 updates, seeds from default_rng((global_seed or 42) + i), population 3
    updates = _rpc(calls, "update_weights_from_seeds")
    assert [u[1] for u in updates] == [0, 0, 0]
    assert [u[3][0] for u in updates] == [_seeds(42 + i, 3) for i in range(3)]
    assert all(u[3][2:] == [0.5, 3] for u in updates)
    # the coefficients are the z-scores of the batch-size-weighted mean rewards (mini-batches of 2 and 1)
    by_seed: dict = {}
    for c in calls:
        if c[0] == "generate" and c[2] is not None:
            by_seed.setdefault(c[2], []).append(c[3])
    for update in updates:
        seeds, coeffs = update[3][0], update[3][1]
        rewards = []
        for seed in seeds:
            values = by_seed[seed]
            assert len(values) == 3
            rewards.append((float(np.mean(values[:2])) * 2 + float(np.mean(values[2:])) * 1) / 3)
        mean, std = float(np.mean(rewards)), float(np.std(rewards))
        assert coeffs == [(r - mean) / (std + 1e-8) for r in rewards]
    # every member perturbed on its engine of the group (seeds in groups of 2) and restored with sigma
    perturbs = _rpc(calls, "perturb_self_weights")
    first = updates[0][3][0]
    assert [(c[1], c[3]) for c in perturbs[:3]] == [(0, [first[0], 0.01, False]), (1, [first[1], 0.01, False]),
                                                     (0, [first[2], 0.01, False])]
    assert len(_rpc(calls, "restore_self_weights")) == len(perturbs) == 3 * 2 * 3
    assert len(_rpc(calls, "broadcast_all_weights")) == 3 * 2
    # the reward function got the decoded completion and the target, and returned a pair
    assert ["decode", True] in calls
    assert all(isinstance(t, float) and float(text) == float(text) for text, t in out["graded"])
    # eval_step(0) first, then where (i + 1) % eval_freq == 0 and i > 0 (eval_freq 1: i = 1, 2)
    assert out["files"] == ["run/checkpoint-es_fine_tuned_iteration_2/pytorch_model.pth",
                            "run/eval-output/eval_iteration_0.json", "run/eval-output/eval_iteration_2.json",
                            "run/eval-output/eval_iteration_3.json"]
    assert out["final"] == out["engine0"]
    save = calls.index(_rpc(calls, "save_self_weights_to_disk")[0])
    assert [c[0] for c in calls[save + 1:]] == ["ray.kill", "ray.kill"]       # cleanup() after the save


@pytest.mark.slow   # 2 s (--durations, 2026-12-03): out of the fast tier
def test_es_at_scale_fit_with_zero_iterations_only_evaluates(drives):
    out = drive(drives, "es-at-scale-zero-iterations")
    assert _rpc(out["calls"], "update_weights_from_seeds") == [] and _rpc(out["calls"], "perturb_self_weights") == []
    assert out["files"] == ["run/eval-output/eval_iteration_0.json"] and out["final"] is None


def _load_worker():
    path = STANDINS / "es-at-scale/es_at_scale/utils/worker_extension.py"
    spec = importlib.util.spec_from_file_location("standin_worker_under_test", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_es_at_scale_worker_joins_the_group_from_rank_or_local_rank(monkeypatch):
    worker = _load_worker()
    joined = []
    monkeypatch.setattr(worker, "_stateless_init_process_group", lambda *a: joined.append(a) or "group")
    ext = worker.WorkerExtension()
    with pytest.raises(RuntimeError, match="neither rank/world_size nor local_rank/parallel_config"):
        ext.init_inter_engine_group("h", "29500", 1, 2)
    ext.local_rank, ext.device = 1, "cuda:1"
    ext.parallel_config = types.SimpleNamespace(tensor_parallel_size=2)
    assert ext.init_inter_engine_group("h", "29500", 3, 4) and ext.inter_engine_group == "group"
    ext.rank, ext.world_size = 0, 1         # rank/world_size first when the worker has them
    ext.init_inter_engine_group("h", 29501, 2, 4)
    assert joined == [("h", 29500, 7, 8, "cuda:1"), ("h", 29501, 2, 4, "cuda:1")]
    with pytest.raises(TypeError, match="int"):
        ext.init_inter_engine_group("h", object(), 0, 1)   # an inert port is not an int: int() fails


def test_es_at_scale_worker_saves_and_loads_its_weights(tmp_path):
    worker = _load_worker()
    model = types.SimpleNamespace(tensors=[torch.arange(3.0), torch.ones(2)])
    model.named_parameters = lambda: iter(zip(("a", "b"), model.tensors))
    model.state_dict = lambda: dict(zip(("a", "b"), model.tensors))
    ext = worker.WorkerExtension()
    ext.model_runner = types.SimpleNamespace(model=model)
    path = tmp_path / "deep" / "folder" / "pytorch_model.pth"
    assert ext.save_self_weights_to_disk(str(path)) and path.is_file()
    model.tensors[0].zero_()
    assert ext.load_weights_from_disk(str(path)) and model.tensors[0].tolist() == [0.0, 1.0, 2.0]
    assert ext.save_self_initial_weights() and ext.initial_weights["a"].tolist() == [0.0, 1.0, 2.0]


# ----------------------------------------------------------------- es-awd

AWD_FLAGS = ("--num_iterations", "2", "--population_size", "4", "--num_engines", "2", "--mirror_sampling",
             "--run_name", "r", "--wandb_mode", "disabled", "--global_seed", "5", "--cuda_devices", "",
             "--weight_decay_type", "l2", "--weight_decay_lambda", "0.5", "--eval_interval", "1")


@pytest.mark.slow   # 8 s (--durations, 2026-12-03): out of the fast tier
def test_es_awd_parse_args_then_main(drives):
    out = drive(drives, "es-awd")
    experiment = drives["es-awd"].work / "exp"
    calls, args = out["calls"], out["args"]
    assert args == {"model_name": "Qwen/Qwen2.5-3B-Instruct", "task": "countdown", "sigma": 0.001, "alpha": 0.0005,
                    "population_size": 4, "mirror_sampling": True, "num_engines": 2, "num_iterations": 2,
                    "experiment_dir": str(experiment), "run_name": "r", "cuda_devices": "", "caching": False,
                    "verbose": False, "global_seed": 5, "precision": "float16", "weight_decay_type": "l2",
                    "weight_decay_lambda": 0.5, "eval_interval": 1, "eval_batch_size": 512,
                    "wandb_project": "precision-tests", "wandb_entity": None, "wandb_mode": "disabled"}
    assert out["args_json"] == args
    assert out["deterministic"] is True and out["environment"] == {"CUDA_VISIBLE_DEVICES": "", "PYTHONHASHSEED": "5"}
    assert ["wandb.init", ["config", "dir", "entity", "mode", "name", "project"]] in calls
    assert ["launch_engines", 2, "float16"] in calls and calls[-1] == ["cleanup", 2, "WandbRun"]
    assert [c[1] for c in _rpc(calls, "snapshot_weights_to_cpu")] == [0]
    # seeds from default_rng(global_seed + i), N/2 with mirroring; the coefficient z(+) - z(-)
    records = out["records"]
    assert [r["iteration"] for r in records] == [1, 2]
    assert [r["seeds"] for r in records] == [_seeds(5 + i, 2) for i in (1, 2)]
    members = [c for c in calls if c[0] == "rpc" and c[2] == "perturb_self_weights"]
    assert [(c[1], c[3][0], c[3][3]) for c in members[:4]] == [
        (0, records[0]["seeds"][0], False), (1, records[0]["seeds"][1], False),
        (0, records[0]["seeds"][0], True), (1, records[0]["seeds"][1], True)]
    values = [c for c in calls if c[0] == "generate" and c[2] is not None]
    for k, record in enumerate(records):
        per_member = [float(np.mean([v[3] for v in values[12 * k + 3 * m: 12 * k + 3 * m + 3]])) for m in range(4)]
        mean, std = np.mean(per_member), np.std(per_member)
        z = [(r - mean) / (std + 1e-8) for r in per_member]
        assert record["update_coefficients"] == [float(z[j] - z[j + 2]) for j in range(2)]
    updates = _rpc(calls, "update_weights_from_seeds")
    assert [(u[1], u[3][0], u[4]) for u in updates] == [
        (0, r["seeds"], {"population_size": 4, "caching": False, "weight_decay_type": "l2",
                         "weight_decay_lambda": 0.5}) for r in records]
    assert out["final"] == out["engine0"]
    # the record is written before the update: a second run into the same folder is refused
    again = drive(drives, "es-awd-again", check=False)
    assert again.returncode == 1 and "FileExistsError" in again.stderr


@pytest.mark.slow   # 6 s (--durations, 2026-12-03): out of the fast tier
def test_es_awd_parse_args_refuses_bad_flags(drives):
    negative = drive(drives, "es-awd-negative-lambda", check=False)
    assert negative.returncode == 2 and "--weight_decay_lambda must be >= 0, got -1.0" in negative.stderr
    odd = drive(drives, "es-awd-odd-mirrored", check=False)
    assert odd.returncode == 1 and "AssertionError: mirror sampling needs an even population size" in odd.stderr
    choice = drive(drives, "es-awd-fp8", check=False)
    assert choice.returncode == 2 and "invalid choice: 'fp8'" in choice.stderr


@pytest.mark.slow   # 2 s (--durations, 2026-12-03): out of the fast tier
def test_es_awd_main_without_run_name_names_its_folder(drives):
    out = drive(drives, "es-awd-no-run-name")
    experiment = drives["es-awd-no-run-name"].work / "exp"
    folder = Path(out["logging_dir"])
    assert folder.parent == experiment and folder.name.startswith("Qwen_Qwen2.5-3B-Instruct_countdown_seedNone_pop2_none")
    assert out["files"] == ["args.json", "final_model_weights.pt", "iteration_updates"]
    assert out["deterministic"] is False and out["environment"]["PYTHONHASHSEED"] is None   # no --global_seed
    assert [r["seeds"] for r in out["records"]] == [_seeds(42 + 1, 2)]


# ----------------------------------------------------------------- the loop mutants still make their edit

#: what each loop mutant (tests/standins/loop_mutants.py) changes in the drives above: the update calls'
#: seeds, coefficients, other arguments or count, the engines' launch (count, precision), es-awd's iteration
#: records, engine 0's final weights
MUTANT_EFFECTS = {
    "zscore-ddof1": {"coeffs", "final"}, "seeds-lose-iteration": {"seeds", "coeffs", "final"},
    "last-engine-not-restored": {"coeffs", "final"}, "unweighted-batches": {"coeffs", "final"},
    "no-extra-update": {"count", "final"}, "broadcast-engine-0-only": {"coeffs", "final"},
    "mirror-sign-flipped": {"coeffs", "records", "final"},
    "mirror-divisor-half": {"coeffs", "args", "records", "final"},
    "restore-negate-swapped": {"coeffs", "records", "final"},
    "seeds-from-iteration-0": {"seeds", "coeffs", "records", "final"}, "record-uncentred": {"records"},
    "seed-fallback-changed": {"seeds", "coeffs", "final"}, "global-seed-ignored": {"seeds", "coeffs", "records", "final"},
    "seeds-bound-2-31": {"seeds", "coeffs", "final"}, "group-reversed": {"seeds", "coeffs", "final"},
    "last-minibatch-dropped": {"coeffs", "final"}, "std-eps-twice": {"coeffs", "final"},
    "alpha-over-sigma": {"coeffs", "args", "final"}, "zscore-no-eps": {"coeffs", "records"},
    "mirror-z-plus-half": {"coeffs", "records", "final"}, "decay-step-lambda-squared": {"coeffs", "records", "final"},
    "record-iteration-minus-1": {"records"}, "broadcast-before-update": {"coeffs", "records", "final"},
    "snapshot-every-iteration": {"final"}, "restore-skipped-engine-0": {"coeffs", "records", "final"},
    "perturb-sigma-half": {"coeffs", "records", "final"}, "restore-reseeded-plus-1": {"coeffs", "records", "final"},
    "fit-no-final-save": {"final"},
    # not visible in these drives (f32, no caching, lambda 0.5, torch's generator on 8-element tensors)
    "caching-key-without-dtype": set(), "lambda0-no-shortcut": set(), "noise-f32-then-cast": set(),
    "restore-caching-ignored": set(), "noise-f64-then-cast": set(),
    # these drives' engine counts divide the mirrored seeds: both batchings put the same members on engine 0
    "mirror-passes-batched-together": set(),
    # the engines' precision: only the launch call changes here, because these drives' stand-in
    # engines (tests/standins/drive.py) do not compute their rewards in it; the parity child's engines do
    # (tests/test_parity_loops.py detects all three)
    "fit-engines-float16": {"engines"}, "fit-engines-default-float16": {"engines"},
    "main-engines-bfloat16": {"engines"},
}


def _effects(base: dict, out: dict) -> set:
    ups = [_rpc(d["calls"], "update_weights_from_seeds") for d in (base, out)]
    found = set()
    if len(ups[0]) != len(ups[1]):
        found.add("count")
    else:
        for key, pick in (("seeds", lambda u: u[3][0]), ("coeffs", lambda u: u[3][1]),
                          ("args", lambda u: (u[3][2:], u[4]))):
            if [pick(u) for u in ups[0]] != [pick(u) for u in ups[1]]:
                found.add(key)
    launches = [[c for c in d["calls"] if c[0] == "launch_engines"] for d in (base, out)]
    if launches[0] != launches[1]:
        found.add("engines")
    if base.get("records") != out.get("records"):
        found.add("records")
    if base["final"] != out["final"]:
        found.add("final")
    return found


#: the drives of the tests above: job -> (target, its arguments given its WORK folder and the batch's root
#: folder); each drive's experiment folder is WORK/exp. es-awd-again runs es-awd's again into the same folder.
JOBS = {
    "es-at-scale": ("es-at-scale", lambda work, root: ["--iterations", "2", "--eval"]),
    "es-at-scale-zero-iterations": ("es-at-scale", lambda work, root: ["--iterations", "0", "--eval"]),
    "es-awd": ("es-awd", lambda work, root: [*AWD_FLAGS, "--experiment_dir", str(work / "exp")]),
    "es-awd-again": ("es-awd", lambda work, root: [*AWD_FLAGS, "--experiment_dir", str(root / "es-awd/work/exp")]),
    "es-awd-negative-lambda": ("es-awd", lambda work, root: ["--weight_decay_lambda", "-1"]),
    "es-awd-odd-mirrored": ("es-awd", lambda work, root: ["--mirror_sampling", "--population_size", "5"]),
    "es-awd-fp8": ("es-awd", lambda work, root: ["--precision", "fp8"]),
    "es-awd-no-run-name": ("es-awd", lambda work, root: [
        "--num_iterations", "1", "--population_size", "2", "--num_engines", "1",
        "--experiment_dir", str(work / "exp"), "--wandb_mode", "offline"]),
}
#: the jobs each test reads (a loop mutant's test reads its own drive and its target's unchanged one)
TEST_JOBS = {
    "test_es_at_scale_constructor_then_fit": ["es-at-scale"],
    "test_es_at_scale_fit_with_zero_iterations_only_evaluates": ["es-at-scale-zero-iterations"],
    "test_es_awd_parse_args_then_main": ["es-awd", "es-awd-again"],
    "test_es_awd_parse_args_refuses_bad_flags": ["es-awd-negative-lambda", "es-awd-odd-mirrored", "es-awd-fp8"],
    "test_es_awd_main_without_run_name_names_its_folder": ["es-awd-no-run-name"],
}


@pytest.fixture(scope="module")
def drives(request, tmp_path_factory):
    """{job: SimpleNamespace(returncode, stderr, out: its JSON or None, work: its WORK folder)} of the drives
    the selected tests of this file read (TEST_JOBS; the unchanged stand-ins and the loop mutants of
    test_loop_mutant_still_makes_its_edit), driven in one batch (tests/standins/drive.py --batch: torch is
    imported once, each drive a forked child that ends as its own `python drive.py` would). A fresh
    interpreter per drive paid torch's import each time (8 of them in this file's own tests)."""
    from standins.loop_mutants import LOOP_MUTANTS, make_loop_mutant
    wanted = set()
    for item in request.session.items:
        if item.module is not request.module:
            continue
        if item.originalname == "test_loop_mutant_still_makes_its_edit":
            name = item.callspec.params["name"]
            wanted |= {name, LOOP_MUTANTS[name][0]}
        wanted |= set(TEST_JOBS.get(item.originalname, ()))
    if "es-awd-again" in wanted:
        wanted.add("es-awd")
    root = tmp_path_factory.mktemp("drives")
    jobs = []
    for name in [*JOBS, *sorted(LOOP_MUTANTS)]:     # es-awd before es-awd-again
        if name not in wanted:
            continue
        work = root / name / "work"
        work.mkdir(parents=True)
        if name in LOOP_MUTANTS:
            target = LOOP_MUTANTS[name][0]
            clone = make_loop_mutant(root / name / "clone", name)
            args = JOBS[target][1](work, root)
        else:
            target, args = JOBS[name][0], JOBS[name][1](work, root)
            clone = STANDINS / target
        jobs.append([target, str(clone), str(work), args])
    (root / "jobs.json").write_text(json.dumps(jobs))
    subprocess.run([sys.executable, str(DRIVE), "--batch", str(root / "jobs.json")], check=True,
                   capture_output=True, timeout=900)
    results = {}
    for job in jobs:
        work = Path(job[2])
        rc, err, done = Path(f"{work}.rc"), Path(f"{work}.stderr"), work / "drive.json"
        results[work.parent.name] = types.SimpleNamespace(
            returncode=int(rc.read_text()) if rc.is_file() else None, work=work,
            stderr=err.read_text() if err.is_file() else "",
            out=json.loads(done.read_text()) if done.is_file() else None)
    return results


def test_every_loop_mutant_has_an_effect_entry():
    from standins.loop_mutants import LOOP_MUTANTS
    assert set(MUTANT_EFFECTS) == set(LOOP_MUTANTS)


@pytest.mark.parametrize("name", sorted(MUTANT_EFFECTS))
@pytest.mark.slow   # 46 s (--durations, 2026-12-03): out of the fast tier
def test_loop_mutant_still_makes_its_edit(drives, name):
    """Each mutant's edit still applies and still changes what it changed before the stand-ins were rewritten."""
    from standins.loop_mutants import LOOP_MUTANTS
    target = LOOP_MUTANTS[name][0]
    assert _effects(drive(drives, target), drive(drives, name)) == MUTANT_EFFECTS[name]
