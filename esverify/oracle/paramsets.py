"""Parameter sets the parity cases run on (issue 4 item 4).

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
SMALL_SHAPES = (("model.embed_tokens.weight", (129, 67)),
                ("model.layers.0.self_attn.scale", ()),                  # a module's own parameter comes first
                ("model.layers.0.self_attn.q_proj.weight", (13, 77)),
                ("model.layers.0.self_attn.q_proj.bias", (13,)),
                ("model.layers.0.self_attn.k_proj.weight", (13, 77)),     # equal shape: caching reuses
                ("model.layers.0.self_attn.v_proj.weight", (77, 13)),     # equal size, another shape
                ("model.norm.weight", (67,)),
                ("lm_head.weight", (67, 129)))                          # the embedding's size, transposed


def _decoder_layer(i: int, hidden: int = 20, kv: int = 4, ffn: int = 37) -> tuple:
    """One decoder layer as a Qwen2-style checkpoint names and orders it (q/k/v biases, no o_proj bias),
    plus a 0-dim scalar (self_attn's own parameter, so first in its module), at tiny sizes."""
    p = f"model.layers.{i}."
    return ((p + "self_attn.scale", ()),
            (p + "self_attn.q_proj.weight", (hidden, hidden)), (p + "self_attn.q_proj.bias", (hidden,)),
            (p + "self_attn.k_proj.weight", (kv, hidden)), (p + "self_attn.k_proj.bias", (kv,)),
            (p + "self_attn.v_proj.weight", (kv, hidden)), (p + "self_attn.v_proj.bias", (kv,)),  # k's shapes
            (p + "self_attn.o_proj.weight", (hidden, hidden)),
            (p + "mlp.gate_proj.weight", (ffn, hidden)), (p + "mlp.up_proj.weight", (ffn, hidden)),
            (p + "mlp.down_proj.weight", (hidden, ffn)),
            (p + "input_layernorm.weight", (hidden,)), (p + "post_attention_layernorm.weight", (hidden,)))


#: the `layers` set (issue 18): three decoder layers of a tiny model with the parameter kinds of a real
#: checkpoint side by side (embedding, biases, norms, 0-dim scalars), its output head tied to the
#: embedding (LAYERED_TIES: `lm_head.weight` is the same Parameter, not a slot of its own), so a rule
#: keyed on the layer index, on a kind or on a tie shows; element counts not multiples of 32
LAYERS = 3
LAYERED_SHAPES = (("model.embed_tokens.weight", (53, 20)),
                  *(entry for i in range(LAYERS) for entry in _decoder_layer(i)),
                  ("model.norm.weight", (20,)))
LAYERED_TIES = (("lm_head.weight", "model.embed_tokens.weight"),)
BIG_SHAPE = (1031, 1019)     # lm_head.weight in the big set: 1,050,589 elements, not a multiple of 32
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


def check_ties(names, ties) -> tuple:
    """`ties` as ((alias, slot name), ...); ValueError unless each alias is a new name and each target
    a slot of `names`."""
    ties = tuple((str(a), str(t)) for a, t in (ties or ()))
    for alias, target in ties:
        if alias in names or target not in names or [a for a, _ in ties].count(alias) > 1:
            raise ValueError(f"tie {alias!r} -> {target!r}: the alias must be a new name and the target a "
                             "slot of the set")
    return ties


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
    """(names or [], bit arrays, dtype names) of a set or a child's result file."""
    with pyast.exclusive(), np.load(path) as data:   # numpy parses each header with ast (esverify.pyast)
        dtypes = [str(d) for d in data["dtypes"]]
        names = [str(n) for n in data["names"]] if "names" in data else []
        arrays = [data[f"slot{k}"] for k in range(len(dtypes))]
    return names, arrays, dtypes
