"""Oracle driver for EGGROLL's transformer trainer (eggroll-vllm, docs/references.md), run by path in the child.

Usage (by the runner only): `python driver.py --clone FOLDER --reply-fd N`; esverify's tests call
`run(case, clone)` in-process. One op, `eggroll-main`: the clone's entry script (`case["file"]`, default
`es_lora_multinode.py`) imported under its own module name, `Args(**case["args"])` built by keyword,
the module globals `args` and `LORA_POPULATION_PATH` (a scratch folder under the row's `out`, never
/dev/shm) set, then `main(args)`: the way a user's parsed command line reaches it. The seams (Ray, vLLM,
peft, transformers, accelerate, tyro, wandb, weave, `tasks`) are eggroll_stubs' stand-in modules, put in
`sys.modules` for the run only (the previous entries, sys.path, the loop stand-ins' finder, the hook,
sys.argv, the environment, the SIGINT/SIGTERM handlers and the global generators of Python, numpy and
torch are all put back afterwards, also when the reference raised).

Noise: `native` leaves torch alone (the reference draws torch's CPU generator as published).
`contract` intercepts torch.normal / torch.randn on the CPU generator the reference seeds: a generator
seeded `id` stands for (s, k, l) decoded from id - base_seed = P·L·s + L·k + l (P = N/2 pairs, L
targeted weights; an id that decodes outside the run is refused with NoiseAttributionError), and it is
the contract stream lowrank_stream_seed(seed, s, P, L, k, l) read as a stream (docs/references.md §3a
semantics, child_server's hook): the first draw returns elements [0, n1), the next continues at n1
(so a = [0, r·in), b = [r·in, r·in + out·r)), a reseed rewinds.

The case (JSON; every key but `out` optional):
- `out`: the row's folder (replies' files, the scratch folder with the adapters and checkpoints);
- `file`: the entry script (default `es_lora_multinode.py`; `es_lora_multinode_moe.py` too);
- `args`: Args keywords; the driver adds model_name "esverify/tiny-qwen2", task "zeros", verbose and
  use_wandb False, checkpoint_dir <out>/scratch/checkpoints and prompt_batch_size len(targets) unless
  given (`resume_from`: a checkpoint folder);
- `engines` (1): Ray's GPU count, hence the engine count at tensor parallel size 1;
- `dtype` ("f32", "f16", "bf16"); `model` (TINY's keys: layers, hidden, intermediate, heads,
  kv_heads, head_dim, vocab); the initial weights: `set` (a child_server parameter set whose names
  are vllm_layout's), or `fill` (every element), or `init_seed` / `init_std` (default 0 / 0.02: per
  tensor k of vllm_layout, torch.randn(shape, generator=Generator().manual_seed(init_seed + k)) in f32
  times init_std, then rounded to dtype; written to no file: the parent makes the same tensors or
  passes a `set`);
- `targets` (default 0.5, -0.25, ... one per prompt): prompt j is "prompt j <target=t_j>";
- `extra_tensors` (false): the engine also holds tensors that are never targets (embeddings, norms);
- `vllm_distributed` (true): vllm.distributed present (absent: init_inter_engine_group raises);
  `vllm_shapes` ({vLLM name: shape} overrides, e.g. a wider tensor whose add fails);
- `scripted_rewards` (per es_step an N x P matrix): the engines answer these instead of computing
  them (a unit check of the loop's shaping through `main`);
- `noise` ("native" default, or "contract"), `seed` (the contract u64 run seed, int or hex string;
  default base_seed), `mapping` ("poly32"), `backend`.
The op `eggroll-update` (run_update) takes `fitnesses`, `es_step`, `args` and the model keys above.

The engine's reward of member m's request with target t (eggroll_stubs.perturbed and reward): every
vLLM tensor widened to f64; on each targeted slice the f64 value of B·A in the adapter file's dtype
(eggroll_stubs.lowrank_product: from f64 zeros, the r outer products added in j order, one rounding to
that dtype; f16 for the reference's own files) added once; reward = -fsum((w - t)**2) over every element of every tensor
((w - t) and its square rounded to f64, one exactly rounded sum). No alpha / r scaling.

The reply (JSON; tensors as raw bit patterns in .npz files written by child_server.save_results, f64
and f32 scalars as `float.hex` strings, exact):
- `results`: engine 0's tensors after the run (`tape.names` order);
- `tape.steps`: one record per es_step the loop ran: `es_step`, `rewards` (N rows of P hex f64: the
  reward each member's request got, member-major, as the engine computed it; `reward_members` the
  rows' members), `members` (per member: engine, lora_name, lora_int_id, folder, adapter_config, the
  adapter's `ba_sha256` = SHA-256 of the B·A f16 bits per weight, concatenated in peft order, and
  `factors_sha256` of the A and B bits, A then B per weight), `adapters` (an .npz in
  esverify.references.eggroll.tape_arrays' layout: `m<m>.l<l>.A|B|BA` as uint16 bit patterns), `update`
  (`fitnesses`: the shaped fitnesses engine 0's apply_lora_es_update received, hex f64;
  `pair_differences`: f32(f[2k] - f[2k+1]) as hex; `targets` the peft names and shapes it was given;
  `returned` per engine; `engine0`: an .npz of engine 0 right after the update), `engines_after`
  (.npz of every engine, engine-major, after the step's synchronisation) and `engines_identical`;
- `tape.evals`: rewards of unadapted requests (the math tasks' evaluation), each with the number of
  updates before it;
- `tape.updates`: the number of apply_lora_es_update calls that returned True on engine 0
  (`update_calls`: all calls);
- `tape.names`, `dtype`, `model`, `targets`, `args` (the Args as main left them);
- `tape.calls`, `tape.llm_kwargs`, `tape.checkpoints`, `tape.lora_folders`, `tape.failed_adds`
  (the reference's "ERROR updating" lines), `tape.draws` (contract noise: draws, unexpected ones in
  call order), `tape.seeds_after` (torch's and numpy's global seeds as main left them, before they
  are put back), `tape.at_import` (the module globals as the import bound them: EXPERIMENT_DIR,
  LORA_POPULATION_PATH, LORA_TARGET_MODULES) and `tape.static` (static_findings: the documented
  defects with their lines);
- `attribution` ({"ok", "calls"}: false when the contract draw audit found unexpected draws) and
  `settings` (torch's determinism switches and threads).
A reference failure raises DriverError, whose `info` (kind, file, line, function, code,
updates_before) the child server puts in the error reply.
Never imported by esverify.
"""
from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib
import io
import json
import math
import shutil
import sys
import traceback
from pathlib import Path

