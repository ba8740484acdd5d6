"""The child side of the oracle protocol, shared by the per-target drivers.

Runs ONLY in the child interpreter that executes reference code
(docs/references.md §3); the esverify package never imports this file. It
provides:

- the channel: commands arrive as JSON lines on stdin; replies leave as
  JSON lines on a dedicated pipe fd (`--reply-fd`). The parent points the
  child's stdout and stderr at a log file, so a reference's prints can
  never corrupt a reply;
- the stand-in model runner: the model is a real torch.nn.Module (nested
  submodules after the dotted names, tied aliases) whose parameter
  iterators, on the model or any submodule, record the slot index of the
  tensor they are about to yield, which is how a draw is attributed to a slot;
- the noise hook: torch's gaussian entry points replaced by functions that
  map the generator's `initial_seed()` (a small handle) to an esverify
  member seed, derive the stream seed of the current slot
  (docs/CONTRACT.md §4), draw with esverify.rng in f32 and round to the
  requested dtype, device and shape. Every call torch computes bit for
  bit like `torch.randn(size, generator=g)` is accepted (docs/references.md
  §3b); a draw without a generator, with an unknown seed, or that is
  other numbers (another mean or std, a non-contiguous result) raises
  `NoiseAttributionError`: torch's own noise never gets in;
- generator semantics (docs/references.md §3a): a generator is a stream that
  each draw advances and a reseed rewinds; a draw past position 0 is
  recorded with its position; a generator of another device than the
  requested one is refused, as torch refuses it; under `native` noise
  every entry point calls torch's own function unchanged, refuses nothing,
  and the hook only records the draws (`uninstall_hook` puts torch's
  functions back altogether);
- draw accounting: each reference call should draw exactly once per slot
  per seed; the findings per call (eager, missing, extra, advanced) go
  back to the parent, which names the diagnoses per row;
- loading reference modules by path with plain-language diagnoses of
  SyntaxError (which Python the file needs), missing packages and other
  import failures;
- tensor I/O as raw bit patterns (.npz), so nothing is lost in transit.
"""
from __future__ import annotations

import collections
import gc
import importlib.util
import io
import json
import math
import os
import platform
import sys
import traceback
import weakref
from pathlib import Path
from typing import NamedTuple

import numpy as np
import torch

import child_channel
import child_coverage
import placeholders
from esverify import rng as es_rng
from esverify.exactsum import loop_rewards
from esverify.numerics_probe import flush_to_zero_status
from esverify.rng.memo import RangeMemo, served_stream

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

class _Cursor:
    """What the modules of one stand-in model share: the slot of each parameter (by identity) and the
    slot most recently yielded. A plain object, so nn.Module does not register it."""

    def __init__(self, tensors):
        self.tensors = tensors
        self.slot_of = {id(t): k for k, t in enumerate(tensors)}
        self.current = None

    def note(self, value):
        slot = self.slot_of.get(id(value))
        if slot is not None and self.tensors[slot] is value:   # not a stale id (a deep copy's parameter)
            self.current = slot


class _Node(torch.nn.Module):
    """A submodule of the stand-in model. Every parameter iterator of torch.nn.Module (named_parameters,
    parameters, with any prefix/recurse/remove_duplicate, on the root or on any submodule) runs through
    `_named_members`; this one notes the slot of each parameter just before yielding it."""

    def _named_members(self, get_members_fn, prefix="", recurse=True, remove_duplicate=True):
        cursor = self.__dict__.get("_cursor")
        for name, value in super()._named_members(get_members_fn, prefix, recurse, remove_duplicate):
            if cursor is not None:
                cursor.note(value)
            yield name, value


class _NodeList(_Node, torch.nn.ModuleList):
    """A container whose children are named 0, 1, ... (`model.layers`): indexable like a real model's."""


def _tree(paths):
    """Nested dicts of the dotted parameter paths: {part: subtree or None (a parameter)}; ValueError
    for an empty part or a name that is both a parameter and a module."""
    root = {}
    for path in paths:
        parts = path.split(".")
        if not all(parts):
            raise ValueError(f"parameter name {path!r} has an empty part")
        node = root
        for part in parts[:-1]:
            child = node.setdefault(part, {})
            if child is None:
                raise ValueError(f"parameter name {path!r}: {part!r} is a parameter and a module")
            node = child
        if parts[-1] in node:
            raise ValueError(f"parameter name {path!r} is given twice or is also a module")
        node[parts[-1]] = None
    return root


