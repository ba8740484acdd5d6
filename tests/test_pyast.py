"""Every parent-side parse goes through esverify.pyast.parse, one at a time: CPython 3.11's AST converter
keeps its recursion depth per interpreter, and two threads parsing at once raised `SystemError: AST
constructor recursion depth mismatch` as an error row of a skill-sample case in a full test run.

The stdlib still parses on its own in 3.11 when it formats a traceback (the caret anchors): the parent formats
none in its reference threads (a child formats its own)."""
from __future__ import annotations

import ast
import re
import threading
from pathlib import Path

import pytest

from child_files import in_child_folder
from esverify import pyast

PACKAGE = Path(__file__).resolve().parents[1] / "esverify"


def _package_files() -> list:
    """The package's modules: not a reference's child/ folder, which runs in the child process beside
    oracles/ (never in the parent, where the parse lock guards its threads)."""
    return [p for p in sorted(PACKAGE.rglob("*.py")) if not in_child_folder(p.relative_to(PACKAGE))]


def test_no_module_of_the_package_calls_ast_parse_but_pyast():
    calls = [f"{p.relative_to(PACKAGE)}:{n}" for p in _package_files() if p.name != "pyast.py"
             for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
             if re.search(r"\bast\.parse\(|\bcompile\([^)]*PyCF_ONLY_AST", line)]
    assert calls == [], calls


def test_every_npz_read_of_the_package_holds_the_parse_lock():
    """np.load parses .npy headers with ast: each call in the package sits in a `pyast.exclusive()` block."""
    calls = [f"{p.relative_to(PACKAGE)}:{n}" for p in _package_files()
             for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
             if re.search(r"\b(np|numpy)\.load\(", line) and "pyast.exclusive()" not in line]
    assert calls == [], calls


def test_parse_gives_ast_parse_s_tree_and_errors():
    source = (PACKAGE / "oracle" / "blame.py").read_text(encoding="utf-8")
    assert ast.dump(pyast.parse(source)) == ast.dump(ast.parse(source))
    try:
        pyast.parse("def f(:\n", filename="broken.py")
    except SyntaxError as exc:
        assert exc.filename == "broken.py" and exc.lineno == 1
    else:
        raise AssertionError("a syntax error must raise SyntaxError")


@pytest.mark.slow   # 2 s (--durations, 2026-12-03): out of the fast tier
def test_threads_parsing_at_once_all_get_the_same_tree():
    source = "\n".join((PACKAGE / name).read_text(encoding="utf-8") for name in ("oracle/blame.py", "interrupt.py"))
    want = ast.dump(ast.parse(source))
    got, errors = [], []

    def work():
        for _ in range(40):
            try:
                got.append(ast.dump(pyast.parse(source)) == want)
            except Exception as exc:   # noqa: BLE001 - the failure this test exists for is a SystemError
                errors.append(repr(exc))
    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == [] and got == [True] * 160


def test_parse_tries_again_when_cpython_reports_the_recursion_count_out_of_step(monkeypatch):
    """The mismatch SystemError (raised after a complete conversion, seen once in a CI-equivalent run with
    every parse of ours locked) is tried again, at most ATTEMPTS times; any other error is raised at once."""
    real, calls = ast.parse, []

    def flaky(source, filename="<unknown>", failures=2, message="AST constructor recursion depth mismatch "
                                                                 "(before=48, after=43)"):
        calls.append(filename)
        if len(calls) <= failures:
            raise SystemError(message)
        return real(source, filename=filename)

    monkeypatch.setattr(ast, "parse", flaky)
    assert ast.dump(pyast.parse("x = 1\n", filename="a.py")) == ast.dump(real("x = 1\n"))
    assert calls == ["a.py"] * 3
    calls.clear()
    monkeypatch.setattr(ast, "parse", lambda source, filename="<unknown>": flaky(source, filename, failures=99))
    with pytest.raises(SystemError, match="recursion depth mismatch"):
        pyast.parse("x = 1\n", filename="b.py")
    assert calls == ["b.py"] * pyast.ATTEMPTS
    calls.clear()
    monkeypatch.setattr(ast, "parse", lambda source, filename="<unknown>": flaky(source, filename, failures=99,
                                                                                  message="another"))
    with pytest.raises(SystemError, match="another"):
        pyast.parse("x = 1\n", filename="c.py")
    assert calls == ["c.py"]


def _peak_of_asts_built_at_once(monkeypatch, work, threads=4) -> tuple[int, int]:
    """(most ast.parse calls in flight at once, calls) while `threads` threads run `work`; each parse is
    held open a little so that an overlap, when the code allows one, is seen."""
    import time
    real, guard, state = ast.parse, threading.Lock(), {"now": 0, "peak": 0, "calls": 0}

    def spy(*args, **kwargs):
        with guard:
            state["now"] += 1
            state["calls"] += 1
            state["peak"] = max(state["peak"], state["now"])
        try:
            time.sleep(0.001)
            return real(*args, **kwargs)
        finally:
            with guard:
                state["now"] -= 1

    monkeypatch.setattr(ast, "parse", spy)
    pool = [threading.Thread(target=work) for _ in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    monkeypatch.setattr(ast, "parse", real)
    return state["peak"], state["calls"]


def test_parameter_set_reads_never_build_an_ast_beside_a_parse(monkeypatch, tmp_path):
    """numpy reads each .npy header with ast.literal_eval (ast.parse): the parent's reference threads read
    thousands of .npz files while others parse. paramsets.read holds pyast's lock, so no two ASTs are
    built at once; numpy's own np.load, in the same threads, does overlap (the spy can see it)."""
    import numpy as np
    import torch

    from esverify.oracle import paramsets
    path = paramsets.write(tmp_path / "set.npz", ["a", "b"], [torch.zeros(3), torch.ones(2, dtype=torch.float16)])

    def ours():
        for _ in range(15):
            assert paramsets.read(path)[0] == ["a", "b"]
            pyast.parse("x = (1, 2)\n")

    def bare():
        for _ in range(15):
            with np.load(path) as data:
                data["slot0"]
    assert _peak_of_asts_built_at_once(monkeypatch, ours)[0] == 1
    peak, calls = _peak_of_asts_built_at_once(monkeypatch, bare)
    assert peak > 1 and calls >= 4 * 15
