"""The determinism switch within a loop row's Seams (oracles/loop_seams.py): torch.use_deterministic_algorithms
there has torch's own effects (the eager kernels' switch, warn_only, the compiler config's `deterministic`)
without importing the compiler stack, which torch's function loads only to copy the switch into its config:
the config gets the switch when it is first imported, whenever that is, and the row's exit puts back the
previous switch the same way. One fresh interpreter (this process may have loaded the compiler already) runs
three rows in turn: one that never loads the compiler, one that imports it mid-row, one where it is loaded."""
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
def loaded():
    return "torch._inductor" in sys.modules
with loop_seams.Seams():                      # a row that never loads the compiler
    torch.use_deterministic_algorithms(True, warn_only=True)
    seen["never"] = {"in_row": state(), "loaded_in_row": loaded()}
seen["never"].update(after=state(), loaded_after=loaded(), own_back=torch.use_deterministic_algorithms.__module__)
with loop_seams.Seams():                      # a row that imports the compiler's config after the call
    torch.use_deterministic_algorithms(True)
    import torch._inductor.config as config
    seen["mid_row"] = {"in_row": state(), "config_in_row": config.deterministic}
seen["mid_row"].update(after=state(), config_after=config.deterministic)
with loop_seams.Seams():                      # a row with the compiler loaded before it
    torch.use_deterministic_algorithms(True)
    seen["loaded"] = {"in_row": state(), "config_in_row": config.deterministic}
seen["loaded"].update(after=state(), config_after=config.deterministic)
torch.use_deterministic_algorithms(True)     # torch's own again
seen["torchs_own"] = config.deterministic
print(json.dumps(seen))
"""


def test_the_switch_without_loading_the_compiler_and_the_config_in_step_when_it_loads():
    env = {k: v for k, v in os.environ.items() if k != "TORCHINDUCTOR_DETERMINISTIC"}
    out = subprocess.run([sys.executable, "-c", PROBE, str(oracles_dir())], capture_output=True, text=True, env=env,
                         timeout=300)
    assert out.returncode == 0, out.stderr
    seen = json.loads(out.stdout.splitlines()[-1])
    assert seen["never"] == {"in_row": [True, True], "loaded_in_row": False, "after": [False, False],
                             "loaded_after": False, "own_back": "torch"}
    # the config imported mid-row takes the row's switch, and the row's exit switches it back off
    assert seen["mid_row"] == {"in_row": [True, False], "config_in_row": True, "after": [False, False],
                               "config_after": False}
    assert seen["loaded"] == {"in_row": [True, False], "config_in_row": True, "after": [False, False],
                              "config_after": False}
    assert seen["torchs_own"] is True
