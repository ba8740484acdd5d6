"""The child side of the oracle protocol, shared by the per-target drivers.

Runs ONLY in the child interpreter that executes reference code
(docs/references.md §3); the esverify package never imports this file. It
provides:

- the channel: commands arrive as JSON lines on stdin; replies leave as
  JSON lines on a dedicated pipe fd (`--reply-fd`). The parent points the
  child's stdout and stderr at a log file, so a reference's prints can
  never corrupt a reply;
- the stand-in model runner: `named_parameters()` / `parameters()` are
  generators that record the slot index of the tensor they are about to
  yield, which is how a draw is attributed to a slot;
- the noise hook: `torch.randn` replaced by a function that maps the
  generator's `initial_seed()` (a small handle) to an esverify member
  seed, derives the stream seed of the current slot (docs/CONTRACT.md §4), draws
  with esverify.rng in f32 and rounds to the requested dtype, device and
  shape. A draw without a generator or with an unknown seed raises
  `NoiseAttributionError`, and so does any call of torch's other gaussian
  entry points (`randn_like`, `normal`, `Tensor.normal_`): torch's own
  noise never gets in;
- generator semantics (docs/references.md §3a): a generator is a stream that
  each draw advances and a reseed rewinds; a draw past position 0 is
  recorded with its position; a generator of another device than the
  requested one is refused, as torch refuses it; under `native` noise
  torch.randn runs untouched and the hook only records the draws;
- draw accounting: each reference call should draw exactly once per slot
  per seed; the findings per call (eager, missing, extra, advanced) go
  back to the parent, which names the diagnoses per row;
- loading reference modules by path with plain-language diagnoses of
  SyntaxError (which Python the file needs), missing packages and other
  import failures;
- tensor I/O as raw bit patterns (.npz), so nothing is lost in transit.
"""
from __future__ import annotations

import argparse
import collections
import hashlib
import importlib.util
import json
import math
import os
import platform
import sys
import traceback
import weakref
from pathlib import Path

import numpy as np
import torch

from esverify import rng as es_rng
from esverify.numerics_probe import flush_to_zero_status

DTYPES = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16, "f64": torch.float64}
DTYPE_NAMES = {v: k for k, v in DTYPES.items()}
_INT_VIEW = {32: (np.uint32, torch.int32), 16: (np.uint16, torch.int16), 64: (np.uint64, torch.int64)}


class NoiseAttributionError(RuntimeError):
    """A torch.randn call the hook cannot attribute to (member seed, slot)."""


class ReferenceLoadError(RuntimeError):
    """A reference module could not be loaded; `info` holds the diagnosis."""

    def __init__(self, info: dict):
        super().__init__(info["message"])
        self.info = info


# ----------------------------------------------------------------- model runner

class StandInModel:
    """Holds the parameter tensors; its iterators record the current slot.

    `current` is the index of the tensor most recently yielded (it stays at
    the last slot once iteration ends), so a reference that materialises the
    list first attributes every draw to the last slot: the draw accounting
    then reports eager consumption.
    """

    def __init__(self, names, tensors):
        self.names = list(names)
        self.tensors = list(tensors)
        self.current = None

    def named_parameters(self):
        for slot, (name, tensor) in enumerate(zip(self.names, self.tensors)):
            self.current = slot
            yield name, tensor

    def parameters(self):
        for _, tensor in self.named_parameters():
            yield tensor


class StandInModelRunner:
    def __init__(self, model):
        self.model = model


# ----------------------------------------------------------------- noise hook

class GeneratorDeviceError(RuntimeError):
    """A draw on a generator of another device than the requested one (torch refuses it too)."""


