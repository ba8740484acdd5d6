"""The public gaussian-stream entry points: argument checks, backend choice, chunking.

`gaussian` allocates the result and `gaussian_into` fills a caller's
float32 buffer (the trainer's allocation-free path). Both split the range
into chunks of `chunk_elements` and call the mapping's kernel for the
backend once per chunk, so work memory is bounded whatever `n` is; since
every kernel serves any `[first, first + n)` exactly as the same slice of
the whole stream (docs/CONTRACT.md §3), the result cannot depend on the chunking.

Checks: ``python -m pytest -q tests/test_rng_backends.py`` (chunking, odd
starts and backends as hypothesis properties; caller buffers, devices)
and ``tests/test_rng.py`` (bad input names the argument).
"""
from __future__ import annotations

import numpy as np

from .backends import check_backend, default_backend, default_chunk
from .mappings import get_mapping
from .splitmix import MASK64, check_u64


def _check_count(value, name: str) -> int:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be a non-negative integer, got {type(value).__name__} {value!r}")
    value = int(value)
    if value < 0:
        raise ValueError(f"{name} must be >= 0, got {value}")
    return value


def _check_range(first: int, n: int) -> None:
    if first + n > MASK64 + 1:
        raise ValueError(f"first + n must be <= 2**64 (element indices are u64), got first={first}, n={n}")


def _check_chunk(chunk_elements, backend: str, kind: str) -> int:
    if chunk_elements is None:
        return default_chunk(backend, kind)
    if isinstance(chunk_elements, bool) or not isinstance(chunk_elements, (int, np.integer)) \
            or chunk_elements < 1:
        raise ValueError(f"chunk_elements must be a positive integer or None, got {chunk_elements!r}")
    return int(chunk_elements)


def _torch_device(device):
    """torch.device for `device`; ValueError naming `device` when torch cannot use it."""
    import torch
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError, ValueError) as exc:
        raise ValueError(f"device {device!r} is not a torch device: {exc}") from None
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(f"device {device!r}: CUDA is not available on this machine")
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            raise ValueError(f"device {device!r}: only {torch.cuda.device_count()} CUDA device(s)")
    elif dev.type == "meta":   # accepted by torch.empty, but it holds no values: nothing would be computed
        raise ValueError(f"device {device!r}: a meta tensor holds no data; use cpu or cuda")
    elif dev.type != "cpu":
        try:
            torch.empty(1, device=dev)
        except Exception as exc:
            raise ValueError(f"device {device!r} cannot be used by torch here: {exc}") from None
    return dev


def _run_chunks(kernel, out, seed: int, first: int, chunk: int) -> None:
    n = out.shape[0]
    for start in range(0, n, chunk):
        kernel(out[start:start + chunk], seed, first + start)


def _fill(out, seed: int, first: int, mapping, backend, chunk_elements) -> None:
    """Fill a checked 1-D float32 buffer; bridges numpy kernels to torch buffers."""
    is_numpy = isinstance(out, np.ndarray)
    kind = "cpu" if is_numpy else out.device.type
    backend = default_backend(kind) if backend is None else check_backend(backend)
    chunk = _check_chunk(chunk_elements, backend, kind)
    kernel = mapping.kernel(backend)
    if backend == "torch":
        if is_numpy:
            import torch
            out = torch.from_numpy(out)  # shares memory: fills the caller's array
        _run_chunks(kernel, out, seed, first, chunk)
        return
    if is_numpy:
        _run_chunks(kernel, out, seed, first, chunk)
    elif kind == "cpu":
        _run_chunks(kernel, out.numpy(), seed, first, chunk)  # a view of the tensor's storage
    else:
        # numpy/numba computing for a GPU buffer: one host chunk at a time.
        import torch
        host = np.empty(min(chunk, out.shape[0]), dtype=np.float32)
        for start in range(0, out.shape[0], chunk):
            m = min(chunk, out.shape[0] - start)
            kernel(host[:m], seed, first + start)
            out[start:start + m].copy_(torch.from_numpy(host[:m]))


def gaussian(seed, n, first=0, mapping="poly32", device=None, *, backend=None, chunk_elements=None):
    """Elements first .. first+n-1 of the gaussian stream of `seed` (docs/CONTRACT.md §3).

    seed: int in [0, 2**64). n, first: non-negative ints, first + n <= 2**64.
    mapping: "poly32" (bitwise portable) or "libm64" (esverify.rng.MAPPINGS).
    device: None -> a float32 numpy array of shape (n,); otherwise a float32
    torch tensor of shape (n,) on that device (anything torch.device takes).
    backend: "numpy", "numba", "torch" or None (fastest for the device:
    numba on CPU when importable, torch on CUDA). chunk_elements: elements
    per kernel call (bounds work memory; None picks a per-backend default);
    the values never depend on it.
    Raises ValueError/TypeError naming the argument: seed outside [0, 2**64),
    negative n or first, unknown mapping or backend, a device torch cannot use.
    """
    seed = check_u64(seed, "seed")
    n = _check_count(n, "n")
    first = _check_count(first, "first")
    _check_range(first, n)
    mapping = get_mapping(mapping)
    if backend is not None:
        check_backend(backend)
    if device is None:
        if backend == "torch":
            import torch
            out_t = torch.empty(n, dtype=torch.float32)
            _fill(out_t, seed, first, mapping, backend, chunk_elements)
            return out_t.numpy()
        out = np.empty(n, dtype=np.float32)
        _fill(out, seed, first, mapping, backend, chunk_elements)
        return out
    import torch
    dev = _torch_device(device)
    out = torch.empty(n, dtype=torch.float32, device=dev)
    _fill(out, seed, first, mapping, backend, chunk_elements)
    return out


def gaussian_into(out, seed, first=0, mapping="poly32", *, backend=None, chunk_elements=None):
    """Fill `out` with elements first .. first+len(out)-1 of the stream of `seed`; returns `out`.

    The allocation-free path for the trainer: `out` is a 1-D contiguous
    float32 numpy array or torch tensor (any device), written in place.
    A CPU tensor is filled through a shared-memory numpy view by the numpy
    or numba kernels; a CUDA tensor defaults to the torch backend (the
    numpy/numba backends then stage one host chunk at a time).
    Same arguments and errors as `gaussian`; TypeError/ValueError naming
    `out` when it is not a 1-D contiguous float32 array or tensor.
    """
    seed = check_u64(seed, "seed")
    first = _check_count(first, "first")
    mapping = get_mapping(mapping)
    if isinstance(out, np.ndarray):
        if out.dtype != np.float32 or out.ndim != 1 or not out.flags.c_contiguous:
            raise ValueError(f"out must be a 1-D contiguous float32 array, got {out.dtype} shape {out.shape}")
        if not out.flags.writeable:
            raise ValueError("out must be writeable")
    else:
        try:
            import torch
        except ImportError:  # pragma: no cover
            torch = None
        if torch is None or not isinstance(out, torch.Tensor):
            raise TypeError(f"out must be a numpy array or a torch tensor, got {type(out).__name__}")
        if out.dtype != torch.float32 or out.dim() != 1 or not out.is_contiguous():
            raise ValueError(f"out must be a 1-D contiguous float32 tensor, got {out.dtype} "
                             f"shape {tuple(out.shape)}")
    _check_range(first, int(out.shape[0]))
    # detach() shares storage: a parameter that requires grad is filled in place.
    _fill(out if isinstance(out, np.ndarray) else out.detach(), seed, first, mapping, backend, chunk_elements)
    return out
