"""A bounded store of drawn noise ranges, for callers that draw the same range again.

A range of the contract is a pure function of what decides its bits (mapping, stream seed, first
element, length: docs/CONTRACT.md §4), so a caller that draws it again may copy it instead. The
parity oracle does so on both sides: our side's trainers (esverify.oracle.noise_memo) and the child's
noise hook (oracles/child_server.py), where a member's perturb, restore and update, and the rows
of one run, draw the same ranges. The trainer library itself never keeps noise.

`ServedRanges` and `served_range` hand ranges from one process to another (the parity parent to its
reference children, docs/parity.md "Served noise"): the parent writes each range it drew into a file of
its own folder (in shared memory, /dev/shm, where there is one), named by what decides its bits
(`served_name`); a child reads a range it would otherwise draw. A child without numba drew these
ranges with numpy, three times numba's CPU; reading one costs a twentieth of drawing it with numba.
"""
from __future__ import annotations

import os
import re
import threading
from collections import OrderedDict
from pathlib import Path


class RangeMemo:
    """Tensors kept under keys, least recently used out first once they pass `budget` bytes (an int
    >= 0; the newest is always kept, so the store holds at most the budget plus one range).

    The caller's key must hold everything that decides the bits (and the device). Tensors are shared:
    hand out copies. Thread-safe: two threads asking for one key at once may both draw it (the same
    bits), and one is kept. ValueError naming `budget` when it is not an int >= 0.
    """

    def __init__(self, budget: int):
        if isinstance(budget, bool) or not isinstance(budget, int) or budget < 0:
            raise ValueError(f"budget must be an int >= 0 (bytes), got {budget!r}")
        self.budget = budget
        self.bytes = 0
        self._kept: OrderedDict = OrderedDict()
        self._lock = threading.Lock()
        self._cleared = 0   # clear() calls so far: a range drawn across one is not kept

    def get(self, key, draw):
        """(tensor, hit): the tensor kept under `key` and True, or draw()'s tensor, now kept (unless clear()
        ran while it was drawn), and False."""
        with self._lock:
            kept = self._kept.get(key)
            if kept is not None:
                self._kept.move_to_end(key)
                return kept, True
            cleared = self._cleared
        tensor = draw()
        with self._lock:
            if cleared != self._cleared:
                return tensor, False
            old = self._kept.pop(key, None)   # another thread may have drawn the same range meanwhile
            if old is not None:
                self.bytes -= old.numel() * old.element_size()
            self._kept[key] = tensor
            self.bytes += tensor.numel() * tensor.element_size()
            while self.bytes > self.budget and len(self._kept) > 1:
                _, old = self._kept.popitem(last=False)
                self.bytes -= old.numel() * old.element_size()
        return tensor, False

    def keys(self) -> list:
        """The keys kept, least recently used first."""
        with self._lock:
            return list(self._kept)

    def __len__(self) -> int:
        return len(self._kept)

    def clear(self) -> None:
        """Forget every range kept."""
        with self._lock:
            self._kept.clear()
            self.bytes = 0
            self._cleared += 1


#: what a served file holds: the range's f32 values, little-endian, nothing else
SERVED_DTYPE = "<f4"
#: the chunk our side's trainer draws a tensor's noise in (esverify.es.numerics.DEFAULT_CHUNK, which a test
#: holds this to): a reference draws a whole tensor at once, which the parent served as pieces of this size
SERVED_GRID = 1 << 18
_NAME = re.compile(r"^[a-z0-9]+(\.[a-z]+)?-[0-9a-f]{16}-[0-9a-f]+-[0-9a-f]+\.f32$")


def served_name(mapping: str, backend: str | None, stream: int, first: int, n: int) -> str:
    """The file name of elements first .. first+n-1 of contract stream `stream` under `mapping`.

    The name holds what decides the bits (docs/CONTRACT.md §4): a bitwise-portable mapping's bits are
    the same on every backend (poly32, §3b), so its name leaves the backend out and a child without numba
    reads what the parent drew with numba; any other mapping (libm64, bit-exact per backend, §3a) names
    the backend (None: the default one of the process asking, which the caller resolves first).
    ValueError for a backend that a non-portable mapping needs and was not given, or bad numbers."""
    from .mappings import get_mapping
    portable = get_mapping(mapping).bitwise_portable
    if not portable and backend is None:
        raise ValueError(f"{mapping} is bit-exact only per backend (docs/CONTRACT.md §3a): name the backend")
    for name, value in (("stream", stream), ("first", first), ("n", n)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"{name} must be an int >= 0, got {value!r}")
    if stream >= 1 << 64:
        raise ValueError(f"stream must be below 2**64, got {stream}")
    label = mapping if portable else f"{mapping}.{backend}"
    return f"{label}-{stream:016x}-{first:x}-{n:x}.f32"


