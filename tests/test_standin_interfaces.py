"""The stand-in clones keep the real references' interfaces (docs/references.md §5): the description of
every stand-in entry-point file, computed from its source by oracles/interface_drift.py, equals the
manifest entry of the real file exactly (imports in order, functions, classes, methods, signatures with
defaults, argparse flags, constants), so this suite fails where a stand-in drifts from the interface a
real clone has; and a check of the stand-in clones finds nothing. The paper's scripts
(docs/references.md §6) sit in archive/ of the es-at-scale stand-in and have a manifest entry of their
own; their lowercase module constants (max_new_tokens, do_sample, initial_seed) are read by name."""
from __future__ import annotations

import importlib.util
import json

import pytest

from child_files import manifest
from esverify.paths import oracles_dir
from standins.mutants import STANDINS


def _load():
    spec = importlib.util.spec_from_file_location("interface_drift_standins", oracles_dir() / "interface_drift.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


drift = _load()
TARGETS = ("es-at-scale", "es-awd")
ENTRIES = [(target, entry) for target in TARGETS for entry in json.loads(manifest(target).read_text())[target]["files"]]
#: the manifest's target of the paper's scripts, and the stand-in folder that holds them (archive/)
PAPER = "es-paper"
PAPER_ENTRIES = json.loads(manifest(PAPER).read_text())[PAPER]["files"]


def test_the_manifest_lists_the_entry_point_files_of_both_targets():
    files = {target: [e["file"] for t, e in ENTRIES if t == target] for target in TARGETS}
    assert files == {"es-at-scale": ["es_at_scale/trainer/es_trainer.py", "es_at_scale/utils/worker_extension.py",
                                     "es_at_scale/utils/reward_shaping.py"],
                     "es-awd": ["es.py", "distributed_utils.py", "weight_update_utils.py"]}


@pytest.mark.parametrize("target,entry", ENTRIES, ids=[f"{t}:{e['file']}" for t, e in ENTRIES])
def test_standin_file_has_exactly_the_manifest_interface(target, entry):
    expected = {k: v for k, v in entry.items() if k != "file"}
    # UPPER_CASE constants only: the stand-ins list nothing else, so no name needs passing
    actual = drift.extract(STANDINS / target / entry["file"])
    # dict order too (json text): the stand-ins follow the real files' order of definitions
    assert json.dumps(actual, indent=1) == json.dumps(expected, indent=1)


@pytest.mark.parametrize("target", TARGETS)
def test_check_clone_of_the_standins_finds_nothing(target):
    assert drift.check_clone(STANDINS / target, target, manifest(target)) == []


def test_a_drifted_standin_is_found(tmp_path):
    """The check sees a drift of the kinds a user's clone may have, on a copy of the stand-in."""
    from standins.mutants import make_variant
    clone = make_variant(tmp_path, "es-awd", [
        ("es.py", '    parser.add_argument("--run_name", type=str, default=None)\n', ""),
        ("es.py", "def main(args):", "def main(args, tokenizer):"),
        ("distributed_utils.py", "    def restore_self_weights_from_cpu(self):", "    def restore_from_cpu(self):")])
    found = [(f["file"], f["kind"], f["name"]) for f in drift.check_clone(clone, "es-awd", manifest("es-awd"))]
    assert found == [("es.py", "signature", "main"), ("es.py", "flag-missing", "--run_name"),
                     ("distributed_utils.py", "missing-method", "WorkerExtension.restore_self_weights_from_cpu")]


def test_the_manifest_lists_the_four_paper_scripts():
    assert [e["file"] for e in PAPER_ENTRIES] == [
        "archive/es_fine-tuning_countdown.py", "archive/es_fine-tuning_countdown_iid.py",
        "archive/es_fine-tuning_conciseness.py", "archive/es_fine-tuning_conciseness_iid.py"]


@pytest.mark.parametrize("entry", PAPER_ENTRIES, ids=[e["file"] for e in PAPER_ENTRIES])
def test_paper_script_standin_has_exactly_the_manifest_interface(entry):
    expected = {k: v for k, v in entry.items() if k != "file"}
    actual = drift.extract(STANDINS / "es-at-scale" / entry["file"], names=entry["module_constants"].keys())
    assert json.dumps(actual, indent=1) == json.dumps(expected, indent=1)


def test_check_clone_of_the_paper_scripts_finds_nothing():
    assert drift.check_clone(STANDINS / "es-at-scale", PAPER, manifest(PAPER)) == []


def test_a_drifted_paper_script_is_found(tmp_path):
    from standins.mutants import make_variant
    clone = make_variant(tmp_path, "es-at-scale", [
        ("archive/es_fine-tuning_countdown.py", 'parser.add_argument("--data_sample", type=int, default=1000,',
         'parser.add_argument("--data_sample", type=int, default=500,'),
        ("archive/es_fine-tuning_conciseness_iid.py", "initial_seed = 33\n", "initial_seed = 42\n"),
        ("archive/es_fine-tuning_countdown_iid.py", "def process_seed(seed_args):", "def process_seed(seed_args, k):")])
    found = [(f["file"], f["kind"], f["name"], f["found"]) for f in drift.check_clone(clone, PAPER, manifest(PAPER))]
    assert found == [("archive/es_fine-tuning_countdown.py", "flag-default", "--data_sample", "500"),
                     ("archive/es_fine-tuning_countdown_iid.py", "signature", "process_seed",
                      [{"name": "seed_args", "default": None}, {"name": "k", "default": None}]),
                     ("archive/es_fine-tuning_conciseness_iid.py", "constant", "initial_seed", 42)]


# ----------------------------------------------------------------- eggroll-vllm (docs/references.md, EGGROLL)

EGGROLL = "eggroll"
EGGROLL_ENTRIES = json.loads(manifest(EGGROLL).read_text())[EGGROLL]["files"]
#: the keys extract() computes; the eggroll entry adds the dataclass fields, module globals and tyro flags
EXTRACTED = ("module_imports", "functions", "classes")


def _dataclass_fields(path, cls: str) -> list:
    """[{name, annotation, default}] of the annotated fields of class `cls` (source text, ast.unparse)."""
    import ast
    tree = ast.parse(path.read_text(encoding="utf-8"))
    (node,) = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls]
    return [{"name": item.target.id, "annotation": ast.unparse(item.annotation),
             "default": ast.unparse(item.value) if item.value is not None else None}
            for item in node.body if isinstance(item, ast.AnnAssign)]


