"""benchmarks/bench_parity.py --versus-default: the default run and the --python run check the same references."""
import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from bench_scripts import load  # noqa: E402


def _bench():
    return load("bench_parity")


def _run(bench, monkeypatch, capsys, ref, chosen):
    calls = []

    def fake_in_process(args, extra=(), label="run", refs=None):
        calls.append((label, list(extra), refs))
        return {"cpu": 10.0, "wall": 5.0, "counts": {"pass": 1}, "load": (1.0, 1.0, 1.0),
                "rows_table": {"c": ["pass"]}}
    monkeypatch.setattr(bench, "_in_process", fake_in_process)
    monkeypatch.setattr(bench, "_print", lambda *a: None)
    monkeypatch.setattr(bench, "default_refs", lambda python_args: chosen)
    args = argparse.Namespace(python=["/venv/bin/python"], turns=2, ref=ref, markdown=False, out=None, small=False,
                              case=None)
    bench.versus_default(args)
    return calls, capsys.readouterr().out


def test_versus_default_gives_both_runs_the_references_the_python_run_can_check(monkeypatch, capsys):
    """Without --ref, hyperscale-es's stand-in is left out of the default run too when the --python
    interpreter has no JAX (its child's 60 s of CPU were on the default side only), and the line says so."""
    bench = _bench()
    line = "hyperscale-es left out: /venv/bin/python does not have jax"
    calls, out = _run(bench, monkeypatch, capsys, None, (list(bench.DEFAULT_REFS), line))
    assert [(label, refs) for label, _, refs in calls] == [
        (f"{kind}-{turn}", bench.DEFAULT_REFS) for turn in (1, 2) for kind in ("default", "python")]
    assert [extra for _, extra, _ in calls] == [[], ["--python", "/venv/bin/python"]] * 2
    assert f"{line}; so in both runs" in out
    # with JAX there, both runs have it; with --ref, the references given, in both
    calls, _ = _run(bench, monkeypatch, capsys, None, ([*bench.DEFAULT_REFS, bench.HYPERSCALE], ""))
    assert all(refs == [*bench.DEFAULT_REFS, bench.HYPERSCALE] for _, _, refs in calls)
    calls, _ = _run(bench, monkeypatch, capsys, ["/clone"], None)
    assert all(refs == ["/clone"] for _, _, refs in calls)


def test_versus_default_markdown_row_has_the_docs_table_columns(monkeypatch, capsys):
    """--markdown prints a row of docs/benchmarks.md's table: date, commit, load, each configuration's CPU per
    turn (wall range), the ratio per turn (median)."""
    bench = _bench()
    figures = iter([{"cpu": c, "wall": w, "counts": {}, "load": (l, 0, 0), "rows_table": {}, "interpreters":
                     {"es-awd": "/venv/bin/python (3.12.1)"}} for c, w, l in
                    ((50.0, 90.0, 9.8), (60.0, 120.0, 10.0), (40.0, 80.0, 11.0), (52.0, 100.0, 12.5))])
    monkeypatch.setattr(bench, "_in_process", lambda *a, **k: next(figures))
    monkeypatch.setattr(bench, "_print", lambda *a: None)
    monkeypatch.setattr(bench, "_commit", lambda: "abc1234")
    args = argparse.Namespace(python=["/venv/bin/python"], turns=2, ref=["/clone"], markdown=True, out=None,
                              small=False, case=None)
    bench.versus_default(args)
    lines = capsys.readouterr().out.splitlines()
    assert lines[-1].endswith("| abc1234 | 9.8-12.5 | 50.0, 40.0 s (80-90 s) | 60.0, 52.0 s (100-120 s) | "
                              "1.20, 1.30 (1.24) |")   # the medians' ratio, 56 / 45
    assert "the --python run's children: /venv/bin/python (3.12.1)" in lines
