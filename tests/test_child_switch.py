"""A child's switch to another clone (oracles/child_server.py `switch_clone`, used by the mutant catalogs):
the old clone's modules leave sys.path and sys.modules, the new clone's are loaded and frozen, and the old
modules' cycles are collected once the frozen heap has gained THAW_AFTER objects, not at every switch (a
collection of the whole heap is 0.2 s of CPU; docs/benchmarks.md).

Run in a process of its own: gc.freeze in pytest's own process would keep every later test's garbage.
"""
from __future__ import annotations

import json
import subprocess
import sys

from esverify.paths import oracles_dir

SCRIPT = r"""
import gc, importlib, json, sys, weakref
from pathlib import Path
sys.path.insert(0, sys.argv[1])
import child_server

root = Path(sys.argv[2])
clones = []
for k in range(4):
    clone = root / f"clone{k}"
    clone.mkdir()
    # a module whose globals hold an object in a cycle: refcounting alone never frees it
    (clone / "refmod.py").write_text(f"class Marker:\n    pass\nMARK = Marker()\nMARK.cycle = MARK\nWHICH = {k}\n")
    clones.append(clone.resolve())

def load(clone):
    importlib.invalidate_caches()
    return {"refmod": importlib.import_module("refmod")}

sys.path.insert(0, str(clones[0]))
load(clones[0])
child_server.freeze_heap()
marks = []

def switch(old, new, thaw_after):
    child_server.THAW_AFTER = thaw_after
    marks.append(weakref.ref(sys.modules["refmod"].MARK))
    _, mods = child_server.switch_clone(old, new, load)
    gc.collect()   # what a command's freeze_heap does: young objects only; the frozen heap is left alone
    return {"which": mods["refmod"].WHICH, "alive": [m() is not None for m in marks],
            "old_on_path": str(old) in sys.path, "frozen": gc.get_freeze_count()}

out = [switch(clones[0], clones[1], 10**9),   # the bound not reached: the old clone's cycle stays frozen
       switch(clones[1], clones[2], 10**9),
       switch(clones[2], clones[3], 0)]      # reached: thawed, collected, frozen again
print(json.dumps(out))
"""


def test_a_switch_frees_the_old_clones_modules_only_once_the_frozen_heap_has_grown_past_its_bound(tmp_path):
    done = subprocess.run([sys.executable, "-c", SCRIPT, str(oracles_dir()), str(tmp_path)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    first, second, third = json.loads(done.stdout.strip().splitlines()[-1])
    assert [first["which"], second["which"], third["which"]] == [1, 2, 3]     # each switch serves its new clone
    assert not any(s["old_on_path"] for s in (first, second, third))
    assert first["alive"] == [True] and second["alive"] == [True, True]   # below the bound: no whole-heap collection
    assert third["alive"] == [False, False, False]   # past it: every clone switched away from is collected
    assert all(s["frozen"] > 0 for s in (first, second, third))   # frozen again after every switch
