"""Stand-in: EggRollBS, EggRoll with per-group baselines (docs/hyperscale.md §5, §14).

Kept on purpose (findings a report names): threads whose index mod group_size is 0 or 1 draw zero
noise, so at the default group_size 0 every thread's noise is zero (jnp's integer modulo by 0 is 0);
`convert_fitnesses` divides N by group_size in Python (ZeroDivisionError at 0) and returns G values,
not N, so `do_updates` fails for more than one group; with noise_reuse 0 and a Python-int epoch both
branches of the epoch select are evaluated (ZeroDivisionError).
"""
import jax
import jax.numpy as jnp
import optax

from .base_noiser import apply, grads_of, sign_of
from .eggroll import EggRoll


def bs_key(frozen, key, epoch, thread):
    reuse = frozen["noise_reuse"]
    e = jnp.where(reuse == 0, 0, epoch // reuse)     # both branches run: a Python epoch // 0 raises
    return jax.random.fold_in(jax.random.fold_in(key, e), thread // 2)


def bs_factors(frozen, dyn, param, key, epoch, thread):
    """EggRoll's (A, B), A times 0 for a thread whose index mod group_size is 0 or 1."""
    d0, d1 = param.shape
    r = frozen["rank"]
    slot = jnp.asarray(thread) % frozen["group_size"]
    live = jnp.where((slot == 0) | (slot == 1), 0.0, 1.0)
    draw = jax.random.normal(bs_key(frozen, key, epoch, thread), (d0 + d1, r), dtype=param.dtype)
    scale = (sign_of(thread) * (dyn["sigma"] / jnp.sqrt(r)) * live).astype(param.dtype)
    return draw[d1:] * scale, draw[:d1]


class EggRollBS(EggRoll):
    OPTIONS = {"group_size": 0, "freeze_nonlora": False, "noise_reuse": 0, "rank": 1, "trust_region_norm": 1.0}

    @classmethod
    def init_noiser(cls, params, sigma, lr, solver=None, solver_kwargs=None, **options):
        solver = solver or optax.sgd
        norm = options.get("trust_region_norm", cls.OPTIONS["trust_region_norm"])

        def clipped(lr, **kw):
            return optax.chain(optax.clip_by_global_norm(norm), solver(lr, **kw))

        return super().init_noiser(params, sigma, lr, solver=clipped, solver_kwargs=solver_kwargs, **options)

    @classmethod
    def do_mm(cls, frozen, dyn, param, key, iterinfo, x):
        if iterinfo is None:
            return x @ param.T
        a, b = bs_factors(frozen, dyn, param, key, *iterinfo)
        return x @ param.T + (x @ b) @ a.T

    @classmethod
    def convert_fitnesses(cls, frozen, dyn, raw_scores, num_episodes_list=None):
        g = frozen["group_size"]
        s = jnp.asarray(raw_scores, jnp.float32)
        rows = s.reshape(s.shape[0] // g, g)
        out = (rows - rows[:, :1]) / (jnp.std(rows, axis=1, keepdims=True) + 1e-8)
        return jnp.mean(out.at[:, :2].set(0.0), axis=0)

    @classmethod
    def do_updates(cls, frozen, dyn, params, keys, fitnesses, iterinfos, es_map):
        epochs, threads = iterinfos
        n = fitnesses.shape[0]

        def matrix(param, key):
            a, b = jax.vmap(lambda e, t: bs_factors(frozen, dyn, param, key, e, t))(epochs, threads)
            x = fitnesses.reshape((n, 1, 1)) * a
            return jnp.einsum("nir,njr->ij", x, b) / n

        return apply(frozen, dyn, params, grads_of(frozen, dyn, params, keys, fitnesses, iterinfos, es_map, matrix))
