"""Read-only git queries shared by the gate, the parity report and the audit.

Every caller needs the same three facts about a folder (its checkout's top
level, the commit and whether the work tree is dirty) or the output of one
plumbing command; all of them treat a failing or missing git the same way:
"no answer" (None), never an exception. Like `bits` and `report`, this
module imports nothing else of esverify.

git runs as the folder is, not as the caller's shell is:

- the caller's GIT_* variables are removed (a git hook runs with GIT_DIR,
  GIT_INDEX_FILE and GIT_WORK_TREE of ITS repository, which would make
  every query answer about that one), but for where the user's own
  configuration lives (GIT_CONFIG_GLOBAL, GIT_CONFIG_SYSTEM,
  GIT_CONFIG_NOSYSTEM: safe.directory is read there); GIT_OPTIONAL_LOCKS=0
  keeps `git status` from writing the index of a clone it only reads, and
  LC_ALL=C keeps git's messages in the words `refusal` looks for;
- `CONFIG` pins, for every call, what a user's or a clone's configuration
  could change in the text we parse (diff prefixes, colour, quoted paths,
  merged hunks, relative paths, untracked files) or run (fsmonitor, pager);
- a repository owned by another user is refused by git (its safe.directory
  check) before any query: `refusal` names it with git's own fix, and
  `commit_and_dirty` reads the commit from the files of .git (HEAD, the
  loose or packed ref), which runs nothing of the clone's.
"""
from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

#: git's variables kept from the caller's environment: where the user's configuration lives (and no other)
KEEP = ("GIT_CONFIG_GLOBAL", "GIT_CONFIG_SYSTEM", "GIT_CONFIG_NOSYSTEM")
#: ``-c`` settings of every call: no configuration may change what is parsed or run anything
CONFIG = ("core.quotePath=false", "core.fsmonitor=false", "core.pager=cat", "color.ui=false",
          "diff.mnemonicPrefix=false", "diff.noprefix=false", "diff.relative=false", "diff.interHunkContext=0",
          "status.showUntrackedFiles=normal", "status.relativePaths=false")
_DUBIOUS = re.compile(r"detected dubious ownership in repository at '(?P<top>[^']*)'")
_FIX = re.compile(r"^\s*(git config --global --add safe\.directory .+?)\s*$", re.M)
_SHA = re.compile(r"^[0-9a-f]{40}(?:[0-9a-f]{24})?$")


def environment() -> dict:
    """The environment of every git call: the caller's, less its GIT_* variables (but `KEEP`), with
    GIT_OPTIONAL_LOCKS=0 and LC_ALL=C."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_") or k in KEEP}
    env.update(GIT_OPTIONAL_LOCKS="0", LC_ALL="C")
    return env


def _run(root: Path, args, input: bytes | None, timeout: float):
    try:
        return subprocess.run(["git", *(x for c in CONFIG for x in ("-c", c)), "-C", str(root), *args],
                              capture_output=True, input=input, timeout=timeout, check=False, env=environment())
    except (OSError, subprocess.SubprocessError):
        return None


def git(root: Path, *args: str, binary: bool = False, input: bytes | None = None, timeout: float = 300):
    """stdout of ``git -C root ARGS`` (str, or bytes when `binary`), run as `environment` and `CONFIG` say;
    None when git fails (a refusal included: see `refusal`) or is missing."""
    proc = _run(root, args, input, timeout)
    if proc is None or proc.returncode != 0:
        return None
    return proc.stdout if binary else proc.stdout.decode("utf-8", "replace")


def _refused(proc) -> tuple[Path, str] | None:
    """(top folder, line) when the failed call `proc` is git's safe.directory refusal, else None."""
    text = proc.stderr.decode("utf-8", "replace")
    found = _DUBIOUS.search(text)
    if found is None:
        return None
    top = Path(found["top"])
    fix = _FIX.search(text)
    return top, (f"git refuses the repository at {top}: it is owned by another user (git's safe.directory check); "
                 f"git's fix, if you trust it: {fix[1] if fix else f'git config --global --add safe.directory {top}'}")


def _toplevel(path: Path) -> tuple[Path | None, tuple[Path, str] | None]:
    proc = _run(path, ("rev-parse", "--show-toplevel"), None, 60)
    if proc is None:
        return None, None
    if proc.returncode == 0:
        out = proc.stdout.decode("utf-8", "replace").strip()
        return (Path(out) if out else None), None
    refused = _refused(proc)
    return (refused[0] if refused else None), refused


def refusal(path: Path) -> tuple[Path, str] | None:
    """(the repository's top folder, one line) when git refuses the repository holding `path` because
    another user owns it (safe.directory), the line naming it and git's own fix; None otherwise (a
    usable checkout, no checkout at all, no git)."""
    return _toplevel(path)[1]


def toplevel(path: Path) -> Path | None:
    """The top level of the git checkout containing `path`, or None outside one (a checkout git refuses
    as another user's has its top level too: `refusal` says why git will not answer about it)."""
    return _toplevel(path)[0]


def _git_dir(top: Path) -> Path | None:
    """The .git folder of the work tree `top` (a ``gitdir:`` file followed), None when there is none."""
    dot = top / ".git"
    if dot.is_file():
        line = dot.read_text(errors="replace").strip()
        if not line.startswith("gitdir:"):
            return None
        dot = (top / line[len("gitdir:"):].strip()).resolve()
    return dot if dot.is_dir() else None


def head_from_files(top: Path) -> str | None:
    """The commit HEAD names, read from the files of the checkout at `top` (HEAD, then the loose ref or
    packed-refs of the common folder), without running git; None when it cannot be read."""
    try:
        gdir = _git_dir(top)
        if gdir is None:
            return None
        common = gdir
        if (gdir / "commondir").is_file():   # a linked work tree: its refs are in the main repository's folder
            common = (gdir / (gdir / "commondir").read_text().strip()).resolve()
        head = (gdir / "HEAD").read_text(errors="replace").strip()
        for _ in range(5):   # a symbolic ref may name another one
            if _SHA.match(head):
                return head
            if not head.startswith("ref: "):
                return None
            ref = head[len("ref: "):].strip()
            loose = common / ref
            if loose.is_file():
                head = loose.read_text(errors="replace").strip()
                continue
            packed = common / "packed-refs"
            if not packed.is_file():
                return None
            for line in packed.read_text(errors="replace").splitlines():
                sha, _, name = line.partition(" ")
                if name == ref and _SHA.match(sha):
                    return sha
            return None
    except OSError:
        return None
    return None


def commit_and_dirty(path: Path) -> tuple[str | None, bool | None]:
    """(HEAD commit, dirty flag) of the checkout containing `path`; (None, None) outside one.

    The commit is None in a checkout without commits; dirty is None when
    `git status` cannot run. A checkout git refuses as another user's
    (`refusal`) has its commit read from its files and dirty None.
    """
    top, refused = _toplevel(path)
    if top is None:
        return None, None
    if refused is not None:
        return head_from_files(top), None
    commit = (git(path, "rev-parse", "HEAD") or "").strip() or None
    status = git(path, "status", "--porcelain", "--untracked-files=normal")
    return commit, (bool(status.strip()) if status is not None else None)
