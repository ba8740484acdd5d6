"""Hostile references against `esverify parity`.

Each test builds, at test time, a copy of the es-at-scale stand-in with one
hostile edit (like tests/standins/mutants.py does) in `perturb_self_weights`
(the first case run) or at import, and runs a small matrix (--small, one
dtype, one scheme, a --case pattern, short timeouts). Each asserts the
right outcome: the row status and what the detail names, the exit code,
the run going on with the next case, nothing left running.
"""
from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from xml.etree import ElementTree as ET

import pandas as pd
import pytest
from click.testing import CliRunner

from esverify.cli import main
from esverify.paths import PACKAGE_DIR
from standins.mutants import WORKER, make_variant

QUICK = ("--devices", "cpu", "--small", "--dtypes", "f32", "--schemes", "iid", "--iterations", "1", "--quiet",
         "--target", "es-at-scale")
#: the hostile perturb and the update after it, on both parameter sets (the standard one and `layers`): 4 rows.
#: Each test checks what the parent makes of the hostile perturb and that the next row runs and passes;
#: the update's other populations (the N sweep, the paper's N30, the reward populations: 16 more rows)
#: would only repeat that row, and every row and child restart costs seconds
PERTURB_AND_UPDATE = ("--case", "*/f32/iid/[pu]*/N7*")
#: the same two ops on the standard parameter set alone (2 rows), for the tests whose hostile perturb kills the
#: child: each killed row costs a kill and a restart, and the `layers` set's would repeat what the assertions
#: read of the standard set's (a restart after every killed row, the second too, is the closed reply channel's
#: test's claim, on both sets, and tests/test_parity_bad_input.py's hang test's)
KILLED_PERTURB_AND_UPDATE = ("--case", "*/f32/iid/[pu]*/N7")
_IN_PERTURB = "        started = time.time()\n"
_AT_IMPORT = "import torch\n"
_REPLY_FD = "int(__import__('sys').argv[__import__('sys').argv.index('--reply-fd') + 1])"


def hostile(tmp_path: Path, code: str, at: str = "perturb") -> Path:
    """The es-at-scale stand-in with `code` (lines of Python) run first thing in perturb_self_weights
    (at="perturb") or right after `import torch` (at="import")."""
    anchor, indent = (_IN_PERTURB, "        ") if at == "perturb" else (_AT_IMPORT, "")
    lines = "".join(indent + line + "\n" for line in code.strip("\n").splitlines())
    return make_variant(tmp_path, "es-at-scale", [(WORKER, anchor, anchor + lines)])


def run(tmp_path: Path, clone: Path, *args):
    """(exit code, console output, cases frame or None, out folder, wall seconds)."""
    out = tmp_path / "out"
    started = time.monotonic()
    result = CliRunner().invoke(main, ["parity", "--ref", str(clone), *QUICK, *args, "--out", str(out)])
    wall = time.monotonic() - started
    frame = None
    if (out / "parity-cases.csv").is_file():
        frame = pd.read_csv(out / "parity-cases.csv", keep_default_na=False)
    return result.exit_code, result.output, frame, out, wall


@pytest.fixture
def fresh_children():
    """A test whose claim is about the child's process (its death, a kill and restart, what it leaves running,
    its limits and environment) starts its children as a user's single-reference run does: fresh interpreters,
    not forks of the test session's kept server (tests/conftest.py `_warm_children`). A test whose claim is
    about what the parent makes of the child's words (a bad hello or reply, its output, its error text) reads
    them from a forked child, which says them as a fresh one would (tests/test_warm_start.py), and saves the
    interpreter's start (torch, numpy and numba imported: 2-3 s of CPU) on each start and restart."""
    from esverify.oracle.warm_kept import not_kept
    with not_kept():
        yield


def _base(frame):
    """The rows on the default parameter set (a /layers row per op of --small included)."""
    return frame[~frame["case"].str.endswith("/layers")]


def detail(frame, op) -> str:
    rows = _base(frame)[_base(frame)["op"] == op]
    assert len(rows) == 1, rows
    return rows["detail"].iloc[0]


