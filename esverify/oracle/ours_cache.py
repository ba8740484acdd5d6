"""Our side of a case, computed once per catalog session (docs/parity.md, "Tests").

Design record: in `Runner.session` (mutant catalogs, fuzz shrinking) one child switches to variant after
variant of a reference's clone, and every variant runs the same cases. Our side of a row (the single-op
path's esverify.oracle.ours, the loop rows' run_ours) reads the case, the run's seed and mapping, the
noise backend, the parameter set and the adapter's profile, never the clone, so the session computes it
once per case and hands every later variant a copy. An `OursCache` keeps it for one session:

- the key is everything our side reads: every field of the Case (floats by their bit patterns, so two
  cases differing only in sigma, a handle or a NaN's payload never share an entry), the seed, the
  mapping, the noise backend, and what the path derives from them (the set variant and anchor, the
  loop's global seed and determinism switch); a case holding a value the key cannot spell exactly is
  not kept (computed every time, as without the cache);
- what is kept is a copy of our side's result taken when it was computed (tensors cloned, containers
  rebuilt), and each hit is a copy of that: no row can change what a later row is handed, whatever it
  does with its own copy;
- only a result is kept: our side raising is recomputed (and raises again) on every row;
- a `--impl` wrapper's side is never kept (it is the user's code, which may keep state between cases);
- the entries stop growing at BUDGET_BYTES of tensors (a later case is computed as without the cache).
"""
from __future__ import annotations

import copy
import struct
import threading
from dataclasses import fields, is_dataclass

import numpy as np
import torch

#: bytes of kept tensors at most (the catalogs' small sets keep a few MiB)
BUDGET_BYTES = 256 << 20


class Uncacheable(Exception):
    """A value the key cannot spell exactly (an object of a type it does not know)."""


def _spelled(value):
    """`value` as a hashable tuple that two values share only when our side cannot tell them apart: floats
    by their f64 bit patterns (a NaN's sign and payload kept, 0.0 and -0.0 apart), the type beside every
    scalar (True is not 1), containers element by element. Uncacheable for any other object."""
    if value is None or isinstance(value, (bool, int, str, bytes)):
        return (type(value).__name__, value)
    if isinstance(value, float):
        return ("float", struct.pack("<d", value))
    if isinstance(value, np.ndarray):
        return ("ndarray", value.dtype.str, value.shape, value.tobytes())
    if isinstance(value, np.generic):
        return ("np", value.dtype.str, value.tobytes())
    if isinstance(value, (list, tuple)):
        return (type(value).__name__, tuple(_spelled(v) for v in value))
    if isinstance(value, dict):
        return ("dict", tuple(sorted(((_spelled(k), _spelled(v)) for k, v in value.items()), key=repr)))
    if is_dataclass(value) and not isinstance(value, type):
        return (type(value).__qualname__, tuple((f.name, _spelled(getattr(value, f.name))) for f in fields(value)))
    raise Uncacheable(type(value).__name__)


def key(path: str, case, **reads) -> tuple | None:
    """The cache key of our side of `case` on `path` ("single" or "loop"), with `reads`: every other value
    that side reads (seed, mapping, backend, ...); None when something cannot be spelled exactly (that row
    is then computed, not kept)."""
    try:
        return (path, _spelled(case), _spelled(reads))
    except Uncacheable:
        return None


def _nbytes(value) -> int:
    """Bytes of the tensors and arrays inside `value` (lists, tuples, dicts, dataclasses)."""
    if isinstance(value, torch.Tensor):
        return value.element_size() * value.nelement()
    if isinstance(value, np.ndarray):
        return value.nbytes
    if isinstance(value, dict):
        return sum(_nbytes(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return sum(_nbytes(v) for v in value)
    if is_dataclass(value) and not isinstance(value, type):
        return sum(_nbytes(getattr(value, f.name)) for f in fields(value))
    return 0


def _copied(value):
    """A copy of `value` that shares no tensor, array, list or dict with it: containers rebuilt, tensors cloned,
    arrays copied, dataclasses rebuilt from copied fields, immutable scalars kept; anything else deep-copied.
    Cheaper than copy.deepcopy on a loop tape (hundreds of small tensors); aliasing between two places of
    `value` is not kept, which nothing reading our side's result relies on (no row writes into it)."""
    if value is None or isinstance(value, (bool, int, float, str, bytes)):
        return value
    if isinstance(value, torch.Tensor):
        return value.clone()
    if isinstance(value, np.ndarray):
        return value.copy()
    if isinstance(value, dict) and type(value) is dict:
        return {k: _copied(v) for k, v in value.items()}
    if type(value) in (list, tuple):
        return type(value)(_copied(v) for v in value)
    if is_dataclass(value) and not isinstance(value, type) and not hasattr(value, "__post_init__") \
            and all(f.init for f in fields(value)):
        return type(value)(**{f.name: _copied(getattr(value, f.name)) for f in fields(value)})
    return copy.deepcopy(value)


class OursCache:
    """Our side's results of one session, by `key`. Thread-safe (a catalog may run sessions side by side,
    each with its own cache; a session's rows run one at a time)."""

    def __init__(self, budget_bytes: int = BUDGET_BYTES):
        self.budget = budget_bytes
        self.hits = 0                 #: rows handed a kept result
        self.misses = 0               #: rows whose key was not kept yet (or could not be spelled)
        self._entries: dict = {}
        self._bytes = 0
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, k):
        """A copy (`_copied`) of the result kept under `k`, or None (a miss; `k` None is always one)."""
        with self._lock:
            entry = self._entries.get(k) if k is not None else None
            if entry is None:
                self.misses += 1
                return None
            self.hits += 1
        return _copied(entry)

    def put(self, k, result) -> None:
        """Keep a copy (`_copied`) of `result` under `k` (not when `k` is None, already kept, or over the budget)."""
        if k is None:
            return
        kept = _copied(result)
        size = _nbytes(kept)
        with self._lock:
            if k not in self._entries and self._bytes + size <= self.budget:
                self._entries[k] = kept
                self._bytes += size

    def storing(self, k, compute):
        """`compute` that also keeps what it returns under `k` (what raises is not kept)."""
        def run(*args, **kwargs):
            result = compute(*args, **kwargs)
            self.put(k, result)
            return result
        return run
