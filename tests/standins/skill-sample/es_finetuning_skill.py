"""Test stand-in for the ES fine-tuning skill page's sample (NOT the page's code).

Design record: written by the esverify authors from docs/references.md §7
alone: the page's code blocks as the one module a user has, so that
esverify's tests can drive a third kind of reference (an implementation
adapted from the paper, MIT licensed) without the page. It keeps the
interface and the numerics the docs describe, DEFECTS INCLUDED, because a
parity report must find them: `utilities` indexed by member number (never
by reward rank), the module-level `utilities` sized for 30 members (more
members raise IndexError), an unused f64 accumulation of
`utilities[m] * noise` (where bf16 parameters raise TypeError: numpy has
no bfloat16), every parameter rebound to a view of the perturbed vector
and left at the last member's perturbation, `np.random.seed` per member
(numpy's process-wide legacy generator). Importing the module loads a
model and tokenizer through `transformers` (the caller provides a
stand-in). Mutants edit one detail of a copy
(tests/standins/new_ref_mutants.py).
"""
import torch
import numpy as np
import math
from transformers import AutoModelForCausalLM, AutoTokenizer

model_name = "Qwen/Qwen2.5-0.5B-Instruct"
model = AutoModelForCausalLM.from_pretrained(model_name, torch_dtype=torch.bfloat16, device_map="auto")
tokenizer = AutoTokenizer.from_pretrained(model_name)

# one flat vector of every parameter: the ES loop works on it, not on the tensors
params_init = torch.nn.utils.parameters_to_vector(model.parameters()).detach().clone()

population_size = 30
learning_rate = 0.001
sigma = 0.017

# rank-based weights for the top half of the population, normalised to sum 1 (f64)
utilities = [max(0, math.log(population_size / 2 + 1) - math.log(i + 1)) for i in range(population_size)]
utilities = np.array(utilities)
utilities = utilities / utilities.sum()


def compute_reward(model, tokenizer, examples):
    """docs/references.md §7: the fraction of `examples` ((prompt, expected) pairs) whose greedy answer
    `is_correct`; a Python float in [0, 1]."""
    correct = 0
    for prompt, expected in examples:
        inputs = tokenizer(prompt, return_tensors="pt").to(model.device)
        with torch.no_grad():
            outputs = model.generate(**inputs, max_new_tokens=64, do_sample=False)
        response = tokenizer.decode(outputs[0][inputs["input_ids"].shape[1]:], skip_special_tokens=True)
        if is_correct(response, expected):
            correct += 1
    return correct / len(examples)


def is_correct(response, expected):
    """docs/references.md §7: whether the expected answer appears in the response (case and surrounding
    blanks ignored)."""
    return expected.strip().lower() in response.strip().lower()


def es_train_loop(model, tokenizer, params_init, reward_fn, generations=100, population_size=30, sigma=0.017,
                  lr=0.001, seed_base=42, device="cuda"):
    """docs/references.md §7: `generations` ES generations of `population_size` members on the flat
    parameter vector `params_init` (1-D, the parameters' dtype). Member m of generation gen draws f64
    numpy noise seeded `seed_base + gen * population_size + m`; the update is (lr / sigma) times the
    f64 sum of utilities[m] * noise * z[m]. Returns (params_current, rewards_history): the final vector
    on `device` and one float per generation, its members' mean reward. The model is left at the last
    member's perturbation. Raises TypeError for bfloat16 parameters and IndexError above 30 members."""
    params_current = params_init.clone().to(device)
    rewards_history = []

    for gen in range(generations):
        rewards = []
        noise_accumulator = np.zeros(params_current.numel())

        for m in range(population_size):
            seed = seed_base + gen * population_size + m
            np.random.seed(seed)
            noise = torch.tensor(np.random.randn(params_current.numel()), dtype=params_init.dtype, device=device)

            params_perturbed = params_current + sigma * noise
            offset = 0
            for param in model.parameters():
                numel = param.numel()
                param.data = params_perturbed[offset:offset + numel].reshape(param.shape)
                offset += numel

            reward = reward_fn(model, tokenizer)
            rewards.append(reward)
            noise_accumulator += utilities[m] * noise.cpu().numpy()

        rewards = np.array(rewards)
        rewards_normalized = (rewards - rewards.mean()) / (rewards.std() + 1e-8)

        update = np.zeros(params_current.numel())
        for m in range(population_size):
            seed = seed_base + gen * population_size + m
            np.random.seed(seed)
            noise = np.random.randn(params_current.numel())
            update += utilities[m] * noise * rewards_normalized[m]

        params_current = params_current.cpu() + (lr / sigma) * torch.tensor(update, dtype=params_init.dtype)
        params_current = params_current.to(device)

        rewards_history.append(float(np.mean(rewards)))
        print(f"Generation {gen}: mean reward {np.mean(rewards):.4f}, max reward {np.max(rewards):.4f}")

    return params_current, rewards_history


def save_finetuned_model(model, params_final, path):
    """docs/references.md §7: the flat vector `params_final` written back into the model's parameters
    (`vector_to_parameters`), then `model.save_pretrained(path)`."""
    torch.nn.utils.vector_to_parameters(params_final, model.parameters())
    model.save_pretrained(path)
    print(f"Saved fine-tuned model to {path}")


if __name__ == "__main__":
    train_examples = [
        ("What is 12 + 7? Answer with the number only.", "19"),
        ("What is the capital of France? Answer in one word.", "Paris"),
    ]

    def reward_fn(model, tokenizer):
        return compute_reward(model, tokenizer, train_examples)

    params_final, rewards_history = es_train_loop(model, tokenizer, params_init, reward_fn,
                                                  generations=100, population_size=population_size,
                                                  sigma=sigma, lr=learning_rate)
    save_finetuned_model(model, params_final, "./es_finetuned_model")
