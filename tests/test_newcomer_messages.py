"""What a newcomer's first runs print stays short and true (the newcomer pass):

- a run whose selection holds no training-loop row (`--case`, `--fuzz`, `--no-loops`) does not
  warn, function by function, that the loop functions "did not run": one line per target says
  that no loop row ran (none with --no-loops, whose not-checked line says it already); a run
  whose loop rows ran still names every loop function that did not run;
- a report's coverage reader counts only loop rows that ran in the child.
"""
from __future__ import annotations

import pandas as pd
import pytest

from esverify.oracle import Options, run_parity
from esverify.oracle.loop_report import loop_rows_run
from standins.mutants import STANDINS

AT_SCALE = str(STANDINS / "es-at-scale")
SMALL = dict(ref=AT_SCALE, target="es-at-scale", devices=("cpu",), dtypes=("f32",), schemes=("iid",),
             iterations=1, small=True, quiet=True, noises=("contract",))


def _coverage_warnings(result):
    return [w for w in result.metadata["warnings"] if "coverage" in w]


@pytest.mark.slow   # 3 s (--durations, 2026-12-03): out of the fast tier
def test_a_selection_without_loop_rows_gets_one_coverage_line_not_one_per_function(tmp_path):
    result = run_parity(Options(**SMALL, case="*/perturb/*", out=str(tmp_path / "out")))
    assert set(result.frame["status"]) == {"pass"} and set(result.frame["op"]) == {"perturb"}
    warnings = _coverage_warnings(result)
    assert not any("a training loop reaches it" in w for w in warnings), warnings   # the per-function lines
    # perturb ran WorkerExtension.perturb_self_weights; the other 12 of the 13 functions fit reaches (and the
    # driver lets run, Adapter.reached) did not run
    missing = result.metadata["coverage"]["es-at-scale"]["reached_not_run"]   # the section keeps the facts
    assert len(missing) == 12 and not any("perturb_self_weights" in m for m in missing), missing
    assert warnings == ["es-at-scale: coverage: no training-loop row ran in this selection, so 12 functions "
                        "a loop reaches did not run (the coverage section names them)"]


@pytest.mark.slow   # 3 s (--durations, 2026-12-03): out of the fast tier
def test_no_loops_leaves_the_saying_to_the_not_checked_line(tmp_path):
    result = run_parity(Options(**SMALL, case="*/perturb/*", loops=False, out=str(tmp_path / "out")))
    assert _coverage_warnings(result) == []
    assert any("not checked" in w and "--no-loops" in w and "fit" in w for w in result.metadata["warnings"])


def test_loop_rows_that_ran_are_the_only_ones_counted():
    frame = pd.DataFrame([
        {"target": "es-awd", "op": "main", "status": "skipped"},
        {"target": "es-awd", "op": "main-l1", "status": "not-run"},
        {"target": "es-awd", "op": "perturb", "status": "pass"},
        {"target": "es-at-scale", "op": "fit", "status": "error"},
    ])
    assert loop_rows_run(frame) == {"es-at-scale"}
    assert loop_rows_run(frame.iloc[:3]) == set()
    assert loop_rows_run(pd.DataFrame(columns=["target", "op", "status"])) == set()


