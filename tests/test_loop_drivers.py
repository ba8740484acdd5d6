"""Unit tests of the child-side pieces of the loop drivers (docs/references.md §5): the seams
that are replaced and put back, the interface-error classification, and function coverage without
coverage.py. The modules run only in the parity child; the test imports them by path from oracles/.
"""
from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch

from esverify.paths import oracles_dir

sys.path.insert(0, str(oracles_dir()))
import loop_errors  # noqa: E402 - oracles/ is not a package: by path only
import loop_seams  # noqa: E402


# ------------------------------------------------------------------ seams

class _Owner:
    existing = "original"


@pytest.mark.slow   # 2 s (--durations, 2026-12-03): out of the fast tier
def test_seams_put_back_everything_the_entry_point_changed_even_when_it_raises():
    argv, env_before = list(sys.argv), dict(os.environ)
    handler = signal.getsignal(signal.SIGTERM)
    random.seed(5)
    np.random.seed(5)
    torch.manual_seed(5)
    expect_random, expect_numpy, expect_torch = random.random(), np.random.random(), torch.rand(1).item()
    random.seed(5)
    np.random.seed(5)
    torch.manual_seed(5)
    det = torch.are_deterministic_algorithms_enabled()
    with pytest.raises(RuntimeError, match="the reference raised"):
        with loop_seams.Seams() as seams:
            seams.set(_Owner, "existing", "replaced")
            seams.set(_Owner, "added", 1)
            sys.argv[:] = ["es.py", "--sigma", "0.5"]
            os.environ["CUDA_VISIBLE_DEVICES"] = ""
            os.environ["PYTHONHASHSEED"] = "0"
            signal.signal(signal.SIGTERM, lambda *a: None)
            random.seed(99)
            np.random.seed(99)
            torch.manual_seed(99)
            torch.use_deterministic_algorithms(True)
            assert seams.settings()["deterministic_algorithms"] is True
            assert _Owner.existing == "replaced" and _Owner.added == 1
            raise RuntimeError("the reference raised")
    assert _Owner.existing == "original" and not hasattr(_Owner, "added")
    assert sys.argv == argv and dict(os.environ) == env_before
    assert signal.getsignal(signal.SIGTERM) is handler
    assert torch.are_deterministic_algorithms_enabled() is det
    # the global generators continue exactly where they were before the row
    assert (random.random(), np.random.random(), torch.rand(1).item()) == (expect_random, expect_numpy,
                                                                           expect_torch)


def test_restore_signals_puts_the_childs_handlers_back_right_away():
    mine = signal.getsignal(signal.SIGINT)
    with loop_seams.Seams() as seams:
        signal.signal(signal.SIGINT, lambda *a: sys.exit(0))   # what es-at-scale's constructor does
        seams.restore_signals()
        assert signal.getsignal(signal.SIGINT) is mine


# ------------------------------------------------------------------ interface errors

def _clone_module(tmp_path, source: str):
    clone = tmp_path / "clone"
    clone.mkdir()
    path = clone / "ref.py"
    path.write_text(textwrap.dedent(source))
    namespace: dict = {}
    exec(compile(path.read_text(), str(path), "exec"), namespace)
    return clone, namespace


def _raised(fn):
    try:
        fn()
    except BaseException as exc:  # noqa: BLE001 - the test inspects what was raised
        return exc
    raise AssertionError("nothing raised")


def test_a_missing_attribute_of_our_stand_in_is_an_interface_error_naming_file_and_line(tmp_path):
    import loop_stubs
    clone, ns = _clone_module(tmp_path, """
        def run(engine):
            x = 1
            return engine.tokenizer_config
    """)
    engine = loop_stubs.ImmediatePool()
    exc = _raised(lambda: ns["run"](engine))
    out = loop_errors.interface_error(exc, clone, "fit")
    assert isinstance(out, loop_errors.InterfaceError)
    info = out.info
    assert (info["kind"], info["file"], info["line"], info["function"], info["name"]) == \
        ("interface", "ref.py", 4, "run", "tokenizer_config")
    assert info["message"].startswith("esverify could not drive this clone: ref.py:4 (in run) reads the "
                                      "attribute 'tokenizer_config' of esverify's stand-in ImmediatePool")
    assert "next:" in info["message"]


