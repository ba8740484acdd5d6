"""The eggroll driver served by the parity child (esverify/references/eggroll/child/driver.py run by path under
esverify.oracle.child_process.Child): the hello, the interface check of the stand-in clone, the
`eggroll-main` and `eggroll-update` ops answering JSON with the bits the in-process driver gives, a
reference failure answered as an error row naming its line, and the child's noise hook left as the
child server keeps it between rows."""
from __future__ import annotations

import json
import sys

import numpy as np
import pytest

from esverify.oracle.child_process import Child
import child_files
from esverify.paths import child_dir
from standins.mutants import STANDINS

driver = child_files.driver("eggroll")

CLONE = STANDINS / "eggroll-vllm"
ARGS = dict(population_size=4, num_iterations=2, lora_r=2, steps_per_adapter=2, sigma=0.01, learning_rate=0.05,
            base_seed=3, save_freq=-1)


def _npz_equal(a, b) -> bool:
    with np.load(a) as x, np.load(b) as y:
        return sorted(x.files) == sorted(y.files) and all(np.array_equal(x[k], y[k]) for k in x.files)


@pytest.mark.slow   # 4 s (--durations, 2026-12-03): out of the fast tier
def test_the_child_serves_eggroll_main_and_update(tmp_path):
    child = Child(sys.executable, child_dir("eggroll") / "driver.py", CLONE, tmp_path / "child.log",
                  workdir=tmp_path, target="eggroll")
    try:
        hello = child.start(120)
        assert hello["hello"] == "eggroll"
        case = {"op": "eggroll-main", "out": str(tmp_path / "child"), "dtype": "bf16", "engines": 2,
                "noise": "contract", "seed": "0x5eed", "init_seed": 11, "init_std": 0.5, "args": ARGS}
        reply = child.request(case, 300)
        assert reply["status"] == "ok", reply.get("error")
        json.dumps(reply)
        native = child.request({**case, "noise": "native", "out": str(tmp_path / "child-native")}, 300)
        assert native["status"] == "ok", native.get("error")
        update = child.request({"op": "eggroll-update", "out": str(tmp_path / "child-update"), "dtype": "f32",
                                "fill": 0.0, "noise": "native", "es_step": 5, "fitnesses": [0.5, -1.25, 2.0, 0.75],
                                "args": {"population_size": 4, "sigma": 0.01, "base_seed": 3, "lora_r": 2,
                                         "steps_per_adapter": 4, "learning_rate": 0.05}}, 120)
        assert update["status"] == "ok" and update["returned"] == [True]
        broken = child.request({**case, "out": str(tmp_path / "child-broken"), "vllm_distributed": False}, 120)
        assert broken["status"] == "error"
        assert broken["error"]["kind"] == "ModuleNotFoundError"
        assert broken["error"]["function"] == "init_inter_engine_group" and broken["error"]["line"] > 0
    finally:
        child.close()
    # the same bits in-process (contract noise with the same contract seed; native noise)
    here = driver.run({k: v for k, v in case.items() if k != "op"} | {"out": str(tmp_path / "here")}, CLONE)
    assert _npz_equal(reply["results"], here["results"])
    assert [s["update"]["fitnesses"] for s in reply["tape"]["steps"]] == [s["update"]["fitnesses"]
                                                                          for s in here["tape"]["steps"]]
    assert reply["tape"]["draws"]["unexpected_count"] == 0
    here_native = driver.run({k: v for k, v in case.items() if k != "op"} | {"noise": "native",
                                                                           "out": str(tmp_path / "here-n")}, CLONE)
    assert _npz_equal(native["results"], here_native["results"])
    assert not _npz_equal(native["results"], reply["results"])     # contract and native noise differ
