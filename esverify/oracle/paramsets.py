"""Parameter sets the parity cases run on.

Each set is a fixed list of named tensors of one dtype (or the `mixed`
set, dtypes cycling f32, f16, bf16), named like a real transformer's
(`model.embed_tokens.weight`, `...q_proj.weight`, `...q_proj.bias`,
`model.norm.weight`, `lm_head.weight`: a reference that treats names
specially must show it): odd sizes whose element counts are
not multiples of 32 (so a profile rule's `cpu` tail is exercised), two tensors
of equal shape (a reference's `caching=True` reuses noise between them), a
tensor of equal size but another shape, a 0-dim tensor, and, for
single-operation cases, an `lm_head.weight` of >= 1M elements. A fuzzed
case gives its own (name, shape) list instead, and the `layers` set
(LAYERED_SHAPES) has three decoder layers and a tied output head
(LAYERED_TIES). Names follow the order torch walks a real model in (a
module's own parameters first, each module's together). Values come from a
fixed numpy generator (f64, rounded through f32 into the dtype, as torch
does), with a few exact zeros; the `offset` variant adds a small
deterministic delta so that anchored decay (docs/numerics.md §5) has work to do
(and zeroes some deltas under l1).

Sets travel to the child as raw bit patterns (.npz), so both sides start
from identical bits.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from .. import bits, pyast
from ..es.numerics import NAME_DTYPES

DTYPES = NAME_DTYPES                    #: "f32"/"f16"/"bf16" -> torch dtype, in that order
MIXED = "mixed"
# the shapes are data the case model reads before torch is imported: esverify.oracle.set_shapes
from .set_shapes import BIG_SHAPE, LAYERED_SHAPES, LAYERED_TIES, LAYERS, SMALL_SHAPES, check_ties  # noqa: F401
SEED = 20250929


def slot_dtypes(dtype: str, count: int) -> list[str]:
    """Per-slot dtype names of set `dtype` ("f32", "f16", "bf16" or "mixed")."""
    if dtype == MIXED:
        cycle = list(DTYPES)
        return [cycle[k % len(cycle)] for k in range(count)]
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {list(DTYPES) + [MIXED]}, got {dtype!r}")
    return [dtype] * count


def shapes_of(big: bool, shapes=None) -> list:
    """The (name, shape) list of a set: `shapes` when given, else the standard small or big one."""
    if shapes is not None:
        return [(str(n), tuple(s)) for n, s in shapes]
    return [(n, BIG_SHAPE if big and n == "lm_head.weight" else s) for n, s in SMALL_SHAPES]


def build(dtype: str, big: bool, variant: str = "base", shapes=None) -> tuple[list[str], list[torch.Tensor]]:
    """(names, CPU tensors) of a set; variant "base" or "offset" (base plus a small delta);
    shapes: None (standard) or a (name, shape) list."""
    shapes = shapes_of(big, shapes)
    names = [n for n, _ in shapes]
    tensors = []
    for k, ((name, shape), dt) in enumerate(zip(shapes, slot_dtypes(dtype, len(shapes)))):
        gen = np.random.Generator(np.random.PCG64([SEED, k]))
        n = int(np.prod(shape, dtype=np.int64))
        values = gen.normal(0.0, 0.05, n)
        values[::17] = 0.0
        if variant == "offset":
            values = values + gen.uniform(-0.02, 0.02, n)
        elif variant != "base":
            raise ValueError(f"variant must be 'base' or 'offset', got {variant!r}")
        t = torch.from_numpy(values).to(torch.float32).to(DTYPES[dt]).reshape(shape)
        tensors.append(t.contiguous())
    return names, tensors


def tensor_bits(t: torch.Tensor) -> np.ndarray:
    """Raw bit patterns of a tensor (any device), shape kept: uint16 / uint32 / uint64 (esverify.bits)."""
    raw, _ = bits.array_bits(t)
    return raw.reshape(tuple(t.shape)).copy()


def dtype_name(t: torch.Tensor) -> str:
    """The bit format name of a tensor's dtype: "f32", "f16", "bf16" or "f64"."""
    return bits.array_bits(t.detach().reshape(-1)[:0])[1]


def write(path: Path, names, tensors, ties=()) -> Path:
    """Write a set as .npz: names, dtypes and slot<k> bit arrays, and `ties` ((alias, slot name)
    pairs: the child registers the alias as the same Parameter) when there are any."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    arrays = {f"slot{k}": tensor_bits(t) for k, t in enumerate(tensors)}
    ties = check_ties(list(names), ties)
    if ties:
        arrays["ties"] = np.array([list(pair) for pair in ties])
    np.savez(path, names=np.array(names), dtypes=np.array([dtype_name(t) for t in tensors]), **arrays)
    return path


def read(path: Path) -> tuple[list[str], list[np.ndarray], list[str]]:
    """(names or [], bit arrays, dtype names) of a set or a child's result file: .npz, `dtypes`, `slot<k>`
    and optionally `names` (as `write` and the child's save_results write them). Raises what np.load
    raises on a file that is not such an .npz (OSError, ValueError, KeyError naming the missing member,
    zipfile.BadZipFile)."""
    with pyast.exclusive(), np.load(path) as data:   # numpy parses each header with ast (esverify.pyast)
        dtypes = [str(d) for d in data["dtypes"]]
        names = [str(n) for n in data["names"]] if "names" in data else []
        arrays = [data[f"slot{k}"] for k in range(len(dtypes))]
    return names, arrays, dtypes

