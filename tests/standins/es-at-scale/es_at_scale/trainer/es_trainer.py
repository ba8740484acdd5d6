"""Test stand-in for es-at-scale's training loop (NOT the reference code).

Written by the esverify authors from `docs/references.md` §5 alone
(and §1 for the worker calls and z_score), so that the oracle runner's
`fit` op can be tested without a clone of the reference. Like the real
file is described to, it imports Ray, vLLM and transformers at module
level (the parity child serves inert stand-ins for them) and launches
Ray/vLLM in `__init__`, which the child never calls: it builds the object
without it and sets the attributes the loop reads. It keeps the quirks
§5 names: `fit` performs num_iterations + 1 updates, and members are keyed
by seed value. Mutants edit one detail of a copy (tests/standins/loop_mutants.py).
"""
import os
import time

import numpy
import ray
import torch
from ray.util.placement_group import placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy
from transformers import AutoTokenizer
from vllm import LLM, SamplingParams

from es_at_scale.utils.reward_shaping import z_score


class EvolutionStrategiesTrainer:
    """docs/references.md §5, es-at-scale: class EvolutionStrategiesTrainer."""

    def __init__(self, model_name, task, template, train_dataloader, sigma=0.001, alpha=0.0005,
                 population_size=30, num_iterations=100, global_seed=None, mini_batch_size=8,
                 n_vllm_engines=4, logging="wandb", logging_dir="logs"):
        """docs/references.md §5: "Its __init__ launches Ray/vLLM" (never called by the parity child)."""
        ray.init()
        self.tokenizer = AutoTokenizer.from_pretrained(model_name)
        self.engines = []
        for _ in range(n_vllm_engines):
            group = placement_group([{"GPU": 1}])
            strategy = PlacementGroupSchedulingStrategy(placement_group=group)
            engine_cls = ray.remote(num_gpus=1, scheduling_strategy=strategy)(LLM)
            self.engines.append(engine_cls.remote(
                model=model_name, worker_extension_cls="es_at_scale.utils.worker_extension.WorkerExtension"))
        self.task, self.template, self.train_dataloader = task, template, train_dataloader
        self.sigma, self.alpha, self.population_size = sigma, alpha, population_size
        self.num_iterations, self.global_seed, self.mini_batch_size = num_iterations, global_seed, mini_batch_size
        self.n_vllm_engines, self.logging, self.logging_dir = n_vllm_engines, logging, logging_dir

    def _sampling_params(self):
        """docs/references.md §5: the sampling fields n_samples, train_temperature, train_top_p, max_tokens."""
        return SamplingParams(n=self.n_samples, temperature=self.train_temperature, top_p=self.train_top_p,
                              max_tokens=self.max_tokens)

    def _prompts(self, inputs):
        """docs/references.md §5: "a template callable, a tokenizer stand-in"."""
        return [self.tokenizer.apply_chat_template([{"role": "user", "content": self.template(x)}],
                                                   tokenize=False, add_generation_prompt=True) for x in inputs]

    def _score(self, outputs, targets):
        """docs/references.md §5: each response "scored by the reward callable on (response text, target)",
        through the process pool with reward_function_timeout; samples reduced by rollout_reduce."""
        rewards = []
        for output, target in zip(outputs, targets):
            jobs = [self.process_pool.submit(self.task, sample.text, target) for sample in output.outputs]
            values = [job.result(timeout=self.reward_function_timeout) for job in jobs]
            rewards.append(float(numpy.mean(values)) if self.rollout_reduce == "mean" else float(max(values)))
        return rewards

    def evaluate_population_on_batch(self, seeds, inputs, targets):
        """docs/references.md §5, evaluate_population_on_batch: seeds in order, in groups of
        n_vllm_engines; member j of a group is perturbed on engine j, all of the group
        generate, then each is restored and scored."""
        prompts = self._prompts(inputs)
        params = self._sampling_params()
        perf = {}
        for start in range(0, len(seeds), self.n_vllm_engines):
            group = seeds[start:start + self.n_vllm_engines]
            ray.get([self.engines[j].collective_rpc.remote("perturb_self_weights", args=(seed, self.sigma, False))
                     for j, seed in enumerate(group)])
            outputs = ray.get([self.engines[j].generate.remote(prompts, params, use_tqdm=False)
                               for j in range(len(group))])
            for j, seed in enumerate(group):
                ray.get(self.engines[j].collective_rpc.remote("restore_self_weights", args=(seed, self.sigma)))
                perf[seed] = {"avg_reward": float(numpy.mean(self._score(outputs[j], targets))),
                              "count": len(inputs)}
        return perf

    def train_step(self, iteration, seeds, inputs, targets):
        """docs/references.md §5, train_step: for each mini-batch evaluate_population_on_batch; per seed a
        batch-size-weighted mean reward; mean/std with numpy over the members in seed-insertion order;
        z_score (§1); coefficients in seed order; update on engine 0; broadcast on every engine."""
        seeds_perf = {}
        for start in range(0, len(inputs), self.mini_batch_size):
            batch_in = inputs[start:start + self.mini_batch_size]
            batch_tg = targets[start:start + self.mini_batch_size]
            perf = self.evaluate_population_on_batch(seeds, batch_in, batch_tg)
            for seed, entry in perf.items():
                total = seeds_perf.setdefault(seed, {"sum": 0.0, "count": 0})
                total["sum"] += entry["avg_reward"] * entry["count"]
                total["count"] += entry["count"]
        for entry in seeds_perf.values():
            entry["avg_reward"] = entry["sum"] / entry["count"]
        rewards = [entry["avg_reward"] for entry in seeds_perf.values()]
        mean_reward = float(numpy.mean(rewards))
        std_reward = float(numpy.std(rewards))
        seeds_perf = z_score(seeds_perf, mean_reward, std_reward)
        update_seeds = list(seeds_perf.keys())
        coeffs = [seeds_perf[seed]["norm_reward"] for seed in update_seeds]
        ray.get(self.engines[0].collective_rpc.remote(
            "update_weights_from_seeds", args=(update_seeds, coeffs, self.alpha, self.population_size)))
        ray.get([engine.collective_rpc.remote("broadcast_all_weights", args=(0,)) for engine in self.engines])
        torch.cuda.synchronize()
        if self.logging != "none":
            print(f"iteration {iteration}: mean reward {mean_reward:.6g} std {std_reward:.6g}")
        return mean_reward

    def evaluate(self):
        """docs/references.md §5, fit "evaluates once": engine 0's mean reward over the first batch."""
        inputs, targets = next(iter(self.train_dataloader))
        outputs = ray.get(self.engines[0].generate.remote(self._prompts(inputs), self._sampling_params()))
        return float(numpy.mean(self._score(outputs, targets)))

    def fit(self):
        """docs/references.md §5, fit(): evaluates once, then per iteration i = 0, 1, ... draws the member seeds
        from numpy.random.default_rng((global_seed or 42) + i) and calls train_step; stops after the step
        where the incremented counter exceeds num_iterations (num_iterations + 1 updates); saves engine 0's
        weights at the end."""
        started = time.time()
        self.evaluate()
        iteration = 0
        batches = iter(self.train_dataloader)
        while True:
            try:
                inputs, targets = next(batches)
            except StopIteration:
                batches = iter(self.train_dataloader)
                inputs, targets = next(batches)
            rng = numpy.random.default_rng(seed=(self.global_seed or 42) + iteration)
            seeds = [int(s) for s in rng.integers(0, 2 ** 30, size=self.population_size, dtype=numpy.int64)]
            self.train_step(iteration, seeds, inputs, targets)
            iteration += 1
            if iteration > self.num_iterations:
                break
        path = os.path.join(self.logging_dir, "final_model.pt")
        ray.get(self.engines[0].collective_rpc.remote("save_self_weights_to_disk", args=(path,)))
        print(f"fit: {iteration} updates in {time.time() - started:.2f}s")
