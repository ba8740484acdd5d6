"""The private folder's judged cases are removed while the run goes on (esverify.oracle.sweeper)."""
from __future__ import annotations

import threading
from pathlib import Path

from esverify.oracle.runner import Runner
from esverify.oracle.sweeper import Sweeper


def _case(folder: Path, files: int = 3) -> Path:
    folder.mkdir(parents=True)
    for k in range(files):
        (folder / f"r{k}.npz").write_bytes(b"x" * 1000)
    return folder


def test_discarded_folders_are_gone_once_closed_and_a_repeat_gets_a_fresh_one(tmp_path):
    sweeper = Sweeper(tmp_path / "swept")
    first = _case(tmp_path / "cases" / "a")
    sweeper.discard(first)
    assert not first.exists()            # renamed at once: a repeat of the case writes into a new folder
    again = _case(tmp_path / "cases" / "a", files=1)
    sweeper.discard(tmp_path / "cases" / "absent")   # a case that wrote nothing: no error
    sweeper.close()
    assert list((tmp_path / "swept").iterdir()) == []
    assert [p.name for p in again.iterdir()] == ["r0.npz"]


def test_runner_keeps_a_case_whose_tensors_are_kept(tmp_path):
    runner = Runner.__new__(Runner)
    runner.__dict__.update(work=tmp_path, kept=[("es-awd/cpu/f32/iid/restore/N4", "o", "t")], _sweeper=None)
    runner._lock = threading.Lock()
    kept = _case(tmp_path / "cases" / "kept")
    judged = _case(tmp_path / "cases" / "judged")
    runner.sweep("es-awd/cpu/f32/iid/restore/N4", kept)
    runner.sweep("es-awd/cpu/f32/iid/update/N4", judged)
    runner._close_sweeper()
    assert kept.is_dir() and len(list(kept.iterdir())) == 3
    assert not judged.exists() and list((tmp_path / "swept").iterdir()) == []
    assert runner._sweeper is None
