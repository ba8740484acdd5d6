"""The README stays true: its Python examples run, and it holds exactly the two
set-up commands that `.ci/run` executes."""
import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()


def test_python_examples_run():
    blocks = re.findall(r"```python\n(.*?)```", README, re.S)
    assert len(blocks) >= 2
    for block in blocks:
        exec(compile(block, "README.md", "exec"), {})


def test_ci_reads_the_two_setup_commands():
    markers = re.findall(r"<!-- ci:(\w+) -->", README)
    assert markers == ["install", "test"]
    script = (ROOT / ".ci" / "run").read_text()
    function = script[script.index("readme_command() {"):script.index("install_cmd=")]
    probe = function + "readme_command install; readme_command test\n"
    out = subprocess.run(["bash", "-c", probe], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    install, test = out.strip().splitlines()
    assert install.startswith("python -m pip install torch==2.13.0 && ") and install.endswith("esverify goldens check")
    assert test == "python -m pytest -q"
