"""Stand-in modules for driving EGGROLL's trainer through its own `main` (docs/references.md, eggroll-vllm).

Runs ONLY in the parity child (or in esverify's own tests, in-process); the
esverify package never imports it.

`modules(row)` builds, for one run, the modules the trainer imports at
module level or calls into, as plain module objects for `sys.modules`
(the driver installs them for the run and puts the previous entries back
after it): `ray` (`init` counted, `cluster_resources` -> {"GPU": engines},
`get`/`put` identities, `remote` running at once), `ray.util.placement_group`,
`ray.util.scheduling_strategies`, `accelerate.init_empty_weights`,
`transformers` (`AutoConfig`, `AutoModelForCausalLM.from_config`,
`AutoTokenizer`), `peft` (`LoraConfig` with `to_dict`, `get_peft_model`
yielding per decoder layer q, k, v, o, gate, up, down as real peft does,
each `.base_layer.weight` then its `lora_A` / `lora_B`), `vllm` (`LLM`, a
class: the stand-in engine; `SamplingParams`), `vllm.utils.network_utils`,
`vllm.lora.request.LoRARequest`, `vllm.distributed` (present, with
`get_tensor_model_parallel_rank` -> 0, or absent; vLLM's NCCL modules are
always absent), `tyro`, `wandb`, `weave`, and `tasks` whose four classes
have the four-argument `get_fitness` the loop calls.

The stand-in engine (`LLM`) holds vLLM-named tensors (per layer
`self_attn.qkv_proj`, `self_attn.o_proj`, `mlp.gate_up_proj`,
`mlp.down_proj`, each `.base_layer.weight`, plus embeddings and norms that
are never targets) in the run's dtype, and the reference's own worker
class (imported by the dotted name `worker_extension_cls` it is given).
`collective_rpc(name, args)` runs that worker method at once and returns
a one-element list. `generate(prompts, params, lora_request=...)` returns,
per prompt, `n` completions whose text is `repr` of the f64 reward of the
engine's current base weights with the member's adapter applied, read from
the request's `lora_path` (see `perturbed` for exactly how), against the
target written in the prompt as `<target=...>`; the stand-in task parses
it back with `float`.
"""
from __future__ import annotations

import contextlib
import importlib
import json
import math
import re
import types
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import load_file

import placeholders
from loop_stubs import RequestOutput   # the same vLLM output shape as the other references' engines

TARGET_MARK = re.compile(r"<target=([^>]+)>")
PROJECTIONS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


# ----------------------------------------------------------------- the model's shapes and names

def peft_shapes(config: dict) -> list:
    """[(peft name, (out, in))] of the targeted weights in real peft's yield order: per decoder layer q, k,
    v, o, gate, up, down (docs/references.md: the layer index l of the noise is the position here)."""
    h, i, heads, kv, hd = (config[k] for k in ("hidden", "intermediate", "heads", "kv_heads", "head_dim"))
    shapes = {"q_proj": (heads * hd, h), "k_proj": (kv * hd, h), "v_proj": (kv * hd, h), "o_proj": (h, heads * hd),
              "gate_proj": (i, h), "up_proj": (i, h), "down_proj": (h, i)}
    out = []
    for layer in range(config["layers"]):
        for proj in PROJECTIONS:
            part = "self_attn" if proj in ("q_proj", "k_proj", "v_proj", "o_proj") else "mlp"
            out.append((f"base_model.model.model.layers.{layer}.{part}.{proj}.base_layer.weight", shapes[proj]))
    return out


def vllm_layout(config: dict, extra: bool = False) -> list:
    """[(vLLM tensor name, shape)] of the stand-in engine's model, in module order: per layer qkv_proj,
    o_proj, gate_up_proj, down_proj (each `.base_layer.weight`), the names and order of our side's
    esverify.references.eggroll.shapes.model_shapes; with `extra`, also tensors that are never targets
    (the embeddings, two norms per layer, the final norm)."""
    h, i, heads, kv, hd = (config[k] for k in ("hidden", "intermediate", "heads", "kv_heads", "head_dim"))
    out = [("model.embed_tokens.weight", (config.get("vocab", 8), h))] if extra else []
    for layer in range(config["layers"]):
        p = f"model.layers.{layer}"
        out += [(f"{p}.self_attn.qkv_proj.base_layer.weight", ((heads + 2 * kv) * hd, h)),
                (f"{p}.self_attn.o_proj.base_layer.weight", (h, heads * hd)),
                (f"{p}.mlp.gate_up_proj.base_layer.weight", (2 * i, h)),
                (f"{p}.mlp.down_proj.base_layer.weight", (h, i))]
        if extra:
            out += [(f"{p}.input_layernorm.weight", (h,)), (f"{p}.post_attention_layernorm.weight", (h,))]
    if extra:
        out.append(("model.norm.weight", (h,)))
    return out


