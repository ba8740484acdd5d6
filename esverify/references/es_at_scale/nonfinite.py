"""es-at-scale's update as its worker writes it, for the rows with non-finite rewards (docs/parity.md, "Reward populations").

With finite coefficients the `es-at-scale` profile gives the worker's bits
(docs/numerics.md §3) in its own chunks and kernels. With a NaN among
them every weight becomes NaN, and WHICH NaN (sign, payload) depends on
the torch kernels that produce it: a vectorised conversion or add and its
scalar tail return different NaNs (docs/numerics.md, the half kernels).
So the non-finite rows run the worker's own sequence of torch calls on
whole tensors (docs/references.md §1, `update_weights_from_seeds`): an f32
accumulator, `add_(noise.to(f32) * coeff)` per member, `mul_(alpha / N)`,
then the parameter's in-place add of the accumulator converted to its
dtype.
"""
from __future__ import annotations

import torch


def update(params, noise, coeffs, alpha: float, population: int) -> None:
    """params (tensors, changed in place) += the worker's update with f64 coefficients `coeffs` as they are.
    noise(member, slot) -> that member's noise for slot `slot` in the parameter's shape and dtype (what the
    worker draws); alpha, population: the update's alpha and divisor."""
    with torch.no_grad():
        for slot, param in enumerate(params):
            acc = torch.zeros(param.shape, dtype=torch.float32, device=param.device)
            for member, coeff in enumerate(coeffs):
                acc.add_(noise(member, slot).to(torch.float32) * float(coeff))
            acc.mul_(alpha / population)
            param.add_(acc.to(param.dtype))
