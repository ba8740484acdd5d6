"""The rows of hyperscale-es's sparse, AltEggRoll and EggRollBS noisers (docs/hyperscale.md §14).

Design record: as .rows (one child request, our numpy model .noisers, the core's comparison), with
the child's `forward`, `probe` and `noiser-update` ops (child/hyperscale_noisers.py). Contract noise
serves the normals by key (the sparse noiser's values come from fold_in(pair key, 1)); the sparse
noiser's positions come from `jax.random.uniform`, which is never served: under both noises JAX draws
them and the row compares them, and the positions they give, with our model of jax's uniform (such a
part holds for that jaxlib, as a native row does). Rows:

- noise-sparse, noise-alteggroll (N 4), noise-eggrollbs (N 8, group size 4): each thread's perturbed
  (8, 5) parameter in the forward pass (eager) and the draws behind it, f32/f16/bf16; noise-eggrollbs
  also compares EggRollBS's shaping (G values) and shows do_updates failing for two groups;
- eggrollbs-defaults (N 4): EggRollBS at its defaults: every perturbation zero, ZeroDivisionError in
  convert_fitnesses and with a Python-int epoch;
- sparse-batch (f32, native noise): a square parameter's one-vector `do_mm` calls against our model, and
  the batch call beside them (its error, the options it drops);
- update-alteggroll-jit/-eager (rank 2, N 8), update-sparse-jit/-eager (N 8): one sgd update of an
  (8, 5) f32 leaf. The contraction and the sums follow orders measured on XLA CPU (docs/hyperscale.md §8,
  §14); the row's detail says so.
"""
from __future__ import annotations

import numpy as np

from . import jaxrandom as R
from . import noise as N
from . import noisers as M
from . import shaping as S
from .contract import contract_draw
from .noiser_ops import UPDATE_OPS
from .rows import (EPOCH, LEAF, SHAPE, ask, case_rng, hex_bits, host_fma, ours_form, outcome, sigma_lr, their_bits,
                   weights)

F32 = np.float32
#: EggRollBS's group size in noise-eggrollbs: two groups of N 8
GROUP = 4


def run_row(session, case):
    """The Outcome of row `case` (one of .noiser_ops.OPS)."""
    if case.op == "noise-alteggroll":
        from .rows import perturb_row
        return perturb_row(session, case, "alteggroll")
    if case.op == "noise-sparse":
        return sparse_noise_row(session, case)
    if case.op in ("noise-eggrollbs", "eggrollbs-defaults"):
        return eggrollbs_row(session, case, defaults=case.op == "eggrollbs-defaults")
    if case.op == "sparse-batch":
        return sparse_batch_row(session, case)
    return update_row(session, case, *UPDATE_OPS[case.op])


def _pair_draws(session, case, seed, shape, pairs, noise_reuse, sparse=False):
    """Per pair (drawing key, draw in the dtype's numpy form) and the served entries under contract noise
    (None under native); the sparse noiser draws its values from the pair key's second sub-key."""
    base = N.leaf_key(R.key(seed), LEAF)
    out, served = [], []
    for p in range(pairs):
        key = N.thread_key(base, EPOCH, 2 * p, noise_reuse)
        if sparse:
            key = M.sparse_keys(key)[1]
        if case.noise == "contract":
            e = EPOCH // noise_reuse if noise_reuse else 0
            d = contract_draw(session.opts.seed, e, pairs, LEAF, p, shape, case.dtype, session.opts.mapping)
            served.append({"key": [int(k) for k in key], "shape": list(shape), "dtype": case.dtype,
                           "bits": hex_bits(d, case.dtype)})
        else:
            d = R.normal(key, shape, case.dtype, host_fma(session.environment))
        out.append((key, d))
    return out, (served if case.noise == "contract" else None)


def _recorded(seen: list, index: int, dtype: str, shape):
    return their_bits(seen[index]["bits"], dtype, shape) if len(seen) > index else np.zeros(0, np.uint32)


