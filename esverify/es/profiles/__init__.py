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

from collections.abc import Mapping

from ... import registry
from .base import Profile


def _of_kind(loop: bool) -> dict:
    """name -> profile of every reference whose kind `loop` says (False: Trainer-shaped `Profile`, True: a
    loop profile, docs/numerics.md §8), from esverify.registry."""
    return {name: p for name, p in registry.profiles().items() if isinstance(p, Profile) != loop}


#: name -> Trainer profile (`Profile`) of every reference
PROFILES: Mapping = registry.Asked(lambda: _of_kind(loop=False))
#: name -> loop profile (not Trainer-shaped: docs/numerics.md §8) of every reference
LOOP_PROFILES: Mapping = registry.Asked(lambda: _of_kind(loop=True))


def default_profile() -> str:
    """The name of the Trainer profile whose `default` flag is set; LookupError unless exactly one sets it."""
    marked = [name for name, p in PROFILES.items() if p.default]
    if len(marked) != 1:
        raise LookupError(f"exactly one Trainer profile must be the default (Profile.default); found {marked}")
    return marked[0]


def get_profile(name: str) -> Profile:
    """The profile registered as `name`; ValueError naming the known ones otherwise."""
    try:
        return PROFILES[name]
    except KeyError:
        raise ValueError(f"unknown profile {name!r}; known: {sorted(PROFILES)}") from None
