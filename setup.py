"""Build hook: ship the committed goldens and oracle drivers inside the wheel.

In a checkout they live at the top level (`goldens/`, `oracle_child/`) where
reviewers and CI see them; a wheel needs them as package data so that a
non-editable install can run `esverify goldens check` and `esverify parity`.
The oracle drivers are copied as plain files (no `__init__.py`): the package
executes them by path in a child process and never imports them.
"""
import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent
SHIPPED = {"goldens": ("esverify", "goldens", "data"), "oracle_child": ("esverify", "oracle_child")}


class BuildWithData(build_py):
    def run(self):
        super().run()
        for source, target in SHIPPED.items():
            dest = Path(self.build_lib).joinpath(*target)
            dest.mkdir(parents=True, exist_ok=True)
            for path in sorted((ROOT / source).glob("*")):
                if path.is_file() and path.suffix in {".json", ".py", ".md"}:
                    shutil.copy2(path, dest / path.name)


setup(cmdclass={"build_py": BuildWithData})
