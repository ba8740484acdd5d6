"""The loop quirks of the built-in references: what a reference's training loop does its
own way is code of its package (esverify.references.<pkg>.loop), asked by the core through LoopQuirks; the
defaults are the plain loop. The end-to-end rows that depend on them are in test_parity_loops.py."""
from __future__ import annotations

from esverify.oracle.adapters import get
from esverify.oracle.adapters.base import LoopQuirks, LoopSpec
from esverify.oracle.case_model import Case


def _loop_case(target: str, op: str, iterations: int = 3) -> Case:
    return Case(target, "cpu", "f32", "correlated", op, 5, 0.01, 0.02, False, {"iterations": iterations})


class _Session:
    def __init__(self):
        self.recorded = []

    def record_finding(self, key, case, observed):
        self.recorded.append((key, case.case_id, observed))


def test_the_default_loop_has_no_quirk():
    quirks = LoopQuirks()
    assert [quirks.updates(n) for n in (0, 1, 3)] == [0, 1, 3]
    assert [quirks.record_number(i) for i in (0, 1, 2)] == [1, 2, 3]
    assert quirks.deterministic(None) is False and quirks.deterministic(43) is False
    assert quirks.save_missing({"saved": [{"path": "x/model.pt"}]}) is None
    assert quirks.save_missing({"saved": []}) == "final state_dict: theirs saved none with torch.save"
    assert quirks.save_missing({}) == "final state_dict: theirs saved none with torch.save"
    assert quirks.notes(_Session(), _loop_case("es-awd", "main"), {"iterations": []}, {"updates": 3}) == []
    assert LoopSpec(style="passes", engines=2, schedule="x", data=(0.0,), command={}).quirks.updates(2) == 2


def test_fit_makes_one_update_more_numbers_from_0_and_merges_equal_seeds():
    case = _loop_case("es-at-scale", "fit")
    quirks = get("es-at-scale").loop_spec(case).quirks
    assert [quirks.updates(n) for n in (0, 3)] == [1, 4]
    assert [quirks.record_number(i) for i in (0, 1, 2)] == [0, 1, 2]
    assert quirks.deterministic(43) is False
    # any save after the last update counts; a tape that does not record the time after it is not judged
    assert quirks.save_missing({"saved": []}) is None
    assert quirks.save_missing({"after_last_update": {"torch_save": 0, "save_calls": 1, "files": 0}}) is None
    assert quirks.save_missing({"after_last_update": {"torch_save": 0, "save_calls": 0, "files": 0}}).startswith(
        "final save: theirs saved nothing after its last update")
    session = _Session()
    ours = {"iterations": [{"update": {"seeds": [7, 9, 7]}}, {"update": {"seeds": [1, 2, 3]}}]}
    notes = quirks.notes(session, case, ours, {"updates": 4})
    assert notes == ["note: iteration 0 drew equal seeds [7]: es-at-scale's loop merges them into one member "
                     "(a quirk of the reference)"]
    assert session.recorded == [("fit-extra-update", case.case_id, "4 updates for num_iterations 3")]
    assert get("es-at-scale").finding("fit-extra-update").startswith("EvolutionStrategiesTrainer.fit performs")


def test_main_switches_determinism_on_when_given_a_seed_only():
    for op in get("es-awd").loop_ops:
        quirks = get("es-awd").loop_spec(_loop_case("es-awd", op)).quirks
        assert quirks.deterministic(None) is False
        assert quirks.deterministic(0) is True and quirks.deterministic(43) is True
        assert quirks.updates(3) == 3 and quirks.record_number(0) == 1
        assert quirks.save_missing({"saved": []}) == "final state_dict: theirs saved none with torch.save"
