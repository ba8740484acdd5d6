"""Variants of the stand-in clones: reference-side mutants and bad-input fixtures.

Each variant is a copy of a stand-in clone (tests/standins/es-at-scale or
tests/standins/es-awd) with ONE detail edited: a list of (file, old, new)
text replacements, each `old` occurring exactly once. Building them at
test time keeps every file in the tree valid Python 3.11 (the 3.12-only
f-string fixture exists only in a temporary folder).

MUTANTS are numerics or protocol faults a parity run must flag (issue 4,
"Mutation check"); BAD_INPUTS are broken clones it must report clearly.
"""
from __future__ import annotations

import shutil
from pathlib import Path

STANDINS = Path(__file__).resolve().parent
WORKER = "es_at_scale/utils/worker_extension.py"
SHAPING = "es_at_scale/utils/reward_shaping.py"
AWD = "weight_update_utils.py"

_UPDATE_LOOP = """        for name, param in self.model_runner.model.named_parameters():
            update = torch.zeros(param.shape, dtype=torch.float32, device=param.device)"""
_UPDATE_ADD = "update.add_(noise.to(torch.float32) * coeff)"
_UPDATE_SCALE = "update.mul_(alpha / population_size)"
_PERTURB_LOOP = """        for name, param in self.model_runner.model.named_parameters():
            noise = self._noise(param, seed)
            param.data.add_(scale * noise)"""

#: name -> (target, [(file, old, new)], what it changes)
MUTANTS = {
    "fma-update": ("es-at-scale", [(WORKER, _UPDATE_ADD, "update.add_(noise.to(torch.float32), alpha=coeff)")],
                   "fused multiply-add in the update accumulation"),
    "acc-in-param-dtype": ("es-at-scale", [(WORKER, _UPDATE_LOOP, _UPDATE_LOOP.replace(
        "dtype=torch.float32, device", "dtype=param.dtype, device"))],
        "update accumulator in the parameter dtype instead of f32"),
    "divide-by-sigma": ("es-at-scale", [(WORKER, _UPDATE_SCALE, "update.mul_(alpha / population_size / 0.001)")],
                        "update divided by sigma (0.001)"),
    "alpha-over-n-in-f32": ("es-at-scale", [(WORKER, _UPDATE_SCALE, "update.mul_(torch.tensor(alpha, "
                                             "dtype=torch.float32) / population_size)")],
                            "alpha / N divided in f32 after rounding alpha"),
    "per-term-scaling": ("es-at-scale", [(WORKER, _UPDATE_ADD,
                                          "update.add_(noise.to(torch.float32) * (coeff * alpha / population_size))"),
                                         (WORKER, _UPDATE_SCALE, "pass")],
                         "alpha / N applied to each term instead of once"),
    "noise-in-f32": ("es-at-scale", [(WORKER, """                noise = self._noise(param, seed)
                update.add_""", """                noise = self._noise(param.float(), seed)
                update.add_""")], "update noise drawn in f32 instead of the parameter dtype"),
    "zscore-eps-in-variance": ("es-at-scale", [(SHAPING, "mean_reward) / (std_reward + 1e-8)\n",
                                                "mean_reward) / (std_reward ** 2 + 1e-8) ** 0.5\n")],
                               "epsilon added to the variance inside z_score"),
    "restore-sign": ("es-at-scale", [(WORKER, "param.data.add_(-sigma * noise)", "param.data.add_(sigma * noise)")],
                     "restore adds +sigma * noise"),
    "seed-plus-slot": ("es-at-scale", [(WORKER, _PERTURB_LOOP, _PERTURB_LOOP.replace(
        "for name, param in self.model_runner.model.named_parameters():",
        "for index, (name, param) in enumerate(self.model_runner.model.named_parameters()):").replace(
        "self._noise(param, seed)", "self._noise(param, seed + index)"))],
        "perturb seeds each tensor with seed + slot index"),
    "eager-update": ("es-at-scale", [(WORKER, _UPDATE_LOOP, _UPDATE_LOOP.replace(
        "in self.model_runner.model.named_parameters():", "in list(self.model_runner.model.named_parameters()):"))],
        "update materialises the parameter list before drawing"),
    "awd-acc-in-f32": ("es-awd", [(AWD, "acc = torch.zeros_like(param)",
                                   "acc = torch.zeros_like(param, dtype=torch.float32)")],
                       "es-awd accumulator in f32 instead of the tensor dtype"),
    "awd-l2-factor-in-dtype": ("es-awd", [(AWD, "delta = delta * (1 - step)",
                                           "delta = delta * torch.tensor(1 - step, dtype=delta.dtype)")],
                               "es-awd l2 factor rounded to the tensor dtype"),
}

#: name -> (target, [(file, old, new)], what is broken)
BAD_INPUTS = {
    "shaping-needs-3.12": ("es-at-scale", [(SHAPING, "print(f\"member {key}: avg_reward {perf['avg_reward']:.6g}",
                                            "print(f\"member {key}: avg_reward {perf[\"avg_reward\"]:.6g}")],
                           "reward_shaping.py with a nested same-quote f-string (Python 3.12 syntax)"),
    "absent-package": ("es-at-scale", [(WORKER, "import numpy\n", "import numpy\nimport vllm_not_installed_here\n")],
                       "worker_extension.py imports a package the child lacks"),
    "hang": ("es-at-scale", [(WORKER, "        started = time.time()\n",
                              "        started = time.time()\n        time.sleep(3600)\n")],
             "perturb_self_weights hangs"),
    "self-kill": ("es-at-scale", [(WORKER, "param.data.add_(-sigma * noise)",
                                   "param.data.add_(-sigma * noise)\n"
                                   "            __import__('os').kill(__import__('os').getpid(), 9)")],
                  "restore_self_weights kills its own process (SIGKILL)"),
    "no-generator": ("es-at-scale", [(WORKER, "device=param.device, generator=generator)",
                                      "device=param.device)")],
                     "noise drawn from torch's global generator (no generator passed)"),
    "normal-in-place": ("es-at-scale", [(WORKER, "return torch.randn(param.shape, dtype=param.dtype, "
                                                 "device=param.device, generator=generator)",
                                         "return torch.empty(param.shape, dtype=param.dtype, "
                                         "device=param.device).normal_(generator=generator)")],
                        "noise drawn with Tensor.normal_ instead of torch.randn"),
}


def make_variant(tmp: Path, target: str, edits) -> Path:
    """Copy the stand-in clone of `target` under `tmp` and apply `edits`; returns the clone root."""
    dest = Path(tmp) / f"{target}-variant"
    shutil.copytree(STANDINS / target, dest, ignore=shutil.ignore_patterns("__pycache__"))
    for rel, old, new in edits:
        path = dest / rel
        text = path.read_text()
        assert text.count(old) == 1, f"{rel}: the edit's anchor occurs {text.count(old)} times, want 1: {old!r}"
        path.write_text(text.replace(old, new))
    return dest


def make_mutant(tmp: Path, name: str) -> Path:
    target, edits, _ = MUTANTS[name]
    return make_variant(tmp, target, edits)


def make_bad(tmp: Path, name: str) -> Path:
    target, edits, _ = BAD_INPUTS[name]
    return make_variant(tmp, target, edits)