class StandInModel(_Node):
    """The parameter set as a real torch.nn.Module (docs/references.md §3): each dotted name is an
    `nn.Parameter` (requires_grad False, sharing storage with the tensor given) in nested submodules
    (`model.layers` an indexable ModuleList), and each alias of `ties` ({alias: slot name}) is the
    same Parameter registered a second time, as a tied output head is. Every Module API works
    (named_parameters / parameters with any arguments, state_dict, modules, buffers, ...).

    names, tensors: the slots, in the order torch walks the module (a submodule's own parameters
    before its children's, each module's parameters contiguous, as a real model yields them;
    ValueError otherwise, naming the first name out of place). `.names` / `.tensors`: the slots in
    that order (`.tensors` the very Parameters the module holds). `current` is the slot most
    recently yielded by any parameter iterator of the model or of a submodule (it stays at the last
    one once iteration ends), so a reference that materialises the list first attributes every draw
    to the last slot: the draw accounting then reports eager consumption.
    """

    def __init__(self, names, tensors, ties=None):
        super().__init__()
        names, tensors, ties = list(names), list(tensors), dict(ties or {})
        if len(names) != len(tensors) or len(set(names)) != len(names):
            raise ValueError(f"stand-in model: {len(names)} names ({len(set(names))} distinct) for "
                             f"{len(tensors)} tensors")
        params = [t if isinstance(t, torch.nn.Parameter) else torch.nn.Parameter(t, requires_grad=False)
                  for t in tensors]
        by_name = dict(zip(names, params))
        for alias, target in ties.items():
            if target not in by_name or alias in by_name:
                raise ValueError(f"stand-in model: tie {alias!r} -> {target!r} must name a new alias of a slot")
        cursor = _Cursor(params)
        self._cursor = cursor
        self._build(self, _tree(names + list(ties)), "", {**by_name, **{a: by_name[t] for a, t in ties.items()}},
                    cursor)
        walked = [n for n, _ in torch.nn.Module.named_parameters(self)]
        if walked != names:
            first = next(k for k, (a, b) in enumerate(zip(walked, names)) if a != b)
            raise ValueError(f"stand-in model: the names are not in module order: slot {first} is {names[first]!r} "
                             f"but torch walks {walked[first]!r} there (a module's own parameters come before "
                             "its children's, and each module's parameters are contiguous)")
        self.names, self.tensors, self.ties = names, params, ties
        cursor.current = None

    @staticmethod
    def _build(module, tree, prefix, params, cursor):
        for part, sub in tree.items():
            if sub is None:
                module.register_parameter(part, params[prefix + part])
                continue
            keys = list(sub)
            numbered = keys == [str(k) for k in range(len(keys))] and all(sub[k] is not None for k in keys)
            child = _NodeList() if numbered else _Node()
            child._cursor = cursor
            if isinstance(child, _NodeList):
                for key in keys:
                    child.append(_Node())
                    child[int(key)]._cursor = cursor
                    StandInModel._build(child[int(key)], sub[key], f"{prefix}{part}.{key}.", params, cursor)
            else:
                StandInModel._build(child, sub, f"{prefix}{part}.", params, cursor)
            module.add_module(part, child)

    @property
    def current(self):
        return self._cursor.current

    @current.setter
    def current(self, slot):
        self._cursor.current = slot


class StandInModelRunner:
    def __init__(self, model):
        self.model = model


# ----------------------------------------------------------------- noise hook

class GeneratorDeviceError(RuntimeError):
    """A draw on a generator of another device than the requested one (torch refuses it too)."""


#: torch's gaussian entry points as the child found them: the hook delegates to these, and
#: uninstall_hook puts them back
ORIGINALS = {"randn": torch.randn, "randn_like": torch.randn_like, "normal": torch.normal,
             "normal_": torch.Tensor.normal_}


class Draw(NamedTuple):
    """One gaussian draw a reference asked for, parsed (docs/references.md §3b): `equivalent` when
    torch computes exactly `torch.randn(shape, generator=generator, dtype=dtype, device=device)`,
    else `why` says what differs."""
    entry: str
    shape: tuple
    dtype: torch.dtype
    device: torch.device
    generator: object
    out: object = None
    requires_grad: bool = False
    equivalent: bool = True
    why: str = ""


