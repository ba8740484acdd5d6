"""Children under a reference's own interpreter. Warm starts under any interpreter (esverify.oracle.warm_start.
WarmStarts, docs/parity.md "Warm starts"): a run keeps one warm start server per distinct child interpreter
path, a bare `--python` or a reference's own (`--python NAME=PATH`), and forks each child from the server of
the interpreter it is launched with. Under Python 3.12 and newer a row's record of the clone's functions
(oracles/child_coverage.py) takes no profile hook."""
from __future__ import annotations

import glob
import json
import os
import shutil
import subprocess
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


def _python_312() -> str | None:
    """An interpreter of Python 3.12 or newer on this machine (a reference's own, say), or None."""
    found = [shutil.which(f"python3.{minor}") for minor in range(12, 16)]
    found += sorted(glob.glob(os.path.expanduser("~/.pyenv/versions/3.1[2-9]*/bin/python")))
    for python in filter(None, found):
        try:
            out = subprocess.run([python, "-c", "import sys; print(sys.version_info >= (3, 12))"],
                                 capture_output=True, text=True, timeout=60)
        except (OSError, subprocess.TimeoutExpired):
            continue
        if out.stdout.strip() == "True":
            return python
    return None


ROWS_SCRIPT = """
import json, sys
sys.path.insert(0, sys.argv[1])
import child_coverage as cc
from pathlib import Path
clone = Path(sys.argv[2])
cc.start(clone)
sys.path.insert(0, str(clone))
import ref
g = ref.gen()
next(g)
hooks, rows = [], []
for calls in ((ref.used, ref.used), (ref.used, lambda: next(g)), ()):
    cc.row_start()
    for call in calls:
        call()
    hooks.append(sys.getprofile() is None)
    rows.append(cc.row_end())
print(json.dumps({"rows": rows, "no_hook": hooks, "how": cc._STATE["how"]}))
"""


def test_a_rows_record_under_python_312_takes_no_profile_hook(tmp_path):
    """The row's record comes from sys.monitoring's events, enabled again for the row: each function the row
    ran once (a generator resumed in it too), none it did not, and no profile hook (through sys.monitoring,
    one cost every call of the row a Python callback: 4 s of es-awd's child in a default run)."""
    from esverify.paths import oracles_dir
    python = _python_312()
    if python is None:
        pytest.skip("no Python 3.12 or newer on this machine")
    clone = tmp_path / "clone"
    clone.mkdir()
    (clone / "ref.py").write_text("def used():\n    return 1\n\n\ndef gen():\n    yield 1\n    yield 2\n\n\n"
                                  "def unused():\n    return 2\n")
    done = subprocess.run([python, "-c", ROWS_SCRIPT, str(oracles_dir()), str(clone)], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    got = json.loads(done.stdout.splitlines()[-1])
    assert got["how"] == "sys.monitoring"
    assert got["rows"] == [{"ref.py": ["used"]}, {"ref.py": ["gen", "used"]}, {}]
    assert got["no_hook"] == [True, True, True]