def served_folder_base() -> str | None:
    """Where a served folder goes: shared memory (/dev/shm) where it can be written, else None (the
    system's temporary folder): the files are read back at once, never meant for a disk."""
    shm = "/dev/shm"
    return shm if os.path.isdir(shm) and os.access(shm, os.W_OK | os.X_OK) else None


class ServedRanges:
    """The parent's side of served noise: ranges written to `folder` (an existing folder of this process's
    own), at most `budget` bytes of them (an int >= 0; least recently put out first, the newest always kept).

    `put(name, values)` writes a range (name from `served_name`; values a 1-D float32 numpy array or CPU
    tensor) unless it is there already, read-only (0o444: a child that writes into what it reads fails
    instead of changing what a later child reads), and atomically (a child sees the whole range or none).
    The parent keeps its own copy of every range: nothing a child does to these files can reach the
    parent's values. Thread-safe. OSError from the file system is the caller's to catch (a range not
    written is drawn by the child)."""

    def __init__(self, folder, budget: int):
        if isinstance(budget, bool) or not isinstance(budget, int) or budget < 0:
            raise ValueError(f"budget must be an int >= 0 (bytes), got {budget!r}")
        self.folder, self.budget = Path(folder), budget
        self.bytes = 0
        self.written = 0       #: ranges written so far (a range put again while kept is not written again)
        self._kept: OrderedDict = OrderedDict()   # name -> bytes
        self._lock = threading.Lock()

    def __contains__(self, name: str) -> bool:
        return name in self._kept

    def put(self, name: str, values) -> bool:
        """Write `values` as `name` unless kept already; True when it was written now."""
        if not _NAME.match(name):
            raise ValueError(f"not a served range's name: {name!r}")
        with self._lock:
            if name in self._kept:
                self._kept.move_to_end(name)
                return False
        array = values.numpy() if hasattr(values, "numpy") else values
        if array.dtype.str != SERVED_DTYPE or array.ndim != 1:
            raise ValueError(f"a served range is 1-D {SERVED_DTYPE}, got {array.dtype.str} of shape {array.shape}")
        path = self.folder / name
        tmp = self.folder / f".{name}.{threading.get_ident()}.tmp"
        with open(tmp, "wb") as f:
            array.tofile(f)
        os.chmod(tmp, 0o444)
        os.replace(tmp, path)
        gone = []
        with self._lock:
            if name in self._kept:        # another thread wrote the same range meanwhile (the same bits)
                return False
            self._kept[name] = array.nbytes
            self.bytes += array.nbytes
            self.written += 1
            while self.bytes > self.budget and len(self._kept) > 1:
                old, size = self._kept.popitem(last=False)
                self.bytes -= size
                gone.append(old)
        for old in gone:   # a child reading one now keeps its open file; a later one draws the range
            try:
                os.unlink(self.folder / old)
            except FileNotFoundError:
                pass
        return True


def served_range(folder, name: str, n: int):
    """The range `name` (served_name) of `n` elements from `folder` as a new, writable float32 numpy array,
    or None when it is not there (never written, or dropped): the caller then draws it. A file that is
    not n elements long is not the range asked for: None too (the caller draws)."""
    if not folder:
        return None
    try:
        with open(os.path.join(folder, name), "rb") as f:
            import numpy as np
            values = np.fromfile(f, dtype=SERVED_DTYPE)
    except (FileNotFoundError, NotADirectoryError):
        return None
    if values.shape != (n,):
        return None
    return values.astype("float32", copy=False)


def served_stream(folder, mapping: str, backend, stream: int, first: int, n: int):
    """Elements first .. first+n-1 of contract stream `stream` as served in `folder`: the range itself, else
    (a range starting on the grid) its pieces of SERVED_GRID elements, as our side's trainer drew them, put
    together; a new float32 numpy array, or None when any piece is missing (the caller draws the range).
    `backend` as in served_name."""
    if not folder:
        return None
    whole = served_range(folder, served_name(mapping, backend, stream, first, n), n)
    if whole is not None or n <= SERVED_GRID or first % SERVED_GRID:
        return whole
    import numpy as np
    out = np.empty(n, dtype=np.float32)
    for start in range(first, first + n, SERVED_GRID):
        size = min(SERVED_GRID, first + n - start)
        piece = served_range(folder, served_name(mapping, backend, stream, start, size), size)
        if piece is None:
            return None
        out[start - first:start - first + size] = piece
    return out
