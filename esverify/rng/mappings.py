"""The gaussian mappings, one named value each, in a registry (docs/CONTRACT.md §3; CONTRIBUTING.md, JAX PRNGImpl).

A `Mapping` names a way of turning the splitmix64 counter stream into
float32 normals: its spec section, whether it is bitwise identical on every
backend, its slow scalar reference and, per backend, the kernel that fills
a float32 buffer. Kernels are named as "module:function" and imported only
when asked for, so that `import esverify.rng` does not pay for numba or
torch. Nothing else in the package branches on a mapping's name: adding a
mapping means one entry here, one kernel per backend and its goldens.

Kernel signature (every backend): ``kernel(out, seed, first)`` fills the
1-D float32 buffer ``out`` (numpy array for numpy/numba, torch tensor for
torch) with elements ``first .. first+len(out)-1`` of the stream of the
u64 ``seed``; ``first`` may be odd. Work memory is O(len(out)); the
caller (`esverify.rng.gaussian`) bounds it by chunking.

Checks: ``python -m pytest -q tests/test_rng.py tests/test_rng_backends.py``
and ``esverify goldens check`` (every mapping on every backend target).
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Callable

from . import scalar


@dataclass(frozen=True)
class Mapping:
    """One gaussian mapping of the contract: a named value in `MAPPINGS` (docs/CONTRACT.md §3).

    name: registry key ("poly32", "libm64"). spec: the defining spec
    section. summary: one line for reports. bitwise_portable: True when
    every backend must equal `scalar` bit for bit; False when backends may
    differ by one f32 ulp (counted, never hidden). scalar(seed, j): element
    j as a Python float holding an f32 (slow reference). kernels: backend
    name -> "module:function" of a fill kernel (signature in this module's
    docstring), imported on first use by `kernel`.
    """

    name: str                          #: registry key, recorded in goldens and trainer state
    spec: str                          #: where the contract defines it
    summary: str
    bitwise_portable: bool             #: True: every backend must equal `scalar` bit for bit
    scalar: Callable[[int, int], float]  #: (seed, j) -> element j, slow reference
    kernels: dict = field(default_factory=dict)  #: backend -> "module:function"

    def kernel(self, backend: str) -> Callable:
        """The fill kernel of `backend`; ValueError naming `backend` if there is none."""
        if backend not in self.kernels:
            raise ValueError(f"backend {backend!r} has no kernel for mapping {self.name!r}; "
                             f"known: {sorted(self.kernels)}")
        key = (self.name, self.kernels[backend])
        if key not in _KERNEL_CACHE:
            module, attr = self.kernels[backend].split(":")
            _KERNEL_CACHE[key] = getattr(importlib.import_module(module), attr)
        return _KERNEL_CACHE[key]


#: (mapping name, "module:function") -> the imported kernel; saves an import lookup per chunk
_KERNEL_CACHE: dict = {}


def _kernels(name: str) -> dict:
    return {"numpy": f"esverify.rng.numpy_backend:{name}",
            "numba": f"esverify.rng.numba_backend:{name}",
            "torch": f"esverify.rng.torch_backend:{name}"}


MAPPINGS = {
    "poly32": Mapping(
        name="poly32", spec="docs/CONTRACT.md §3b",
        summary="Box-Muller with Cephes logf/sinf/cosf kernels, every step one f32 rounding; "
                "bitwise identical on every IEEE backend",
        bitwise_portable=True, scalar=scalar.poly32, kernels=_kernels("poly32")),
    "libm64": Mapping(
        name="libm64", spec="docs/CONTRACT.md §3a",
        summary="Box-Muller in f64 with the backend's log/sqrt/cos/sin, one rounding to f32; "
                "bit-exact per backend, may differ by one f32 ulp (rarely) across backends",
        bitwise_portable=False, scalar=scalar.libm64, kernels=_kernels("libm64")),
}


def get_mapping(mapping: str) -> Mapping:
    """The registered Mapping named `mapping` (a Mapping passes through); ValueError naming `mapping` otherwise."""
    if isinstance(mapping, Mapping):
        return mapping
    if mapping not in MAPPINGS:
        raise ValueError(f"mapping must be one of {sorted(MAPPINGS)}, got {mapping!r}")
    return MAPPINGS[mapping]
