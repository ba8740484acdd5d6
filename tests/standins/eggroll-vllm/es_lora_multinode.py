"""Test stand-in for EGGROLL's transformer trainer `es_lora_multinode.py` (NOT the reference code).

Written by the esverify authors from the description of the reference in
esverify's specification (the project's docs/references.md gives the user's
view) alone, so that the oracle runner's eggroll driver can be tested
without a clone of the reference (GPL-3.0, never copied). It has the
interface the interface manifest (esverify/references/eggroll/child/interfaces.json) gives the real
file: the same module-level imports in the same order, the same module
globals, functions, classes and methods with their parameters and defaults,
and the `Args` dataclass with every field and default. It behaves as
described: tyro parses `Args` when run as __main__, `main` checks the Ray
cluster, seeds Python's, numpy's and torch's global generators, installs
SIGINT/SIGTERM handlers, builds the peft model to learn the targeted
weights (in yield order), launches the engines through the module global
`args`, serves rank-r perturbations as f16 LoRA adapters, centres the
fitnesses per prompt, and adds the chunked low-rank update to engine 0,
then copies engine 0 to the others. Its documented defects are kept on
purpose (a parity report must find them): the seed streams overlap across
`base_seed` values, adapters go to /dev/shm and are never removed, a
failing add is printed and skipped, `launch_engines` reads the global
`args`. Mutants edit one detail of a copy (tests/standins/eggroll_mutants.py).
"""
import argparse
from datetime import datetime
import gc
import json
import os
import random
import shutil
import signal
import sys
import time
from dataclasses import dataclass
import copy
import math

import numpy as np
import ray
from ray.util.placement_group import placement_group, remove_placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy
import torch
from accelerate import init_empty_weights
from transformers import AutoModelForCausalLM, AutoTokenizer, AutoConfig
from vllm import LLM, SamplingParams
from vllm.utils.network_utils import get_ip, get_open_port
import tyro
import wandb
import weave
from peft import LoraConfig, get_peft_model
from vllm.lora.request import LoRARequest
from safetensors.torch import save_file, load_file

from tasks import MathTask, CountdownTask, ZerosTask, RandomTask

EXPERIMENT_DIR = os.path.expandvars("$SCRATCH/for_es_lora/experiments")
SLURM_JOB_ID = os.environ.get("SLURM_JOB_ID", str(os.getpid()))
LORA_POPULATION_PATH = f"/dev/shm/es_lora_population_async_{SLURM_JOB_ID}"
LORA_TARGET_MODULES = [f"{part}_proj" for part in ("q", "k", "v", "o", "gate", "up", "down")]

print(f"Experiment directory: {EXPERIMENT_DIR}")
print(f"LoRA population path: {LORA_POPULATION_PATH}")


@dataclass
class Args:
    model_name: str = "Qwen/Qwen2-0.5B"
    sigma: float = 0.001
    population_size: int = 128
    num_iterations: int = 300
    max_tokens: int = 1024
    temperature: float = 0.0
    samples_per_prompt: int = 1
    task: str = "zeros"
    prompt_batch_size: int = 2
    pass_at_k: bool = False
    normalize_with_std: bool = False
    scale_lr_in_grad: bool = False
    lora_r: int = 4
    lora_alpha: int = None
    steps_per_adapter: int = 4
    learning_rate: float = 0.001
    num_gpus: int = None
    num_engines: int = None
    tensor_parallel_size: int = 1
    verbose: bool = True
    base_seed: int = 0
    sub_dataset_size: int = None
    steps_per_eval: int = 10
    eval_batch_size: int = 128
    es_update_chunk_size: int = None
    use_wandb: bool = False
    wandb_project: str = "hyperscalees-vllm"
    name_prefix: str = f"debug"
    save_freq: int = 50
    checkpoint_dir: str = None
    resume_from: str = None

    def __post_init__(self):
        if self.lora_alpha is None:
            self.lora_alpha = self.lora_r
        # the model name picks the tensor parallel size while it is 1 (an explicit 1 cannot keep 1)
        tp_by_name = {"Qwen/Qwen1.5-110B": 4, "Qwen/Qwen2.5-14B": 2, "Qwen/Qwen2.5-32B": 4,
                      "Qwen/Qwen2.5-72B": 4, "Qwen/Qwen3-30B": 2, "Qwen/Qwen3-32B": 4}
        if self.tensor_parallel_size == 1:
            for prefix, size in tp_by_name.items():
                if self.model_name.startswith(prefix):
                    self.tensor_parallel_size = size
                    break


