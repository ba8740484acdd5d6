"""Removing a judged case's files while the run goes on (docs/parity.md, "The run's private folder").

Each case's child writes its results into the run's private folder (`Session.case_dir`): about
2,300 files and 400 MB for the default matrix. Removed all at once at the end of a run, they held the
user for 4-7 s of wall time on an ext4 disk mounted with online discard (measured 2026-12-07: 7.2 s
of `shutil.rmtree` after the report was written, against under 0.2 s of CPU); removed within seconds
of being written, most never reach the disk at all. So a judged case's folder is renamed out of the way
at once (a repeat of the case writes into a fresh one) and removed by one background thread.
"""
from __future__ import annotations

import itertools
import queue
import shutil
import threading
from pathlib import Path


class Sweeper:
    """Removes folders in a background thread: `discard(path)` renames `path` (a folder, or nothing)
    into `trash` (created; on the same file system, inside the run's private folder) and queues it;
    `close()` waits until every queued folder is gone. A folder that cannot be renamed is left to the
    private folder's own removal at the end of the run. Never raises for a file it cannot remove."""

    def __init__(self, trash: Path):
        self.trash = Path(trash)
        self.trash.mkdir(parents=True, exist_ok=True)
        self._queue: queue.Queue = queue.Queue()
        self._names = itertools.count()
        self._thread = threading.Thread(target=self._work, name="esverify-sweeper", daemon=True)
        self._thread.start()

    def discard(self, path: Path) -> None:
        target = self.trash / str(next(self._names))
        try:
            Path(path).rename(target)
        except OSError:     # absent (the case wrote nothing), or busy: the run's own cleanup takes it
            return
        self._queue.put(target)

    def _work(self) -> None:
        while (path := self._queue.get()) is not None:
            shutil.rmtree(path, ignore_errors=True)

    def close(self) -> None:
        self._queue.put(None)
        self._thread.join()
