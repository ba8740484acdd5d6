"""Anchored weight decay toward the anchor theta0 (docs/numerics.md §5; arXiv:2605.30148).

After each update, with step a = alpha * lambda (f64)::

    d = rd_dt(f32(theta) - f32(theta0))
    l2: d = rd_dt(f32(d) * rd32(1 - a))                         (a < 1)
    l1: u = rd_dt(|f32(d)| - b),  b = rd32(a) for f32, f32(rd_dt(rd32(a))) otherwise
        (rule `cuda`: b = rd32(a) for every dtype)
        v = u if u >= 0 else +0     (IEEE: u = -0 stays -0)
        d = sign(d) * v             (a real multiplication: zero signs follow IEEE)
    theta = rd_dt(f32(d) + f32(theta0))

The same formula serves every profile, with one difference by rule: the
reference's ``delta.abs() - step`` with a Python float step. Torch's CPU
kernel rounds that scalar to the f16/bf16 dtype first; its CUDA kernel
keeps it in f32 (measured on an H200, torch 2.11: 0 of 5 x 2**20 elements
differ from b = rd32(a) for f16 and for bf16, and up to 566,955 of each
2**20 from the CPU reading: 25,458 or more for every step but f16's 1e-5). So a profile rule named `cuda` (es-awd's
and es-paper's, torch's CUDA kernels) takes b = rd32(a); every other rule,
es-at-scale's device-free `portable` included, the CPU reading.
Elementwise, so chunking and thread count do not change a bit.
lambda = 0 means no decay.
`check_decay` is the only validation of a decay setting: Config uses it
too, so both entry points give the same messages.

Checks: ``python -m pytest -q tests/test_es_kernels.py tests/test_es_errors.py``
(against esverify.es.reference.anchor_decay, bitwise; error messages).
"""
from __future__ import annotations

import math

import torch

from .numerics import DEFAULT_CHUNK, DTYPES, rd32, rd_dt32, round_to, scalar32, widen

DECAYS = ("none", "l1", "l2")


#: the profile rules under which the l1 step enters the subtraction as an f32 scalar (torch's CUDA kernels)
F32_STEP_RULES = ("cuda",)


def l1_step(a: float, dtype: torch.dtype, rule: str | None) -> float:
    """b of the l1 line as a Python float: rd32(a) for f32 or a rule in F32_STEP_RULES, else f32(rd_dt(rd32(a)))."""
    return rd32(a) if rule in F32_STEP_RULES else rd_dt32(a, dtype)


def decay_chunk(theta: torch.Tensor, anchor: torch.Tensor, kind: str, a: float,
                rule: str | None = None) -> torch.Tensor:
    """New values of one chunk of theta after anchored decay `kind` with step `a` (docs/numerics.md §5).

    theta, anchor: 1-D chunks of one dtype (f32/f16/bf16), length and
    device; kind: "l1" or "l2" (ValueError otherwise; "none" is the
    caller's business); a = alpha * lambda (f64), already validated by
    `check_decay`; rule: the profile rule of theta's device (`cuda` keeps
    the l1 step in f32; None or any other rule: the CPU reading). Returns a
    new tensor of theta's dtype; theta is unchanged.
    """
    dt, dev = theta.dtype, theta.device
    d = round_to(widen(theta) - widen(anchor), dt)
    if kind == "l2":
        d = round_to(widen(d) * scalar32(rd32(1.0 - a), dev), dt)
    elif kind == "l1":
        d32 = widen(d)
        u = round_to(d32.abs() - scalar32(l1_step(a, dt, rule), dev), dt)
        v = torch.where(u >= 0, u, torch.zeros((), dtype=dt, device=dev))
        d = torch.sign(d) * v
    else:
        raise ValueError(f"unknown anchor_decay {kind!r}; known: {DECAYS}")
    return round_to(widen(d) + widen(anchor), dt)