def test_the_console_grid_is_followed_by_what_its_columns_mean(tmp_path):
    """A newcomer sees `f32/correlated/native` and `f64/-` columns: the console says what they are and
    what a pass certifies under each noise source, right under the grid."""
    from esverify.oracle.console import legend as _legend
    grid = pd.DataFrame([{"target": "es-awd", "device": "cpu", "op": "main-l1", "f64/-": "",
                          "f32/iid": "1 pass", "f32/correlated/native": "1 pass"}])
    text = " ".join(_legend(grid))
    assert text == ("dtype/scheme: on the contract's noise (a pass certifies the algebra); "
                    ".../native: on torch's own generator, as checkpoints were trained (a pass holds for this "
                    "torch version and device type only); f64/-: z-score rows (no noise); fit, main*: the "
                    "references' own training loops; see docs/parity.md, 'What a pass certifies'")
    only_contract = " ".join(_legend(grid.drop(columns=["f64/-", "f32/correlated/native"]).assign(op="perturb")))
    assert "native" not in only_contract and "f64" not in only_contract and "loops" not in only_contract
    assert _legend(pd.DataFrame(columns=["target", "device", "op"])) == []
    # a JAX reference's native noise is JAX's, not torch's: the legend names each reference's generator
    mixed = pd.concat([grid, grid.assign(target="hyperscale-es", op="update-jit"), grid.assign(target="es-at-scale")])
    assert ("on each reference's own generator (torch's for es-awd, es-at-scale; JAX's threefry for hyperscale-es), "
            "as checkpoints were trained (a pass holds for that library's version and device type only)"
            in " ".join(_legend(mixed)))
    assert all(len(line) <= 100 for line in _legend(grid))


@pytest.mark.slow   # 3 s (--durations, 2026-12-03): out of the fast tier
def test_a_native_run_console_explains_the_native_loop_rows(tmp_path):
    result = run_parity(Options(**{**SMALL, "noises": ("native",), "schemes": ("correlated",)},
                                case="*/fit/*", out=str(tmp_path / "out")))
    assert list(result.frame["case"]) == ["es-at-scale/cpu/f32/correlated/fit/N7/native"]
    assert list(result.frame["status"]) == ["pass"]
    lines = result.console.split("\n")
    grid_end = next(i for i, line in enumerate(lines) if line.startswith("es-at-scale  cpu"))
    legend = " ".join(lines[grid_end + 1:grid_end + 4])
    assert legend.startswith(".../native: on torch's own generator") and "fit, main*" in legend
    assert "contract's noise" not in legend


@pytest.mark.slow   # 3 s (--durations, 2026-12-03): out of the fast tier
def test_the_report_note_explains_native_loop_rows(tmp_path):
    """The metadata note (every report format) covers the native loop rows, not only single operations."""
    import torch
    result = run_parity(Options(**SMALL, case="*/perturb/*", out=str(tmp_path / "out")))
    note = result.metadata["note"]
    # the torch of each child that ran native rows, and the parent's
    assert f"the parent (our side's native noise): torch {torch.__version__})" in note
    assert f"(the children: es-at-scale torch {torch.__version__} on cpu;" in note
    assert "native loop rows (fit, main*)" in note and "30-bit seeds" in note
    assert "checkpoints trained with torch's noise" in note


def test_audit_names_a_ref_inside_the_tree_and_keeps_its_findings(tmp_path):
    """`esverify audit --ref tests/standins/es-awd` in this checkout finds the stand-in as a copy of itself:
    the console says why (the ref lies inside the tree) instead of leaving a newcomer with a bare FINDING."""
    import json

    from click.testing import CliRunner

    from esverify.audit.run import refs_inside_tree
    from esverify.cli import main
    tree, outside = tmp_path / "tree", tmp_path / "elsewhere"
    inside = tree / "vendor" / "ref"
    code = "".join(f"def step_{i}(theta, sigma, seed):\n    return [t + sigma * (seed + {i}) for t in theta]\n"
                   for i in range(6))
    for folder in (tree, inside, outside):
        folder.mkdir(parents=True, exist_ok=True)
    (tree / "mine.py").write_text("def mine(x):\n    return x * 2 + 1  # our own code, nothing shared\n")
    (inside / "ref.py").write_text(code)
    (outside / "ref.py").write_text(code)
    assert refs_inside_tree(tree, [inside, outside]) == [
        f"--ref {inside} lies inside the audited tree {tree}: its files are audited as the tree's too, so each "
        "is found as a copy of itself; pass a clone outside the tree to audit the tree against it"]
    assert refs_inside_tree(tree, [outside]) == [] and refs_inside_tree(None, [inside]) == []
    runner = CliRunner()
    res = runner.invoke(main, ["audit", "--tree", str(tree), "--ref", str(inside), "--out", str(tmp_path / "a"),
                               "--format", "json"], catch_exceptions=False)
    assert res.exit_code == 1, res.output                     # the tree does hold those files: still a finding
    assert f"warning: --ref {inside} lies inside the audited tree" in res.output
    report = json.loads((tmp_path / "a" / "audit.json").read_text())
    assert len(report["metadata"]["warnings"]) == 1
    import shutil
    shutil.rmtree(tree / "vendor")                            # the same reference, now only outside the tree
    res = runner.invoke(main, ["audit", "--tree", str(tree), "--ref", str(outside), "--out", str(tmp_path / "b"),
                               "--format", "json"], catch_exceptions=False)
    assert res.exit_code == 0 and "warning" not in res.output, res.output


