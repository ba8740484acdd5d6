"""Straight-line model of the `es-paper` profile and loop, for tests and goldens (docs/numerics.md §3; docs/references.md §6).

The paper's scripts, one torch op per line, in numpy (with ml_dtypes) on
the primitives of esverify.es.algebra; nothing of the kernels it checks
(esverify.references.es_paper.profile, .loop, .schedule): the seed lists
come from numpy's legacy generator here, the contract noise from the slow
scalar RNG reference (esverify.rng.scalar). `loop` is the whole
``main()`` loop the golden area's ``paper-loop`` vectors are expected from.

Checks: ``python -m pytest -q tests/test_es_paper_profile.py`` (each line
against torch's own op and the profile's kernel, the loop against
`run_paper_loop`, bitwise) and ``esverify goldens check --area es-paper``.
"""
from __future__ import annotations

import numpy as np

from esverify.es.algebra import dtype_name, f32, rd, rd32s
from esverify.rng import scalar


def mul(x: np.ndarray, c: float) -> np.ndarray:
    """``x * c`` / ``x.mul_(c)``: rd_dt(rd32(f32(x) * rd32(c))); the scalar is rounded to f32 only."""
    name = dtype_name(x)
    return rd(f32(x) * rd32s(c), name)


def add(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """``x.add_(y)``: rd_dt(f32(x) + f32(y)) (x, y of one dtype)."""
    return rd(f32(x) + f32(y), dtype_name(x))


def div(x: np.ndarray, n: int, rule: str = "cpu") -> np.ndarray:
    """``x.div_(n)``: rule `cpu` rd_dt(rd32(f32(x) / rd32(n))), a true division (not x * (1/n));
    rule `cuda` rd_dt(rd32(f32(x) * rd32(1 / rd32(n)))), torch's CUDA kernel (the f32 reciprocal)."""
    if rule == "cuda":
        return rd(f32(x) * (np.float32(1.0) / rd32s(float(n))), dtype_name(x))
    if rule != "cpu":
        raise ValueError(f"unknown es-paper rule {rule!r}; known: ('cpu', 'cuda')")
    return rd(f32(x) / rd32s(float(n)), dtype_name(x))


def perturb(theta: np.ndarray, q: np.ndarray, s: float) -> np.ndarray:
    """``theta.add_(s * q)``: q is the noise already in theta's dtype; s = +sigma or -sigma."""
    return add(theta, mul(q, s))


def update(theta: np.ndarray, q_list, coeffs, alpha: float, population: int, rule: str = "cpu") -> np.ndarray:
    """The update of one parameter: acc = zeros (theta's dtype); acc += q_n * C_n in order;
    acc /= N; theta += alpha * acc, each a separate rounding in theta's dtype (docs/numerics.md §3).

    q_list: noise arrays in theta's dtype (``randn(dtype=dt)``), one per coefficient (f64 values;
    the scripts pass f32 values); rule: "cpu" or "cuda" (`div`). Returns a new array of theta's dtype.
    """
    acc = np.zeros(theta.shape, theta.dtype)
    for q, c in zip(q_list, coeffs):
        acc = add(acc, mul(q, c))
    return add(theta, mul(div(acc, population, rule), alpha))


def normalise(member_rewards) -> tuple[np.ndarray, np.ndarray]:
    """(r, normalised) of the paper's loop: r = the f64 member rewards rounded to f32 (the script
    gathers them in an f32 tensor), then numpy's own f32 ``(r - r.mean()) / (r.std() + 1e-8)``."""
    r = np.array([np.float32(x) for x in member_rewards], dtype=np.float32)
    with np.errstate(all="ignore"):
        return r, ((r - r.mean()) / (r.std() + 1e-8)).astype(np.float32)


def seed_lists(initial_seed: int, iterations: int, population: int) -> list[list[int]]:
    """The per-iteration seed lists of the scripts: numpy's legacy MT19937 seeded once, then
    ``randint(0, 2**30, size=N, dtype=int64)`` per iteration (a private RandomState)."""
    rs = np.random.RandomState(initial_seed)
    return [rs.randint(0, 2 ** 30, size=population, dtype=np.int64).tolist() for _ in range(iterations)]


def contract_noise(seed: int, slot: int, numel: int, iid: bool, mapping: str, name: str) -> np.ndarray:
    """Contract noise of a script's draw: the 30-bit `seed` IS the u64 member seed; the plain scripts
    are `correlated`, the ``_iid`` scripts' ``seed + slot`` is the member's `iid` stream of `slot`;
    ``randn(dtype=dt)`` is the f32 stream rounded to dt (docs/references.md §3, §3a)."""
    ss = scalar.stream_seed(seed, slot, "iid" if iid else "correlated")
    return rd(np.asarray(scalar.gaussian(ss, numel, 0, mapping), np.float32), name)


def loop(params: list, *, iterations: int, population: int, sigma: float, alpha: float,
         initial_seed: int, gpu_threads: int, prompt_rewards, dataset_size: int, draw) -> dict:
    """The scripts' ``main()`` loop, straight line (docs/references.md §6, docs/numerics.md §3).

    params: numpy arrays (f32/f16/bf16) in slot order; draw(seed, slot, shape, name) -> the noise
    array in dtype `name` (``randn`` with the generator seeded `seed`, or `seed + slot` in the iid
    scripts: the caller's draw decides); prompt_rewards(list of arrays) -> per-prompt f64 rewards.
    Returns the tape of esverify.references.es_paper.loop.run_paper_loop with numpy arrays.
    """
    copies = [[p.copy() for p in params] for _ in range(gpu_threads)]
    tape = {"seeds": [], "rewards": [], "normalised": []}
    for seeds in seed_lists(initial_seed, iterations, population):
        rewards = [0.0] * population
        for start in range(0, population, gpu_threads):
            for j, n in enumerate(range(start, min(population, start + gpu_threads))):
                model = copies[j]
                noises = [draw(seeds[n], k, p.shape, dtype_name(p)) for k, p in enumerate(model)]
                model[:] = [perturb(p, q, sigma) for p, q in zip(model, noises)]
                rewards[n] = sum(prompt_rewards(model)) / dataset_size
                model[:] = [perturb(p, q, -sigma) for p, q in zip(model, noises)]
        r, norm = normalise(rewards)
        before = [[p.copy() for p in c] for c in copies]
        copies[0][:] = [update(p, [draw(seeds[n], k, p.shape, dtype_name(p)) for n in range(population)],
                               [float(c) for c in norm], alpha, population)
                        for k, p in enumerate(copies[0])]
        for j in range(1, gpu_threads):
            copies[j] = [p.copy() for p in copies[0]]
        tape["seeds"].append(list(seeds))
        tape["rewards"].append(r)
        tape["normalised"].append(norm)
    tape["params"] = copies[0]
    tape["copies_before_update"] = before if iterations else copies
    return tape