import numpy as np
import torch

import child_server
import eggroll_stubs as stubs
from child_server import HOOK, NoiseAttributionError, load_set, save_results, serve, tensor_bits
from loop_seams import Seams

# the contract area's own stream seed (at(seed ^ "es_lowrk", (s·P + k)·L + l), u64 wrapping): one spelling for
# both sides
from esverify.references.eggroll.contract import LOWRANK_DOMAIN, lowrank_stream_seed  # noqa: E402,F401
from esverify.references.eggroll import tape_arrays  # noqa: E402
DTYPES = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}
#: the tiny model of the golden values: hidden 4, intermediate 6, 2 heads, 1 KV head, head dim 2, 1 layer
TINY = {"layers": 1, "hidden": 4, "intermediate": 6, "heads": 2, "kv_heads": 1, "head_dim": 2, "vocab": 8}
DEFAULT_TARGETS = (0.5, -0.25, 0.125, 1.0)
#: worker methods that synchronise the engines after an update (the step's weights settle after them)
SYNC = ("apply_lora_es_update", "broadcast_all_weights", "get_model_state_dict", "set_model_state_dict")




def decode_stream_id(stream_id: int, base_seed: int, P: int, L: int, generations: int) -> tuple:
    """(s, k, l) with stream_id - base_seed = P·L·s + L·k + l, 0 <= l < L, 0 <= k < P, 0 <= s < generations;
    NoiseAttributionError for an id outside the run."""
    offset = int(stream_id) - int(base_seed)
    s, rest = divmod(offset, P * L) if offset >= 0 else (-1, 0)
    k, l = divmod(rest, L)
    if offset < 0 or s >= generations:
        raise NoiseAttributionError(
            f"torch.normal drew from a generator seeded {stream_id}, which is no (generation, pair, weight) of "
            f"this run (base_seed {base_seed}, {P} pairs, {L} weights, {generations} generations): contract "
            "noise cannot stand in for it, and torch's own noise is never let in")
    return s, k, l


