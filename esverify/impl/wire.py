"""Frames of the module-wrapper protocol, version 1 (docs/PROTOCOL.md §2).

A frame is a fixed 16-byte prefix, a JSON header and a binary payload::

    offset 0   4 bytes   magic b"ESVF"
    offset 4   u32 LE    header length H (bytes of UTF-8 JSON, 1 .. MAX_HEADER)
    offset 8   u64 LE    payload length B (0 .. MAX_PAYLOAD)
    offset 16  H bytes   the header: one JSON object
    then       B bytes   the payload: raw tensor bytes

A tensor inside the header is written in place as a descriptor
``{"dtype": D, "shape": [..], "offset": O}``: its bytes are
``payload[O : O + prod(shape) * size(D)]``, little-endian bit patterns in
row-major order (no float formatting anywhere). dtypes: f64, f32, f16,
bf16, u64, u32. Writers place each tensor at an 8-byte-aligned offset;
readers honour the offsets they are given.

In Python a tensor is a `Tensor` (wire dtype name + an unsigned numpy
array of bit patterns), so bfloat16 needs no third-party dtype.
"""
from __future__ import annotations

import json
import struct
import sys
from dataclasses import dataclass

import numpy as np

from .. import jsonin

PROTOCOL_VERSION = 1
MAGIC = b"ESVF"
PREFIX = struct.Struct("<4sIQ")          #: magic, header length, payload length
MAX_HEADER = 16 << 20                    #: a header beyond 16 MiB is a protocol error
MAX_PAYLOAD = 1 << 33                    #: 8 GiB
MAX_HEADER_DEPTH = 32                   #: bracket nesting of a header (requests and replies need 5)
#: wire dtype -> (bytes per element, numpy dtype of its bit patterns)
DTYPES = {"f64": (8, np.dtype("<u8")), "f32": (4, np.dtype("<u4")), "f16": (2, np.dtype("<u2")),
          "bf16": (2, np.dtype("<u2")), "u64": (8, np.dtype("<u8")), "u32": (4, np.dtype("<u4"))}
_FLOAT_VIEW = {"f64": np.float64, "f32": np.float32, "f16": np.float16}
_DESCRIPTOR_KEYS = {"dtype", "shape", "offset"}


class FrameError(ValueError):
    """Bytes that are not a valid frame: the message says what was wrong (and shows the bytes)."""


@dataclass(frozen=True)
class Tensor:
    """A tensor on the wire: `dtype` (a DTYPES name) and `bits`, an unsigned numpy array of its patterns.

    bits has the tensor's shape; its dtype is DTYPES[dtype][1] (uint64/32/16, little-endian).
    """
    dtype: str
    bits: np.ndarray

    def __post_init__(self):
        if self.dtype not in DTYPES:
            raise ValueError(f"unknown wire dtype {self.dtype!r}; known: {sorted(DTYPES)}")
        if self.bits.dtype != DTYPES[self.dtype][1]:
            raise ValueError(f"{self.dtype} tensor needs bit patterns of dtype {DTYPES[self.dtype][1]}, "
                             f"got {self.bits.dtype}")

    @property
    def shape(self) -> tuple:
        return tuple(self.bits.shape)

    def values(self) -> np.ndarray:
        """A numpy view of the values (f64/f32/f16 floats, u64/u32 ints); bf16 has none (TypeError)."""
        if self.dtype in _FLOAT_VIEW:
            return self.bits.view(_FLOAT_VIEW[self.dtype])
        if self.dtype in ("u64", "u32"):
            return self.bits
        raise TypeError("numpy has no bfloat16: use .bits or .to_torch()")

    @classmethod
    def of(cls, array) -> "Tensor":
        """From a numpy array (float64/32/16, uint64/32) or a torch tensor (f64/f32/f16/bf16, int64 as u64)."""
        torch = sys.modules.get("torch")   # a torch tensor implies torch is imported; never import it here
        if torch is not None and isinstance(array, torch.Tensor):
            t = array.detach().to("cpu").contiguous()
            name = {torch.float64: "f64", torch.float32: "f32", torch.float16: "f16", torch.bfloat16: "bf16",
                    torch.int64: "u64"}.get(t.dtype)
            if name is None:
                raise ValueError(f"torch dtype {t.dtype} has no wire dtype")
            signed = {8: torch.int64, 4: torch.int32, 2: torch.int16}[DTYPES[name][0]]
            return cls(name, t.view(signed).numpy().view(DTYPES[name][1]).copy())
        a = np.ascontiguousarray(array).reshape(np.shape(array))   # ascontiguousarray makes 0-dim 1-dim
        name = {np.dtype(np.float64): "f64", np.dtype(np.float32): "f32", np.dtype(np.float16): "f16",
                np.dtype(np.uint64): "u64", np.dtype(np.uint32): "u32"}.get(a.dtype)
        if name is None:
            raise ValueError(f"numpy dtype {a.dtype} has no wire dtype")
        return cls(name, a.view(DTYPES[name][1]))

    def to_torch(self, device="cpu"):
        """A torch tensor with exactly these bits (f64/f32/f16/bf16; u64 as int64)."""
        import torch
        signed = {8: np.int64, 4: np.int32, 2: np.int16}[DTYPES[self.dtype][0]]
        t = torch.from_numpy(np.array(self.bits, order="C").view(signed).reshape(self.shape))
        target = {"f64": torch.float64, "f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16,
                  "u64": torch.int64, "u32": torch.int32}[self.dtype]
        return t.view(target).to(device)


def u64_hex(x: int) -> str:
    """A u64 scalar in a header: "0x" + 16 lowercase hex digits."""
    return f"0x{int(x) & ((1 << 64) - 1):016x}"


