"""Test stand-in for es-at-scale's training loop (NOT the reference code).

Written by the esverify authors from `docs/references.md` §5 alone (and
§1 for the worker calls and z_score), so that the oracle runner's `fit`
op can be tested without a clone of the reference. It has the interface
the docs and the interface manifest (esverify/references/es_at_scale/child/interfaces.json) give the
real file: the same module-level imports in the same order, `ESNcclLLM`
and `EvolutionStrategiesTrainer` with the same methods and signatures.
The parity child drives it the way a user runs the real one: the
constructor (which sets up Ray, the signal handlers, the reward pool, the
logging folder, the tokenizer and the engines), then `fit()`, replacing
only the seams docs/references.md §5 lists (`Pool`, `get_ip`,
`get_open_port` on this module, the `launch_engines` method, the signal
handlers). It keeps the quirks §5 names: `fit` performs num_iterations + 1
updates, and members are keyed by seed value. Mutants edit one detail of a
copy (tests/standins/loop_mutants.py).
"""
from datetime import datetime
import gc
import os
import signal
import sys
import time

import numpy as np
import ray
from ray.util.placement_group import placement_group, remove_placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy
from vllm import LLM, SamplingParams
from vllm.utils import get_ip, get_open_port
from transformers import AutoTokenizer
import torch
import json
from typing import List
from multiprocessing import Pool, TimeoutError
import functools

from es_at_scale.utils.reward_shaping import z_score


class ESNcclLLM(LLM):
    """docs/references.md §5.1: the vLLM engine class the trainer launches (one per placement group)."""

    def __init__(self, *args, **kwargs):
        # the placement group gives the actor its GPUs: vLLM must not be narrowed by the driver's setting
        os.environ.pop("CUDA_VISIBLE_DEVICES", None)
        super().__init__(*args, **kwargs)


