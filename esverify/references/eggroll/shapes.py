"""Targeted weights of a Qwen-style decoder: peft names and order, vLLM fused tensors (docs/numerics.md §9.5).

peft yields, per decoder layer in layer order, q, k, v, o, gate, up, down
as ``base_model.model.model.layers.<i>.self_attn.<p>_proj.base_layer.weight``
and ``....mlp.<p>_proj.base_layer.weight``; that order is the weight
index l of the noise. vLLM (LoRA on) holds ``model.layers.<i>.self_attn.
qkv_proj.base_layer.weight`` ((q + 2·kv) x hidden), ``o_proj`` (hidden x
q), ``mlp.gate_up_proj`` (2·I x hidden) and ``down_proj`` (hidden x I).
`model_shapes` builds both for the parity rows and the goldens; the tiny
model of the known answers (G2, G4) is ``model_shapes(4, 6, 2, 1, 2, 1)``.
"""
from __future__ import annotations

import torch

ATTN, MLP = ("q", "k", "v", "o"), ("gate", "up", "down")


def peft_name(layer: int, proj: str) -> str:
    """``base_model.model.model.layers.<layer>.<self_attn|mlp>.<proj>_proj.base_layer.weight``."""
    block = "self_attn" if proj in ATTN else "mlp"
    return f"base_model.model.model.layers.{layer}.{block}.{proj}_proj.base_layer.weight"


def model_shapes(hidden: int, intermediate: int, heads: int, kv_heads: int, head_dim: int,
                 layers: int) -> tuple[list, dict]:
    """(peft_shapes: [(peft name, (out, in))] in peft order, vllm_shapes: {vLLM name: (rows, cols)})."""
    q, kv = heads * head_dim, kv_heads * head_dim
    per = {"q": (q, hidden), "k": (kv, hidden), "v": (kv, hidden), "o": (hidden, q),
           "gate": (intermediate, hidden), "up": (intermediate, hidden), "down": (hidden, intermediate)}
    peft, vllm = [], {}
    for i in range(layers):
        peft += [(peft_name(i, p), per[p]) for p in ATTN + MLP]
        base = f"model.layers.{i}"
        vllm[f"{base}.self_attn.qkv_proj.base_layer.weight"] = (q + 2 * kv, hidden)
        vllm[f"{base}.self_attn.o_proj.base_layer.weight"] = (hidden, q)
        vllm[f"{base}.mlp.gate_up_proj.base_layer.weight"] = (2 * intermediate, hidden)
        vllm[f"{base}.mlp.down_proj.base_layer.weight"] = (hidden, intermediate)
    return peft, vllm


def tiny_model() -> tuple[list, dict]:
    """The known answers' model: hidden 4, intermediate 6, 2 heads, 1 KV head, head dim 2, one layer (L = 7)."""
    return model_shapes(4, 6, 2, 1, 2, 1)


def filled(vllm_shapes: dict, dtype: torch.dtype, value: float = 0.0) -> dict:
    """vLLM-named CPU tensors of `dtype`, every element `value` (rounded to dtype by torch)."""
    return {name: torch.full(shape, value, dtype=dtype) for name, shape in vllm_shapes.items()}
