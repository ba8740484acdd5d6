"""The rows of hyperscale-es: one child request, our numpy model, the core's comparison (docs/hyperscale.md §10).

Design record: a row builds its inputs from the case's own stream (W, raw scores, sigma and the
learning rate, larger than the matrix's so that one bf16 step shows; the row's note names them), asks the child (child/driver.py, op "run") and
computes our side with the numpy model under what the child's hello says it runs on (the CPU's
FMA, XLA_FLAGS), compares them (session.tools.compare) and returns an Outcome: the status is the
core's (esverify.oracle.verdict), as is the row of a child that failed or a reference that raised. Contract
rows serve the draws of .contract by key; native rows let JAX draw and our model (.jaxrandom)
reproduce it. A documented quirk a row shows is recorded as a finding (the adapter's `findings`).
"""
from __future__ import annotations

import numpy as np

from esverify.oracle.verdict import Outcome

from . import jaxrandom as R
from . import noise as N
from . import shaping as S
from . import update as U
from .contract import contract_draw

F32 = np.float32
EPOCH, NOISE_REUSE, LEAF = 5, 1, 0
SHAPE = (8, 5)


def settings(env: dict) -> str:
    """The row's reference_settings: what the child's bits depend on (its hello's environment)."""
    return (f"jax {env.get('jax')} jaxlib {env.get('jaxlib')}; cpu fma {env.get('cpu_fma')}; "
            f"XLA_FLAGS '{env.get('XLA_FLAGS', '')}'; threefry_partitionable {env.get('threefry_partitionable')}")


def host_fma(env: dict) -> bool:
    """Whether XLA contracts multiply-adds in the child: the CPU has FMA and no flag caps the ISA below AVX2."""
    isa = [f.partition("=")[2].upper() for f in str(env.get("XLA_FLAGS", "")).split()
           if f.startswith("--xla_cpu_max_isa=")]
    return bool(env.get("cpu_fma")) and not (isa and isa[-1] in ("AVX", "SSE4_2"))


def hex_bits(x, dtype: str) -> list:
    return [f"0x{int(v):0{8 if dtype == 'f32' else 4}x}" for v in np.ravel(N.bits_of(x, dtype))]


def their_bits(hexes, dtype: str, shape) -> np.ndarray:
    return np.array([int(h, 16) for h in hexes], np.uint32 if dtype == "f32" else np.uint16).reshape(shape)


def ours_form(x, dtype: str):
    """A value in the dtype's numpy form as something esverify.bits reads in that format (bf16: a torch tensor)."""
    if dtype != "bf16":
        return np.ascontiguousarray(x, np.float32 if dtype == "f32" else np.float16)
    import torch
    return torch.from_numpy(np.ascontiguousarray(x, np.float32)).to(torch.bfloat16)


def case_rng(case) -> np.random.Generator:
    return np.random.default_rng([int(h) for h in case.handles[:4]])


def sigma_lr(rng) -> tuple[float, float]:
    """sigma and lr of a noisy row, from its stream: large enough that a perturbation and one update step move
    most bf16 weights (the matrix's sigma and alpha, the fine-tuning paper's sizes, would leave a bf16 update
    unchanged, and a sign error unseen), not powers of two."""
    return float(F32(rng.uniform(0.02, 0.1))), float(F32(rng.uniform(0.05, 0.2)))


def weights(rng) -> np.ndarray:
    w = rng.uniform(-1, 1, SHAPE).astype(F32)
    return np.where(w == 0, F32(0.5), w)       # no zeros: a signed zero's sum is not what this row checks


