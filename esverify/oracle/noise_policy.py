"""Which noise backend a row uses on each side, and the error when the child cannot draw the parent's bits.

Its own module (not the session's) so that a reference's rows can catch BackendRefused without importing the
oracle's session, which asks the registry that loads them (docs/parity.md).
"""
from __future__ import annotations


class BackendRefused(ValueError):
    """The child cannot draw the contract's noise bit for bit under this mapping (the row errors)."""


def noise_backend(device: str, environment: dict, mapping: str, noise: str = "contract") -> tuple:
    """(our backend, the backend the child is told to use or None for its own default, a note or "").

    One policy for every row (single-op and loop): the parent's default backend for `device`; when
    the child lacks it under contract noise, a bitwise-portable mapping (poly32) lets the child use
    its own default (docs/CONTRACT.md §3b), and any other mapping (libm64, bit-exact only within one
    backend, §3a) raises BackendRefused naming the fix. Native noise draws torch's generator: no
    contract backend is involved."""
    from ..rng import default_backend
    from ..rng.mappings import get_mapping
    backend = default_backend(device)
    seen = (environment.get("noise_backends") or {}).get("cpu", []) if device == "cpu" else ["torch"]
    if backend in seen or noise != "contract":
        return backend, backend, ""
    if not get_mapping(mapping).bitwise_portable:
        raise BackendRefused(f"the child lacks the noise backend {backend!r} the parent uses, and {mapping} is "
                             "only bit-exact within one backend (docs/CONTRACT.md §3a); install numba there")
    return backend, None, (f"the child lacks noise backend {backend!r}; it used its own default "
                           f"({mapping} is bitwise identical on every backend)")
