"""Inert stand-ins for the packages the reference training loops import (docs/references.md §5).

Runs ONLY in the parity child; the esverify package never imports it.

- `install()` puts a meta-path finder FIRST on `sys.meta_path` that serves
  a stand-in module for every name under `ray`, `vllm`, `transformers` and
  `wandb` (submodules included: `ray.util.placement_group`,
  `vllm.distributed.parallel_state`, ...), and drops any of them already
  imported: the real packages are never imported, even when installed.
  Any attribute of a stand-in module is an inert class (usable as a base
  class, callable, its attributes inert too); the few calls a loop relies
  on behave: `ray.get` returns its argument, `ray.remote` wraps a class or
  function so that `.remote(...)` runs it at once, `vllm.SamplingParams`
  records its fields, `wandb.init/log` do nothing, `AutoTokenizer` gives a
  tokenizer whose chat template is the user content.
- `torch.cuda.synchronize` becomes a no-op when CUDA is not available
  (the loops call it unconditionally).
- `StandInEngine`: one stand-in model (child_server.StandInModel) with the
  reference's own WorkerExtension built on it. `collective_rpc.remote(name,
  args=...)` runs that WorkerExtension method at once and returns its result,
  except `broadcast_all_weights`, which copies engine 0's tensors; `generate.
  remote(prompts, params)` returns one vLLM-shaped output per prompt whose
  text is `repr(reward)` of the engine's CURRENT parameters against the
  target written into the prompt (the loop reward, f64, child_server.reward).
  Every call is recorded on a `Tape` (members evaluated, rewards, update
  arguments, parameters after each update) and checked by the draw audit.
  Its worker carries what a vLLM worker has and the references read
  (`rank` 0, `world_size` 1, `local_rank` 0, `device`).
- `Pool`: es-at-scale's module-level `multiprocessing.Pool` seam: `apply_async(fn,
  args).get(timeout=...)` runs `fn(*args)` at once in this process.
"""
from __future__ import annotations

import importlib.abc
import importlib.machinery
import re
import sys
import types

import torch

STUBBED = ("ray", "vllm", "transformers", "wandb")
TARGET_MARK = re.compile(r"<target=([^>]+)>")


# ----------------------------------------------------------------- inert objects