def _common_op(case, seed, w, sigma, served):
    return {"seed": seed, "epoch": EPOCH, "shape": list(SHAPE), "w": hex_bits(np.asarray(w, F32), "f32"),
            "sigma": sigma, "dtype": case.dtype, **({"served": served} if served else {})}


def sparse_noise_row(session, case):
    """The sparse noiser's perturbed parameter per thread (one `do_mm` per basis vector, eager), its
    positions' uniforms and its values' draws."""
    dtype, n, seed = case.dtype, case.population, int(case.handles[0])
    rng = case_rng(case)
    w = R.round_to(weights(rng), dtype)
    sigma, _ = sigma_lr(rng)
    k = max(SHAPE)
    draws, served = _pair_draws(session, case, seed, (k,), n // 2, 1, sparse=True)
    op = dict(_common_op(case, seed, w, sigma, served), op="forward", noiser="sparse", threads=list(range(n)),
              one_d=True, options={"noise_reuse": 1, "rank": 2})
    res = ask(session, case, [op])[0]
    ours, theirs, names = [], [], []
    base = N.leaf_key(R.key(seed), LEAF)
    calls = SHAPE[1]                               # do_mm draws once per basis vector
    for t in range(n):
        k1 = M.sparse_keys(N.thread_key(base, EPOCH, t, 1))[0]
        rows, cols = M.sparse_positions(k1, SHAPE)
        values = M.sparse_values(draws[t // 2][1], sigma, t, dtype)
        ours.append(ours_form(M.sparse_perturbed(w, rows, cols, values, dtype), dtype))
        theirs.append(their_bits(res["perturbed"][t], dtype, SHAPE) if len(res["perturbed"]) > t
                      else np.zeros(0, np.uint32))
        names.append(f"thread{t}")
        if t % 2 == 0:
            ours += [ours_form(draws[t // 2][1], dtype), R.uniform(k1, (k,))]
            theirs += [_recorded(res["draws"], t * calls, dtype, (k,)),
                       _recorded(res["uniforms"], t * calls, "f32", (k,))]
            names += [f"values{t // 2}", f"positions-uniform{t // 2}"]
    dtypes = [dtype if not name.startswith("positions") else "f32" for name in names]
    return outcome(session, case, ours, theirs, dtypes, names,
                    f"sparse, {dtype}, eager, one do_mm per basis vector, shape {SHAPE}, k {k}, N={n}, "
                    f"sigma={sigma!r}, epoch {EPOCH}, noise_reuse 1; positions from JAX's own uniform "
                    f"(never served) against our model" + (", values served" if served else ""),
                    [("sparse-error", res["error"])] if res.get("error") else [])


def eggrollbs_row(session, case, defaults: bool):
    """EggRollBS's perturbed parameter per thread (eager `do_mm` of the identity, jnp iterinfo) and what its
    shaping and update do: with two groups of GROUP (noise-eggrollbs), or at its defaults."""
    dtype, n, seed, rank = case.dtype, case.population, int(case.handles[0]), 1
    group, reuse = (0, 0) if defaults else (GROUP, 1)
    rng = case_rng(case)
    w = R.round_to(weights(rng), dtype)
    sigma, _ = sigma_lr(rng)
    scores = rng.normal(size=n).astype(F32)
    shape = (SHAPE[0] + SHAPE[1], rank)
    draws, served = _pair_draws(session, case, seed, shape, n // 2, reuse)
    options = {} if defaults else {"group_size": group, "noise_reuse": reuse, "rank": rank}
    op = dict(_common_op(case, seed, w, sigma, served), op="forward", noiser="eggrollbs", threads=list(range(n)),
              options=options)
    probe = dict(_common_op(case, seed, w, sigma, None), op="probe", noiser="eggrollbs", options=options,
                 scores=hex_bits(scores, "f32"), int_epoch=defaults, dtype="f32")
    res, prb = ask(session, case, [op, probe])
    scale = F32(F32(sigma) / F32(np.sqrt(F32(rank))))
    ours, theirs, names = [], [], []
    for t in range(n):
        d = draws[t // 2][1]
        live = M.bs_live(t, group)
        a = N.scale_draw(d[SHAPE[1]:], scale if live else 0.0, t, dtype)
        p = R.round_to((np.asarray(d[:SHAPE[1]], F32) * np.asarray(a, F32).T).T.astype(F32), dtype)
        ours.append(ours_form(R.round_to((np.asarray(w, F32) + np.asarray(p, F32)).astype(F32), dtype), dtype))
        theirs.append(their_bits(res["perturbed"][t], dtype, SHAPE) if len(res["perturbed"]) > t
                      else np.zeros(0, np.uint32))
        names.append(f"thread{t}")
    for p in range(n // 2):
        ours.append(ours_form(draws[p][1], dtype))
        theirs.append(_recorded(res["draws"], 2 * p, dtype, shape))
        names.append(f"draw{p}")
    dtypes = [dtype] * len(ours)
    wbits = N.bits_of(w, dtype).reshape(SHAPE)
    zero = sum(np.array_equal(wbits, their_bits(h, dtype, SHAPE)) for h in res["perturbed"])
    findings = []
    if defaults:
        findings.append(("eggrollbs-defaults",
                         f"group_size 0: {zero} of {n} threads' perturbed parameters equal W bit for bit (zero "
                         f"noise); convert_fitnesses: {prb['shaping'].get('error', 'no error')}; do_mm with a "
                         f"Python-int epoch at noise_reuse 0: {prb['int_epoch'].get('error', 'no error')}"))
    else:
        ours.append(M.eggrollbs_shaping(scores, group))
        got = prb["shaping"].get("value")
        theirs.append(their_bits(got, "f32", (len(got),)) if got else np.zeros(0, np.uint32))
        names.append("shaped")
        dtypes.append("f32")
        findings.append(("eggrollbs-groups",
                         f"group size {group}, N={n}: {zero} of {n} threads (index mod {group} in {{0, 1}}) have "
                         f"zero noise; convert_fitnesses returns {len(got or [])} values for {n} scores; "
                         f"do_updates: {prb['update'].get('error', 'ran')}"))
    if res.get("error"):
        findings.append(("eggrollbs-defaults" if defaults else "eggrollbs-groups", f"do_mm: {res['error']}"))
    return outcome(session, case, ours, theirs, dtypes, names,
                    f"eggrollbs, {dtype}, eager do_mm of the identity (jnp iterinfo), shape {SHAPE}, rank {rank}, "
                    f"N={n}, group_size {group}, noise_reuse {reuse}, sigma={sigma!r}, epoch {EPOCH}"
                    + (" (every option at its default)" if defaults else ""), findings)


def sparse_batch_row(session, case):
    """A square (5, 5) parameter's one-vector `do_mm` calls (stacked) against our model, the batch call of the
    same inputs beside them (a finding), and what init_noiser keeps of the options."""
    seed = int(case.handles[0])
    rng = case_rng(case)
    w = weights(rng)
    sigma, _ = sigma_lr(rng)
    d1 = SHAPE[1]
    probe = dict(_common_op(case, seed, w, sigma, None), op="probe", noiser="sparse", batch=True, thread=0,
                 options={"noise_reuse": 1, "rank": 2, "q_multiplier": 3})
    prb = ask(session, case, [probe])[0]
    square = w[:d1, :d1]
    base = N.leaf_key(R.key(seed), LEAF)
    rows, cols, values = M.sparse_entries(base, EPOCH, 0, (d1, d1), sigma, "f32", 1, host_fma(session.environment))
    one_d = M.sparse_perturbed(square, rows, cols, values).T      # row i: do_mm of e_i
    got = prb["batch_rows"].get("value")
    theirs = their_bits(got, "f32", (d1, d1)) if got else np.zeros(0, np.uint32)
    findings = []
    batch = prb["batch"]
    if "value" in batch:
        err = float(np.max(np.abs(their_bits(batch["value"], "f32", (d1, d1)).view(F32) - one_d)))
        findings.append(("sparse-batch", f"do_mm of a ({d1}, {d1}) batch on a ({d1}, {d1}) parameter runs and "
                                         f"differs from the one-vector calls by up to {err:.3g}; a (2, {d1}) batch "
                                         f"on {SHAPE}: {prb['small_batch'].get('error', 'no error')}"))
    else:
        findings.append(("sparse-batch", f"do_mm of a ({d1}, {d1}) batch: {batch['error']}"))
    kept = prb["frozen"]
    findings.append(("sparse-options", f"init_noiser(rank=2, q_multiplier=3) keeps {kept}: rank "
                                       f"{'kept' if 'rank' in kept else 'dropped'}, q_multiplier "
                                       f"{'stored' if 'q_multiplier' in kept else 'absent'} (the noiser never "
                                       f"reads it); sys.path entries that do not exist: {prb['missing_paths']}"))
    return outcome(session, case, [one_d], [theirs], ["f32"], ["one-vector"],
                    f"sparse, f32, eager, ({d1}, {d1}) parameter (W's first rows), thread 0, sigma={sigma!r}, "
                    f"epoch {EPOCH}, noise_reuse 1, JAX's own noise", findings)


def update_row(session, case, noiser: str, rank: int, n: int):
    """One sgd update (f32, jitted or eager, from the op) of `noiser` (alteggroll, sparse) with n threads."""
    seed, mode = int(case.handles[0]), "jit" if case.op.endswith("-jit") else "eager"
    rng = case_rng(case)
    w = weights(rng)
    sigma, lr = sigma_lr(rng)
    scores = rng.normal(size=n).astype(F32)
    sparse = noiser == "sparse"
    shape = (max(SHAPE),) if sparse else (SHAPE[0] + SHAPE[1], rank)
    draws, served = _pair_draws(session, case, seed, shape, n // 2, 1, sparse=sparse)
    op = {"op": "noiser-update", "noiser": noiser, "seed": seed, "epoch": EPOCH, "shape": list(SHAPE),
          "w": hex_bits(w, "f32"), "scores": hex_bits(scores, "f32"), "sigma": sigma, "lr": lr, "mode": mode, "dtype": "f32",
          "options": {"noise_reuse": 1, **({} if sparse else {"rank": rank})}, **({"served": served} if served else {})}
    res = ask(session, case, [op])[0]
    shaped = S.convert_fitnesses(scores)
    if sparse:
        base = N.leaf_key(R.key(seed), LEAF)
        entries = []
        for t in range(n):
            k1 = M.sparse_keys(N.thread_key(base, EPOCH, t, 1))[0]
            entries.append((*M.sparse_positions(k1, SHAPE), M.sparse_values(draws[t // 2][1], sigma, t)))
        ours = M.sparse_update(w, shaped, entries, lr, mode)
        how = "scatter in index order, sequential sum over threads (measured on XLA CPU)"
    else:
        ours = M.alteggroll_update_from_draws(w, shaped, [draws[t // 2][1] for t in range(n)], sigma, lr, rank, mode)
        how = "sign contraction in XLA's dot order for 8x16x5 (four accumulators, measured)"
    return outcome(session, case, [ours], [their_bits(res["w"], "f32", SHAPE)], ["f32"], ["w"],
                    f"{noiser} sgd, f32, {mode}, shape {SHAPE}, {f'k {max(SHAPE)}' if sparse else f'rank {rank}'}, "
                    f"N={n}, sigma={sigma!r}, lr={lr!r}, "
                    f"{how}, {int(np.sum(ours == w))} of {w.size} unchanged, epoch {EPOCH}, noise_reuse 1"
                    + ("; positions from JAX's own uniform" if sparse else ""))