def f64_hex(x: float) -> str:
    """An f64 scalar in a header: its bit pattern as "0x" + 16 lowercase hex digits."""
    return "0x%016x" % struct.unpack("<Q", struct.pack("<d", float(x)))[0]


def parse_hex(text, what: str, bits: int = 64) -> int:
    """The integer of a "0x" + bits/4 hex digits string; ValueError naming `what` otherwise."""
    if not (isinstance(text, str) and len(text) == 2 + bits // 4 and text.startswith("0x")):
        raise ValueError(f"{what} must be '0x' plus {bits // 4} lowercase hex digits, got {text!r}")
    try:
        return int(text[2:], 16)
    except ValueError:
        raise ValueError(f"{what} must be '0x' plus {bits // 4} lowercase hex digits, got {text!r}") from None


def parse_f64(text, what: str) -> float:
    return struct.unpack("<d", struct.pack("<Q", parse_hex(text, what)))[0]


def encode_parts(header: dict) -> list:
    """One frame for `header` as a list of buffers (prefix + JSON header, then each tensor's bytes
    and padding): writing them in order writes the frame without copying the tensors."""
    parts: list = []
    size = 0

    def walk(x):
        nonlocal size
        if isinstance(x, Tensor):
            pad = -size % 8
            if pad:
                parts.append(b"\0" * pad)
                size += pad
            flat = np.ascontiguousarray(x.bits).reshape(-1)
            raw = memoryview(flat).cast("B") if flat.size else b""   # a view: no copy of the tensor
            desc = {"dtype": x.dtype, "shape": list(x.shape), "offset": size}
            parts.append(raw)
            size += len(raw)
            return desc
        if isinstance(x, dict):
            return {k: walk(v) for k, v in x.items()}
        if isinstance(x, (list, tuple)):
            return [walk(v) for v in x]
        return x

    head = json.dumps(walk(header), separators=(",", ":"), allow_nan=False).encode("utf-8")
    return [PREFIX.pack(MAGIC, len(head), size) + head] + parts


def encode(header: dict) -> bytes:
    """One frame for `header`, whose Tensor values (at any depth) go to the payload."""
    return b"".join(encode_parts(header))


def parse_prefix(prefix: bytes) -> tuple[int, int]:
    """(header length, payload length) of a 16-byte prefix; FrameError showing the bytes otherwise."""
    magic, h, b = PREFIX.unpack(prefix)
    if magic != MAGIC:
        raise FrameError(f"bytes outside a frame: expected magic {MAGIC!r}, got {bytes(prefix)!r}")
    if not 1 <= h <= MAX_HEADER:
        raise FrameError(f"header length {h} outside 1 .. {MAX_HEADER}")
    if b > MAX_PAYLOAD:
        raise FrameError(f"payload length {b} beyond {MAX_PAYLOAD}")
    return h, b


def decode(head: bytes, payload) -> dict:
    """The header as a dict with every tensor descriptor replaced by a Tensor (views into `payload`)."""
    raw = bytes(head)
    if b"\x00" in raw:      # the protocol's headers are UTF-8 only: no UTF-16/32 detection
        raise FrameError(f"header is not UTF-8 JSON (a NUL byte: UTF-16/32 is not accepted): {raw[:80]!r}")
    if not raw.isascii():
        try:
            raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise FrameError(f"header is not UTF-8 JSON ({exc}): {raw[:80]!r}") from None
    try:   # bounded: depth before parsing; the integer-digit limit and deep nesting are frame errors too
        obj = jsonin.loads(raw, "header", max_bytes=MAX_HEADER, max_depth=MAX_HEADER_DEPTH)
    except jsonin.JSONInputError as exc:
        raise FrameError(f"header is not UTF-8 JSON ({exc}): {raw[:80]!r}") from None
    if not isinstance(obj, dict):
        raise FrameError(f"header must be a JSON object, got {type(obj).__name__}")
    buf = memoryview(payload)

    def walk(x, path):
        if isinstance(x, dict):
            if set(x) == _DESCRIPTOR_KEYS:
                return _tensor(x, buf, path)
            return {k: walk(v, f"{path}.{k}") for k, v in x.items()}
        if isinstance(x, list):
            return [walk(v, f"{path}[{i}]") for i, v in enumerate(x)]
        return x

    return walk(obj, "header")


def _tensor(desc: dict, buf: memoryview, path: str) -> Tensor:
    dtype, shape, offset = desc["dtype"], desc["shape"], desc["offset"]
    if dtype not in DTYPES:
        raise FrameError(f"{path}: unknown dtype {dtype!r}; known: {sorted(DTYPES)}")
    if (not isinstance(shape, list) or not all(isinstance(d, int) and not isinstance(d, bool) and 0 <= d <= MAX_PAYLOAD
                                                 for d in shape)):
        raise FrameError(f"{path}: shape must be a list of non-negative integers, got {shape!r}")
    if not isinstance(offset, int) or isinstance(offset, bool) or not 0 <= offset <= MAX_PAYLOAD:
        raise FrameError(f"{path}: offset must be a non-negative integer, got {offset!r}")
    size, np_dtype = DTYPES[dtype]
    count = 1
    for d in shape:   # Python ints: no int64 overflow for shapes like [2**32, 2**32]
        count *= d
    end = offset + count * size
    if end > len(buf):
        raise FrameError(f"{path}: {dtype}{shape} at offset {offset} needs bytes up to {end}, "
                         f"the payload has {len(buf)}")
    bits = np.frombuffer(buf[offset:end], dtype=np_dtype).reshape(shape)
    return Tensor(dtype, bits)