class _InertMeta(type):
    def __getattr__(cls, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return inert_class(f"{cls.__qualname__}.{name}")


class Inert(metaclass=_InertMeta):
    """Absorbs every construction, call and attribute; usable as a base class."""

    def __init__(self, *args, **kwargs):
        self._args, self._kwargs = args, kwargs

    def __call__(self, *args, **kwargs):
        return Inert(*args, **kwargs)

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return Inert()

    def __iter__(self):
        return iter(())

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def inert_class(name: str) -> type:
    return _InertMeta(name.rsplit(".", 1)[-1], (Inert,), {"__qualname__": name, "__module__": "stub"})


class StubModule(types.ModuleType):
    """A stand-in module: unknown attributes are inert classes (cached)."""

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        value = inert_class(f"{self.__name__}.{name}")
        setattr(self, name, value)
        return value


# ----------------------------------------------------------------- behaving stand-ins

class _Remote:
    """`ray.remote(...)` applied to a function or class: `.remote(...)` runs it at once."""

    def __init__(self, target):
        self.target = target

    def options(self, *args, **kwargs):
        return self

    def remote(self, *args, **kwargs):
        result = self.target(*args, **kwargs)
        return _Actor(result) if isinstance(self.target, type) else result

    def __call__(self, *args, **kwargs):
        return self.target(*args, **kwargs)


class _Actor:
    """An actor handle: `handle.method.remote(...)` calls the method at once."""

    def __init__(self, obj):
        self._obj = obj

    def __getattr__(self, name):
        attr = getattr(self._obj, name)
        return _Remote(attr) if callable(attr) else attr


def _ray_remote(*args, **kwargs):
    if len(args) == 1 and not kwargs and callable(args[0]):
        return _Remote(args[0])
    return lambda target: _Remote(target)


class SamplingParams:
    """vllm.SamplingParams stand-in: records its fields (n defaults to 1)."""

    def __init__(self, n=1, **fields):
        self.n = n
        self.fields = fields

    def __getattr__(self, name):
        if name.startswith("__") or name == "fields":
            raise AttributeError(name)
        return self.fields.get(name)


class Tokenizer:
    """transformers tokenizer stand-in: the chat template is the concatenated contents."""

    eos_token = ""
    pad_token = ""

    def apply_chat_template(self, messages, tokenize=False, add_generation_prompt=True, **kwargs):
        return "".join(m.get("content", "") for m in messages)

    def __call__(self, text, **kwargs):
        return {"input_ids": [ord(c) for c in str(text)]}

    def encode(self, text, **kwargs):
        return [ord(c) for c in str(text)]

    def decode(self, ids, **kwargs):
        return "".join(chr(i) for i in ids)


class _AutoTokenizer:
    @staticmethod
    def from_pretrained(*args, **kwargs):
        return Tokenizer()


class _WandbRun:
    def log(self, *args, **kwargs):
        return None

    def finish(self, *args, **kwargs):
        return None


_SPECIAL = {
    "ray": {"get": lambda obj, *a, **k: obj, "init": lambda *a, **k: None, "shutdown": lambda *a, **k: None,
            "is_initialized": lambda: True, "kill": lambda *a, **k: None, "remote": _ray_remote,
            "put": lambda obj, *a, **k: obj, "wait": lambda refs, *a, **k: (list(refs), [])},
    "ray.util.placement_group": {"placement_group": lambda *a, **k: Inert(*a, **k),
                                 "remove_placement_group": lambda *a, **k: None},
    "vllm": {"SamplingParams": SamplingParams},
    "transformers": {"AutoTokenizer": _AutoTokenizer},
    "wandb": {"init": lambda *a, **k: _WandbRun(), "log": lambda *a, **k: None, "finish": lambda *a, **k: None},
}


class StubFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Serves StubModule for every name under STUBBED, before any real finder."""

    def __init__(self):
        self.served: set = set()

    def find_spec(self, fullname, path=None, target=None):
        if fullname.split(".")[0] in STUBBED:
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec):
        module = StubModule(spec.name)
        module.__path__ = []
        module.__esverify_stub__ = True
        for key, value in _SPECIAL.get(spec.name, {}).items():
            setattr(module, key, value)
        return module

    def exec_module(self, module):
        self.served.add(module.__name__)


FINDER = StubFinder()


def install(also=()):
    """Serve the stand-in modules (dropping real ones already imported) and a no-op CPU synchronize.
    `also`: more top-level names to serve as stand-ins (the paper's scripts import `accelerate` and
    a `countdown_task` module, docs/references.md §6)."""
    global STUBBED
    STUBBED = tuple(dict.fromkeys((*STUBBED, *also)))
    for name in list(sys.modules):
        if name.split(".")[0] in STUBBED and not getattr(sys.modules[name], "__esverify_stub__", False):
            del sys.modules[name]
    if FINDER not in sys.meta_path:
        sys.meta_path.insert(0, FINDER)
    if not torch.cuda.is_available():
        torch.cuda.synchronize = lambda *args, **kwargs: None


# ----------------------------------------------------------------- engines

class Completion:
    """One completion of a stand-in engine's request: `.text`, `.token_ids`, `.finish_reason` (vLLM's shape)."""

    def __init__(self, text):
        self.text = text
        self.token_ids = [ord(c) for c in text]
        self.finish_reason = "stop"


class RequestOutput:
    """One prompt's output of a stand-in engine: `.prompt` and `.outputs`, a list of `Completion`."""

    def __init__(self, prompt, texts):
        self.prompt = prompt
        self.outputs = [Completion(t) for t in texts]


class _Method:
    """`engine.collective_rpc` / `engine.generate`: callable, and `.remote(...)` runs at once."""

    def __init__(self, fn):
        self.fn = fn

    def remote(self, *args, **kwargs):
        return self.fn(*args, **kwargs)

    def __call__(self, *args, **kwargs):
        return self.fn(*args, **kwargs)

    def options(self, *args, **kwargs):
        return self


#: the precision names a loop may launch its engines with (vLLM's `dtype=`, es-awd's --precision, the
#: paper scripts' torch_dtype); "auto" and None keep each weight's own dtype
PRECISIONS = {"float16": torch.float16, "fp16": torch.float16, "half": torch.float16,
              "bfloat16": torch.bfloat16, "bf16": torch.bfloat16,
              "float32": torch.float32, "fp32": torch.float32, "float": torch.float32,
              "auto": None, None: None}


def precision_dtype(precision):
    """The torch dtype an engine launched with `precision` (a name above or a torch dtype) computes in;
    ValueError naming an unknown one."""
    if isinstance(precision, torch.dtype):
        return precision
    key = precision.lower() if isinstance(precision, str) else precision
    if key not in PRECISIONS:
        raise ValueError(f"stand-in engine: unknown precision {precision!r} (known: float16, bfloat16, float32, "
                         "their short names, auto)")
    return PRECISIONS[key]


def precision_name(precision) -> str:
    """The launched precision as the report names it ('bfloat16', 'auto (the weights' own dtypes)')."""
    dtype = precision_dtype(precision)
    return "auto (the weights' own dtypes)" if dtype is None else str(dtype).replace("torch.", "")


