"""The README stays true and stays a front door: it holds exactly the two set-up commands that `.ci/run`
executes, the three commands (gate, parity on the six references, replay) and links; measured figures
live in docs/benchmarks.md, each with its machine and date; the examples the docs mark as runnable run."""
import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
DOCS = {p.name: p.read_text() for p in sorted((ROOT / "docs").glob("*.md"))}


def runnable_blocks() -> dict:
    """{file: [python source]} of every block marked `<!-- runs -->` in README.md and docs/*.md."""
    found = {}
    for name, text in {"README.md": README, **{f"docs/{k}": v for k, v in DOCS.items()}}.items():
        blocks = re.findall(r"<!-- runs -->\n```python\n(.*?)```", text, re.S)
        if blocks:
            found[name] = blocks
    return found


def test_python_examples_run():
    """The first runs of the RNG and the trainer (once in the README, now in their guides) run as written."""
    found = runnable_blocks()
    assert {"docs/rng.md", "docs/trainer.md"} <= set(found)
    for name, blocks in found.items():
        for block in blocks:
            exec(compile(block, name, "exec"), {})


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


#: the public repositories of the references a user clones (docs/references.md); es-paper comes with the
#: es-at-scale clone, skill-sample is a file saved from a web page
REPOS = {"es-at-scale": ("https://github.com/VsonicV/es-at-scale", "es-at-scale"),
         "es-awd": ("https://github.com/kschweig/es-awd", "es-awd"),
         "eggroll": ("https://github.com/AnqiQu/eggroll-vllm", "eggroll-vllm"),
         "hyperscale-es": ("https://github.com/ESHyperscale/HyperscaleES", "HyperscaleES")}
SIX = ("esverify parity --ref ~/refs/es-at-scale --ref ~/refs/es-awd --ref ~/refs/eggroll-vllm --ref ~/refs/skill-sample"
       " --ref ~/refs/HyperscaleES")


def _section(text: str, start: str, end: str) -> str:
    return text[text.index(start):text.index(end, text.index(start))]


def test_quick_start_gets_a_newcomer_to_a_six_reference_parity_report_without_guessing():
    """From nothing to a report on all six references: each registered reference in the table with the
    commit its adapter was validated at, exact clone + checkout lines, the one command, what the child needs
    and how to make a 3.12 child with torch's CPU build, where the report lands, the exit codes."""
    from esverify.oracle import adapters
    quick = _section(README, "## 2. Parity on the six references", "## 3.")
    rows = {line.split("|")[1].strip(): line for line in quick.splitlines() if re.match(r"\| [a-z]", line)}
    assert set(rows) - {"target"} == set(adapters.names()) and len(adapters.names()) == 6
    from esverify.oracle.interpreters import child_needs
    for name in adapters.names():
        commit = adapters.get(name).validated_commit
        assert (f"`{commit}`" if commit else "| - |") in rows[name], rows[name]
        # the modules each child needs, as the run checks them before any row
        needs = rows[name].split("|")[4].split(";")[0].strip()
        assert needs == ", ".join(child_needs(adapters.get(name))), rows[name]
    assert "Python 3.12+" in rows["es-at-scale"] and "safetensors" in rows["eggroll"]
    for name, (url, folder) in REPOS.items():
        commit = adapters.get(name).validated_commit
        assert commit and url in rows[name]
        assert f"git clone {url} ~/refs/{folder}\n" in quick
        assert f"git -C ~/refs/{folder} checkout {commit}\n" in quick
        assert adapters.get(name).default_path == f"refs/{folder}"   # the folder a clone goes to is the default
    assert adapters.get("skill-sample").default_path == "refs/skill-sample" and "~/refs/skill-sample" in quick
    assert SIX + "\n" in quick and SIX + " --python es-at-scale=~/venvs/py312/bin/python\n" in quick
    assert "parity.html" in quick and "not checked here" in quick
    for code in ("130", "143", "129", "--overwrite", "--require-all"):
        assert code in quick
    parity_doc = DOCS["parity.md"]
    for name, (url, folder) in REPOS.items():
        assert url in parity_doc and f"checkout {adapters.get(name).validated_commit}" in parity_doc
    assert SIX in parity_doc and "optionally" not in parity_doc[:2000]


