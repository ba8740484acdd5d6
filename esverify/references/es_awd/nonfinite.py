"""es-awd's update as `weight_update_utils.py` writes it, for the rows with non-finite rewards (docs/parity.md, "Reward populations").

With finite coefficients the `es-awd` profile gives its bits (docs/numerics.md
§3, its rules and tails). With a NaN among them every weight becomes NaN,
and which NaN (sign, payload) depends on the torch kernels that produce
it (a vectorised loop and its scalar tail return different NaNs). So the
non-finite rows run its own sequence of torch calls on whole tensors
(docs/references.md §2, `update_parameters_from_seeds` without decay): an
accumulator in the parameter's dtype, `acc.add_(noise, alpha=coeff)` per
member, then `param.add_(acc, alpha=alpha / N)`.
"""
from __future__ import annotations

import torch


def update(params, noise, coeffs, alpha: float, population: int) -> None:
    """params (tensors, changed in place) += the update with f64 coefficients `coeffs` as they are (no decay).
    noise(member, slot) -> that member's noise for slot `slot` in the parameter's shape and dtype."""
    with torch.no_grad():
        for slot, param in enumerate(params):
            acc = torch.zeros_like(param)
            for member, coeff in enumerate(coeffs):
                acc.add_(noise(member, slot), alpha=float(coeff))
            param.add_(acc, alpha=alpha / population)
