"""Stand-in: AltEggRoll, EggRoll's low-rank noise with a sign update (docs/hyperscale.md §5, §14)."""
import jax
import jax.numpy as jnp

from .base_noiser import apply, grads_of
from .eggroll import EggRoll, factors


class AltEggRoll(EggRoll):
    """The forward pass is EggRoll's; the update replaces the factors by their signs:
    g = (1/N) sum_t (sigma/sqrt(r)) f_t sign(A_t) sign(B_t)^T."""

    OPTIONS = {"group_size": 0, "freeze_nonlora": False, "noise_reuse": 0, "rank": 1}

    @classmethod
    def do_updates(cls, frozen, dyn, params, keys, fitnesses, iterinfos, es_map):
        epochs, threads = iterinfos
        n = fitnesses.shape[0]

        def matrix(param, key):
            a, b = jax.vmap(lambda e, t: factors(frozen, dyn, param, key, e, t))(epochs, threads)
            x = fitnesses.reshape((n, 1, 1)) * jnp.sign(a)
            scale = dyn["sigma"] / jnp.sqrt(frozen["rank"])
            return jnp.einsum("nir,njr->ij", x, jnp.sign(b)) * scale / n

        return apply(frozen, dyn, params, grads_of(frozen, dyn, params, keys, fitnesses, iterinfos, es_map, matrix))
