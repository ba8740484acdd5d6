"""The `skill-sample` numerics profile, version 1 (docs/numerics.md §8).

Design record: the ES fine-tuning skill page's sample loop (`es_train_loop`)
is not the Trainer's shape. It perturbs ONE flat parameter vector
(``torch.nn.utils.parameters_to_vector``), draws f64 noise from numpy's
legacy generator, weights members by a fixed `utilities` vector indexed by
member number, and accumulates the update in f64 numpy. So this profile is
not a `Profile` of chunk kernels (the Trainer cannot run it); it is a
`LoopProfile` whose kernels work on the whole flat vector and are driven by
`esverify.references.skill_sample.loop.run_skill_loop`. Measured on torch 2.13 CPU
(tests/test_skill_sample_profile.py checks every line against torch itself)::

    q(noise)  = rd_dt(rd32(noise))           torch.tensor(f64 array, dtype=dt): through f32, double rounding
    perturb:  t = rd_dt(rd32(f32(q) * rd32(sigma)))          tensor * Python float: scalar in f32
              perturbed = rd_dt(f32(params) + f32(t))         f32 sum, innocuous for f16/bf16
    update:   acc = 0 (f64); acc = acc + (u[m] * noise_m) * z[m]   f64 numpy, member order
              step = rd_dt(rd32(f32(rd_dt(rd32(acc))) * rd32(lr / sigma)))
              params = rd_dt(f32(params) + f32(step))

On CUDA parameters (rule `cuda`) the lines are the same: the perturbation's
scalar multiply and add round as on the CPU (measured on an H200 with torch
2.11: 0 of 5 x 2**20 elements differ, f32, f16 and bf16), and the page
computes its update on the CPU (``params_current.cpu() + ...``).

`utilities` is the page's module global sized for 30 members:
``max(0, log(30/2 + 1) - log(i+1))`` for i in 0..29, normalised to sum 1
in numpy f64. Which `log` the page calls is not stated: OUR READING is
`math.log` per element, then ``np.array(u, dtype=np.float64)`` and
``u / u.sum()`` (`UTILITY_LOG`, `utilities`); a parity run against the real
page confirms or refutes it. On this machine (numpy 2.4.6, glibc) math.log,
numpy's scalar log and numpy's array log give the same 30 weights bit for
bit, and Python's sum equals numpy's, so the readings only matter elsewhere.

Checks: ``python -m pytest -q tests/test_skill_sample_profile.py`` and
``esverify goldens check --area skill-sample``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import torch

from esverify.es import half_kernels
from esverify.es.numerics import DTYPES, rd32, round_to, scalar32, widen

VERSION = 1
#: the rule of CPU parameters; RULES[1], `cuda`, has the same lines (the page's default device is CUDA)
RULE = "cpu"
RULES = ("cpu", "cuda")
#: the page's module global `population_size`: the length of its `utilities` vector
GLOBAL_POPULATION = 30
#: our reading of the page's `log` (docs/numerics.md §8): math.log per element, to be confirmed by a real run
UTILITY_LOG: Callable[[float], float] = math.log
#: the z-score's guard, as the page writes it: (r - r.mean()) / (r.std() + 1e-8)
ZSCORE_EPS = 1e-8


@dataclass(frozen=True)
class LoopProfile:
    """A numerics profile of a whole reference loop on a flat vector (docs/numerics.md §8).

    Unlike `esverify.es.profiles.Profile` it has no chunk kernels for the
    Trainer; its kernels take the whole flat parameter vector (1-D torch
    tensor of f32/f16/bf16 on CPU or CUDA) and f64 numpy noise. name, version,
    version_constant: as for Profile (a change of any computed bit bumps
    `version`, with a CHANGELOG heading ``## skill-sample v<N>``).
    """

    name: str
    version: int
    rules: tuple
    perturb: Callable = field(repr=False)
    accumulate: Callable = field(repr=False)
    apply: Callable = field(repr=False)
    utilities: Callable = field(repr=False)
    version_constant: str = ""


def utilities(log: Callable[[float], float] | None = None, size: int = GLOBAL_POPULATION) -> np.ndarray:
    """The page's `utilities` global: a new f64 array of shape (size,), summing to 1 (up to rounding).

    ``u_i = max(0, log(size/2 + 1) - log(i + 1))`` with `log` (default
    `UTILITY_LOG`, our reading) on Python floats, then
    ``u = np.array(u, dtype=np.float64); u / u.sum()``. With size 30 only
    members 0..14 get a weight (u_i = 0 from i = 15 on). Source:
    docs/numerics.md §8.
    """
    log = UTILITY_LOG if log is None else log
    raw = [max(0, log(size / 2 + 1) - log(i + 1)) for i in range(size)]
    u = np.array(raw, dtype=np.float64)
    return u / u.sum()


def check_dtype(params: torch.Tensor) -> None:
    """ValueError unless `params` is a 1-D CPU or CUDA tensor of f32, f16 or bf16 (the flat vector)."""
    if not isinstance(params, torch.Tensor) or params.dim() != 1 or params.dtype not in DTYPES:
        raise ValueError(f"skill-sample: the parameters must be one flat 1-D f32/f16/bf16 tensor "
                         f"(parameters_to_vector), got {getattr(params, 'dtype', type(params).__name__)} "
                         f"shape {tuple(getattr(params, 'shape', ()))}")
    if params.device.type not in RULES:
        raise ValueError(f"skill-sample: rules {RULES} are for CPU and CUDA tensors, got device {params.device}")


def noise_to_dtype(noise: np.ndarray, dtype: torch.dtype) -> torch.Tensor:
    """q = rd_dt(rd32(noise)): torch.tensor(noise, dtype=dtype) as torch 2.13 rounds it (measured).

    noise: 1-D f64 numpy array. Returns a CPU tensor of `dtype`. For f16 and
    bf16 the f64 value is rounded to f32 first, then to the dtype: a double
    rounding that differs from numpy's direct ``astype(float16)`` on about 6
    in 10**5 gaussian values (docs/numerics.md §8).
    """
    return round_to(torch.from_numpy(np.ascontiguousarray(noise, dtype=np.float64)).to(torch.float32), dtype)


def perturb(params: torch.Tensor, noise: np.ndarray, sigma: float) -> torch.Tensor:
    """params + sigma * q(noise) as the page computes it; a new tensor of params' dtype and shape.

    params: the flat 1-D parameter vector (f32/f16/bf16, CPU or CUDA; the
    result is on its device); noise: its f64 noise (numpy, same length);
    sigma: Python float, rounded to f32 (torch keeps a Python scalar
    multiplier in f32 for every dtype, measured on CPU and on CUDA).
    Rounds: t = rd_dt(rd32(f32(q) * rd32(sigma))), rd_dt(f32(params) + f32(t)).
    """
    if params.device.type == "cpu" and params.dtype != torch.float32:
        # these roundings are es-awd's tail line on q in the dtype: one compiled loop (esverify.es.
        # half_kernels); None on a NaN, which the torch lines below decide. q is noise_to_dtype's on both paths
        done = half_kernels.scaled_add(params, noise_to_dtype(noise, params.dtype), rd32(sigma), 0)
        if done is not None:
            return done
    return perturb_torch(params, noise, sigma)


def perturb_torch(params: torch.Tensor, noise: np.ndarray, sigma: float) -> torch.Tensor:
    """`perturb` in torch's own elementwise ops, any device and dtype: the lines that decide NaN bits (and
    the ones the compiled path is tested against)."""
    q = noise_to_dtype(noise, params.dtype).to(params.device)
    t = round_to(widen(q) * scalar32(rd32(sigma), params.device), params.dtype)
    return round_to(widen(params) + widen(t), params.dtype)


def accumulate(acc: np.ndarray, noise: np.ndarray, weight: float, z: float) -> np.ndarray:
    """acc += (weight * noise) * z in f64 numpy, in place; returns acc (the page's update line).

    acc, noise: 1-D f64 arrays of one length; weight: utilities[m]; z: the
    member's z-score. Two separately rounded f64 products, then the sum:
    bitwise ``acc += utilities[m] * noise * z[m]`` with no temporary beyond one noise-sized array.
    """
    tmp = np.multiply(noise, np.float64(weight))
    np.multiply(tmp, np.float64(z), out=tmp)
    np.add(acc, tmp, out=acc)
    return acc


def apply(params: torch.Tensor, acc: np.ndarray, lr: float, sigma: float) -> torch.Tensor:
    """params + (lr / sigma) * torch.tensor(acc, dtype) as the page computes it; a new tensor.

    params: the flat vector (f32/f16/bf16, CPU or CUDA); acc: the f64 sum
    (numpy, same length); lr, sigma: Python floats, lr / sigma divided in
    f64 and rounded to f32. Rounds: a = rd_dt(rd32(acc)); step =
    rd_dt(rd32(f32(a) * rd32(lr / sigma))); rd_dt(f32(params) + f32(step)),
    on the CPU as the page computes it (``params_current.cpu() + ...``),
    then moved back to params' device.
    """
    a = noise_to_dtype(acc, params.dtype)
    cpu = params.cpu()
    step = round_to(widen(a) * scalar32(rd32(lr / sigma), "cpu"), params.dtype)
    return round_to(widen(cpu) + widen(step), params.dtype).to(params.device)


PROFILE = LoopProfile(name="skill-sample", version=VERSION, rules=RULES, perturb=perturb,
                      accumulate=accumulate, apply=apply, utilities=utilities,
                      version_constant="esverify.references.skill_sample.profile.VERSION")