def map_peft_updates_to_vllm(peft_updates_dict, vllm_shapes_dict, device):
    """{vLLM tensor name: [(row_start, row_end, delta)]}: q/k/v land in rows of qkv_proj, gate/up in rows
    of gate_up_proj (offsets from the full-size peft shapes), o/down on the whole tensor (None bounds).
    A narrower vLLM tensor gets the leading rows (qkv, gate_up) or leading columns (o, down)."""
    shapes = {name: tuple(delta.shape) for name, delta in peft_updates_dict.items()}
    mapped = {}
    for name, delta in peft_updates_dict.items():
        rest = name[len("base_model.model."):] if name.startswith("base_model.model.") else name
        module = rest[: -len(".base_layer.weight")]
        prefix, proj = module.rsplit(".", 1)
        if proj in ("q_proj", "k_proj", "v_proj"):
            target = f"{prefix}.qkv_proj.base_layer.weight"
            q_rows = shapes[name.replace(proj, "q_proj")][0]
            k_rows = shapes[name.replace(proj, "k_proj")][0]
            start = {"q_proj": 0, "k_proj": q_rows, "v_proj": q_rows + k_rows}[proj]
        elif proj in ("gate_proj", "up_proj"):
            target = f"{prefix}.gate_up_proj.base_layer.weight"
            start = 0 if proj == "gate_proj" else shapes[name.replace(proj, "gate_proj")][0]
        else:
            target = rest
            start = None
        vllm_shape = vllm_shapes_dict.get(target)
        delta = delta.to(device)
        if start is None:
            if vllm_shape is not None and vllm_shape[1] < delta.shape[1]:
                delta = delta[:, : vllm_shape[1]]
            mapped.setdefault(target, []).append((None, None, delta))
        else:
            if vllm_shape is not None and vllm_shape[0] < start + delta.shape[0]:
                delta = delta[: max(vllm_shape[0] - start, 0)]
            mapped.setdefault(target, []).append((start, start + delta.shape[0], delta))
    return mapped


def _stateless_init_process_group(master_address, master_port, gpu_rank, world_size, device):
    from vllm.distributed.device_communicators.pynccl import PyNcclCommunicator
    from vllm.distributed.utils import StatelessProcessGroup
    group = StatelessProcessGroup.create(host=master_address, port=master_port, rank=gpu_rank,
                                         world_size=world_size)
    return PyNcclCommunicator(group, device=device)


def get_rng_noise(base_seed, num_pop_pairs, pop_pair_idx, num_layers, layer_idx, step, shapes):
    """(a, b): two f32 CPU draws from one generator seeded base_seed + P*L*step + L*k + l."""
    seed = base_seed + num_pop_pairs * num_layers * step + num_layers * pop_pair_idx + layer_idx
    generator = torch.Generator(device="cpu")
    generator.manual_seed(seed)
    a = torch.normal(mean=0.0, std=1.0, size=shapes[0], generator=generator)
    b = torch.normal(mean=0.0, std=1.0, size=shapes[1], generator=generator)
    return a, b


