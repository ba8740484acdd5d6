"""A reference process that flushes subnormals to zero fails parity (docs/parity.md "Subnormals").

The parent refuses to run in a flushing process (esverify.numerics_probe),
but the reference runs in the child: a clone that calls
`torch.set_flush_denormal(True)` (or loads a -ffast-math library) turns
the child's FTZ/DAZ flags on, and its results in the subnormal range stop
being IEEE results. The parity sets rarely reach that range, so the values
alone would pass; the child's own probe (after loading the clone, and after
every case) makes each row it ran a `fail` with diagnosis `flush`.
"""
from __future__ import annotations

import pytest

from esverify.oracle import Options, run_parity
from esverify.oracle.child_process import _reply_error
from esverify.oracle.rows import flush_row
from standins.mutants import make_variant

AWD_UTILS = "weight_update_utils.py"
ES = "es.py"
FTZ = "import torch\ntorch.set_flush_denormal(True)\n"


def _run(tmp_path, clone, case):
    return run_parity(Options(ref=str(clone), target="es-awd", devices=("cpu",), dtypes=("f32",),
                              schemes=("correlated",), iterations=1, small=True, case=case,
                              out=str(tmp_path / "out"), quiet=True))


@pytest.mark.slow   # 3 s (--durations, 2026-12-03): out of the fast tier
def test_clone_setting_ftz_at_import_fails_every_row_it_ran_and_is_warned(tmp_path):
    clone = make_variant(tmp_path, "es-awd", [(AWD_UTILS, "import torch\n", FTZ)])
    # perturb and restore, contract and native (ids ending N<n> or /native: not the /layers rows)
    result = _run(tmp_path, clone, "*/cpu/f32/correlated/[pr]e*[0-9e]")
    frame = result.frame
    assert len(frame) == 4 and set(frame["status"]) == {"fail"}, frame[["case", "status", "detail"]]
    assert set(frame["diagnosis"]) == {"flush"}
    assert all("flushes subnormals to zero (FTZ/DAZ)" in d and "row before the probe: pass" in d
               for d in frame["detail"])
    assert (frame["mismatches"] == 0).all()       # the values agree: only the probe sees the fault
    assert result.exit_code == 1
    warnings = result.metadata["warnings"]
    assert any(w.startswith("es-awd: the child flushes subnormals to zero (FTZ/DAZ) once the clone is loaded")
               and "torch f32 2**-126 * 2**-3 gave bits 0x00000000 (FTZ)" in w for w in warnings), warnings


@pytest.mark.slow   # 5 s (--durations, 2026-12-03): out of the fast tier
def test_loop_that_sets_ftz_fails_its_loop_row(tmp_path):
    """es.py is loaded lazily by the loop op, after the hello: the per-case probe still sees it."""
    clone = make_variant(tmp_path, "es-awd", [(ES, "import torch\n", FTZ)])
    result = _run(tmp_path, clone, "*/cpu/f32/correlated/main/*")
    row = result.frame[result.frame["noise"] == "contract"].iloc[0]
    assert (row["status"], row["diagnosis"]) == ("fail", "flush"), row["detail"]
    assert not any("once the clone is loaded" in w for w in result.metadata["warnings"])


@pytest.mark.slow   # 3 s (--durations, 2026-12-03): out of the fast tier
def test_unchanged_clone_reports_no_flush(tmp_path):
    from standins.mutants import STANDINS
    result = _run(tmp_path, STANDINS / "es-awd", "*/cpu/f32/correlated/perturb/*")
    assert set(result.frame["status"]) == {"pass"} and set(result.frame["diagnosis"].fillna("")) == {""}
    assert result.metadata["children"]["es-awd"]["flush_to_zero"] == []


ROW = {"status": "pass", "diagnosis": "", "detail": ""}


@pytest.mark.parametrize("status, expected", [("pass", "fail"), ("artifact", "fail"), ("unverifiable", "fail"),
                                              ("fail", "fail"), ("error", "error"), ("skipped", "skipped"),
                                              ("unsupported", "unsupported"), ("not-run", "not-run")])
def test_flush_row_fails_only_rows_that_compared(status, expected):
    row = flush_row(dict(ROW, status=status, diagnosis="reuse" if status == "artifact" else ""),
                    ["numpy f32 2**-130 * 2 gave bits 0x00000000, not 0x00100000 (DAZ)", "x"], "es-awd")
    assert row["status"] == expected
    if expected == "fail":
        assert row["diagnosis"].split(",")[-1] == "flush"
        assert "(DAZ) (+1 more probe(s))" in row["detail"] and f"row before the probe: {status}" in row["detail"]
    assert flush_row(dict(ROW, status=status), [], "es-awd")["status"] == status     # no findings: unchanged


@pytest.mark.parametrize("flush", ["FTZ", [1], {"a": 1}, None])
def test_reply_with_a_malformed_flush_field_is_a_protocol_violation(flush):
    reply = {"id": 3, "status": "ok", "flush_to_zero": flush}
    assert "'flush_to_zero' is not a list of texts" in _reply_error(reply, {"id": 3})
    assert "flush_to_zero" not in _reply_error({"id": 3, "status": "ok", "flush_to_zero": ["x"]}, {"id": 3})
