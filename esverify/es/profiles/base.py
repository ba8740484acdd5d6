"""The `Profile` record of a numerics profile (docs/numerics.md §3): the interface a reference's profile fills.

Its own module so that a reference's profile module imports the record
without importing the registry that looks profiles up (esverify.es.profiles).
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
    #: protocol v1's wire config can name it (docs/PROTOCOL.md; protocol.schema.json, config.profile)
    wire: bool = False
    #: the default profile of `esverify.es.Config` and of perturb_tensor_ / update_tensor_ (exactly one
    #: registered Trainer profile sets it; esverify.es.profiles.default_profile)
    default: bool = False
    #: None, or accumulate_drawn(acc, stream_seeds, first, mapping, coeffs, dtype, rule, theta=None, steps=None)
    #: -> bool: member by member, `perturb` of theta by each s of steps[m] then `accumulate` of coeffs[m], on the
    #: contract stream's elements first .. first+len(acc)-1 computed as they are drawn (a member without steps
    #: never writes its noise to memory; esverify.es.cpu_kernels.accumulate_drawn), the same bits; False,
    #: nothing changed, when it cannot, and then the caller draws and calls `perturb`/`accumulate` (the
    #: replay and the trainer's update use it, docs/replay.md §9)
    accumulate_drawn: Callable | None = field(default=None, repr=False)
    #: None, or accumulate_drawn_apply(acc, stream_seeds, first, mapping, coeffs, dtype, rule, theta, steps, scale,
    #: naive) -> bool: `accumulate_drawn`, then `apply` of the update (alpha / N = scale) to theta and to naive in
    #: place, the same bits, the last member's pass doing both (the replay uses it, docs/replay.md §9); False,
    #: nothing changed, when it cannot
    accumulate_drawn_apply: Callable | None = field(default=None, repr=False)
