"""Replace a reference loop's seams for one run and put everything back (docs/references.md §5).

Runs ONLY in the parity child; the esverify package never imports it.

A loop driven through its entry point changes process-wide state as a
user's run would: es-awd's `parse_args` reads `sys.argv`, sets
`CUDA_VISIBLE_DEVICES` and `PYTHONHASHSEED`, seeds Python's, numpy's and
torch's global generators and switches on
`torch.use_deterministic_algorithms(True)`; es-at-scale's constructor
edits the environment and installs SIGINT/SIGTERM handlers that exit the
process. The child serves many rows, so `Seams` records every attribute
it replaces and every piece of process state the reference may change,
and restores all of it on exit, also when the reference raised.
`settings()` reports what the reference ran under.
"""
from __future__ import annotations

import os
import random
import signal
import sys

import numpy as np
import torch

_MISSING = object()
_SIGNALS = tuple(s for s in (getattr(signal, "SIGINT", None), getattr(signal, "SIGTERM", None)) if s is not None)


class Seams:
    """Context manager: `set(owner, name, value)` replaces an attribute until exit; on entry it saves
    sys.argv, os.environ, the SIGINT/SIGTERM handlers, the global generators' states and torch's
    determinism switches, and on exit restores them."""

    def __init__(self):
        self._attrs: list = []
        self.during: dict = {}

    def set(self, owner, name: str, value):
        self._attrs.append((owner, name, owner.__dict__.get(name, _MISSING) if isinstance(owner, type)
                            else getattr(owner, name, _MISSING)))
        setattr(owner, name, value)

    def restore_signals(self):
        """Put back the child's own SIGINT/SIGTERM handlers (a reference's handler would exit the child)."""
        for sig, handler in self._signals.items():
            try:
                signal.signal(sig, handler)
            except (ValueError, OSError, TypeError):   # not the main thread, or a handler set from C
                pass

    def settings(self) -> dict:
        """What the reference process runs under right now (recorded by the driver after the entry point
        parsed its arguments): torch's determinism switches and thread count."""
        return {"deterministic_algorithms": bool(torch.are_deterministic_algorithms_enabled()),
                "cudnn_deterministic": bool(torch.backends.cudnn.deterministic),
                "torch_threads": int(torch.get_num_threads())}

    def __enter__(self):
        self._argv = list(sys.argv)
        self._environ = dict(os.environ)
        self._signals = {sig: signal.getsignal(sig) for sig in _SIGNALS}
        self._random = random.getstate()
        self._numpy = np.random.get_state()
        self._torch = torch.get_rng_state()
        self._cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None
        self._deterministic = (torch.are_deterministic_algorithms_enabled(),
                               torch.is_deterministic_algorithms_warn_only_enabled())
        self._cudnn = (torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark)
        return self

    def __exit__(self, *exc):
        for owner, name, old in reversed(self._attrs):
            if old is _MISSING:
                try:
                    delattr(owner, name)
                except AttributeError:
                    pass
            else:
                setattr(owner, name, old)
        self._attrs.clear()
        sys.argv[:] = self._argv
        os.environ.clear()
        os.environ.update(self._environ)
        self.restore_signals()
        random.setstate(self._random)
        np.random.set_state(self._numpy)
        torch.set_rng_state(self._torch)
        if self._cuda is not None:
            torch.cuda.set_rng_state_all(self._cuda)
        if (torch.are_deterministic_algorithms_enabled(),
                torch.is_deterministic_algorithms_warn_only_enabled()) != self._deterministic:
            # only when the reference changed it: the call imports torch's compiler stack (about 5 s of
            # CPU in a child that has not loaded it), and an unchanged switch needs no restoring
            torch.use_deterministic_algorithms(self._deterministic[0], warn_only=self._deterministic[1])
        torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = self._cudnn
        return False
