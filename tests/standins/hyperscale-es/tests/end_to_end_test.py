"""Stand-in: the end-to-end test (docs/hyperscale.md §13), written from esverify's description alone.

An MLP 3 -> 16 -> 16 -> 1 (ReLU, biases) taught to output 2 by EggRoll: rank 8, sigma 0.2, lr 0.03,
optax adamw (b1 0.9, b2 0.999, optax's default weight decay), 64 threads, 10 epochs, every other
option at its default (noise_reuse 0, group_size 0). Matrices go through `do_mm`, biases through
`get_noisy_standard`; the update step (jitted) calls `convert_fitnesses` then `do_updates`. Like the
real test it imports HF_HOME and points JAX's persistent compilation cache at
HF_HOME/hyperscaleescomp with no size or time threshold.

The initialisation, data and ES keys and the batch are this stand-in's own (the description gives
none), so its final parameters are not the real test's.
"""
import hashlib
import os

import jax
import jax.numpy as jnp
import numpy as np
import optax
from huggingface_hub.constants import HF_HOME

jax.config.update("jax_compilation_cache_dir", os.path.join(HF_HOME, "hyperscaleescomp"))
jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)
jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)

from hyperscalees.models.common import MM_PARAM, PARAM, simple_es_tree_key  # noqa: E402
from hyperscalees.noiser import ALL_NOISERS  # noqa: E402

SIZES = (3, 16, 16, 1)
NUM_THREADS, EPOCHS, BATCH = 64, 10, 16
SIGMA, LR, RANK, TARGET = 0.2, 0.03, 8, 2.0


def init_params(key):
    params = {}
    for i, (d_in, d_out) in enumerate(zip(SIZES[:-1], SIZES[1:])):
        kw, kb = jax.random.split(jax.random.fold_in(key, i))
        params[f"layer{i}"] = {"w": jax.random.normal(kw, (d_out, d_in)) / jnp.sqrt(d_in),
                               "b": 0.1 * jax.random.normal(kb, (d_out,))}
    return params


def forward(noiser, frozen, dyn, params, keys, iterinfo, x):
    for i in range(len(SIZES) - 1):
        layer, lkeys = params[f"layer{i}"], keys[f"layer{i}"]
        x = noiser.do_mm(frozen, dyn, layer["w"], lkeys["w"], iterinfo, x) + \
            noiser.get_noisy_standard(frozen, dyn, layer["b"], lkeys["b"], iterinfo)
        if i < len(SIZES) - 2:
            x = jax.nn.relu(x)
    return x


def test_end_to_end(epochs=EPOCHS):
    noiser = ALL_NOISERS["eggroll"]
    master = jax.random.PRNGKey(0)
    params = init_params(jax.random.fold_in(master, 0))
    es_map = {name: {"w": MM_PARAM, "b": PARAM} for name in params}
    keys = simple_es_tree_key(params, jax.random.fold_in(master, 1), jax.tree_util.tree_map(lambda _: (), es_map))
    frozen, dyn = noiser.init_noiser(params, SIGMA, LR, solver=optax.adamw, solver_kwargs={"b1": 0.9, "b2": 0.999},
                                     rank=RANK)

    @jax.jit
    def fitnesses(dyn, params, epoch, x):
        def one(thread):
            out = forward(noiser, frozen, dyn, params, keys, (epoch, thread), x)
            return -jnp.mean((out - TARGET) ** 2)
        return jax.vmap(one)(jnp.arange(NUM_THREADS))

    @jax.jit
    def update(dyn, params, raw, epoch):
        shaped = noiser.convert_fitnesses(frozen, dyn, raw)
        iterinfos = (jnp.full((NUM_THREADS,), epoch, jnp.int32), jnp.arange(NUM_THREADS, dtype=jnp.int32))
        return noiser.do_updates(frozen, dyn, params, keys, shaped, iterinfos, es_map)

    for epoch in range(epochs):
        x = jax.random.normal(jax.random.fold_in(jax.random.fold_in(master, 2), epoch), (BATCH, SIZES[0]))
        raw = fitnesses(dyn, params, epoch, x)
        dyn, params = update(dyn, params, raw, epoch)
        print(f"epoch {epoch}: mean fitness {float(jnp.mean(raw)):.6f}")
    flat = np.concatenate([np.asarray(leaf, np.float32).ravel() for leaf in jax.tree_util.tree_leaves(params)])
    print("final params sha256[:16]", hashlib.sha256(flat.tobytes()).hexdigest()[:16])
    return params


if __name__ == "__main__":
    test_end_to_end()
