"""The `es-awd` numerics profile, version 2 (docs/numerics.md §3; docs/references.md §2).

The anchored-weight-decay reference adds noise with torch's in-place
scaled add ``x.add_(y, alpha=a)``, whose rounding depends on the device.
Two named rules, chosen by the parameter's device:

- `cpu` (torch 2.13, AVX2, one thread; re-measured here, also under
  AVX-512 for the sizes probed)::

      k(a) = rd32(a) for f32, rd_dt(rd32(a)) for f16/bf16
      f32:             fma32(x, y, k)                               every element
      f16/bf16 body:   rd_dt(fma32(f32(x), f32(y), k))
      f16/bf16 tail:   rd_dt(f32(x) + f32(rd_dt(f32(y) * k)))       i >= 32 * floor(numel / 32)

  Note: the rule was first written with the body as one rounding,
  rd_dt(x + y*k). Measured on torch 2.13 (f16, a = 0.6015625, 2**20 random
  elements) the body is fma32 followed by rd_dt: 247 elements differ from
  the single rounding and none from fma-then-round. This module implements
  the measurement, which is what docs/numerics.md §3 states.
- `cuda`: rd_dt(fma32(f32(x), f32(y), rd32(a))) for every element, scale
  kept in f32, no tail (measured on an H200, torch 2.11: 0 of 5 x 2**20
  elements differ per dtype; docs/numerics.md §3).

perturb: theta <- scaled add of q(eps) = rd_dt(eps) with a = s;
update: acc = 0 (dtype dt); acc <- scaled add of q(eps_n) with a = C_n;
theta <- scaled add of acc with a = alpha / N.
Kernel signatures: esverify.es.profiles.

Checks: ``python -m pytest -q tests/test_es_kernels.py`` (rules against
esverify.es.reference and torch's own ``add_(alpha=)`` on one thread;
the `cuda` rule only where a GPU is present) and ``esverify goldens check``.
"""
from __future__ import annotations

import torch

from esverify.es import cpu_kernels, half_kernels
from esverify.es.numerics import fma32, rd32, rd_dt32, round_to, scalar32, widen
from esverify.es.profiles.base import Profile

VERSION = 2
TAIL_BLOCK = 32


def rule_for(device: torch.device) -> str:
    """The rule for `device` (torch.device or string): "cuda" on CUDA, "cpu" on anything else."""
    return "cuda" if torch.device(device).type == "cuda" else "cpu"


