"""Read what the audit scans into memory: tree, wheel/sdist, git history, reference.

Every source becomes a list of `FileEntry` (origin, path, bytes, kind).
The language is decided by name first (`.py`, `.sh`, notebooks,
extensionless scripts with a python/sh shebang are code), then the bytes
are decoded the way that language defines:

- Python: the PEP 263 declaration or BOM, else UTF-8 (PEP 3120), read by
  the standard library's `tokenize.detect_encoding`; a NUL byte, an unknown
  codec or bytes invalid in the declared encoding make it `unreadable`;
- notebooks: JSON (RFC 8259: UTF-8; `json` also detects UTF-16/32); an
  unparsable notebook is `unreadable`;
- shell: bytes (bash assigns no encoding): UTF-8, else Latin-1, which maps
  every byte to one character, so nothing is lost;
- prose (`.md`, `.rst`, `.txt`, README...): UTF-8, else Latin-1 (noted);
- other files: UTF-8 text is `data`; anything else `binary` (hashed for
  identity, not compared).

Resources: no file or archive member larger than
`max_bytes` (AuditOptions.max_file_bytes, default DEFAULT_MAX_FILE_BYTES)
is read into memory; sizes are checked before reading (stat, the archive's
header, git's object size) and reads are capped anyway. Such a file is
kind `too-large`: a tree file is still hashed by streaming (identity keeps
working), an archive member or history blob is not decompressed at all.
Directory symlinks are listed like file symlinks (never followed).

Kinds `unreadable` and `too-large` are findings of the audit's
`readability` section (run.py): a file the audit cannot read is never a
silent pass. Binary files and symlinks are listed as skipped. Nothing here
raises on a bad file.
"""
from __future__ import annotations

import hashlib
import io
import os
import stat
import tokenize
import tarfile
import zipfile
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from .. import jsonin
from ..gitinfo import git, toplevel

CODE_SUFFIXES = {".py": "python", ".pyw": "python", ".pyi": "python", ".sh": "bash", ".bash": "bash"}
PROSE_SUFFIXES = {".md", ".rst", ".txt", ".tex", ".markdown"}
PROSE_STEMS = ("readme", "license", "licence", "copying", "notice", "authors", "contributing",
               "changelog", "changes", "history", "citation")
LICENCE_STEMS = ("license", "licence", "copying")
#: Largest file or archive member read (bytes). A 50 MB generated module once made the
#: default audit take 557 s and 8.9 GB; ordinary source files are far below 4 MiB.
DEFAULT_MAX_FILE_BYTES = 4 * 1024 * 1024
#: Bracket nesting accepted in a notebook (nbformat needs 6); deeper is a readability finding.
NOTEBOOK_MAX_DEPTH = 64
#: kinds that are findings: the audit could not read the file
UNREADABLE_KINDS = ("unreadable", "too-large")
#: One archive may inflate into at most this many times the per-file bound in all (a wheel of many
#: members each just under the bound must not exhaust memory either).
ARCHIVE_FACTOR = 64
_HASH_CHUNK = 1 << 20


