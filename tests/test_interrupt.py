"""SIGINT, SIGTERM and SIGHUP mid-run: the children are stopped, the partial report is written with
the verdict `interrupted` (rows done kept, the rest `not-run`), exit 128 + the signal."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from standins.mutants import make_variant

ROOT = Path(__file__).resolve().parents[1]
WORKER = "es_at_scale/utils/worker_extension.py"


def _hanging_clone(tmp_path: Path, flag: Path) -> Path:
    """es-at-scale stand-in whose update hangs after writing its pid to `flag` (perturb, restore run)."""
    hang = (f"        open({str(flag)!r}, 'w').write(str(__import__('os').getpid()))\n"
            "        __import__('time').sleep(3600)\n")
    return make_variant(tmp_path, "es-at-scale", [(WORKER, "    def update_weights_from_seeds(self, seeds, coeffs, "
                                                           "alpha, population_size):\n",
                                                   "    def update_weights_from_seeds(self, seeds, coeffs, "
                                                   "alpha, population_size):\n" + hang)])


def _esverify(*args, cwd, tmpdir: Path) -> subprocess.Popen:
    tmpdir.mkdir(exist_ok=True)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
               TMPDIR=str(tmpdir))
    return subprocess.Popen([sys.executable, "-m", "esverify", *map(str, args)], cwd=cwd, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _wait_for(path: Path, proc: subprocess.Popen, seconds: float = 180.0) -> None:
    deadline = time.monotonic() + seconds
    while not (path.is_file() and path.read_text()):
        if proc.poll() is not None:
            raise AssertionError(f"the run ended early ({proc.returncode}): {proc.communicate()}")
        if time.monotonic() > deadline:
            proc.kill()
            raise AssertionError("the hanging case was never reached")
        time.sleep(0.1)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:   # a zombie awaiting its parent is not alive
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.parametrize("signum, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143), (signal.SIGHUP, 129)])
@pytest.mark.slow   # 7 s (--durations, 2026-12-03): out of the fast tier
def test_signal_mid_run_writes_the_partial_report(tmp_path, signum, code):
    flag = tmp_path / "hanging.pid"
    clone = _hanging_clone(tmp_path, flag)
    out = tmp_path / "out"
    proc = _esverify("parity", "--ref", clone, "--target", "es-at-scale", "--devices", "cpu", "--small",
                     "--dtypes", "f32", "--schemes", "iid", "--iterations", "1", "--quiet", "--timeout", "600",
                     "--out", out, "--junit", tmp_path / "junit.xml", cwd=tmp_path, tmpdir=tmp_path / "tmp")
    _wait_for(flag, proc)
    child = int(flag.read_text())
    proc.send_signal(signum)
    try:
        stdout, stderr = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise
    assert proc.returncode == code, stdout + stderr
    doc = json.loads((out / "parity.json").read_text())
    assert doc["verdict"] == "interrupted" and doc["exit_code"] == code
    assert list(doc)[:4] == ["verdict", "exit_code", "reason", "counts"]   # the reason in words
    assert doc["reason"].startswith(f"interrupted by {signal.Signals(signum).name}: ")
    rows = {r["op"]: r["status"] for r in doc["sections"]["cases"] if not r["case"].endswith("/layers")}
    assert rows["perturb"] == "pass" and rows["restore"] == "pass"
    assert rows["update"] == "not-run" and rows["loop"] == "not-run"
    # the case in flight (the hanging update) was stopped, not broken: not-run, never an error row
    # saying "the child process died"
    statuses = {r["case"]: r["status"] for r in doc["sections"]["cases"]}
    assert "error" not in statuses.values(), statuses
    assert {s for r, s in zip(doc["sections"]["cases"], statuses.values()) if r["op"] == "update"} == {"not-run"}
    assert signal.Signals(signum).name in doc["metadata"]["interrupted_by"]
    import xml.etree.ElementTree as ET
    suite = ET.parse(tmp_path / "junit.xml").getroot()          # a CI panel shows the interrupted run red
    verdict = suite.find("testcase[@name='verdict']/failure")
    assert verdict is not None and signal.Signals(signum).name in verdict.get("message")
    assert int(suite.get("failures")) >= 1
    assert "INTERRUPTED" in stdout and f"exit {code}" in stdout
    assert not _alive(child), "the child outlived the interrupted run"
    assert not (out / ".esverify-run.lock").exists()
    assert list((tmp_path / "tmp").iterdir()) == [], "the run's temporary folder was left behind"


INTERRUPT_IN_IMPORT = """
import os, signal, sys
from importlib.abc import MetaPathFinder

class SignalInTorch(MetaPathFinder):   # SIGINT while torch is half-imported (Runner._our_side imports it)
    def find_spec(self, name, path=None, target=None):
        if name == "torch.nn":
            sys.meta_path.remove(self)
            os.kill(os.getpid(), signal.SIGINT)
        return None

sys.meta_path.insert(0, SignalInTorch())
from esverify.cli import main
main(["parity", "--ref", sys.argv[1], "--target", "es-awd", "--devices", "cpu", "--dtypes", "f32",
      "--small", "--quiet", "--out", sys.argv[2]], prog_name="esverify")
"""


def test_a_signal_while_our_side_imports_torch_writes_the_interrupted_report(tmp_path):
    """A run imports torch after its setup (beside the warm start server's imports): a Ctrl-C then takes
    effect once the imports are done (a half-imported torch would break the report), and the run
    ends as any interrupted one: exit 130, a report whose verdict is `interrupted`, every row not-run."""
    out = tmp_path / "out"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    done = subprocess.run([sys.executable, "-c", INTERRUPT_IN_IMPORT, str(ROOT / "tests" / "standins" / "es-awd"),
                           str(out)], capture_output=True, text=True, cwd=tmp_path, env=env, timeout=300)
    assert done.returncode == 130, done.stdout + done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    report = json.loads((out / "parity.json").read_text())
    assert report["metadata"]["verdict"] == "interrupted"
    statuses = {row["status"] for row in report["sections"]["cases"]}
    assert statuses == {"not-run"}, statuses
