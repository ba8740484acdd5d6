"""Stand-in: the sparse noiser, max(a, b) random entries per matrix leaf (docs/hyperscale.md §5, §14).

Kept on purpose (findings a report names): importing this module appends a folder that does not
exist to sys.path; `rank` is accepted and dropped, `q_multiplier` stored and never read; `do_mm`
indexes the input's first axis, right for one input vector only (a batch raises a broadcasting
error or returns wrong values).
"""
import os
import sys

import jax
import jax.numpy as jnp

from .base_noiser import Noiser, apply, full_rank, grads_of, pair_key, shaped, sign_of

sys.path.append(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src"))


def entries(frozen, dyn, param, key, epoch, thread):
    """(rows, cols, values) of a thread's k = max(a, b) entries, drawn with replacement."""
    a, b = param.shape
    k = max(a, b)
    k1, k2 = jax.random.split(pair_key(frozen, key, epoch, thread))
    pos = jnp.floor(jax.random.uniform(k1, (k,)) * a * b).astype(jnp.int32)
    values = jax.random.normal(k2, (k,), dtype=param.dtype) * (sign_of(thread) * dyn["sigma"]).astype(param.dtype)
    return pos // b, pos % b, values


class Sparse(Noiser):
    OPTIONS = {"group_size": 0, "freeze_nonlora": False, "noise_reuse": 0, "q_multiplier": 1}

    @classmethod
    def init_noiser(cls, params, sigma, lr, solver=None, solver_kwargs=None, rank=1, **options):
        return super().init_noiser(params, sigma, lr, solver=solver, solver_kwargs=solver_kwargs, **options)

    @classmethod
    def do_mm(cls, frozen, dyn, param, key, iterinfo, x):
        out = x @ param.T
        if iterinfo is None:
            return out
        rows, cols, values = entries(frozen, dyn, param, key, *iterinfo)
        return out.at[rows].add(values * x[cols])

    @classmethod
    def get_noisy_standard(cls, frozen, dyn, param, key, iterinfo):
        if iterinfo is None or frozen["freeze_nonlora"]:
            return param
        return param + full_rank(frozen, dyn, param, key, *iterinfo)

    @classmethod
    def convert_fitnesses(cls, frozen, dyn, raw_scores, num_episodes_list=None):
        return shaped(frozen, raw_scores)

    @classmethod
    def do_updates(cls, frozen, dyn, params, keys, fitnesses, iterinfos, es_map):
        epochs, threads = iterinfos
        n = fitnesses.shape[0]

        def matrix(param, key):
            a, b = param.shape
            k = max(a, b)

            def dense(e, t, f):
                rows, cols, values = entries(frozen, dyn, param, key, e, t)
                return jnp.zeros(param.shape, jnp.float32).at[rows, cols].add(f * values)

            return jnp.mean(jax.vmap(dense)(epochs, threads, fitnesses), axis=0) * (k / (a * b))

        return apply(frozen, dyn, params, grads_of(frozen, dyn, params, keys, fitnesses, iterinfos, es_map, matrix))