def _hex(values) -> list:
    return [float(v).hex() for v in np.asarray(values, dtype=np.float64).reshape(-1)]


def _sha(tensors) -> str:
    digest = hashlib.sha256()
    for t in tensors:
        digest.update(tensor_bits(t).tobytes())
    return digest.hexdigest()


class DriverError(RuntimeError):
    """The reference raised or could not be driven: `info` names its line and what the driver saw."""

    def __init__(self, info: dict):
        super().__init__(info["message"])
        self.info = info


class _Tee(io.TextIOBase):
    def __init__(self, stream):
        self.stream, self.lines = stream, []
        self._part = ""

    def write(self, text):
        self.stream.write(text)
        self._part += text
        *done, self._part = self._part.split("\n")
        self.lines += done
        return len(text)

    def flush(self):
        self.stream.flush()


class Row:
    """What the stand-ins of one run share, and the tape they write (see the module docstring)."""

    def __init__(self, case: dict, out: Path):
        self.case, self.out = case, out
        self.dtype = DTYPES[case.get("dtype", "f32")]
        self.model_config = dict(case.get("model") or TINY)
        # `vllm_shapes`: {vLLM name: shape} overrides (a tensor of another width: the reference's failing add)
        overrides = {k: tuple(v) for k, v in (case.get("vllm_shapes") or {}).items()}
        layout = [(n, overrides.get(n, s))
                  for n, s in stubs.vllm_layout(self.model_config, bool(case.get("extra_tensors", False)))]
        self.names = [n for n, _ in layout]
        self.initial = self._initial(layout)
        args = case.get("args") or {}
        self.targets = [float(t) for t in case.get("targets") or
                        DEFAULT_TARGETS[:int(args.get("prompt_batch_size", 2))]]
        self.engines_asked = int(case.get("engines", 1))
        self.vllm_distributed = bool(case.get("vllm_distributed", True))
        self.calls: list = []
        self.llm_kwargs: list = []
        self.engine_objects: list = []
        self.steps: dict = {}
        self.updates = 0
        self.pending = None
        self.update_calls = 0
        self.evals: list = []
        #: per es_step an N x P matrix of rewards the engines answer instead of computing them (optional)
        self.scripted = case.get("scripted_rewards")

    def _initial(self, layout):
        if self.case.get("set"):
            names, tensors = load_set(self.case["set"], "cpu")
            if names != self.names or any(tuple(t.shape) != s for t, (_, s) in zip(tensors, layout)):
                raise ValueError(f"the case's parameter set has names {names[:3]} ...; the stand-in engine of this "
                                 f"model config needs {self.names[:3]} ... with the shapes of vllm_layout")
            return [t.to(self.dtype) for t in tensors]
        if "fill" in self.case:
            return [torch.full(s, float(self.case["fill"]), dtype=self.dtype) for _, s in layout]
        seed, std = int(self.case.get("init_seed", 0)), float(self.case.get("init_std", 0.02))
        out = []
        for k, (_, s) in enumerate(layout):   # torch's own generator, never the hook's
            g = torch.Generator().manual_seed(seed + k)
            out.append((child_server.ORIGINALS["randn"](s, generator=g) * std).to(self.dtype))
        return out

    # -- the step records
    def step(self, es_step: int) -> dict:
        if es_step not in self.steps:
            self.steps[es_step] = {"es_step": es_step, "rewards": {}, "members": {}, "update": None,
                                   "adapter_arrays": {}}
        return self.steps[es_step]

    def before_call(self, owner, name, args, kwargs):
        if name != "collective_rpc" or (args and args[0] not in SYNC):
            self.settle()
        self.calls.append([f"engine {getattr(owner, 'esverify_index', '?')}", name] +
                          ([args[0]] if name == "collective_rpc" and args else []))

    def before_rpc(self, engine, method, args):
        if method == "apply_lora_es_update":
            fitnesses = np.asarray(args[0], dtype=np.float64).reshape(-1)
            diffs = torch.from_numpy(fitnesses[0::2] - fitnesses[1::2]).to(torch.float32)
            es_step = int(args[2])
            record = self.step(es_step)
            if record["update"] is None:
                record["update"] = {"es_step": es_step, "fitnesses": _hex(fitnesses),
                                    "pair_differences": _hex(diffs.double().numpy()),
                                    "targets": [[n, list(s)] for n, s in dict(args[1]).items()], "returned": []}
            self.update_calls += 1

    def after_rpc(self, engine, method, args, result):
        if method != "apply_lora_es_update":
            return
        record = self.step(int(args[2]))["update"]
        record["returned"].append([engine.esverify_index, result if isinstance(result, bool) else repr(result)])
        if engine.esverify_index == 0 and result is True:
            self.updates += 1
            path = self.out / f"theirs-update-{int(args[2]):03d}-engine0.npz"
            save_results(path, engine.esverify_tensors)
            record["engine0"] = str(path)
            self.pending = int(args[2])

    def settle(self):
        """After a step's synchronisation: every engine's weights, once."""
        if self.pending is None:
            return
        es_step, self.pending = self.pending, None
        tensors = [t for e in self.engine_objects for t in e.esverify_tensors]
        path = self.out / f"theirs-step-{es_step:03d}-engines.npz"
        save_results(path, tensors)
        record = self.step(es_step)
        record["engines_after"] = str(path)
        first = [tensor_bits(t) for t in self.engine_objects[0].esverify_tensors]
        record["engines_identical"] = all(
            all(np.array_equal(a, tensor_bits(b)) for a, b in zip(first, e.esverify_tensors))
            for e in self.engine_objects[1:])

    def generate(self, engine, prompts, sampling_params, lora_request):
        prompts = [prompts] if isinstance(prompts, str) else list(prompts)
        n = int(getattr(sampling_params, "n", 1) or 1)
        requests = lora_request if isinstance(lora_request, (list, tuple)) else [lora_request] * len(prompts)
        base = dict(zip(self.names, engine.esverify_tensors))
        cache: dict = {}
        values = []
        for prompt, request in zip(prompts, requests):
            target = stubs.parse_target(prompt)
            if request is None:
                value = stubs.reward({k: v.detach().to(torch.float64) for k, v in base.items()}, target)
                self.evals.append({"after_updates": self.updates, "reward": float(value).hex()})
                values.append(value)
                continue
            path = str(request.lora_path)
            if path not in cache:
                cache[path] = self._member(engine, request, base)
            weights, member, es_step = cache[path]
            if self.scripted is not None:     # rewards given by the case: the shaping's unit check
                value = float(self.scripted[es_step][member][len(self.step(es_step)["rewards"].get(member, []))])
            else:
                value = stubs.reward(weights, target)
            self.step(es_step)["rewards"].setdefault(member, []).append(float(value).hex())
            values.append(value)
        return stubs.request_outputs(prompts, values, n)

    def _member(self, engine, request, base):
        adapter, config = stubs.read_adapter(request.lora_path)
        name = str(request.lora_name)
        member = int(name.rsplit("_", 1)[-1]) if name.rsplit("_", 1)[-1].isdigit() else int(
            Path(request.lora_path).name.rsplit("_", 1)[-1])
        es_step = (int(request.lora_int_id) - 1 - member) // 10000
        record = self.step(es_step)
        if member not in record["members"]:
            factors, products = [], []
            for l, (peft, _) in enumerate(stubs.peft_shapes(self.model_config)):
                module = peft[:-len(".base_layer.weight")]
                a, b = adapter.get(f"{module}.lora_A.weight"), adapter.get(f"{module}.lora_B.weight")
                if a is None or b is None:
                    break
                ba = stubs.lowrank_product(a, b)
                factors += [a, b]
                products.append(ba)
                for key, t in (("A", a), ("B", b), ("BA", ba)):
                    record["adapter_arrays"][f"m{member}.l{l}.{key}"] = tensor_bits(t)
            record["members"][member] = {
                "member": member, "engine": engine.esverify_index, "lora_name": name,
                "lora_int_id": int(request.lora_int_id), "folder": Path(request.lora_path).name,
                "ba_sha256": _sha(products), "factors_sha256": _sha(factors),
                "adapter_config": config}
        return stubs.perturbed(base, adapter, self.model_config), member, es_step

    # -- the reply
    def finish(self, final_engine) -> dict:
        self.settle()
        steps = []
        for es_step in sorted(self.steps):
            record = dict(self.steps[es_step])
            arrays = record.pop("adapter_arrays")
            if arrays:
                path = self.out / f"theirs-step-{es_step:03d}-adapters.npz"
                tape_arrays.write(path, arrays)
                record["adapters"] = str(path)
            rows = record["rewards"]
            record["rewards"] = [rows[m] for m in sorted(rows)]
            record["reward_members"] = sorted(rows)
            record["members"] = [record["members"][m] for m in sorted(record["members"])]
            steps.append(record)
        final = self.out / "theirs-final.npz"
        save_results(final, final_engine.esverify_tensors)
        return {"results": str(final), "steps": steps}


