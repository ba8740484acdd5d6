"""The tree-update rows of hyperscale-es: several leaves, a scanned leaf, sgd and adamw (docs/hyperscale.md §8).

Design record: one row runs two `do_updates` (epochs EPOCH and EPOCH + 1) of the tree TREE through the
child's `update-tree` op (child/hyperscale_trees.py) and our numpy model (.tree, .optim), and compares
every leaf after the last step (and adamw's moments, where the child's optimiser state has them).
The tree holds one leaf of each kind: an EggRoll matrix leaf (MM_PARAM), a bias (PARAM, full-rank
noise), an EXCLUDED leaf (zero gradient) and a stacked matrix leaf (scan_map (0,): one key per slice).
N 4 threads and rank 4 keep each matrix slice's dot at 8 x 16 x 5, whose order XLA's kernel was measured
to take (.update.dot_order), and the bias's reduction over 4 threads in the measured sequential order
(jitted on JAX's own noise, XLA fuses the draw into it: .tree.MAX_FUSED_THREADS). f32 only.

Contract noise: the child's `jax.random.normal` is served by key (the host callback of the `update` rows)
from the stream of (epoch, pair, slot), the slot being the leaf's flatten index, or for slice l of a
stacked leaf i, SLICE_SLOT * (i + 1) + l. Native noise: JAX's own draws against .tree.native_draws.
A finding the row shows: with adamw the EXCLUDED leaf moves (weight decay), with sgd it does not.
"""
from __future__ import annotations

import numpy as np

from . import jaxrandom as R
from . import noise as N
from . import shaping as S
from . import tree as T
from .contract import contract_draw
from .rows import EPOCH, NOISE_REUSE, ask, hex_bits, outcome, case_rng, sigma_lr, their_bits, host_fma

F32 = np.float32
RANK, STEPS, SLICE_SLOT = 4, 2, 1000
#: name -> (shape, es_map code, scanned): flatten order is the names' sorted order
TREE = {"bias": ((5,), T.PARAM, False), "frozen": ((3,), T.EXCLUDED, False), "w": ((8, 5), T.MM_PARAM, False),
        "w_layers": ((3, 8, 5), T.MM_PARAM, True)}


def _params(rng) -> dict:
    out = {}
    for name, (shape, _, _) in TREE.items():
        w = rng.uniform(-1, 1, shape).astype(F32)
        out[name] = np.where(w == 0, F32(0.5), w)
    return out


def _draw_shape(shape, code):
    return (shape[0] + shape[1], RANK) if code == T.MM_PARAM else tuple(shape)


def _contract_draws(session, keys: dict, n: int, epoch: int) -> tuple[dict, list]:
    """{name: draws} of contract noise for the step at `epoch` (the .tree.native_draws layout) and the served
    entries (key, shape, dtype, bits) the child's callback answers."""
    seed, mapping = session.opts.seed, session.opts.mapping
    e, pairs = epoch // NOISE_REUSE, n // 2
    served, out = [], {}
    for index, name in enumerate(sorted(TREE)):
        shape, code, scanned = TREE[name]
        if code not in (T.PARAM, T.MM_PARAM):
            out[name] = None
            continue

        def draws(key, slot, leaf_shape):
            per_pair = []
            for p in range(pairs):
                d = np.asarray(contract_draw(seed, e, pairs, slot, p, _draw_shape(leaf_shape, code), "f32", mapping))
                served.append({"key": [int(k) for k in N.thread_key(key, epoch, 2 * p, NOISE_REUSE)],
                               "shape": list(d.shape), "dtype": "f32", "bits": hex_bits(d, "f32")})
                per_pair.append(d)
            return [per_pair[t // 2] for t in range(n)]

        key = np.asarray(keys[name])
        out[name] = ([draws(k, SLICE_SLOT * (index + 1) + layer, shape[1:]) for layer, k in enumerate(key)]
                     if scanned else draws(key, index, shape))
    return out, served


def ours_form(session, case, params, keys, scores, sigma, lr, mode, solver):
    """Our side: the tree after STEPS updates, the optimiser state and the served entries (contract noise)."""
    es_map = {name: code for name, (_, code, _) in TREE.items()}
    state, served, p = None, [], dict(params)
    for i, raw in enumerate(scores):
        epoch, n = EPOCH + i, raw.size
        if case.noise == "contract":
            draws, entries = _contract_draws(session, keys, n, epoch)
            served.extend(entries)
        else:
            draws = T.native_draws(p, es_map, keys, epoch, n, RANK, NOISE_REUSE, host_fma(session.environment))
        p, state = T.tree_update(p, es_map, S.convert_fitnesses(raw), draws, sigma, lr, RANK, mode, solver, state)
    return p, state, served


def tree_row(session, case, solver: str):
    """STEPS updates of TREE with `solver` ("sgd" or "adamw"), jitted or eager (from the op), f32."""
    mode = "jit" if case.op.endswith("-jit") else "eager"
    seed, n = int(case.handles[0]), case.population
    rng = case_rng(case)
    params = _params(rng)
    sigma, lr = sigma_lr(rng)
    scores = [rng.normal(size=n).astype(F32) for _ in range(STEPS)]
    scan_map = {name: (0,) if scanned else () for name, (_, _, scanned) in TREE.items()}
    keys = T.leaf_keys(R.key(seed), params, scan_map)
    ours, state, served = ours_form(session, case, params, keys, scores, sigma, lr, mode, solver)
    op = {"op": "update-tree", "noiser": "eggroll", "seed": seed, "epoch": EPOCH, "noise_reuse": NOISE_REUSE,
          "rank": RANK, "sigma": sigma, "lr": lr, "group": 0, "mode": mode, "solver": solver,
          "leaves": {name: {"shape": list(shape), "w": hex_bits(params[name], "f32"), "code": code, "scan": scanned}
                     for name, (shape, code, scanned) in TREE.items()},
          "scores": [hex_bits(s, "f32") for s in scores], **({"served": served} if served else {})}
    got = ask(session, case, [op])[0]
    mine, theirs, names = [], [], []
    for name in sorted(TREE):
        shape = TREE[name][0]
        mine.append(ours[name])
        theirs.append(their_bits(got["w"][name], "f32", shape))
        names.append(name)
        for part in ("mu", "nu"):
            if state is not None and part in got:
                mine.append(getattr(state[name], part))
                theirs.append(their_bits(got[part][name], "f32", shape))
                names.append(f"{part}:{name}")
    moved = int(np.sum(theirs[names.index("frozen")] != params["frozen"].view(np.uint32)))
    findings = []
    if solver == "adamw" and moved:
        findings.append(("excluded-decay", f"adamw: {moved} of {params['frozen'].size} elements of the EXCLUDED "
                                           f"leaf changed in {STEPS} steps (weight decay; its gradient is zero)"))
    leaves = ", ".join(f"{name} {shape} {('PARAM', 'MM_PARAM', 'EMB_PARAM', 'EXCLUDED')[code]}"
                       f"{' scanned' if scanned else ''}" for name, (shape, code, scanned) in sorted(TREE.items()))
    ran = (f"eggroll {solver}, f32, {mode}, tree [{leaves}], rank {RANK}, N={n}, {STEPS} steps from epoch {EPOCH}, "
           f"sigma={sigma!r}, lr={lr!r}, noise_reuse {NOISE_REUSE}; dots 8x{n * RANK}x5 at XLA's measured order, "
           f"the bias's sum over {n} threads sequential; EXCLUDED leaf: {moved} of {params['frozen'].size} moved")
    return outcome(session, case, mine, theirs, ["f32"] * len(mine), names, ran, findings)