def status(frame, op) -> str:
    rows = _base(frame)[_base(frame)["op"] == op]
    assert len(rows) == 1, rows
    return rows["status"].iloc[0]


def gone(pid: int) -> bool:
    """True when `pid` no longer runs (absent, or a zombie: dead, waiting to be reaped)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except FileNotFoundError:
        return True


def wait_gone(pid: int, seconds: float = 5.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if gone(pid):
            return True
        time.sleep(0.05)
    return gone(pid)


def kill_if_alive(pid: int):
    try:
        os.kill(pid, 9)
    except (ProcessLookupError, PermissionError):
        pass


# ------------------------------------------------------------------ item 1: every wait has a deadline

@pytest.mark.slow   # 13 s (--durations, 2026-12-03): out of the fast tier
@pytest.mark.usefixtures("fresh_children")
def test_reply_channel_closed_in_an_op_is_an_error_row_not_a_hang(tmp_path):
    clone = hostile(tmp_path, f"__import__('os').close({_REPLY_FD})\ntime.sleep(3600)")
    # both parameter sets here (the others take one): two killed perturb rows, each followed by an update
    # that passes, so the child is restarted after every kill, not only the first
    code, output, frame, _, _ = run(tmp_path, clone, *PERTURB_AND_UPDATE, "--timeout", "30")
    assert code == 1
    assert status(frame, "perturb") == "error"
    assert "closed its reply channel" in detail(frame, "perturb")
    assert "process group was killed" in detail(frame, "perturb")
    assert list(frame.loc[frame["op"] == "perturb", "status"]) == ["error", "error"]
    assert list(frame.loc[frame["op"] == "update", "status"]) == ["pass", "pass"]


@pytest.mark.slow   # 4 s (--durations, 2026-12-03): out of the fast tier
@pytest.mark.usefixtures("fresh_children")
def test_reply_channel_closed_at_import_is_a_setup_error_with_a_report(tmp_path):
    clone = hostile(tmp_path, f"__import__('os').close({_REPLY_FD})\n__import__('time').sleep(3600)", at="import")
    code, output, frame, out, _ = run(tmp_path, clone, "--case", "*/f32/iid/perturb*", "--timeout", "5")
    assert code == 2
    assert "closed its reply channel while starting the child" in output
    assert set(frame["status"]) == {"error"} and (out / "parity.md").is_file()


# ------------------------------------------------------------------ item 2: protocol violations

@pytest.mark.parametrize("line, words", [(b"not json at all", "not JSON"), (b"{}", "the hello names None"),
                                         (b"[1, 2]", "not an object")])
@pytest.mark.slow   # 2 s (--durations, 2026-12-03): out of the fast tier
def test_a_bad_hello_is_a_setup_error_naming_the_violation(tmp_path, line, words):
    payload = repr(line + b"\n")
    clone = hostile(tmp_path, f"__import__('os').write({_REPLY_FD}, {payload})", at="import")
    code, output, frame, out, _ = run(tmp_path, clone, "--case", "*/f32/iid/perturb*", "--timeout", "20")
    assert code == 2, output
    assert "protocol violation by the child" in output and words in output
    assert set(frame["status"]) == {"error"} and (out / "parity.json").is_file()


@pytest.mark.parametrize("line, words", [
    (b"garbage", "not JSON"),
    (b"{}", "the reply's id is None, expected 1"),
    (b'{"id": 1, "status": "ok", "results": "/etc/passwd"}', "outside the case folder"),
    (b'{"id": 1, "status": "maybe"}', "status is 'maybe'"),
    (b'{"id": 1, "status": "error", "error": "boom"}', "without an 'error' object"),
])
@pytest.mark.slow   # 9 s (--durations, 2026-12-03): out of the fast tier
def test_a_bad_reply_in_an_op_is_an_error_row_naming_the_violation(tmp_path, line, words):
    payload = repr(line + b"\n")
    clone = hostile(tmp_path, f"__import__('os').write({_REPLY_FD}, {payload})")
    code, output, frame, _, _ = run(tmp_path, clone, *KILLED_PERTURB_AND_UPDATE, "--timeout", "20")
    assert code == 1
    assert status(frame, "perturb") == "error"
    assert "protocol violation by the child" in detail(frame, "perturb") and words in detail(frame, "perturb")
    assert "the runner failed" not in detail(frame, "perturb")
    assert set(frame.loc[frame["op"] == "update", "status"]) == {"pass"}


# ------------------------------------------------------------------ item 3: orphans and exit status

@pytest.mark.slow   # 9 s (--durations, 2026-12-03): out of the fast tier
@pytest.mark.usefixtures("fresh_children")
def test_fork_then_die_reports_the_real_exit_status_not_a_timeout(tmp_path):
    pidfile = tmp_path / "forked.pid"
    clone = hostile(tmp_path, f"""