def test_a_missing_key_of_a_supplied_data_item_is_an_interface_error(tmp_path):
    clone, ns = _clone_module(tmp_path, """
        def prompts(items):
            return [item["question"] for item in items]
    """)
    exc = _raised(lambda: ns["prompts"]([loop_errors.Supplied(context="c", target=1.0)]))
    out = loop_errors.interface_error(exc, clone, "main")
    assert isinstance(out, loop_errors.InterfaceError)
    assert (out.info["name"], out.info["line"]) == ("question", 3)


def test_an_unexpected_argument_to_a_function_we_supplied_is_an_interface_error(tmp_path):
    clone, ns = _clone_module(tmp_path, """
        def main(get_data):
            return get_data(None, split="train")
    """)

    def get_data(tokenizer):
        return [], []
    loop_errors.SUPPLIED_CALLABLES.add("get_data")
    exc = _raised(lambda: ns["main"](get_data))
    out = loop_errors.interface_error(exc, clone, "main")
    assert isinstance(out, loop_errors.InterfaceError)
    assert (out.info["name"], out.info["line"]) == ("split", 3)


@pytest.mark.parametrize("source, call", [
    # the reference's own objects and logic: its own wording stays
    ("def f():\n    return {'a': 1}['b']\n", lambda ns: ns["f"]()),
    ("class T:\n    pass\ndef f():\n    return T().missing\n", lambda ns: ns["f"]()),
    ("def f():\n    return 1 + 'x'\n", lambda ns: ns["f"]()),
    ("def f():\n    raise ValueError('bad lambda')\n", lambda ns: ns["f"]()),
])
def test_a_failure_in_the_references_own_logic_is_left_as_it_is(tmp_path, source, call):
    clone = tmp_path / "clone"
    clone.mkdir()
    path = clone / "ref.py"
    path.write_text(source)
    ns: dict = {}
    exec(compile(source, str(path), "exec"), ns)
    exc = _raised(lambda: call(ns))
    assert loop_errors.interface_error(exc, clone, "fit") is exc


# ------------------------------------------------------------------ coverage without coverage.py

