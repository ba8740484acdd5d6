"""The end-to-end test of a HyperscaleES clone, run and recorded for the loop row (docs/hyperscale.md §13).

Imported by driver.py (op `loop-e2e`), in the child, beside it; never by esverify (it imports jax).
The clone's `tests/end_to_end_test.py` runs unmodified (as `__main__`; a file that only defines `test_*`
functions has them called), with two seams (docs/hyperscale.md §13):

- `huggingface_hub.constants` is a stand-in module whose HF_HOME is a fresh folder under the child's
  own temporary folder (its private folder: never the user's cache); the test points JAX's persistent
  compilation cache there, and the op reports the files it wrote (a finding), then removes the folder
  and puts JAX's cache settings back.
- the noisers' `init_noiser` (its arguments), `convert_fitnesses` (raw and shaped scores) and
  `do_updates` (params before and after, the shaped fitnesses, the iterinfo epochs, the leaf keys and
  es_map codes) are wrapped where a class defines them; values are read through `jax.debug.callback`,
  so recording works inside the test's jitted step and changes none of its arithmetic (a test compares
  the stand-in's final parameters with and without the recording).

The noise is JAX's own (native): the test's keys are its own, so no contract table can name them in
advance; our side rebuilds the draws from the recorded leaf keys. After the run, one eager `do_mm` of
thread 0 at the first and the last recorded epoch says whether the perturbations repeat across epochs.
"""
from __future__ import annotations

import os
import runpy
import shutil
import sys
import tempfile
import types
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from hyperscale_bits import hex_bits

TEST = Path("tests") / "end_to_end_test.py"
_CACHE_OPTIONS = ("jax_compilation_cache_dir", "jax_persistent_cache_min_entry_size_bytes",
                  "jax_persistent_cache_min_compile_time_secs")


def _words(key) -> list:
    """A key (typed or raw uint32) as nested lists of its 32-bit words."""
    k = key
    if jnp.issubdtype(getattr(k, "dtype", np.uint32), jax.dtypes.prng_key):
        k = jax.random.key_data(k)
    return np.asarray(k).astype(np.uint32).tolist()


def _key_data(key):
    return jax.random.key_data(key) if jnp.issubdtype(key.dtype, jax.dtypes.prng_key) else key


class _Recorder:
    """The wrapped class methods and what they saw (Python lists, filled by debug callbacks)."""

    def __init__(self, noisers):
        self.inits, self.shapings, self.updates, self.layout = [], [], [], None
        self.restore = []
        for cls in {id(c): c for c in noisers.ALL_NOISERS.values()}.values():
            for name, wrap in (("init_noiser", self._init), ("convert_fitnesses", self._shaping),
                               ("do_updates", self._update)):
                if name in cls.__dict__:
                    original = cls.__dict__[name]
                    self.restore.append((cls, name, original))
                    setattr(cls, name, classmethod(wrap(original.__func__)))

    def undo(self):
        for cls, name, original in reversed(self.restore):
            setattr(cls, name, original)

    def _init(self, fn):
        def init_noiser(cls, params, sigma, lr, solver=None, solver_kwargs=None, **options):
            frozen, dyn = fn(cls, params, sigma, lr, solver=solver, solver_kwargs=solver_kwargs, **options)
            self.inits.append({"noiser": cls.__name__, "sigma": float(sigma), "lr": float(lr),
                               "solver": getattr(solver, "__name__", "sgd" if solver is None else repr(solver)),
                               "solver_kwargs": {k: v for k, v in (solver_kwargs or {}).items()
                                                 if isinstance(v, (int, float, bool, str))},
                               "options": {k: v for k, v in options.items() if isinstance(v, (int, float, bool))},
                               "_state": (cls, frozen, dyn)})
            return frozen, dyn
        return init_noiser

    def _shaping(self, fn):
        def convert_fitnesses(cls, frozen, dyn, raw_scores, num_episodes_list=None):
            shaped = fn(cls, frozen, dyn, raw_scores, num_episodes_list)
            jax.debug.callback(lambda r, s: self.shapings.append({"raw": hex_bits(r), "shaped": hex_bits(s)}),
                               raw_scores, shaped)
            return shaped
        return convert_fitnesses

    def _update(self, fn):
        def do_updates(cls, frozen, dyn, params, keys, fitnesses, iterinfos, es_map):
            new_dyn, new_params = fn(cls, frozen, dyn, params, keys, fitnesses, iterinfos, es_map)
            if self.layout is None:
                flat, treedef = jax.tree_util.tree_flatten_with_path(params)
                codes = treedef.flatten_up_to(es_map)
                self.layout = {"names": [jax.tree_util.keystr(p) for p, _ in flat],
                               "shapes": [list(leaf.shape) for _, leaf in flat],
                               "dtypes": [str(leaf.dtype) for _, leaf in flat],
                               "codes": [int(c) if isinstance(c, (int, np.integer)) else None for c in codes]}
            leaf_keys = [_key_data(k) for k in jax.tree_util.tree_structure(params).flatten_up_to(keys)]
            jax.debug.callback(self._record_update, jax.tree_util.tree_leaves(params), leaf_keys, fitnesses,
                               iterinfos[0], jax.tree_util.tree_leaves(new_params))
            return new_dyn, new_params
        return do_updates

    def _record_update(self, before, keys, fitnesses, epochs, after):
        self.updates.append({"before": [hex_bits(b) for b in before], "keys": [np.asarray(k).astype(np.uint32).tolist()
                                                                          for k in keys],
                             "shaped": hex_bits(fitnesses), "epochs": sorted({int(e) for e in np.ravel(epochs)}),
                             "threads": int(np.size(fitnesses)), "after": [hex_bits(a) for a in after]})