import os
pid = os.fork()
if pid == 0:
    time.sleep(3600)
    os._exit(0)
open({str(pidfile)!r}, 'w').write(str(pid))
os._exit(3)""")
    try:
        code, output, frame, _, wall = run(tmp_path, clone, *KILLED_PERTURB_AND_UPDATE, "--timeout", "30")
        d = detail(frame, "perturb")
        assert status(frame, "perturb") == "error"
        assert "died" in d and "exit status 3" in d and "timeout" not in d, d
        assert set(frame.loc[frame["op"] == "update", "status"]) == {"pass"}
        assert wait_gone(int(pidfile.read_text()))
    finally:
        if pidfile.is_file():
            kill_if_alive(int(pidfile.read_text()))


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="child subreapers are a Linux feature")
@pytest.mark.slow   # 5 s (--durations, 2026-12-03): out of the fast tier
@pytest.mark.usefixtures("fresh_children")
def test_a_setsid_escape_does_not_outlive_a_clean_run(tmp_path):
    pidfile = tmp_path / "escaped.pid"
    clone = hostile(tmp_path, f"""
import subprocess, sys
if not __import__('os').path.exists({str(pidfile)!r}):
    escapee = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(3600)'],
                               start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    open({str(pidfile)!r}, 'w').write(str(escapee.pid))""")
    try:
        code, output, frame, out, _ = run(tmp_path, clone, *PERTURB_AND_UPDATE, "--timeout", "30")
        assert code == 0 and set(frame["status"]) == {"pass"}, output
        assert wait_gone(int(pidfile.read_text()))
        assert "left 1 process(es) running" in (out / "child-es-at-scale.log").read_text()
    finally:
        if pidfile.is_file():
            kill_if_alive(int(pidfile.read_text()))


# ------------------------------------------------------------------ item 5: unbounded output

@pytest.mark.slow   # 3 s (--durations, 2026-12-03): out of the fast tier
def test_child_output_is_capped_head_and_tail_kept_and_the_cut_marked(tmp_path):
    clone = hostile(tmp_path, """
import sys
sys.stdout.write('FIRST-LINE\\n')
for _ in range(12):
    sys.stdout.write('x' * (1 << 20) + '\\n')
sys.stdout.write('LAST-LINE\\n')
sys.stdout.flush()""")
    code, output, frame, out, _ = run(tmp_path, clone, "--case", "*/f32/iid/perturb*", "--max-output", "1M")
    assert code == 0 and status(frame, "perturb") == "pass"
    log = (out / "child-es-at-scale.log").read_bytes()
    assert len(log) <= (1 << 20) + 300
    assert b"FIRST-LINE" in log[:1 << 19]
    assert b"LAST-LINE" in log[-(1 << 19):]
    assert b"bytes of the child's output cut here" in log
    assert log.count(b"x") < (1 << 20)


# ------------------------------------------------------------------ item 6: the trust boundary

@pytest.mark.slow   # 3 s (--durations, 2026-12-03): out of the fast tier
@pytest.mark.usefixtures("fresh_children")
def test_the_child_gets_a_private_copy_a_fresh_cwd_a_scrubbed_environment(tmp_path, monkeypatch):
    facts = tmp_path / "facts.json"
    probe = PACKAGE_DIR / f"_hostile_probe_{os.getpid()}.py"
    monkeypatch.setenv("ESVERIFY_HOSTILE_SECRET", "s3cr3t")
    clone = hostile(tmp_path, f"""
