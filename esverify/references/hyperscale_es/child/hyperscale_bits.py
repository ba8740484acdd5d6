"""How the hyperscale-es child's modules pass floats to the parent: hex bit patterns (docs/hyperscale.md §9).

Imported by driver.py and its sibling op modules, in the child, beside them; never by esverify (it imports
jax). One place, so that every op reads and writes the same encoding.
"""
from __future__ import annotations

import jax.numpy as jnp
import numpy as np

#: a row's dtype name -> the jax dtype the child casts parameters to
DTYPES = {"f32": jnp.float32, "f16": jnp.float16, "bf16": jnp.bfloat16}


def f32_of(hexes) -> np.ndarray:
    """The f32 values of a list of 8-digit hex bit patterns ("0x3f800000"), a 1-D numpy float32 array."""
    return np.array([int(h, 16) for h in hexes], dtype=np.uint32).view(np.float32)


def hex_bits(x) -> list:
    """The bit patterns of an array of 4- or 2-byte elements (f32; f16 or bf16), as hex strings in C order."""
    a = np.asarray(x)
    width = a.dtype.itemsize
    return [f"0x{int(v):0{2 * width}x}" for v in a.view({4: np.uint32, 2: np.uint16}[width]).ravel()]
