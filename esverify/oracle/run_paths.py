"""The code paths of each reference a run reached (docs/parity.md, "Coverage").

Function coverage says a function ran, not which of its branches: an
update that splits its pairs into chunks runs whether a row has one chunk
or three. Each adapter therefore lists its paths by what selects them
(`paths`: (path, what selects it, case-id patterns)), and a path is
reached when a row matching one of its patterns ran in the child (any
status but skipped, unsupported or not run). `paths_frame` gives the
report's table (target, path, selected by, reached, rows, first row) and
the metadata's summary per target (reached and not reached, by name).
"""
from __future__ import annotations

from fnmatch import fnmatchcase

import pandas as pd

from . import adapters as _adapters

#: the statuses of a row that ran in the child (loop_report.RAN)
RAN = ("pass", "fail", "error", "unverifiable", "artifact", "defect")
COLUMNS = ["target", "path", "selected_by", "reached", "rows", "first_row"]


def paths_frame(frame, targets) -> tuple[pd.DataFrame, dict]:
    """(table, {target: {"reached": [path], "not_reached": [path]}}) for the adapters named in `targets`
    that declare paths; frame: the run's rows (columns target, case, status), None or empty for none."""
    rows, summary = [], {}
    ran = frame[frame["status"].isin(RAN)] if frame is not None and len(frame) else None
    for adapter in _adapters.all_adapters():
        paths = tuple(getattr(adapter, "paths", ()) or ())
        if adapter.name not in targets or not paths:
            continue
        cases = [] if ran is None else list(ran.loc[ran["target"] == adapter.name, "case"])
        reached, missed = [], []
        for path, selected_by, patterns in paths:
            hits = [c for c in cases if any(fnmatchcase(c, p) for p in patterns)]
            rows.append({"target": adapter.name, "path": path, "selected_by": selected_by, "reached": bool(hits),
                         "rows": len(hits), "first_row": hits[0] if hits else ""})
            (reached if hits else missed).append(path)
        summary[adapter.name] = {"reached": reached, "not_reached": missed}
    return pd.DataFrame(rows, columns=COLUMNS), summary
