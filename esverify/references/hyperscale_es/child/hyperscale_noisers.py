"""The hyperscale-es child's ops for the sparse, AltEggRoll and EggRollBS noisers (docs/hyperscale.md §14).

Runs ONLY in the hyperscale-es child (beside child/driver.py, which lists these ops in its OPS table);
the esverify package never imports it, and it imports no torch. Floats travel as hex bit patterns.

- `forward`: noiser, seed, epoch, noise_reuse, shape (d0, d1), w (f32 hex), sigma, dtype, threads,
  options (init_noiser keywords), one_d (true: one `do_mm` call per basis vector e_j, stacked as columns,
  the only input the sparse noiser computes right; false: `do_mm` of the identity, transposed),
  int_iterinfo (true: (epoch, thread) as Python ints; false: jnp int32 scalars), served (optional: the
  runner's normals by key, driver._served_normal) -> `perturbed` (per thread, the dtype's hex, W's shape),
  `draws` (what `jax.random.normal` returned: key words, shape, dtype, bits) and `uniforms` (the same of
  `jax.random.uniform`, never served: JAX draws the sparse noiser's positions), or `error` (one line) when
  the noiser raised.
- `noiser-update`: as the driver's `update` (scores, lr, mode jit/eager, served), with init_noiser's
  keywords from `options` alone (the sparse noiser drops `rank`: none is passed) -> `w` (f32 hex).
- `probe`: noiser, options, what the row's findings need, each caught as one line:
  `batch` (sparse: `do_mm` of a (d1, d1) identity batch on a square (d1, d1) parameter, W's first d1
  rows, the hex result or the error; `batch_rows`, the same parameter's d1 one-vector calls stacked as
  rows, what the batch should equal; `small_batch`, a (2, d1) batch on the (d0, d1) parameter),
  `shaping` (scores f32 hex: the hex result of `convert_fitnesses` or the error), `update` (scores:
  convert_fitnesses then an eager `do_updates` on a one-leaf tree W; "ok" or the error), `int_epoch`
  (`do_mm` with a Python-int epoch, thread 2), `frozen` (the option names init_noiser stored)
  and `missing_paths` (sys.path entries under the clone that do not exist).
"""
from __future__ import annotations

import os
import sys

import jax
import jax.numpy as jnp
import numpy as np

from hyperscale_bits import DTYPES, f32_of, hex_bits


def _line(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:300]


def _recorder(seen: list, inner):
    def recording(key, shape=(), dtype=jnp.float32, *args, **kw):
        out = inner(key, shape, dtype, *args, **kw)
        seen.append({"key": [int(w) for w in np.asarray(jax.random.key_data(key)).ravel()],
                     "shape": list(shape), "dtype": str(jnp.dtype(dtype)), "bits": hex_bits(out)})
        return out
    return recording


def _setup(noisers, common, op):
    cls = noisers.ALL_NOISERS[op["noiser"]]
    d0, d1 = op["shape"]
    dtype = DTYPES[op.get("dtype", "f32")]
    param = jnp.asarray(f32_of(op["w"]).reshape(d0, d1)).astype(dtype)
    frozen, dyn = cls.init_noiser({"w": param}, op["sigma"], op.get("lr", 0.1), **op.get("options", {}))
    keys = common.simple_es_tree_key({"w": param}, jax.random.PRNGKey(op["seed"]), {"w": ()})
    return cls, param, frozen, dyn, keys


def run_forward(noisers, common, op, served_normal):
    """Each thread's perturbed parameter as `do_mm` gives it, eager, and the draws behind it (module doc)."""
    cls, param, frozen, dyn, keys = _setup(noisers, common, op)
    d1 = param.shape[1]
    normals, uniforms = [], []
    real_normal, real_uniform = jax.random.normal, jax.random.uniform
    jax.random.normal = _recorder(normals, served_normal(op["served"]) if op.get("served") else real_normal)
    jax.random.uniform = _recorder(uniforms, real_uniform)
    outs = []
    try:
        for t in op["threads"]:
            info = (op["epoch"], t) if op.get("int_iterinfo") else (jnp.int32(op["epoch"]), jnp.int32(t))
            eye = jnp.eye(d1, dtype=param.dtype)
            if op.get("one_d"):
                out = jnp.stack([cls.do_mm(frozen, dyn, param, keys["w"], info, eye[j]) for j in range(d1)], axis=1)
            else:
                out = cls.do_mm(frozen, dyn, param, keys["w"], info, eye).T
            outs.append(hex_bits(out))
    except Exception as exc:  # noqa: BLE001 - what the noiser raised is the row's finding
        return {"perturbed": outs, "draws": normals, "uniforms": uniforms, "error": _line(exc)}
    finally:
        jax.random.normal, jax.random.uniform = real_normal, real_uniform
    return {"perturbed": outs, "draws": normals, "uniforms": uniforms}