def _hf_stand_in(home: Path) -> dict:
    """Install `huggingface_hub.constants` with HF_HOME = home; returns the modules it replaced."""
    saved = {name: sys.modules.get(name) for name in ("huggingface_hub", "huggingface_hub.constants")}
    hub = types.ModuleType("huggingface_hub")
    hub.__path__ = []
    constants = types.ModuleType("huggingface_hub.constants")
    constants.HF_HOME = str(home)
    hub.constants = constants
    sys.modules.update({"huggingface_hub": hub, "huggingface_hub.constants": constants})
    return saved


def _cache_reset():
    from jax.experimental.compilation_cache import compilation_cache
    compilation_cache.reset_cache()     # the cache is set up once per process: let the test's settings count


def _frozen_probe(rec: _Recorder, leaf_index: int, epochs: list) -> dict:
    """Thread 0's perturbed output of the first matrix leaf at the first and last recorded epochs, eager."""
    cls, frozen, dyn = rec.inits[0]["_state"]
    first, last = rec.updates[0], rec.updates[-1]
    shape = rec.layout["shapes"][leaf_index]
    dtype = jnp.dtype(rec.layout["dtypes"][leaf_index])
    raw = np.array([int(h, 16) for h in first["before"][leaf_index]], {4: np.uint32, 2: np.uint16}[dtype.itemsize])
    param = jnp.asarray(raw.view(dtype).reshape(shape))
    key = jnp.asarray(np.asarray(first["keys"][leaf_index], np.uint32))
    eye = jnp.eye(shape[1], dtype=dtype)
    outs = [np.asarray(cls.do_mm(frozen, dyn, param, key, (e, 0), eye)) for e in (epochs[0], epochs[-1])]
    same = bool(np.array_equal(outs[0].view(np.uint8), outs[1].view(np.uint8)))
    return {"epochs": [epochs[0], epochs[-1]], "identical": same, "leaf": rec.layout["names"][leaf_index]}


def run_end_to_end(noisers, common, op) -> dict:
    """Run the clone's end-to-end test; returns `init` (init_noiser's arguments), `layout` (leaf names,
    shapes, dtypes, es_map codes, flatten order), `shapings` and `updates` (per call, hex bits),
    `cache_files` (what the test wrote under HF_HOME), `frozen` (the repeat probe) and `ran`."""
    clone = Path(noisers.__path__[0]).parents[2]
    test = clone / TEST
    if not test.is_file():
        raise FileNotFoundError(f"{test} does not exist: the clone has no end-to-end test")
    scratch = Path(tempfile.mkdtemp(prefix="hf_home-"))
    saved_modules = _hf_stand_in(scratch)
    saved_config = {name: getattr(jax.config, name) for name in _CACHE_OPTIONS}
    rec = _Recorder(noisers)
    try:
        _cache_reset()
        namespace = runpy.run_path(str(test), run_name="__main__")
        ran = "__main__"
        if not rec.updates:
            tests = [name for name, fn in namespace.items() if name.startswith("test_") and callable(fn)]
            for name in tests:
                namespace[name]()
            ran = ", ".join(tests) or "nothing"
        jax.effects_barrier()
        files = sorted(str(p.relative_to(scratch)) for p in scratch.rglob("*") if p.is_file())
    finally:
        rec.undo()
        for name, value in saved_config.items():
            jax.config.update(name, value)
        _cache_reset()
        for name, module in saved_modules.items():
            if module is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = module
        shutil.rmtree(scratch, ignore_errors=True)
    matrices = [i for i, c in enumerate((rec.layout or {}).get("codes", [])) if c == common.MM_PARAM]
    epochs = sorted({e for u in rec.updates for e in u["epochs"]})
    frozen = _frozen_probe(rec, matrices[0], epochs) if rec.inits and matrices and len(epochs) > 1 else None
    return {"init": [{k: v for k, v in i.items() if k != "_state"} for i in rec.inits], "layout": rec.layout,
            "shapings": rec.shapings, "updates": rec.updates, "cache_files": files, "frozen": frozen,
            "ran": ran, "hf_home_under_tmp": str(scratch).startswith(tempfile.gettempdir())}
