"""The clone part of a reference adapter: how esverify finds, recognises and names a reference's clone.

Design record: an adapter is four small parts, each with defaults, each read by a
different part of the core: the clone (here; esverify.oracle.clones and the command line), its cases
(casebook; cases, fuzz), how its rows run (running; rows, row_runner, loop_rows) and its report data
(reportdata; the reports). esverify.oracle.adapters.base.Adapter is their sum.
"""
from __future__ import annotations

from pathlib import Path


class CloneLayout:
    """Where a reference's clone is and how it is recognised (esverify.oracle.clones, the command line)."""

    #: the reference's name: the first part of every case id, the report's `target` column
    name: str = ""
    #: environment variable naming the clone path when no --ref is given
    env_var: str = ""
    #: the clone path tried last, relative to the working directory
    default_path: str = ""
    #: a deprecated option that names this reference's clone (e.g. "--awd-ref"), or None
    alias_flag: str | None = None
    #: the child driver, run by path in the child interpreter beside the shared child runtime (oracles/): an
    #: absolute path, in the reference's own package (a built-in's is its child/driver.py); the other .py
    #: files of its folder (the modules it imports) and its interfaces.json are copied beside it
    driver: str = ""
    #: licence file name in the clone (docs/references.md §4)
    licence: str = ""
    #: commit prefix docs/references.md was validated against
    validated_commit: str = ""
    #: module key -> path relative to the clone root
    files: dict = {}
    #: op (or op family) -> module key it needs
    ops_need: dict = {}
    #: module keys whose file alone identifies a clone (None: every key of `files`); a file of a generic
    #: name (an `es.py`) is no clone of this reference without one of these beside it
    identifying: tuple | None = None

    def recognise(self, path: Path) -> str | None:
        """None when `path` is a clone of this reference (usable, perhaps with files missing); else the
        reason it is not, one line. The default: at least one layout file is there."""
        path = Path(path)
        if not path.is_dir():
            return f"{path} is not a directory"
        keys = self.files if self.identifying is None else self.identifying
        if any((path / self.files[k]).is_file() for k in keys):
            return None
        found = sorted(rel for rel in self.files.values() if (path / rel).is_file())
        if found:   # a generic file name matched, nothing that identifies the reference
            lacks = sorted(rel for rel in self.files.values() if rel not in found)
            return (f"not an {self.name} clone: it lacks {', '.join(lacks)} (it has only {', '.join(found)}, "
                    "a name other code uses too)")
        return f"{path} is not a clone of {self.name}: none of its files {sorted(self.files.values())} is there"

    def near_miss(self, path: Path) -> str | None:
        """The reason `path` is not a clone of this reference when it has some of its files (a generic
        name matched) but lacks the rest; None when it is a clone or has none of its files."""
        reason = self.recognise(path)
        return reason if reason and reason.startswith(f"not an {self.name} clone: it lacks") else None

    def layout(self, path: Path) -> dict:
        """module key -> path relative to the clone root, as the clone at `path` has them (the default:
        `files`; a reference whose files sit in different folders in different clones overrides it)."""
        return dict(self.files)

    def clone_root(self, path: Path) -> Path:
        """The folder the child is started on for the clone at `path` (the default: `path` itself; a
        reference that is one file names its folder)."""
        return Path(path)

    def accepts_file(self) -> bool:
        """Whether a clone of this reference may be given as a single file (`--ref FILE.py`)."""
        return False

    def looks_for(self) -> str:
        """One line: what a clone of this reference has (for the "no adapter recognises PATH" error)."""
        return "one of " + ", ".join(sorted(self.files.values()))

    def module_key(self, case) -> str | None:
        """The layout module key the row of `case` needs (its load error is the row's error)."""
        return self.ops_need.get(case.kind) or self.ops_need.get(case.op.split("-")[0])

    def rerun_args(self, path) -> list[str]:
        """The options naming this reference's clone in a rerun command line."""
        return ["--ref", str(path)]

    def how_to_give(self) -> str:
        """How a user gives this reference's clone, for "not checked" lines."""
        return f"--ref PATH or set ${self.env_var}"
