"""The determinism switch within a loop row's Seams (oracles/loop_seams.py): torch.use_deterministic_algorithms
there has torch's own effects (the eager kernels' switch, warn_only, the compiler config's `deterministic`)
without importing the compiler stack, which torch's function loads only to copy the switch into its config:
the config gets the switch when it is first imported, whenever that is, and the row's exit puts back the
previous switch the same way. Each scenario runs in a fresh interpreter (a test process may have loaded the
compiler already)."""
from __future__ import annotations

import json
import os
import subprocess
import sys

from esverify.paths import oracles_dir

PROBE = r"""
import json, sys
sys.path.insert(0, sys.argv[1])
import torch
import loop_seams
seen = {}
def state():
    return [torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled()]
if sys.argv[2] == "loaded-first":
    import torch._inductor.config
with loop_seams.Seams():
    torch.use_deterministic_algorithms(True, warn_only=sys.argv[3] == "warn")
    seen["in_row"] = state()
    seen["compiler_loaded_in_row"] = "torch._inductor" in sys.modules
    if sys.argv[2] == "imported-in-row":
        import torch._inductor.config as config
        seen["config_in_row"] = config.deterministic
seen["after_row"] = state()
seen["compiler_loaded_after_row"] = "torch._inductor" in sys.modules
seen["restored_function"] = torch.use_deterministic_algorithms is loop_seams._MISSING or \
    torch.use_deterministic_algorithms.__module__ == "torch"
import torch._inductor.config as config
seen["config_at_end"] = config.deterministic
torch.use_deterministic_algorithms(True)   # torch's own again: it keeps the config in step as before
seen["config_after_torchs_own"] = config.deterministic
print(json.dumps(seen))
"""


def _run(scenario: str, warn: str = "") -> dict:
    env = {k: v for k, v in os.environ.items() if k != "TORCHINDUCTOR_DETERMINISTIC"}
    out = subprocess.run([sys.executable, "-c", PROBE, str(oracles_dir()), scenario, warn], capture_output=True,
                         text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.splitlines()[-1])


def test_the_switch_without_loading_the_compiler_and_the_config_in_step_when_it_loads():
    seen = _run("never-in-row", "warn")
    assert seen["in_row"] == [True, True] and seen["compiler_loaded_in_row"] is False
    assert seen["after_row"] == [False, False] and seen["compiler_loaded_after_row"] is False
    assert seen["restored_function"] is True
    assert seen["config_at_end"] is False          # the row's exit switched it back off
    assert seen["config_after_torchs_own"] is True


def test_a_config_imported_during_the_row_gets_the_switch():
    seen = _run("imported-in-row")
    assert seen["config_in_row"] is True and seen["in_row"] == [True, False]
    assert seen["config_at_end"] is False and seen["after_row"] == [False, False]


def test_a_config_already_loaded_is_set_directly():
    seen = _run("loaded-first")
    assert seen["in_row"] == [True, False] and seen["config_at_end"] is False
