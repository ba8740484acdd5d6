"""Stand-in: the base noiser (no noise) and what every noiser shares (docs/hyperscale.md §4-§5, §8)."""
import jax
import jax.numpy as jnp
import optax

from ..models.common import EMB_PARAM, EXCLUDED, MM_PARAM, PARAM  # noqa: F401


class Noiser:
    """Class methods with explicit state: (frozen, dyn) from init_noiser, never an instance."""

    OPTIONS = {}

    @classmethod
    def init_noiser(cls, params, sigma, lr, solver=None, solver_kwargs=None, **options):
        unknown = set(options) - set(cls.OPTIONS)
        if unknown:
            raise TypeError(f"unknown options {sorted(unknown)}")
        solver = solver or optax.sgd
        tx = solver(lr, **(solver_kwargs or {}))
        frozen = {"solver": tx, **cls.OPTIONS, **options}
        dyn = {"sigma": jnp.float32(sigma), "opt_state": tx.init(params)}
        return frozen, dyn

    @classmethod
    def do_mm(cls, frozen, dyn, param, key, iterinfo, x):
        return x @ param.T

    @classmethod
    def get_noisy_standard(cls, frozen, dyn, param, key, iterinfo):
        return param

    @classmethod
    def convert_fitnesses(cls, frozen, dyn, raw_scores, num_episodes_list=None):
        return raw_scores

    @classmethod
    def do_updates(cls, frozen, dyn, params, keys, fitnesses, iterinfos, es_map):
        return dyn, params


def pair_key(frozen, key, epoch, thread):
    """The key a thread draws from: pairs share it; noise_reuse 0 keeps epoch 0's forever."""
    reuse = frozen["noise_reuse"]
    e = 0 if reuse == 0 else epoch // reuse
    return jax.random.fold_in(jax.random.fold_in(key, e), thread // 2)


def sign_of(thread):
    return jnp.where(thread % 2 == 0, 1.0, -1.0)


def shaped(frozen, raw_scores):
    """Centred on the group's mean (or the global one), divided by the spread of all scores."""
    s = jnp.asarray(raw_scores)
    if not jnp.issubdtype(s.dtype, jnp.floating):
        s = s.astype(jnp.float32)
    den = jnp.sqrt(jnp.var(s) + 1e-5)
    g = frozen["group_size"]
    if g == 0:
        return (s - jnp.mean(s)) / den
    rows = s.reshape(-1, g)
    return ((rows - jnp.mean(rows, axis=1, keepdims=True)) / den).ravel()


def full_rank(frozen, dyn, param, key, epoch, thread):
    noise = jax.random.normal(pair_key(frozen, key, epoch, thread), param.shape, dtype=param.dtype)
    return noise * (sign_of(thread) * dyn["sigma"]).astype(param.dtype)


def apply(frozen, dyn, params, grads):
    """One optimiser step on the whole tree."""
    tx = frozen["solver"]
    updates, opt_state = tx.update(grads, dyn["opt_state"], params)
    return {**dyn, "opt_state": opt_state}, optax.apply_updates(params, updates)


def grads_of(frozen, dyn, params, keys, fitnesses, iterinfos, es_map, matrix_rule):
    """-sqrt(N) * the estimate per leaf, in the leaf's dtype (zeros for excluded and frozen leaves); a leaf
    whose key holds one key per slice (scan_map (0,)) is estimated slice by slice."""
    epochs, threads = iterinfos
    n = fitnesses.shape[0]

    def one(param, key, code):
        typed = jnp.issubdtype(key.dtype, jax.dtypes.prng_key)
        if jnp.ndim(key) > (0 if typed else 1):   # a stacked leaf (scan_map (0,)): slice by slice, by slice key
            return jnp.stack([one(param[i], key[i], code) for i in range(key.shape[0])])
        if code == MM_PARAM:
            g = matrix_rule(param, key)
        elif code == PARAM and not frozen["freeze_nonlora"]:
            noise = jax.vmap(lambda e, t: full_rank(frozen, dyn, param, key, e, t))(epochs, threads)
            g = jnp.mean(fitnesses.reshape((n,) + (1,) * param.ndim) * noise, axis=0)
        else:
            return jnp.zeros_like(param)
        return (-(jnp.sqrt(n) * g)).astype(param.dtype)

    return jax.tree_util.tree_map(one, params, keys, es_map)
