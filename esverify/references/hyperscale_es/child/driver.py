"""Oracle driver for HyperscaleES (docs/hyperscale.md), run by path under an interpreter that has jax.

Two ways to run it. Parity's child (`driver.py --clone FOLDER --reply-fd N [--line-coverage]`): the
line protocol of the shared child server (docs/references.md §3), through the runtime's torch-free
channel (oracles/child_channel.py) but without the server itself: a hello
{"hello": "hyperscale-es", "environment", "modules", "placeholders"} on the reply pipe, then per command line
{"id", "op": "run", "ops": [...], "clone" (optional: switch to that clone first)} one reply
{"id", "status": "ok", "results": [...]} (or "error" with {"message"}), until "exit" or EOF. The
shared server imports torch and esverify's noise hook at its top, and every service it adds to the
channel (torch's gaussian hook, the stand-in model, tensor files) is torch's; a JAX reference needs
none of it, and its interpreter need not have torch. The reference's prints go to the log
(stdout), never to the reply pipe.

One-shot (the tests): `python driver.py` with one JSON request on stdin:
``{"clone": FOLDER, "ops": [{"op": ..., ...}, ...]}``; one JSON reply on stdout:
``{"environment": {...}, "results": [...]}``, exit 0. A non-empty list of such requests runs them in
turn in this one process, switching clones as the serve loop does (a mutant catalog's clones: jax's
import and its own compilations are paid once), and replies ``{"environment", "results": [[...], ...]}``,
one results list per request. A request that is not such an object (or list), a folder that is not a
clone, or an unknown op: one line on stderr, exit 2, before any op runs. Never imported by esverify
(the package never imports jax); floats travel as hex bit patterns.

The seam (docs/hyperscale.md §9): the package's own `__init__` imports a model stack the ES code does
not need, so this driver registers empty parent packages `hyperscalees` and `hyperscalees.models`
whose search path is the clone's folders, then imports `hyperscalees.noiser` and
`hyperscalees.models.common` unmodified. `environment` names what the bits depend on: jax and jaxlib
versions, XLA_FLAGS, whether the CPU has FMA, jax_threefry_partitionable.

Ops (each reply entry has "op", its outputs and "printed", the lines the reference printed to stdout):
- `shaping`: noiser, scores (f32 hex), group -> `shaped` (f32 hex), an eager `convert_fitnesses`.
- `noise`: noiser, seed, leaf, epoch, noise_reuse, thread, shape (d0, d1), rank, sigma, dtype -> the
  draws `jax.random.normal` returned inside one eager `do_mm` of that thread (each: key words, shape,
  dtype, bits), recorded by a wrapper that passes every call through.
- `perturb`: noiser, seed, epoch, noise_reuse, shape, w (f32 hex), sigma, dtype, threads, rank (matrix
  noisers), standard (true: `get_noisy_standard`), served (optional) -> `perturbed` (per thread, the
  dtype's hex, W's shape) and `draws`, the noisers' forward perturbation, eager.
- `update`: noiser, seed, epoch, noise_reuse, shape, w (f32 hex), scores (f32 hex), group, sigma, lr,
  rank, mode (jit/eager), dtype (f32/f16/bf16, default f32; w is cast to it) -> `w` (the dtype's hex) after init_noiser (sgd), convert_fitnesses, do_updates on a
  one-leaf tree {"w": W} with es_map MM_PARAM and keys from simple_es_tree_key. With `served` (a
  list of {key, shape, dtype, bits}), `jax.random.normal` is replaced for the call by a host callback
  that returns the entry of the key it is given and raises for a key it cannot attribute: the
  runner's noise inside the reference's jitted, vmapped update.
- `forward`, `probe`, `noiser-update` (child/hyperscale_noisers.py): any noiser's perturbed parameter
  per thread (`do_mm` of the identity or of each basis vector) with the normal and uniform draws behind
  it; the evidence of the sparse and EggRollBS findings (a batch `do_mm`, shaping and update failures);
  an update with init_noiser's options as given (the sparse noiser takes no rank).
- `loop-e2e` (child/hyperscale_e2e.py): the clone's tests/end_to_end_test.py, run unmodified with a
  scratch HF_HOME, each jitted update recorded (params before and after, shaped fitnesses, leaf keys,
  es_map codes), the compilation-cache files it wrote and whether thread 0's perturbation repeats.
- `update-tree` (child/hyperscale_trees.py): several leaves (es_map codes, scanned leaves), sgd or adamw,
  one or more steps -> `w` per leaf (f32 hex), adamw's moments and count, the leaf keys.
"""
from __future__ import annotations

