"""Section 3: files byte-identical to a reference file (SHA-256).

Files under 64 bytes or holding only whitespace (an empty `__init__.py`,
a lone newline) are listed as trivial and never count as findings: any
two projects share them.
"""
from __future__ import annotations

import pandas as pd

TRIVIAL_BYTES = 64
COLUMNS = ["status", "origin", "tree_file", "ref", "ref_file", "size", "sha256"]


def is_trivial(data: bytes) -> bool:
    """True for files under 64 bytes or made of whitespace only."""
    return len(data) < TRIVIAL_BYTES or not data.strip()


def compare(tree_entries, ref_entries: list[tuple[str, object]]) -> pd.DataFrame:
    """Rows for every tree file whose bytes equal a reference file's
    (status "finding" or "trivial"). Unreadable entries never match."""
    by_hash: dict[str, list[tuple[str, object]]] = {}
    for label, entry in ref_entries:
        if entry.sha256 and entry.kind != "symlink":
            by_hash.setdefault(entry.sha256, []).append((label, entry))
    rows = []
    for entry in tree_entries:
        if not entry.sha256 or entry.kind == "symlink":
            continue
        for label, ref in by_hash.get(entry.sha256, ()):
            trivial = entry.data is not None and is_trivial(entry.data)   # too-large: hashed, not held
            rows.append({"status": "trivial" if trivial else "finding",
                         "origin": entry.origin, "tree_file": entry.path, "ref": label, "ref_file": ref.path,
                         "size": entry.size, "sha256": entry.sha256})
    frame = pd.DataFrame(rows, columns=COLUMNS)
    if len(frame):
        frame = frame.sort_values(["status", "tree_file"], kind="stable").reset_index(drop=True)
    return frame
