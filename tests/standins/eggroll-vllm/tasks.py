"""Test stand-in for EGGROLL's `tasks.py` at bcc215e (NOT the reference code).

Written by the esverify authors from the description of the reference in
esverify's specification alone. It has the interface the interface manifest
(esverify/references/eggroll/child/interfaces.json) gives the real file and keeps its two documented
defects on purpose: it imports `egg_img`, a module the repository lacks
(so `import tasks` fails with ModuleNotFoundError once `datasets` and
`gem` resolve), and ZerosTask, RandomTask and CountdownTask take
`get_fitness(generations, answer, pass_at_k=False)`, which the trainer's
four-argument call `get_fitness(texts, truncated_flags, answer,
pass_at_k=...)` cannot reach. Only MathTask has the four-argument form.
The parity driver never imports this file: it serves its own `tasks`.
"""
import re
import numpy as np
from datasets import load_dataset
from typing import List, Optional
from egg_img import EGG_IMG, CHICK_IMG
from gem.utils.math_grader import extract_answer, grade


def general_get_fitness(task_obj, generations, truncateds, answer, pass_at_k=False):
    scores = [0.0 if truncated else task_obj.get_fitness_single_sample(g, truncated, answer)
              for g, truncated in zip(generations, truncateds)]
    fitness = max(scores) if pass_at_k else float(np.mean(scores))
    answers = [extract_model_answer(g) for g in generations]
    return fitness, answers, scores, {"num_truncated": int(sum(truncateds))}


def extract_model_answer(text, ans_format="none"):
    if ans_format == "boxed":
        found = re.findall(r"\\boxed\{([^}]*)\}", text)
        return found[-1] if found else None
    if ans_format == "answer_tags":
        found = re.findall(r"<answer>(.*?)</answer>", text, re.S)
        return found[-1].strip() if found else None
    return text.strip()


def boxed_reward_fn(model_answer, gt_answer, fast=False):
    if model_answer is None:
        return 0.0
    return 1.0 if grade(model_answer, gt_answer, fast) else 0.0


class ZerosTask:
    def __init__(self, batch_size, max_tokens):
        self.batch_size = batch_size
        self.max_tokens = max_tokens

    def get_batch(self):
        return ["Write only zeros."] * self.batch_size, [None] * self.batch_size

    def get_fitness(self, generations, answer, pass_at_k=False):
        scores = [self.get_fitness_single_sample(g, a) for g, a in zip(generations, answer)]
        return (max(scores) if pass_at_k else float(np.mean(scores))), generations, scores, {}

    def get_fitness_single_sample(self, generation, answer):
        return generation.count("0") / self.max_tokens


class RandomTask:
    def __init__(self, batch_size, max_random_number, seed, answer_format="none"):
        self.batch_size = batch_size
        self.max_random_number = max_random_number
        self.rng = np.random.RandomState(seed)
        self.answer_format = answer_format

    def get_batch(self):
        answers = self.rng.randint(0, self.max_random_number + 1, size=self.batch_size).tolist()
        return ["Pick a number."] * self.batch_size, answers

    def get_fitness(self, generations, answer, pass_at_k=False):
        scores = [self.get_fitness_single_sample(g, a) for g, a in zip(generations, answer)]
        return (max(scores) if pass_at_k else float(np.mean(scores))), generations, scores, {}

    def get_fitness_single_sample(self, generation, answer):
        return 1.0 if extract_model_answer(generation, self.answer_format) == str(answer) else 0.0


class MathTask:
    def __init__(self, batch_size, seed, tokenizer=None, dataset_name="gsm8k", datset_size=None,
                 apply_chat_template=False, answer_format="none"):
        self.batch_size = batch_size
        self.rng = np.random.RandomState(seed)
        self.tokenizer = tokenizer
        self.dataset = load_dataset(dataset_name, split="train")
        if datset_size is not None:
            self.dataset = self.dataset.select(range(datset_size))
        self.apply_chat_template = apply_chat_template
        self.answer_format = answer_format

    @staticmethod
    def check_correct(generation, gt_answer, ans_format="none"):
        return boxed_reward_fn(extract_model_answer(generation, ans_format), gt_answer)

    def _format_conversation(self, example):
        return [{"role": "user", "content": example["problem"]}]

    def _format_examples(self, examples):
        return [self._format_conversation(e) for e in examples]

    def get_batch(self):
        rows = self.rng.randint(0, len(self.dataset), size=self.batch_size)
        examples = [self.dataset[int(i)] for i in rows]
        return [e["problem"] for e in examples], [e["answer"] for e in examples]

    def get_eval_batch(self):
        examples = [self.dataset[i] for i in range(min(self.batch_size, len(self.dataset)))]
        return [e["problem"] for e in examples], [e["answer"] for e in examples]

    def get_fitness(self, generations, truncateds, gt_answer, pass_at_k=False):
        return general_get_fitness(self, generations, truncateds, gt_answer, pass_at_k=pass_at_k)

    def get_fitness_single_sample(self, generation, truncated, gt_answer):
        return 0.0 if truncated else self.check_correct(generation, gt_answer, self.answer_format)


class CountdownTask:
    def __init__(self, batch_size, seed, datset_size=None, end_token=None):
        self.batch_size = batch_size
        self.rng = np.random.RandomState(seed)
        self.dataset = load_dataset("Jiayi-Pan/Countdown-Tasks-3to4", split="train")
        if datset_size is not None:
            self.dataset = self.dataset.select(range(datset_size))
        self.end_token = end_token

    def get_batch(self):
        rows = self.rng.randint(0, len(self.dataset), size=self.batch_size)
        examples = [self.dataset[int(i)] for i in rows]
        return [str(e["nums"]) for e in examples], [(e["nums"], e["target"]) for e in examples]

    @staticmethod
    def _format_reward_function(response, end_token=None):
        return 0.1 if "<answer>" in response and (end_token is None or response.endswith(end_token)) else 0.0

    @staticmethod
    def _answer_reward_function(response, numbers=None, target=None):
        found = re.findall(r"<answer>(.*?)</answer>", response, re.S)
        if not found:
            return 0.0
        try:
            return 1.0 if abs(eval(found[-1], {"__builtins__": {}}) - target) < 1e-5 else 0.0
        except Exception:
            return 0.0

    def get_fitness(self, generations, answer, pass_at_k=False):
        scores = [self.get_fitness_single_sample(g) for g in generations]
        return (max(scores) if pass_at_k else float(np.mean(scores))), generations, scores, {}

    def get_fitness_single_sample(self, generation, answer):
        numbers, target = answer
        return (self._format_reward_function(generation, self.end_token)
                + self._answer_reward_function(generation, numbers, target))
