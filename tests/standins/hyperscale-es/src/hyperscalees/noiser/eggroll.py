"""Stand-in: EggRoll, low-rank noise A·Bᵀ on matrix leaves (docs/hyperscale.md §5, §8)."""
import jax
import jax.numpy as jnp

from .base_noiser import Noiser, apply, full_rank, grads_of, pair_key, shaped, sign_of


def factors(frozen, dyn, param, key, epoch, thread):
    """(A (d0, r) carrying +-sigma/sqrt(r), B (d1, r)) from one draw of (d0 + d1, r)."""
    d0, d1 = param.shape
    r = frozen["rank"]
    draw = jax.random.normal(pair_key(frozen, key, epoch, thread), (d0 + d1, r), dtype=param.dtype)
    scale = (sign_of(thread) * (dyn["sigma"] / jnp.sqrt(r))).astype(param.dtype)
    return draw[d1:] * scale, draw[:d1]


class EggRoll(Noiser):
    OPTIONS = {"group_size": 0, "freeze_nonlora": False, "noise_reuse": 0, "rank": 1, "use_batched_update": False}

    @classmethod
    def do_mm(cls, frozen, dyn, param, key, iterinfo, x):
        if iterinfo is None:
            return x @ param.T
        a, b = factors(frozen, dyn, param, key, *iterinfo)
        return x @ param.T + (x @ b) @ a.T

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
            a, b = jax.vmap(lambda e, t: factors(frozen, dyn, param, key, e, t))(epochs, threads)
            print("LORA UPDATE", a.shape, b.shape)        # at trace time only, as the real one
            x = fitnesses.reshape((n, 1, 1)) * a             # f32 fitness: the product and the dot in f32
            return jnp.einsum("nir,njr->ij", x, b) / n

        return apply(frozen, dyn, params, grads_of(frozen, dyn, params, keys, fitnesses, iterinfos, es_map, matrix))
