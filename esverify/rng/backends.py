"""Which backend computes the gaussian stream where.

Three backends: ``numpy`` (whole-array ufuncs, CPU), ``numba`` (a compiled
CPU kernel, the fastest on CPU) and ``torch`` (int64 tensor arithmetic,
CPU and CUDA; the CUDA path is the trainer's on GPUs). `default_backend`
picks the fastest one available for a device; availability is probed
lazily so that importing `esverify.rng` imports neither numba nor torch.
The choice never changes a poly32 bit (docs/CONTRACT.md §3b); for libm64 it can, by
one f32 ulp, rarely (docs/CONTRACT.md §3a), which is why goldens are recomputed on
every target of `backend_targets`.

Checks: ``python -m pytest -q tests/test_rng_backends.py`` and
``esverify goldens check`` (every target listed).
"""
from __future__ import annotations

import functools
import importlib.util

BACKENDS = ("numpy", "numba", "torch")


@functools.lru_cache(maxsize=None)
def numba_available() -> bool:
    """True when numba imports and can compile (checked once per process): not under NUMBA_DISABLE_JIT,
    where the kernels' intrinsics cannot run as Python (the numpy backend draws the same poly32 bits)."""
    if importlib.util.find_spec("numba") is None:
        return False
    try:
        from . import numba_backend  # noqa: F401  (compiles or loads the cached kernels lazily)
        import numba
    except Exception:
        return False
    return not numba.config.DISABLE_JIT


def set_numba_threads(count: int) -> int | None:
    """Have the numba kernels use `count` (>= 1) threads for a large range; returns the count they used
    before, or None, setting nothing, where numba is not usable (the numpy backend draws on one thread).
    ValueError naming `count` otherwise, as numba_backend.set_threads."""
    if not numba_available():
        return None
    from . import numba_backend
    before = numba_backend.threads()
    numba_backend.set_threads(count)
    return before


def available_backends(device="cpu") -> list[str]:
    """Backends that can fill a buffer on `device` ("cpu", "cuda", "cuda:1", torch.device; None = cpu).

    CPU: "numpy", plus "numba" and "torch" when importable; any other device
    kind: ["torch"] (whether that device exists is checked when it is used).
    """
    kind = "cpu" if device is None else str(device).split(":")[0]
    if kind != "cpu":
        return ["torch"]
    names = ["numpy"]
    if numba_available():
        names.append("numba")
    if importlib.util.find_spec("torch") is not None:
        names.append("torch")
    return names


def default_backend(device) -> str:
    """The fastest backend for `device` (None or "cpu": numba when importable, else numpy; torch otherwise)."""
    kind = "cpu" if device is None else str(device).split(":")[0]
    if kind != "cpu":
        return "torch"
    return "numba" if numba_available() else "numpy"


def check_backend(backend) -> str:
    """`backend` itself when it is one of BACKENDS; ValueError naming `backend` otherwise.

    Only the name is checked: whether the backend can run here (numba
    importable, a CUDA device) is `available_backends`' question.
    """
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {list(BACKENDS)} or None, got {backend!r}")
    return backend


def default_chunk(backend: str, device_kind: str) -> int:
    """Elements per chunk: bounds the work memory of the whole-array backends.

    numpy and torch hold about 20 temporaries of 4-8 bytes per element
    (~10 MiB at 2**16 for numpy). torch runs ~70 separate ops per chunk and
    each costs a thread-pool hand-off, so it gets larger chunks (~40 MiB
    on CPU at 2**18; CUDA wants large launches). numba needs no
    temporaries: the chunk only sets how often its threads are joined.
    """
    if backend == "torch":
        return 1 << 18 if device_kind == "cpu" else 1 << 22
    if backend == "numba":
        return 1 << 22
    return 1 << 16


def backend_targets() -> list[tuple[str, str, str | None]]:
    """Every (label, backend, device) that can compute the stream on this machine.

    Labels: "numpy" and "numba" (device None: numpy results), "torch-cpu"
    (device "cpu") and "torch-cuda" (device "cuda", only when torch sees a
    CUDA device). Every golden area recomputes its vectors on each of them,
    under these labels.
    """
    cpu = available_backends("cpu")
    targets = [(name, name, None) for name in ("numpy", "numba") if name in cpu]
    if "torch" in cpu:
        targets.append(("torch-cpu", "torch", "cpu"))
        import torch
        if torch.cuda.is_available():
            targets.append(("torch-cuda", "torch", "cuda"))
    return targets
