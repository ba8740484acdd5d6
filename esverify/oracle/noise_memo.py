"""Our side's noise, drawn once per parity run and copied for the rows that share it
(docs/parity.md, "Our side's noise").

The cases of a run share their member seeds (one config seed per run), so the expected values of
different rows regenerate the same ranges: in the default matrix our side drew 891 million elements,
68 million of them distinct, and that drawing was the largest single cost of our side. Our side's
trainers (esverify.oracle.ours.SlotMappedTrainer) therefore draw through MEMO, an
esverify.rng.memo.RangeMemo of BUDGET_BYTES, keyed by everything that decides the bits:

- contract noise: (mapping, backend, stream seed, first, n), a pure function of these by the contract
  (docs/CONTRACT.md §4), which the goldens gate holds every generator to;
- torch's own noise: (seed, shape, dtype) of one ``torch.randn`` with a freshly seeded generator.

MEMO is used only inside `keeping()`, which a parity run and `Runner.session()` hold
(esverify.oracle.runner), and it is emptied when the last such block ends; elsewhere (a test calling
esverify.oracle.ours directly) the trainers draw afresh and nothing stays in the process. Only CPU
draws with plain int arguments and no `out` go through it: anything else is NoiseSource's own draw,
with its own errors. A caller gets its own copy, so that writing into its noise changes nothing kept;
our side's trainer takes the kept tensor itself (`copies=False`: copying it was 6% of our side), since
no profile writes into the noise it is given (tests/test_noise_memo.py checks every profile). Elements
handed out from MEMO are counted as drawn, as the trainer counts them (NoiseSource.elements).

Served noise (docs/parity.md, "Served noise"): inside `keeping()` and `materializing()` (a run with a child
without numba) every contract range MEMO hands out is also written, once, to SERVED (an
esverify.rng.memo.ServedRanges in a private folder in shared memory, `served_folder()`), which the runner
names to its children: a child's noise hook reads a range the parent drew instead of drawing it again (a
child without numba drew it with numpy: three times the CPU). The folder is removed when the last
`keeping()` block ends.
"""
from __future__ import annotations

import contextlib
import shutil
import tempfile
import threading

import torch

from ..es.config import is_int
from ..es.noise import NoiseSource, TorchNoise
from ..rng import default_backend
from ..rng.memo import RangeMemo, ServedRanges, served_folder_base, served_name

#: bytes of noise MEMO keeps. In the default matrix (its million-element rows' 240 ranges of 1 MiB are
#: the working set) 128 MiB leaves 23% of the elements to draw, 96 MiB 47%, 64 MiB 50%, 32 MiB 56%; the
#: run's peak resident memory grew from 0.58 GB to 0.66 (32 MiB), 0.75 (64), 0.87 (96) and 0.86 GB (128)
BUDGET_BYTES = 128 << 20

#: the memo of this process's parity runs
MEMO = RangeMemo(BUDGET_BYTES)

#: bytes of ranges SERVED keeps for the children (in shared memory): MEMO's budget, as it mirrors MEMO
SERVED_BYTES = BUDGET_BYTES

#: the served ranges of the keeping() blocks running now (None outside them, or when no folder could be made)
SERVED: ServedRanges | None = None

_holders = 0          # keeping() blocks running now (a run, a session inside it: fuzz shrinking)
_holders_lock = threading.Lock()


_materializing = 0    # materializing() blocks running now


@contextlib.contextmanager
def materializing():
    """Inside the block (a run with a child without numba: esverify.oracle.runner), our side's contract noise
    goes through MEMO, and so to SERVED, also where a kernel could draw it as it computes (the trainer's
    accumulate_drawn, esverify.es.trainer): such a child then reads every range of an update from SERVED
    (a fifth of a millisecond per million elements) instead of drawing it with numpy (30 ms), for our side
    drawing it with numba and writing it (12 ms). The same bits either way. Nests; any thread."""
    global _materializing
    with _holders_lock:
        _materializing += 1
    try:
        yield
    finally:
        with _holders_lock:
            _materializing -= 1


def served_folder() -> str | None:
    """The folder of the ranges served to children now (inside `keeping()`), or None."""
    served = SERVED
    return None if served is None else str(served.folder)


def _serve_start() -> None:
    global SERVED
    try:
        SERVED = ServedRanges(tempfile.mkdtemp(prefix="esverify-noise-", dir=served_folder_base()), SERVED_BYTES)
    except OSError:   # nowhere to write: the children draw their noise themselves
        SERVED = None