import contextlib
import importlib
import io
import json
import os
import sys
import types
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

# every row models XLA's CPU arithmetic: a CUDA jaxlib (or a JAX_PLATFORMS the user set) must not move it
jax.config.update("jax_platforms", "cpu")

if str(Path(__file__).resolve().parent) not in sys.path:   # run by runpy.run_path: find the siblings below
    sys.path.insert(0, str(Path(__file__).resolve().parent))

import hyperscale_clone  # noqa: E402 - what the driver reads of a clone, said when a later commit lacks it
from hyperscale_bits import DTYPES, f32_of, hex_bits  # the floats' hex encoding, shared with the op modules
import hyperscale_e2e  # the end-to-end test's op: its sibling in the child folder
import hyperscale_trees  # the tree-update op: its sibling in the child folder
import hyperscale_noisers  # the sparse, AltEggRoll and EggRollBS ops: a sibling in the child folder


def _load(clone: Path):
    hyperscale_clone.check_files(clone)
    hyperscale_clone.watch(clone)   # a later commit's absent optional imports cost no row (placeholders)
    src = clone / "src" / "hyperscalees"
    for name, folder in (("hyperscalees", src), ("hyperscalees.models", src / "models")):
        if name not in sys.modules:
            mod = types.ModuleType(name)
            mod.__path__ = [str(folder)]
            sys.modules[name] = mod
    loaded = importlib.import_module("hyperscalees.noiser"), importlib.import_module("hyperscalees.models.common")
    hyperscale_clone.check_loaded(*loaded)
    return loaded


def _environment() -> dict:
    import jaxlib
    flags = ""
    try:
        flags = next((line for line in Path("/proc/cpuinfo").read_text().splitlines() if line.startswith("flags")), "")
    except OSError:
        pass
    return {"jax": jax.__version__, "jaxlib": jaxlib.__version__, "XLA_FLAGS": os.environ.get("XLA_FLAGS", ""),
            "cpu_fma": " fma" in f" {flags.partition(':')[2]} ",
            "threefry_partitionable": bool(jax.config.jax_threefry_partitionable),
            # the LLM loop's generation builder calls jax.lax.pvary, removed in jax 0.10 (docs/hyperscale.md §10)
            "lax_pvary": hasattr(jax.lax, "pvary"), "platform": jax.default_backend()}


def _shaping(noisers, common, op):
    cls = hyperscale_clone.noiser(noisers, op["noiser"])
    scores = f32_of(op["scores"])
    frozen, dyn = hyperscale_clone.init(cls, {"w": jnp.zeros((1, 1))}, 0.1, 0.1, group_size=op["group"])
    return {"shaped": hex_bits(cls.convert_fitnesses(frozen, dyn, jnp.asarray(scores)))}