import json, os, esverify, esverify.rng
pkg = os.path.dirname(os.path.realpath(esverify.__file__))
try:
    open(os.path.join(pkg, {probe.name!r}), 'w').write('TAMPERED = True\\n')
except OSError:
    pass
json.dump({{'cwd': os.getcwd(), 'cwd_entries': os.listdir('.'), 'package': pkg,
           'rng_mode': os.stat(esverify.rng.__file__).st_mode,
           'secret': os.environ.get('ESVERIFY_HOSTILE_SECRET'), 'env': sorted(os.environ),
           'pythonpath': os.environ.get('PYTHONPATH', '')}}, open({str(facts)!r}, 'w'))""", at="import")
    try:
        code, output, frame, out, _ = run(tmp_path, clone, "--case", "*/f32/iid/perturb*")
        assert code == 0, output
        seen = json.loads(facts.read_text())
        assert seen["secret"] is None and "ESVERIFY_HOSTILE_SECRET" not in seen["env"]
        assert seen["cwd_entries"] == []
        assert Path(seen["package"]) != PACKAGE_DIR and PACKAGE_DIR not in Path(seen["package"]).parents
        assert seen["rng_mode"] & 0o222 == 0                      # a read-only copy
        assert str(PACKAGE_DIR.parent) not in seen["pythonpath"].split(os.pathsep)
        assert not probe.exists()                                 # the live package is untouched
        assert not Path(seen["cwd"]).exists()                     # the private folder is removed
    finally:
        probe.unlink(missing_ok=True)


@pytest.mark.slow   # 4 s (--durations, 2026-12-03): out of the fast tier
@pytest.mark.usefixtures("fresh_children")
def test_max_memory_limits_the_child(tmp_path):
    clone = hostile(tmp_path, "np.empty(3 << 30, dtype=np.uint8)")    # 3 GiB, never touched
    code, output, frame, _, _ = run(tmp_path, clone, *PERTURB_AND_UPDATE, "--max-memory", "2G")
    assert status(frame, "perturb") == "error"
    assert "MemoryError" in detail(frame, "perturb") and "--max-memory" in detail(frame, "perturb")
    assert set(frame.loc[frame["op"] == "update", "status"]) == {"pass"}


def test_size_options_refuse_nonsense(tmp_path):
    code, output, frame, _, _ = run(tmp_path, tmp_path, "--max-output", "lots")
    assert code == 2 and "not a size" in output and frame is None


# ------------------------------------------------------------------ item 7: hostile text in the reports

_NASTY = "bad\\x1b[31mred\\x00\\x07\\x0b | forged | row |\\n| x | y |<script>alert(1)</script>"


@pytest.mark.slow   # 5 s (--durations, 2026-12-03): out of the fast tier
def test_a_hostile_error_message_keeps_every_report_valid(tmp_path):
    clone = hostile(tmp_path, f"raise RuntimeError('{_NASTY}')")
    junit = tmp_path / "junit.xml"
    code, output, frame, out, _ = run(tmp_path, clone, *PERTURB_AND_UPDATE, "--junit", str(junit))
    assert code == 1 and status(frame, "perturb") == "error"
    ET.parse(junit)                                              # well-formed XML 1.0
    md = (out / "parity.md").read_text()
    cases = md.split("## cases", 1)[1].split("## ", 1)[0]
    rows = [line for line in cases.splitlines() if line.startswith("|")]
    # header, rule, one line per case needing attention (parity.md lists those): no forged row
    listed = int(frame["status"].isin(["fail", "error", "unverifiable", "artifact"]).sum())
    assert listed >= 1 and len(rows) == 2 + listed
    assert "<script>" not in md and "\x1b" not in md and "\x00" not in md
    assert "\x1b" not in output and "\x07" not in output and "\x00" not in output
    assert "RuntimeError" in detail(frame, "perturb")