class WorkerExtension:
    """Methods run on each engine's worker through collective_rpc."""

    def get_transport_info(self):
        return get_ip(), get_open_port()

    def apply_lora_es_update(self, normalized_fitnesses, peft_shapes_dict, es_step, args):
        if getattr(self, "es_rank", 0) != 0:
            return False
        fitnesses = np.asarray(normalized_fitnesses, dtype=np.float64)
        population = len(fitnesses)
        num_pairs = population // 2
        num_layers = len(peft_shapes_dict)
        generation = es_step // args.steps_per_adapter
        r = args.lora_r
        sigma = args.sigma
        if args.es_update_chunk_size is not None:
            chunk = min(args.es_update_chunk_size, num_pairs)
        elif r <= 2:
            chunk = min(128, num_pairs)
        elif r <= 8:
            chunk = min(64, num_pairs)
        else:
            chunk = min(32, num_pairs)
        pair_diffs = torch.from_numpy(fitnesses[0::2] - fitnesses[1::2]).to(torch.float32)
        device = self.model_runner.device
        peft_updates = {}
        for layer_idx, (name, shape) in enumerate(peft_shapes_dict.items()):
            out_dim, in_dim = shape
            grad = torch.zeros(out_dim, in_dim, dtype=torch.float32)
            for start in range(0, num_pairs, chunk):
                end = min(start + chunk, num_pairs)
                a_list, b_list = [], []
                for k in range(start, end):
                    a, b = get_rng_noise(args.base_seed, num_pairs, k, num_layers, layer_idx, generation,
                                         [(r, in_dim), (out_dim, r)])
                    a_list.append(a)
                    b_list.append(b)
                A = torch.stack(a_list) * math.sqrt(sigma)
                B = torch.stack(b_list) * math.sqrt(sigma / r)
                d = pair_diffs[start:end]
                if r == 1:
                    scaled_b = B[:, :, 0] * d[:, None]
                    grad += torch.mm(scaled_b.t(), A[:, 0, :])
                else:
                    grad += (torch.bmm(B, A) * d[:, None, None]).sum(dim=0)
            delta = (1.0 / (population * sigma + 1e-8)) * grad
            delta = delta * args.learning_rate
            if args.scale_lr_in_grad:
                delta = delta * math.sqrt(population)
            peft_updates[name] = delta
        params = dict(self.model_runner.model.named_parameters())
        vllm_shapes = {name: tuple(p.shape) for name, p in params.items()}
        mapped = map_peft_updates_to_vllm(peft_updates, vllm_shapes, device)
        with torch.no_grad():
            for target, pieces in mapped.items():
                if target not in params:
                    raise RuntimeError(f"vLLM parameter {target} not found in the model")
                param = params[target]
                for start, end, delta in pieces:
                    try:
                        view = param.data if start is None else param.data[start:end]
                        view.add_(delta.to(dtype=param.dtype, device=param.device))
                    except Exception as exc:
                        print(f"ERROR updating {target}: {exc}")
        return True

    def init_inter_engine_group(self, master_address, master_port, gpu_rank, world_size):
        from vllm.distributed import get_tensor_model_parallel_rank
        self.es_rank = gpu_rank + get_tensor_model_parallel_rank()
        try:
            self.model_update_group = _stateless_init_process_group(master_address, master_port, self.es_rank,
                                                                    world_size, self.model_runner.device)
        except ImportError as exc:
            print(f"WARNING: no NCCL group ({exc}); weights will be copied through the driver")
            self.model_update_group = None
        return True

    def broadcast_all_weights(self, src_rank):
        group = getattr(self, "model_update_group", None)
        if group is None:
            return False
        try:
            for _, param in self.model_runner.model.named_parameters():
                group.broadcast(param.data, src=src_rank, stream=torch.cuda.current_stream())
            torch.cuda.synchronize()
            return True
        except Exception as exc:
            print(f"broadcast failed: {exc}")
            return False

    def get_model_state_dict(self):
        return {name: p.detach().to("cpu").clone() for name, p in self.model_runner.model.named_parameters()}

    def set_model_state_dict(self, state_dict):
        with torch.no_grad():
            for name, p in self.model_runner.model.named_parameters():
                if name in state_dict:
                    p.data.copy_(state_dict[name].to(device=p.device, dtype=p.dtype))
        return True