def _draws(session, case, seed, dtype, shape, pairs):
    """Per pair: (key words, draw in the dtype's numpy form) of the pair's key; the served entries under contract
    noise (None under native)."""
    base = N.leaf_key(R.key(seed), LEAF)
    out, served = [], []
    fma = host_fma(session.environment)
    for p in range(pairs):
        key = N.thread_key(base, EPOCH, 2 * p, NOISE_REUSE)
        if case.noise == "contract":
            e = EPOCH // NOISE_REUSE
            d = contract_draw(session.opts.seed, e, pairs, LEAF, p, shape, dtype, session.opts.mapping)
            served.append({"key": [int(k) for k in key], "shape": list(shape), "dtype": dtype, "bits": hex_bits(d, dtype)})
        else:
            d = R.normal(key, shape, dtype, fma)
        out.append((key, d))
    return out, (served if case.noise == "contract" else None)


def ask(session, case, ops) -> list:
    """The child's results of `ops`; a child that failed or a reference that raised ends the row (the core's)."""
    reply, _ = session.tools.exchange(case, {"op": "run", "case_id": case.case_id, "ops": ops})
    return reply["results"]


def outcome(session, case, ours: list, theirs: list, dtypes: list, names: list, ran: str, findings=()):
    """The row's Outcome for the core (esverify.oracle.verdict): the comparison of every result, what ran and
    under what (the child's jax, jaxlib, FMA and XLA_FLAGS), the findings it showed."""
    cmp = session.tools.compare(ours, theirs, dtypes, names)
    return Outcome(diff=cmp.summary(), final=cmp, ran=f"{ran}; {settings(session.environment)}",
                           findings=list(findings))


def shaping_row(session, case, group: int) -> Outcome:
    """`convert_fitnesses` of N raw scores with group size `group` (eager f32), ours and the reference's."""
    scores = case_rng(case).normal(size=case.population).astype(F32)
    results = ask(session, case, [{"op": "shaping", "noiser": "eggroll", "scores": hex_bits(scores, "f32"),
                                    "group": group}])
    ours, findings = S.convert_fitnesses(scores, group), []
    if group:
        s = scores.astype(np.float64).reshape(-1, group)
        per_group = ((s - s.mean(1, keepdims=True)) / np.sqrt(s.var(1, keepdims=True) + 1e-5)).ravel()
        theirs = their_bits(results[0]["shaped"], "f32", (case.population,)).view(F32)
        findings.append(("grouped-shaping", f"group size {group} of {case.population}: the reference's values "
                                            f"differ from per-group standardisation by up to "
                                            f"{np.max(np.abs(theirs - per_group)):.3g}"))
    if not group and session.environment.get("lax_pvary") is False:   # said once a run: the ungrouped row
        findings.append(("pvary-gone", f"jax {session.environment.get('jax')} has no jax.lax.pvary"))
    return outcome(session, case, [ours], [their_bits(results[0]["shaped"], "f32", (case.population,))], ["f32"],
                    ["shaped"], f"convert_fitnesses, eager f32, N={case.population}, group size {group}", findings)


