"""The eggroll driver's static findings (the clone's source read with ast, nothing imported) are parsed once
per text: a clone whose files change, or another clone, gets its own findings, and a caller that edits what
it got changes nothing a later row gets; whether an import resolves is looked up each time."""
from __future__ import annotations

import shutil
from pathlib import Path

import child_files

driver = child_files.driver("eggroll")
CLONE = Path(__file__).resolve().parent / "standins" / "eggroll-vllm"


def test_static_findings_follow_the_sources_text_and_hand_out_their_own_lists(tmp_path):
    clone = tmp_path / "clone"
    shutil.copytree(CLONE, clone)
    first = driver.static_findings(clone)
    assert [f["module"] for f in first["tasks_unresolved_imports"]] == ["datasets", "egg_img", "gem.utils.math_grader"]
    assert len(first["dev_shm"]) == len(first["skipped_add"]) == 1
    first["three_argument_get_fitness"][0]["params"].append("edited")
    first["dev_shm"].clear()
    again = driver.static_findings(clone)
    assert again == driver.static_findings(CLONE) != first
    assert again["three_argument_get_fitness"][0]["params"] == ["generations", "answer", "pass_at_k"]
    trainer = clone / "es_lora_multinode.py"
    trainer.write_text(trainer.read_text().replace('print(f"ERROR updating', 'log(f"ERROR updating'))
    assert driver.static_findings(clone)["skipped_add"] == []
    (clone / "egg_img.py").write_text("EGG_IMG = CHICK_IMG = None\n")   # the import resolves in the clone now
    assert [f["module"] for f in driver.static_findings(clone)["tasks_unresolved_imports"]] == \
        ["datasets", "gem.utils.math_grader"]
