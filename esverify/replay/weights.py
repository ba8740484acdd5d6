"""Weights I/O for replay: lazy reading, atomic writing (docs/replay.md §4).

`open_weights(path)` accepts a safetensors file, a torch state_dict file
(loaded with ``weights_only=True``: tensors only, never unpickled code;
memory-mapped when the file allows it) or a Hugging Face model folder
(`model.safetensors`, a sharded `model.safetensors.index.json`,
`pytorch_model.bin` or its index). Tensors are read one at a time, and
from safetensors an element range reads only the rows that hold it, so a
work unit costs the memory of its own range. Errors are `WeightsError`
naming the file (and the tensor).
"""
from __future__ import annotations

import math
from pathlib import Path

import torch

from esverify import jsonin

#: the safetensors format's whole dtype table -> torch's dtype name; None where torch has no such dtype
#: (sub-byte floats: torch packs float4 two per byte and has no float6), which is refused naming the dtype
_ST_TABLE = {"BOOL": "bool", "U8": "uint8", "I8": "int8", "I16": "int16", "U16": "uint16", "I32": "int32",
             "U32": "uint32", "I64": "int64", "U64": "uint64", "F16": "float16", "BF16": "bfloat16",
             "F32": "float32", "F64": "float64", "C64": "complex64", "F8_E4M3": "float8_e4m3fn",
             "F8_E5M2": "float8_e5m2", "F8_E4M3FNUZ": "float8_e4m3fnuz", "F8_E5M2FNUZ": "float8_e5m2fnuz",
             "F8_E8M0": "float8_e8m0fnu", "F4": None, "F6_E2M3": None, "F6_E3M2": None}
_ST_DTYPES = {k: getattr(torch, v) for k, v in _ST_TABLE.items() if v is not None and hasattr(torch, v)}
_HF_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin",
             "pytorch_model.bin.index.json")


class WeightsError(ValueError):
    """Weights that cannot be read or written; the message names the file (docs/replay.md §4)."""


def _copy(view: torch.Tensor, into) -> torch.Tensor:
    """A copy of `view` (elements still in the file's memory map): a new tensor, or, with `into`, the tensor
    into(numel, dtype) returns (a buffer reused from one read to the next: esverify.replay.scratch)."""
    if into is None:
        return view.clone()
    out = into(view.numel(), view.dtype)
    out.copy_(view)
    return out


class _SafetensorsFile:
    def __init__(self, path: Path):
        try:
            from safetensors import safe_open
        except ImportError:  # pragma: no cover - a dependency
            raise WeightsError(f"{path}: reading safetensors needs the safetensors package "
                               f"(pip install safetensors)") from None
        try:
            self._fh = safe_open(str(path), framework="pt", device="cpu")
        except Exception as exc:   # safetensors raises its own error types
            raise WeightsError(f"{path}: not a readable safetensors file ({exc})") from None
        self.path = path
        self._names = list(self._fh.keys())

    def names(self):
        return list(self._names)

    def info(self, name):
        sl = self._fh.get_slice(name)
        dtype = _ST_DTYPES.get(sl.get_dtype())
        if dtype is None:
            known = "a dtype of the safetensors format" if sl.get_dtype() in _ST_TABLE else "an unknown dtype"
            raise WeightsError(f"{self.path}: tensor {name} has dtype {sl.get_dtype()}, {known} that this torch "
                               f"({torch.__version__}) has no dtype for; esverify compares tensors only in their "
                               f"own dtype")
        return tuple(sl.get_shape()), dtype

    def read(self, name, start=None, end=None, into=None):
        shape, _ = self.info(name)
        numel = math.prod(shape)
        start, end = (0, numel) if start is None else (start, end)
        if len(shape) == 0 or (start == 0 and end == numel):
            return _copy(self._fh.get_tensor(name).reshape(-1), into)
        row = math.prod(shape[1:])        # read only the rows holding [start, end)
        r0, r1 = start // row, -(-end // row)
        rows = self._fh.get_slice(name)[r0:r1].reshape(-1)
        return _copy(rows[start - r0 * row:end - r0 * row], into)


