"""A profile's perturb and update on caller-supplied noise, one tensor at a time.

The trainer regenerates its own noise; parity runs and invariant tests
sometimes hold the noise already (e.g. the noise a reference was fed).
These functions run exactly the trainer's chunked kernels (same profile
code, same rounding) on given f32 noise, in place. Source: docs/numerics.md §3-§4.
Results are bitwise those of the trainer for any chunk_elements.

Checks: ``python -m pytest -q tests/test_es_kernels.py``.
"""
from __future__ import annotations

import torch

from .numerics import DEFAULT_CHUNK, DTYPES
from .profiles import default_profile, get_profile


def _check(theta: torch.Tensor, noises, name="noise") -> None:
    if not isinstance(theta, torch.Tensor) or theta.dtype not in DTYPES or not theta.is_contiguous():
        raise ValueError("theta must be a contiguous f32/f16/bf16 torch tensor")
    for i, eps in enumerate(noises):
        if eps.dtype != torch.float32 or eps.numel() != theta.numel() or eps.device != theta.device:
            raise ValueError(f"{name}[{i}] must be f32 with {theta.numel()} elements on {theta.device}, "
                             f"got {eps.dtype} with {eps.numel()} on {eps.device}")


def perturb_tensor_(theta: torch.Tensor, eps: torch.Tensor, s: float, profile: str | None = None,
                    rule: str | None = None, chunk_elements: int | None = None) -> torch.Tensor:
    """theta <- theta + s * q(eps) in place under `profile` (s = +sigma, or -sigma to restore).

    theta: contiguous f32/f16/bf16 tensor; eps: f32 tensor with theta's
    element count on its device; profile: None for the default profile
    (`esverify.es.profiles.default_profile`, es-at-scale); rule: None picks the profile's rule for
    the device. Returns theta. ValueError for an unknown profile, an
    unknown es-awd rule (es-at-scale has one rule and ignores it), or
    theta/eps not as described (naming `theta` or `eps[0]`).
    """
    prof = get_profile(default_profile() if profile is None else profile)
    _check(theta, [eps], "eps")
    rule = rule or prof.rule_for(theta.device)
    flat, e, n = theta.detach().view(-1), eps.reshape(-1), theta.numel()
    chunk = chunk_elements or DEFAULT_CHUNK
    with torch.no_grad():
        for start in range(0, n, chunk):
            end = min(n, start + chunk)
            prof.perturb(flat[start:end], e[start:end], s, rule, start, n, flat[start:end])
    return theta


def update_tensor_(theta: torch.Tensor, noises, coeffs, alpha: float, population: int,
                   profile: str | None = None, rule: str | None = None,
                   chunk_elements: int | None = None) -> torch.Tensor:
    """theta += (alpha / population) sum_n coeffs[n] q(noises[n]) in place under `profile`.

    noises: f32 tensors with theta's element count; coeffs: f64 floats, one
    per noise (already folded for antithetic pairs: D_k with its pair's
    noise once); population: the divisor N (the full population). No
    anchored decay here (see apply_anchor_decay_). Returns theta.
    theta: contiguous f32/f16/bf16 tensor; profile: None for the default
    profile; rule: None picks the profile's rule for the device. ValueError for an unknown profile or es-awd rule, unequal
    numbers of noises and coeffs, or a noise that is not f32 with theta's
    element count on its device (naming `noise[i]`).
    """
    prof = get_profile(default_profile() if profile is None else profile)
    noises, coeffs = list(noises), [float(c) for c in coeffs]
    if len(noises) != len(coeffs):
        raise ValueError(f"noises has {len(noises)} tensors but coeffs has {len(coeffs)} values")
    _check(theta, noises)
    rule = rule or prof.rule_for(theta.device)
    flat, n = theta.detach().view(-1), theta.numel()
    flats = [e.reshape(-1) for e in noises]
    chunk = chunk_elements or DEFAULT_CHUNK
    with torch.no_grad():
        for start in range(0, n, chunk):
            end = min(n, start + chunk)
            acc = prof.new_acc(end - start, theta.dtype, theta.device)
            for e, c in zip(flats, coeffs):
                acc = prof.accumulate(acc, e[start:end], c, theta.dtype, rule, start, n)
            prof.apply(flat[start:end], acc, prof.scale(alpha, population), rule, start, n, flat[start:end])
    return theta
