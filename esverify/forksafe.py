"""esverify's torch paths in a forked child.

torch's CPU thread pool does not survive fork(): once the parent has run
a parallel torch op (any op large enough to use more than one intra-op
thread), the first parallel op in a forked child waits forever for pool
threads that the child does not have. A user's ``multiprocessing`` pool
(the "fork" start method, Linux's default before Python 3.14) or a CI
runner that forks hits it in esverify's torch noise backend and the f16
trainer paths. `install()` registers an ``os.register_at_fork`` handler
that, in the child only, sets torch's intra-op threads to one, which is
what torch's own DataLoader workers do: every op then runs on the calling
thread, and no bit changes (esverify's kernels never depend on the thread
count: docs/numerics.md §6, *Chunking*). The parent is untouched. The
handler imports nothing: it acts only when torch is already loaded.

Checked by tests/test_forksafe.py (a fork after a parallel op completes,
under a timeout). This module imports no other esverify module.
"""
from __future__ import annotations

import os
import sys

_installed = False


def _after_fork_in_child() -> None:
    torch = sys.modules.get("torch")
    if torch is None:
        return
    try:
        torch.set_num_threads(1)
    except Exception:  # noqa: BLE001 - a handler must never break the child's fork
        pass


def install() -> None:
    """Register the at-fork handler once per process (idempotent; a no-op where fork does not exist)."""
    global _installed
    if _installed or not hasattr(os, "register_at_fork"):
        return
    os.register_at_fork(after_in_child=_after_fork_in_child)
    _installed = True