class ESNcclLLM(LLM):
    def __init__(self, *args, **kwargs):
        os.environ.pop("CUDA_VISIBLE_DEVICES", None)
        os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
        super().__init__(*args, **kwargs)

    def setup_local_lora_generation(self, peft_state_dict, peft_shapes_dict, lora_config_dict, rank):
        self.peft_state_dict = peft_state_dict
        self.peft_shapes_dict = peft_shapes_dict
        self.lora_config_dict = lora_config_dict
        self.lora_folder = f"{LORA_POPULATION_PATH}_{rank}"
        if os.path.exists(self.lora_folder):
            shutil.rmtree(self.lora_folder)
        os.makedirs(self.lora_folder, exist_ok=True)
        return True

    def generate_local_adapters(self, population_indices, es_step, args):
        num_pairs = args.population_size // 2
        num_layers = len(self.peft_shapes_dict)
        generation = es_step // args.steps_per_adapter
        r = args.lora_r
        for m in population_indices:
            tensors = {}
            for layer_idx, (name, shape) in enumerate(self.peft_shapes_dict.items()):
                out_dim, in_dim = shape
                a, b = get_rng_noise(args.base_seed, num_pairs, m // 2, num_layers, layer_idx, generation,
                                     [(r, in_dim), (out_dim, r)])
                lora_a = (math.sqrt(args.sigma) * a).to(torch.float16)
                lora_b = (math.sqrt(args.sigma / r) * b).to(torch.float16)
                if m % 2 == 1:
                    lora_b = -lora_b
                module = name[: -len(".base_layer.weight")]
                tensors[f"{module}.lora_A.weight"] = lora_a.contiguous()
                tensors[f"{module}.lora_B.weight"] = lora_b.contiguous()
            folder = os.path.join(self.lora_folder, f"pop_{m}")
            os.makedirs(folder, exist_ok=True)
            save_file(tensors, os.path.join(folder, "adapter_model.safetensors"))
            with open(os.path.join(folder, "adapter_config.json"), "w") as f:
                json.dump(self.lora_config_dict, f)
        return True

    def generate_and_score(self, prompts, sampling_params, lora_requests, task_obj, answers, args):
        outputs = self.generate(prompts, sampling_params, lora_request=lora_requests, use_tqdm=True)
        fitnesses, logs = [], []
        for output, answer in zip(outputs, answers):
            texts = [o.text for o in output.outputs]
            truncated = [o.finish_reason == "length" for o in output.outputs]
            result = task_obj.get_fitness(texts, truncated, answer, pass_at_k=args.pass_at_k)
            fitnesses.append(result[0])
            if args.verbose and len(logs) < 2:
                logs.append(f"{texts[0][:80]!r} -> {result[0]}")
        stats = {"mean_fitness": float(np.mean(fitnesses)) if fitnesses else 0.0,
                 "num_requests": len(fitnesses)}
        return fitnesses, stats, logs


def launch_engines(num_engines, model_name, population_size, lora_r, tensor_parallel_size=1, max_tokens=1024):
    engines, placement_groups = [], []
    loras_per_engine = math.ceil(population_size / num_engines)
    for _ in range(num_engines):
        pg = placement_group([{"GPU": 1, "CPU": 0}] * tensor_parallel_size, strategy="PACK")
        ray.get(pg.ready())
        placement_groups.append(pg)
        strategy = PlacementGroupSchedulingStrategy(placement_group=pg, placement_group_capture_child_tasks=True,
                                                    placement_group_bundle_index=0)
        engines.append(ray.remote(num_cpus=0, num_gpus=0, scheduling_strategy=strategy)(ESNcclLLM).remote(
            model=model_name, worker_extension_cls="es_lora_multinode.WorkerExtension",
            tensor_parallel_size=tensor_parallel_size, distributed_executor_backend="ray", dtype="auto",
            enable_lora=True, max_loras=loras_per_engine, max_lora_rank=max(lora_r, 8),
            max_model_len=max_tokens + 1024, max_num_seqs=args.prompt_batch_size * loras_per_engine,
            seed=args.base_seed))
    return engines, placement_groups


