"""Warm starts under any interpreter (esverify.oracle.warm_start.WarmStarts, docs/parity.md "Warm starts"): a
run keeps one warm start server per distinct child interpreter path, a bare `--python` or a reference's own
(`--python NAME=PATH`), and forks each child from the server of the interpreter it is launched with."""
from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from esverify.oracle.warm_start import WarmStart, WarmStarts, server_of

STANDINS = Path(__file__).parent / "standins"


def _server(python: str, tmp_path: Path) -> WarmStart:
    return WarmStart(python, {}, {}, tmp_path, tmp_path / "log")


def test_a_child_forks_from_the_server_of_its_own_interpreter_path(tmp_path):
    pool = WarmStarts()
    ours, theirs = _server(sys.executable, tmp_path), _server("/opt/py312/bin/python", tmp_path)
    pool.add(ours, own=False)
    pool.add(theirs, own=True)
    assert server_of(pool, sys.executable) is ours and server_of(pool, "/opt/py312/bin/python") is theirs
    assert server_of(pool, Path("/opt/py312/bin/python")) is theirs        # the path, as a string
    assert server_of(pool, "/opt/py312/bin/python3") is None                # another path: no server
    assert server_of(ours, "/anything") is ours and server_of(None, sys.executable) is None
    assert pool.own() == [theirs] and list(pool) == [ours, theirs] and len(pool) == 2
    pool.drop(theirs)
    assert server_of(pool, "/opt/py312/bin/python") is None and pool.own() == []
    pool.close()                                                            # keep_warm's is not closed
    assert ours.proc is None


@pytest.fixture()
def alias(tmp_path) -> str:
    """Another path of this interpreter: another child interpreter as far as the run can tell."""
    path = tmp_path / "bin" / "python-alias"
    path.parent.mkdir()
    os.symlink(sys.executable, path)
    return str(path)


def _run(tmp_path, label, **options):
    from esverify.oracle import Options, run_parity
    from esverify.oracle import child_process
    from esverify.oracle.warm_kept import not_kept
    servers = []
    make = child_process.warm_start_server

    def recorded(python, *args, **kwargs):
        servers.append(str(python))
        return make(python, *args, **kwargs)
    child_process.warm_start_server = recorded
    try:
        with not_kept():   # the test session's kept server (tests/conftest.py) out of the way
            result = run_parity(Options(
                ref=(str(STANDINS / "es-at-scale"), str(STANDINS / "es-awd")), devices=("cpu",), small=True,
                dtypes=("f32",), schemes=("iid",), iterations=1, loops=False, noises=("contract",),
                case="*/cpu/f32/iid/perturb/N7", out=str(tmp_path / label), quiet=True, **options))
    finally:
        child_process.warm_start_server = make
    ran = result.frame[result.frame["status"] != "skipped"]
    assert set(ran["status"]) == {"pass"} and set(ran["target"]) == {"es-at-scale", "es-awd"}, \
        ran[["case", "status", "detail"]].to_string()
    children = result.metadata["children"]
    return {name: (child["start"], child["executable"]) for name, child in children.items()}, servers


def test_a_bare_python_gets_a_warm_start_server_of_its_own(tmp_path, alias):
    """`--python PATH` for every reference: before, every child started fresh; now one server under PATH."""
    started, servers = _run(tmp_path, "bare", python=alias, python_explicit=True)
    assert servers == [alias]
    assert started == {"es-at-scale": ("warm", alias), "es-awd": ("warm", alias)}


def test_one_server_per_interpreter_with_two_children_or_more(tmp_path, alias):
    """Per-reference interpreters: es-at-scale and es-awd under PATH share its server; a reference alone
    under its interpreter starts fresh (a server would import what its one child imports)."""
    started, servers = _run(tmp_path, "both", pythons={"es-at-scale": alias, "es-awd": alias})
    assert servers == [alias]
    assert started == {"es-at-scale": ("warm", alias), "es-awd": ("warm", alias)}
    started, servers = _run(tmp_path, "split", pythons={"es-awd": alias})
    assert servers == []
    assert started == {"es-at-scale": ("fresh", sys.executable), "es-awd": ("fresh", alias)}
    started, servers = _run(tmp_path, "cold", python=alias, python_explicit=True, warm_start=False)
    assert servers == [] and set(s for s, _ in started.values()) == {"fresh"}
