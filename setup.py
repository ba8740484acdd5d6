"""Build hook: ship the committed goldens inside the wheel.

In a checkout they live at the top level (`goldens/`) where reviewers and CI
see them; a wheel needs them as package data (`esverify/goldens/data/`) so
that a non-editable install can run `esverify goldens check`. The child's
files need no hook: the runtime `oracles/` is a package and each reference's
`child/` folder is package data (pyproject.toml).
"""
import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent
SHIPPED = {"goldens": ("esverify", "goldens", "data")}


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
