"""Folder layouts of the paper's scripts for tests (docs/references.md §6).

Design record: the stand-in scripts live once, in archive/ of the
es-at-scale stand-in (where today's es-at-scale clone has them); the other
layouts a user may point esverify at are built from them at test time, so
the copies can never drift apart:
- an es-fine-tuning-paper fork: the four scripts and LICENSE.txt at the
  ROOT of the clone (the repository's earlier name);
- a scratch folder to run one script in: the script beside its own
  `data/countdown.json` (the countdown scripts read it relative to their
  own folder; no data ships with the stand-in).
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

from standins.mutants import STANDINS, make_variant

ARCHIVE = "archive"
#: the four scripts of docs/references.md §6, as the manifest names them in an es-at-scale clone
PAPER_SCRIPTS = ("archive/es_fine-tuning_countdown.py", "archive/es_fine-tuning_countdown_iid.py",
                 "archive/es_fine-tuning_conciseness.py", "archive/es_fine-tuning_conciseness_iid.py")
LICENCE = "LICENSE.txt"


def paper_fork(tmp, edits=()) -> Path:
    """An es-fine-tuning-paper fork under `tmp`: archive/*.py of the es-at-scale stand-in and its
    LICENSE.txt copied to the root of `tmp/es-fine-tuning-paper`; returns that root.

    edits: (file, old, new) replacements as in tests/standins/mutants.py, files named as in the
    es-at-scale stand-in ("archive/es_fine-tuning_countdown.py"), applied before the copy; an `old`
    that does not occur exactly once raises AssertionError."""
    tmp = Path(tmp)
    source = make_variant(tmp / "source", "es-at-scale", edits) if edits else STANDINS / "es-at-scale"
    root = tmp / "es-fine-tuning-paper"
    root.mkdir(parents=True)
    for script in sorted((source / ARCHIVE).glob("*.py")):
        shutil.copy2(script, root / script.name)
    shutil.copy2(source / LICENCE, root / LICENCE)
    return root


def scratch_run_folder(tmp, script, items=(), source=None) -> Path:
    """A folder under `tmp` to run one paper script in: the script (a path relative to `source`,
    default the es-at-scale stand-in, or an absolute path) copied into it and `data/countdown.json`
    holding `items` (dicts with "context" and "target") beside it; returns the folder. The script
    writes its model folders relative to the working directory: run it with this folder as cwd."""
    source = Path(source) if source is not None else STANDINS / "es-at-scale"
    path = Path(script) if Path(script).is_absolute() else source / script
    folder = Path(tmp) / "run"
    (folder / "data").mkdir(parents=True)
    shutil.copy2(path, folder / path.name)
    (folder / "data" / "countdown.json").write_text(json.dumps(list(items)), encoding="utf-8")
    return folder