def _serve_end() -> None:
    global SERVED
    served, SERVED = SERVED, None
    if served is not None:
        shutil.rmtree(served.folder, ignore_errors=True)


def _serve(mapping: str, backend: str | None, stream: int, first: int, n: int, values) -> None:
    """Write a contract range to SERVED inside `materializing()` (once while it is kept there: a range handed
    out again is moved to the end of SERVED's order, as MEMO moves it, so the two drop alike; a failed write
    only means the child draws it). Outside it nothing is written: children with numba draw a range for
    less than writing and reading it cost (measured: 7-10 s more CPU in a default run serving them)."""
    served = SERVED
    if served is None or not _materializing:
        return
    try:
        served.put(served_name(mapping, backend or default_backend("cpu"), stream, first, n), values)
    except (OSError, ValueError):
        pass


@contextlib.contextmanager
def keeping():
    """Use MEMO while the block runs; when the last block running ends, MEMO is emptied. Nests, and
    may be entered from several threads."""
    global _holders
    with _holders_lock:
        _holders += 1
        if _holders == 1:
            _serve_start()
    try:
        yield MEMO
    finally:
        with _holders_lock:
            _holders -= 1
            last = _holders == 0
            if last:
                _serve_end()
        if last:
            MEMO.clear()


def _in_use(memo: RangeMemo | None) -> RangeMemo | None:
    """The memo a draw goes through: the one a source was given, else MEMO inside `keeping()`, else none."""
    return memo if memo is not None else (MEMO if _holders else None)


class _Kept:
    """What the two memo sources share: a range through `memo`, counted as drawn when it was kept (as the
    source counts its own draws), handed out copied unless `copies` is False. The source sets `memo` and
    `copies`, and has NoiseSource's / TorchNoise's `elements` and `_lock`."""

    def _through(self, memo: RangeMemo, key, draw, n: int) -> torch.Tensor:
        kept, hit = memo.get(key, draw)
        if hit:
            with self._lock:
                self.elements += n
        return kept.clone() if self.copies else kept


class MemoNoise(_Kept, NoiseSource):
    """NoiseSource whose CPU ranges come through `memo` (default MEMO) inside `keeping()`: the same
    bits, copied; with copies=False, the kept tensor itself, for a caller that never writes into it."""

    def __init__(self, mapping: str, backend: str | None = None, memo: RangeMemo | None = None,
                 copies: bool = True):
        super().__init__(mapping, backend)
        self.memo = memo
        self.copies = copies

    @property
    def inline(self) -> bool:
        """Whether a kernel may draw this source's noise as it computes (the trainer asks): not inside
        `materializing()` while ranges are served, where every range must come through MEMO."""
        return not (_materializing and SERVED is not None and self.memo is None)

    def draw(self, stream_seed: int, first: int, n: int, device: torch.device,
             out: torch.Tensor | None = None) -> torch.Tensor:
        memo = _in_use(self.memo)
        if memo is None or out is not None or not all(is_int(v) for v in (stream_seed, first, n)) or not n \
                or torch.device(device).type != "cpu":
            return super().draw(stream_seed, first, n, device, out)
        key = ("contract", self.mapping, self.backend, int(stream_seed), int(first), int(n))
        kept = self._through(memo, key, lambda: super(MemoNoise, self).draw(stream_seed, first, n, device), n)
        _serve(self.mapping, self.backend, int(stream_seed), int(first), int(n), kept)
        return kept


class MemoTorchNoise(_Kept, TorchNoise):
    """TorchNoise whose CPU draws come through `memo` (default MEMO) inside `keeping()`: the same bits,
    copied; with copies=False, the kept tensor itself, for a caller that never writes into it."""

    def __init__(self, torch_seed=None, memo: RangeMemo | None = None, copies: bool = True):
        super().__init__(torch_seed)
        self.memo = memo
        self.copies = copies

    def draw_tensor(self, seed: int, like: torch.Tensor) -> torch.Tensor:
        memo = _in_use(self.memo)
        if memo is None or not is_int(seed) or like.device.type != "cpu":
            return super().draw_tensor(seed, like)
        key = ("torch", int(seed), tuple(like.shape), like.dtype)
        return self._through(memo, key, lambda: super(MemoTorchNoise, self).draw_tensor(seed, like), like.numel())


def memoized(noise, copies: bool = True):
    """The MEMO version of a trainer's noise source (esverify.es.noise: NoiseSource or TorchNoise)."""
    if isinstance(noise, TorchNoise):
        return MemoTorchNoise(noise.torch_seed, copies=copies)
    return MemoNoise(noise.mapping, noise.backend, copies=copies)
