"""The `es-paper` numerics profile, version 2 (docs/numerics.md §3; docs/references.md §6).

Design record. The paper's original single-file scripts perturb, restore
and update with plain torch tensor ops in the PARAMETER dtype (no scaled
add, no f32 accumulator), so every op is one rounding of its own. Rule
`cpu` was measured on torch 2.13 CPU (AVX-512 and AVX2 builds; 1 and 2
torch threads; sizes 1 to 100003, so every vector tail is covered; random
bit patterns including subnormals). What was measured, for dt in f32, f16, bf16::

    tensor * python_float   rd_dt(rd32(f32(x) * rd32(s)))   scalar rounded to f32 (opmath), never to dt
    tensor.mul_(c)          same as above
    tensor.add_(tensor)     rd_dt(f32(x) + f32(y))           one f32 rounding, then dt (exact for f16/bf16)
    tensor.div_(int N)      rd_dt(rd32(f32(x) / rd32(N)))   a TRUE division, not a multiply by 1/N

The naive reading "div_ multiplies by the reciprocal" is wrong on CPU: for
f32 about 2.4 of every 1000 elements differ from ``x * rd32(1/N)``; for
f16 a few in 10**4 do (the f16 rounding hides most); for bf16 none were
seen. The naive reading "the scalar is rounded to the tensor dtype" is
wrong too: a scalar rounded to f16/bf16 first differs on about 2 of every
1000 elements. So, with q = rd_dt(eps) (``torch.randn(dtype=dt)``; under
contract noise the f32 contract value rounded to dt)::

    perturb:  t = rd_dt(rd32(f32(q) * rd32(s)));  theta = rd_dt(f32(theta) + f32(t))   s = +sigma / -sigma
    update:   acc = 0 (dtype dt)
              per member n in index order:
                  m = rd_dt(rd32(f32(q_n) * rd32(C_n)));  acc = rd_dt(f32(acc) + f32(m))
              u = rd_dt(rd32(f32(acc) / rd32(N)))
              step = rd_dt(rd32(f32(u) * rd32(alpha)))
              theta = rd_dt(f32(theta) + f32(step))

perturb is therefore the es-at-scale perturb (the same lines) and shares
its kernel, esverify.es.unfused_perturb. The update needs alpha and N separately, so `scale` hands
`apply` the pair ``(alpha, population)`` instead of the f64 alpha / N.
The restore (perturb with -sigma) is not exact: ``(theta + t) - t`` leaves
a rounding drift, which the paper loop keeps on each model copy
(esverify.references.es_paper.loop).

Rule `cuda` (a parameter on a CUDA device) differs in one line: torch's
CUDA ``div_`` by a Python int multiplies by the f32 reciprocal::

    u = rd_dt(rd32(f32(acc) * rd32(1 / rd32(N))))

Measured on an H200 with torch 2.11: for N in 2, 3, 5, 6, 7, 10, 29, 30,
31, 64, 100 and 2**20 gaussian elements each, 0 elements differ from the
reciprocal line in f32, f16 and bf16, while 46,194 to 663,039 per N differ
from the true division in f32 (1 in f16, 0 in bf16). The scalar multiply
and the add were measured there too and equal the `cpu` lines (0 of
5 x 2**20 per dtype).

Checks: ``python -m pytest -q tests/test_es_paper_profile.py`` (each line
against torch's own op and against esverify.es.reference's numpy lines,
bitwise, hypothesis over bit patterns) and ``esverify goldens check``
(goldens/es-paper.json).
"""
from __future__ import annotations

import torch

from esverify.es import half_kernels, unfused_perturb
from esverify.es.numerics import rd32, round_to, scalar32, widen
from esverify.es.profiles.base import Profile

VERSION = 2
#: the rule measured on torch's CPU kernels; RULES[1] is the CUDA one (a reciprocal in div_)
RULE = "cpu"
RULES = ("cpu", "cuda")


def rule_for(device) -> str:
    """The rule for `device` (torch.device or string): "cuda" on CUDA, "cpu" on anything else."""
    return "cuda" if torch.device(device).type == "cuda" else "cpu"


