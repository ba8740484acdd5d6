"""Test stand-in for es-awd's training script (NOT the reference code).

Written by the esverify authors from `docs/references.md` §5 alone,
so that the oracle runner's `main` op can be tested without a clone of the
reference. Like the real file is described to, it imports Ray, vLLM,
transformers and wandb at module level (the parity child serves inert
stand-ins), takes `launch_engines`/`cleanup` from distributed_utils (the
child replaces them) and uses module globals `get_data` and
`evaluate_reward` that its `__main__` block imports from a task package
(the child injects its own). Mutants edit one detail of a copy
(tests/standins/loop_mutants.py).
"""
import argparse
import json
import os

import numpy as np
import ray
import torch
import wandb
from transformers import AutoTokenizer
from vllm import SamplingParams

from distributed_utils import cleanup, launch_engines


def _evaluate(engines, members, prompts, targets, sampling, args):
    """docs/references.md §5, es-awd: "Members evaluated per group of num_engines ... perturb and restore pass
    caching and negate through"; "Rewards: per member the mean of the per-prompt rewards"."""
    rewards = []
    for start in range(0, len(members), args.num_engines):
        group = members[start:start + args.num_engines]
        ray.get([engines[j].collective_rpc.remote("perturb_self_weights",
                                                  args=(seed, args.sigma, args.caching, negate))
                 for j, (seed, negate) in enumerate(group)])
        outputs = ray.get([engines[j].generate.remote(prompts, sampling) for j in range(len(group))])
        for j, (seed, negate) in enumerate(group):
            ray.get(engines[j].collective_rpc.remote("restore_self_weights",
                                                     args=(seed, args.sigma, args.caching, negate)))
            scores = [evaluate_reward(output.outputs[0].text, target) for output, target in zip(outputs[j], targets)]
            rewards.append(float(np.mean(scores)))
    return rewards


def main(args):
    """docs/references.md §5, es-awd `main(args)`: iterations 1 .. num_iterations; seeds from
    default_rng((global_seed or 42) + i), N/2 of them with mirror_sampling; z-scores over all evaluated
    members; mirrored coefficient = z(+) - z(-); the iteration record written before the update; update
    on engine 0 with decay toward the pre-loop snapshot; broadcast; final state_dict with torch.save."""
    wandb.init(project=args.wandb_project, config=vars(args))
    tokenizer = AutoTokenizer.from_pretrained(args.model_name)
    prompts, targets = get_data(args, tokenizer)
    engines, groups = launch_engines(args.num_engines, args.model_name)
    sampling = SamplingParams(temperature=args.temperature, max_tokens=args.max_tokens)
    n = args.population_size
    if args.weight_decay_type != "none" and args.weight_decay_lambda > 0:
        ray.get(engines[0].collective_rpc.remote("snapshot_weights_to_cpu"))
    updates_dir = os.path.join(args.logging_dir, "iteration_updates")
    os.makedirs(updates_dir, exist_ok=True)
    for iteration in range(1, args.num_iterations + 1):
        rng = np.random.default_rng((args.global_seed or 42) + iteration)
        seeds = [int(s) for s in rng.integers(0, 2 ** 30, size=n // 2 if args.mirror_sampling else n)]
        members = [(seed, False) for seed in seeds]
        if args.mirror_sampling:
            members += [(seed, True) for seed in seeds]
        rewards = _evaluate(engines, members, prompts, targets, sampling, args)
        mean, std = np.mean(rewards), np.std(rewards)
        z = [(r - mean) / (std + 1e-8) for r in rewards]
        if args.mirror_sampling:
            coeffs = [float(z[k] - z[k + len(seeds)]) for k in range(len(seeds))]
        else:
            coeffs = [float(c) for c in z]
        with open(os.path.join(updates_dir, f"iteration_{iteration:06d}.json"), "w") as fh:
            json.dump({"iteration": iteration, "seeds": seeds, "update_coefficients": coeffs}, fh)
        ray.get(engines[0].collective_rpc.remote(
            "update_weights_from_seeds", args=(seeds, coeffs, args.alpha, n, args.caching,
                                               args.weight_decay_type, args.weight_decay_lambda)))
        ray.get([engine.collective_rpc.remote("broadcast_all_weights", args=(0,)) for engine in engines])
        torch.cuda.synchronize()
        wandb.log({"iteration": iteration, "reward_mean": float(mean), "reward_std": float(std)})
    ray.get(engines[0].collective_rpc.remote("write_weights_to_disk",
                                             args=(os.path.join(args.logging_dir, "final_weights.pt"),)))
    cleanup(engines, groups)


def parse_args(argv=None):
    """docs/references.md §5: "an argparse namespace (defaults: sigma 0.001, alpha 0.0005, population 30)"."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--model_name", default="model")
    parser.add_argument("--sigma", type=float, default=0.001)
    parser.add_argument("--alpha", type=float, default=0.0005)
    parser.add_argument("--population_size", type=int, default=30)
    parser.add_argument("--num_iterations", type=int, default=1000)
    parser.add_argument("--num_engines", type=int, default=4)
    parser.add_argument("--global_seed", type=int, default=None)
    parser.add_argument("--mirror_sampling", action="store_true")
    parser.add_argument("--caching", action="store_true")
    parser.add_argument("--weight_decay_type", default="none", choices=["none", "l1", "l2"])
    parser.add_argument("--weight_decay_lambda", type=float, default=0.0)
    parser.add_argument("--temperature", type=float, default=0.0)
    parser.add_argument("--max_tokens", type=int, default=256)
    parser.add_argument("--logging_dir", default="logs")
    parser.add_argument("--wandb_project", default="es-awd")
    return parser.parse_args(argv)


if __name__ == "__main__":
    from task import evaluate_reward, get_data  # noqa: F401 - the module globals main uses
    main(parse_args())
