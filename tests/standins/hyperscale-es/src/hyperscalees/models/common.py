"""Stand-in: the es_map codes and the parameter tree's keys (docs/hyperscale.md §5)."""
import jax

PARAM, MM_PARAM, EMB_PARAM, EXCLUDED = 0, 1, 2, 3


def simple_es_tree_key(params, base_key, scan_map):
    """One key per leaf (flatten order): split(base_key, L)[i]; a leaf whose scan_map is (0,) gets one key
    per slice of its leading axis, split(leaf key, n)[l]."""
    leaves, treedef = jax.tree_util.tree_flatten(params)
    scans = treedef.flatten_up_to(scan_map)
    keys = jax.random.split(base_key, len(leaves))
    out = []
    for leaf, key, scan in zip(leaves, keys, scans):
        out.append(jax.random.split(key, leaf.shape[0]) if scan == (0,) else key)
    return jax.tree_util.tree_unflatten(treedef, out)