def static_findings(clone: Path, rel: str = "es_lora_multinode.py") -> dict:
    """What the clone's source shows without running it (ast; nothing imported), each with its line, for the
    parent's findings: `tasks_unresolved_imports` (top-level imports of tasks.py that neither the clone nor
    this interpreter has, e.g. egg_img), `three_argument_get_fitness` (tasks.py classes whose get_fitness
    takes fewer positional parameters than the loop's four-argument call), `dev_shm` (module-level lines
    of `rel` naming /dev/shm) and `skipped_add` (lines of `rel` printing "ERROR updating"). The sources are
    parsed once per text (_parsed: every row of a clone reads the same two files; 25 ms a row); whether an
    import resolves is looked up each time (the clone's files and this interpreter's packages decide)."""
    import importlib.util
    tasks, trainer = clone / "tasks.py", clone / rel
    imports, get_fitness, dev_shm, skipped_add = _parsed(
        tasks.read_text(encoding="utf-8") if tasks.is_file() else None,
        trainer.read_text(encoding="utf-8") if trainer.is_file() else None)
    out = {"tasks_unresolved_imports": [], "three_argument_get_fitness": [dict(f, params=list(f["params"]))
                                                                           for f in get_fitness],
           "dev_shm": [dict(d) for d in dev_shm], "skipped_add": [dict(a) for a in skipped_add]}
    for name, line in imports:
        top = name.split(".")[0]
        local = (clone / f"{top}.py").is_file() or (clone / top).is_dir()
        try:
            found = local or importlib.util.find_spec(top) is not None
        except (ImportError, ValueError):
            found = False
        if top and not found:
            out["tasks_unresolved_imports"].append({"module": name, "line": line})
    return out


