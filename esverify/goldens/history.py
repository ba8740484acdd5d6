"""Golden files as committed at a git ref, for `goldens check --against GITREF`.

The git repository is the one holding the goldens folder (so tests can
point the gate at a temporary repository); a file is read at REF with
``git show REF:<path relative to the repository root>``. Rules:
a vector changed or removed while the area's version did not move is a
failure, so deleting and regenerating a file cannot slip a change
through; a file absent at REF is fine; an unknown REF is an error (exit 2).
"""
from __future__ import annotations

from pathlib import Path

from ..gitinfo import git, toplevel
from . import fileformat
from .compare import row


class GitRefError(Exception):
    """The ref is unknown or the goldens folder is not inside a git work tree."""


def resolve(goldens_dir: Path, ref: str) -> tuple[Path, str]:
    """(repository root, full commit hash of `ref`); GitRefError when either is missing."""
    goldens_dir = Path(goldens_dir).resolve()
    if not goldens_dir.is_dir():
        raise GitRefError(f"--against needs the goldens folder {goldens_dir}, which does not exist")
    top = toplevel(goldens_dir)
    if top is None:
        raise GitRefError(f"--against needs a git checkout; {goldens_dir} is not inside one")
    commit = git(goldens_dir, "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}")
    if commit is None:
        raise GitRefError(f"unknown git ref {ref!r} (--against)")
    return top, commit.strip()


def load_at(root: Path, commit: str, path: Path, ref: str) -> dict | None:
    """The validated golden document at `path` as of `commit`, or None when absent there."""
    rel = Path(path).resolve().relative_to(Path(root).resolve()).as_posix()
    shown = git(root, "show", f"{commit}:{rel}", binary=True)
    if shown is None:
        return None
    return fileformat.parse(shown, f"{rel} at {ref}")


def against_rows(area: str, old: dict | None, new: dict | None, ref: str) -> list[dict]:
    """Failure rows for changes since `ref` that did not move the version (empty when fine)."""
    if old is None:
        return []
    old_version = old["contract"]["version"]
    if new is None:
        return [row(area, f"git:{ref}", vector["id"], status="removed-without-bump",
                    detail=f"the golden file was deleted; it existed at {ref} (version {old_version})")
                for vector in old["vectors"]]
    new_version = new["contract"]["version"]
    if new_version < old_version:
        return [row(area, f"git:{ref}", None, status="version-backwards",
                    detail=f"version {new_version} is lower than {old_version} at {ref}")]
    if new_version > old_version:
        return []
    d = fileformat.diff_ids(old, new)
    return ([row(area, f"git:{ref}", i, status="changed-without-bump",
                 detail=f"vector changed since {ref} while the version stayed {new_version}")
             for i in d["changed"]]
            + [row(area, f"git:{ref}", i, status="removed-without-bump",
                   detail=f"vector removed since {ref} while the version stayed {new_version}")
               for i in d["removed"]])
