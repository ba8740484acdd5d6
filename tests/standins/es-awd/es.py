"""Test stand-in for es-awd's training script (NOT the reference code).

Written by the esverify authors from `docs/references.md` §5 alone,
so that the oracle runner's `main` op can be tested without a clone of the
reference. It has the interface the docs and the interface manifest
(esverify/references/es_awd/child/interfaces.json) give the real file: the same module-level
imports in the same order, the same module constants and functions, and
`parse_args()` with every flag and default. Like the real file is
described to, it imports Ray, vLLM, transformers and wandb at module level
(the parity child serves inert stand-ins), takes `launch_engines`/`cleanup`
from distributed_utils (the child replaces them) and reads `get_data` and
`evaluate_reward` as module globals, which its `__main__` block imports
from the task package named by --task (the child injects its own). The
child drives it as a user runs it: `parse_args()` on a command line, then
`main(args)`. Mutants edit one detail of a copy
(tests/standins/loop_mutants.py).
"""
import argparse
from datetime import datetime
import json
import os
import random
import time
from typing import List, Dict, Any

import numpy as np
import ray
import torch
import wandb
from transformers import AutoTokenizer
from vllm import SamplingParams

from distributed_utils import launch_engines, cleanup

SIGMA = 0.001
ALPHA = 0.0005
POPULATION_SIZE = 30
NUM_ENGINES = 4
NUM_ITERATIONS = 500
EXPERIMENT_DIR = "es-ft-experiment"


def parse_args():
    """docs/references.md §5.2, parse_args(): the flags and defaults of the real script, read from
    sys.argv. Then CUDA_VISIBLE_DEVICES from --cuda_devices, an even population under mirror sampling
    (AssertionError otherwise), and with --global_seed: Python's random, numpy's legacy generator and
    torch (CPU and CUDA) seeded, PYTHONHASHSEED set, cudnn determinism and
    torch.use_deterministic_algorithms(True) tried. A negative lambda is a parser error (exit 2)."""
    parser = argparse.ArgumentParser(description="ES fine-tuning with anchored weight decay")
    parser.add_argument("--model_name", type=str, default="Qwen/Qwen2.5-3B-Instruct")
    parser.add_argument("--task", type=str, choices=["countdown", "gsm8k", "proofwriter"], default="countdown")
    parser.add_argument("--sigma", type=float, default=SIGMA)
    parser.add_argument("--alpha", type=float, default=ALPHA)
    parser.add_argument("--population_size", type=int, default=POPULATION_SIZE)
    parser.add_argument("--mirror_sampling", action="store_true", help="evaluate every seed at +sigma and -sigma")
    parser.add_argument("--num_engines", type=int, default=NUM_ENGINES)
    parser.add_argument("--num_iterations", type=int, default=NUM_ITERATIONS)
    parser.add_argument("--experiment_dir", type=str, default=EXPERIMENT_DIR)
    parser.add_argument("--run_name", type=str, default=None)
    parser.add_argument("--cuda_devices", type=str, default="0,1,2,3")
    parser.add_argument("--caching", action="store_true", help="reuse noise for tensors of equal shape")
    parser.add_argument("--verbose", action="store_true")
    parser.add_argument("--global_seed", type=int, help="seed of every generator (default: none)")
    parser.add_argument("--precision", type=str, choices=["float16", "bfloat16", "float32"], default="float16")
    parser.add_argument("--weight_decay_type", type=str, choices=["none", "l1", "l2"], default="none")
    parser.add_argument("--weight_decay_lambda", type=float, default=0.0)
    parser.add_argument("--eval_interval", type=int, default=25, help="0 disables the periodic evaluation")
    parser.add_argument("--eval_batch_size", type=int, default=512)
    parser.add_argument("--wandb_project", type=str, default="precision-tests")
    parser.add_argument("--wandb_entity", type=str, default=None)
    parser.add_argument("--wandb_mode", type=str, choices=["online", "offline", "disabled"], default="online")
    args = parser.parse_args()
    if args.weight_decay_lambda < 0:
        parser.error(f"--weight_decay_lambda must be >= 0, got {args.weight_decay_lambda}")

    os.environ["CUDA_VISIBLE_DEVICES"] = args.cuda_devices
    if args.mirror_sampling:
        assert args.population_size % 2 == 0, "mirror sampling needs an even population size"
    if args.global_seed is not None:
        random.seed(args.global_seed)
        np.random.seed(args.global_seed)
        torch.manual_seed(args.global_seed)
        torch.cuda.manual_seed_all(args.global_seed)
        os.environ["PYTHONHASHSEED"] = str(args.global_seed)
        try:
            torch.backends.cudnn.deterministic = True
            torch.backends.cudnn.benchmark = False
            torch.use_deterministic_algorithms(True)
        except Exception as exc:  # noqa: BLE001 - determinism is best effort on some builds
            print(f"deterministic algorithms not enabled: {exc}")
    return args