@functools.lru_cache(maxsize=16)
def _parsed(tasks_text: str | None, trainer_text: str | None) -> tuple:
    """static_findings' AST part of the two sources (None: the file is absent): ((import name, line) of
    tasks.py's top-level imports, its short get_fitness methods, `rel`'s /dev/shm lines and "ERROR
    updating" prints), as tuples; static_findings copies the dicts it hands out."""
    import ast

    def tree_of(text):
        try:
            return ast.parse(text) if text is not None else None
        except SyntaxError:
            return None
    imports, get_fitness, dev_shm, skipped_add = [], [], [], []
    tree = tree_of(tasks_text)
    for node in tree.body if tree else []:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            imports += [(name, node.lineno) for name in names]
        if isinstance(node, ast.ClassDef):
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and item.name == "get_fitness":
                    params = [a.arg for a in item.args.args][1:]
                    if len(params) < 4:
                        get_fitness.append({"class": node.name, "line": item.lineno, "params": tuple(params)})
    tree = tree_of(trainer_text)
    for node in tree.body if tree else []:
        if isinstance(node, ast.Assign) and "/dev/shm" in ast.unparse(node):
            dev_shm.append({"line": node.lineno, "code": ast.unparse(node)[:160]})
    for node in ast.walk(tree) if tree else []:
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "print"
                and "ERROR updating" in ast.unparse(node)):
            skipped_add.append({"line": node.lineno})
    return tuple(imports), tuple(get_fitness), tuple(dev_shm), tuple(skipped_add)


