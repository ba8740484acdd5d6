"""The unfused perturbation two profiles share: separately rounded f32 lines, no fused multiply-add (docs/numerics.md §3).

    q(eps)   = rd_dt(eps)
    perturb: t = rd_dt(rd32(f32(q) * rd32(s)));  theta = rd_dt(f32(theta) + f32(t))

es-at-scale's perturb is these lines, and es-paper's perturb was measured to be
the same lines (docs/references.md §1, §6). They live here, in the trainer's
numerics, because a reference never imports another reference: each profile
names this module.

Each line is one torch op on f32 tensors with the scalar held in a 0-dim f32
tensor; elementwise, hence independent of chunking and thread count.
Contiguous CPU f32 tensors take the numba loop of esverify.es.cpu_kernels, and
1-D CPU f16/bf16 chunks the compiled loop of esverify.es.half_kernels, the same
roundings (proven bitwise equal; a NaN anywhere goes to the torch lines, which
decide its bits).

Checks: ``python -m pytest -q tests/test_es_kernels.py tests/test_half_kernels.py``.
"""
from __future__ import annotations

import torch

from . import cpu_kernels, half_kernels
from .numerics import rd32, round_to, scalar32, widen

__all__ = ["perturb", "perturb_torch", "q32"]


def q32(eps: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """f32(rd_dt(eps)): the f32 noise rounded to the parameter dtype `dtype`, widened back to f32 (new tensor)."""
    return widen(round_to(eps, dtype))


def perturb(theta, eps, s, out) -> None:
    """out <- rd_dt(f32(theta) + f32(rd_dt(rd32(f32(q) * rd32(s))))), q = rd_dt(eps) (docs/numerics.md §3).

    theta, out: 1-D chunks of one dtype (f32/f16/bf16) and length; eps: f32
    chunk of that length; all on one device. s: f64 (+sigma, or -sigma to
    restore), rounded here. `out` may be `theta`.
    """
    if cpu_kernels.usable(theta, eps, out):
        cpu_kernels.perturb(theta, eps, rd32(s), out)
        return
    if eps.dtype == torch.float32 and theta.dim() == 1:
        # f16/bf16 on the CPU: these roundings are es-awd's tail line, one compiled loop (esverify.es.
        # half_kernels) where the torch lines make nine passes and as many temporaries; None on a NaN
        done = half_kernels.scaled_add(theta, eps, rd32(s), 0)
        if done is not None:
            out.copy_(done)
            return
    perturb_torch(theta, eps, s, out)


def perturb_torch(theta, eps, s, out) -> None:
    """`perturb` in torch's own elementwise ops, any device and dtype: the lines that decide NaN bits
    (and the ones the compiled paths are tested against)."""
    t = round_to(q32(eps, theta.dtype) * scalar32(rd32(s), eps.device), theta.dtype)
    out.copy_(round_to(widen(theta) + widen(t), theta.dtype))
