"""esverify's torch paths in a forked child (esverify/forksafe.py).

After the parent ran a parallel torch op, a forked child's first parallel torch op deadlocks in
torch's thread pool. The control shows the hazard is real here (torch alone, two intra-op threads:
the child is still stuck after 10 s; the same op completes in the handled child, which the
test below gives 120 s); with esverify's torch paths imported, the at-fork handler runs
the child single-threaded and the child's torch-cpu noise and f16 trainer step complete with the
parent's bits. Every child is bounded by a timeout, so a regression fails the test instead of
hanging CI.
"""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

PARENT_OP = """
import os, sys, time
import torch
torch.set_num_threads(2)                          # a pool of two, even on a one-core runner
x = torch.randn(4_000_000)
assert float((x * 2 + 1).sum()) == float((x * 2 + 1).sum())   # a parallel op: the pool is started
"""

WAIT = """
pid = os.fork()
if pid == 0:
    try:
        code = child()
    except BaseException as exc:
        print("child raised", repr(exc), flush=True)
        code = 3
    os._exit(code)
deadline = time.monotonic() + LIMIT
while time.monotonic() < deadline:
    done, status = os.waitpid(pid, os.WNOHANG)
    if done:
        sys.exit(os.waitstatus_to_exitcode(status))
    time.sleep(0.1)
os.kill(pid, 9)
os.waitpid(pid, 0)
print("child hung", flush=True)
sys.exit(9)
"""


def _run(body: str, limit: float) -> subprocess.CompletedProcess:
    script = PARENT_OP + textwrap.dedent(body) + f"\nLIMIT = {limit}\n" + WAIT
    return subprocess.run([sys.executable, "-c", script], env={**os.environ, "PYTHONPATH": str(ROOT)},
                          capture_output=True, text=True, timeout=limit + 120)


@pytest.mark.slow   # 12 s (the 10 s wait; 20 s held a test worker idle): out of the fast tier
def test_without_the_handler_a_forked_child_deadlocks():
    proc = _run("""
        def child():
            y = torch.randn(4_000_000)
            (y * 2 + 1).sum()
            return 0
        """, limit=10)
    assert proc.returncode == 9 and "child hung" in proc.stdout, (proc.stdout, proc.stderr)


@pytest.mark.slow   # 3 s (--durations, 2026-12-03): out of the fast tier
def test_esverify_torch_paths_complete_in_a_forked_child():
    proc = _run("""
        import numpy as np
        from esverify import rng
        from esverify.es import Config, Trainer

        def f16_step():
            torch.manual_seed(1)
            w = torch.randn(300_000).to(torch.float16)
            t = Trainer([w], Config(population=4, sigma=0.01))
            for m in range(4):
                t.perturb(m)
                t.restore(m)
            t.update([0.1, 0.4, -0.2, 0.3])
            return w.view(torch.int16).numpy().copy()

        noise = rng.gaussian(7, 2_000_000, 0, "poly32", backend="torch").view(np.uint32).copy()
        step = f16_step()

        def child():
            again = rng.gaussian(7, 2_000_000, 0, "poly32", backend="torch").view(np.uint32)
            assert torch.get_num_threads() == 1
            y = torch.randn(4_000_000)
            (y * 2 + 1).sum()
            return 0 if np.array_equal(again, noise) and np.array_equal(f16_step(), step) else 4
        """, limit=120)
    assert proc.returncode == 0, (proc.stdout, proc.stderr)