def run_update(noisers, common, op, served_normal):
    """One sgd update of a one-leaf tree {"w": W} with es_map MM_PARAM: init_noiser, convert_fitnesses,
    do_updates (jitted or eager), the runner's normals served when `served`."""
    cls, param, frozen, dyn, keys = _setup(noisers, common, op)
    fit = cls.convert_fitnesses(frozen, dyn, jnp.asarray(f32_of(op["scores"])))
    n = fit.shape[0]
    infos = (jnp.full((n,), op["epoch"], jnp.int32), jnp.arange(n, dtype=jnp.int32))

    def step(dyn, params, fit, infos):
        return cls.do_updates(frozen, dyn, params, keys, fit, infos, {"w": common.MM_PARAM})

    real = jax.random.normal
    if op.get("served"):
        jax.random.normal = served_normal(op["served"])
    try:
        _, new = (jax.jit(step) if op["mode"] == "jit" else step)(dyn, {"w": param}, fit, infos)
        new["w"].block_until_ready()
    finally:
        jax.random.normal = real
    return {"w": hex_bits(new["w"])}


def _caught(fn):
    try:
        return {"value": fn()}
    except Exception as exc:  # noqa: BLE001 - the reference's failure is what the probe reports
        return {"error": _line(exc)}


def run_probe(noisers, common, op):
    """The findings' evidence of one noiser (module doc), each part caught as one line."""
    cls, param, frozen, dyn, keys = _setup(noisers, common, op)
    d0, d1 = param.shape
    out = {"frozen": sorted(k for k in frozen if k != "solver")}
    clone_src = os.path.dirname(os.path.dirname(os.path.abspath(noisers.__file__)))
    out["missing_paths"] = [p for p in sys.path if os.path.abspath(p).startswith(clone_src) and not os.path.exists(p)]
    info = (jnp.int32(op["epoch"]), jnp.int32(op.get("thread", 0)))
    if op.get("batch"):
        square = jnp.asarray(np.asarray(param, np.float32)[:d1, :d1] if d0 >= d1 else np.eye(d1, dtype=np.float32))
        out["batch"] = _caught(lambda: hex_bits(cls.do_mm(frozen, dyn, square, keys["w"], info, jnp.eye(d1))))
        out["batch_rows"] = _caught(lambda: hex_bits(jnp.stack([cls.do_mm(frozen, dyn, square, keys["w"], info, e)
                                                            for e in jnp.eye(d1)])))
        out["small_batch"] = _caught(lambda: hex_bits(cls.do_mm(frozen, dyn, param, keys["w"], info,
                                                            jnp.ones((2, d1), param.dtype))))
    if "scores" in op:
        scores = jnp.asarray(f32_of(op["scores"]))
        out["shaping"] = _caught(lambda: hex_bits(cls.convert_fitnesses(frozen, dyn, scores)))

        def update():
            fit = cls.convert_fitnesses(frozen, dyn, scores)
            n = scores.shape[0]
            infos = (jnp.full((n,), op["epoch"], jnp.int32), jnp.arange(n, dtype=jnp.int32))
            _, new = cls.do_updates(frozen, dyn, {"w": param}, keys, fit, infos, {"w": common.MM_PARAM})
            new["w"].block_until_ready()
            return "ok"

        out["update"] = _caught(update)
    if op.get("int_epoch"):
        out["int_epoch"] = _caught(lambda: hex_bits(cls.do_mm(frozen, dyn, param, keys["w"], (op["epoch"], 2),
                                                          jnp.eye(d1, dtype=param.dtype))))
    return out