CPU_TORCH = "pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu"


def test_a_reference_environment_takes_torch_from_the_cpu_wheel_index():
    """Pinning a version does not choose torch's build: pip's default index serves the CUDA one (several GB
    of nvidia-* packages). The recipes name the PyTorch CPU wheel index, in words and as the URL, and the
    set-up says what the pinned install line really does."""
    quick = _section(README, "## 2. Parity on the six references", "## 3.")
    def words(text):
        return " ".join(text.split())
    assert f"~/venvs/py312/bin/python -m {CPU_TORCH}\n" in quick and "PyTorch CPU wheel index" in words(quick)
    setup = _section(README, "## Set-up on a fresh machine", "<!-- ci:install -->")
    assert f"python -m {CPU_TORCH}" in setup and "PyTorch CPU wheel index" in words(setup)
    assert "does not choose the build" in words(setup) and "CUDA build" in words(setup)
    assert "an unpinned torch pulls" not in README   # the old claim that the pin avoids the CUDA build
    assert f"~/venvs/py312/bin/python -m {CPU_TORCH}" in DOCS["parity.md"]


def test_the_readme_is_a_front_door():
    """At most about 150 lines; the three commands; no measured figure (they are in docs/benchmarks.md)."""
    assert len(README.splitlines()) <= 155
    headings = re.findall(r"^## (.*)$", README, re.M)
    assert headings[:4] == ["Set-up on a fresh machine", "1. The goldens gate", "2. Parity on the six references",
                            "3. Replay a checkpoint from its run log"], headings
    for command in ("esverify goldens check\n", "esverify goldens check --against origin/main",
                    "esverify replay --base base.safetensors --log run/log --expect"):
        assert command in README
    timing = re.compile(r"\b\d+(\.\d+)? ?(s|min|ms)\b(?! ?\|)|load average|\b\d+ min \d+ s\b")
    assert [m.group(0) for m in timing.finditer(README)] == []
    assert "docs/benchmarks.md" in README


def test_measured_figures_name_their_machine_and_date():
    """docs/benchmarks.md holds the figures that left the README; each section names its dates, and the
    page names the machine once for all."""
    bench = DOCS["benchmarks.md"]
    assert "2-core, 24 GiB Linux" in bench
    sections = re.split(r"^## ", bench, flags=re.M)[1:]
    assert {s.split("\n")[0] for s in sections} >= {"Set-up and the test suite", "The goldens gate (`esverify goldens check`)",
                                                     "Parity (`esverify parity`)"}
    for section in sections:
        dated = re.findall(r"\b2026-\d\d-\d\d\b|date[s]? (and commit )?not recorded|before the|earlier", section)
        assert dated, section[:200]
    suite = sections[0]
    assert re.search(r"test command [^()]*\(\d+ passed, \d+ CUDA tests\s+skipped", suite), suite


def test_no_tracker_citations_in_the_readme_or_the_docs():
    """The docs say why in their own words; a tracker that is not in the repository is no source."""
    offenders = [f"{name}: {m.group(0)}" for name, text in {"README.md": README, **DOCS}.items()
                 for m in re.finditer(r"[Ii]ssues? #?\d+", text)]
    assert offenders == []


def test_artifact_is_spelt_one_way_in_statuses_and_prose():
    """The status is `artifact`; prose, help and docs use the same word, never the British spelling."""
    texts = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), *sorted((ROOT / "esverify").rglob("*.py")),
             *sorted((ROOT / "oracles").glob("*.py"))]
    offenders = [str(p.relative_to(ROOT)) for p in texts if "artefact" in p.read_text().lower()]
    assert offenders == []