def generate_rollouts(llm, prompts, seed):
    """docs/references.md §5.2: `llm.generate.remote(prompts, SamplingParams(temperature=0.0, seed=...,
    max_tokens=1024), use_tqdm=False)`; returns the handle."""
    sampling_params = SamplingParams(temperature=0.0, seed=seed, max_tokens=1024)
    return llm.generate.remote(prompts, sampling_params, use_tqdm=False)


def count_generated_tokens(output):
    """The number of tokens of every completion of one request output."""
    return sum(len(completion.token_ids) for completion in output.outputs)


def postprocess_outputs(outputs, task_data):
    """docs/references.md §5.2: the first completion of each prompt graded by `evaluate_reward(text, item)
    -> (r, response)`; per member the mean of the per-prompt `r["reward"]` (and of the format/answer
    rewards when `r["reward_info"]` has them)."""
    rewards: List[float] = []
    format_rewards, answer_rewards, num_tokens = [], [], 0
    for output, data in zip(outputs, task_data):
        r, _response = evaluate_reward(output.outputs[0].text, data)
        rewards.append(r["reward"])
        info = r.get("reward_info") or {}
        if "format_reward" in info:
            format_rewards.append(info["format_reward"])
        if "answer_reward" in info:
            answer_rewards.append(info["answer_reward"])
        num_tokens += count_generated_tokens(output)
    perf: Dict[str, Any] = {"reward": float(np.mean(rewards)), "rewards": rewards, "num_tokens": num_tokens}
    if format_rewards:
        perf["format_reward"] = float(np.mean(format_rewards))
    if answer_rewards:
        perf["answer_reward"] = float(np.mean(answer_rewards))
    return perf


def evaluate_model(llm, eval_data, wandb_run, step, args):
    """docs/references.md §5.2: engine `llm` on the evaluation set in batches of --eval_batch_size;
    logged at `step`. A no-op (None) for empty evaluation data; else the mean reward."""
    if not eval_data:
        return None
    started = time.time()
    total, tokens = 0.0, 0
    for start in range(0, len(eval_data), args.eval_batch_size):
        batch = eval_data[start:start + args.eval_batch_size]
        outputs = ray.get(generate_rollouts(llm, [item["context"] for item in batch], args.global_seed or 42))
        perf = postprocess_outputs(outputs, batch)
        total += perf["reward"] * len(batch)
        tokens += perf["num_tokens"]
    mean_reward = total / len(eval_data)
    wandb_run.log({"eval/reward": mean_reward, "eval/tokens": tokens, "eval/seconds": time.time() - started},
                  step=step)
    print(f"eval at step {step}: mean reward {mean_reward:.6g}")
    return mean_reward


def log_train(wandb_run, pop_perfs, step):
    """The population's reward statistics of one iteration, logged at `step`."""
    rewards = [perf["reward"] for perf in pop_perfs]
    wandb_run.log({"train/reward_mean": float(np.mean(rewards)), "train/reward_std": float(np.std(rewards)),
                   "train/reward_max": float(np.max(rewards)), "train/reward_min": float(np.min(rewards)),
                   "train/tokens": sum(perf["num_tokens"] for perf in pop_perfs)}, step=step)


def write_iteration_update(logging_dir, iteration, seeds, coeffs):
    """docs/references.md §5.2: `iteration_updates/iteration_NNNNNN.json` under the logging folder,
    {"iteration", "seeds", "update_coefficients"}, written before the update."""
    folder = os.path.join(logging_dir, "iteration_updates")
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, f"iteration_{iteration:06d}.json"), "w") as fh:
        json.dump({"iteration": iteration, "seeds": [int(s) for s in seeds],
                   "update_coefficients": [float(c) for c in coeffs]}, fh)


