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

from esverify.paths import oracles_dir
from standins.mutants import STANDINS


def _load():
    spec = importlib.util.spec_from_file_location("interface_drift_standins", oracles_dir() / "interface_drift.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


drift = _load()
MANIFEST = oracles_dir() / "interfaces.json"
TARGETS = ("es-at-scale", "es-awd")
ENTRIES = [(target, entry) for target in TARGETS for entry in json.loads(MANIFEST.read_text())[target]["files"]]
#: the manifest's target of the paper's scripts, and the stand-in folder that holds them (archive/)
PAPER = "es-fine-tuning-paper scripts (archive/ of es-at-scale)"
PAPER_ENTRIES = json.loads(MANIFEST.read_text())[PAPER]["files"]


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
    assert drift.check_clone(STANDINS / target, target, MANIFEST) == []


def test_a_drifted_standin_is_found(tmp_path):
    """The check sees a drift of the kinds a user's clone may have, on a copy of the stand-in."""
    from standins.mutants import make_variant
    clone = make_variant(tmp_path, "es-awd", [
        ("es.py", '    parser.add_argument("--run_name", type=str, default=None)\n', ""),
        ("es.py", "def main(args):", "def main(args, tokenizer):"),
        ("distributed_utils.py", "    def restore_self_weights_from_cpu(self):", "    def restore_from_cpu(self):")])
    found = [(f["file"], f["kind"], f["name"]) for f in drift.check_clone(clone, "es-awd", MANIFEST)]
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
    assert drift.check_clone(STANDINS / "es-at-scale", PAPER, MANIFEST) == []


def test_a_drifted_paper_script_is_found(tmp_path):
    from standins.mutants import make_variant
    clone = make_variant(tmp_path, "es-at-scale", [
        ("archive/es_fine-tuning_countdown.py", 'parser.add_argument("--data_sample", type=int, default=1000,',
         'parser.add_argument("--data_sample", type=int, default=500,'),
        ("archive/es_fine-tuning_conciseness_iid.py", "initial_seed = 33\n", "initial_seed = 42\n"),
        ("archive/es_fine-tuning_countdown_iid.py", "def process_seed(seed_args):", "def process_seed(seed_args, k):")])
    found = [(f["file"], f["kind"], f["name"], f["found"]) for f in drift.check_clone(clone, PAPER, MANIFEST)]
    assert found == [("archive/es_fine-tuning_countdown.py", "flag-default", "--data_sample", "500"),
                     ("archive/es_fine-tuning_countdown_iid.py", "signature", "process_seed",
                      [{"name": "seed_args", "default": None}, {"name": "k", "default": None}]),
                     ("archive/es_fine-tuning_conciseness_iid.py", "constant", "initial_seed", 42)]
