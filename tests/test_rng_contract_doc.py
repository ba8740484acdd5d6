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


def test_contract_doc_verifier_checks_a_digest_vector(tmp_path):
    """The stdlib verifier's digest path (--long) on a short digest vector of each kind: equal to
    esverify's digest, and a changed digest word is caught."""
    from esverify.goldens import digest, rng_area
    namespace = {}
    exec(compile(_snippet(), "CONTRACT.md", "exec"), namespace)  # noqa: S102 - our own doc
    g = {"kind": "gaussian-digest", "mapping": "poly32",
         "ranges": [{"seed": "0x%016x" % 7, "first": "0x%016x" % (2**64 - 3), "n": 3},
                    {"seed": "0x%016x" % 0, "first": "0x%016x" % 1, "n": 4}]}
    n = {"kind": "noise-digest", "seed": "0x%016x" % 2026, "iteration": 3, "population": 10, "members": [0, 7],
         "antithetic": True, "scheme": "iid", "mapping": "libm64", "slot_sizes": [2, 5]}
    vectors = []
    for k, x in enumerate((g, n)):
        h = digest.Hasher()
        for seed, first, count in rng_area.ranges_of(x):
            h.update(rng_area._gaussian_values(seed, count, first, x["mapping"], "numpy"))
        vectors.append({"id": f"d{k}", "comment": "c", "inputs": x, "expected": h.fields()})
    doc = {"contract": {"name": "rng", "version": 1}, "vectors": vectors}
    path = tmp_path / "rng.json"
    path.write_text(json.dumps(doc))
    assert namespace["verify"](str(path), long=True) == 0
    assert namespace["verify"](str(path)) == 0          # skipped without --long
    vectors[1]["expected"]["sha256"]["values"][3] = "0x%016x" % 5
    path.write_text(json.dumps(doc))
    assert namespace["verify"](str(path), long=True) == 1


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