def _noise(noisers, common, op):
    cls = hyperscale_clone.noiser(noisers, op["noiser"])
    d0, d1 = op["shape"]
    param = jnp.zeros((d0, d1), DTYPES[op["dtype"]])
    frozen, dyn = hyperscale_clone.init(cls, {"w": param}, op["sigma"], 0.1, noise_reuse=op["noise_reuse"],
                                        rank=op["rank"])
    keys = common.simple_es_tree_key({"w": param}, jax.random.PRNGKey(op["seed"]), {"w": ()})
    seen, real = [], jax.random.normal

    def recording(key, shape=(), dtype=jnp.float32, *args, **kw):
        out = real(key, shape, dtype, *args, **kw)
        seen.append({"key": [int(w) for w in np.asarray(jax.random.key_data(key)).ravel()],
                     "shape": list(shape), "dtype": str(jnp.dtype(dtype)), "bits": hex_bits(out)})
        return out

    jax.random.normal = recording
    try:
        cls.do_mm(frozen, dyn, param, keys["w"], (op["epoch"], op["thread"]), jnp.ones((1, d1), param.dtype))
    finally:
        jax.random.normal = real
    return {"draws": seen}


def _update(noisers, common, op):
    cls = hyperscale_clone.noiser(noisers, op["noiser"])
    d0, d1 = op["shape"]
    params = {"w": jnp.asarray(f32_of(op["w"]).reshape(d0, d1)).astype(DTYPES[op.get("dtype", "f32")])}
    frozen, dyn = hyperscale_clone.init(cls, params, op["sigma"], op["lr"], noise_reuse=op["noise_reuse"],
                                        rank=op["rank"], group_size=op["group"])
    keys = common.simple_es_tree_key(params, jax.random.PRNGKey(op["seed"]), {"w": ()})
    es_map = {"w": common.MM_PARAM}
    fit = cls.convert_fitnesses(frozen, dyn, jnp.asarray(f32_of(op["scores"])))
    n = fit.shape[0]
    iterinfos = (jnp.full((n,), op["epoch"], jnp.int32), jnp.arange(n, dtype=jnp.int32))

    def step(dyn, params, fit, iterinfos):
        return cls.do_updates(frozen, dyn, params, keys, fit, iterinfos, es_map)

    real = jax.random.normal
    if op.get("served"):
        jax.random.normal = _served_normal(op["served"])
    try:
        _, new = (jax.jit(step) if op["mode"] == "jit" else step)(dyn, params, fit, iterinfos)
        new["w"].block_until_ready()
    finally:
        jax.random.normal = real
    return {"w": hex_bits(new["w"])}


def _served_normal(served: list):
    """A stand-in for jax.random.normal that serves the runner's noise by key, through a host callback
    (so it works inside jit and vmap); a key the runner did not name raises, naming the key."""
    table = {}
    for entry in served:
        dtype = jnp.dtype(DTYPES[entry["dtype"]])
        raw = np.array([int(h, 16) for h in entry["bits"]], dtype={4: np.uint32, 2: np.uint16}[dtype.itemsize])
        table[tuple(entry["key"])] = raw.view(dtype).reshape(entry["shape"])

    def normal(key, shape=(), dtype=jnp.float32, *args, **kw):
        shape, dtype = tuple(shape), jnp.dtype(dtype)

        def host(words):
            k = tuple(int(w) for w in np.asarray(words).ravel())
            if k not in table:
                raise LookupError(f"served noise: key {list(k)} is not one the runner can attribute")
            got = table[k]
            if got.shape != shape or got.dtype != dtype:
                raise ValueError(f"served noise: key {list(k)} holds {got.dtype}{got.shape}, asked {dtype}{shape}")
            return got

        return jax.pure_callback(host, jax.ShapeDtypeStruct(shape, dtype), jax.random.key_data(key),
                                 vmap_method="sequential")

    return normal


