"""Clones of a reference: layout checks, git identity, licence (docs/references.md §1, §2, §4).

What a clone of a reference holds (its files, which ops need which file,
its licence file, the commit docs/references.md was validated against) is
its adapter's data (esverify.oracle.adapters). `inspect_clone` turns a
user's path into either a `CloneInfo` (with warnings) or a `CloneError`
whose message says plainly what is wrong (path missing, not a clone of
the reference: the adapter's `recognise`). A clone missing only some files
is usable: the ops needing those files fail as rows, everything else runs.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path

from .. import gitinfo


class CloneError(ValueError):
    """The path cannot be used as a clone of the target; the message says why."""


@dataclass
class CloneInfo:
    target: str
    path: Path
    missing: list = field(default_factory=list)   #: layout files absent (their ops become error rows)
    commit: str | None = None
    dirty: bool | None = None
    licence_file: str | None = None
    licence_sha256: str | None = None
    warnings: list = field(default_factory=list)
    source: str = ""   #: whence the path came: "--ref", "$ESVERIFY_REF", "./refs/NAME (the default path)", ...

    def metadata(self) -> dict:
        return {"path": str(self.path), "git_commit": self.commit, "dirty": self.dirty,
                "licence_file": self.licence_file, "licence_sha256": self.licence_sha256,
                "missing_files": self.missing, "warnings": self.warnings, "source": self.source}


def git_identity(path: Path) -> tuple[str | None, bool | None]:
    """(commit, dirty) when `path` is the top of a git checkout, else (None, None).

    A clone copied into another repository's subfolder has no commit of its
    own: the enclosing checkout's commit would name the wrong code.
    """
    top = gitinfo.toplevel(path)
    if top is None or top.resolve() != path.resolve():
        return None, None
    return gitinfo.commit_and_dirty(path)


def inspect_clone(target, path) -> CloneInfo:
    """Check `path` against the layout of `target` (an adapters.Adapter); CloneError when it is unusable."""
    path = Path(path).expanduser()
    if not path.exists():
        raise CloneError(f"{target.name} clone not found: {path} does not exist")
    if not path.is_dir() and not (path.is_file() and target.accepts_file()):
        raise CloneError(f"{target.name} clone {path} is not a directory")
    path = path.resolve()
    reason = target.recognise(path)
    if reason is not None:
        raise CloneError(reason)
    root = Path(target.clone_root(path))
    missing = [rel for rel in target.layout(path).values() if not (root / rel).is_file()]
    info = CloneInfo(target=target.name, path=path, missing=missing)
    for rel in missing:
        info.warnings.append(f"file missing: {rel} (the ops that need it are error rows)")
    info.commit, info.dirty = git_identity(root)
    refused = gitinfo.refusal(root)
    if refused:   # another user's clone: git refuses it, which is not "not a git checkout"
        info.warnings.append(refused[1] + ("; its commit was read from its .git files" if info.commit else ""))
    elif info.commit is None:
        info.warnings.append("not a git checkout: the commit cannot be named")
    elif target.validated_commit and not info.commit.startswith(target.validated_commit):
        info.warnings.append(f"commit {info.commit[:12]} is not the one docs/references.md was validated "
                             f"against ({target.validated_commit}): results describe this commit only")
    if info.dirty:
        info.warnings.append("the clone has uncommitted changes (dirty)")
    licence = root / target.licence
    if licence.is_file():
        info.licence_file = target.licence
        info.licence_sha256 = hashlib.sha256(licence.read_bytes()).hexdigest()
    else:
        info.warnings.append(f"licence file {target.licence} not found in the clone")
    return info