def _where(exc: BaseException, clone: Path) -> dict:
    frames = [f for f in traceback.extract_tb(exc.__traceback__)
              if Path(f.filename).resolve().is_relative_to(clone)]
    if not frames:
        return {}
    f = frames[-1]
    return {"file": Path(f.filename).resolve().relative_to(clone).as_posix(), "line": f.lineno,
            "function": f.name, "code": (f.line or "").strip()}


@contextlib.contextmanager
def _noise(case, resolve):
    """contract: the hook installed with the low-rank resolver; native: torch's own functions."""
    installed = torch.randn is HOOK
    if case.get("noise", "native") == "contract":
        if not installed:
            child_server.install_hook()
        HOOK.configure(None, {}, "correlated", case.get("mapping", "poly32"), case.get("backend"), "contract",
                       resolver=resolve)
        try:
            yield
        finally:
            if not installed:
                child_server.uninstall_hook()
    elif case.get("noise", "native") == "native":
        if installed:
            child_server.uninstall_hook()
        try:
            yield
        finally:
            if installed:
                child_server.install_hook()
    else:
        raise ValueError(f"noise must be 'contract' or 'native', got {case.get('noise')!r}")


def _resolver(case, args):
    N = int(args.population_size)
    P = N // 2
    L = len(stubs.peft_shapes(dict(case.get("model") or TINY)))
    generations = max(1, -(-int(args.num_iterations) // int(args.steps_per_adapter)))
    seed = case.get("seed", args.base_seed)
    seed = int(seed, 16) if isinstance(seed, str) else int(seed)

    def resolve(handle):
        s, k, l = decode_stream_id(handle, args.base_seed, P, L, generations)
        return lowrank_stream_seed(seed, s, P, L, k, l), 0
    return resolve, (P, L)


def _draw_findings(draws, case, args, dims) -> dict:
    """The draws in call order, per id: a at position 0 with r·in elements, then b continuing at r·in with
    out·r elements; anything else (a restarted b, a reused generator, other sizes) is `unexpected`."""
    shapes = stubs.peft_shapes(dict(case.get("model") or TINY))
    P, L = dims
    r = int(args.lora_r)
    odd = []
    expecting_b: dict = {}
    for handle, _, position, numel in draws:
        offset = int(handle) - int(args.base_seed)
        l = offset % L if offset >= 0 else 0
        out_dim, in_dim = shapes[l][1]
        if expecting_b.get(handle):
            ok = (position, numel) == (r * in_dim, out_dim * r)
            expecting_b[handle] = False
        else:
            ok = (position, numel) == (0, r * in_dim)
            expecting_b[handle] = ok
        if not ok:
            odd.append({"id": int(handle), "weight": l, "position": int(position), "elements": int(numel)})
    return {"draws": len(draws), "unexpected": odd[:8], "unexpected_count": len(odd)}


@contextlib.contextmanager
def imported(clone: Path, rel: str, row: "Row", tee=None):
    """The clone's entry script `rel` imported under its own module name with the row's stand-in modules in
    sys.modules (and the clone on sys.path, the loop stand-ins' finder out of the way); everything put
    back on exit. Yields the module; DriverError when the import fails."""
    modname = Path(rel).stem
    stand_ins = stubs.modules(row)
    keys = list(stand_ins) + [modname]
    saved_modules = {k: sys.modules.get(k, stubs) for k in keys}   # `stubs`: a marker for "absent"
    finders = [f for f in sys.meta_path if type(f).__name__ == "StubFinder"]
    saved_path = list(sys.path)
    try:
        for f in finders:
            sys.meta_path.remove(f)
        sys.path.insert(0, str(clone))
        for k in keys:
            sys.modules.pop(k, None)
        sys.modules.update(stand_ins)
        try:
            with contextlib.redirect_stdout(tee or sys.stdout):
                module = importlib.import_module(modname)
        except Exception as exc:  # noqa: BLE001 - the import failure is the row's error
            raise DriverError({"kind": "import-error", **_where(exc, clone),
                               "message": f"importing {rel} raised {type(exc).__name__}: {exc}"}) from exc
        yield module
    finally:
        for k in keys:
            if saved_modules[k] is stubs:
                sys.modules.pop(k, None)
            else:
                sys.modules[k] = saved_modules[k]
        sys.path[:] = saved_path
        for f in reversed(finders):
            sys.meta_path.insert(0, f)


def _start(case: dict, clone) -> tuple:
    clone = Path(clone).resolve()
    out = Path(case["out"])
    out.mkdir(parents=True, exist_ok=True)
    rel = case.get("file", "es_lora_multinode.py")
    if not (clone / rel).is_file():
        raise child_server.ReferenceLoadError({"kind": "missing", "file": rel,
                                               "message": f"file missing in the clone: {rel}"})
    scratch = out / "scratch"
    if scratch.exists():
        shutil.rmtree(scratch)
    (scratch / "lora").mkdir(parents=True)
    return clone, out, rel, scratch


def _needs(module, rel: str, names):
    for needed in names:
        if not hasattr(module, needed):
            raise DriverError({"kind": "interface", "file": rel, "name": needed,
                               "message": f"esverify could not drive this clone: {rel} defines no {needed} "
                                          "(docs/references.md)"})


def _args(module, rel: str, values: dict):
    try:
        return module.Args(**values)
    except TypeError as exc:
        raise DriverError({"kind": "interface", "file": rel, "name": "Args",
                           "message": f"esverify could not drive this clone: {rel}'s Args refused the keywords "
                                      f"esverify passes: {exc}"}) from exc


def run(case: dict, clone) -> dict:
    """Drive the clone's `main` once (see the module docstring); returns the reply (without id/status).
    Raises DriverError (the reference raised; `info` names its line) or ValueError (a bad case)."""
    clone, out, rel, scratch = _start(case, clone)
    row = Row(case, out)
    tee = _Tee(sys.stdout)
    args_in = {"model_name": "esverify/tiny-qwen2", "task": "zeros", "verbose": False, "use_wandb": False,
               "checkpoint_dir": str(scratch / "checkpoints"), "prompt_batch_size": len(row.targets),
               **(case.get("args") or {})}
    draws, seeds_after, settings = [], {}, {}
    with Seams() as seams:
        before = seams.settings()
        try:
            with imported(clone, rel, row, tee) as module, contextlib.redirect_stdout(tee):
                _needs(module, rel, ("Args", "main"))
                args = _args(module, rel, args_in)
                at_import = {k: getattr(module, k, None) for k in ("EXPERIMENT_DIR", "LORA_POPULATION_PATH",
                                                                    "LORA_TARGET_MODULES")}
                module.args = args
                module.LORA_POPULATION_PATH = str(scratch / "lora" / "es_lora_population")
                resolve, dims = _resolver(case, args)
                HOOK.draws = []
                with _noise(case, resolve):
                    try:
                        module.main(args)
                    except BaseException as exc:  # noqa: BLE001 - SystemExit from its handlers included
                        where = _where(exc, clone)
                        at_line = f" at {where['file']}:{where['line']} ({where['code']})" if where else ""
                        raise DriverError({"kind": type(exc).__name__, **where, "updates_before": row.updates,
                                           "message": f"{type(exc).__name__}: {exc}{at_line}"}) from exc
                    finally:
                        draws, HOOK.draws = list(HOOK.draws), []
                settings = {**seams.settings(), "before": before}
                seeds_after = {"torch_initial_seed": int(torch.initial_seed()),
                               "numpy_legacy": int(np.random.get_state()[1][0])}
        finally:
            HOOK.configure(None, {}, "correlated", "poly32", None, "contract")
    if not row.engine_objects:
        raise DriverError({"kind": "no-engine", "message": f"{rel}: main() never built an engine"})
    reply = row.finish(row.engine_objects[0])
    lora_root = scratch / "lora"
    checkpoints = sorted(str(p.parent) for p in Path(args_in["checkpoint_dir"]).glob("checkpoint_step_*/"
                                                                                     "training_state.json"))
    tape = {"names": row.names, "dtype": case.get("dtype", "f32"), "model": row.model_config,
            "targets": row.targets, "steps": reply["steps"], "evals": row.evals, "updates": row.updates,
            "update_calls": row.update_calls, "calls": row.calls[-400:], "llm_kwargs": row.llm_kwargs,
            "checkpoints": checkpoints, "lora_folders": sorted(p.name for p in lora_root.iterdir()),
            "failed_adds": [line for line in tee.lines if line.startswith("ERROR updating")],
            "seeds_after": seeds_after, "args": {k: v for k, v in vars(args).items()},
            "at_import": {k: v if isinstance(v, (str, list, type(None))) else repr(v) for k, v in at_import.items()},
            "static": static_findings(clone, rel)}
    if case.get("noise", "native") == "contract":
        tape["draws"] = _draw_findings(draws, case, args, dims)
    return {"results": reply["results"], "tape": tape, "settings": settings,
            "attribution": {"ok": not tape.get("draws", {}).get("unexpected_count"), "calls": []}}


def run_update(case: dict, clone) -> dict:
    """One `apply_lora_es_update` on one stand-in engine (rank 0, after init_inter_engine_group), outside the
    loop: the golden values' unit check. case: `fitnesses` (N floats, handed over as an f64 numpy array),
    `es_step`, `args` (Args keywords), `dtype`, `model`, `fill` / `set` / `init_seed`, `noise`. Returns
    `results` (the engine's tensors after, .npz), `before` (.npz), `returned`, `failed_adds`, `delta`
    (per vLLM tensor: hex f64 of after - before, computed exactly in f64)."""
    clone, out, rel, scratch = _start(case, clone)
    row = Row(case, out)
    tee = _Tee(sys.stdout)
    args_in = {"model_name": "esverify/tiny-qwen2", "verbose": False, **(case.get("args") or {})}
    with Seams():
        try:
            with imported(clone, rel, row, tee) as module, contextlib.redirect_stdout(tee):
                _needs(module, rel, ("Args", "WorkerExtension", "ESNcclLLM"))
                args = _args(module, rel, args_in)
                module.args = args
                engine = module.ESNcclLLM(model=args.model_name,
                                          worker_extension_cls=f"{module.__name__}.WorkerExtension")
                shapes = dict((n, tuple(s)) for n, s in stubs.peft_shapes(row.model_config))
                before = [t.clone() for t in engine.esverify_tensors]
                engine.collective_rpc("init_inter_engine_group", args=("127.0.0.1", 29500, 0, 1))
                resolve, dims = _resolver(case, args)
                with _noise(case, resolve):
                    try:
                        returned = engine.collective_rpc("apply_lora_es_update", args=(
                            np.asarray(case["fitnesses"], dtype=np.float64), shapes, int(case["es_step"]), args))
                    except Exception as exc:  # noqa: BLE001
                        where = _where(exc, clone)
                        raise DriverError({"kind": type(exc).__name__, **where,
                                           "message": f"{type(exc).__name__}: {exc}"}) from exc
                    finally:
                        HOOK.draws = []
        finally:
            HOOK.configure(None, {}, "correlated", "poly32", None, "contract")
    after = engine.esverify_tensors
    save_results(out / "theirs-before.npz", before)
    save_results(out / "theirs-final.npz", after)
    return {"results": str(out / "theirs-final.npz"), "before": str(out / "theirs-before.npz"),
            "names": row.names, "returned": [r if isinstance(r, bool) else repr(r) for r in returned],
            "failed_adds": [line for line in tee.lines if line.startswith("ERROR updating")],
            "delta": {n: _hex((a.double() - b.double()).numpy()) for n, a, b in zip(row.names, after, before)}}


def op_eggroll_main(case, modules):
    """The child server's op: run(case, the served clone); a DriverError's `info` (file, line, function)
    reaches the parent through child_server's error reply."""
    return run(case, _CLONE["path"])


def op_eggroll_update(case, modules):
    return run_update(case, _CLONE["path"])


_CLONE = {"path": None}


def load_modules(clone):
    _CLONE["path"] = Path(clone).resolve()
    try:
        import child_loops as loops
        loops.start(clone, "eggroll")
    except Exception:  # noqa: BLE001 - coverage and the interface check are report sections, never a verdict
        pass
    return {}


if __name__ == "__main__":
    import child_loops
    serve("eggroll", load_modules, child_loops.with_coverage({"eggroll-main": op_eggroll_main,
                                                             "eggroll-update": op_eggroll_update}), threads=1)
