"""Test stand-in for the ES-at-scale paper's countdown script, iid noise (NOT the reference code).

Design record: written by the esverify authors from docs/references.md §6
alone, so that esverify's tests can drive a script with the interface of
`archive/es_fine-tuning_countdown_iid.py` of an es-at-scale clone (also the
root of an es-fine-tuning-paper fork) without a clone. It keeps what the
docs describe: the module-level argparse parser run on `sys.argv` at
import, `allow_tf32`, the module constants the loop reads as globals at
call time, the imports in the real file's order (transformers, accelerate
and countdown_task are modules the caller provides), one model copy per
`--gpu_threads` thread, numpy's legacy global generator for the seed
schedule, a new torch.Generator per parameter seeded with the member's
seed plus the parameter's index (the `_iid` scripts: streams of members
whose seeds differ by less than the parameter count overlap), f32
normalisation, an accumulator in the parameter dtype, and the final
`save_pretrained` under the working directory. Mutants edit one detail of
a copy (tests/standins/new_ref_mutants.py).
"""
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer
from transformers.utils import logging
import numpy as np
import copy
import os
import argparse
from accelerate import Accelerator
import time
import torch.multiprocessing as mp
import threading
from queue import Queue
from concurrent.futures import ThreadPoolExecutor
import math
import gc
import json

from countdown_task import reward_function

parser = argparse.ArgumentParser(description="ES fine-tuning on the Countdown task (iid noise)")
parser.add_argument("--model_name", type=str, default="Qwen/Qwen2.5-3B-Instruct")
parser.add_argument("--hf_cache_dir", type=str, default="hf_cache")
parser.add_argument("--precision", type=str, default="bf16", help="fp16, bf16, anything else float32")
parser.add_argument("--gpu_threads", type=int, default=4, help="model copies (threads) per process")
parser.add_argument("--verbose", action="store_true")
parser.add_argument("--data_sample", type=int, default=1000, help="first items of data/countdown.json")
args = parser.parse_args()

torch.backends.cuda.matmul.allow_tf32 = True

# read as globals at call time: a driver may set them on the module before main()
NUM_ITERATIONS = 500
POPULATION_SIZE = 30
SIGMA = 0.001
ALPHA = 0.0005
max_new_tokens = 1024
do_sample = False
initial_seed = 33


def force_memory_cleanup():
    """docs/references.md §6: garbage collection, then the CUDA cache (guarded: CPU builds skip it)."""
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
        torch.cuda.synchronize()


def save_model_checkpoint(model, tokenizer, iteration, model_name, initial_seed, args, dataset_size):
    """docs/references.md §6: `save_pretrained` of `model` and `tokenizer` into a folder named from the
    hyperparameters and `iteration`, under `model_name` relative to the working directory; returns it."""
    save_dir = (f"{model_name}_es_random_seed{initial_seed}_pop{POPULATION_SIZE}_iter{NUM_ITERATIONS}"
                f"_sigma{SIGMA}_alpha{ALPHA}_{args.precision}_threads{args.gpu_threads}"
                f"_question_num{dataset_size}_checkpoint{iteration}")
    os.makedirs(save_dir, exist_ok=True)
    model.save_pretrained(save_dir)
    tokenizer.save_pretrained(save_dir)
    print(f"Checkpoint saved to {save_dir}")
    return save_dir


def evaluate_model(model, tokenizer, input_text, target_text, accelerator, seed_idx=None, thread_id=None,
                   verbose=False, return_text=False):
    """docs/references.md §6: generate for the prompts `input_text` (a list), decode, grade each against
    `target_text`; a list of per-prompt rewards (with the texts when `return_text`). The seam a driver
    replaces with its own reward of the model's current parameters."""
    inputs = tokenizer(input_text, return_tensors="pt", padding=True, padding_side="left")
    inputs = inputs.to(accelerator.device)
    with torch.inference_mode():
        outputs = model.generate(**inputs, max_new_tokens=max_new_tokens, do_sample=do_sample)
    generated = tokenizer.batch_decode(outputs[:, inputs["input_ids"].shape[1]:], skip_special_tokens=True)
    rewards = [reward_function(text, target) for text, target in zip(generated, target_text)]
    if verbose:
        print(f"seed {seed_idx} thread {thread_id}: mean reward {sum(rewards) / len(rewards):.4f}")
    del inputs, outputs
    if return_text:
        return rewards, generated
    return rewards


def process_seed(seed_args):
    """docs/references.md §6: one member on one model copy: perturb every parameter by SIGMA times its
    noise (a new generator per parameter, the k-th seeded `seed + k`), evaluate, restore with the same draw.
    `seed_args` = (seed_idx, seed, model, tokenizer, accelerator, thread_id, verbose, dataset);
    returns (seed_idx, reward) with reward = sum of the per-prompt rewards / len(dataset)."""
    seed_idx, seed, model, tokenizer, accelerator, thread_id, verbose, dataset = seed_args
    for k, (name, param) in enumerate(model.named_parameters()):
        gen = torch.Generator(device=param.device)
        gen.manual_seed(int(seed) + k)
        noise = torch.randn(param.shape, generator=gen, device=param.device, dtype=param.dtype)
        param.data.add_(SIGMA * noise)
        del noise
    if torch.cuda.is_available():
        torch.cuda.synchronize()

    input_texts = [input_text for input_text, _ in dataset]
    target_texts = [target_text for _, target_text in dataset]
    rewards = evaluate_model(model, tokenizer, input_texts, target_texts, accelerator, seed_idx=seed_idx,
                             thread_id=thread_id, verbose=verbose, return_text=False)
    total_reward = sum(rewards) / len(dataset)

    for k, (name, param) in enumerate(model.named_parameters()):
        gen = torch.Generator(device=param.device)
        gen.manual_seed(int(seed) + k)
        noise = torch.randn(param.shape, generator=gen, device=param.device, dtype=param.dtype)
        param.data.add_(-SIGMA * noise)
        del noise
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    force_memory_cleanup()
    return seed_idx, total_reward


