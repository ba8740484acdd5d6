"""Report destinations, checked before any work starts.

Every subcommand that writes a report (`parity`, `audit`, `goldens check`
and `goldens generate`) asks these helpers about each destination BEFORE
it computes anything, so a report that cannot be written never costs a
whole run:

- `check_folder` / `check_file`: the destination can be created and
  written (probed with a real temporary file, then removed); otherwise
  `OutputError` with one line naming the option, the path and the reason.
- `claim_report_folder`: the report folder of one run. The default name
  has microsecond resolution plus the process id and a random suffix and
  is created exclusively, so two runs started at once never share it. An
  explicit folder that already holds an earlier report (files named like
  this report's) is refused unless `overwrite`, which removes the old
  report files first (and nothing else). A lock file marks a folder in use,
  so two concurrent runs into one `--out` cannot mix their files either.

This module imports no other esverify module.
"""
from __future__ import annotations

import datetime as _dt
import errno
import fnmatch
import os
import secrets
import shutil
import tempfile
from pathlib import Path

LOCK_NAME = ".esverify-run.lock"


class OutputError(ValueError):
    """A destination that cannot take the report; the message is one line for the user."""


def _reason(exc: OSError) -> str:
    if exc.errno == errno.ENOENT:   # the folder is there, yet nothing can be made in it (e.g. /proc)
        return "this file system does not accept new files"
    if exc.errno in (errno.EACCES, errno.EPERM):
        return "permission denied"
    if exc.errno == errno.EROFS:
        return "read-only file system"
    if exc.errno == errno.ENOSPC:
        return "no space left on the device"
    return (exc.strerror or str(exc)).lower()


def _probe_write(folder: Path) -> None:
    fd, tmp = tempfile.mkstemp(prefix=".esverify-probe.", dir=folder)
    os.close(fd)
    os.unlink(tmp)


def _nearest_existing(path: Path) -> Path:
    for parent in (path, *path.parents):
        if parent.exists() or parent.is_symlink():
            return parent
    return Path(".")


def check_folder(path, option: str = "--out", create: bool = True) -> Path:
    """Make sure `path` is (or can become) a folder we can write into.

    With `create` (the default) the folder is created now, parents included:
    the report goes there at the end anyway, and creating it is the only
    honest test on file systems such as /proc. Raises OutputError.
    """
    path = Path(path).expanduser()
    if path.exists() and not path.is_dir():
        raise OutputError(f"{option} {path}: exists and is not a directory")
    existing = _nearest_existing(path)
    if not existing.is_dir():
        raise OutputError(f"{option} {path}: {existing} is a file, not a directory")
    try:
        if create:
            path.mkdir(parents=True, exist_ok=True)
            _probe_write(path)
        elif not os.access(existing, os.W_OK | os.X_OK):
            raise PermissionError(errno.EACCES, "permission denied")
    except OSError as exc:
        raise OutputError(f"{option} {path}: cannot write there: {_reason(exc)}") from None
    return path


def check_file(path, option: str) -> Path:
    """Make sure a report FILE can be written at `path` (its folder is created). Raises OutputError."""
    path = Path(path).expanduser()
    if path.is_dir():
        raise OutputError(f"{option} {path}: is a directory, not a file")
    if path.exists() and not os.access(path, os.W_OK):
        raise OutputError(f"{option} {path}: the file exists and is not writable")
    folder = path.parent
    existing = _nearest_existing(folder)
    if not existing.is_dir():
        raise OutputError(f"{option} {path}: {existing} is a file, not a directory")
    try:
        folder.mkdir(parents=True, exist_ok=True)
        _probe_write(folder)
    except OSError as exc:
        raise OutputError(f"{option} {path}: cannot write there: {_reason(exc)}") from None
    return path


