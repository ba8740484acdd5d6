"""A report set written as a whole, or not at all.

A report is several files (json, md, html, one csv per section, JUnit,
child logs). Writing them one by one, a write that fails part-way (disk
full, RLIMIT_FSIZE, a quota) left most of a set whose JSON said "pass,
exit 0" while the process exited 2. `ReportSet` writes every file of a
run to a temporary file beside its target first (fsynced); only when all
of them are complete are they renamed into place, the files that carry
the verdict (`*.json`, `*.md`, `*.html`, `*-verdict.csv`, the JUnit file)
last. A failure while writing removes every temporary file and leaves no
file of the new set; a failure while renaming (no space for a directory
entry) removes the files of the set renamed so far. Either way the
OSError reaches the caller, which exits 2 (docs/goldens.md, docs/audit.md,
docs/parity.md), and no partial set claims a verdict.

This module imports no other esverify module.
"""
from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

#: Names (suffixes) of the files that carry a verdict: renamed after every other file of the set.
VERDICT_SUFFIXES = (".json", ".md", ".html", "-verdict.csv", ".xml")


def _carries_verdict(path: Path) -> bool:
    return path.name.endswith(VERDICT_SUFFIXES) and not path.name.endswith("-metadata.json")


class ReportSet:
    """Files of one report, committed together (see the module docstring).

    add_text(path, text) / add_copy(path, src) queue a file; commit() writes
    and renames them all and returns their paths, in the order added.
    Nothing touches the disk before commit().
    """

    def __init__(self):
        self._items: list[tuple[Path, object]] = []

    def add_text(self, path, data: str | bytes) -> Path:
        """Queue `data` for `path` (str as UTF-8; lone surrogates as visible escapes, never refused)."""
        raw = data.encode("utf-8", "backslashreplace") if isinstance(data, str) else bytes(data)
        path = Path(path)
        self._items.append((path, raw))
        return path

    def add_copy(self, path, src) -> Path:
        """Queue a copy of the file `src` (streamed at commit, never held in memory)."""
        path = Path(path)
        self._items.append((path, Path(src)))
        return path

    @property
    def paths(self) -> list[Path]:
        return [p for p, _ in self._items]

    def commit(self) -> list[Path]:
        """Write every queued file, then rename them into place (verdict files last).

        Raises OSError when any file cannot be written or renamed; no file of
        this set is then left in place (temporary files are removed).
        """
        staged: list[tuple[Path, str]] = []
        try:
            for path, content in self._items:
                staged.append((path, _stage(path, content)))
        except BaseException:
            for _, tmp in staged:
                _unlink(tmp)
            raise
        order = sorted(range(len(staged)), key=lambda i: _carries_verdict(staged[i][0]))   # stable
        placed: list[Path] = []
        try:
            for i in order:
                path, tmp = staged[i]
                os.replace(tmp, path)
                placed.append(path)
        except BaseException:
            for path in placed:
                _unlink(path)
            for path, tmp in staged:
                _unlink(tmp)
            raise
        return self.paths


def _unlink(path) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


def _stage(path: Path, content) -> str:
    """A complete, fsynced temporary file beside `path` holding `content`; its name."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        umask = os.umask(0)    # mkstemp creates 0600; a report is an ordinary file, so honour the umask
        os.umask(umask)
        os.fchmod(fd, 0o666 & ~umask)
        with os.fdopen(fd, "wb") as fh:
            if isinstance(content, Path):
                with open(content, "rb") as source:
                    shutil.copyfileobj(source, fh, 1 << 20)
            else:
                fh.write(content)
            fh.flush()
            os.fsync(fh.fileno())
    except BaseException:
        _unlink(tmp)
        raise
    return tmp