def _module_globals(path) -> dict:
    """name -> whether its value is a literal, for the top-level UPPER_CASE assignments."""
    import ast
    found = {}
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name) and target.id.isupper():
                    try:
                        ast.literal_eval(node.value)
                        found[target.id] = True
                    except ValueError:
                        found[target.id] = False
    return found


def test_the_manifest_lists_the_eggroll_files():
    assert [e["file"] for e in EGGROLL_ENTRIES] == ["es_lora_multinode.py", "es_lora_multinode_moe.py", "tasks.py"]


@pytest.mark.parametrize("entry", EGGROLL_ENTRIES, ids=[e["file"] for e in EGGROLL_ENTRIES])
def test_eggroll_standin_file_has_exactly_the_manifest_interface(entry):
    path = STANDINS / "eggroll-vllm" / entry["file"]
    actual = drift.extract(path)
    expected = {k: entry[k] for k in EXTRACTED}
    assert json.dumps(actual, indent=1) == json.dumps(expected, indent=1)
    if "dataclass_fields" in entry:
        assert {cls: _dataclass_fields(path, cls) for cls in entry["dataclass_fields"]} == entry["dataclass_fields"]
    if "module_globals_not_literal" in entry:
        assert _module_globals(path) == {name: False for name in entry["module_globals_not_literal"]}


@pytest.mark.parametrize("entry", [e for e in EGGROLL_ENTRIES if e["file"] == "es_lora_multinode.py"],
                         ids=["es_lora_multinode.py"])
def test_eggroll_tyro_flags_follow_from_the_dataclass(entry):
    """tyro 0.9.35 turns each field into a kebab-case flag and each boolean into --x / --no-x."""
    flags = []
    for field in entry["dataclass_fields"]["Args"]:
        flag = "--" + field["name"].replace("_", "-")
        flags += [flag, "--no-" + flag[2:]] if field["annotation"] == "bool" else [flag]
    assert sorted(flags) == sorted(entry["cli_flags_tyro_0.9.35"])


def test_check_clone_of_the_eggroll_standin_finds_nothing():
    assert drift.check_clone(STANDINS / "eggroll-vllm", EGGROLL, manifest(EGGROLL)) == []


def test_the_eggroll_standin_licence_names_the_gpl_3():
    from esverify.audit.provenance import recognise_licence
    text = (STANDINS / "eggroll-vllm" / "LICENSE").read_text()
    heading = text.splitlines()[0]
    assert "GNU GENERAL PUBLIC LICENSE" in heading and "Version 3" in heading
    assert recognise_licence(text) == ("GPL", False)
