"""The default number of replay workers is chosen from the work (docs/replay.md §5)."""
from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from replay_runs import awd_run  # noqa: E402

from esverify.replay import replay  # noqa: E402
from esverify.replay.units import WORK_PER_WORKER, default_workers, plan_units  # noqa: E402


def _iterations(population: int, count: int):
    return tuple((list(range(population)), [1.0] * population, ()) for _ in range(count))


def test_a_model_smaller_than_one_unit_of_work_gets_no_pool():
    units = plan_units([("w", (68,), torch.float32)], "contract", 16)   # 5 units, 68 elements
    assert default_workers(units, _iterations(30, 500), cores=64) == 1


def test_workers_grow_with_the_work_up_to_the_cores_and_the_units():
    iterations = _iterations(30, 2)                                     # 60 seeds
    per_worker = WORK_PER_WORKER // 60 + 1                              # elements of one worker's work
    units = plan_units([("w", (10 * per_worker,), torch.float32)], "contract", per_worker)
    assert len(units) == 10
    assert default_workers(units, iterations, cores=64) == 10          # work // WORK_PER_WORKER = 10
    assert default_workers(units, iterations, cores=2) == 2
    one = plan_units([("w", (10 * per_worker,), torch.float32)], "contract", 10 * per_worker)
    assert default_workers(one, iterations, cores=64) == 1              # one unit: nothing to share
    static = plan_units([("w", (10 * per_worker,), torch.int64)], "contract", per_worker)
    assert default_workers(static, iterations, cores=64) == 1           # static units are not replayed


def test_a_small_replay_runs_in_this_process(tmp_path):
    run = awd_run(tmp_path, iterations=2)
    report, code = replay(run["base"], run["log"], run["final"], state_dir=tmp_path / "state")
    assert code == 0
    assert report["runner"] == "pool of 1"
