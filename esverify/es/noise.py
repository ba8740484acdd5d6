"""Where a member's noise comes from (docs/CONTRACT.md §4, docs/numerics.md §1 and §4).

The noise of (iteration, member, slot) is the contract's gaussian stream of
``stream_seed(member_seed(seed, iteration, population, member'), slot,
scheme)``, where member' = 2k for both members 2k and 2k+1 of an
antithetic pair. It is regenerated on demand, one bounded element range at
a time, on the parameter's own device: never stored.

`NoiseSource` wraps `esverify.rng.gaussian` (any backend) and counts the
elements it draws, so tests can prove that each antithetic pair's noise is
regenerated once per update.

Two named noise backends (`NOISES`): ``"contract"`` (the default, above:
bitwise portable, any device, any chunk) and ``"torch"`` (`TorchNoise`:
torch's own generator, as the references draw it, docs/references.md §1-§2 and
§3a: per (member, tensor) a new ``torch.Generator`` on the tensor's device
seeded with the member's seed, ``torch.randn`` of the tensor's shape and
dtype). Its limits: only the ``correlated`` scheme (every tensor restarts
the same seed), bitwise only on the same device type and torch version
(torch's generators are not a contract), and each draw is a whole tensor
(the memory of one parameter tensor, as in the references).

Checks: ``python -m pytest -q tests/test_es_invariants.py`` (antithetic
fold draws each pair once) and ``tests/test_es_kernels.py`` (the trainer's
noise equals esverify.es.reference.noise, from the scalar RNG).
"""
from __future__ import annotations

import threading

import torch

from esverify import rng as _rng
from esverify.rng import CONTRACT_VERSION
from esverify.rng import member_seed as member_seed_u64
from esverify.rng import stream_seed as stream_seed_u64
from esverify.rng.backends import check_backend

from .schedule import schedule_seed


def noise_member(member: int, antithetic: bool) -> int:
    """The member whose counter seeds `member`'s noise: 2k for both halves of pair k."""
    return member - (member % 2) if antithetic else member


def sign_of(member: int, antithetic: bool) -> int:
    """+1, or -1 for the odd (mirrored) half of an antithetic pair (docs/numerics.md §4)."""
    return -1 if antithetic and member % 2 else 1


def noise_seed(config, iteration: int, member: int) -> int:
    """The u64 member seed the trainer uses for `member` at `iteration` (docs/CONTRACT.md §4).

    Antithetic members 2k and 2k+1 both get ``member_seed(..., member=2k)``.
    This is the map an oracle needs from a reference's seed handles to ours.
    Under a numpy seed schedule ("es-at-scale", "es-awd") it is the 30-bit
    seed that reference's loop draws (esverify.es.schedule).
    """
    schedule = getattr(config, "seed_schedule", "contract")
    if schedule != "contract":
        return schedule_seed(schedule, config.seed, iteration, config.population, config.antithetic, member)
    return member_seed_u64(config.seed, iteration, config.population,
                           noise_member(member, config.antithetic))


NOISES = ("contract", "torch")


class NoiseSource:
    """Draws f32 noise ranges on a device and counts the elements drawn.

    Parameters: mapping ("poly32" or "libm64"); backend (an esverify.rng
    backend name, or None for the fastest available; ValueError naming
    `mapping`/`backend` when unknown). Thread-safe.
    """

    kind = "contract"

    def __init__(self, mapping: str, backend: str | None = None):
        _rng.get_mapping(mapping)                       # fail at construction, not at the first draw
        if backend is not None:
            check_backend(backend)
        self.mapping = mapping
        self.backend = backend
        self.elements = 0
        self._lock = threading.Lock()

    def count(self, n: int) -> None:
        """Count n elements drawn elsewhere (a kernel that draws as it computes, esverify.es.cpu_kernels)."""
        with self._lock:
            self.elements += n

    def draw(self, stream_seed: int, first: int, n: int, device: torch.device,
             out: torch.Tensor | None = None) -> torch.Tensor:
        """Elements first .. first+n-1 of the stream, an f32 tensor of shape (n,) on `device`.

        stream_seed: u64 (docs/CONTRACT.md §4); first, n: ints >= 0 with first + n <=
        2**64; out: None (a new tensor) or a contiguous f32 tensor of shape (n,) on `device`
        to fill and return (a caller drawing many ranges reuses one: fresh pages cost a
        quarter of a replay's drawing). A bad stream_seed or first raises what
        esverify.rng.gaussian_into raises (ValueError/TypeError naming the argument).
        """
        with self._lock:
            self.elements += n
        if out is None:
            out = torch.empty(n, dtype=torch.float32, device=device)
        if n:
            _rng.gaussian_into(out, stream_seed, first, self.mapping, backend=self.backend)
        return out


class TorchNoise:
    """torch's own noise, drawn the way the references draw it (docs/references.md §1-§2, §3a).

    draw_tensor(seed, like) returns ``torch.randn(like.shape, dtype=like.dtype,
    device=like.device, generator=g)`` flattened and widened to f32 (exact),
    where g is a new ``torch.Generator(device=like.device)`` seeded `seed`.
    torch_seed: callable mapping the trainer's u64 member seed to the int
    given to ``manual_seed`` (default: the u64 itself; an oracle passes the
    small seed the reference received). Limits: see the module docstring.
    Counts the elements drawn (`elements`), like NoiseSource. Thread-safe.
    """

    kind = "torch"

    def __init__(self, torch_seed=None):
        if torch_seed is not None and not callable(torch_seed):
            raise TypeError(f"torch_seed must be callable (u64 member seed -> int) or None, got {torch_seed!r}")
        self.torch_seed = torch_seed or (lambda seed: seed)
        self.mapping = None
        self.backend = None
        self.elements = 0
        self._lock = threading.Lock()

    def seed_for(self, member_seed: int) -> int:
        """The torch seed of a member; ValueError when the mapping gives no int in [0, 2**64)."""
        seed = self.torch_seed(member_seed)
        if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 1 << 64:
            raise ValueError(f"torch_seed({member_seed:#x}) gave {seed!r}: not an int in [0, 2**64)")
        return seed

    def draw_tensor(self, seed: int, like: torch.Tensor) -> torch.Tensor:
        """A flat f32 tensor (numel of `like`) on like.device: torch.randn in like's dtype, widened."""
        generator = torch.Generator(device=like.device)
        generator.manual_seed(seed)
        with self._lock:
            self.elements += like.numel()
        noise = torch.randn(tuple(like.shape), dtype=like.dtype, device=like.device, generator=generator)
        return noise.reshape(-1).to(torch.float32)


def make_noise(noise: str, mapping: str, backend: str | None = None, torch_seed=None):
    """The noise source named `noise` ("contract" or "torch"); ValueError naming `noise` otherwise."""
    if noise == "contract":
        if torch_seed is not None:
            raise ValueError("torch_seed applies only to noise='torch'")
        return NoiseSource(mapping, backend)
    if noise == "torch":
        if backend is not None:
            raise ValueError(f"backend {backend!r} applies only to noise='contract' (torch draws its own noise)")
        return TorchNoise(torch_seed)
    raise ValueError(f"noise: unknown value {noise!r}; known: {NOISES}")
