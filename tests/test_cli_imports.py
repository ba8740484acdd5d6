"""Help, --version and usage errors import no heavy module.

Each command line runs in a fresh interpreter (a test process has torch loaded already) and reports
which of the heavy modules it imported; the answer must be none. This is a test of imports, not of
time: benchmarks/bench_cli.py prints the CPU time.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from esverify import registry
from esverify.oracle.adapters import all_adapters

ROOT = Path(__file__).resolve().parents[1]

#: what a parsed-but-not-run command line must not pay for: the numerics stack and every adapter
HEAVY = ("torch", "numba", "pandas", "numpy", "esverify.oracle.adapters.base",
         *(registry.get(n).adapter.partition(":")[0] for n in registry.adapter_names()))

PROBE = """
import json, sys
from esverify.cli import main
try:
    main(sys.argv[1:], prog_name="esverify")
except SystemExit as exc:
    code = exc.code
else:
    code = 0
heavy = json.loads(sys.stdin.read())
print(json.dumps({"code": code, "imported": [m for m in heavy if m in sys.modules]}))
"""

#: (argv, exit code): every help, the version, and usage errors of each command
COMMAND_LINES = [
    (["--version"], 0),
    (["--help"], 0),
    (["parity", "--help"], 0),
    (["parity", "-h"], 0),
    (["replay", "--help"], 0),
    (["goldens", "--help"], 0),
    (["goldens", "check", "--help"], 0),
    (["goldens", "generate", "--help"], 0),
    (["audit", "--help"], 0),
    (["--bogus"], 2),
    (["nosuchcommand"], 2),
    (["parity", "--bogus"], 2),
    (["parity", "--ref", "/nonexistent/es-at-scale"], 2),
    (["parity", "--awd-ref", "/nonexistent/es-awd"], 2),
    (["parity", "--target", "es-at-scal"], 2),
    (["parity", "--mapping", "poly"], 2),
    (["replay"], 2),
    (["replay", "--bogus"], 2),
    (["goldens", "check", "--bogus"], 2),
    (["audit", "--bogus"], 2),
    (["audit", "--tree", "/nonexistent/tree"], 2),
]


def _probe(argv):
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    proc = subprocess.run([sys.executable, "-c", PROBE, *argv], input=json.dumps(HEAVY), capture_output=True,
                          text=True, cwd=ROOT, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1]), proc.stdout


@pytest.mark.parametrize("argv,code", COMMAND_LINES, ids=[" ".join(a) for a, _ in COMMAND_LINES])
def test_command_line_answers_without_heavy_imports(argv, code):
    result, out = _probe(argv)
    assert result["code"] == code, out
    assert result["imported"] == [], f"esverify {' '.join(argv)} imported {result['imported']}"


@pytest.mark.slow   # 3 s (--durations, 2026-12-03): out of the fast tier
def test_probe_sees_heavy_imports():
    # the probe can fail: a command that runs the oracle's setup does import the adapters
    result, _ = _probe(["parity", "--ref", str(ROOT), "--target", "es-awd", "--out", "/nonexistent/x/y"])
    assert "esverify.oracle.adapters.base" in result["imported"]


def test_alias_options_match_the_adapters():
    from esverify.oracle.adapters import alias_options
    expected = {a.name: (a.alias_flag, a.env_var, str(a.default_path)) for a in all_adapters() if a.alias_flag}
    assert alias_options() == expected == {"es-awd": ("--awd-ref", "ESVERIFY_AWD_REF", "refs/es-awd")}


def test_missing_ref_message_is_the_setup_message(tmp_path):
    # the command line answers a missing --ref itself; its words are the oracle setup's
    from esverify.oracle import Options, UsageError, run_parity
    missing = str(tmp_path / "no-clone")
    with pytest.raises(UsageError) as info:
        run_parity(Options(ref=missing, out=str(tmp_path / "out")))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-m", "esverify", "parity", "--ref", missing], capture_output=True,
                          text=True, cwd=ROOT, env=env, timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.strip() == f"esverify parity: error: {info.value}"


SETUP_PROBE = """
import json, sys
from esverify.oracle import Options, UsageError
from esverify.oracle.runner import Runner
seen = {}

def start_warm(self, selected, clones):   # what a run imported when it would launch the server
    seen["imported"] = [m for m in ("torch", "numba", "pandas") if m in sys.modules]
    seen["targets"] = sorted({c.target for c in selected})
    raise UsageError("stopped by the test")
Runner._start_warm = start_warm
try:
    Runner(Options(ref=tuple(sys.argv[3:]), out=sys.argv[1], quiet=True, fuzz=int(sys.argv[2]))).run()
except UsageError as exc:
    seen["error"] = str(exc)
print(json.dumps(seen))
"""


@pytest.mark.parametrize("fuzz", [0, 3])
def test_a_run_launches_the_warm_start_server_before_importing_torch(tmp_path, fuzz):
    """A parity run checks its options, clones and cases and launches the warm start server before it
    imports torch, numba or pandas (Runner._our_side does, while the server imports its own): the two
    imports overlap; with --fuzz too, whose random cases the case model draws. A fresh
    interpreter: a test process has them loaded already."""
    standins = ROOT / "tests" / "standins"
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    proc = subprocess.run([sys.executable, "-c", SETUP_PROBE, str(tmp_path / "out"), str(fuzz),
                           str(standins / "es-at-scale"), str(standins / "es-awd")], capture_output=True, text=True,
                          cwd=ROOT, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    seen = json.loads(proc.stdout.strip().splitlines()[-1])
    assert seen["imported"] == [] and seen["error"] == "stopped by the test"
    targets = {"es-at-scale", "es-awd", "es-paper"}
    assert set(seen["targets"]) == targets if not fuzz else set(seen["targets"]) <= targets and seen["targets"]