def _row(op, dtype, scheme, noise, status, target="es-awd", device="cpu"):
    return {"target": target, "device": device, "op": op, "dtype": dtype, "scheme": scheme, "noise": noise,
            "status": status}


def test_compact_summary_counts_every_column_and_names_the_ones_not_passing():
    from esverify.oracle.console import compact_summary
    frame = pd.DataFrame([
        _row("caching", "f32", "iid", "contract", "artifact"), _row("caching", "f32", "correlated", "contract", "pass"),
        _row("caching", "f16", "iid", "contract", "artifact"), _row("caching", "f32", "correlated", "native", "pass"),
        _row("main", "f32", "iid", "contract", "pass"), _row("main", "f32", "correlated", "native", "fail"),
        _row("main", "f32", "correlated", "native", "pass"),
        _row("perturb", "f32", "iid", "contract", "error"), _row("perturb", "f32", "correlated", "native", "error"),
        _row("zscore", "f64", "-", "-", "pass", target="es-at-scale"),
    ])
    got = compact_summary(frame).to_dict(orient="records")
    assert got == [
        {"target": "es-awd", "device": "cpu", "op": "caching", "statuses": "2 pass, 2 artifact",
         "where not pass": "artifact: f32/iid, f16/iid"},
        {"target": "es-awd", "device": "cpu", "op": "main", "statuses": "2 pass, 1 fail",
         "where not pass": "fail: f32/correlated/native"},
        # every column errs: the count says it, no list of every column
        {"target": "es-awd", "device": "cpu", "op": "perturb", "statuses": "2 error", "where not pass": ""},
        {"target": "es-at-scale", "device": "cpu", "op": "zscore", "statuses": "1 pass", "where not pass": ""},
    ]
    assert list(compact_summary(frame.iloc[:0]).columns) == ["target", "device", "op", "statuses",
                                                             "where not pass"]


@pytest.mark.slow   # 6 s (--durations, 2026-12-03): out of the fast tier
def test_the_default_matrix_console_fits_a_terminal(tmp_path):
    """The default matrix's grid (13 dtype/scheme columns) is about 290 characters wide: the console shows
    the compact summary instead; a narrow grid (one dtype, one scheme) is shown as is."""
    from esverify.oracle.console import CONSOLE_WIDTH
    wide = run_parity(Options(**{**SMALL, "dtypes": ("f32", "f16"), "schemes": ("iid", "correlated"),
                                 "noises": ("contract", "native")}, case="*/perturb/*",
                              out=str(tmp_path / "wide")))
    assert len(set(wide.summary.columns) - {"target", "device", "op"}) == 9   # f32, f16, mixed x 2 schemes + 3 native
    lines = wide.console.split("\n")
    assert any(line.startswith("target") and "statuses" in line for line in lines), wide.console
    assert max(len(line) for line in lines if not line.startswith(("warning", "report", "finding"))) <= CONSOLE_WIDTH
    # 9 cells on the default set, 3 more on the /layers set
    assert any(line.split()[:4] == ["es-at-scale", "cpu", "perturb", "12"] for line in lines), wide.console
    narrow = run_parity(Options(**SMALL, case="*/perturb/*", out=str(tmp_path / "narrow")))
    assert any(line.startswith("target") and "f32/iid" in line for line in narrow.console.split("\n"))