class NoiseHook:
    """The replacement for torch.randn (docs/references.md §3 and §3a).

    Under `contract` noise a generator is modelled as a stream: a generator
    seeded s starts at element 0 of the contract stream that s maps to
    (for the slot being processed, docs/CONTRACT.md §4), every draw returns the next
    elements and advances its position, and reseeding rewinds it. The
    position is tracked per generator object: after each draw the hook
    records a digest of the generator's state (and advances the real
    generator by one element so that a reseed, by any path, changes the
    digest back to a fresh one); a later draw whose generator still has
    that digest continues from the recorded position, exactly as torch
    would. Under `native` noise torch.randn runs untouched (torch's own
    noise); the hook only attributes and positions the draws.

    Each draw is recorded as (handle, slot, position, elements) for the
    draw accounting.
    """

    def __init__(self):
        self.original = torch.randn
        self.model = None
        self.table = {}
        self.scheme = "correlated"
        self.mapping = "poly32"
        self.backend = None
        self.noise = "contract"
        self.draws = []
        self.cache = {}
        self.positions = weakref.WeakKeyDictionary()

    def configure(self, model, table, scheme, mapping, backend, noise="contract"):
        self.model, self.table = model, dict(table)
        self.scheme, self.mapping, self.backend, self.noise = scheme, mapping, backend, noise
        self.draws = []
        self.cache = {}
        self.positions = weakref.WeakKeyDictionary()

    @staticmethod
    def _digest(generator) -> bytes:
        return hashlib.blake2b(generator.get_state().numpy().tobytes(), digest_size=16).digest()

    def _position(self, generator) -> int:
        """Elements this generator already delivered since it was (re)seeded."""
        try:
            digest, position = self.positions[generator]
        except (KeyError, TypeError):
            return 0
        return position if self._digest(generator) == digest else 0

    def __call__(self, *size, generator=None, dtype=None, device=None, out=None, layout=None,
                 requires_grad=False, pin_memory=False, **kwargs):
        if "size" in kwargs:
            size = (kwargs.pop("size"),)
        if kwargs:
            raise NoiseAttributionError(f"torch.randn called with unsupported arguments {sorted(kwargs)}")
        if len(size) == 1 and isinstance(size[0], (tuple, list, torch.Size)):
            size = tuple(size[0])
        shape = tuple(int(s) for s in size)
        if generator is None:
            raise NoiseAttributionError(
                "torch.randn was called without a generator: the draw cannot be attributed to a "
                "member, and torch's own noise is never let in (docs/references.md §3)")
        handle = int(generator.initial_seed())
        if handle not in self.table:
            raise NoiseAttributionError(
                f"torch.randn drew with unknown seed {handle}: not a member handle of this case "
                f"(handles: {sorted(self.table)[:8]}{' ...' if len(self.table) > 8 else ''}); "
                "a reference that derives per-tensor seeds (seed + offset) is not attributable")
        if self.model is None or self.model.current is None:
            raise NoiseAttributionError(
                f"torch.randn drew with seed {handle} before any parameter was yielded: no slot to attribute")
        slot = self.model.current
        dtype = dtype or torch.get_default_dtype()
        device = torch.device(device) if device is not None else torch.device("cpu")
        if generator.device.type != device.type:     # torch: "Expected a '<dev>' device type for generator"
            raise GeneratorDeviceError(
                f"torch.randn(device={device.type!r}) was given a generator on {generator.device.type!r}: torch "
                f"refuses a generator of another device type (docs/references.md §3a); slot {slot} "
                f"({self.model.names[slot]})")
        numel = math.prod(shape)
        position = self._position(generator)
        self.draws.append((handle, slot, position, numel))
        if self.noise == "native":
            result = self.original(shape, generator=generator, dtype=dtype, device=device, out=out,
                                   requires_grad=requires_grad)
        else:
            stream = es_rng.stream_seed(self.table[handle], slot, self.scheme)
            key = (stream, position, numel, device.type)
            noise = self.cache.get(key)
            if noise is None:
                noise = es_rng.gaussian(stream, numel, first=position, mapping=self.mapping, device=device,
                                        backend=self.backend)
                self.cache = {key: noise}   # one entry: correlated noise of consecutive equal-size tensors
            result = noise.to(dtype).reshape(shape).clone()
            # advance the real generator too: a reseed (by any path) then shows as a fresh state
            self.original((1,), generator=generator, device=device)
            if out is not None:
                out.copy_(result)
                result = out
            else:
                result.requires_grad_(requires_grad)
        try:
            self.positions[generator] = (self._digest(generator), position + numel)
        except TypeError:   # not weak-referenceable: every draw is taken as position 0
            pass
        return result


