"""numba's `njit` with its disk cache where a cache folder can be written, and without it where none can.

`@numba.njit(cache=True)` looks for a writable cache folder when the
function is decorated, that is when its module is imported: the package's
``__pycache__``, then NUMBA_CACHE_DIR or the user's cache folder under the
home. In a read-only container with no writable home there is none, and
numba raises ``RuntimeError: cannot cache function ...: no locator
available``, which would make importing a kernel module a traceback. The
cache only saves compile time at start-up; it never changes a compiled
bit (numba's cache key holds the source, the types and the CPU's
features). So `njit` here decorates with the cache when numba finds a
folder, and otherwise compiles without it and says so once per process,
naming NUMBA_CACHE_DIR as the fix for the start-up cost.

Like `bits`, this module imports nothing else of esverify; numba is
imported by the caller (the kernels' modules guard that import).
"""
from __future__ import annotations

import sys

#: the start of numba's message when no cache locator accepts a function's file (numba.core.caching)
NO_LOCATOR = "cannot cache function"

_said = False


def _say_once(exc: BaseException) -> None:
    global _said
    if _said:
        return
    _said = True
    print("esverify: warning: numba finds no writable folder for its cache of compiled kernels (the package's "
          "__pycache__ and the home's cache are read-only or missing); the kernels are compiled at each start "
          "instead: set NUMBA_CACHE_DIR to a writable folder to keep them", file=sys.stderr)


def njit(**options):
    """A decorator: ``numba.njit(cache=True, **options)``, or ``numba.njit(**options)`` without the cache
    when numba finds no writable cache folder for the function's file (a read-only install), with one
    warning line on stderr per process.

    options: numba.njit's keywords (nogil, inline, ...), `cache` excluded. Raises what numba.njit raises
    for anything else (a RuntimeError that is not the missing cache folder included). The compiled code is
    the same either way (docs/CONTRACT.md §3: no fastmath, so no contraction into FMA)."""
    import numba

    def decorate(func):
        try:
            return numba.njit(cache=True, **options)(func)
        except RuntimeError as exc:
            if not str(exc).startswith(NO_LOCATOR):
                raise
            _say_once(exc)
            return numba.njit(**options)(func)
    return decorate


__all__ = ["NO_LOCATOR", "njit"]
