"""Read-only git queries shared by the gate, the parity report and the audit.

Every caller needs the same three facts about a folder (its checkout's top
level, the commit and whether the work tree is dirty) or the output of one
plumbing command; all of them treat a failing or missing git the same way:
"no answer" (None), never an exception. Like `bits` and `report`, this
module imports nothing else of esverify.
"""
from __future__ import annotations

import subprocess
from pathlib import Path


def git(root: Path, *args: str, binary: bool = False, input: bytes | None = None, timeout: float = 300):
    """stdout of ``git -C root ARGS`` (str, or bytes when `binary`); None when git fails or is missing."""
    try:
        proc = subprocess.run(["git", "-C", str(root), *args], capture_output=True, input=input,
                              timeout=timeout, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    if proc.returncode != 0:
        return None
    return proc.stdout if binary else proc.stdout.decode("utf-8", "replace")


def toplevel(path: Path) -> Path | None:
    """The top level of the git checkout containing `path`, or None outside one."""
    out = git(path, "rev-parse", "--show-toplevel")
    return Path(out.strip()) if out else None


def commit_and_dirty(path: Path) -> tuple[str | None, bool | None]:
    """(HEAD commit, dirty flag) of the checkout containing `path`; (None, None) outside one.

    The commit is None in a checkout without commits; dirty is None when
    `git status` cannot run.
    """
    if toplevel(path) is None:
        return None, None
    commit = (git(path, "rev-parse", "HEAD") or "").strip() or None
    status = git(path, "status", "--porcelain")
    return commit, (bool(status.strip()) if status is not None else None)