def main(args):
    """docs/references.md §5.2, es-awd `main(args)`: the logging folder (exist_ok=False) with args.json;
    wandb; the data and the engines; the decay anchor; an evaluation before the loop; iterations
    1 .. num_iterations with seeds from default_rng((global_seed or 42) + i), N/2 of them with
    mirror_sampling (every seed at +sigma, then every seed at -sigma); z-scores over all evaluated
    members; mirrored coefficient = z(+) - z(-); the iteration record written before the update; update on
    engine 0 with decay toward the pre-loop snapshot; broadcast; evaluations every eval_interval and after
    the last iteration; engine 0's final weights; cleanup."""
    started = time.time()
    if args.run_name:
        logging_dir = os.path.join(args.experiment_dir, args.run_name)
    else:
        name = (f"{args.model_name.replace('/', '_')}_{args.task}_seed{args.global_seed}_pop{args.population_size}"
                f"{'_mirror' if args.mirror_sampling else ''}_{args.weight_decay_type}{args.weight_decay_lambda}_"
                f"{datetime.now().strftime('%Y%m%d_%H%M%S')}")
        logging_dir = os.path.join(args.experiment_dir, name)
    os.makedirs(logging_dir, exist_ok=False)
    with open(os.path.join(logging_dir, "args.json"), "w") as fh:
        json.dump(vars(args), fh, indent=2)
    wandb_run = wandb.init(project=args.wandb_project, entity=args.wandb_entity,
                           name=os.path.basename(logging_dir), config=vars(args), dir=logging_dir,
                           mode=args.wandb_mode)

    tokenizer = AutoTokenizer.from_pretrained(args.model_name)
    train_data, eval_data = get_data(tokenizer)
    prompts = [item["context"] for item in train_data]
    engines, pgs = launch_engines(args.num_engines, args.model_name, precision=args.precision)
    if args.weight_decay_type != "none" and args.weight_decay_lambda > 0:
        ray.get(engines[0].collective_rpc.remote("snapshot_weights_to_cpu"))
    evaluate_model(engines[0], eval_data, wandb_run, 0, args)

    n = args.population_size
    for iteration in range(1, args.num_iterations + 1):
        rng = np.random.default_rng((args.global_seed or 42) + iteration)
        seeds = [int(s) for s in rng.integers(0, 2 ** 30, size=n // 2 if args.mirror_sampling else n, dtype=np.int64)]
        # one pass per sign (docs/references.md §5.2): every seed at +sigma in groups of num_engines,
        # then, mirrored, every seed at -sigma the same way, so engine 0 runs seeds 0, E, 2E, ... in each pass
        passes = [[(seed, False) for seed in seeds]]
        if args.mirror_sampling:
            passes.append([(seed, True) for seed in seeds])
        pop_perfs = []
        for members in passes:
            for start in range(0, len(members), args.num_engines):
                group = members[start:start + args.num_engines]
                ray.get([engines[j].collective_rpc.remote("perturb_self_weights",
                                                          args=(seed, args.sigma, args.caching, negate))
                         for j, (seed, negate) in enumerate(group)])
                outputs = ray.get([generate_rollouts(engines[j], prompts, seed) for j, (seed, negate) in enumerate(group)])
                for j, (seed, negate) in enumerate(group):
                    ray.get(engines[j].collective_rpc.remote("restore_self_weights",
                                                             args=(seed, args.sigma, args.caching, negate)))
                    perf = postprocess_outputs(outputs[j], train_data)
                    pop_perfs.append({"seed": seed, "negate": negate, **perf})
                    if args.verbose:
                        print(f"iteration {iteration} seed {seed} negate {negate}: reward {perf['reward']:.6g}")
        rewards = [perf["reward"] for perf in pop_perfs]
        mean, std = np.mean(rewards), np.std(rewards)
        z = [(r - mean) / (std + 1e-8) for r in rewards]
        if args.mirror_sampling:
            coeffs = [float(z[k] - z[k + len(seeds)]) for k in range(len(seeds))]
        else:
            coeffs = [float(c) for c in z]
        write_iteration_update(logging_dir, iteration, seeds, coeffs)
        ray.get(engines[0].collective_rpc.remote(
            "update_weights_from_seeds", args=(seeds, coeffs, args.alpha),
            kwargs={"population_size": n, "caching": args.caching, "weight_decay_type": args.weight_decay_type,
                    "weight_decay_lambda": args.weight_decay_lambda}))
        ray.get([engine.collective_rpc.remote("broadcast_all_weights", args=(0,)) for engine in engines])
        torch.cuda.synchronize()
        log_train(wandb_run, pop_perfs, iteration)
        if (args.eval_interval > 0 and iteration % args.eval_interval == 0) or iteration == args.num_iterations:
            evaluate_model(engines[0], eval_data, wandb_run, iteration, args)

    final_path = os.path.join(logging_dir, "final_model_weights.pt")
    ray.get(engines[0].collective_rpc.remote("write_weights_to_disk", args=(final_path,)))
    print(f"main: {args.num_iterations} iterations in {time.time() - started:.2f}s")
    cleanup(engines, pgs, wandb_run)


if __name__ == "__main__":
    args = parse_args()
    if args.task == "countdown":
        from tasks.countdown import evaluate_reward, get_data  # noqa: F401 - the module globals main reads
    elif args.task == "gsm8k":
        from tasks.gsm8k import evaluate_reward, get_data  # noqa: F401
    else:
        from tasks.proofwriter import evaluate_reward, get_data  # noqa: F401
    main(args)