def _nonnegative(name: str, value) -> float:
    """`value` as a finite f64 >= 0; ValueError/TypeError whose message starts with `name`."""
    try:
        value = float(value)
    except (TypeError, ValueError) as exc:   # keep the class float() chose; name the argument
        raise type(exc)(f"{name} must be a real number, got {type(value).__name__} {value!r}") from None
    if not math.isfinite(value):
        raise ValueError(f"{name} must be finite, got {value!r}")
    if value < 0:
        raise ValueError(f"{name} must be >= 0, got {value!r}")
    return value


def check_decay(decay: str, lam: float, alpha: float) -> float:
    """Validate an anchored-decay setting and return its step a = alpha * lam (docs/numerics.md §5).

    The one validation of anchored decay: `Config` and `apply_anchor_decay_`
    both call it, so their messages agree. decay: one of DECAYS; lam
    (anchor_lambda) and alpha: finite reals >= 0; with "l2", a must be < 1
    (else 1 - a would flip or zero the distance to the anchor). Returns a
    as a Python float (f64 product). Raises ValueError (TypeError for a
    non-numeric lam/alpha) whose message starts with the offending field:
    "anchor_decay", "anchor_lambda" or "alpha".
    """
    if decay not in DECAYS:
        raise ValueError(f"anchor_decay: unknown value {decay!r}; known: {DECAYS}")
    lam = _nonnegative("anchor_lambda", lam)
    alpha = _nonnegative("alpha", alpha)
    a = alpha * lam
    if decay == "l2" and not a < 1:
        raise ValueError(f"anchor_lambda: l2 decay needs alpha * anchor_lambda < 1, got {a!r}")
    return a


def apply_anchor_decay_(params, anchors, decay: str, lam: float, alpha: float,
                        profile: str | None = None, rule: str | None = None,
                        chunk_elements: int | None = None) -> None:
    """Anchored weight decay alone, in place, on a list of tensors (docs/numerics.md §5).

    params, anchors: equal-length sequences of contiguous f32/f16/bf16
    tensors, pairwise of equal shape, dtype and device. decay: "none", "l1"
    or "l2"; lam >= 0 (0 or "none": nothing changes); alpha >= 0 (the
    step is alpha * lam in f64). `rule` picks the l1 step's rounding
    (`decay_chunk`); without it, `profile`'s rule for each tensor's device
    (es-awd's and es-paper's on CUDA: `cuda`), and without either the CPU reading on every
    device. Raises ValueError (naming the argument) before changing anything.
    """
    from .profiles import get_profile
    a = check_decay(decay, lam, alpha)
    prof = None
    if profile is not None:
        prof = get_profile(profile)
        if rule is not None and rule not in prof.rules:
            raise ValueError(f"rule {rule!r} is not a rule of profile {profile!r}: {prof.rules}")
    params, anchors = list(params), list(anchors)
    if len(params) != len(anchors):
        raise ValueError(f"anchors has {len(anchors)} tensors but params has {len(params)}")
    for i, (p, q) in enumerate(zip(params, anchors)):
        if p.dtype not in DTYPES:
            raise ValueError(f"params[{i}] has dtype {p.dtype}; supported: f32, f16, bf16")
        if (p.shape, p.dtype, p.device) != (q.shape, q.dtype, q.device):
            raise ValueError(f"anchors[{i}] is {tuple(q.shape)} {q.dtype} on {q.device}, "
                             f"params[{i}] is {tuple(p.shape)} {p.dtype} on {p.device}")
        if not (p.is_contiguous() and q.is_contiguous()):
            raise ValueError(f"params[{i}] and anchors[{i}] must be contiguous")
    if decay == "none" or float(lam) == 0.0:   # the reference: lambda 0 is no decay
        return
    chunk = chunk_elements or DEFAULT_CHUNK
    with torch.no_grad():
        for p, q in zip(params, anchors):
            flat, qflat = p.detach().view(-1), q.detach().view(-1)
            p_rule = rule if rule is not None or prof is None else prof.rule_for(p.device)
            for s in range(0, flat.numel(), chunk):
                e = min(flat.numel(), s + chunk)
                flat[s:e].copy_(decay_chunk(flat[s:e], qflat[s:e], decay, a, p_rule))