def perturb_row(session, case, noiser: str) -> Outcome:
    """Each thread's perturbed parameter in `noiser`'s forward pass (eager) and the draws behind it."""
    dtype, n, seed, rank = case.dtype, case.population, int(case.handles[0]), 1
    rng = case_rng(case)
    w = R.round_to(weights(rng), dtype)
    sigma, _ = sigma_lr(rng)
    standard = noiser == "open_es"
    shape = SHAPE if standard else (SHAPE[0] + SHAPE[1], rank)
    draws, served = _draws(session, case, seed, dtype, shape, n // 2)
    op = {"op": "perturb", "noiser": noiser, "seed": seed, "epoch": EPOCH, "noise_reuse": NOISE_REUSE,
          "shape": list(SHAPE), "w": hex_bits(np.asarray(w, F32), "f32"), "sigma": sigma, "dtype": dtype,
          "threads": list(range(n)), "standard": standard, **({} if standard else {"rank": rank}),
          **({"served": served} if served else {})}
    frozen = dict(op, noise_reuse=0, threads=[0], epoch=0, served=None)
    later = dict(frozen, epoch=EPOCH)
    results = ask(session, case, [op, frozen, later])
    ours, theirs, names = [], [], []
    for t in range(n):
        key, d = draws[t // 2]
        if standard:
            p = N.scale_draw(d, sigma, t, dtype)
        else:
            scale = F32(F32(sigma) / F32(np.sqrt(F32(rank))))
            a, b = N.scale_draw(d[SHAPE[1]:], scale, t, dtype), d[:SHAPE[1]]
            p = R.round_to((np.asarray(b, F32) * np.asarray(a, F32).T).T.astype(F32), dtype)   # rank 1: one product
        ours.append(ours_form(R.round_to((np.asarray(w, F32) + np.asarray(p, F32)).astype(F32), dtype), dtype))
        theirs.append(their_bits(results[0]["perturbed"][t], dtype, SHAPE))
        names.append(f"thread{t}")
    seen = results[0]["draws"]
    for p in range(n // 2):   # the draws the reference asked for: the pair's key, shape and dtype, in call order
        ours.append(ours_form(draws[p][1], dtype))
        theirs.append(their_bits(seen[2 * p]["bits"], dtype, shape) if len(seen) > 2 * p else np.zeros(0, np.uint32))
        names.append(f"draw{p}")
    findings = []
    if results[1]["draws"] and results[1]["draws"] == results[2]["draws"]:
        findings.append(("frozen-noise", f"noise_reuse 0: epochs 0 and {EPOCH} drew the same key and the same noise"))
    if case.noise == "native" and dtype == "bf16":
        values = {h for entry in seen for h in entry["bits"]}
        findings.append(("bf16-noise", f"{len(values)} distinct bf16 values in {n // 2} draws of "
                                       f"{int(np.prod(shape))}"))
    return outcome(session, case, ours, theirs, [dtype] * len(ours), names,
                    f"{noiser}, {dtype}, eager, shape {SHAPE}, rank {rank if not standard else 'full'}, N={n}, "
                    f"sigma={sigma!r}, epoch {EPOCH}, noise_reuse {NOISE_REUSE}", findings)


def update_row(session, case, rank: int, n: int) -> Outcome:
    """One EggRoll sgd update (jitted or eager, from the op) of rank `rank` with `n` threads."""
    dtype, seed, mode = case.dtype, int(case.handles[0]), "jit" if "-jit" in case.op else "eager"
    rng = case_rng(case)
    w = R.round_to(weights(rng), dtype)
    sigma, lr = sigma_lr(rng)
    scores = rng.normal(size=n).astype(F32)
    draws, served = _draws(session, case, seed, dtype, (SHAPE[0] + SHAPE[1], rank), n // 2)
    op = {"op": "update", "noiser": "eggroll", "seed": seed, "epoch": EPOCH, "noise_reuse": NOISE_REUSE,
          "shape": list(SHAPE), "w": hex_bits(np.asarray(w, F32), "f32"), "scores": hex_bits(scores, "f32"), "group": 0,
          "sigma": sigma, "lr": lr, "rank": rank, "mode": mode, "dtype": dtype,
          **({"served": served} if served else {})}
    results = ask(session, case, [op])
    flags = str(session.environment.get("XLA_FLAGS", ""))
    excess = None if "--xla_allow_excess_precision=false" not in flags else False
    ours = U.update_from_draws(np.asarray(w, F32), S.convert_fitnesses(scores), [draws[t // 2][1] for t in range(n)],
                               sigma, lr, rank, mode, dtype=dtype, excess_precision=excess)
    printed = results[0].get("printed") or []
    findings = [("trace-print", f"{len(printed)} line(s) at trace time: {printed[0][:80]}")] if printed else []
    return outcome(session, case, [ours_form(ours, dtype)], [their_bits(results[0]["w"], dtype, SHAPE)], [dtype], ["w"],
                    f"eggroll sgd, {dtype}, {mode}, shape {SHAPE}, rank {rank}, N={n}, sigma={sigma!r}, lr={lr!r}, "
                    f"{int(np.sum(np.asarray(ours, F32) == np.asarray(w, F32)))} of {w.size} unchanged, epoch {EPOCH}, "
                    f"noise_reuse {NOISE_REUSE}", findings)

