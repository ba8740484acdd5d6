"""The `update-tree` op: updates of a parameter tree through a noiser's `do_updates` (docs/hyperscale.md §8).

Imported by driver.py, in the child, beside it; never by esverify (it imports jax and optax).

Request fields: noiser, seed, epoch, noise_reuse, rank, sigma, lr, group, mode (jit/eager), solver ("sgd"
or "adamw": optax's with its defaults but the learning rate), leaves ({name: {"shape", "w" (f32 hex),
"code" (the es_map code), "scan" (true: scan_map (0,), one key per slice of the leading axis)}}),
scores (one list of f32 hex per step: step i runs at epoch + i), served (optional: the runner's draws by
key, as the `update` op). Reply: `w` ({name: f32 hex after the last step}), `mu` and `nu` ({name: f32 hex},
adamw only: the first moments of optax's adam state, where the state has them), `count` (adamw's step
count) and the leaf `keys` simple_es_tree_key gave (uint32 words).
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from hyperscale_bits import f32_of, hex_bits


def _solver(name: str):
    import optax
    if name not in ("sgd", "adamw"):
        raise ValueError(f"solver {name!r}: want sgd or adamw")
    return optax.sgd if name == "sgd" else optax.adamw


def _moments(opt_state, names) -> dict:
    """adamw's (mu, nu, count) as hex per leaf, read from the first state in the chain that has them."""
    for part in (opt_state if isinstance(opt_state, tuple) else (opt_state,)):
        if hasattr(part, "mu") and hasattr(part, "nu"):
            return {"mu": {n: hex_bits(part.mu[n]) for n in names}, "nu": {n: hex_bits(part.nu[n]) for n in names},
                    "count": int(part.count)}
    return {}


def run_update_tree(noisers, common, op, served_normal) -> dict:
    """`do_updates` of the request's tree, once per entry of `scores` (module docstring); `served_normal`
    builds the driver's host-callback normal from `served`."""
    cls = noisers.ALL_NOISERS[op["noiser"]]
    leaves = op["leaves"]
    params = {n: jnp.asarray(f32_of(spec["w"]).reshape(spec["shape"])) for n, spec in leaves.items()}
    scan_map = {n: (0,) if spec.get("scan") else () for n, spec in leaves.items()}
    es_map = {n: int(spec["code"]) for n, spec in leaves.items()}
    frozen, dyn = cls.init_noiser(params, op["sigma"], op["lr"], solver=_solver(op.get("solver", "sgd")),
                                  noise_reuse=op["noise_reuse"], rank=op["rank"], group_size=op["group"])
    keys = common.simple_es_tree_key(params, jax.random.PRNGKey(op["seed"]), scan_map)

    def step(dyn, params, fit, iterinfos):
        return cls.do_updates(frozen, dyn, params, keys, fit, iterinfos, es_map)

    run = jax.jit(step) if op["mode"] == "jit" else step
    real = jax.random.normal
    if op.get("served"):
        jax.random.normal = served_normal(op["served"])
    try:
        for i, scores in enumerate(op["scores"]):
            fit = cls.convert_fitnesses(frozen, dyn, jnp.asarray(f32_of(scores)))
            n = fit.shape[0]
            iterinfos = (jnp.full((n,), op["epoch"] + i, jnp.int32), jnp.arange(n, dtype=jnp.int32))
            dyn, params = run(dyn, params, fit, iterinfos)
        jax.block_until_ready(params)
    finally:
        jax.random.normal = real
    out = {"w": {n: hex_bits(params[n]) for n in leaves},
           "keys": {n: np.asarray(keys[n]).astype(np.uint32).tolist() for n in leaves}}
    if op.get("solver") == "adamw":
        out.update(_moments(dyn["opt_state"], list(leaves)))
    return out
