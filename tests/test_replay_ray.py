"""`esverify replay --ray`: the same work units as Ray tasks on a local Ray instance this test starts and
stops give the same results as the local process pool (docs/replay.md §5)."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))
from replay_runs import awd_run, trainer_run  # noqa: E402

from esverify.replay import replay  # noqa: E402

ray = pytest.importorskip("ray", reason="ray is not installed (it is in the test extra: pip install -e '.[test]')")


@pytest.fixture(scope="module")
def local_ray():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        yield
    finally:
        ray.shutdown()
        from multiprocessing import resource_tracker
        resource_tracker._resource_tracker._stop()   # the pool's tracker, see test_replay.py


def _essence(report):
    return [(t["name"], t["replay"], t["naive"]) for t in report["tensors"]]


@pytest.mark.parametrize("kind", ["awd-native", "trainer-contract"])
@pytest.mark.slow   # 6 s (--durations, 2026-12-03): out of the fast tier
def test_ray_and_pool_give_identical_results(local_ray, tmp_path, kind):
    if kind == "awd-native":
        run = awd_run(tmp_path / "run", dtype=torch.bfloat16, engines=2, iterations=2, decay="l2", lam=0.5)
        sd = torch.load(run["final"], weights_only=True)
    else:
        run = trainer_run(tmp_path / "run", profile="es-awd", iterations=2)
        sd = torch.load(run["final"], weights_only=True)
    sd["w1" if kind == "awd-native" else "c"].view(-1)[5] *= 2   # a difference both must name alike
    torch.save(sd, tmp_path / "tampered.pt")
    pool, pcode = replay(run["base"], run["log"], tmp_path / "tampered.pt", workers=2, shard_elements=40,
                         state_dir=tmp_path / "pool", out=tmp_path / "pool.safetensors")
    on_ray, rcode = replay(run["base"], run["log"], tmp_path / "tampered.pt", ray="auto", shard_elements=40,
                           state_dir=tmp_path / "ray", out=tmp_path / "ray.safetensors")
    assert pcode == rcode == 1 and on_ray["runner"] == "ray auto"
    assert _essence(on_ray) == _essence(pool) and on_ray["mismatches"] == pool["mismatches"] >= 1
    assert (tmp_path / "pool.safetensors").read_bytes() == (tmp_path / "ray.safetensors").read_bytes()


@pytest.mark.slow   # 1 s (--durations, 2026-12-03): out of the fast tier
def test_relative_paths_and_a_remote_error(local_ray, tmp_path, monkeypatch):
    """Relative paths reach Ray tasks absolute; a unit's error on the cluster is one line, exit 2."""
    import os

    from safetensors.torch import save_file

    from esverify.replay import ReplayError
    from esverify.replay import runners
    run = awd_run(tmp_path / "run", iterations=1)
    monkeypatch.chdir(tmp_path / "run")
    report, code = replay("base.safetensors", "log", "final_model_weights.pt", ray="auto", state_dir="s")
    assert code == 0 and report["runner"] == "ray auto"
    expect = tmp_path / "final.safetensors"
    save_file({k: v.contiguous() for k, v in torch.load(run["final"], weights_only=True).items()}, expect)
    real = runners.run_ray

    def cut_then_run(*args):   # after the up-front checks, before any task reads it
        with open(expect, "r+b") as fh:
            fh.truncate(os.path.getsize(expect) // 2)
        return real(*args)
    monkeypatch.setattr(runners, "run_ray", cut_then_run)
    with pytest.raises(ReplayError) as info:
        replay("base.safetensors", "log", expect, ray="auto", state_dir="s2")
    assert str(info.value).startswith(f"{expect}: ") and "\n" not in str(info.value)
    assert "the 0 of 4 units verified so far are kept" in str(info.value)