def placement(config: dict) -> list:
    """[(peft name, vLLM name, first row)] per targeted weight: q, k, v in rows of qkv_proj, gate, up in rows
    of gate_up_proj, o and down the whole tensor (first row 0)."""
    rows = {}
    out = []
    for name, (o, _) in peft_shapes(config):
        prefix, proj = name[len("base_model.model."):-len(".base_layer.weight")].rsplit(".", 1)
        fused = {"q_proj": "qkv_proj", "k_proj": "qkv_proj", "v_proj": "qkv_proj",
                 "gate_proj": "gate_up_proj", "up_proj": "gate_up_proj"}.get(proj, proj)
        target = f"{prefix}.{fused}.base_layer.weight"
        start = rows.get(target, 0)
        rows[target] = start + o
        out.append((name, target, start))
    return out


#: the adapter dtypes the stand-in engine serves as they are: numpy holds f16, f32 and f64 exactly
_NUMPY = {torch.float16: np.float16, torch.float32: np.float32, torch.float64: np.float64}


def _round_to_bf16(total: np.ndarray) -> torch.Tensor:
    """f64 -> bf16, rounded once to nearest-even: first to f32 rounding to odd (toward zero, the last
    bit set when inexact; 29 spare bits make the second rounding exact), then nearest-even to bf16 on
    the bit patterns. NaN and inf pass through torch's conversion."""
    with np.errstate(over="ignore", invalid="ignore"):
        f32 = total.astype(np.float32)
        too_far = np.abs(f32.astype(np.float64)) > np.abs(total)
        f32 = np.where(too_far, np.nextafter(f32, np.float32(0)), f32)
        bits = f32.view(np.uint32).copy()
        inexact = (f32.astype(np.float64) != total) & np.isfinite(total)
        bits[inexact] |= 1
        special = ~np.isfinite(f32)
        rounded = ((bits.astype(np.uint64) + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)
    out = torch.from_numpy(rounded.view(np.int16).copy()).view(torch.bfloat16)
    if special.any():
        out[torch.from_numpy(special)] = torch.from_numpy(f32[special]).to(torch.bfloat16)
    return out


def lowrank_product(lora_a: torch.Tensor, lora_b: torch.Tensor) -> torch.Tensor:
    """B·A as the stand-in engine serves it, in the dtype the adapter file holds (the factors' dtype;
    factors of two dtypes: ValueError): an f64 accumulator of zeros, to which the r outer products
    B[:, j] ⊗ A[j, :] of the factors widened to f64 are added in j order from j = 0, then one rounding
    of the f64 sum to that dtype (numpy's conversion, nearest-even; bf16 by _round_to_bf16). For f16
    factors, the f16 definition of our side's esverify.references.eggroll.lowrank.evaluated_perturbation;
    a file of another dtype gets another product, so a reference that writes other adapters gets other
    rewards (real vLLM casts an adapter to its own LoRA dtype: not checked, docs/parity.md). Shapes: A
    (r, in), B (out, r) -> (out, in) CPU tensor of the factors' dtype."""
    if lora_a.dtype != lora_b.dtype:
        raise ValueError(f"stand-in engine: the adapter's factors have two dtypes ({lora_a.dtype}, "
                         f"{lora_b.dtype}); the engine serves one adapter dtype")
    dtype = lora_a.dtype
    a = lora_a.detach().to("cpu").to(torch.float64).numpy()
    b = lora_b.detach().to("cpu").to(torch.float64).numpy()
    total = np.zeros((b.shape[0], a.shape[1]), dtype=np.float64)
    for j in range(a.shape[0]):
        total += np.multiply.outer(b[:, j], a[j, :])
    if dtype == torch.bfloat16:
        return _round_to_bf16(total)
    if dtype not in _NUMPY:
        raise ValueError(f"stand-in engine: an adapter in {dtype} is not served (f16, bf16, f32, f64 are)")
    with np.errstate(over="ignore"):     # beyond the dtype's range the IEEE result is +-inf
        return torch.from_numpy(total.astype(_NUMPY[dtype]))


def lowrank_product_f16(lora_a: torch.Tensor, lora_b: torch.Tensor) -> torch.Tensor:
    """Former name: lowrank_product of f16 factors (the file's dtype is now served as it is)."""
    return lowrank_product(lora_a, lora_b)


def perturbed(tensors: dict, adapter: dict, config: dict) -> dict:
    """The weights a member is evaluated with, in f64: every vLLM tensor widened to f64, and on each targeted
    slice (rows [first, first + out) of qkv/gate_up, the whole o/down) the f64 value of
    lowrank_product(A, B) (in the file's dtype) added once (one f64 rounding per element; no alpha/r
    scaling: how real vLLM scales B·A was not executed). `adapter`: the safetensors file's tensors (peft names with `.default`
    dropped); KeyError naming the missing factor."""
    out = {name: t.detach().to(torch.float64).clone() for name, t in tensors.items()}
    for (peft, target, start), (_, (o, _i)) in zip(placement(config), peft_shapes(config)):
        module = peft[:-len(".base_layer.weight")]
        key_a, key_b = f"{module}.lora_A.weight", f"{module}.lora_B.weight"
        missing = [k for k in (key_a, key_b) if k not in adapter]
        if missing:
            raise KeyError(f"stand-in engine: the adapter file has no {missing[0]!r} (it has "
                           f"{sorted(adapter)[:4]} ...): the reference names its adapter tensors otherwise")
        ba = lowrank_product(adapter[key_a], adapter[key_b])
        out[target][start:start + o] += ba.to(torch.float64)
    return out


def reward(tensors64: dict, target: float) -> float:
    """The member's reward for one prompt: -fsum((w - target)**2) over every element of every tensor, where w
    is the f64 weight of `perturbed`, w - target and its square each rounded to f64 (numpy), and one exactly
    rounded sum (math.fsum) over all of them; then negated."""
    squares = []
    for t in tensors64.values():
        d = t.numpy().reshape(-1) - target
        squares.append(d * d)
    return -math.fsum(np.concatenate(squares).tolist()) if squares else -0.0


# ----------------------------------------------------------------- small pieces

class SamplingParams:
    def __init__(self, n=1, **fields):
        self.n = n
        self.fields = dict(fields, n=n)


class LoRARequest:
    def __init__(self, lora_name=None, lora_int_id=None, lora_path=None, **kwargs):
        self.lora_name, self.lora_int_id, self.lora_path = lora_name, lora_int_id, lora_path
        self.extra = kwargs


class _Call:
    """`handle.method.remote(...)`: runs the method at once."""

    def __init__(self, row, owner, name, fn):
        self.row, self.owner, self.name, self.fn = row, owner, name, fn

    def remote(self, *args, **kwargs):
        self.row.before_call(self.owner, self.name, args, kwargs)
        return self.fn(*args, **kwargs)

    def __call__(self, *args, **kwargs):
        return self.remote(*args, **kwargs)

    def options(self, *args, **kwargs):
        return self


class _Actor:
    def __init__(self, row, obj):
        self._row, self._obj = row, obj

    def __getattr__(self, name):
        attr = getattr(self._obj, name)
        return _Call(self._row, self._obj, name, attr) if callable(attr) else attr


class _RemoteClass:
    def __init__(self, row, cls):
        self.row, self.cls = row, cls

    def remote(self, *args, **kwargs):
        return _Actor(self.row, self.cls(*args, **kwargs))

    def options(self, *args, **kwargs):
        return self


class _PlacementGroup:
    def __init__(self, bundles, **kwargs):
        self.bundles, self.kwargs = bundles, kwargs

    def ready(self):
        return self


class _Runner:
    def __init__(self, model, device):
        self.model, self.device = model, device


class _EngineModel(torch.nn.Module):
    """The engine's model: nested modules after the dotted vLLM names, parameters sharing the given tensors."""

    def __init__(self, names, tensors):
        super().__init__()
        for name, tensor in zip(names, tensors):
            module = self
            for part in name.split(".")[:-1]:
                if not hasattr(module, part):
                    module.add_module(part, torch.nn.Module())
                module = getattr(module, part)
            module.register_parameter(name.split(".")[-1], torch.nn.Parameter(tensor, requires_grad=False))
        self.names = list(names)

    @property
    def tensors(self):
        params = dict(self.named_parameters())
        return [params[n] for n in self.names]


# ----------------------------------------------------------------- the modules

def modules(row) -> dict:
    """name -> module (or None: absent) for sys.modules, bound to `row` (driver.Row)."""
    mods = {}

    def module(name, **attrs):
        # permissive: a name a later commit imports that the driver does not know is a placeholder
        m = placeholders.PermissiveModule(name)
        m.__esverify_stub__ = True
        m.__path__ = []       # a package: its submodules are looked up in sys.modules
        for key, value in attrs.items():
            setattr(m, key, value)
        mods[name] = m
        return m

    _ray(row, module)
    _accelerate(row, module)
    _transformers(row, module)
    _peft(row, module)
    _vllm(row, module, mods)
    _tools(row, module)
    mods["tasks"] = task_module(row)
    return mods


def _ray(row, module) -> None:
    """`ray`, `ray.util.placement_group`, `ray.util.scheduling_strategies`: `init`, `remote` and the placement
    groups counted in `row.calls`, a remote class's methods run at once, `get` and `put` identities."""
    def ray_init(*args, **kwargs):
        row.calls.append(["ray.init", kwargs])

    def ray_get(obj, *args, **kwargs):
        return list(obj) if isinstance(obj, (list, tuple)) else obj

    def ray_remote(*args, **kwargs):
        if len(args) == 1 and not kwargs and isinstance(args[0], type):
            return _RemoteClass(row, args[0])
        row.calls.append(["ray.remote", sorted(kwargs)])
        return lambda cls: _RemoteClass(row, cls)

    ray = module("ray", init=ray_init, cluster_resources=lambda: {"GPU": row.engines_asked, "CPU": 16.0},
                 get=ray_get, put=lambda obj, *a, **k: obj, remote=ray_remote, shutdown=lambda *a, **k: None,
                 is_initialized=lambda: True, kill=lambda *a, **k: None)
    util = module("ray.util")
    ray.util = util

    def placement_group(bundles, *args, **kwargs):
        pg = _PlacementGroup(bundles, **kwargs)
        row.calls.append(["placement_group", len(bundles)])
        return pg

    def remove_placement_group(pg):
        row.calls.append(["remove_placement_group"])

    util.placement_group = module("ray.util.placement_group", placement_group=placement_group,
                                  remove_placement_group=remove_placement_group)
    util.scheduling_strategies = module("ray.util.scheduling_strategies",
                                        PlacementGroupSchedulingStrategy=lambda **kw: types.SimpleNamespace(**kw))


def _accelerate(row, module) -> None:
    """`accelerate` whose `init_empty_weights` only counts its use."""
    @contextlib.contextmanager
    def init_empty_weights(*args, **kwargs):
        row.calls.append(["init_empty_weights"])
        yield

    module("accelerate", init_empty_weights=init_empty_weights)


def _transformers(row, module) -> None:
    """`transformers`: a config that carries the row's model, a model built from it (none from pretrained
    weights), a tokenizer that only names itself."""
    class AutoConfig:
        @staticmethod
        def from_pretrained(name, *args, **kwargs):
            row.calls.append(["AutoConfig.from_pretrained", name, kwargs])
            return types.SimpleNamespace(esverify_model=dict(row.model_config), name_or_path=name)

    class AutoModelForCausalLM:
        @staticmethod
        def from_config(config, *args, **kwargs):
            row.calls.append(["AutoModelForCausalLM.from_config", kwargs])
            return types.SimpleNamespace(config=config)

        @staticmethod
        def from_pretrained(*args, **kwargs):
            raise RuntimeError("the stand-in transformers has no from_pretrained weights: the trainer is "
                               "expected to build its model from the config (docs/references.md)")

    class AutoTokenizer:
        @staticmethod
        def from_pretrained(name, *args, **kwargs):
            return types.SimpleNamespace(eos_token="<|eos|>", pad_token="<|eos|>", name_or_path=name)

    module("transformers", AutoConfig=AutoConfig, AutoModelForCausalLM=AutoModelForCausalLM,
           AutoTokenizer=AutoTokenizer)


def _peft(row, module) -> None:
    """`peft`: `LoraConfig` (counted) and `get_peft_model`, whose model yields each targeted weight and its
    lora_A, lora_B in real peft's order (meta tensors: shapes only)."""
    class LoraConfig:
        def __init__(self, **kwargs):
            self.kwargs = kwargs
            row.calls.append(["LoraConfig", {k: (list(v) if isinstance(v, (list, tuple, set)) else v)
                                             for k, v in kwargs.items()}])

        def to_dict(self):
            d = {k: (list(v) if isinstance(v, (list, tuple, set)) else v) for k, v in self.kwargs.items()}
            d.setdefault("peft_type", "LORA")
            return d

    class PeftModel:
        def __init__(self, model, config):
            self.model, self.config = model, config

        def print_trainable_parameters(self):
            print("esverify stand-in peft model")

        def named_parameters(self):
            r = int(self.config.kwargs["r"])
            cfg = self.model.config.esverify_model
            yield "base_model.model.model.embed_tokens.weight", torch.empty(cfg.get("vocab", 8), cfg["hidden"],
                                                                           device="meta")
            for name, (o, i) in peft_shapes(cfg):
                module_name = name[:-len(".base_layer.weight")]
                yield name, torch.empty(o, i, device="meta")
                yield f"{module_name}.lora_A.default.weight", torch.empty(r, i, device="meta")
                yield f"{module_name}.lora_B.default.weight", torch.empty(o, r, device="meta")

    module("peft", LoraConfig=LoraConfig, get_peft_model=lambda model, config, *a, **k: PeftModel(model, config))


def _vllm(row, module, mods: dict) -> None:
    """`vllm` with the stand-in engine `LLM` (the module docstring) and `SamplingParams`, its network
    utilities, `LoRARequest`, and `vllm.distributed` present or absent as the row asks; vLLM's NCCL
    modules absent."""
    class LLM:
        """vllm.LLM stand-in: one engine of the run (see the module docstring)."""

        def __init__(self, *args, model=None, worker_extension_cls=None, **kwargs):
            self.esverify_index = len(row.engine_objects)
            row.engine_objects.append(self)
            row.llm_kwargs.append({"model": model, "worker_extension_cls": worker_extension_cls,
                                   **{k: v for k, v in kwargs.items() if isinstance(v, (int, float, str, bool))}})
            if not worker_extension_cls or "." not in str(worker_extension_cls):
                raise RuntimeError(f"stand-in vllm.LLM: worker_extension_cls {worker_extension_cls!r} is not a dotted "
                                   "name module.Class")
            module_name, cls_name = str(worker_extension_cls).rsplit(".", 1)
            extension = getattr(importlib.import_module(module_name), cls_name)
            self.worker = type("StandInWorker", (extension,), {})()
            tensors = [t.clone() for t in row.initial]
            self.worker.model_runner = _Runner(_EngineModel(row.names, tensors), torch.device("cpu"))
            if not hasattr(type(self.worker), "device"):
                self.worker.device = torch.device("cpu")

        @property
        def esverify_tensors(self):
            return self.worker.model_runner.model.tensors

        def collective_rpc(self, method, args=(), kwargs=None, timeout=None):
            fn = getattr(self.worker, method, None)
            if fn is None:
                raise AttributeError(f"the loop called collective_rpc({method!r}) but the reference's worker "
                                     f"extension has no method {method!r}")
            row.before_rpc(self, method, args)
            result = fn(*args, **dict(kwargs or {}))
            row.after_rpc(self, method, args, result)
            return [result]

        def generate(self, prompts, sampling_params=None, lora_request=None, use_tqdm=True, **kwargs):
            return row.generate(self, prompts, sampling_params, lora_request)

    vllm = module("vllm", LLM=LLM, SamplingParams=SamplingParams)
    vllm.utils = module("vllm.utils")
    vllm.utils.network_utils = module("vllm.utils.network_utils", get_ip=lambda: "127.0.0.1",
                                      get_open_port=lambda: 29500)
    vllm.lora = module("vllm.lora")
    vllm.lora.request = module("vllm.lora.request", LoRARequest=LoRARequest)
    if row.vllm_distributed:
        vllm.distributed = module("vllm.distributed", get_tensor_model_parallel_rank=lambda: 0)
    else:
        mods["vllm.distributed"] = None
    for absent in ("vllm.distributed.device_communicators", "vllm.distributed.device_communicators.pynccl",
                   "vllm.distributed.utils"):
        mods[absent] = None


def _tools(row, module) -> None:
    """`tyro` (its command line gives the default arguments), `wandb` and `weave` (their calls counted)."""
    module("tyro", cli=lambda cls, *args, **kwargs: cls())

    class _WandbRun:
        def log(self, *args, **kwargs):
            return None

        def finish(self, *args, **kwargs):
            return None

    module("wandb", init=lambda *a, **k: row.calls.append(["wandb.init", sorted(k)]) or _WandbRun(),
           log=lambda *a, **k: row.calls.append(["wandb.log"]), finish=lambda *a, **k: None)
    module("weave", init=lambda *a, **k: row.calls.append(["weave.init", list(a)]))


# ----------------------------------------------------------------- tasks

def task_module(row):
    """`tasks` with the four classes the trainer imports, each with the four-argument get_fitness: the
    prompts carry the row's targets as <target=...> marks; the fitness of a request is the mean of its
    completions' float(text) (their maximum with pass_at_k), as the published MathTask aggregates."""

    class _Task:
        def __init__(self, *args, **kwargs):
            self.args, self.kwargs = args, kwargs
            self.batches = 0
            row.calls.append([type(self).__name__, {k: v for k, v in kwargs.items()
                                                    if isinstance(v, (int, float, str, bool, type(None)))}])

        def get_batch(self):
            self.batches += 1
            targets = list(row.targets)
            return [f"prompt {j} <target={t!r}>" for j, t in enumerate(targets)], targets

        def get_fitness(self, generations, truncateds, answer, pass_at_k=False):
            scores = [0.0 if truncated else float(text) for text, truncated in zip(generations, truncateds)]
            fitness = max(scores) if pass_at_k else (scores[0] if len(set(scores)) == 1 else float(np.mean(scores)))
            return fitness, list(generations), scores, {}

        def get_state(self):
            return {"batches": self.batches}

        def set_state(self, state):
            self.batches = int(state.get("batches", 0))

    class MathTask(_Task):
        def get_eval_batch(self):
            size = int(self.args[0] if self.args else self.kwargs.get("batch_size", 1))
            targets = [row.targets[j % len(row.targets)] for j in range(size)]
            return [f"eval {j} <target={t!r}>" for j, t in enumerate(targets)], targets

    mod = placeholders.PermissiveModule("tasks")   # a task class a later commit adds is a placeholder
    mod.__esverify_stub__ = True
    mod.MathTask = MathTask
    mod.CountdownTask = type("CountdownTask", (_Task,), {})
    mod.ZerosTask = type("ZerosTask", (_Task,), {})
    mod.RandomTask = type("RandomTask", (_Task,), {})
    return mod


def read_adapter(path) -> tuple[dict, dict]:
    """(tensors, adapter_config) of an adapter folder as the reference wrote it; FileNotFoundError naming it."""
    folder = Path(path)
    weights = folder / "adapter_model.safetensors"
    if not weights.is_file():
        raise FileNotFoundError(f"stand-in engine: no adapter file {weights} (the request's lora_path)")
    config_path = folder / "adapter_config.json"
    config = json.loads(config_path.read_text()) if config_path.is_file() else None
    return load_file(str(weights)), config


def parse_target(prompt) -> float:
    text = prompt if isinstance(prompt, str) else str(prompt)
    mark = TARGET_MARK.search(text)
    if not mark:
        raise ValueError(f"stand-in engine: prompt {text[:60]!r} carries no <target=...> mark; the loop changed "
                         "the prompt beyond the task's text")
    return float(mark.group(1))


def request_outputs(prompts, values, n):
    return [RequestOutput(p, [repr(v)] * n) for p, v in zip(prompts, values)]


__all__ = ["modules", "peft_shapes", "vllm_layout", "placement", "lowrank_product", "lowrank_product_f16", "perturbed", "reward",
           "read_adapter", "parse_target", "request_outputs"]
