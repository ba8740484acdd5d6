"""esverify.oracle.console.summary_pivot counts the grid in one pass: the very frame pandas' pivot_table gave."""
import numpy as np
import pandas as pd
import pytest

from esverify.oracle import console
from esverify.oracle.rows import STATUSES


def _pivot_table(frame: pd.DataFrame) -> pd.DataFrame:
    """The grid as summary_pivot built it with pivot_table (a Python function per cell)."""
    def cell(statuses):
        counts = statuses.value_counts()
        return ", ".join(f"{counts[s]} {s}" for s in STATUSES if s in counts)
    native = frame["noise"].eq("native")
    f = frame.assign(column=frame["dtype"] + "/" + frame["scheme"] + np.where(native, "/native", ""))
    pivot = f.pivot_table(index=["target", "device", "op"], columns="column", values="status", aggfunc=cell,
                          fill_value="", sort=False)
    pivot.columns = [str(c) for c in pivot.columns]
    return pivot.reset_index()


def _rows(seed: int, n: int) -> list[dict]:
    rng = np.random.default_rng(seed)
    pick = lambda values: str(rng.choice(values))   # noqa: E731
    return [{"target": pick(["es-awd", "es-at-scale", "eggroll", "es-paper"]), "device": pick(["cpu", "cuda"]),
             "op": pick(["perturb", "restore", "update", "fit", "main-l1", "zscore"]),
             "dtype": pick(["f32", "f16", "bf16", "mixed", "f64"]), "scheme": pick(["iid", "correlated", "-"]),
             "noise": pick(["contract", "native"]), "status": pick(list(STATUSES))} for _ in range(n)]


@pytest.mark.parametrize("dtype", [None, "string", object])
@pytest.mark.parametrize("seed,n", [(0, 400), (1, 37), (2, 1)])
def test_summary_pivot_is_pivot_tables_grid(seed, n, dtype):
    """Rows in pivot_table's order (each key column's values by first appearance, not the rows' own order),
    columns by first appearance, every cell's counts in STATUSES order, the same dtypes: for row orders that
    interleave the keys, for the frames a run builds (str columns) and for string and object columns."""
    frame = pd.DataFrame(_rows(seed, n))
    if dtype is not None:
        frame = frame.astype(dtype)
    pd.testing.assert_frame_equal(console.summary_pivot(frame), _pivot_table(frame))


def test_summary_pivot_leaves_missing_keys_to_pivot_table():
    """A row with a missing key (NaN) is dropped, as pivot_table drops it."""
    frame = pd.DataFrame(_rows(3, 50))
    frame.loc[4, "op"] = np.nan
    pd.testing.assert_frame_equal(console.summary_pivot(frame), _pivot_table(frame))
    assert len(console.summary_pivot(frame)) == len(_pivot_table(frame))