def default_folder_name(prefix: str, now: _dt.datetime | None = None) -> str:
    """`<prefix>-<UTC time to the microsecond>-<pid>-<random>`: unique even for runs started at once."""
    now = now or _dt.datetime.now(_dt.timezone.utc)
    return f"{prefix}-{now.strftime('%Y%m%dT%H%M%S.%fZ')}-{os.getpid()}-{secrets.token_hex(2)}"


def report_files(folder: Path, patterns) -> list[Path]:
    """Entries of `folder` (top level) whose names match one of the report's `patterns`."""
    if not folder.is_dir():
        return []
    return sorted(p for p in folder.iterdir() if any(fnmatch.fnmatch(p.name, pat) for pat in patterns))


class ReportFolder:
    """A claimed report folder; `release()` (or the context manager) removes the lock."""

    def __init__(self, path: Path, lock: Path):
        self.path, self.lock = path, lock

    def release(self) -> None:
        try:
            self.lock.unlink()
        except FileNotFoundError:
            pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.release()


def _lock_is_stale(lock: Path) -> bool:
    try:
        pid = int(lock.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


def claim_report_folder(out, prefix: str, patterns, overwrite: bool = False, option: str = "--out",
                        base: Path | None = None) -> ReportFolder:
    """Create or claim the report folder of one run (see the module docstring). Raises OutputError.

    out: the user's folder or None for `<base or reports>/<default_folder_name(prefix)>`;
    patterns: fnmatch patterns naming this report's files (e.g. "parity*", "child-*.log").
    """
    if out is None:
        parent = check_folder(base or Path("reports"), option=option)
        for _ in range(5):
            path = parent / default_folder_name(prefix)
            try:
                path.mkdir()            # exclusive: never a folder another run made
            except FileExistsError:
                continue
            except OSError as exc:
                raise OutputError(f"{option} {path}: cannot write there: {_reason(exc)}") from None
            break
        else:
            raise OutputError(f"{option} {parent}: could not create a fresh report folder there")
    else:
        path = check_folder(out, option=option)
    lock = path / LOCK_NAME
    try:
        fd = os.open(lock, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        if not _lock_is_stale(lock):
            raise OutputError(f"{option} {path}: another esverify run is writing there now "
                              f"(lock {LOCK_NAME}); choose another folder") from None
        lock.unlink(missing_ok=True)
        fd = os.open(lock, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except OSError as exc:
        raise OutputError(f"{option} {path}: cannot write there: {_reason(exc)}") from None
    with os.fdopen(fd, "w") as fh:
        fh.write(f"{os.getpid()}\n")
    claimed = ReportFolder(path, lock)
    old = report_files(path, patterns)
    if old and not overwrite:
        claimed.release()
        names = ", ".join(p.name for p in old[:3]) + (f" and {len(old) - 3} more" if len(old) > 3 else "")
        raise OutputError(f"{option} {path}: holds an earlier report ({names}); pass --overwrite to replace "
                          "it, or choose an empty folder")
    for p in old:
        try:
            if p.is_dir() and not p.is_symlink():
                shutil.rmtree(p)
            else:
                p.unlink()
        except OSError as exc:
            claimed.release()
            raise OutputError(f"{option} {path}: cannot remove the earlier report file {p.name}: "
                              f"{_reason(exc)}") from None
    return claimed


def missing_folders(*paths) -> list[Path]:
    """The folders that `paths` (folders, or None) and their parents would create, deepest first:
    what a run refused at setup must remove again."""
    missing = []
    for path in paths:
        if path is None:
            continue
        for folder in (Path(path).expanduser(), *Path(path).expanduser().parents):
            if folder.exists() or folder.is_symlink():
                break
            if folder not in missing:
                missing.append(folder)
    return sorted(missing, key=lambda p: len(p.parts), reverse=True)


def remove_empty(folders) -> None:
    """Remove each of `folders` that exists and is empty (deepest first); anything else stays."""
    for folder in sorted(map(Path, folders), key=lambda p: len(p.parts), reverse=True):
        try:
            folder.rmdir()
        except OSError:
            pass
