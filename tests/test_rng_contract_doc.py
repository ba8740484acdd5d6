"""docs/CONTRACT.md's standard-library verifier really verifies goldens/rng.json (and catches a change)."""
import copy
import json
import re
import subprocess
import sys

from esverify.paths import checkout_root

ROOT = checkout_root()


def _snippet() -> str:
    text = (ROOT / "docs" / "CONTRACT.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    assert len(blocks) == 1
    return blocks[0]


def test_contract_doc_verifier_passes_on_the_committed_goldens(tmp_path):
    script = tmp_path / "verify.py"
    script.write_text(_snippet())
    # -I -S: isolated, without site-packages: only the standard library is importable
    res = subprocess.run([sys.executable, "-I", "-S", str(script), str(ROOT / "goldens" / "rng.json")],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr
    assert re.search(r"\d+ vectors, 0 mismatching values", res.stdout)


def test_contract_doc_verifier_catches_a_flipped_bit(tmp_path):
    namespace = {}
    exec(compile(_snippet(), "CONTRACT.md", "exec"), namespace)  # noqa: S102 - our own doc
    doc = json.loads((ROOT / "goldens" / "rng.json").read_text())
    gauss = [v for v in doc["vectors"] if v["inputs"]["kind"] == "gaussian" and v["inputs"]["n"] > 0]
    small = copy.deepcopy(doc)
    small["vectors"] = gauss[:2]
    vals = small["vectors"][1]["expected"]["values"]["values"]
    vals[0] = "0x%08x" % (int(vals[0], 16) ^ 1)
    path = tmp_path / "rng.json"
    path.write_text(json.dumps(small))
    assert namespace["verify"](str(path)) == 1