def _perturb(noisers, common, op):
    """Each thread's perturbed parameter, eager, as the noiser's forward pass sees it: `do_mm` of the
    identity (x·Wᵀ + (x·B)·Aᵀ, transposed back to W's shape) for a matrix noiser, `get_noisy_standard`
    for `"standard": true`; and the draws `jax.random.normal` returned (served ones when `served`)."""
    cls = hyperscale_clone.noiser(noisers, op["noiser"])
    d0, d1 = op["shape"]
    dtype = DTYPES[op["dtype"]]
    param = jnp.asarray(f32_of(op["w"]).reshape(d0, d1)).astype(dtype)
    frozen, dyn = hyperscale_clone.init(cls, {"w": param}, op["sigma"], 0.1, noise_reuse=op["noise_reuse"],
                                        **({"rank": op["rank"]} if "rank" in op else {}))
    keys = common.simple_es_tree_key({"w": param}, jax.random.PRNGKey(op["seed"]), {"w": ()})
    seen, real = [], jax.random.normal
    inner = _served_normal(op["served"]) if op.get("served") else real

    def recording(key, shape=(), dtype=jnp.float32, *args, **kw):
        out = inner(key, shape, dtype, *args, **kw)
        seen.append({"key": [int(w) for w in np.asarray(jax.random.key_data(key)).ravel()],
                     "shape": list(shape), "dtype": str(jnp.dtype(dtype)), "bits": hex_bits(out)})
        return out

    outs = []
    jax.random.normal = recording
    try:
        for t in op["threads"]:
            if op.get("standard"):
                out = cls.get_noisy_standard(frozen, dyn, param, keys["w"], (op["epoch"], t))
            else:
                out = cls.do_mm(frozen, dyn, param, keys["w"], (op["epoch"], t), jnp.eye(d1, dtype=dtype)).T
            outs.append(hex_bits(out))
    finally:
        jax.random.normal = real
    return {"perturbed": outs, "draws": seen}


OPS = {"shaping": _shaping, "noise": _noise, "update": _update, "perturb": _perturb,
       "loop-e2e": lambda noisers, common, op: hyperscale_e2e.run_end_to_end(noisers, common, op),
       "update-tree": lambda noisers, common, op: hyperscale_trees.run_update_tree(noisers, common, op,
                                                                                  _served_normal),
       "forward": lambda noisers, common, op: hyperscale_noisers.run_forward(noisers, common, op, _served_normal),
       "probe": hyperscale_noisers.run_probe,
       "noiser-update": lambda noisers, common, op: hyperscale_noisers.run_update(noisers, common, op,
                                                                                  _served_normal)}


def _one_line(exc: BaseException) -> str:
    """"Type: message" of an op's exception, on one line for the row's detail. An exception raised in a host
    callback (the served noise's refusal of a key or a dtype) reaches the op as jax's runtime error, whose
    message holds the callback's whole traceback: only its last line, the callback's own exception, is kept
    (the reply's "traceback" keeps the rest)."""
    text = str(exc)
    if "Traceback (most recent call last):" in text:
        text = [line for line in text.splitlines() if line.strip()][-1].strip()
    return f"{type(exc).__name__}: {text}"


def _fail(message: str) -> int:
    print(f"hyperscale-es driver: {message}", file=sys.stderr)
    return 2


def _run_ops(noisers, common, ops) -> list:
    results = []
    for op in ops:
        printed = io.StringIO()           # the reference prints at trace time; the reply owns stdout
        with contextlib.redirect_stdout(printed):
            out = OPS[op["op"]](noisers, common, op)
        results.append({"op": op["op"], **out, "printed": printed.getvalue().splitlines()})
    return results


def _bad_ops(ops) -> str:
    if not isinstance(ops, list):
        return "'ops' is not a list"
    for op in ops:
        if not isinstance(op, dict) or op.get("op") not in OPS:
            return f"unknown op {op.get('op') if isinstance(op, dict) else op!r}; known: {sorted(OPS)}"
    return ""


def _forget(clone: Path) -> None:
    """Unload `clone`'s modules so that the next `_load` imports another clone's files afresh (its jitted
    functions are new objects, traced and compiled again; jax's own compilations stay cached)."""
    hyperscale_clone.unwatch(clone)
    for name in [m for m in sys.modules if m == "hyperscalees" or m.startswith("hyperscalees.")]:
        del sys.modules[name]


