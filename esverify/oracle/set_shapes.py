"""The names and shapes of the parity parameter sets (esverify.oracle.paramsets builds their values).

Data only, free of torch: the case model (esverify.oracle.case_model) reads these shapes while a run
selects its cases, before it imports torch (the warm start server's imports and ours overlap).
"""
from __future__ import annotations

SMALL_SHAPES = (("model.embed_tokens.weight", (129, 67)),
                ("model.layers.0.self_attn.scale", ()),                  # a module's own parameter comes first
                ("model.layers.0.self_attn.q_proj.weight", (13, 77)),
                ("model.layers.0.self_attn.q_proj.bias", (13,)),
                ("model.layers.0.self_attn.k_proj.weight", (13, 77)),     # equal shape: caching reuses
                ("model.layers.0.self_attn.v_proj.weight", (77, 13)),     # equal size, another shape
                ("model.norm.weight", (67,)),
                ("lm_head.weight", (67, 129)))                          # the embedding's size, transposed


def decoder_layer(i: int, hidden: int = 20, kv: int = 4, ffn: int = 37) -> tuple:
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


#: the `layers` set: three decoder layers of a tiny model with the parameter kinds of a real
#: checkpoint side by side (embedding, biases, norms, 0-dim scalars), its output head tied to the
#: embedding (LAYERED_TIES: `lm_head.weight` is the same Parameter, not a slot of its own), so a rule
#: keyed on the layer index, on a kind or on a tie shows; element counts not multiples of 32
LAYERS = 3
LAYERED_SHAPES = (("model.embed_tokens.weight", (53, 20)),
                  *(entry for i in range(LAYERS) for entry in decoder_layer(i)),
                  ("model.norm.weight", (20,)))
LAYERED_TIES = (("lm_head.weight", "model.embed_tokens.weight"),)
BIG_SHAPE = (1031, 1019)     # lm_head.weight in the big set: 1,050,589 elements, not a multiple of 32


def check_ties(names, ties) -> tuple:
    """`ties` as ((alias, slot name), ...); ValueError unless each alias is a new name and each target
    a slot of `names`."""
    ties = tuple((str(a), str(t)) for a, t in (ties or ()))
    for alias, target in ties:
        if alias in names or target not in names or [a for a, _ in ties].count(alias) > 1:
            raise ValueError(f"tie {alias!r} -> {target!r}: the alias must be a new name and the target a "
                             "slot of the set")
    return ties
