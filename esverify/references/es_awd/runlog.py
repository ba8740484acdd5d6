"""es-awd's run log as `esverify replay` reads it (docs/replay.md §2, §3): the reference's own folder, no esverify block.

Design record:
- es-awd's training loop writes the `iteration_updates/` layout the core
  reads (esverify.replay.log): `args.json` and one
  `iteration_updates/iteration_NNNNNN.json` per iteration. It writes no
  `esverify` block, so what the block would say comes from here: the
  numerics profile `es-awd` (the default that `--profile` overrides), the
  first iteration 1, native noise (the core's default for a log that names
  none), and that its iteration files list no evaluated members: the saved
  weights are engine 0's, which also evaluated its share of the members
  (`engine_share`: `--batching` says how they were handed out, the report
  names num_engines and, when the two batchings disagree, the other one).
- Detection is an `args.json` that is a strict-JSON object without an
  `esverify` block (a null block is no block, as the reader takes it);
  anything else is left to the other formats or to the core's reader, whose
  errors name the file.
- The core replays such a log (the format has no replay of its own).

Checks: ``python -m pytest -q tests/test_replay.py`` (es-awd-style loops of
the stand-in replay bit for bit; both batchings).
"""
from __future__ import annotations

from pathlib import Path

from esverify import jsonin
from esverify.replay.log import RunLog, RunLogFormat, read_log

#: the reference's name: a log of this format is reported with this `source`
NAME = "es-awd"


def is_awd_log(folder) -> bool:
    """True when `folder/args.json` is a strict-JSON object with no `esverify` block (never raises)."""
    try:
        args = jsonin.load_path(Path(folder) / "args.json", "args.json")
    except (OSError, ValueError):
        return False
    return isinstance(args, dict) and args.get("esverify") is None


RUNLOG_FORMAT = RunLogFormat(name=NAME, detect=is_awd_log, profile="es-awd", first_iteration=1, engine_share=True)


def read_awd_log(folder) -> RunLog:
    """es-awd's run log in `folder`, checked (esverify.replay.log.read_log with this format); LogError naming the file."""
    return read_log(folder, RUNLOG_FORMAT)