def tail_start(numel: int) -> int:
    """First element index of rule `cpu`'s tail: 32 * floor(numel / 32)."""
    return TAIL_BLOCK * (numel // TAIL_BLOCK)


def scaled_add(x: torch.Tensor, y: torch.Tensor, a: float, rule: str, first: int, numel: int) -> torch.Tensor:
    """x + a*y under `rule`, for the chunk [first, first+len) of a tensor of `numel` elements.

    x, y: 1-D tensors of the parameter dtype, same length and device; a: f64.
    Returns a new tensor of x's dtype. Raises ValueError for an unknown rule.
    f16/bf16 on the CPU take the numba kernel (esverify.es.half_kernels: the same bits, one loop),
    anything else and a chunk with a NaN the torch lines (`scaled_add_torch`).
    """
    out = _half(x, y, a, rule, first, numel) if y.dtype == x.dtype else None   # f32 y: the kernel would round it
    return scaled_add_torch(x, y, a, rule, first, numel) if out is None else out


def scaled_add_torch(x: torch.Tensor, y: torch.Tensor, a: float, rule: str, first: int, numel: int) -> torch.Tensor:
    """`scaled_add` in torch ops on any device: the rule's own lines, which the numba kernel must equal."""
    dtype = x.dtype
    if rule == "cuda" or (rule == "cpu" and dtype == torch.float32):
        return round_to(fma32(widen(x), widen(y), rd32(a)), dtype)
    if rule != "cpu":
        raise ValueError(f"unknown es-awd rule {rule!r}; known: ('cpu', 'cuda')")
    k = rd_dt32(a, dtype)
    split = min(max(tail_start(numel) - first, 0), x.numel())
    body = round_to(fma32(widen(x[:split]), widen(y[:split]), k), dtype)
    if split == x.numel():
        return body
    xt, yt = widen(x[split:]), widen(y[split:])
    tail = round_to(xt + widen(round_to(yt * scalar32(k, x.device), dtype)), dtype)
    return torch.cat([body, tail])


def _half(x, y, a, rule, first, numel):
    """scaled_add(x, y, a) by the f16/bf16 numba kernel, y of x's dtype or f32 noise that the kernel rounds
    to it first (rd_dt(y)); None when the kernel does not apply or meets a NaN (then the torch lines)."""
    if x.dtype not in half_kernels.HALF_DTYPES or rule not in ("cpu", "cuda") or x.device.type != "cpu":
        return None   # the kernel itself refuses the rest (half_kernels.usable)
    if rule == "cuda":
        return half_kernels.scaled_add(x, y, rd32(a), x.numel())
    split = min(max(tail_start(numel) - first, 0), x.numel())
    return half_kernels.scaled_add(x, y, rd_dt32(a, x.dtype), split)


def _f32_into(x, y, a, rule, out) -> bool:
    """scaled_add of f32 CPU chunks written straight into `out` (the numba fma32, no temporary):
    True when it applied. Both rules are fma32(x, y, rd32(a)) on f32; the bits are scaled_add's
    (the same kernel; tests/test_es_kernels.py). `out` may be x."""
    if rule not in ("cpu", "cuda") or not cpu_kernels.fma_usable(x, y, out):
        return False
    cpu_kernels.fma32(x, y, rd32(a), out)
    return True


def perturb(theta, eps, s, rule, first, numel, out):
    """out <- scaled_add(theta, rd_dt(eps), s) under `rule` (docs/numerics.md §3); `out` may be theta."""
    if _f32_into(theta, eps, s, rule, out):
        return
    done = _half(theta, eps, s, rule, first, numel)
    out.copy_(scaled_add_torch(theta, round_to(eps, theta.dtype), s, rule, first, numel) if done is None else done)


def new_acc(n, dtype, device):
    """A zeroed accumulator of shape (n,) in the parameter `dtype` (es-awd accumulates in dt)."""
    return torch.zeros(n, dtype=dtype, device=device)


def accumulate(acc, eps, coeff, dtype, rule, first, numel):
    """scaled_add(acc, rd_dt(eps), coeff) as a tensor of acc's dtype: acc itself, updated in place, on the
    f32 CPU path, else a new tensor (docs/numerics.md §3)."""
    if dtype == torch.float32 and _f32_into(acc, eps, coeff, rule, acc):
        return acc
    done = _half(acc, eps, coeff, rule, first, numel) if acc.dtype == dtype else None   # the kernel rounds to acc's
    return scaled_add_torch(acc, round_to(eps, dtype), coeff, rule, first, numel) if done is None else done


def accumulate_drawn(acc, stream_seeds, first, mapping, coeffs, dtype, rule, theta=None, steps=None) -> bool:
    """Per member m in order, `perturb` of theta by each s of steps[m], then `accumulate` of coeffs[m], on
    f32 noise elements first .. first+len(acc)-1 of the contract stream stream_seeds[m] under `mapping`,
    drawn inside the fused multiply-add kernel (esverify.es.cpu_kernels.accumulate_drawn; the same bits).
    coeffs, steps: f64 values, rounded here as `perturb` and `accumulate` round them. True when applied (f32
    parameters, contiguous CPU tensors, a CPU with an FMA unit), else False and nothing changed; ValueError
    as cpu_kernels.accumulate_drawn's."""
    if dtype != torch.float32 or rule not in ("cpu", "cuda"):
        return False
    return cpu_kernels.accumulate_drawn(acc, stream_seeds, first, mapping, [rd32(c) for c in coeffs], fused=True,
                                        theta=theta, steps=None if steps is None else
                                        [[rd32(s) for s in member] for member in steps])


def accumulate_drawn_apply(acc, stream_seeds, first, mapping, coeffs, dtype, rule, theta, steps, scale, naive) -> bool:
    """`accumulate_drawn`, then `apply` of the update to theta and to naive in place (scale = alpha / N, f64,
    rounded as `apply` rounds it: fma32 of rd32(scale)), in the kernel's last pass
    (esverify.es.cpu_kernels.accumulate_drawn_apply; the same bits). True when applied (f32 parameters,
    contiguous CPU tensors, a CPU with an FMA unit), else False and nothing changed; ValueError as
    cpu_kernels.accumulate_drawn_apply's."""
    if dtype != torch.float32 or rule not in ("cpu", "cuda"):
        return False
    return cpu_kernels.accumulate_drawn_apply(acc, stream_seeds, first, mapping, [rd32(c) for c in coeffs],
                                              True, theta, None if steps is None else
                                              [[rd32(s) for s in member] for member in steps], rd32(scale), naive)


def apply(theta, acc, scale, rule, first, numel, out):
    """out <- scaled_add(theta, acc, scale), scale = alpha / N (f64); `out` may be theta."""
    if _f32_into(theta, acc, scale, rule, out):
        return
    out.copy_(scaled_add(theta, acc, scale, rule, first, numel))


PROFILE = Profile(name="es-awd", version=VERSION, rules=("cpu", "cuda"), rule_for=rule_for,
                  perturb=perturb, new_acc=new_acc, accumulate=accumulate, apply=apply,
                  accumulate_drawn=accumulate_drawn, accumulate_drawn_apply=accumulate_drawn_apply,
                  version_constant="esverify.references.es_awd.profile.VERSION", wire=True)