HOOK = NoiseHook()

#: torch's other gaussian entry points: a draw through one of them cannot be attributed, so it is
#: refused like a draw without a generator (docs/references.md §3: torch's own noise never gets in)
_OTHER_GAUSSIANS = ((torch, "randn_like"), (torch, "normal"), (torch.Tensor, "normal_"))


def _refuse(name):
    def refused(*args, **kwargs):
        raise NoiseAttributionError(
            f"{name} was called: the noise hook only attributes torch.randn(..., generator=...) draws "
            "(docs/references.md §3); torch's own noise is never let in")
    return refused


def install_hook():
    torch.randn = HOOK
    for owner, name in _OTHER_GAUSSIANS:
        setattr(owner, name, _refuse(f"{getattr(owner, '__name__', 'torch')}.{name}"))


# ----------------------------------------------------------------- draw accounting

def expected_draws(tensors, seeds, caching=False) -> collections.Counter:
    """One draw per (seed, slot); with caching one per (seed, distinct (device, dtype, shape))."""
    expected = collections.Counter()
    for seed in seeds:
        seen = set()
        for slot, tensor in enumerate(tensors):
            key = (str(tensor.device), tensor.dtype, tuple(tensor.shape))
            if caching and key in seen:
                continue
            seen.add(key)
            expected[(int(seed), slot)] += 1
    return expected


class DrawAudit:
    """The draw accounting of one case (docs/references.md §3, §3a): per reference call, the draws the
    hook saw against one draw per (seed, slot).

    Findings per call (the parent names the diagnoses): `eager` (every draw landed on the last slot
    while several were expected: the parameters were consumed before drawing), `missing` (slots never
    drawn for some seed: a skip, or noise reused from another slot), `extra` (slots drawn more than
    once for a seed) and `advanced` (draws that started past position 0 of their generator's
    stream: a generator reused or not reseeded).
    """

    def __init__(self, names=None):
        self.names = list(names or [])
        self.calls = []

    def _name(self, slot):
        return self.names[slot] if slot < len(self.names) else f"slot{slot}"

    def check(self, call: str, expected: collections.Counter):
        draws, HOOK.draws = HOOK.draws, []
        got = collections.Counter((h, s) for h, s, _, _ in draws)
        exp_slots = {s for _, s in expected}
        got_slots = {s for _, s in got}
        finding = {"call": call, "draws": len(draws), "expected": sum(expected.values())}
        advanced = [{"slot": s, "name": self._name(s), "position": p} for _, s, p, _ in draws if p]
        if advanced:
            finding["advanced"] = advanced[:8]
            finding["advanced_count"] = len(advanced)
        # eager: the parameters were consumed first, so every draw sits on the LAST slot yielded
        if len(exp_slots) > 1 and got_slots == {max(exp_slots)}:
            finding["eager"] = {"slot": next(iter(got_slots)), "name": self._name(next(iter(got_slots)))}
        else:
            missing = sorted({s for key, s in expected if got[(key, s)] < expected[(key, s)]})
            if missing:
                finding["missing"] = [{"slot": s, "name": self._name(s)} for s in missing]
            extra = sorted({s for key, s in got if got[(key, s)] > expected.get((key, s), 0)})
            if extra:
                finding["extra"] = [{"slot": s, "name": self._name(s)} for s in extra]
        if len(finding) > 3:
            self.calls.append(finding)

    def result(self) -> dict:
        return {"ok": not self.calls, "calls": self.calls[:12]}


# ----------------------------------------------------------------- tensor I/O

