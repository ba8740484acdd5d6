"""What a child gets beside the shared runtime (esverify.oracle.child_process.child_files; CONTRIBUTING.md §8)."""
from __future__ import annotations

import pytest

from esverify.oracle.child_process import child_files
from esverify.paths import child_dir, oracles_dir


def _names(files) -> list:
    return sorted(p.name for p in files)


def _runtime() -> list:
    return sorted(p.name for p in oracles_dir().glob("*.py") if p.name != "__init__.py")


def test_a_child_folder_brings_its_driver_its_modules_and_its_interface_data():
    names = _names(child_files(oracles_dir(), child_dir("eggroll") / "driver.py"))
    assert names == sorted(_runtime() + ["driver.py", "eggroll_stubs.py", "interfaces.json"])


def test_a_driver_beside_its_packages_modules_comes_alone(tmp_path):
    """A plug-in's driver in its package folder: its adapter.py and a profile.py (which would shadow the
    standard library's `profile` first on the child's path) are not copied."""
    for name in ("__init__.py", "adapter.py", "profile.py", "driver_toy.py", "interfaces.json"):
        (tmp_path / name).write_text("x = 1\n" if name.endswith(".py") else "{}")
    assert _names(child_files(oracles_dir(), tmp_path / "driver_toy.py")) == sorted(_runtime() + ["driver_toy.py"])


def test_a_child_folder_file_named_as_a_runtime_module_is_refused(tmp_path):
    folder = tmp_path / "child"
    folder.mkdir()
    (folder / "driver.py").write_text("x = 1\n")
    (folder / "loop_stubs.py").write_text("x = 1\n")
    with pytest.raises(OSError, match=r"loop_stubs\.py"):
        child_files(oracles_dir(), folder / "driver.py")
