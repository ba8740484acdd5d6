"""The code paths a run reaches (docs/parity.md, "Coverage"; esverify.oracle.run_paths).

- every path an adapter lists is reached by the default matrix (every row of it counted as run), and a
  selection without a path's rows leaves it unreached, by name;
- EGGROLL's rows reach several update chunks, the last one short, on the rank-1 path and the rank > 1
  one, besides the one-chunk rows;
- (slow) the stand-in passes the chunk rows, and an edit confined to the second and later chunks (the
  accumulator reset at every chunk) fails exactly them; the report's coverage section and metadata list
  the paths reached and those not reached, and the console says which were not.
"""
from __future__ import annotations

import json
import sys

import pandas as pd
import pytest

from esverify.oracle import adapters, cases, run_paths
from esverify.oracle.options import Options
from esverify.paths import oracles_dir
from esverify.references.eggroll import lowrank
from esverify.references.eggroll.adapter import CHUNK_ROWS

TARGETS = tuple(a.name for a in adapters.all_adapters())


def _default_frame(targets=TARGETS, drop=None) -> pd.DataFrame:
    opts = Options()
    matrix = cases.build_matrix(targets, ("cpu",), opts.dtypes, opts.schemes, None, None, None, opts.iterations,
                                False, opts.noises, opts.case_seed, True)
    frame = pd.DataFrame([{"target": c.target, "case": c.case_id, "status": "pass"} for c in matrix])
    return frame if drop is None else frame[~frame["case"].str.contains(drop, regex=False)]


def test_every_listed_path_is_reached_by_the_default_matrix():
    table, summary = run_paths.paths_frame(_default_frame(), set(TARGETS))
    assert set(summary) == set(TARGETS)
    assert all(len(getattr(adapters.get(t), "paths", ())) >= 6 for t in TARGETS)
    unreached = table.loc[~table["reached"], ["target", "path"]]
    assert unreached.empty, unreached.to_string()
    assert list(table.columns) == run_paths.COLUMNS and (table["rows"] >= 1).all()
    # what the issue names for each reference: chunk counts, rank, engines, mirroring, decay, resume, NaN
    paths = {(r.target, r.path) for r in table.itertuples()}
    for needed in [("eggroll", "several update chunks, the last one short"), ("eggroll", "one update chunk"),
                   ("eggroll", "rank-1 update (one matrix product per chunk)"),
                   ("eggroll", "rank > 1 update (batched products summed per chunk)"),
                   ("eggroll", "resume mid-generation from a checkpoint"), ("eggroll", "4 engines"),
                   ("es-awd", "mirrored sampling (N/2 seeds, divisor N)"), ("es-awd", "anchored decay l1"),
                   ("es-awd", "the update with NaN coefficients"), ("es-at-scale", "the update with NaN coefficients"),
                   ("es-at-scale", "z_score of a NaN reward"), ("es-paper", "one model copy")]:
        assert needed in paths, needed


def test_a_selection_without_a_paths_rows_leaves_it_unreached_by_name():
    frame = _default_frame(("eggroll",), drop="-chunk")
    table, summary = run_paths.paths_frame(frame, {"eggroll"})
    assert summary["eggroll"]["not_reached"] == ["several update chunks, the last one short"]
    # a row that did not run in the child reaches nothing
    skipped = _default_frame(("eggroll",)).assign(status="skipped")
    assert run_paths.paths_frame(skipped, {"eggroll"})[1]["eggroll"]["reached"] == []
    assert run_paths.paths_frame(None, {"eggroll"})[0]["reached"].sum() == 0
    # a target that did not run is not listed
    assert set(run_paths.paths_frame(frame, {"eggroll"})[1]) == {"eggroll"}


def test_eggroll_chunk_rows_reach_three_chunks_on_both_update_paths():
    matrix = adapters.get("eggroll").cases(adapters.MatrixSpec(devices=("cpu",), dtypes=("f32", "f16", "bf16"),
                                                               schemes=("correlated",)))
    chunked = [c for c in matrix if "chunk_size" in c.extra]
    assert len(chunked) == len(CHUNK_ROWS) == 2
    assert {int(c.extra["rank"]) == 1 for c in chunked} == {True, False}
    for case in chunked:
        pairs = case.population // 2
        chunk = lowrank.default_chunk(int(case.extra["rank"]), pairs, case.extra["chunk_size"])
        assert -(-pairs // chunk) == 3 and pairs % chunk, case.case_id      # three chunks, the last one short
        assert case.case_id.endswith(f"-chunk{case.extra['chunk_size']}")
    # every other row updates in one chunk
    for case in matrix:
        if "chunk_size" not in case.extra:
            assert lowrank.default_chunk(int(case.extra["rank"]), case.population // 2) >= case.population // 2


@pytest.mark.slow
def test_an_edit_of_the_later_chunks_fails_exactly_the_chunk_rows(tmp_path):
    sys.path.insert(0, str(oracles_dir().parent / "tests"))
    from esverify.oracle import run_parity
    from standins.eggroll_mutants import MUTANTS
    from standins.mutants import STANDINS, make_variant
    clean = STANDINS / "eggroll-vllm"
    mutant = make_variant(tmp_path / "m", "eggroll-vllm", MUTANTS["grad-reset-per-chunk"].edits)
    pattern = "eggroll/cpu/*/correlated/eggroll-main/N*/*e2*"      # the chunk rows and the 2-engine rows
    for clone, chunk_status in ((clean, "pass"), (mutant, "fail")):
        out = tmp_path / chunk_status
        result = run_parity(Options(ref=[str(clone)], target="eggroll", devices=("cpu",), case=pattern,
                                    out=str(out), quiet=True))
        frame = result.frame
        chunk = frame["case"].str.contains("-chunk")
        assert chunk.sum() == 2 and (~chunk).sum() >= 3
        assert (frame.loc[chunk, "status"] == chunk_status).all(), frame[["case", "status", "detail"]].to_string()
        assert (frame.loc[~chunk, "status"] == "pass").all(), frame[["case", "status", "detail"]].to_string()
        if chunk_status == "fail":
            assert all("engine 0 after the update" in d for d in frame.loc[chunk, "detail"])
        else:
            assert all("5 pairs in 3 update chunks of 2" in d for d in frame.loc[chunk, "detail"])
    # the report lists the paths reached and not reached (this selection has no 1-engine row)
    meta = json.loads((out / "parity-metadata.json").read_text())["coverage_paths"]["eggroll"]
    assert "several update chunks, the last one short" in meta["reached"] and "1 engine" in meta["not_reached"]
    doc = json.loads((out / "parity.json").read_text())
    rows = doc["sections"]["coverage_paths"]
    assert {r["path"] for r in rows} == set(meta["reached"]) | set(meta["not_reached"])
    assert "## coverage: the code paths reached" in (out / "parity.md").read_text()