def _number(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _standard(mean, std) -> str:
    """'' when (mean, std) are the Python numbers +0 and 1 (standard normals), else why not."""
    if not (_number(mean) and _number(std)):
        return f"mean/std given as {type(mean).__name__}/{type(std).__name__}, not numbers"
    if float(mean) != 0.0 or math.copysign(1.0, float(mean)) < 0 or float(std) != 1.0:
        return f"mean {mean!r} and std {std!r} (the standard normal's are 0 and 1)"
    return ""


def _shape(size) -> tuple:
    if len(size) == 1 and isinstance(size[0], (tuple, list, torch.Size)):
        size = tuple(size[0])
    return tuple(int(s) for s in size)


def parse_randn(*size, generator=None, dtype=None, device=None, out=None, layout=None, requires_grad=False,
                pin_memory=False, names=None, **kwargs) -> Draw:
    """torch.randn(*size, generator=..., dtype=..., device=..., out=...)."""
    if "size" in kwargs:
        size = (kwargs.pop("size"),)
    if not size:    # torch.randn() and torch.randn(*()) have no size: torch raises TypeError too
        raise TypeError("randn() missing the size argument (as torch says for torch.randn(*()))")
    shape = _shape(size)
    dtype = dtype or (out.dtype if out is not None else torch.get_default_dtype())
    device = torch.device(device) if device is not None else (out.device if out is not None else torch.device("cpu"))
    why = (f"unsupported arguments {sorted(kwargs)}" if kwargs else
           "a named tensor" if names is not None else
           f"layout {layout}" if layout not in (None, torch.strided) else "")
    return Draw("torch.randn", shape, dtype, device, generator, out, requires_grad, not why, why)


def parse_randn_like(input, *, generator=None, dtype=None, layout=None, device=None, requires_grad=False,
                     memory_format=torch.preserve_format) -> Draw:
    """torch.randn_like(input, generator=...): fills in memory order, so equivalent for a result laid
    out contiguously only."""
    contiguous = memory_format is torch.contiguous_format or (memory_format is torch.preserve_format
                                                              and input.is_contiguous())
    why = (f"layout {layout}" if layout not in (None, torch.strided) else
           "" if contiguous else "a non-contiguous result (torch fills it in memory order)")
    return Draw("torch.randn_like", tuple(input.shape), dtype or input.dtype,
                torch.device(device) if device is not None else input.device, generator, None, requires_grad,
                not why, why)


def parse_normal(*args, generator=None, out=None, dtype=None, layout=None, device=None, pin_memory=False,
                 requires_grad=False, **kwargs) -> Draw:
    """torch.normal(mean, std, size, generator=...): standard normals only for mean 0, std 1 numbers."""
    names = ("mean", "std", "size")
    given = dict(zip(names, args))
    given.update({k: kwargs.pop(k) for k in names if k in kwargs})
    mean, std, size = given.get("mean", 0.0), given.get("std", 1.0), given.get("size")
    tensors = [x for x in (mean, std) if isinstance(x, torch.Tensor)]
    if size is not None:
        shape = _shape((size,))
    elif tensors:
        shape = tuple(torch.broadcast_shapes(*(t.shape for t in tensors)))
    else:
        shape = ()
    if tensors:
        dtype, device = dtype or tensors[0].dtype, torch.device(device) if device is not None else tensors[0].device
    else:
        dtype = dtype or (out.dtype if out is not None else torch.get_default_dtype())
        device = torch.device(device) if device is not None else (out.device if out is not None
                                                                  else torch.device("cpu"))
    why = (f"unsupported arguments {sorted(kwargs)}" if kwargs else _standard(mean, std) or
           ("no size" if size is None else f"layout {layout}" if layout not in (None, torch.strided) else ""))
    return Draw("torch.normal", shape, dtype, device, generator, out, requires_grad, not why, why)


def parse_normal_(self, mean=0, std=1, *, generator=None) -> Draw:
    """Tensor.normal_(mean=0, std=1, generator=...): fills `self` in memory order."""
    why = _standard(mean, std) or ("" if self.is_contiguous() else
                                   "a non-contiguous tensor (torch fills it in memory order)")
    return Draw("Tensor.normal_", tuple(self.shape), self.dtype, self.device, generator, self, False, not why, why)


def _default_generator(device):
    if device.type == "cuda":
        return torch.cuda.default_generators[device.index if device.index is not None
                                             else torch.cuda.current_device()]
    return torch.default_generator


#: bytes of generated noise the hook keeps (NoiseHook.cache, an esverify.rng.memo.RangeMemo)
NOISE_CACHE_BYTES = 64 << 20

#: the folder of the contract ranges the parent drew and serves (its command's "served": esverify.oracle.
#: noise_memo), None: this child draws all its noise
SERVED = {"folder": None}
#: elements of contract noise the command running read from the parent ("served") or drew ("drawn")
NOISE_ELEMENTS: collections.Counter = collections.Counter()


def contract_range(stream: int, first: int, n: int, mapping: str, backend, device):
    """Elements first .. first+n-1 of contract stream `stream` (f32, CPU numpy array for device None, else a
    tensor on `device`): for the CPU, the parent's copy when it serves it (the same bits: its name holds what
    decides them, esverify.rng.memo.served_name), else drawn here with `backend` (None: the fastest here,
    numba where it compiles, else numpy). A CUDA range is drawn on the device (faster than a copy to it)."""
    if device is None or torch.device(device).type == "cpu":
        folder = SERVED["folder"]
        if folder:
            values = served_stream(folder, mapping, backend or es_rng.default_backend("cpu"), stream, first, n)
            if values is not None:
                NOISE_ELEMENTS["served"] += n
                return values if device is None else torch.from_numpy(values)
    NOISE_ELEMENTS["drawn"] += n
    return es_rng.gaussian(stream, n, first=first, mapping=mapping, device=device, backend=backend)


class NoiseHook:
    """The replacement for torch's gaussian entry points (docs/references.md §3, §3a and §3b).

    Every call that draws standard normals from a given generator and that torch computes bit for
    bit like `torch.randn(size, generator=g)` (torch.randn with or without `out`, torch.randn_like
    of a contiguous tensor, torch.normal(0, 1, size), Tensor.normal_() / normal_(0, 1) of a
    contiguous tensor, so also torch.nn.init.normal_) is one draw of `shape` from `generator`.

    Under `contract` noise a generator is modelled as a stream: a generator
    seeded s starts at element 0 of the contract stream that s maps to
    (for the slot being processed, docs/CONTRACT.md §4), every draw returns the next
    elements and advances its position, and reseeding rewinds it. The
    position is tracked per generator object: after each draw the hook
    records a digest of the generator's state (and advances the real
    generator by one element so that a reseed, by any path, changes the
    digest back to a fresh one); a later draw whose generator still has
    that digest continues from the recorded position, exactly as torch
    would. A call that is not such a draw (no generator, an unknown seed,
    another mean or std, a non-contiguous result) raises NoiseAttributionError.

    Under `native` noise every call goes to torch's own function with the caller's arguments,
    unchanged, and is never refused; the hook only records each draw's slot and position (a draw
    it cannot place, without a member's seed, goes to `foreign`).

    Each draw is recorded as (handle, slot, position, elements) for the draw accounting.
    """

    def __init__(self):
        self.original = ORIGINALS["randn"]
        self.model = None
        self.table = {}
        self.scheme = "correlated"
        self.mapping = "poly32"
        self.backend = None
        self.noise = "contract"
        self.draws = []
        self.foreign = []
        self.cache = RangeMemo(NOISE_CACHE_BYTES)   # the child's life long: its key holds mapping and backend
        self.positions = weakref.WeakKeyDictionary()
        self.resolver = None

    def configure(self, model, table, scheme, mapping, backend, noise="contract", resolver=None):
        """Set up the hook for one case. `resolver`, when given, replaces the handle table and the
        model's slot cursor: resolver(handle) -> (u64 member seed, slot), raising
        NoiseAttributionError for a handle it cannot place. A loop whose members run in threads on
        several model copies at once (the paper's scripts, docs/references.md §6) has no single slot
        cursor, and its per-parameter seeds (`seed + k`) say the slot themselves."""
        self.model, self.table = model, dict(table)
        self.scheme, self.mapping, self.backend, self.noise = scheme, mapping, backend, noise
        self.resolver = resolver
        self.draws = []
        self.foreign = []
        self.positions = weakref.WeakKeyDictionary()

    @staticmethod
    def _digest(generator) -> bytes:
        # the whole state (5,056 bytes for a CPU generator), compared as bytes: hashing it cost three
        # times the copy, and equal bytes are what "the same state" means
        return generator.get_state().numpy().tobytes()

    def _position(self, generator) -> int:
        """Elements this generator already delivered since it was (re)seeded."""
        try:
            digest, position = self.positions[generator]
        except (KeyError, TypeError):
            return 0
        return position if self._digest(generator) == digest else 0

    def _moved(self, generator, position):
        try:
            self.positions[generator] = (self._digest(generator), position)
        except TypeError:   # not weak-referenceable: every draw is taken as position 0
            pass

    # -- the entry points (installed by install_hook)
    def __call__(self, *args, **kwargs):
        """torch.randn."""
        return self._enter(ORIGINALS["randn"], parse_randn, args, kwargs)

    def randn_like(self, *args, **kwargs):
        return self._enter(ORIGINALS["randn_like"], parse_randn_like, args, kwargs)

    def normal(self, *args, **kwargs):
        return self._enter(ORIGINALS["normal"], parse_normal, args, kwargs)

    def normal_(self, tensor, *args, **kwargs):
        return self._enter(ORIGINALS["normal_"], parse_normal_, (tensor, *args), kwargs)

    @child_coverage.unprofiled
    def _enter(self, original, parse, args, kwargs):
        if self.noise == "native":
            return self._native(original, parse, args, kwargs)
        draw = parse(*args, **kwargs)     # a call torch would refuse raises TypeError here too
        if not draw.equivalent:
            raise NoiseAttributionError(
                f"{draw.entry} with {draw.why} is not bit for bit torch.randn(size, generator=g), so contract "
                "noise cannot stand in for it (docs/references.md §3b); torch's own noise is never let in")
        return self._draw(draw)

    def _native(self, original, parse, args, kwargs):
        """torch's own function with the caller's arguments; the draw is recorded when it can be read."""
        try:
            draw = parse(*args, **kwargs)
            generator = draw.generator if draw.generator is not None else _default_generator(draw.device)
            position = self._position(generator)
        except Exception:  # noqa: BLE001 - recording must never change what torch does
            return original(*args, **kwargs)
        result = original(*args, **kwargs)
        try:
            numel, slot = math.prod(draw.shape), getattr(self.model, "current", None)
            handle = int(generator.initial_seed())
            if draw.generator is not None and handle in self.table and slot is not None:
                self.draws.append((handle, slot, position, numel))
            else:
                self.foreign.append({"entry": draw.entry, "seed": handle if draw.generator is not None else None,
                                     "slot": slot, "elements": numel})
            self._moved(generator, position + numel)
        except Exception:  # noqa: BLE001
            pass
        return result

    def _draw(self, draw: Draw):
        shape, generator, device = draw.shape, draw.generator, draw.device
        if generator is None:
            raise NoiseAttributionError(
                f"{draw.entry} was called without a generator: the draw cannot be attributed to a "
                "member, and torch's own noise is never let in (docs/references.md §3)")
        handle = int(generator.initial_seed())
        if self.resolver is not None:
            return self._resolved(draw, handle)
        if handle not in self.table:
            raise NoiseAttributionError(
                f"{draw.entry} drew with unknown seed {handle}: not a member handle of this case "
                f"(handles: {sorted(self.table)[:8]}{' ...' if len(self.table) > 8 else ''}); "
                "a reference that derives per-tensor seeds (seed + offset) is not attributable")
        if self.model is None or self.model.current is None:
            raise NoiseAttributionError(
                f"{draw.entry} drew with seed {handle} before any parameter was yielded: no slot to attribute")
        slot = self.model.current
        if generator.device.type != device.type:     # torch: "Expected a '<dev>' device type for generator"
            raise GeneratorDeviceError(
                f"{draw.entry}(device={device.type!r}) was given a generator on {generator.device.type!r}: torch "
                f"refuses a generator of another device type (docs/references.md §3a); slot {slot} "
                f"({self.model.names[slot]})")
        numel = math.prod(shape)
        position = self._position(generator)
        self.draws.append((handle, slot, position, numel))
        stream = es_rng.stream_seed(self.table[handle], slot, self.scheme)
        return self._deliver(draw, self._range(stream, position, numel, device), position, numel)

    def _range(self, stream: int, position: int, numel: int, device):
        """Elements position .. position+numel-1 of `stream` (f32 on `device`), shared: _deliver copies them.
        A member's perturb, restore and update draw the same ranges, correlated noise repeats one range
        over equal-size tensors, and the cases of a run share their member seeds: most draws copy."""
        key = (self.mapping, self.backend, stream, position, numel, str(device))
        noise, _ = self.cache.get(key, lambda: contract_range(stream, position, numel, self.mapping, self.backend,
                                                              device))
        return noise

    def _deliver(self, draw: Draw, noise, position: int, numel: int):
        """The f32 stream elements `noise` as the draw asked for them (dtype, shape, `out`), the real
        generator advanced (a reseed, by any path, then shows as a fresh state) and its position moved."""
        shaped = noise.reshape(draw.shape)   # a view of the cached stream, never handed out: one copy, in the draw's dtype
        result = shaped.clone() if draw.dtype == noise.dtype else shaped.to(draw.dtype)
        self.original((1,), generator=draw.generator, device=draw.device)
        if draw.out is not None:
            if tuple(draw.out.shape) != draw.shape:
                draw.out.resize_(draw.shape)
            draw.out.copy_(result)
            result = draw.out
        else:
            result.requires_grad_(draw.requires_grad)
        self._moved(draw.generator, position + numel)
        return result

    def _resolved(self, draw: Draw, handle: int):
        """A draw placed by the resolver (see configure): same stream semantics as _draw."""
        shape, generator, device = draw.shape, draw.generator, draw.device
        member, slot = self.resolver(handle)
        if generator.device.type != device.type:
            raise GeneratorDeviceError(
                f"{draw.entry}(device={device.type!r}) was given a generator on {generator.device.type!r}: torch "
                f"refuses a generator of another device type (docs/references.md §3a); seed {handle}")
        numel = math.prod(shape)
        position = self._position(generator)
        self.draws.append((handle, slot, position, numel))
        return self._deliver(draw, self._range(es_rng.stream_seed(member, slot, self.scheme), position, numel,
                                               device), position, numel)


HOOK = NoiseHook()


def _tensor_normal_(self, *args, **kwargs):
    """Tensor.normal_ while the hook is installed (a plain function, so it binds like a method)."""
    if torch.randn is not HOOK:   # the loop driver put torch.randn back for native noise: torch's own, untouched
        return ORIGINALS["normal_"](self, *args, **kwargs)
    return HOOK.normal_(self, *args, **kwargs)


def _passthrough(name):
    def entry(*args, **kwargs):
        if torch.randn is not HOOK:   # as above: nothing of ours between the reference and torch
            return ORIGINALS[name](*args, **kwargs)
        return getattr(HOOK, name)(*args, **kwargs)
    entry.__name__ = name
    return entry


def install_hook():
    """Replace torch's gaussian entry points by the hook's (docs/references.md §3)."""
    torch.randn = HOOK
    torch.randn_like = _passthrough("randn_like")
    torch.normal = _passthrough("normal")
    torch.Tensor.normal_ = _tensor_normal_


def uninstall_hook():
    """torch's own gaussian entry points back (a native-noise loop: nothing of ours between the
    reference and torch); install_hook puts the hook back."""
    torch.randn, torch.randn_like, torch.normal = ORIGINALS["randn"], ORIGINALS["randn_like"], ORIGINALS["normal"]
    torch.Tensor.normal_ = ORIGINALS["normal_"]


# ----------------------------------------------------------------- draw accounting

def expected_draws(tensors, seeds, caching=False) -> collections.Counter:
    """One draw per (seed, slot); with caching one per (seed, distinct (device, dtype, shape)): the first
    slot of each, the same slots for every seed. A seed given twice expects its draws twice."""
    tensors = list(tensors)
    if caching:
        first: dict = {}
        for slot, tensor in enumerate(tensors):
            first.setdefault((str(tensor.device), tensor.dtype, tuple(tensor.shape)), slot)
        slots = list(first.values())
    else:   # no key per tensor: a row checks this for every member of every call
        slots = range(len(tensors))
    return collections.Counter({(seed, slot): count for seed, count in collections.Counter(map(int, seeds)).items()
                                for slot in slots})


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
        foreign, HOOK.foreign = HOOK.foreign, []
        got = collections.Counter((h, s) for h, s, _, _ in draws)
        exp_slots = {s for _, s in expected}
        got_slots = {s for _, s in got}
        finding = {"call": call, "draws": len(draws), "expected": sum(expected.values())}
        advanced = [{"slot": s, "name": self._name(s), "position": p} for _, s, p, _ in draws if p]
        if advanced:
            finding["advanced"] = advanced[:8]
            finding["advanced_count"] = len(advanced)
        if foreign:
            # native noise: torch drew for seeds that are no member's (or without a generator); the slots
            # those draws served are not "missing", the values decide
            finding["foreign"] = [dict(f, name=self._name(f["slot"]) if f["slot"] is not None else "")
                                  for f in foreign[:8]]
            finding["foreign_count"] = len(foreign)
        # eager: the parameters were consumed first, so every draw sits on the LAST slot yielded
        if foreign:
            pass
        elif len(exp_slots) > 1 and got_slots == {max(exp_slots)}:
            finding["eager"] = {"slot": next(iter(got_slots)), "name": self._name(next(iter(got_slots)))}
        else:
            # .get, not Counter's [] (its __missing__ is a Python call per absent key)
            missing = sorted({key[1] for key, count in expected.items() if got.get(key, 0) < count})
            if missing:
                finding["missing"] = [{"slot": s, "name": self._name(s)} for s in missing]
            extra = sorted({key[1] for key, count in got.items() if count > expected.get(key, 0)})
            if extra:
                finding["extra"] = [{"slot": s, "name": self._name(s)} for s in extra]
        if len(finding) > 3:
            self.calls.append(finding)

    def result(self) -> dict:
        return {"ok": not self.calls, "calls": self.calls[:12]}


# ----------------------------------------------------------------- tensor I/O

#: the parameter sets this child read: path -> (the file's bytes, names, CPU tensors); at most SETS_KEPT
#: of them and SETS_BYTES of files (the tensors take about as much again); the newest always kept
_SETS: collections.OrderedDict = collections.OrderedDict()
SETS_KEPT = 8
SETS_BYTES = 32 << 20


@child_coverage.unprofiled
def load_set(path, device):
    """A parameter set written by the parent: names, tensors (bit-exact, new tensors each call) on `device`.

    Every row reads its set, and parsing the .npz was 8% of a loop child's time: a set whose file holds the
    same bytes as when this child last parsed it (compared in full, not by size or time) is copied from
    what that parse gave."""
    data = Path(path).read_bytes()
    key = str(path)
    kept = _SETS.get(key)
    if kept is None or kept[0] != data:
        kept = _SETS[key] = (data, *_parse_set(io.BytesIO(data)))
    _SETS.move_to_end(key)
    while len(_SETS) > 1 and (len(_SETS) > SETS_KEPT or sum(len(v[0]) for v in _SETS.values()) > SETS_BYTES):
        _SETS.popitem(last=False)
    _, names, tensors = kept
    return list(names), [t.to(device, copy=True) for t in tensors]


def _parse_set(source):
    with np.load(source) as data:
        names = [str(n) for n in data["names"]]
        dtypes = [str(d) for d in data["dtypes"]]
        tensors = []
        for k, dt in enumerate(dtypes):
            raw = data[f"slot{k}"]
            torch_dtype = DTYPES[dt]
            width = torch.finfo(torch_dtype).bits
            signed = {16: np.int16, 32: np.int32, 64: np.int64}[width]
            t = torch.from_numpy(np.ascontiguousarray(raw).view(signed).copy())
            tensors.append(t.view(torch_dtype).reshape(raw.shape))
    return names, tensors


def load_ties(path) -> dict:
    """{alias: slot name} of a parameter set (an alias is the same Parameter as its slot: a tied output
    head); {} for a set without ties."""
    with np.load(path) as data:
        if "ties" not in data:
            return {}
        return {str(a): str(t) for a, t in data["ties"].reshape(-1, 2)}


def tensor_bits(t, copy: bool = True) -> np.ndarray:
    """The bit patterns of `t` as unsigned integers of its width, a copy of its own (copy=False: a view of a
    CPU tensor's memory where one exists, for a caller that is done with it before `t` changes)."""
    t = t.detach().to("cpu").contiguous()
    width = torch.finfo(t.dtype).bits
    np_uint, torch_int = _INT_VIEW[width]
    bits = t.view(torch_int).numpy().view(np_uint)
    return bits.copy() if copy else bits


@child_coverage.unprofiled
def save_results(path, tensors):
    # views, not copies: np.savez has written them when it returns (a run's result files are 400 MB)
    arrays = {f"slot{k}": tensor_bits(t, copy=False) for k, t in enumerate(tensors)}
    arrays["dtypes"] = np.array([DTYPE_NAMES[t.dtype] for t in tensors])
    tmp = str(path) + ".tmp.npz"
    np.savez(tmp, **arrays)
    os.replace(tmp, path)


@child_coverage.unprofiled
def reward(tensors, target: float, dtype=None) -> float:
    """The loop's reward: -fsum((f64(theta) - target)**2), fsum per tensor, then over the
    tensors; each tensor first rounded to `dtype` (the precision of the engine computing it; None: its
    own). The parent's function itself (esverify.exactsum.loop_rewards), so both sides agree bit for bit."""
    return loop_rewards(tensors, [target], dtype)[0]


@child_coverage.unprofiled
def rewards(tensors, targets, dtype=None) -> list:
    """`reward` of each of `targets` (floats), the tensors converted once for all of them: a stand-in engine
    scores a request's prompts on weights that do not change within it (loop_stubs.StandInEngine)."""
    return loop_rewards(tensors, list(targets), dtype)


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


#: callables run after every command (a driver's own hooks reset themselves there)
AFTER_COMMAND: list = []
#: callables given every answer before it is sent (child_loops adds the functions the command ran)
ANSWER_HOOKS: list = []


class _UnrecordedStack:
    """Stands for the traceback module inside torch's device modules (cuda, xpu, mtia): their lazy calls
    (torch.manual_seed queues a seed for each device not yet initialised) record
    `traceback.format_stack()` per call, only to word an error should the queued call fail when the
    device starts. References reseed per member, and on a CPU child that text cost a fifth of a loop
    row's time. The queued calls themselves are kept and run as before; only their call site is not
    recorded."""

    @staticmethod
    def format_stack(*args, **kwargs):
        return ["  (call site not recorded by the esverify parity child)\n"]

    def __getattr__(self, name):
        return getattr(traceback, name)


def quiet_lazy_device_calls():
    """Give torch's device modules `_UnrecordedStack` in place of the traceback module (where they hold
    the stdlib one; a torch without them is left as it is)."""
    for name in ("cuda", "xpu", "mtia"):
        module = getattr(torch, name, None)
        if module is not None and getattr(module, "traceback", None) is traceback:
            module.traceback = _UnrecordedStack()


def freeze_heap():
    """Collect, then move every object alive now out of the cyclic collector's reach (gc.freeze): the
    collections a reference makes (per member, per save) then scan only what was made since, not
    torch's and numpy's heap. Called between commands, when nothing of a row is meant to be alive."""
    gc.collect()
    gc.freeze()


def serve(target: str, load_modules, handlers: dict, threads: int | None = None):
    """Run the driver: load modules, send hello, answer commands until "exit" or EOF.

    load_modules(clone) -> {module_key: module or ReferenceLoadError};
    handlers: op -> fn(case, modules) -> reply dict (without id).
    """
    args = child_channel.arguments()
    child_coverage.configure(lines=args.line_coverage)   # parity --line-coverage: coverage.py lines
    reply = child_channel.reply_pipe(args.reply_fd)
    if threads:
        torch.set_num_threads(threads)
    # the noise hook's draws on one thread: the values do not depend on it, and the parent and the other
    # references' children run beside this one
    es_rng.backends.set_numba_threads(1)
    clone = Path(args.clone).resolve()
    sys.path.insert(0, str(clone))
    placeholders.watch(clone)   # a later commit's absent optional imports cost no row (docs/parity.md)
    install_hook()
    quiet_lazy_device_calls()
    modules = load_modules(clone)
    freeze_heap()
    hello = {"hello": target, "environment": environment(),
             "modules": {k: (None if not isinstance(v, ReferenceLoadError) else v.info)
                         for k, v in modules.items()}, "placeholders": placeholders.served()}
    reply.write(json.dumps(hello) + "\n")

    def respond(command: dict, answer: dict) -> None:
        nonlocal clone, modules
        SERVED["folder"] = command.get("served") if isinstance(command.get("served"), str) else None
        NOISE_ELEMENTS.clear()
        if command.get("clone") and Path(command["clone"]).resolve() != clone:
            clone, modules = switch_clone(clone, Path(command["clone"]).resolve(), load_modules)
        try:
            answer.update(handlers[command["op"]](command, modules))
            answer.setdefault("status", "ok")
        except Exception as exc:  # noqa: BLE001 - a reference failure is a row, not a crash
            answer.update({"status": "error", "error": _error(exc)})
        HOOK.configure(None, {}, "correlated", "poly32", None, "contract")
        for hook in AFTER_COMMAND:   # other hooks a driver installed (numpy's legacy generator, ...)
            hook()
        for hook in ANSWER_HOOKS:
            hook(answer)
        if NOISE_ELEMENTS:   # how much of its contract noise the parent served (benchmarks, tests)
            answer["noise_elements"] = dict(NOISE_ELEMENTS)
        flush = flush_to_zero_status()   # the op may have loaded more of the clone, or set the flags itself
        if flush.flushing:
            answer["flush_to_zero"] = list(flush.findings)
        if placeholders.served():   # every one so far: the parent lists each once, as a note
            answer["placeholders"] = placeholders.served()
        freeze_heap()

    try:
        child_channel.answer_commands(reply, respond)
    finally:   # the coverage save SAVE_INTERVAL held back, also when a handler raised past this loop (a
        try:   # SystemExit), and before a thread the reference left could delay exit
            child_coverage.flush()
        except Exception:  # noqa: BLE001 - the record keeps its last save
            pass


#: objects the frozen heap may gain (the clones a child switched away from, whose modules only a collection of
#: the thawed heap can free) before a switch thaws and collects it; a clone's modules are a few thousand
THAW_AFTER = 100_000
#: gc.get_freeze_count() after the last collection of the whole heap ([] before the first switch)
_COLLECTED_AT: list = []


def switch_clone(old: Path, new: Path, load_modules):
    """Serve another clone of the same target from now on (a mutant catalog runs many clones in one
    child): the old clone leaves sys.path and sys.modules, the new one's modules are loaded and frozen.
    The old clone's modules (cycles: functions and their globals) stay in the frozen heap until it has
    gained THAW_AFTER objects; then the switch thaws it, so they are collected, and freezes it again once
    the new clone is loaded (otherwise the first op on the new clone pays that collection). Why not at
    every switch: a collection of the whole heap (torch's and numpy's, ~380k objects) cost 0.2 s of CPU,
    16 s over one catalog file's 78 switches (docs/benchmarks.md), to free a few thousand objects each."""
    if not _COLLECTED_AT:
        _COLLECTED_AT.append(gc.get_freeze_count())
    thaw = gc.get_freeze_count() - _COLLECTED_AT[0] > THAW_AFTER
    if thaw:
        gc.unfreeze()
    # names only: a loop variable holding the last module would keep it alive through the collection below
    prefix = str(old) + os.sep
    for name in [n for n, m in sys.modules.items() if (getattr(m, "__file__", None) or "").startswith(prefix)]:
        del sys.modules[name]
    if str(old) in sys.path:
        sys.path.remove(str(old))
    placeholders.unwatch(old)
    sys.path.insert(0, str(new))
    placeholders.watch(new)
    modules = load_modules(new)
    freeze_heap()
    if thaw:
        _COLLECTED_AT[0] = gc.get_freeze_count()
    return new, modules


def module_or_raise(modules: dict, key: str):
    module = modules[key]
    if isinstance(module, ReferenceLoadError):
        raise module
    return module