def load_set(path, device):
    """A parameter set written by the parent: names, tensors (bit-exact) on `device`."""
    with np.load(path) as data:
        names = [str(n) for n in data["names"]]
        dtypes = [str(d) for d in data["dtypes"]]
        tensors = []
        for k, dt in enumerate(dtypes):
            raw = data[f"slot{k}"]
            torch_dtype = DTYPES[dt]
            width = torch.finfo(torch_dtype).bits
            signed = {16: np.int16, 32: np.int32, 64: np.int64}[width]
            t = torch.from_numpy(np.ascontiguousarray(raw).view(signed).copy())
            tensors.append(t.view(torch_dtype).reshape(raw.shape).to(device))
    return names, tensors


def tensor_bits(t) -> np.ndarray:
    t = t.detach().to("cpu").contiguous()
    width = torch.finfo(t.dtype).bits
    np_uint, torch_int = _INT_VIEW[width]
    return t.view(torch_int).numpy().view(np_uint).copy()


def save_results(path, tensors):
    arrays = {f"slot{k}": tensor_bits(t) for k, t in enumerate(tensors)}
    arrays["dtypes"] = np.array([DTYPE_NAMES[t.dtype] for t in tensors])
    tmp = str(path) + ".tmp.npz"
    np.savez(tmp, **arrays)
    os.replace(tmp, path)


def reward(tensors, target: float) -> float:
    """The loop's reward: -fsum((f64(theta) - target)**2) over every element (issue 4 item 4)."""
    total = []
    for t in tensors:
        d = t.detach().to("cpu").double().numpy().reshape(-1) - target
        total.append(math.fsum((d * d).tolist()))
    return -math.fsum(total)


# ----------------------------------------------------------------- module loading

def syntax_error(exc: SyntaxError, where: str, imported_by: str = "") -> ReferenceLoadError:
    """The diagnosis of a reference file that does not compile under this child: which Python it needs
    (the parent turns "Python X.Y or newer" into a row that is not checked here)."""
    py = f"Python {platform.python_version()} ({sys.executable})"
    needs = ("Python 3.12 or newer (PEP 701 f-string syntax)"
             if "f-string" in str(exc.msg) and sys.version_info < (3, 12)
             else f"a Python other than {platform.python_version()}")
    via = f" (imported by {imported_by})" if imported_by else ""
    return ReferenceLoadError({
        "kind": "syntax", "file": where, "line": exc.lineno, "needs": needs,
        "message": (f"SyntaxError in {where} line {exc.lineno}{via} under {py}: {exc.msg}. "
                    f"This file needs {needs}: pass --python with such an interpreter"
                    + ("" if imported_by else " (it needs torch and numpy too)"))})


def load_module(clone: Path, relpath: str, name: str):
    """Import the reference file `relpath` of `clone` by path; ReferenceLoadError on failure."""
    path = clone / relpath
    py = f"Python {platform.python_version()} ({sys.executable})"
    if not path.is_file():
        raise ReferenceLoadError({"kind": "missing", "file": relpath,
                                  "message": f"file missing in the clone: {relpath}"})
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except SyntaxError as exc:
        raise syntax_error(exc, relpath) from None
    except ModuleNotFoundError as exc:
        raise ReferenceLoadError({
            "kind": "import", "file": relpath, "package": exc.name,
            "message": (f"{relpath} imports {exc.name!r}, which is not installed for the child "
                        f"{py}: install it there or pass --python with an interpreter that has it")}) from None
    except Exception as exc:  # noqa: BLE001 - any import-time failure is reported, not raised
        raise ReferenceLoadError({
            "kind": "import-error", "file": relpath,
            "message": f"importing {relpath} raised {type(exc).__name__}: {exc}"}) from None
    return module


# ----------------------------------------------------------------- main loop