class _TorchFile:
    def __init__(self, path: Path):
        try:
            try:
                obj = torch.load(str(path), map_location="cpu", weights_only=True, mmap=True)
            except RuntimeError:   # an old (non-zip) file cannot be memory-mapped
                obj = torch.load(str(path), map_location="cpu", weights_only=True)
        except Exception as exc:   # weights_only refuses pickled code: that is the point
            raise WeightsError(f"{path}: not a torch state_dict loadable with weights_only=True ({exc})") from None
        if not isinstance(obj, dict) or not all(isinstance(k, str) and isinstance(v, torch.Tensor)
                                                for k, v in obj.items()):
            raise WeightsError(f"{path}: expected a state_dict (a dict of name -> tensor), got {type(obj).__name__}")
        self.path, self._sd = path, obj

    def names(self):
        return list(self._sd)

    def info(self, name):
        t = self._sd[name]
        return tuple(t.shape), t.dtype

    def read(self, name, start=None, end=None, into=None):
        flat = self._sd[name].reshape(-1)
        return _copy(flat if start is None else flat[start:end], into)


class Weights:
    """Named tensors of one checkpoint, read lazily (docs/replay.md §4).

    names(): tensor names in file order; info(name) -> (shape tuple, torch
    dtype); read(name, start=None, end=None, into=None) -> a flat CPU tensor
    copy of elements [start, end): a new tensor, or the one into(numel,
    dtype) returns, filled. Raises WeightsError naming the file and tensor.
    """

    def __init__(self, path, files: dict):
        self.path = str(path)
        self._files = files             # name -> reader
        self._order = list(files)

    def names(self):
        return list(self._order)

    def _reader(self, name):
        if name not in self._files:
            raise WeightsError(f"{self.path}: has no tensor {name!r}")
        return self._files[name]

    def info(self, name):
        return self._reader(name).info(name)

    def read(self, name, start=None, end=None, into=None):
        return self._reader(name).read(name, start, end, into)


def _file(path: Path):
    if path.suffix == ".safetensors":
        return _SafetensorsFile(path)
    with open(path, "rb") as fh:   # safetensors without the suffix: an 8-byte length, then a JSON header
        head = fh.read(9)
    if len(head) == 9 and head[8:9] == b"{":
        return _SafetensorsFile(path)
    return _TorchFile(path)


def open_weights(path) -> Weights:
    """Open a checkpoint for lazy reading (docs/replay.md §4); WeightsError naming `path` on failure."""
    path = Path(path)
    if not path.exists():
        raise WeightsError(f"{path}: no such file or folder")
    if path.is_dir():
        found = [name for name in _HF_FILES if (path / name).is_file()]
        if not found:
            raise WeightsError(f"{path}: a folder without {' / '.join(_HF_FILES)} (not a Hugging Face model folder)")
        top = path / found[0]
        if top.name.endswith(".index.json"):
            try:   # strict JSON (esverify.jsonin): a tensor mapped twice is refused, not the last copy taken
                weight_map = jsonin.load_path(top)["weight_map"]
            except (OSError, ValueError, KeyError, TypeError) as exc:
                raise WeightsError(f"{top}: not a shard index with a weight_map ({exc})") from None
            if not isinstance(weight_map, dict) or not all(isinstance(k, str) and isinstance(v, str)
                                                           for k, v in weight_map.items()):
                raise WeightsError(f"{top}: weight_map must map tensor names to shard file names")
            readers, held, files = {}, {}, {}
            for name, shard in weight_map.items():   # the whole index, up front (docs/replay.md §4)
                if shard not in readers:
                    if Path(shard).name != shard or shard in (".", ".."):
                        raise WeightsError(f"{top}: shard {shard!r} (of tensor {name}) is not a file name in "
                                           f"{path}")
                    if not (path / shard).is_file():
                        raise WeightsError(f"{top}: shard {shard} (of tensor {name}) does not exist in {path}")
                    readers[shard] = _file(path / shard)
                    held[shard] = set(readers[shard].names())
                if name not in held[shard]:
                    raise WeightsError(f"{top}: maps tensor {name} to {shard}, which does not hold it")
                files[name] = readers[shard]
            return Weights(path, files)
        path = top
    reader = _file(path)
    return Weights(path, {name: reader for name in reader.names()})


def save_weights(path, tensors: dict) -> Path:
    """Write `tensors` (name -> tensor) to `path` atomically (docs/replay.md §4).

    A `.safetensors` suffix writes safetensors, anything else a torch
    state_dict (`torch.save`). The file appears whole or not at all.
    """
    from esverify.report import atomic_file
    path = Path(path)
    if path.suffix == ".safetensors":
        from safetensors.torch import save
        data = save({k: v.contiguous() for k, v in tensors.items()})
        return atomic_file(path, lambda fh: fh.write(data))
    return atomic_file(path, lambda fh: torch.save(dict(tensors), fh))