def save_checkpoint(checkpoint_dir, es_step, model_state_dict, task_state, args, fitnesses_so_far):
    folder = os.path.join(checkpoint_dir, f"checkpoint_step_{es_step}")
    os.makedirs(folder, exist_ok=True)
    save_file({k: v.contiguous() for k, v in model_state_dict.items()},
              os.path.join(folder, "model_weights.safetensors"))
    state = {"es_step": es_step, "args": vars(args), "fitnesses_so_far": fitnesses_so_far,
             "task_state": task_state}
    with open(os.path.join(folder, "training_state.json"), "w") as f:
        json.dump(state, f, indent=2)
    print(f"Saved checkpoint to {folder}")
    return folder


def load_checkpoint(checkpoint_path):
    state_dict = load_file(os.path.join(checkpoint_path, "model_weights.safetensors"))
    with open(os.path.join(checkpoint_path, "training_state.json")) as f:
        training_state = json.load(f)
    return state_dict, training_state


def main(args):
    ray.init(address="auto", include_dashboard=False, ignore_reinit_error=True)
    num_gpus = ray.cluster_resources().get("GPU", 0)
    if num_gpus == 0:
        raise ValueError("No GPUs found in the Ray cluster")
    if num_gpus % args.tensor_parallel_size != 0:
        raise ValueError(f"{num_gpus} GPUs are not divisible by tensor parallel size {args.tensor_parallel_size}")
    args.num_gpus = num_gpus
    args.num_engines = num_gpus // args.tensor_parallel_size
    assert args.population_size % 2 == 0, "population size must be even (antithetic pairs)"
    assert args.population_size % args.num_engines == 0, "population size must divide over the engines"
    if args.samples_per_prompt > 1:
        assert args.temperature > 0, "several samples per prompt need a temperature above 0"
    if args.pass_at_k:
        assert args.samples_per_prompt > 1, "pass@k needs several samples per prompt"

    random.seed(args.base_seed)
    np.random.seed(args.base_seed)
    torch.manual_seed(args.base_seed)

    def handle_signal(signum, frame):
        print(f"Received signal {signum}, shutting down")
        sys.exit(0)

    signal.signal(signal.SIGINT, handle_signal)
    signal.signal(signal.SIGTERM, handle_signal)

    stamp = datetime.now().strftime("%Y%m%d_%H%M%S")
    run_name = (f"{args.name_prefix}_{args.task.replace(':', '-').replace('/', '-')}_{args.model_name.split('/')[-1]}"
                f"_P{args.population_size}_B{args.prompt_batch_size}_S{args.samples_per_prompt}"
                f"_std{int(args.normalize_with_std)}_lrg{int(args.scale_lr_in_grad)}_mt{args.max_tokens}"
                f"_spa{args.steps_per_adapter}_lr{args.learning_rate}_sig{args.sigma}_r{args.lora_r}"
                f"_a{args.lora_alpha}_seed{args.base_seed}_g{args.num_gpus}_{stamp}")
    checkpoint_dir = args.checkpoint_dir or os.path.join(EXPERIMENT_DIR, run_name)
    if args.use_wandb:
        wandb.init(project=args.wandb_project, name=run_name, config=vars(args))
        weave.init(args.wandb_project)

    config = AutoConfig.from_pretrained(args.model_name, trust_remote_code=True)
    with init_empty_weights():
        model = AutoModelForCausalLM.from_config(config, trust_remote_code=True)
    lora_config = LoraConfig(r=args.lora_r, lora_alpha=args.lora_alpha, target_modules=LORA_TARGET_MODULES,
                             lora_dropout=0.0, bias="none", task_type="CAUSAL_LM")
    peft_model = get_peft_model(model, lora_config)
    peft_model.print_trainable_parameters()
    peft_state_dict, peft_shapes_dict = {}, {}
    for name, param in peft_model.named_parameters():
        if "lora_" in name:
            peft_state_dict[name] = torch.zeros(tuple(param.shape), dtype=torch.float16)
        elif name.endswith(".base_layer.weight"):
            peft_shapes_dict[name] = tuple(param.shape)
    lora_config_dict = lora_config.to_dict()
    del model, peft_model
    gc.collect()

    tokenizer = AutoTokenizer.from_pretrained(args.model_name)
    sampling_params = SamplingParams(temperature=args.temperature, seed=args.base_seed, max_tokens=args.max_tokens,
                                     n=args.samples_per_prompt,
                                     stop=[tokenizer.eos_token, "<|im_end|>", "<|endoftext|>"])

    if args.task == "zeros":
        task = ZerosTask(batch_size=args.prompt_batch_size, max_tokens=args.max_tokens)
    elif args.task == "countdown":
        task = CountdownTask(args.prompt_batch_size, seed=args.base_seed, datset_size=args.sub_dataset_size,
                             end_token=None)
    elif args.task.startswith("math:answer-tags:"):
        task = MathTask(args.prompt_batch_size, seed=args.base_seed,
                        dataset_name=args.task[len("math:answer-tags:"):], datset_size=args.sub_dataset_size,
                        apply_chat_template=False, answer_format="answer_tags")
    elif args.task.startswith("math:"):
        task = MathTask(args.prompt_batch_size, seed=args.base_seed, dataset_name=args.task[len("math:"):],
                        datset_size=args.sub_dataset_size, apply_chat_template=False)
    elif args.task in ("random", "random-boxed"):
        task = RandomTask(args.prompt_batch_size, max_random_number=4, seed=args.base_seed,
                          answer_format="none" if args.task == "random" else "boxed")
    else:
        raise ValueError(f"Unknown task: {args.task}")

    ray.init(address="auto", include_dashboard=False, ignore_reinit_error=True)
    engines, placement_groups = launch_engines(args.num_engines, args.model_name, args.population_size,
                                               args.lora_r, args.tensor_parallel_size, args.max_tokens)
    num_engines = len(engines)
    master_address, master_port = ray.get(engines[0].collective_rpc.remote("get_transport_info"))[0]
    ray.get([engine.collective_rpc.remote("init_inter_engine_group",
                                          args=(master_address, master_port, i, num_engines))
             for i, engine in enumerate(engines)])
    ray.get([engine.setup_local_lora_generation.remote(peft_state_dict, peft_shapes_dict, lora_config_dict, i)
             for i, engine in enumerate(engines)])

    start_step = 0
    fitnesses_so_far = []
    if args.resume_from:
        state_dict, training_state = load_checkpoint(args.resume_from)
        ray.get([engine.collective_rpc.remote("set_model_state_dict", args=(state_dict,)) for engine in engines])
        start_step = training_state["es_step"] + 1
        fitnesses_so_far = list(training_state.get("fitnesses_so_far", []))
        if training_state.get("task_state") and hasattr(task, "set_state"):
            task.set_state(training_state["task_state"])
        print(f"Resumed from {args.resume_from} at step {start_step}")

    members_per_engine = args.population_size // num_engines
    eval_task = None
    for es_step in range(start_step, args.num_iterations):
        step_start = time.time()
        if "math:" in args.task and args.steps_per_eval > 0 and es_step % args.steps_per_eval == 0:
            if eval_task is None:
                eval_size = math.ceil(args.eval_batch_size / num_engines) * num_engines
                eval_task = MathTask(eval_size, seed=args.base_seed + 12345, dataset_name="math-eval",
                                     datset_size=None, apply_chat_template=False)
                eval_params = SamplingParams(temperature=args.temperature, seed=args.base_seed + 12345,
                                             max_tokens=args.max_tokens, n=1, stop=[tokenizer.eos_token])
            eval_prompts, eval_answers = eval_task.get_eval_batch()
            per = len(eval_prompts) // num_engines
            results = ray.get([engine.generate_and_score.remote(
                eval_prompts[i * per:(i + 1) * per], eval_params, None, eval_task,
                eval_answers[i * per:(i + 1) * per], args) for i, engine in enumerate(engines)])
            eval_mean = float(np.mean([f for result in results for f in result[0]]))
            print(f"step {es_step}: eval fitness {eval_mean}")
            if args.use_wandb:
                wandb.log({"eval/fitness": eval_mean}, step=es_step)

        if es_step % args.steps_per_adapter == 0 or es_step == start_step:
            ray.get([engine.generate_local_adapters.remote(
                list(range(i * members_per_engine, (i + 1) * members_per_engine)), es_step, args)
                for i, engine in enumerate(engines)])

        prompts, answers = task.get_batch()
        futures = []
        for i, engine in enumerate(engines):
            folder = f"{LORA_POPULATION_PATH}_{i}"
            engine_prompts, engine_answers, requests = [], [], []
            for m in range(i * members_per_engine, (i + 1) * members_per_engine):
                request = LoRARequest(lora_name=f"adapter_{m}", lora_int_id=m + 1 + 10000 * es_step,
                                      lora_path=os.path.join(folder, f"pop_{m}"))
                for prompt, answer in zip(prompts, answers):
                    engine_prompts.append(prompt)
                    engine_answers.append(answer)
                    requests.append(request)
            futures.append(engine.generate_and_score.remote(engine_prompts, sampling_params, requests, task,
                                                            engine_answers, args))
        results = ray.get(futures)
        fitness_matrix = np.concatenate(
            [np.asarray(result[0], dtype=np.float64).reshape(members_per_engine, len(prompts)) for result in results],
            axis=0)

        centred = fitness_matrix - fitness_matrix.mean(axis=0)
        shaped = centred.mean(axis=1)
        fitness_std = shaped.std()
        if args.normalize_with_std:
            shaped = shaped / (fitness_std + 1e-8)

        ray.get(engines[0].collective_rpc.remote("apply_lora_es_update",
                                                 args=(shaped, peft_shapes_dict, es_step, args)))
        broadcast = ray.get([engine.collective_rpc.remote("broadcast_all_weights", args=(0,)) for engine in engines])
        if not all(result[0] for result in broadcast):
            state = ray.get(engines[0].collective_rpc.remote("get_model_state_dict"))[0]
            ray.get([engine.collective_rpc.remote("set_model_state_dict", args=(state,)) for engine in engines[1:]])

        mean_fitness = float(fitness_matrix.mean())
        fitnesses_so_far.append(mean_fitness)
        if args.verbose:
            print(f"step {es_step}: mean fitness {mean_fitness:.6f}, std {fitness_std:.6f}, "
                  f"{time.time() - step_start:.2f}s")
        if args.use_wandb:
            wandb.log({"train/mean_fitness": mean_fitness, "train/fitness_std": float(fitness_std)}, step=es_step)

        last = es_step == args.num_iterations - 1
        if args.save_freq is not None and (last or (args.save_freq > 0 and es_step > 0
                                                    and es_step % args.save_freq == 0)):
            state = ray.get(engines[0].collective_rpc.remote("get_model_state_dict"))[0]
            task_state = task.get_state() if hasattr(task, "get_state") else {}
            save_checkpoint(checkpoint_dir, es_step, state, task_state, args, fitnesses_so_far)

    for pg in placement_groups:
        remove_placement_group(pg)
    if args.use_wandb:
        wandb.finish()
    return fitnesses_so_far


if __name__ == "__main__":
    args = tyro.cli(Args)
    main(args)
