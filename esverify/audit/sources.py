"""Read what the audit scans into memory: tree, wheel/sdist, git history, reference.

Every source becomes a list of `FileEntry` (origin, path, bytes, kind).
Classification is by content first (a NUL byte or invalid UTF-8 makes a
file `binary`; an OSError makes it `unreadable`), then by name: `.py`,
`.sh`, notebooks and extensionless scripts with a python/sh shebang are
`code`; `.md`/`.rst`/`.txt` and licence/readme-like files are `prose`;
other text is `data` (hashed, not compared). Binary and unreadable files
are kept (identity and the manifest need them) and listed as skipped by
the code and text passes; nothing here raises on a bad file.
"""
from __future__ import annotations

import hashlib
import json
import os
import tarfile
import zipfile
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from ..gitinfo import git, toplevel

CODE_SUFFIXES = {".py": "python", ".pyw": "python", ".pyi": "python", ".sh": "bash", ".bash": "bash"}
PROSE_SUFFIXES = {".md", ".rst", ".txt", ".tex", ".markdown"}
PROSE_STEMS = ("readme", "license", "licence", "copying", "notice", "authors", "contributing",
               "changelog", "changes", "history", "citation")
LICENCE_STEMS = ("license", "licence", "copying")


@dataclass
class FileEntry:
    """One scanned file held in memory.

    origin: "tree", "wheel:<name>", "history" or "ref:<n>"; path: posix path
    inside that origin (history paths carry "@<blob id>"); data: the bytes
    (None when unreadable); kind: code | prose | data | binary | unreadable
    | symlink; language: "python" or "bash" for code; error: why skipped.
    """

    origin: str
    path: str
    data: bytes | None
    kind: str = "data"
    language: str | None = None
    notebook: bool = False
    error: str | None = None
    sha256: str | None = None
    size: int | None = None
    markdown: str = ""
    _text: str | None = field(default=None, repr=False)

    @property
    def text(self) -> str:
        """The decoded text (UTF-8); empty for binary/unreadable entries."""
        if self._text is None:
            self._text = self.data.decode("utf-8") if self.kind in ("code", "prose", "data") else ""
        return self._text

    @property
    def plain_path(self) -> str:
        """The path without the "@<blob id>" that history entries carry."""
        return self.path.rsplit("@", 1)[0] if self.origin == "history" else self.path

    @property
    def name(self) -> str:
        return PurePosixPath(self.plain_path).name

    @property
    def is_licence(self) -> bool:
        return self.name.lower().startswith(LICENCE_STEMS)


def classify(origin: str, path: str, data: bytes | None, error: str | None = None,
             symlink_target: str | None = None) -> FileEntry:
    """Build a FileEntry and decide its kind; never raises on bad content."""
    entry = FileEntry(origin=origin, path=path, data=data, error=error)
    if symlink_target is not None:
        entry.kind, entry.error = "symlink", f"symlink to {symlink_target} (not followed)"
        entry.data = symlink_target.encode("utf-8", "replace")
    if entry.data is None:
        entry.kind = "unreadable"
        entry.error = error or "unreadable"
        return entry
    entry.sha256 = hashlib.sha256(entry.data).hexdigest()
    entry.size = len(entry.data)
    if entry.kind == "symlink":
        return entry
    if b"\x00" in entry.data[:65536]:
        entry.kind, entry.error = "binary", "binary (NUL byte)"
        return entry
    try:
        text = entry.data.decode("utf-8")
    except UnicodeDecodeError as exc:
        entry.kind, entry.error = "binary", f"not UTF-8 ({exc.reason} at byte {exc.start})"
        return entry
    entry._text = text
    pure = PurePosixPath(entry.plain_path)
    suffix, stem = pure.suffix.lower(), pure.name.lower()
    if suffix in CODE_SUFFIXES:
        entry.kind, entry.language = "code", CODE_SUFFIXES[suffix]
    elif suffix == ".ipynb":
        try:
            cells = json.loads(text).get("cells", [])
            entry.kind, entry.language, entry.notebook = "code", "python", True
            entry._text = notebook_code(cells)
            entry.markdown = notebook_markdown(cells)
        except (ValueError, AttributeError, TypeError) as exc:
            entry.kind, entry.error = "data", f"notebook not parsed: {exc}"
    elif suffix == "" and text.startswith("#!"):
        shebang = text.split("\n", 1)[0]
        if "python" in shebang:
            entry.kind, entry.language = "code", "python"
        elif any(s in shebang for s in ("sh", "bash", "zsh")):
            entry.kind, entry.language = "code", "bash"
        else:
            entry.kind = "prose"
    elif suffix in PROSE_SUFFIXES or stem.startswith(PROSE_STEMS):
        entry.kind = "prose"
    else:
        entry.kind = "data"
    return entry


def _cell_source(cell) -> str:
    src = cell.get("source", "")
    return "".join(src) if isinstance(src, list) else str(src)


def notebook_code(cells) -> str:
    """Code cells of a notebook joined into one Python text (magics commented out)."""
    out = []
    for cell in cells:
        if cell.get("cell_type") == "code":
            lines = [("# " + ln) if ln.lstrip().startswith(("%", "!")) else ln
                     for ln in _cell_source(cell).splitlines()]
            out.append("\n".join(lines))
    return "\n\n".join(out) + "\n"


def notebook_markdown(cells) -> str:
    return "\n\n".join(_cell_source(c) for c in cells if c.get("cell_type") == "markdown")


