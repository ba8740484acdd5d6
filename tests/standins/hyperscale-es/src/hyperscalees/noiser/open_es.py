"""Stand-in: OpenES, full-rank noise on every leaf (docs/hyperscale.md)."""
import jax
import jax.numpy as jnp

from .base_noiser import Noiser, apply, full_rank, grads_of, shaped


class OpenES(Noiser):
    OPTIONS = {"group_size": 0, "freeze_nonlora": False, "noise_reuse": 0}

    @classmethod
    def do_mm(cls, frozen, dyn, param, key, iterinfo, x):
        if iterinfo is None:
            return x @ param.T
        return x @ (param + full_rank(frozen, dyn, param, key, *iterinfo)).T

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
            noise = jax.vmap(lambda e, t: full_rank(frozen, dyn, param, key, e, t))(epochs, threads)
            return jnp.mean(fitnesses.reshape((n, 1, 1)) * noise, axis=0)

        return apply(frozen, dyn, params, grads_of(frozen, dyn, params, keys, fitnesses, iterinfos, es_map, matrix))
