"""Test stand-in for es-awd's weight update utilities (NOT the reference code).

Written by the esverify authors from `docs/references.md` §2 alone, with
the interface the interface manifest (esverify/references/es_awd/child/interfaces.json) gives the
real file (module-level imports Iterable, zip_longest and torch; the same
functions and signatures). It uses torch's in-place scaled add
(`x.add_(y, alpha=a)`), an accumulator in the tensor's own dtype and
tensor-scalar arithmetic exactly as §2 describes, so that a parity run
measures what real torch does against the `es-awd` profile of
docs/numerics.md. Parameters are consumed lazily, one tensor at a time
(§2; the update walks `parameters` and `original_parameters` pairwise),
which is what lets the runner attribute noise draws to slots.
"""
from collections.abc import Iterable
from itertools import zip_longest

import torch


def generate_noise(seed, shape, dtype, device):
    """docs/references.md §2, generate_noise(seed, shape, dtype, device): a new
    torch.Generator on `device` seeded `seed`, then torch.randn with it."""
    generator = torch.Generator(device=device)
    generator.manual_seed(seed)
    return torch.randn(shape, dtype=dtype, device=device, generator=generator)


def apply_seeded_noise_to_parameters(parameters: Iterable, seed, scale, caching=False):
    """docs/references.md §2, apply_seeded_noise_to_parameters(parameters, seed, scale,
    caching=False): for each tensor of the iterable, add_(noise, alpha=scale)
    in place (perturb with +sigma, restore with -sigma). With caching=True noise
    is reused for tensors of equal (device, dtype, shape)."""
    cache = {}
    for param in parameters:
        if caching:
            key = (seed, str(param.device), param.dtype, tuple(param.shape))
            if key not in cache:
                cache[key] = generate_noise(seed, param.shape, param.dtype, param.device)
            noise = cache[key]
        else:
            noise = generate_noise(seed, param.shape, param.dtype, param.device)
        param.add_(noise, alpha=scale)


def update_parameters_from_seeds(parameters: Iterable, seeds, coeffs, alpha, population_size, caching=False,
                                 original_parameters=None, weight_decay_type='none', weight_decay_lambda=0.0):
    """docs/references.md §2, update_parameters_from_seeds: per tensor an accumulator
    in the tensor's own dtype, acc.add_(noise, alpha=coeff) per (seed, coeff),
    then param.add_(acc, alpha=alpha / population_size); then, if decay is on,
    the anchored decay toward the matching entry of original_parameters
    (walked pairwise). Bad lengths, a missing or short original_parameters,
    an unknown decay type or a negative lambda raise ValueError; lambda 0
    means no decay."""
    seeds, coeffs = list(seeds), list(coeffs)
    if len(seeds) != len(coeffs):
        raise ValueError(f"{len(seeds)} seeds but {len(coeffs)} coeffs")
    weight_decay_type, weight_decay_lambda = normalize_weight_decay_config(weight_decay_type, weight_decay_lambda)
    decay = weight_decay_type != "none" and weight_decay_lambda > 0
    if decay and original_parameters is None:
        raise ValueError("weight decay needs original_parameters")
    cache = {}
    for param, reference in zip_longest(parameters, original_parameters if decay else ()):
        if param is None:
            break   # anchors beyond the last parameter are not used
        acc = torch.zeros_like(param)
        for seed, coeff in zip(seeds, coeffs):
            if caching:
                key = (seed, str(param.device), param.dtype, tuple(param.shape))
                if key not in cache:
                    cache[key] = generate_noise(seed, param.shape, param.dtype, param.device)
                noise = cache[key]
            else:
                noise = generate_noise(seed, param.shape, param.dtype, param.device)
            acc.add_(noise, alpha=coeff)
        param.add_(acc, alpha=alpha / population_size)
        if decay:
            if reference is None:
                raise ValueError("original_parameters is shorter than parameters")
            reference = _copy_reference_parameter_to_device(reference, param)
            apply_reference_weight_decay_(param, reference, weight_decay_type, weight_decay_lambda, alpha)


def apply_reference_weight_decay_(parameter, reference_parameter, weight_decay_type, weight_decay_lambda,
                                  alpha):
    """docs/references.md §2, apply_reference_weight_decay_: the decay alone toward
    `reference_parameter`, l1 or l2 with step alpha * lambda (l2 asserts the
    step is below 1); in place on `parameter`."""
    step = alpha * weight_decay_lambda
    delta = parameter - reference_parameter
    if weight_decay_type == "l2":
        assert step < 1, f"l2 decay step {step} must be below 1"
        delta = delta * (1 - step)
    elif weight_decay_type == "l1":
        delta = torch.sign(delta) * torch.clamp(delta.abs() - step, min=0)
    else:
        raise ValueError(f"unknown weight_decay_type {weight_decay_type!r}")
    parameter.copy_(delta + reference_parameter)


def normalize_weight_decay_config(weight_decay_type, weight_decay_lambda):
    """docs/references.md §2: the decay settings checked: (type, lambda) with type one of none, l1, l2
    (None means none) and lambda a float >= 0; ValueError otherwise."""
    weight_decay_type = "none" if weight_decay_type is None else str(weight_decay_type).lower()
    if weight_decay_type not in ("none", "l1", "l2"):
        raise ValueError(f"unknown weight_decay_type {weight_decay_type!r}")
    weight_decay_lambda = float(weight_decay_lambda)
    if weight_decay_lambda < 0:
        raise ValueError(f"weight_decay_lambda must be >= 0, got {weight_decay_lambda}")
    return weight_decay_type, weight_decay_lambda


def _copy_reference_parameter_to_device(reference_parameter, parameter):
    """The anchor tensor on the parameter's device (the snapshot lives on the CPU); the same tensor
    when it is there already."""
    return reference_parameter.to(device=parameter.device)