def read_path(origin: str, root: Path, rel: str) -> FileEntry:
    """Read `root/rel` into a FileEntry; symlinks are not followed."""
    full = root / rel
    try:
        if full.is_symlink():
            return classify(origin, rel, None, symlink_target=os.readlink(full))
        if not full.is_file():
            return classify(origin, rel, None, error="not a regular file")
        return classify(origin, rel, full.read_bytes())
    except OSError as exc:
        return classify(origin, rel, None, error=f"unreadable: {exc.strerror or exc}")


def tree_entries(root: Path, origin: str = "tree") -> list[FileEntry]:
    """Files of a tree, sorted by path.

    At a checkout's top level: every tracked file plus untracked files that
    are not ignored (`git ls-files --cached --others --exclude-standard`:
    what the next commit can hold). Anywhere else: every file under `root`
    except `.git` and caches.
    """
    at_top = toplevel(root) == root.resolve()
    listing = git(root, "ls-files", "-z", "--cached", "--others", "--exclude-standard", "--full-name",
                  binary=True) if at_top else None
    if listing is not None:
        rels = sorted({p.decode("utf-8", "surrogateescape") for p in listing.split(b"\x00") if p})
        # A tracked file deleted from the work tree is gone from what ships; skip silently.
        return [read_path(origin, root, r) for r in rels if (root / r).exists() or (root / r).is_symlink()]
    return walk_entries(root, origin)


def walk_entries(root: Path, origin: str) -> list[FileEntry]:
    """Every file under `root` except `.git`, `__pycache__` and `.pyc` caches."""
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in (".git", "__pycache__"))
        for name in sorted(filenames):
            if name.endswith((".pyc", ".pyo")):
                continue
            rel = (Path(dirpath) / name).relative_to(root).as_posix()
            out.append(read_path(origin, root, rel))
    return out


def archive_entries(path: Path) -> list[FileEntry]:
    """Members of a wheel (zip) or sdist (tar.gz / zip); an sdist's single top
    folder (`name-version/`) is stripped so paths match a checkout.
    Raises ValueError when `path` is not a readable archive."""
    origin = f"wheel:{path.name}"
    members: list[tuple[str, bytes | None, str | None]] = []
    try:
        if zipfile.is_zipfile(path):
            with zipfile.ZipFile(path) as zf:
                for info in zf.infolist():
                    if info.is_dir():
                        continue
                    try:
                        members.append((info.filename, zf.read(info), None))
                    except Exception as exc:  # corrupt member: list it, keep going
                        members.append((info.filename, None, f"unreadable member: {exc}"))
        elif tarfile.is_tarfile(path):
            with tarfile.open(path) as tf:
                for info in tf.getmembers():
                    if info.isdir():
                        continue
                    if not info.isfile():
                        members.append((info.name, None, "not a regular file in the archive"))
                        continue
                    try:
                        fh = tf.extractfile(info)
                        members.append((info.name, fh.read() if fh else None, None))
                    except Exception as exc:
                        members.append((info.name, None, f"unreadable member: {exc}"))
        else:
            raise ValueError(f"{path} is neither a wheel (zip) nor an sdist (tar)")
    except (OSError, zipfile.BadZipFile, tarfile.TarError) as exc:
        raise ValueError(f"cannot read archive {path}: {exc}") from exc
    tops = {m[0].split("/", 1)[0] for m in members}
    strip = len(tops) == 1 and all("/" in m[0] for m in members) and not path.name.endswith(".whl")
    out = []
    for name, data, err in members:
        rel = name.split("/", 1)[1] if strip else name
        out.append(classify(origin, rel, data, error=err))
    return sorted(out, key=lambda e: e.path)


def history_entries(root: Path, skip_blobs: set[str] = frozenset()) -> list[FileEntry]:
    """Every blob reachable from any ref or reflog entry of the checkout at
    `root`, once per blob id, as `path@<blob id>` (the first path git names
    for it). Blobs whose SHA-256 is in `skip_blobs` (already scanned in the
    tree) are dropped. Raises ValueError outside a git checkout."""
    listing = git(root, "rev-list", "--objects", "--all", "--reflog")
    if listing is None:
        listing = git(root, "rev-list", "--objects", "--all")
    if listing is None:
        raise ValueError(f"{root} has no readable git history")
    candidates: dict[str, str] = {}
    for line in listing.splitlines():
        parts = line.split(" ", 1)
        if len(parts) == 2 and parts[1] and parts[0] not in candidates:
            candidates[parts[0]] = parts[1]
    if not candidates:
        return []
    types = git(root, "cat-file", "--batch-check=%(objectname) %(objecttype)",
                input="\n".join(candidates).encode() + b"\n") or ""
    blobs = [ln.split()[0] for ln in types.splitlines() if ln.endswith(" blob")]
    raw = git(root, "cat-file", "--batch", binary=True, input="\n".join(blobs).encode() + b"\n") or b""
    out, pos = [], 0
    for oid in blobs:
        nl = raw.find(b"\n", pos)
        header = raw[pos:nl].decode("utf-8", "replace").split() if nl >= 0 else []
        if len(header) != 3:  # "<oid> missing" (a shallow or damaged clone): list it, keep going
            out.append(classify("history", f"{candidates[oid]}@{oid[:12]}", None,
                                error="blob missing from the object store"))
            pos = nl + 1 if nl >= 0 else len(raw)
            continue
        size = int(header[2])
        data = raw[nl + 1:nl + 1 + size]
        pos = nl + 1 + size + 1
        if hashlib.sha256(data).hexdigest() in skip_blobs:
            continue
        out.append(classify("history", f"{candidates[oid]}@{oid[:12]}", data))
    return out