@dataclass
class FileEntry:
    """One scanned file held in memory.

    origin: "tree", "wheel:<name>", "history" or "ref:<n>"; path: posix path
    inside that origin (history paths carry "@<blob id>"); data: the bytes
    (None when unreadable or too large); kind: code | prose | data | binary |
    unreadable | too-large | symlink; language: "python" or "bash" when the
    name says code (also for unreadable code); encoding: the codec the text
    was decoded with; error: why skipped or unreadable.
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
    encoding: str | None = None
    _text: str | None = field(default=None, repr=False)

    @property
    def text(self) -> str:
        """The decoded text (see the module docstring); empty for binary/unreadable entries."""
        if self._text is None:
            self._text = (self.data.decode(self.encoding or "utf-8") if self.kind in ("code", "prose", "data")
                          else "")
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


def language_of(path: str, head: bytes = b"") -> tuple[str | None, bool]:
    """(language, notebook) from the name (and a shebang in `head` for extensionless files)."""
    pure = PurePosixPath(path)
    suffix = pure.suffix.lower()
    if suffix in CODE_SUFFIXES:
        return CODE_SUFFIXES[suffix], False
    if suffix == ".ipynb":
        return "python", True
    if suffix == "" and head.startswith(b"#!"):
        shebang = head.split(b"\n", 1)[0]
        if b"python" in shebang:
            return "python", False
        if any(s in shebang for s in (b"sh", b"bash", b"zsh")):
            return "bash", False
    return None, False


def python_encoding(data: bytes) -> str:
    """The encoding Python itself would read `data` with (PEP 263 declaration or BOM, else UTF-8).

    Raises SyntaxError (bad or unknown declaration) or UnicodeDecodeError/LookupError.
    """
    encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
    data.decode(encoding)
    return encoding


def _unreadable(entry: FileEntry, reason: str) -> FileEntry:
    entry.kind, entry.error = "unreadable", reason
    return entry


def classify(origin: str, path: str, data: bytes | None, error: str | None = None,
             symlink_target: str | None = None, *, size: int | None = None, sha256: str | None = None,
             too_large: int | None = None) -> FileEntry:
    """Build a FileEntry and decide its kind; never raises on bad content.

    too_large: the bound a file exceeded (its `size` and, if streamed, `sha256` given; data None).
    """
    entry = FileEntry(origin=origin, path=path, data=data, error=error)
    if symlink_target is not None:
        entry.kind, entry.error = "symlink", f"symlink to {symlink_target} (not followed)"
        entry.data = symlink_target.encode("utf-8", "replace")
    entry.language, entry.notebook = language_of(entry.plain_path, (data or b"")[:256])
    if too_large is not None:
        entry.kind, entry.size, entry.sha256, entry.data = "too-large", size, sha256, None
        entry.error = error or (f"too large to audit: {size} bytes, over the bound of {too_large} bytes "
                                f"(--max-file-size){'' if sha256 else '; not read, not hashed'}")
        return entry
    if entry.data is None:
        entry.kind = "unreadable"
        entry.error = error or "unreadable"
        return entry
    entry.sha256 = hashlib.sha256(entry.data).hexdigest()
    entry.size = len(entry.data)
    if entry.kind == "symlink":
        return entry
    if entry.notebook:
        try:   # bounded (esverify.jsonin): depth, the digit limit and bad bytes are findings, not tracebacks
            cells = jsonin.loads(entry.data, "notebook", max_bytes=len(entry.data),
                                 max_depth=NOTEBOOK_MAX_DEPTH).get("cells", [])
            entry._text = notebook_code(cells)
            entry.markdown = notebook_markdown(cells)
        except (ValueError, AttributeError, TypeError, RecursionError) as exc:
            return _unreadable(entry, f"notebook is not readable JSON with cells: {exc}")
        entry.kind = "code"
        return entry
    if entry.language == "python":
        if b"\x00" in entry.data:
            return _unreadable(entry, "Python source with a NUL byte (Python cannot read it either)")
        try:
            entry.encoding = python_encoding(entry.data)
        except (SyntaxError, UnicodeDecodeError, LookupError) as exc:
            return _unreadable(entry, f"Python source not decodable with its declared encoding "
                                      f"(PEP 263/3120): {exc}")
        entry._text = entry.data.decode(entry.encoding)
        entry.kind = "code"
        return entry
    if b"\x00" in entry.data[:65536] and entry.language is None:
        entry.kind, entry.error = "binary", "binary (NUL byte)"
        return entry
    try:
        entry._text, entry.encoding = entry.data.decode("utf-8"), "utf-8"
    except UnicodeDecodeError as exc:
        pure = PurePosixPath(entry.plain_path)
        prose = pure.suffix.lower() in PROSE_SUFFIXES or pure.name.lower().startswith(PROSE_STEMS)
        if entry.language == "bash" or prose:   # byte-transparent text: Latin-1 keeps every byte
            entry._text, entry.encoding = entry.data.decode("latin-1"), "latin-1"
        else:
            entry.kind, entry.error = "binary", f"not UTF-8 ({exc.reason} at byte {exc.start})"
            return entry
    pure = PurePosixPath(entry.plain_path)
    suffix, stem = pure.suffix.lower(), pure.name.lower()
    if entry.language is not None:
        entry.kind = "code"
    elif suffix == "" and entry._text.startswith("#!"):
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


def _stream_sha256(path: Path) -> str | None:
    digest = hashlib.sha256()
    try:
        with open(path, "rb") as fh:
            for chunk in iter(lambda: fh.read(_HASH_CHUNK), b""):
                digest.update(chunk)
    except OSError:
        return None
    return digest.hexdigest()


def read_path(origin: str, root: Path, rel: str, max_bytes: int = DEFAULT_MAX_FILE_BYTES) -> FileEntry:
    """Read `root/rel` into a FileEntry; symlinks (to files or folders) are not followed.

    The size is checked before reading: a file over `max_bytes` is `too-large`,
    hashed by streaming, never held in memory.
    """
    full = root / rel
    try:
        st = os.lstat(full)
        if stat.S_ISLNK(st.st_mode):
            return classify(origin, rel, None, symlink_target=os.readlink(full))
        if stat.S_ISDIR(st.st_mode):   # git lists a submodule as one path
            return classify(origin, rel, None, error="a folder where a file was listed (a git submodule?): "
                                                     "not audited here; audit it with its own --tree")
        if not stat.S_ISREG(st.st_mode):
            return classify(origin, rel, None, error="not a regular file")
        if st.st_size > max_bytes:
            return classify(origin, rel, None, size=st.st_size, sha256=_stream_sha256(full), too_large=max_bytes)
        with open(full, "rb") as fh:
            data = fh.read(max_bytes + 1)          # the file may have grown since lstat
        if len(data) > max_bytes:
            return classify(origin, rel, None, size=len(data), sha256=_stream_sha256(full), too_large=max_bytes)
        return classify(origin, rel, data)
    except OSError as exc:
        return classify(origin, rel, None, error=f"unreadable: {exc.strerror or exc}")


def tree_entries(root: Path, origin: str = "tree", max_bytes: int = DEFAULT_MAX_FILE_BYTES) -> list[FileEntry]:
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
        return [read_path(origin, root, r, max_bytes) for r in rels
                if (root / r).exists() or (root / r).is_symlink()]
    return walk_entries(root, origin, max_bytes)


def walk_entries(root: Path, origin: str, max_bytes: int = DEFAULT_MAX_FILE_BYTES) -> list[FileEntry]:
    """Every file under `root` except `.git`, `__pycache__` and `.pyc` caches; symlinks to folders
    are listed (kind `symlink`), never followed."""
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        links = [d for d in dirnames if os.path.islink(os.path.join(dirpath, d))]
        dirnames[:] = sorted(d for d in dirnames if d not in (".git", "__pycache__") and d not in links)
        for name in sorted(filenames + links):
            if name.endswith((".pyc", ".pyo")):
                continue
            rel = (Path(dirpath) / name).relative_to(root).as_posix()
            out.append(read_path(origin, root, rel, max_bytes))
    return out


def archive_entries(path: Path, max_bytes: int = DEFAULT_MAX_FILE_BYTES) -> list[FileEntry]:
    """Members of a wheel (zip) or sdist (tar.gz / zip); an sdist's single top
    folder (`name-version/`) is stripped so paths match a checkout.

    A member whose declared size exceeds `max_bytes` is not decompressed
    (kind `too-large`); every read is capped at `max_bytes + 1` bytes, so a
    header that lies about the size cannot inflate memory either.
    Raises ValueError when `path` is not a readable archive."""
    origin = f"wheel:{path.name}"
    members: list[tuple[str, bytes | None, str | None, int | None]] = []   # (name, data, error, too-large size)
    budget = [ARCHIVE_FACTOR * max_bytes]      # bytes this archive may still inflate into memory

    def over_budget(name, declared) -> bool:
        if declared <= budget[0]:
            return False
        members.append((name, None, f"too large to audit: the archive's members inflate past "
                                    f"{ARCHIVE_FACTOR * max_bytes} bytes in all ({ARCHIVE_FACTOR} x --max-file-size); "
                                    f"this {declared}-byte member was not read", declared))
        return True

    def capped(fh, name, declared):
        data = fh.read(max_bytes + 1)
        budget[0] -= len(data)
        if len(data) > max_bytes:
            members.append((name, None, None, max(declared, len(data))))
        else:
            members.append((name, data, None, None))

    try:
        if zipfile.is_zipfile(path):
            with zipfile.ZipFile(path) as zf:
                for info in zf.infolist():
                    if info.is_dir():
                        continue
                    if info.file_size > max_bytes:
                        members.append((info.filename, None, None, info.file_size))
                        continue
                    if over_budget(info.filename, info.file_size):
                        continue
                    try:
                        with zf.open(info) as fh:
                            capped(fh, info.filename, info.file_size)
                    except Exception as exc:  # corrupt member: list it, keep going
                        members.append((info.filename, None, f"unreadable member: {exc}", None))
        elif tarfile.is_tarfile(path):
            with tarfile.open(path) as tf:
                for info in tf:
                    if info.isdir():
                        continue
                    if not info.isfile():
                        members.append((info.name, None, "not a regular file in the archive", None))
                        continue
                    if info.size > max_bytes:
                        members.append((info.name, None, None, info.size))
                        continue
                    if over_budget(info.name, info.size):
                        continue
                    try:
                        fh = tf.extractfile(info)
                        if fh is None:
                            members.append((info.name, None, "unreadable member", None))
                        else:
                            capped(fh, info.name, info.size)
                    except Exception as exc:
                        members.append((info.name, None, f"unreadable member: {exc}", None))
        else:
            raise ValueError(f"{path} is neither a wheel (zip) nor an sdist (tar)")
    except (OSError, zipfile.BadZipFile, tarfile.TarError) as exc:
        raise ValueError(f"cannot read archive {path}: {exc}") from exc
    tops = {m[0].split("/", 1)[0] for m in members}
    strip = len(tops) == 1 and all("/" in m[0] for m in members) and not path.name.endswith(".whl")
    out = []
    for name, data, err, big in members:
        rel = name.split("/", 1)[1] if strip else name
        out.append(classify(origin, rel, data, error=err, size=big, too_large=max_bytes if big else None))
    return sorted(out, key=lambda e: e.path)


def history_entries(root: Path, skip_blobs: set[str] = frozenset(),
                    max_bytes: int = DEFAULT_MAX_FILE_BYTES) -> list[FileEntry]:
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
    types = git(root, "cat-file", "--batch-check=%(objectname) %(objecttype) %(objectsize)",
                input="\n".join(candidates).encode() + b"\n") or ""
    out, blobs = [], []
    for ln in types.splitlines():
        parts = ln.split()
        if len(parts) == 3 and parts[1] == "blob":
            if int(parts[2]) > max_bytes:   # sizes first: such a blob is never read
                out.append(classify("history", f"{candidates[parts[0]]}@{parts[0][:12]}", None,
                                    size=int(parts[2]), too_large=max_bytes))
            else:
                blobs.append(parts[0])
    raw = git(root, "cat-file", "--batch", binary=True, input="\n".join(blobs).encode() + b"\n") or b""
    pos = 0
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
