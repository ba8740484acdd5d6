"""The trainer's configuration and its validation (docs/numerics.md §1, §6).

Defaults are the paper's (Qiu et al. 2025, Algorithm 1) except the mapping
(`poly32`, portable). ``alpha=None`` means sigma / 2, computed in f64 and
stored resolved. Every error is a ValueError (TypeError for a wrong type)
whose message starts with the field's name. Anchored decay is validated by
`esverify.es.decay.check_decay`, shared with `apply_anchor_decay_`.
Frozen: a config is a value, stored whole in the trainer's state.

Checks: ``python -m pytest -q tests/test_es_errors.py``.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

from .decay import check_decay
from .numerics import rd32
from .schedule import check_schedule
from .shaping import SHAPINGS

SCHEMES = ("correlated", "iid")
MAPPINGS = ("poly32", "libm64")
RESTORES = ("regenerate", "snapshot")
U64_MAX = (1 << 64) - 1


def is_int(value) -> bool:
    """An int or numpy integer that is not a bool: what an integer field or argument accepts."""
    import numpy as np
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool)


def default_profile() -> str:
    """The registered default Trainer profile's name (the one whose `Profile.default` is set)."""
    from .profiles import default_profile as registered
    return registered()


def _finite(name: str, value) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) and not hasattr(value, "__float__"):
        raise TypeError(f"{name} must be a real number, got {type(value).__name__} {value!r}")
    value = float(value)
    if not math.isfinite(value):
        raise ValueError(f"{name} must be finite, got {value!r}")
    return value


def _choice(name: str, value, known) -> str:
    if value not in known:
        raise ValueError(f"{name}: unknown value {value!r}; known: {tuple(known)}")
    return value


@dataclass(frozen=True)
class Config:
    """ES hyperparameters; validated at construction (docs/numerics.md §6).

    sigma (> 0, finite): perturbation scale. alpha (>= 0, finite; None ->
    sigma/2 in f64): step size, with 1/sigma folded in. population (N >= 1;
    even with antithetic; >= 2 with centered ranks). antithetic: mirrored
    pairs (§4). scheme: "correlated" | "iid" (docs/CONTRACT.md §4). mapping: "poly32"
    | "libm64" (docs/CONTRACT.md §3). restore: "regenerate" | "snapshot". shaping:
    "zscore" | "centered_ranks" | "none" (§2). profile: a Trainer profile's
    name (§3; default: the one flagged `Profile.default`, es-at-scale). anchor_decay: "none" | "l1" | "l2" with anchor_lambda >= 0
    (l2 needs alpha * anchor_lambda < 1) (§5). seed: u64. chunk_elements:
    None (default 262144) or >= 1 elements per work chunk; it never changes
    a bit. seed_schedule: "contract" (docs/CONTRACT.md §4) or a reference's
    schedule (the 30-bit seeds its loop draws; esverify.es.schedule.SCHEDULES).
    """

    sigma: float = 0.001
    alpha: float | None = None
    population: int = 30
    antithetic: bool = False
    scheme: str = "correlated"
    mapping: str = "poly32"
    restore: str = "regenerate"
    shaping: str = "zscore"
    profile: str = field(default_factory=lambda: default_profile())
    anchor_decay: str = "none"
    anchor_lambda: float = 0.0
    seed: int = 42
    chunk_elements: int | None = None
    seed_schedule: str = "contract"

    def __post_init__(self):
        from .profiles import PROFILES
        sigma = _finite("sigma", self.sigma)
        if not sigma > 0:
            raise ValueError(f"sigma must be > 0, got {sigma!r}")
        alpha = sigma / 2 if self.alpha is None else _finite("alpha", self.alpha)
        if not alpha >= 0:
            raise ValueError(f"alpha must be >= 0, got {alpha!r}")
        for name, value in (("sigma", sigma), ("alpha", alpha)):
            if math.isinf(rd32(value)):   # every profile rounds the scalars to f32 (docs/numerics.md §3)
                raise ValueError(f"{name} must stay finite when rounded to f32 (docs/numerics.md §3), got {value!r}")
        if not is_int(self.population):
            raise TypeError(f"population must be an int, got {type(self.population).__name__} {self.population!r}")
        if self.population < 1:
            raise ValueError(f"population must be >= 1, got {self.population}")
        if not isinstance(self.antithetic, bool):
            raise TypeError(f"antithetic must be a bool, got {self.antithetic!r}")
        if self.antithetic and self.population % 2:
            raise ValueError(f"population must be even with antithetic=True, got {self.population}")
        _choice("scheme", self.scheme, SCHEMES)
        _choice("mapping", self.mapping, MAPPINGS)
        _choice("restore", self.restore, RESTORES)
        _choice("shaping", self.shaping, SHAPINGS)
        _choice("profile", self.profile, tuple(PROFILES))
        check_schedule(self.seed_schedule)   # a tuple: an unhashable value is a ValueError too
        if self.shaping == "centered_ranks" and self.population < 2:
            raise ValueError(f"population must be >= 2 with shaping='centered_ranks', got {self.population}")
        lam = _finite("anchor_lambda", self.anchor_lambda)
        check_decay(self.anchor_decay, lam, alpha)     # shared with apply_anchor_decay_: same messages
        if not is_int(self.seed) or not 0 <= int(self.seed) <= U64_MAX:
            raise ValueError(f"seed must be an integer in [0, 2**64), got {self.seed!r}")
        if self.chunk_elements is not None and (not is_int(self.chunk_elements) or self.chunk_elements < 1):
            raise ValueError(f"chunk_elements must be None or an int >= 1, got {self.chunk_elements!r}")
        object.__setattr__(self, "sigma", sigma)
        object.__setattr__(self, "alpha", alpha)
        object.__setattr__(self, "anchor_lambda", lam)
        object.__setattr__(self, "seed", int(self.seed))
        object.__setattr__(self, "population", int(self.population))
        if self.chunk_elements is not None:
            object.__setattr__(self, "chunk_elements", int(self.chunk_elements))

    @property
    def decay_on(self) -> bool:
        """Anchored decay applies: a decay type and lambda > 0 (lambda 0 is no decay)."""
        return self.anchor_decay != "none" and self.anchor_lambda > 0

    def to_dict(self) -> dict:
        """Plain JSON-able dict of every field (alpha resolved).

        `seed_schedule` is left out while it is "contract", the schedule of
        every state and golden written before the field existed, so those stay
        valid byte for byte.
        """
        fields = asdict(self)
        if fields["seed_schedule"] == "contract":
            del fields["seed_schedule"]
        return fields