def main():
    """docs/references.md §6: the ES loop over NUM_ITERATIONS iterations of POPULATION_SIZE members;
    the final model (copy 0) and tokenizer saved under the working directory."""
    accelerator = Accelerator()
    logging.set_verbosity_error()
    started = time.time()

    data_path = os.path.join(os.path.dirname(__file__), "data/countdown.json")
    with open(data_path, "r") as f:
        task_datas = json.load(f)
    task_datas = task_datas[:args.data_sample]
    dataset = [(item["context"], item["target"]) for item in task_datas]
    if accelerator.is_main_process:
        print(f"Loaded {len(dataset)} countdown items from {data_path}")

    model_name = args.model_name
    if args.precision == "fp16":
        dtype = torch.float16
    elif args.precision == "bf16":
        dtype = torch.bfloat16
    else:
        dtype = torch.float32
    model_list = []
    for model_index in range(args.gpu_threads):
        model_list.append(AutoModelForCausalLM.from_pretrained(
            model_name, cache_dir=args.hf_cache_dir, device_map={"": accelerator.process_index},
            torch_dtype=dtype))
    tokenizer = AutoTokenizer.from_pretrained(model_name, cache_dir=args.hf_cache_dir)
    for model in model_list:
        model.eval()
    force_memory_cleanup()

    np.random.seed(initial_seed)
    for iteration in range(NUM_ITERATIONS):
        iteration_started = time.time()
        seeds = np.random.randint(0, 2**30, size=POPULATION_SIZE, dtype=np.int64).tolist()
        seeds_tensor = torch.tensor(seeds, device=accelerator.device)
        if accelerator.num_processes > 1:
            torch.distributed.broadcast(seeds_tensor, src=0)
        seeds = seeds_tensor.cpu().tolist()

        local_seeds = [(seed_idx, seed) for seed_idx, seed in enumerate(seeds)
                       if seed_idx % accelerator.num_processes == accelerator.process_index]
        rewards_tensor = torch.zeros(POPULATION_SIZE, dtype=torch.float32, device=accelerator.device)
        for batch_start in range(0, len(local_seeds), args.gpu_threads):
            batch = local_seeds[batch_start:batch_start + args.gpu_threads]
            thread_args = [(seed_idx, seed, model_list[thread_id], tokenizer, accelerator, thread_id, args.verbose,
                            dataset) for thread_id, (seed_idx, seed) in enumerate(batch)]
            with ThreadPoolExecutor(max_workers=len(batch)) as executor:
                results = list(executor.map(process_seed, thread_args))
            for seed_idx, reward in results:
                rewards_tensor[seed_idx] = reward
        if accelerator.num_processes > 1:
            torch.distributed.all_reduce(rewards_tensor)
        rewards = rewards_tensor.cpu().tolist()

        rewards = np.array(rewards, dtype=np.float32)
        rewards_normalized = (rewards - rewards.mean()) / (rewards.std() + 1e-8)

        original_model = model_list[0]
        for k, (name, param) in enumerate(original_model.named_parameters()):
            update = torch.zeros_like(param)
            for seed_idx in range(POPULATION_SIZE):
                r_norm = rewards_normalized[seed_idx]
                seed = seeds[seed_idx]
                gen = torch.Generator(device=param.device)
                gen.manual_seed(int(seed) + k)
                noise = torch.randn(param.shape, generator=gen, device=param.device, dtype=param.dtype)
                noise.mul_(float(r_norm))
                update.add_(noise)
                del noise
            update.div_(POPULATION_SIZE)
            param.data.add_(ALPHA * update)
            del update
        if torch.cuda.is_available():
            torch.cuda.synchronize()

        for model_idx in range(1, len(model_list)):
            for name, param in model_list[model_idx].named_parameters():
                param.data.copy_(original_model.get_parameter(name).data.clone())
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        force_memory_cleanup()

        if accelerator.is_main_process:
            print(f"Iteration {iteration + 1}/{NUM_ITERATIONS}: mean {rewards.mean():.4f} min {rewards.min():.4f} "
                  f"max {rewards.max():.4f} in {time.time() - iteration_started:.2f}s, "
                  f"GPU memory {torch.cuda.memory_allocated() / 1024**2:.1f} MB")
        if (iteration + 1) % 100 == 0 and accelerator.is_main_process:
            save_model_checkpoint(original_model, tokenizer, iteration + 1, model_name, initial_seed, args,
                                  len(dataset))

    if accelerator.is_main_process:
        save_dir = (f"{model_name}_es_random_seed{initial_seed}_pop{POPULATION_SIZE}_iter{NUM_ITERATIONS}"
                    f"_sigma{SIGMA}_alpha{ALPHA}_{args.precision}_threads{args.gpu_threads}"
                    f"_question_num{len(dataset)}_final")
        os.makedirs(save_dir, exist_ok=True)
        model_list[0].save_pretrained(save_dir)
        tokenizer.save_pretrained(save_dir)
        print(f"Final model saved to {save_dir} after {time.time() - started:.2f}s")


if __name__ == "__main__":
    mp.set_start_method("spawn", force=True)
    main()
