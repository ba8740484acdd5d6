"""The `es-at-scale` numerics profile, version 1 (docs/numerics.md §3; docs/references.md §1).

Matches the primary reference on CPU: noise rounded to the parameter
dtype, then only separately rounded f32 operations (no fused multiply-add
anywhere), so it is device-independent and has a single rule, `portable`::

    q(eps)   = rd_dt(eps)
    perturb: t = rd_dt(rd32(f32(q) * rd32(s)));  theta = rd_dt(f32(theta) + f32(t))
    update:  acc = 0 (f32); acc = rd32(acc + rd32(f32(q_n) * rd32(C_n))) per member
             acc = rd32(acc * rd32(alpha / N));  theta = rd_dt(f32(theta) + f32(rd_dt(acc)))

Each line is one torch op on f32 tensors with the scalar held in a 0-dim
f32 tensor; elementwise, hence independent of chunking and thread count.
Contiguous CPU f32 tensors take the numba loops of esverify.es.cpu_kernels,
and perturb of 1-D CPU f16/bf16 chunks es-awd's tail line in esverify.es.
half_kernels, the same roundings (same lines, proven bitwise equal; a NaN
anywhere goes to the torch lines, which decide its bits). The perturb lines
are esverify.es.unfused_perturb's, shared with es-paper. `rule` is
accepted and ignored: the profile has one rule. Kernel signatures:
esverify.es.profiles.

Checks: ``python -m pytest -q tests/test_es_kernels.py`` (against
esverify.es.reference and across the numba/torch paths) and
``esverify goldens check`` (goldens/es-at-scale.json).
"""
from __future__ import annotations

import numpy as np
import torch

from esverify.es import cpu_kernels, unfused_perturb
from esverify.es.numerics import rd32, round_to, scalar32, widen
from esverify.es.profiles.base import Profile
from esverify.es.unfused_perturb import perturb_torch, q32

__all__ = ["PROFILE", "RULE", "VERSION", "accumulate", "accumulate_drawn", "accumulate_drawn_apply", "apply",
           "new_acc", "perturb", "perturb_torch"]

VERSION = 1
RULE = "portable"


def perturb(theta, eps, s, rule, first, numel, out):
    """out <- rd_dt(f32(theta) + f32(rd_dt(rd32(f32(q) * rd32(s))))), q = rd_dt(eps): the unfused lines of
    esverify.es.unfused_perturb (docs/numerics.md §3), which es-paper shares.

    theta, out: 1-D chunks of one dtype (f32/f16/bf16) and length; eps: f32
    chunk of that length; all on one device. s: f64 (+sigma, or -sigma to
    restore), rounded there. `out` may be `theta`; `rule`, `first`, `numel` are not used.
    """
    unfused_perturb.perturb(theta, eps, s, out)


def new_acc(n, dtype, device):
    """A zeroed f32 accumulator of shape (n,) on `device`, whatever the parameter `dtype`."""
    if torch.device(device).type == "cpu":      # calloc'd: no parallel fill region
        return torch.from_numpy(np.zeros(n, dtype=np.float32))
    return torch.zeros(n, dtype=torch.float32, device=device)


def accumulate(acc, eps, coeff, dtype, rule, first, numel):
    """acc <- rd32(acc + rd32(f32(rd_dt(eps)) * rd32(coeff))) in place; returns acc (docs/numerics.md §3).

    acc: f32 chunk from new_acc; eps: f32 chunk of its length, same device;
    coeff: the member's f64 coefficient C_n (or antithetic D_k); dtype: the
    parameter dtype q is rounded to.
    """
    if dtype == torch.float32 and cpu_kernels.usable(acc, eps):
        cpu_kernels.accumulate(acc, eps, rd32(coeff))
        return acc
    acc.add_(q32(eps, dtype) * scalar32(rd32(coeff), eps.device))   # two roundings: no alpha=, no fma
    return acc


def accumulate_drawn(acc, stream_seeds, first, mapping, coeffs, dtype, rule, theta=None, steps=None) -> bool:
    """Per member m in order, `perturb` of theta by each s of steps[m], then `accumulate` of coeffs[m], on
    f32 noise elements first .. first+len(acc)-1 of the contract stream stream_seeds[m] under `mapping`,
    drawn inside the kernel (esverify.es.cpu_kernels.accumulate_drawn; the same bits). coeffs, steps: f64
    values, rounded here as `perturb` and `accumulate` round them. True when applied (f32 parameters,
    contiguous CPU tensors), else False and nothing changed; ValueError as cpu_kernels.accumulate_drawn's."""
    if dtype != torch.float32:
        return False
    return cpu_kernels.accumulate_drawn(acc, stream_seeds, first, mapping, [rd32(c) for c in coeffs], fused=False,
                                        theta=theta, steps=None if steps is None else
                                        [[rd32(s) for s in member] for member in steps])


def accumulate_drawn_apply(acc, stream_seeds, first, mapping, coeffs, dtype, rule, theta, steps, scale, naive) -> bool:
    """`accumulate_drawn`, then `apply` of the update to theta and to naive in place (scale = alpha / N, f64,
    rounded as `apply` rounds it), in the kernel's last pass (esverify.es.cpu_kernels.accumulate_drawn_apply;
    the same bits). True when applied (f32 parameters, contiguous CPU tensors), else False and nothing
    changed; ValueError as cpu_kernels.accumulate_drawn_apply's."""
    if dtype != torch.float32:
        return False
    return cpu_kernels.accumulate_drawn_apply(acc, stream_seeds, first, mapping, [rd32(c) for c in coeffs],
                                              False, theta, None if steps is None else
                                              [[rd32(s) for s in member] for member in steps], rd32(scale), naive)


def apply(theta, acc, scale, rule, first, numel, out):
    """out <- rd_dt(f32(theta) + f32(rd_dt(rd32(acc * rd32(scale))))), scale = alpha / N (f64).

    theta, out: chunks of the parameter dtype; acc: the f32 accumulator of
    the same length and device. `out` may be `theta`.
    """
    if cpu_kernels.usable(theta, acc, out):
        return cpu_kernels.apply(theta, acc, rd32(scale), out)
    step = round_to(acc * scalar32(rd32(scale), acc.device), theta.dtype)
    out.copy_(round_to(widen(theta) + widen(step), theta.dtype))


PROFILE = Profile(name="es-at-scale", version=VERSION, rules=(RULE,), rule_for=lambda device: RULE,
                  perturb=perturb, new_acc=new_acc, accumulate=accumulate, apply=apply,
                  accumulate_drawn=accumulate_drawn, accumulate_drawn_apply=accumulate_drawn_apply,
                  version_constant="esverify.references.es_at_scale.profile.VERSION", wire=True,
                  default=True)   # the primary reference: Config's and the tensor kernels' default profile
