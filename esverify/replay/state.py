"""The resume state of a replay (docs/replay.md §6).

A state folder holds `job.json` (the fingerprint of the inputs and
options) and one `units/unit-NNNNNNNN.json` per verified unit, each
written atomically as the unit finishes; with --out, `pieces/` holds each
unit's reconstructed elements. A replay run again with the same inputs
skips the units already there. A folder made for other inputs is refused
(never mixed).
"""
from __future__ import annotations

from pathlib import Path

from esverify import jsonin
from esverify.report import write_atomic

STATE_FORMAT = "esverify.replay.state/1"


class StateError(ValueError):
    """A state folder that belongs to another replay or cannot be used; names the folder."""


class State:
    """The state folder `folder` of the replay identified by `fingerprint` (a hex digest)."""

    def __init__(self, folder, fingerprint: str):
        self.folder = Path(folder)
        job = self.folder / "job.json"
        if job.exists():
            try:
                known = jsonin.load_path(job).get("fingerprint")
            except (OSError, ValueError, AttributeError) as exc:   # JSONInputError is a ValueError
                raise StateError(f"{job}: unreadable resume state ({exc}); remove the folder or pass another "
                                 f"--state-dir") from None
            if known != fingerprint:
                raise StateError(f"{self.folder}: holds the state of another replay (other inputs or options); "
                                 f"pass another --state-dir or remove it")
        else:
            try:
                self.folder.mkdir(parents=True, exist_ok=True)
                write_atomic(job, jsonin.dumps({"format": STATE_FORMAT, "fingerprint": fingerprint}) + "\n")
            except OSError as exc:
                raise StateError(f"{self.folder}: cannot write the resume state ({exc})") from None
        (self.folder / "units").mkdir(exist_ok=True)
        self.pieces = self.folder / "pieces"
        self.pieces.mkdir(exist_ok=True)

    def _path(self, index: int) -> Path:
        return self.folder / "units" / f"unit-{index:08d}.json"

    def piece(self, index: int) -> Path:
        return self.pieces / f"unit-{index:08d}.safetensors"

    def done(self, need_pieces: bool) -> dict[int, dict]:
        """Results of the units already verified (with their piece when `need_pieces`), by unit index."""
        out = {}
        for path in sorted((self.folder / "units").glob("unit-*.json")):
            try:
                result = jsonin.load_path(path)
                if not isinstance(result, dict) or not isinstance(result.get("unit"), int):
                    continue
            except (OSError, ValueError):
                continue   # written atomically, so only a foreign file lands here: redo that unit
            if not need_pieces or self.piece(result["unit"]).exists():
                out[result["unit"]] = result
        return out

    def record(self, result: dict) -> None:
        """Store one unit's result atomically."""
        write_atomic(self._path(result["unit"]), jsonin.dumps(result) + "\n")