@pytest.mark.parametrize("lines, installed", [(False, True), (True, False), (True, True)])
def test_the_function_table_comes_from_the_interpreter_and_lines_only_when_asked(tmp_path, lines, installed):
    """The child's Python often lacks coverage.py, and a trace function slows every frame of the child: the
    function table comes from the interpreter (profile hooks on 3.11, sys.monitoring on 3.12+), code run
    between rows included, and no trace function is set unless line counts were asked for
    (`parity --line-coverage`); asked for where coverage.py is missing, the table says so and lists the
    functions all the same."""
    clone = tmp_path / "clone"
    (clone / "pkg").mkdir(parents=True)
    (clone / "pkg" / "__init__.py").write_text("")
    (clone / "pkg" / "mod.py").write_text(textwrap.dedent("""
        def used():
            def inner():
                return 1
            return inner()

        def unused():
            return 2

        class K:
            def method(self):
                return 3

            def other(self):
                return 4
    """))
    fake = tmp_path / "nocov" / "coverage"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("raise ImportError('coverage.py is not installed here')\n")
    script = textwrap.dedent(f"""
        import json, sys
        sys.path[:0] = {([] if installed else [str(fake.parent)]) + [str(oracles_dir()), str(clone)]!r}
        import child_coverage
        child_coverage.configure(lines={lines!r})
        child_coverage.start({str(clone)!r})
        traced = sys.gettrace() is not None
        import pkg.mod as m
        m.used()                                    # outside a row: the cumulative table has it
        child_coverage.row_start()
        m.K().method()
        row = child_coverage.row_end()
        print(json.dumps({{"table": child_coverage.table(), "row": row, "traced": traced}}))
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True)
    import json
    got = json.loads(out.stdout.strip().splitlines()[-1])
    table, entry = got["table"], got["table"]["files"]["pkg/mod.py"]
    assert table["error"] == ""
    assert entry["functions"] == {"used": True, "used.inner": True, "unused": False, "K.method": True,
                                  "K.other": False}
    assert got["row"] == {"pkg/mod.py": ["K.method"]}          # the row's own record: what ran inside it
    assert got["traced"] is (lines and installed)             # a trace function only for line counts
    recorder = "sys.monitoring" if sys.version_info >= (3, 12) else "profile hooks (cProfile's recorder)"
    assert table["how"].startswith(recorder)
    if lines and installed:
        # own lines, nested bodies apart: used's `return inner()`, inner's `return 1`, method's `return 3`
        assert entry["function_lines"] == {"used": 1, "used.inner": 1, "unused": 0, "K.method": 1, "K.other": 0}
        # and the file's: those 3, used's `def inner`, and the module's five def/class lines
        assert entry["lines"] == 9 and table["how"] == recorder + "; lines: coverage.py"
    else:
        assert entry["lines"] is None and entry["function_lines"] == {}
        assert ("coverage.py is not installed" in table["how"]) is lines


def _interpreters() -> list:
    """This Python and a Python 3.12 where the machine has one (child_coverage's two recorders)."""
    import glob
    import shutil
    if sys.version_info[:2] == (3, 12):
        return [sys.executable]
    for other in sorted(glob.glob(os.path.expanduser("~/.pyenv/versions/3.12*/bin/python3.12"))) + \
            [shutil.which("python3.12")]:
        if other and subprocess.run([other, "-c", "pass"], capture_output=True).returncode == 0:
            return [sys.executable, other]   # (a pyenv shim of a version not selected exits 127)
    return [sys.executable]


SWITCH_AND_THREADS = """
import json, sys, threading
sys.path.insert(0, {child!r})
import child_coverage as cc
results = {{}}
cc.start({c1!r})
sys.path.insert(0, {c1!r})
import first                              # its module level calls at_import(): outside any row
cc.start({c2!r})                          # the child switched to another clone (the first's record kept)
sys.path.insert(0, {c2!r})
import second
results["second"] = cc.table()["files"]["second.py"]["functions"]
go, ticked = threading.Event(), threading.Event()
def worker():                             # started in a row, outlives it, runs clone code between rows
    go.wait()
    second.tick()
    ticked.set()
cc.row_start()
t = threading.Thread(target=worker)
t.start()
cc.row_end()
go.set()
ticked.wait()
cc.row_start()
second.work()
results["row"] = cc.row_end()
t.join()
results["tick"] = cc.table()["files"]["second.py"]["functions"]["tick"]
print(json.dumps(results))
"""


@pytest.mark.parametrize("python", _interpreters())
def test_a_second_start_and_a_thread_that_outlives_its_row_record_what_ran_where(tmp_path, python):
    """child_coverage: starting again on another clone (a switched clone) keeps recording, its module
    level included; a thread started in one row that runs clone code between rows does not put that
    code in the next row's record (blame), and the cumulative table still has it. Under this Python and
    a 3.12 where there is one (profile hooks, sys.monitoring)."""
    c1, c2 = tmp_path / "c1", tmp_path / "c2"
    c1.mkdir()
    c2.mkdir()
    (c1 / "first.py").write_text("def at_import():\n    return 1\n\n\nat_import()\n")
    (c2 / "second.py").write_text("def at_import():\n    return 1\n\n\ndef tick():\n    return 2\n\n\n"
                                  "def work():\n    return 3\n\n\nat_import()\n")
    script = SWITCH_AND_THREADS.format(child=str(oracles_dir()), c1=str(c1), c2=str(c2))
    out = subprocess.run([python, "-c", script], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    import json
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["second"] == {"at_import": True, "tick": False, "work": False}
    assert got["row"] == {"second.py": ["work"]}
    assert got["tick"] is True
