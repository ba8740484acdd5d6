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
    assert test == "python -m pytest -q -n auto --dist loadfile"


def test_ci_makes_a_fresh_venv_before_the_readme_commands():
    """CI does what a newcomer does: a fresh `python3 -m venv`, entered, then the README's commands."""
    script = (ROOT / ".ci" / "run").read_text()
    made = script.index("-m venv")
    entered = script.index("/bin/activate")
    assert made < entered < script.index('bash -c "$install_cmd"') < script.index('bash -c "$test_cmd"')
    assert 'base_python=${ESVERIFY_CI_PYTHON:-python3}' in script
    setup = README[README.index("## Set-up on a fresh machine"):README.index("<!-- ci:install -->")]
    assert "python3 -m venv .venv && . .venv/bin/activate" in setup


def test_quick_start_gets_a_newcomer_to_a_parity_report_without_guessing():
    """From nothing to a report: the clones with exact clone + checkout lines at the validated
    commits, the parity command, where the report lands, how to check what Python 3.11 cannot."""
    from esverify.oracle import adapters
    quick = README[README.index("## Quick start"):README.index("## What is where")]
    repos = {"es-at-scale": "https://github.com/VsonicV/es-at-scale", "es-awd": "https://github.com/kschweig/es-awd"}
    for name, url in repos.items():
        commit = adapters.get(name).validated_commit
        assert f"git clone {url} ~/refs/{name}\n" in quick
        assert f"git -C ~/refs/{name} checkout {commit}\n" in quick
    assert "esverify parity --ref ~/refs/es-at-scale --ref ~/refs/es-awd\n" in quick
    assert "parity.html" in quick and "not checked here" in quick and "--python ~/venvs/py312/bin/python" in quick
    for code in ("130", "143", "129", "--overwrite", "--require-all"):
        assert code in quick
    parity_doc = (ROOT / "docs" / "parity.md").read_text()
    for name, url in repos.items():
        assert url in parity_doc and adapters.get(name).validated_commit in parity_doc


def test_timings_name_the_machine_they_were_measured_on():
    setup = README[README.index("## Set-up on a fresh machine"):README.index("## Quick start")]
    assert "Measured on a 2-core, 24 GiB Linux machine" in setup
    assert re.search(r"test\s+suite [^()]*\(\d+ passed, \d+ CUDA tests skipped", setup), setup


def test_artifact_is_spelt_one_way_in_statuses_and_prose():
    """The status is `artifact`; prose, help and docs use the same word (issue 12 item 6)."""
    texts = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), *sorted((ROOT / "esverify").rglob("*.py")),
             *sorted((ROOT / "oracle_child").glob("*.py"))]
    offenders = [str(p.relative_to(ROOT)) for p in texts if "artefact" in p.read_text().lower()]
    assert offenders == []