def mul_scalar(x: torch.Tensor, c: float) -> torch.Tensor:
    """rd_dt(rd32(f32(x) * rd32(c))): torch's ``x * c`` for a Python float c, as measured (new tensor)."""
    return round_to(widen(x) * scalar32(rd32(c), x.device), x.dtype)


def add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """rd_dt(f32(x) + f32(y)): torch's ``x.add_(y)`` for two tensors of one dtype (new tensor)."""
    return round_to(widen(x) + widen(y), x.dtype)


def div_int(x: torch.Tensor, n: int, rule: str = RULE) -> torch.Tensor:
    """torch's ``x.div_(n)`` for a Python int n (new tensor): rule `cpu` a true division,
    rd_dt(rd32(f32(x) / rd32(n))); rule `cuda` the f32 reciprocal, rd_dt(rd32(f32(x) * rd32(1 / rd32(n)))).
    Raises ValueError for another rule."""
    if rule == "cuda":
        return round_to(widen(x) * scalar32(reciprocal32(n), x.device), x.dtype)
    if rule != "cpu":
        raise ValueError(f"unknown es-paper rule {rule!r}; known: {RULES}")
    return round_to(widen(x) / scalar32(rd32(float(n)), x.device), x.dtype)


def reciprocal32(n: int) -> float:
    """rd32(1 / rd32(n)) as a Python float: the f32 division 1.0f / float(n). The f64 quotient rounded to
    f32 is the correctly rounded f32 quotient (a double rounding is harmless for a division of f32 values:
    53 >= 2 * 24 + 2)."""
    return rd32(1.0 / rd32(float(n)))


def perturb(theta, eps, s, rule, first, numel, out):
    """out <- rd_dt(f32(theta) + f32(rd_dt(rd32(f32(q) * rd32(s))))), q = rd_dt(eps): es-at-scale's lines,
    esverify.es.unfused_perturb.

    theta, out: 1-D chunks of one dtype (f32/f16/bf16) and length; eps: the
    f32 noise chunk; s: f64 (+sigma, or -sigma to restore). `out` may be theta.
    """
    unfused_perturb.perturb(theta, eps, s, out)


def new_acc(n, dtype, device):
    """A zeroed accumulator of shape (n,) in the PARAMETER dtype (``torch.zeros_like(param)``)."""
    return torch.zeros(n, dtype=dtype, device=device)


def accumulate(acc, eps, coeff, dtype, rule, first, numel):
    """acc <- rd_dt(f32(acc) + f32(rd_dt(rd32(f32(rd_dt(eps)) * rd32(coeff))))), a new tensor.

    acc: chunk of dtype `dtype` from new_acc; eps: f32 chunk of its length;
    coeff: the member's coefficient (the script's ``float(r_norm)``, an f32 value).
    """
    if acc.dtype == dtype and eps.dtype == torch.float32 and acc.dim() == 1:
        # f16/bf16 on the CPU: these roundings are es-awd's tail line (acc in the dtype, the f32 noise rounded
        # to it first), one compiled loop (esverify.es.half_kernels); None on a NaN, for the torch lines
        done = half_kernels.scaled_add(acc, eps, rd32(coeff), 0)
        if done is not None:
            return done
    return add(acc, mul_scalar(round_to(eps, dtype), coeff))


def scale(alpha: float, population: int):
    """The pair (alpha, population) `apply` needs: N and alpha are two separate roundings."""
    return (float(alpha), int(population))


def apply(theta, acc, scale, rule, first, numel, out):
    """out <- theta + rd_dt(rd32(f32(u) * rd32(alpha))), u = div_int(acc, N, rule).

    theta, out: chunks of the parameter dtype; acc: the accumulator of that
    dtype; scale: ``(alpha, N)`` from `scale`. `out` may be theta.
    """
    alpha, population = scale
    step = mul_scalar(div_int(acc, population, rule), alpha)
    out.copy_(add(theta, step))


PROFILE = Profile(name="es-paper", version=VERSION, rules=RULES, rule_for=rule_for,
                  perturb=perturb, new_acc=new_acc, accumulate=accumulate, apply=apply,
                  version_constant="esverify.references.es_paper.profile.VERSION", scale=scale)