def _loaded(clone: Path) -> tuple:
    """((noiser package, models.common), None) of the clone at `clone`, or (None, {"kind", "message"})."""
    if not (clone / "src" / "hyperscalees" / "noiser").is_dir():
        return None, {"kind": "missing", "message": f"{clone} has no src/hyperscalees/noiser folder"}
    try:
        return _load(clone), None
    except hyperscale_clone.NotDriven as exc:   # ours to say, not the reference's
        return None, {"kind": "interface", "message": str(exc)}
    except Exception as exc:  # noqa: BLE001 - a clone that does not import is a row error, said once
        return None, {"kind": type(exc).__name__,
                      "message": f"importing hyperscalees.noiser raised {type(exc).__name__}: {exc}"}


def serve(argv) -> int:
    """Parity's child: the line protocol (module docstring) on the reply pipe `--reply-fd`, through the shared
    runtime's torch-free channel (oracles/child_channel.py, beside this file in the child)."""
    import traceback

    import child_channel
    args = child_channel.arguments(argv)   # --line-coverage accepted: JAX rows record no lines
    reply = child_channel.reply_pipe(args.reply_fd)
    clone = Path(args.clone).resolve()
    loaded, problem = _loaded(clone)
    modules = {"noiser": problem, "common": problem}
    reply.write(json.dumps({"hello": "hyperscale-es", "environment": _environment(), "modules": modules,
                            "placeholders": hyperscale_clone.served()}) + "\n")

    def respond(command: dict, answer: dict) -> None:
        nonlocal clone, loaded, problem
        if command.get("clone") and Path(command["clone"]).resolve() != clone:   # a mutant catalog's next clone
            _forget(clone)
            clone = Path(command["clone"]).resolve()
            loaded, problem = _loaded(clone)
        bad = "" if command.get("op") == "run" else f"unknown command {command.get('op')!r}; known: run"
        bad = bad or _bad_ops(command.get("ops"))
        if bad or loaded is None:
            answer.update(status="error", error={"kind": "interface" if bad else problem["kind"],
                                                 "message": bad or problem["message"]})
        else:
            try:
                answer.update(status="ok", results=_run_ops(*loaded, command["ops"]))
            except Exception as exc:  # noqa: BLE001 - a reference failure is a row, not a crash
                said = exc if isinstance(exc, hyperscale_clone.NotDriven) else \
                    hyperscale_clone.explain(exc, loaded[0], command["ops"])   # a sibling op's read too
                error = {"kind": "interface", "message": str(said)} if said is not None else {
                    "kind": type(exc).__name__, "message": _one_line(exc),
                    "traceback": "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))[-4000:]}
                answer.update(status="error", error=error)
        if hyperscale_clone.served():   # every one so far: the parent lists each once, as a note
            answer["placeholders"] = hyperscale_clone.served()

    child_channel.answer_commands(reply, respond)
    return 0


def main() -> int:
    if "--reply-fd" in sys.argv[1:]:
        return serve(sys.argv[1:])
    try:
        request = json.load(sys.stdin)
        requests = request if isinstance(request, list) and request else [request]
        clones = [Path(one["clone"]) for one in requests]
    except (ValueError, KeyError, TypeError) as exc:
        return _fail(f"the request is not a JSON object (or a non-empty list of them) with a 'clone' folder "
                     f"and 'ops' ({exc})")
    for clone, one in zip(clones, requests):
        if not (clone / "src" / "hyperscalees" / "noiser").is_dir():
            return _fail(f"{clone} is not a HyperscaleES clone: it has no src/hyperscalees/noiser folder")
        bad = _bad_ops(one.get("ops"))
        if bad:
            return _fail(bad)
    results, current, loaded = [], None, None
    for clone, one in zip(clones, requests):
        if clone.resolve() != current:   # the next clone (the same one's modules stay loaded)
            if current is not None:
                _forget(current)
            current = clone.resolve()
            try:
                loaded = _load(current)
            except hyperscale_clone.NotDriven as exc:
                return _fail(str(exc))
        results.append(_run_ops(*loaded, one["ops"]))
    json.dump({"environment": _environment(), "results": results if isinstance(request, list) else results[0]},
              sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