def environment() -> dict:
    cuda = torch.cuda.is_available()
    return {
        "python": platform.python_version(), "executable": sys.executable,
        "torch": torch.__version__, "numpy": np.__version__,
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "torch_threads": torch.get_num_threads(),
        "cuda": cuda, "cuda_devices": [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
        if cuda else [],
        "noise_backends": {"cpu": es_rng.available_backends("cpu")},
        "pid": os.getpid(),
        # after the clone's modules loaded: a reference (or a -ffast-math library it loads) may have set
        # the CPU's FTZ/DAZ flags, which the parent's own probe cannot see (docs/parity.md "Subnormals")
        "flush_to_zero": list(flush_to_zero_status().findings),
    }


def _error(exc: BaseException) -> dict:
    info = getattr(exc, "info", None)
    out = {"kind": info["kind"] if info else type(exc).__name__,
           "message": str(exc) if info else f"{type(exc).__name__}: {exc}",
           "traceback": "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))[-4000:]}
    if info:   # a load failure found at call time: which file, and which Python it needs; an interface
        # error of a loop driver: where the reference read the name the driver did not provide
        out.update({k: info[k] for k in ("file", "needs", "line", "function", "name") if k in info})
    return out


def serve(target: str, load_modules, handlers: dict, threads: int | None = None):
    """Run the driver: load modules, send hello, answer commands until "exit" or EOF.

    load_modules(clone) -> {module_key: module or ReferenceLoadError};
    handlers: op -> fn(case, modules) -> reply dict (without id).
    """
    parser = argparse.ArgumentParser()
    parser.add_argument("--clone", required=True)
    parser.add_argument("--reply-fd", type=int, required=True)
    args = parser.parse_args()
    # not inherited by processes the reference starts: a reply channel held open by a grandchild would
    # hide this process's death from the parent (issue 13 item 3)
    os.set_inheritable(args.reply_fd, False)
    reply = os.fdopen(args.reply_fd, "w", buffering=1)
    if threads:
        torch.set_num_threads(threads)
    clone = Path(args.clone).resolve()
    sys.path.insert(0, str(clone))
    install_hook()
    modules = load_modules(clone)
    hello = {"hello": target, "environment": environment(),
             "modules": {k: (None if not isinstance(v, ReferenceLoadError) else v.info)
                         for k, v in modules.items()}}
    reply.write(json.dumps(hello) + "\n")
    for line in sys.stdin:
        if not line.strip():
            continue
        command = json.loads(line)
        if command.get("op") == "exit":
            break
        answer = {"id": command.get("id")}
        if command.get("clone") and Path(command["clone"]).resolve() != clone:
            clone, modules = switch_clone(clone, Path(command["clone"]).resolve(), load_modules)
        try:
            answer.update(handlers[command["op"]](command, modules))
            answer.setdefault("status", "ok")
        except Exception as exc:  # noqa: BLE001 - a reference failure is a row, not a crash
            answer.update({"status": "error", "error": _error(exc)})
        HOOK.configure(None, {}, "correlated", "poly32", None, "contract")
        flush = flush_to_zero_status()   # the op may have loaded more of the clone, or set the flags itself
        if flush.flushing:
            answer["flush_to_zero"] = list(flush.findings)
        out = command.get("out")
        if out:
            Path(out).mkdir(parents=True, exist_ok=True)
            tmp = Path(out) / "status.json.tmp"
            tmp.write_text(json.dumps(answer, indent=1, sort_keys=True))
            os.replace(tmp, Path(out) / "status.json")
        reply.write(json.dumps(answer) + "\n")
        sys.stdout.flush()


def switch_clone(old: Path, new: Path, load_modules):
    """Serve another clone of the same target from now on (a mutant catalog runs many clones in one
    child): the old clone leaves sys.path and sys.modules, the new one's modules are loaded."""
    for name, module in list(sys.modules.items()):
        origin = getattr(module, "__file__", None) or ""
        if origin.startswith(str(old) + os.sep):
            del sys.modules[name]
    if str(old) in sys.path:
        sys.path.remove(str(old))
    sys.path.insert(0, str(new))
    return new, load_modules(new)


def module_or_raise(modules: dict, key: str):
    module = modules[key]
    if isinstance(module, ReferenceLoadError):
        raise module
    return module
