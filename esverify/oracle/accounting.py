"""Where every row of a parity run is counted (docs/parity.md, "The console").

A row is a pass, needs attention (ATTENTION) or was not checked here (NOT_CHECKED); every format
carries the same three numbers, which add up to the number of rows. Pure functions of the rows frame.
"""
from __future__ import annotations

import pandas as pd

from .rows import FAILING, STATUSES


def status_counts(frame: pd.DataFrame) -> dict:
    """{status: rows} in STATUSES order, statuses with no rows left out."""
    counts = frame["status"].value_counts().to_dict() if len(frame) else {}
    return {s: int(counts[s]) for s in STATUSES if s in counts}


#: the statuses a report lists under "needs attention" (the failing ones, then documented behaviour)
ATTENTION = (*FAILING, "artifact", "defect")
#: the statuses of rows not checked here
NOT_CHECKED = ("skipped", "unsupported", "not-run")


def accounting(frame: pd.DataFrame) -> dict:
    """Every row in one of three places: {"rows": n, "pass": p, "needs_attention":
    {status: n}, "not_checked": {status: n}}, each dict in STATUSES order; pass + the two sums == rows."""
    counts = status_counts(frame)
    return {"rows": int(len(frame)), "pass": counts.get("pass", 0),
            "needs_attention": {s: n for s, n in counts.items() if s in ATTENTION},
            "not_checked": {s: n for s, n in counts.items() if s in NOT_CHECKED}}


def accounting_line(account: dict) -> str:
    """"806 rows = 392 pass + 11 need attention (4 defect, 7 artifact) + 403 not checked here (403 skipped)"."""
    def part(counts: dict, words: str) -> str:
        inner = ", ".join(f"{n} {s}" for s, n in counts.items())
        return f"{sum(counts.values())} {words}" + (f" ({inner})" if inner else "")
    return (f"{account['rows']} rows = {account['pass']} pass + {part(account['needs_attention'], 'need attention')}"
            f" + {part(account['not_checked'], 'not checked here')}")
