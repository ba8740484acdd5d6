"""Numerics profiles: one named, versioned object per file (docs/numerics.md §3; CONTRIBUTING.md).

A profile pins where every rounding of perturb, restore and update happens,
so that the clean-room trainer reproduces a reference bit for bit on
identical noise. The trainer looks profiles up by name in `PROFILES` and
never branches on which one it has. A fix to a profile bumps its
`version` (and needs a CHANGELOG heading ``## <name> v<N>`` and regenerated
goldens), never the RNG contract's.

Kernel signature (all on one bounded chunk ``[first, first + len)`` of a
flattened parameter with `numel` elements, on the parameter's device):

- ``perturb(theta, eps, s, rule, first, numel, out)``: writes theta + s q(eps) into `out`
- ``new_acc(n, dtype, device) -> accumulator``
- ``accumulate(acc, eps, coeff, dtype, rule, first, numel) -> acc`` (may work in place)
- ``apply(theta, acc, scale, rule, first, numel, out)``: writes the updated theta into `out`
- ``scale(alpha, population) -> scale``: what `apply` receives; ``alpha / population`` (f64) by
  default, the pair ``(alpha, population)`` for es-paper, which divides by N and multiplies by
  alpha as two roundings (docs/numerics.md §3)

`out` has theta's shape and dtype and may be theta itself (in place).

`eps` is the f32 noise chunk, `s`, `coeff` are Python floats (f64), `scale` what `scale` returned;
the profile rounds them itself. `numel` is there because es-awd's rule
`cpu` defines its tail on the whole tensor, not on the chunk.

Checks: ``python -m pytest -q tests/test_es_kernels.py tests/test_es_goldens.py``
(every profile against `esverify.es.reference`, bitwise) and
``esverify goldens check`` (the committed es-at-scale / es-awd vectors).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import torch


@dataclass(frozen=True)
class Profile:
    """One numerics profile: a named, versioned set of chunk kernels (docs/numerics.md §3).

    A frozen value, looked up by name in `PROFILES` (`get_profile`); the
    trainer calls its kernels and never asks which profile it holds.
    name: registry key ("es-at-scale", "es-awd"), recorded in trainer state
    and goldens. version: int, bumped by any change of a computed bit (with
    a CHANGELOG heading ``## <name> v<N>`` and regenerated goldens); a state
    of another version is refused on load. rules: the rule names the
    profile knows. rule_for(device) -> the rule for a torch.device or
    device string (the tensor's device decides, never the caller).
    perturb, new_acc, accumulate, apply: the chunk kernels, signatures in
    this module's docstring; they take f32 noise and f32/f16/bf16 chunks on
    one device and raise ValueError for an unknown rule. version_constant:
    dotted path of the module constant holding `version`, quoted by the
    goldens gate's messages.
    """

    name: str                                       #: e.g. "es-at-scale"
    version: int                                    #: bumped by any change of its bits
    rules: tuple                                    #: named rules this profile knows
    rule_for: Callable[[torch.device], str]         #: the rule used on a device
    perturb: Callable = field(repr=False)
    new_acc: Callable = field(repr=False)
    accumulate: Callable = field(repr=False)
    apply: Callable = field(repr=False)
    version_constant: str = ""                      #: where `version` lives, for messages
    scale: Callable = field(default=lambda alpha, population: alpha / population, repr=False)


def _load() -> dict:
    from . import es_at_scale, es_awd, es_paper
    return {p.name: p for p in (es_at_scale.PROFILE, es_awd.PROFILE, es_paper.PROFILE)}


PROFILES: dict = _load()


def get_profile(name: str) -> Profile:
    """The profile registered as `name`; ValueError naming the known ones otherwise."""
    try:
        return PROFILES[name]
    except KeyError:
        raise ValueError(f"unknown profile {name!r}; known: {sorted(PROFILES)}") from None


from . import skill_sample as _skill_sample  # noqa: E402  (a loop profile, not Trainer-shaped: docs/numerics.md §8)
LOOP_PROFILES: dict = {_skill_sample.PROFILE.name: _skill_sample.PROFILE}
