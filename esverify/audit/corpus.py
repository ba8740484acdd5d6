"""The base-code corpus of the similarity section: shapes any Python file has (docs/audit.md, "Idioms").

MOSS and JPlag let the examiner name *base code*, code every submission may
share (a template), and discount matches against it. The audit's base code
is a corpus every auditor has and nobody on either side wrote: the standard
library of the interpreter running the audit (its `.py` files, test suites
and `site-packages` left out). A normalised shape of a file (a run of
copydetect filtered tokens: names V/F/O, string contents S, no whitespace
or comments) that also occurs in that corpus is an *idiom* (check a folder
exists, remove it, make it again; iterate over a list in slices of a batch
size; print a formatted line in an `except` clause): listed, not counted.

The corpus is indexed once: every `IDIOM_K`-token window of its filtered
text is hashed with a polynomial rolling hash modulo 2**64 (stable across
processes, unlike `hash()` of a string, which copydetect uses and Python
salts) and the sorted distinct hashes are cached as a `.npz` file under
`$ESVERIFY_CACHE`, else `$XDG_CACHE_HOME/esverify`, else
`~/.cache/esverify`, named by a key of the interpreter's version, the
pygments version (its lexer makes the filtered text), the window length
and a digest of the corpus's file names and sizes. A cache that cannot be
written only costs the next run the index again.
"""
from __future__ import annotations

import hashlib
import os
import platform
import sys
import sysconfig
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .. import pyast
from .filtered import filtered_positions

#: filtered tokens of one idiom window: a shape at least this long must occur in the corpus to be an idiom
#: (measured in docs/audit.md, "Idioms": shorter windows match most of any code, and detection falls)
IDIOM_K = 25
#: folders of the standard library that are not library code (test suites) or not the standard library
SKIP_DIRS = frozenset({"site-packages", "dist-packages", "__pycache__", "test", "tests", "idle_test"})
_BASE = np.uint64(1_000_003)


@dataclass
class Corpus:
    """An indexed base-code corpus: `hashes` sorted distinct window hashes (uint64)."""

    name: str          #: e.g. "Python 3.11.7 standard library"
    root: str          #: the folder indexed
    files: int         #: .py files indexed
    size: int          #: their bytes
    hashes: np.ndarray
    cache: str         #: the cache file ("" when not cached)
    loaded: bool       #: True: read from the cache; False: indexed in this run
    k: int = IDIOM_K   #: the window, in filtered tokens

    def brief(self) -> str:
        """The corpus and its size, for a first screen."""
        return f"{self.name}: {self.files} files, {self.size / 1e6:.1f} MB"

    def describe(self) -> str:
        """One line for the report: the corpus, its size and where its index lives."""
        how = "index read from" if self.loaded else "indexed in this run, cached at"
        return (f"{self.name} ({self.root}): {self.files} files, {self.size / 1e6:.1f} MB, "
                f"{len(self.hashes)} distinct {self.k}-token shapes; {how} {self.cache or '(no cache)'}")


def window_hashes(filtered: str, k: int = IDIOM_K) -> np.ndarray:
    """uint64 rolling hash of every `k`-character window of `filtered` (length max(0, n - k + 1))."""
    n = len(filtered)
    if n < k:
        return np.zeros(0, dtype=np.uint64)
    codes = np.frombuffer(filtered.encode("utf-32-le"), dtype=np.uint32).astype(np.uint64)
    out = np.zeros(n - k + 1, dtype=np.uint64)
    with np.errstate(over="ignore"):
        for j in range(k):
            out = out * _BASE + codes[j:n - k + 1 + j]
    return out


def filtered_text(text: str) -> str:
    """copydetect's filtered form of Python `text` (as `filtered.filtered_positions`, without positions)."""
    return filtered_positions(text, "python")[0]


def stdlib_root() -> Path:
    return Path(sysconfig.get_paths()["stdlib"])


def stdlib_files(root: Path | None = None) -> list[Path]:
    """The standard library's `.py` files, sorted, without test suites and site-packages."""
    root = root or stdlib_root()
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS)
        out += [Path(dirpath) / f for f in sorted(filenames) if f.endswith(".py")]
    return out


def cache_dir() -> Path:
    env = os.environ.get("ESVERIFY_CACHE")
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg).expanduser() if xdg else Path.home() / ".cache") / "esverify"


def _key(root: Path, files: list[Path], k: int) -> str:
    import pygments
    listing = hashlib.sha256()
    for f in files:
        listing.update(f"{f.relative_to(root).as_posix()}\0{f.stat().st_size}\n".encode())
    return (f"stdlib-{sys.implementation.name}{platform.python_version()}-pygments{pygments.__version__}"
            f"-k{k}-{listing.hexdigest()[:16]}")


def index(files: list[Path], k: int = IDIOM_K) -> np.ndarray:
    """Sorted distinct window hashes of the filtered text of `files` (unreadable files skipped)."""
    parts = []
    for f in files:
        try:
            parts.append(np.unique(window_hashes(filtered_text(f.read_text(encoding="utf-8")), k)))
        except (OSError, UnicodeDecodeError, ValueError):
            continue
    return np.unique(np.concatenate(parts)) if parts else np.zeros(0, dtype=np.uint64)


def stdlib(k: int = IDIOM_K, root: Path | None = None) -> Corpus:
    """The standard library corpus, from the cache when its key matches, else indexed and cached."""
    root = Path(root) if root else stdlib_root()
    files = stdlib_files(root)
    size = sum(f.stat().st_size for f in files)
    name = f"Python {platform.python_version()} standard library"
    path = cache_dir() / f"audit-corpus-{_key(root, files, k)}.npz"
    try:
        with pyast.exclusive(), np.load(path, allow_pickle=False) as data:   # headers parsed by ast: esverify.pyast
            hashes = data["hashes"]
        if hashes.dtype == np.uint64 and hashes.ndim == 1:
            return Corpus(name, str(root), len(files), size, hashes, str(path), True, k)
    except (OSError, ValueError, EOFError, KeyError, zipfile.BadZipFile):   # none yet, or unreadable: index again
        pass
    hashes = index(files, k)
    cached = ""
    try:   # atomic: a concurrent audit reads a whole index or none
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".corpus-", suffix=".npz")
        with os.fdopen(fd, "wb") as fh:
            np.savez(fh, hashes=hashes)
        os.replace(tmp, path)
        cached = str(path)
    except OSError:
        pass
    return Corpus(name, str(root), len(files), size, hashes, cached, False, k)


def idiom_mask(filtered: str, hashes: np.ndarray, k: int = IDIOM_K) -> np.ndarray:
    """bool per filtered token of `filtered`: True when it lies in a `k`-token window that occurs in the
    corpus (`hashes`, sorted)."""
    mask = np.zeros(len(filtered), dtype=bool)
    own = window_hashes(filtered, k)
    if len(own) == 0 or len(hashes) == 0:
        return mask
    pos = np.searchsorted(hashes, own)
    hit = (pos < len(hashes)) & (hashes[np.minimum(pos, len(hashes) - 1)] == own)
    starts = np.flatnonzero(hit)
    if len(starts):
        delta = np.zeros(len(filtered) + 1, dtype=np.int64)
        np.add.at(delta, starts, 1)
        np.add.at(delta, starts + k, -1)
        mask = np.cumsum(delta[:-1]) > 0
    return mask