class EvolutionStrategiesTrainer:
    """docs/references.md §5.1, es-at-scale: class EvolutionStrategiesTrainer."""

    def __init__(self, model_name, checkpoint, sigma, alpha, population_size, reward_shaping, num_iterations,
                 max_tokens, batch_size, mini_batch_size, reward_function, template_function, train_dataloader,
                 eval_dataloader_dict, eval_freq, n_vllm_engines, n_gpu_per_vllm_engine, logging, use_gpus,
                 global_seed=None, output_directory=None, save_best_models=True, experiment_name=None,
                 wandb_project=None, reward_function_timeout=60):
        """docs/references.md §5.1, "What construction does, in order"."""
        os.environ["CUDA_VISIBLE_DEVICES"] = use_gpus
        for key in ("RAY_ADDRESS", "RAY_HEAD_IP", "RAY_GCS_SERVER_ADDRESS"):
            os.environ.pop(key, None)
        ray.init(address="local", include_dashboard=False, ignore_reinit_error=True)
        signal.signal(signal.SIGINT, self._handle_exit)
        signal.signal(signal.SIGTERM, self._handle_exit)

        self.model_name = model_name
        self.checkpoint = checkpoint
        self.sigma = sigma
        self.alpha = alpha
        self.population_size = population_size
        self.reward_shaping = reward_shaping
        self.num_iterations = num_iterations
        self.max_tokens = max_tokens
        self.batch_size = batch_size
        self.mini_batch_size = mini_batch_size
        self.template = template_function
        self.train_dataloader = train_dataloader
        self.eval_dataloader_dict = eval_dataloader_dict
        self.eval_freq = eval_freq
        self.n_vllm_engines = n_vllm_engines
        self.n_gpu_per_vllm_engine = n_gpu_per_vllm_engine
        self.logging = logging
        self.global_seed = global_seed
        self.save_best_models = save_best_models
        self.experiment_name = experiment_name
        self.reward_function_timeout = reward_function_timeout
        self.n_samples = 1
        self.rollout_reduce = "mean"
        self.train_temperature = 0.0
        self.train_top_p = 1.0
        self.eval_temperature = 0.0
        self.eval_top_p = 1.0
        self.best_avg = -float("inf")

        self.task = functools.partial(reward_function)
        self.mp_pool = Pool(8)
        self.logging_dir = f"{output_directory or '../experiments/'}/{experiment_name}"
        os.makedirs(os.path.join(self.logging_dir, "checkpoints"), exist_ok=True)
        os.makedirs(os.path.join(self.logging_dir, "eval-output"), exist_ok=True)
        self.wandb_run = None
        if logging == "wandb":
            import wandb
            self.wandb_run = wandb.init(project=wandb_project, name=experiment_name, dir=self.logging_dir,
                                        config={"sigma": sigma, "alpha": alpha, "population_size": population_size,
                                                "num_iterations": num_iterations, "global_seed": global_seed})

        self.tokenizer = AutoTokenizer.from_pretrained(model_name)
        self.engines, self.pgs = self.launch_engines(num_engines=n_vllm_engines,
                                                     n_gpu_per_vllm_engine=n_gpu_per_vllm_engine,
                                                     model_name=model_name)
        master_address, master_port = get_ip(), get_open_port()
        ray.get([engine.collective_rpc.remote("init_inter_engine_group",
                                              args=(master_address, master_port, i, n_vllm_engines))
                 for i, engine in enumerate(self.engines)])
        if checkpoint is not None:
            ray.get([engine.collective_rpc.remote("load_weights_from_disk", args=(checkpoint,))
                     for engine in self.engines])

        # the first batch of every evaluation set, template applied, evaluated at every eval_step
        self.eval_batches = {}
        for name, loader in eval_dataloader_dict.items():
            for input_text, target_text in loader:
                self.eval_batches[name] = ([self.template(prompt) for prompt in input_text], list(target_text))
                break

    def cleanup(self):
        """docs/references.md §5.1: ray.kill per engine, remove_placement_group per placement group."""
        for engine in getattr(self, "engines", []):
            ray.kill(engine)
        for pg in getattr(self, "pgs", []):
            remove_placement_group(pg)
        self.engines, self.pgs = [], []
        gc.collect()

    def _handle_exit(self, sig, frame):
        """docs/references.md §5.1: the SIGINT/SIGTERM handler: clean up, then sys.exit(0)."""
        print(f"received signal {sig}: cleaning up")
        self.cleanup()
        sys.exit(0)

    def launch_engines(self, num_engines=4, n_gpu_per_vllm_engine=1, model_name='Qwen/Qwen2.5-Math-1.5B',
                       precision='bfloat16'):
        """docs/references.md §5.1: one ESNcclLLM Ray actor per placement group of
        `n_gpu_per_vllm_engine` GPUs. Returns (engines, placement_groups). (The parity child replaces
        this method with its stand-in engines.)"""
        pgs = [placement_group([{"GPU": 1, "CPU": 0}] * n_gpu_per_vllm_engine, lifetime="detached")
               for _ in range(num_engines)]
        ray.get([pg.ready() for pg in pgs])
        engines = []
        for pg in pgs:
            strategy = PlacementGroupSchedulingStrategy(placement_group=pg,
                                                        placement_group_capture_child_tasks=True,
                                                        placement_group_bundle_index=0)
            engines.append(ray.remote(num_cpus=0, num_gpus=0, scheduling_strategy=strategy)(ESNcclLLM).remote(
                model=model_name, tensor_parallel_size=n_gpu_per_vllm_engine, distributed_executor_backend="ray",
                worker_extension_cls="es_at_scale.utils.worker_extension.WorkerExtension", dtype=precision,
                enable_prefix_caching=False, enforce_eager=False))
        return engines, pgs

    def _postprocess_outputs(self, generated_text, target_text, eval=False):
        """docs/references.md §5.1, the reward contract: each completion's `token_ids` decoded with
        `skip_special_tokens=True` and counted; `(label, reward)` from the reward function through the
        pool with reward_function_timeout, `float(reward)`, a timeout scoring 0.0; per prompt the
        completions reduced by rollout_reduce, then the mean over the prompts (`avg_reward`)."""
        rewards: List[float] = []
        records, num_tokens = [], 0
        for output, target in zip(generated_text, target_text):
            values = []
            for completion in output.outputs:
                response_text = self.tokenizer.decode(completion.token_ids, skip_special_tokens=True)
                num_tokens += len(completion.token_ids)
                try:
                    label, reward = self.mp_pool.apply_async(self.task, (response_text, target)).get(
                        timeout=self.reward_function_timeout)
                    reward = float(reward)
                except TimeoutError:
                    label, reward = "timeout", 0.0
                values.append(reward)
                if eval:
                    records.append({"prompt": output.prompt, "response": response_text, "target": target,
                                    "label": label, "reward": reward})
            rewards.append(float(np.mean(values)) if self.rollout_reduce == "mean" else float(np.max(values)))
        return {"avg_reward": float(np.mean(rewards)), "rewards": rewards, "num_tokens": num_tokens,
                "records": records}

    def train_step(self, iteration, seeds, input_text, target_text):
        """docs/references.md §5.1, train_step: for each mini-batch evaluate_population_on_batch; per seed a
        batch-size-weighted mean reward; mean/std with numpy over the members in seed-insertion order;
        z_score (§1) by keyword; coefficients in seed order; update on engine 0; broadcast on every engine."""
        started = time.time()
        sampling_params = SamplingParams(n=self.n_samples, seed=(self.global_seed or 42) + iteration,
                                         temperature=self.train_temperature, top_p=self.train_top_p,
                                         max_tokens=self.max_tokens)
        seeds_perf = {}
        for input_batch, target_batch in self._iter_minibatches(input_text, target_text, self.mini_batch_size):
            batch_perf = self.evaluate_population_on_batch(seeds, input_batch, target_batch, sampling_params)
            for seed, perf in batch_perf.items():
                total = seeds_perf.setdefault(seed, {"reward_sum": 0.0, "count": 0})
                total["reward_sum"] += perf["avg_reward"] * len(input_batch)
                total["count"] += len(input_batch)
        for perf in seeds_perf.values():
            perf["avg_reward"] = perf["reward_sum"] / perf["count"]
        rewards = [perf["avg_reward"] for perf in seeds_perf.values()]
        mean_reward = float(np.mean(rewards))
        std_reward = float(np.std(rewards))
        seeds_perf = z_score(seeds_perf, std_reward=std_reward, mean_reward=mean_reward)
        update_seeds = list(seeds_perf.keys())
        coeffs = [seeds_perf[seed]["norm_reward"] for seed in update_seeds]
        ray.get(self.engines[0].collective_rpc.remote(
            "update_weights_from_seeds", args=(update_seeds, coeffs, self.alpha, self.population_size)))
        ray.get([engine.collective_rpc.remote("broadcast_all_weights", args=(0,)) for engine in self.engines])
        torch.cuda.synchronize()
        if self.wandb_run is not None:
            self.wandb_run.log({"train/mean_reward": mean_reward, "train/std_reward": std_reward,
                                "train/step_seconds": time.time() - started}, step=iteration)
        print(f"iteration {iteration}: mean reward {mean_reward:.6g} std {std_reward:.6g} "
              f"in {time.time() - started:.2f}s")
        return mean_reward

    def _iter_minibatches(self, input_text, target_text, mini_batch_size):
        """docs/references.md §5.1: mini-batches are slices of `mini_batch_size` prompts (the last one
        may be shorter)."""
        for start in range(0, len(input_text), mini_batch_size):
            yield input_text[start:start + mini_batch_size], target_text[start:start + mini_batch_size]

    def evaluate_handle(self, llm, input_text, sampling_params):
        """docs/references.md §5.1: `llm.generate.remote(prompts, sampling_params, use_tqdm=False)`."""
        return llm.generate.remote(input_text, sampling_params, use_tqdm=False)

    def evaluate_population_on_batch(self, seeds, input_batch, target_batch, sampling_params):
        """docs/references.md §5.1, evaluate_population_on_batch: seeds in order, in groups of
        n_vllm_engines; member j of a group is perturbed on engine j, all of the group
        generate, then each is restored and scored."""
        seeds_perf = {}
        for start in range(0, len(seeds), self.n_vllm_engines):
            group = seeds[start:start + self.n_vllm_engines]
            ray.get([self.engines[j].collective_rpc.remote("perturb_self_weights", args=(seed, self.sigma, False))
                     for j, seed in enumerate(group)])
            handles = [self.evaluate_handle(self.engines[j], input_batch, sampling_params)
                       for j in range(len(group))]
            outputs = ray.get(handles)
            for j, seed in enumerate(group):
                ray.get(self.engines[j].collective_rpc.remote("restore_self_weights", args=(seed, self.sigma)))
                seeds_perf[seed] = self._postprocess_outputs(outputs[j], target_batch)
        return seeds_perf

    def eval_step(self, iteration):
        """docs/references.md §5.1, eval_step: engine 0 generates on each evaluation set (n=1,
        temperature 0); the rewards averaged with prompt-count weights; the outputs written as JSON under
        logging_dir/eval-output/; with save_best_models a better mean saves engine 0's weights under
        logging_dir/checkpoints/. Returns the mean (None without evaluation sets)."""
        started = time.time()
        results, total, count = {}, 0.0, 0
        for name in self.eval_dataloader_dict:
            input_text, target_text = self.eval_batches[name]
            sampling_params = SamplingParams(n=1, seed=self.global_seed or 42, temperature=self.eval_temperature,
                                             top_p=self.eval_top_p, max_tokens=self.max_tokens)
            outputs = ray.get(self.evaluate_handle(self.engines[0], input_text, sampling_params))
            perf = self._postprocess_outputs(outputs, target_text, eval=True)
            results[name] = perf
            total += perf["avg_reward"] * len(input_text)
            count += len(input_text)
        if count == 0:
            return None
        avg = total / count
        path = os.path.join(self.logging_dir, "eval-output", f"eval_iteration_{iteration}.json")
        with open(path, "w") as fh:
            json.dump({"iteration": iteration, "time": datetime.now().isoformat(), "avg_reward": avg,
                       "sets": results}, fh, indent=2, default=str)
        if self.save_best_models and avg > self.best_avg:
            self.best_avg = avg
            best_path = os.path.join(self.logging_dir, "checkpoints", f"best_iteration_{iteration}",
                                     "pytorch_model.pth")
            ray.get(self.engines[0].collective_rpc.remote(
                "save_self_weights_to_disk", args=(best_path,)))
        if self.wandb_run is not None:
            self.wandb_run.log({"eval/avg_reward": avg, "eval/seconds": time.time() - started}, step=iteration)
        print(f"eval at iteration {iteration}: avg reward {avg:.6g}")
        return avg

    def fit(self):
        """docs/references.md §5.1, fit(): eval_step(0) first (and nothing else when num_iterations is 0);
        then per iteration i = 0, 1, ... over the loader's batches (epochs) the member seeds from
        numpy.random.default_rng((global_seed or 42) + i) and train_step; an evaluation when
        (i + 1) % eval_freq == 0 and i > 0; it stops after the step where the incremented counter exceeds
        num_iterations (num_iterations + 1 updates); then engine 0's weights are saved and cleanup()."""
        started = time.time()
        self.eval_step(0)
        if self.num_iterations == 0:
            return
        i = 0
        done = False
        while not done:
            batches = 0
            for input_text, target_text in self.train_dataloader:
                batches += 1
                input_text = [self.template(prompt) for prompt in input_text]
                rng = np.random.default_rng(seed=(self.global_seed or 42) + i)
                seeds = rng.integers(0, 2 ** 30, size=self.population_size, dtype=np.int64).tolist()
                self.train_step(i, seeds, input_text, list(target_text))
                if (i + 1) % self.eval_freq == 0 and i > 0:
                    self.eval_step(i + 1)
                i += 1
                if i > self.num_iterations:
                    done = True
                    break
            if batches == 0:
                raise ValueError("fit: train_dataloader yielded no batch")
        path = f"{self.logging_dir}/checkpoint-es_fine_tuned_iteration_{self.num_iterations}/pytorch_model.pth"
        ray.get(self.engines[0].collective_rpc.remote("save_self_weights_to_disk", args=(path,)))
        print(f"fit: {i} updates in {time.time() - started:.2f}s")
        self.cleanup()