class StandInEngine:
    """One engine of a loop: a stand-in model, the reference's WorkerExtension on it, a tape.

    index: the engine's position; group: the list of all engines (engine 0
    is the broadcast source); worker_cls: the reference's WorkerExtension;
    model / runner: child_server's StandInModel / StandInModelRunner; tape:
    the shared Tape; reward_fn(tensors, target, dtype) -> f64; precision: what the loop launched the
    engine with (precision_dtype): the engine generates in it, so each reward is computed on the weights
    rounded to it, and a loop launching another precision than documented gets other rewards;
    rewards_fn(tensors, targets, dtype) -> [f64] (optional): reward_fn of several targets in one call,
    which converts the weights once for a request's prompts (the weights do not change within it).
    """

    def __init__(self, index, group, worker_cls, model, runner_cls, tape, reward_fn, precision=None,
                 rewards_fn=None):
        self.index, self.group, self.model, self.tape, self.reward_fn = index, group, model, tape, reward_fn
        self.rewards_fn = rewards_fn
        self.precision, self.dtype = precision, precision_dtype(precision)
        self.ext = worker_cls()
        self.ext.model_runner = runner_cls(model)
        # what a vLLM worker carries and init_inter_engine_group reads (docs/references.md §5.1); a
        # reference class that defines one of them itself keeps its own
        device = model.tensors[0].device if model.tensors else torch.device("cpu")
        for name, value in (("rank", 0), ("world_size", 1), ("local_rank", 0), ("device", device)):
            if not hasattr(type(self.ext), name):
                setattr(self.ext, name, value)
        self.collective_rpc = _Method(self._rpc)
        self.generate = _Method(self._generate)

    def _rpc(self, method, args=(), kwargs=None, timeout=None):
        kwargs = dict(kwargs or {})
        if method == "broadcast_all_weights":
            source = self.group[int(args[0]) if args else 0]
            with torch.no_grad():
                for mine, theirs in zip(self.model.tensors, source.model.tensors):
                    mine.copy_(theirs)
            self.tape.event(self, "broadcast_all_weights", args, kwargs)
            return True
        fn = getattr(self.ext, method, None)
        if fn is None:
            raise AttributeError(f"the loop called collective_rpc({method!r}) but the reference's WorkerExtension "
                                 f"has no method {method!r}")
        self.tape.before(self, method, args, kwargs)
        result = fn(*args, **kwargs)
        self.tape.after(self, method, args, kwargs)
        return result

    def _generate(self, prompts, sampling_params=None, *args, **kwargs):
        prompts = [prompts] if isinstance(prompts, str) else prompts
        n = int(getattr(sampling_params, "n", 1) or 1) if sampling_params is not None else 1
        # each prompt read and its mark found once, before any is scored: a generator the loop hands in is
        # read here, and _scored and the loop below share what it gave
        texts = [prompt if isinstance(prompt, str) else str(prompt) for prompt in prompts]
        marks = [TARGET_MARK.search(text) for text in texts]
        scored = self._scored(marks)
        outputs = []
        for k, (text, mark) in enumerate(zip(texts, marks)):
            if not mark:
                raise ValueError(f"stand-in engine: prompt {text[:60]!r} carries no <target=...> mark; "
                                 "the loop changed the prompt beyond the template")
            value = scored[k] if k < len(scored) else self.reward_fn(self.model.tensors, float(mark.group(1)),
                                                                     self.dtype)
            self.tape.reward(self, value)
            outputs.append(RequestOutput(text, [repr(value)] * n))
        return outputs

    def _scored(self, marks) -> list:
        """rewards_fn's rewards of the leading prompts whose target marks (`marks`: TARGET_MARK matches or None)
        parse, in one call; [] without rewards_fn or when it raises: _generate then scores prompt by prompt,
        so what the tape records and what is raised stay those of one reward_fn call per prompt."""
        if self.rewards_fn is None:
            return []
        targets = []
        for mark in marks:
            try:
                targets.append(float(mark.group(1)))
            except (AttributeError, ValueError):   # no mark, or one float() refuses: scored one by one
                break
        try:
            return list(self.rewards_fn(self.model.tensors, targets, self.dtype)) if targets else []
        except Exception:  # noqa: BLE001 - the per-prompt path raises it again where the old order did
            return []


class ImmediatePool:
    """A process pool stand-in: `submit`, `apply_async` and `map` run at once in this process (the
    reward function then runs where the tape sees it, and a pickling-free stand-in reward is fine)."""

    def __init__(self, processes=None, *args, **kwargs):
        self.processes = processes

    class _Done:
        def __init__(self, value):
            self.value = value

        def result(self, timeout=None):
            return self.value

        def get(self, timeout=None):
            return self.value

    def submit(self, fn, *args, **kwargs):
        return self._Done(fn(*args, **kwargs))

    def apply_async(self, fn, args=(), kwds=None, callback=None, error_callback=None):
        value = fn(*args, **(kwds or {}))
        if callback is not None:
            callback(value)
        return self._Done(value)

    def apply(self, fn, args=(), kwds=None):
        return fn(*args, **(kwds or {}))

    def close(self):
        return None

    def terminate(self):
        return None

    def join(self):
        return None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def map(self, fn, *iterables, **kwargs):
        return list(map(fn, *iterables))

    def shutdown(self, *args, **kwargs):
        return None


#: es-at-scale's module-level `Pool` seam (docs/references.md §5.1): `Pool(8)` gives an ImmediatePool
Pool = ImmediatePool