def test_an_interpreter_that_fails_to_start_is_told_in_one_line(tmp_path):
    """A pyenv shim without that version prints several lines; the setup error stays one line."""
    import pytest

    from esverify.oracle.options import UsageError
    from esverify.oracle.setup import probe_python as _probe
    shim = tmp_path / "python3.12"
    shim.write_text("#!/bin/sh\necho \"pyenv: python3.12: command not found\" >&2\necho >&2\n"
                    "echo \"  3.12.1\" >&2\nexit 127\n")
    shim.chmod(0o755)
    with pytest.raises(UsageError) as err:
        _probe(str(shim), timeout=30)
    assert str(err.value) == (f"--python {shim}: the interpreter failed to start: "
                              "pyenv: python3.12: command not found | 3.12.1")


def test_needs_attention_lists_one_block_per_cause_with_its_count_and_span():
    """Three `reuse` artifacts of one op differ only in their counts: one entry of 3 rows; two failures
    that differ only in their counts are one cause of 2 rows, naming what they span (
    a cause is one block, its rows counted, none hidden)."""
    from pathlib import Path

    from esverify.oracle.console import console_text as _console, summary_pivot
    from esverify.oracle.rows import COLUMNS

    def row(dtype, status, diagnosis, detail, op="caching"):
        r = {c: "" for c in COLUMNS}
        r.update(target="es-awd", device="cpu", dtype=dtype, scheme="iid", noise="contract", op=op,
                 population=7, case=f"es-awd/cpu/{dtype}/iid/{op}/N7", status=status, diagnosis=diagnosis,
                 detail=detail)
        return r
    frame = pd.DataFrame([row("f32", "artifact", "reuse", "reuse: 1001 of 9 elements differ"),
                          row("f16", "artifact", "reuse", "reuse: 993 of 9 elements differ"),
                          row("bf16", "artifact", "reuse", "reuse: 952 of 9 elements differ"),
                          row("f32", "fail", "", "update: 3 of 9 elements differ", op="update-l1"),
                          row("f16", "fail", "", "update: 5 of 9 elements differ", op="update-l1")],
                         columns=COLUMNS)
    text = _console(frame, summary_pivot(frame), {"wall_time_s": 1.0, "warnings": []}, Path("out"), 1, "fail")
    attention = text[text.index("needs attention:"):]
    assert attention.startswith("needs attention: 2 causes\n")
    assert ("  fail (2 rows; targets es-awd; devices cpu; dtypes f32, f16; schemes iid; ops update-l1; noise "
            "contract)\n    e.g. es-awd/cpu/f32/iid/update-l1/N7: update: 3 of 9 elements differ\n") in attention
    assert "  artifact (3 rows, diagnosis reuse; targets es-awd; devices cpu; dtypes f32, f16, bf16;" in attention
    assert "e.g. es-awd/cpu/f32/iid/caching/N7: reuse: 1001 of 9" in attention and "993 of 9" not in attention
    assert attention.index("fail (") < attention.index("artifact (")


def test_no_loops_names_each_targets_own_loop_rows():
    """es-awd's loop rows are main and its variants; `fit` is es-at-scale's (it was listed for both)."""
    from types import SimpleNamespace

    from esverify.oracle.loop_report import _not_checked
    from esverify.references.es_awd.adapter import MAIN_VARIANTS
    runner = SimpleNamespace(opts=SimpleNamespace(loops=False, target="all"))
    frame = _not_checked(runner, {"es-at-scale", "es-awd"}, {"es-at-scale": None, "es-awd": None}, [], {})
    got = {t: n for t, n in zip(frame["target"], frame["not_checked"]) if t in ("es-at-scale", "es-awd")}
    assert got == {"es-at-scale": "fit", "es-awd": ", ".join(MAIN_VARIANTS)}
    assert "fit" not in got["es-awd"].split(", ") and got["es-awd"].startswith("main, main-mirror")
