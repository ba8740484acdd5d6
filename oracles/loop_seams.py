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
`settings()` reports what the reference ran under. Within the block,
`torch.use_deterministic_algorithms` is this module's
`use_deterministic_algorithms`: torch's effects, without importing the
compiler stack that torch's own function loads to copy the switch into
its config (the config gets it when, and if, anything imports it).
"""
from __future__ import annotations

import importlib.machinery
import os
import random
import signal
import sys

import numpy as np
import torch

_MISSING = object()
_SIGNALS = tuple(s for s in (getattr(signal, "SIGINT", None), getattr(signal, "SIGTERM", None)) if s is not None)
#: the compiler's config module, which torch.use_deterministic_algorithms imports to copy its switch into
_INDUCTOR_CONFIG = "torch._inductor.config"
#: the switch that module takes when it is first imported ([] while none was set before it was loaded)
_PENDING: list = []


class _SwitchOnImport:
    """A meta path finder: the compiler's config module, when it is first imported after a switch was set,
    gets that switch at the end of its import, as if torch.use_deterministic_algorithms had imported it."""

    @staticmethod
    def find_spec(fullname, path, target=None):
        if fullname != _INDUCTOR_CONFIG or not _PENDING:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path, target)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        exec_module = spec.loader.exec_module

        def exec_then_switch(module):
            exec_module(module)
            if _PENDING:
                module.deterministic = _PENDING.pop()
        spec.loader.exec_module = exec_then_switch
        return spec


def use_deterministic_algorithms(mode, *, warn_only=False):
    """torch.use_deterministic_algorithms(mode, warn_only=warn_only) with torch's own two effects, the
    compiler's config copied when that module is loaded rather than by loading it: torch's function
    imports torch._inductor.config (the compiler stack, 1.2-1.4 s of CPU in a child) to set its
    `deterministic` to `mode`, then sets the switch the eager kernels read (torch._C). Here the config
    takes `mode` now when it is loaded, else at the end of its first import (_SwitchOnImport), so whoever
    reads it, then or later, reads what torch's function would have left there. Raises what torch raises
    for a mode that is not a bool."""
    config = sys.modules.get(_INDUCTOR_CONFIG)
    if config is not None:
        config.deterministic = mode
    else:
        _PENDING[:] = [mode]
        if not any(isinstance(f, _SwitchOnImport) for f in sys.meta_path):
            sys.meta_path.insert(0, _SwitchOnImport())
    torch._C._set_deterministic_algorithms(mode, warn_only=warn_only)


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
        if hasattr(torch._C, "_set_deterministic_algorithms"):   # the switch, without loading the compiler
            self.set(torch, "use_deterministic_algorithms", use_deterministic_algorithms)
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
            # only when the reference changed it; through use_deterministic_algorithms above where torch has
            # the switch it ends with: torch's own function imports the compiler stack
            (use_deterministic_algorithms if hasattr(torch._C, "_set_deterministic_algorithms")
             else torch.use_deterministic_algorithms)(self._deterministic[0], warn_only=self._deterministic[1])
        torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = self._cudnn
        return False
