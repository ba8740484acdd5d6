"""The paper's four scripts: their files, which are `_iid`, where a clone has them, and the seed a row gives
their schedule (docs/references.md §6). The spec (.adapter) and the rows (.rows) both read them."""
from __future__ import annotations

from pathlib import Path

SCRIPTS = {   # op -> (script file, iid, task)
    "main-countdown": ("es_fine-tuning_countdown.py", False, "countdown"),
    "main-countdown-iid": ("es_fine-tuning_countdown_iid.py", True, "countdown"),
    "main-conciseness": ("es_fine-tuning_conciseness.py", False, "conciseness"),
    "main-conciseness-iid": ("es_fine-tuning_conciseness_iid.py", True, "conciseness"),
}
#: the rows set the scripts' initial_seed (33 in the scripts) to another value: a script that ignores its
#: constant shows in the seeds
INITIAL_SEED = 7


def script_rel(clone: Path, op: str) -> str:
    """The script of `op` relative to the clone: in archive/ (es-at-scale) or at the root (a fork)."""
    name = SCRIPTS[op][0]
    return f"archive/{name}" if (Path(clone) / "archive" / name).is_file() else name


def initial_seed(case) -> int:
    """The `initial_seed` the row sets on the script (numpy's legacy seed of its schedule)."""
    return int(case.extra.get("initial_seed", INITIAL_SEED))


def iid(op: str) -> bool:
    """Whether the script of `op` is an `_iid` one (seed + k per parameter)."""
    return SCRIPTS[op][1]
