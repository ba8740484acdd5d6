"""Interface drift end to end (docs/references.md §5.3): stand-ins that drift on
purpose. A clone whose entry points differ from the manifest is reported as findings before the loop
runs; a loop that fails at a name the driver supplies is an `error` row with diagnosis `interface`
that says esverify could not drive the clone and names the reference's file and line; a failure in
the reference's own logic keeps the reference's wording.
"""
from __future__ import annotations

import pandas as pd
import pytest

from esverify.oracle import Options, run_parity
from standins.mutants import make_variant

ES = "es.py"
TRAINER = "es_at_scale/trainer/es_trainer.py"


def _run(tmp_path, target, clone, case):
    ref = {"ref": str(clone)} if target == "es-at-scale" else {"ref": str(clone)}
    return run_parity(Options(target=target, devices=("cpu",), dtypes=("f32",), schemes=("correlated",),
                              noises=("contract",), iterations=1, small=True, case=case,
                              out=str(tmp_path / "out"), quiet=True, **ref))


def _line_of(path, text) -> int:
    return next(k for k, line in enumerate(path.read_text().splitlines(), 1) if text in line)


@pytest.mark.slow   # 5 s (--durations, 2026-12-03): out of the fast tier
def test_a_data_key_the_driver_does_not_supply_is_an_interface_error_with_file_and_line(tmp_path):
    clone = make_variant(tmp_path, "es-awd", [(ES, 'prompts = [item["context"] for item in train_data]',
                                               'prompts = [item["question"] for item in train_data]')])
    result = _run(tmp_path, "es-awd", clone, "*/main/*")
    row = result.frame.iloc[0]
    line = _line_of(clone / ES, 'item["question"]')
    assert (row["status"], row["diagnosis"]) == ("error", "interface")
    assert row["detail"].startswith(f"main: esverify could not drive this clone: es.py:{line} (in ")
    assert "reads the key 'question' of a data item esverify supplied" in row["detail"]
    assert "next:" in row["detail"] and "the reference side raised" not in row["detail"]
    assert result.exit_code == 1
    # nothing in the interface differs: no finding claims otherwise
    assert not [f for f in result.metadata["findings"] if f["finding"].startswith("interface")]


@pytest.mark.slow   # 2 s (--durations, 2026-12-03): out of the fast tier
def test_a_new_required_constructor_parameter_is_a_finding_and_an_interface_error(tmp_path):
    clone = make_variant(tmp_path, "es-at-scale", [(TRAINER, "global_seed=None, output_directory=None,",
                                                    "new_required, global_seed=None, output_directory=None,")])
    result = _run(tmp_path, "es-at-scale", clone, "*/fit/*")
    row = result.frame.iloc[0]
    line = _line_of(clone / TRAINER, "def __init__(self, model_name")
    assert (row["status"], row["diagnosis"]) == ("error", "interface")
    assert f"{TRAINER}:{line} (EvolutionStrategiesTrainer.__init__, called by esverify's driver) needs " \
           "'new_required'" in row["detail"]
    findings = [f for f in result.metadata["findings"] if f["finding"] == "interface: signature"]
    assert len(findings) == 1
    assert findings[0]["description"].startswith(f"{TRAINER}: EvolutionStrategiesTrainer.__init__: esverify's "
                                                 "driver expects (self, model_name, checkpoint,")
    assert "new_required, global_seed=None" in findings[0]["description"]


@pytest.mark.slow   # 6 s (--durations, 2026-12-03): out of the fast tier
def test_a_flag_esverify_does_not_pass_is_a_finding_and_the_loop_still_passes(tmp_path):
    clone = make_variant(tmp_path, "es-awd", [(ES, '    parser.add_argument("--eval_batch_size", type=int, default=512)',
                                               '    parser.add_argument("--eval_batch_size", type=int, default=512)\n'
                                               '    parser.add_argument("--max_new_tokens", type=int, default=64)')])
    result = _run(tmp_path, "es-awd", clone, "*/main/*")
    assert list(result.frame["status"]) == ["pass", "pass"]   # main/N7 and its infinite-reward row main/N7/inf
    findings = [f for f in result.metadata["findings"] if f["finding"].startswith("interface")]
    assert [f["finding"] for f in findings] == ["interface: flag-new"]
    assert "--max_new_tokens" in findings[0]["description"]
    assert findings[0]["observed"] == "esverify does not pass it: the loop runs with the clone's default"


@pytest.mark.parametrize("old, new, words", [
    # the reference's own logic fails: its own words, no interface diagnosis
    ('prompts = [item["context"] for item in train_data]',
     'prompts = [item["context"] for item in train_data]\n    raise ValueError("bad prompt set")',
     "the reference side raised ValueError: bad prompt set"),
    ("    n = args.population_size\n", "    n = args.population_size + int(args.temperature)\n",
     "the reference side raised AttributeError: 'Namespace' object has no attribute 'temperature'"),
])
@pytest.mark.slow   # 6 s (--durations, 2026-12-03): out of the fast tier
def test_a_failure_in_the_references_own_logic_keeps_its_wording(tmp_path, old, new, words):
    clone = make_variant(tmp_path, "es-awd", [(ES, old, new)])
    result = _run(tmp_path, "es-awd", clone, "*/main/*")
    row = result.frame.iloc[0]
    assert row["status"] == "error"
    assert pd.isna(row["diagnosis"]) or row["diagnosis"] == ""
    assert words in row["detail"]
    assert "could not drive" not in row["detail"]
