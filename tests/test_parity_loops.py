"""Parity through the references' training loops (docs/references.md §5).

- the stand-in modules: the real ray/vllm/transformers/wandb are never
  imported, even when a package of that name is on the path;
- the unchanged stand-ins pass every fit/main row, under contract and
  native noise (torch's own generator); es-at-scale's extra
  update is a finding; the coverage section shows the loop functions ran;
- a run with only --ref says, in the console and in every report format,
  that es-awd was not checked;
- each loop mutant (tests/standins/loop_mutants.py) fails exactly the rows
  the table below names, with the first differing quantity in the detail.
"""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

from esverify.cli import main
from esverify.oracle import Options, run_parity
from esverify.oracle import adapters
from esverify.references.es_awd.adapter import MAIN_VARIANTS
from esverify.oracle.adapters import all_adapters

#: the two library references' loops (the paper's scripts and the skill sample: tests/test_parity_new_refs.py)
LIBRARY = ("es-at-scale", "es-awd")
LOOP_OPS = tuple(op for a in all_adapters() if a.name in LIBRARY for op in a.loop_ops)

REACHED = {a.name: a.reached for a in adapters.all_adapters() if a.name in LIBRARY}
from esverify.paths import oracles_dir
from standins.loop_mutants import (LOOP_EQUIVALENTS, LOOP_MUTANTS, LOOP_REUSE_EQUIVALENTS, LOOP_UNSEEN,
                                  make_loop_mutant)
from standins.mutants import STANDINS

AT_SCALE = str(STANDINS / "es-at-scale")
AWD = str(STANDINS / "es-awd")
LOOPS_ONLY = "*/cpu/*/*/[fm][ia][ti]*"        # fit and main-* (fnmatch has no alternation)


@pytest.mark.slow   # 2 s (--durations, 2026-12-03): out of the fast tier
def test_stand_in_modules_shadow_installed_packages(tmp_path):
    fake = tmp_path / "site"
    for name in ("ray", "vllm", "transformers", "wandb"):
        (fake / name).mkdir(parents=True)
        (fake / name / "__init__.py").write_text("raise RuntimeError('the real package was imported')\n")
    script = textwrap.dedent(f"""
        import sys
        sys.path[:0] = [{str(fake)!r}, {str(oracles_dir())!r}]
        import torch
        import loop_stubs
        loop_stubs.install()
        import ray, wandb
        from ray.util.placement_group import placement_group
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy
        from vllm import LLM, SamplingParams
        from vllm.distributed.parallel_state import get_world_group
        from transformers import AutoTokenizer
        assert ray.get([1, 2]) == [1, 2] and ray.get(3) == 3
        class Base(LLM):
            pass
        Base(model="x").anything.at_all(1)
        @ray.remote(num_gpus=1)
        class Actor:
            def ping(self, x):
                return x + 1
        assert Actor.remote().ping.remote(1) == 2
        assert SamplingParams(n=2, temperature=0.5).temperature == 0.5
        wandb.init(project="p").log({{"a": 1}})
        tok = AutoTokenizer.from_pretrained("m")
        assert tok.apply_chat_template([{{"role": "user", "content": "hi"}}], tokenize=False) == "hi"
        placement_group([{{"GPU": 1}}])
        torch.cuda.synchronize()   # a no-op without CUDA
        mods = [m for m in sys.modules if m.split(".")[0] in ("ray", "vllm", "transformers", "wandb")]
        assert all(getattr(sys.modules[m], "__esverify_stub__", False) for m in mods), mods
        print("ok", len(mods))
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("ok")


@pytest.mark.slow   # 24 s (--durations, 2026-12-03): out of the fast tier
def test_unchanged_standins_pass_every_loop_row(tmp_path):
    result = run_parity(Options(ref=(AT_SCALE, AWD), devices=("cpu",), dtypes=("f32", "bf16"),
                                schemes=("iid", "correlated"), iterations=2, small=True, case=LOOPS_ONLY,
                                out=str(tmp_path / "out"), quiet=True))
    frame = result.frame[result.frame["target"].isin(LIBRARY)]
    assert set(frame["op"]) == set(LOOP_OPS)
    # 3 dtype sets x (iid and correlated contract noise, correlated native noise) x (fit + main variants),
    # and the non-finite rewards' fit/nan and main/inf (f32, correlated contract noise)
    assert len(frame) == 3 * 3 * (1 + len(MAIN_VARIANTS)) + 2
    assert set(frame.loc[frame["case"].str.endswith(("/nan", "/inf")), "case"]) == {
        "es-at-scale/cpu/f32/correlated/fit/N7/nan", "es-awd/cpu/f32/correlated/main/N7/inf"}
    native = frame["noise"] == "native"
    assert native.sum() == 3 * (1 + len(MAIN_VARIANTS)) and set(frame.loc[native, "scheme"]) == {"correlated"}
    caching_iid = (frame["op"] == "main-caching") & (frame["scheme"] == "iid") & (frame["dtype"] != "mixed")
    assert set(frame.loc[caching_iid, "status"]) == {"artifact"}      # equal shapes reuse noise under iid
    assert (frame.loc[~caching_iid, "status"] == "pass").all(), frame.loc[frame["status"] != "pass",
                                                                          ["case", "detail"]].to_string()
    assert (frame.loc[frame["status"] == "pass", "mismatches"] == 0).all()
    assert result.exit_code == 0
    fit = frame[frame["op"] == "fit"]
    assert set(fit["population"]) == {7}                               # not a multiple of the 2 engines
    meta = json.loads((tmp_path / "out" / "parity-metadata.json").read_text())
    finding = {f["finding"]: f for f in meta["findings"]}["fit-extra-update"]
    # the NaN-reward fit row runs one iteration (docs/parity.md, "Reward populations")
    assert finding["observed"] == "3 updates for num_iterations 2; 2 updates for num_iterations 1"
    assert finding["rows"] == len(fit)
    assert "finding (es-at-scale)" in result.console and "num_iterations + 1" in result.console
    for target, files in REACHED.items():
        cov = meta["coverage"][target]
        assert cov["reached_not_run"] == [] and not cov["error"], cov
        assert set(files) <= set(cov["files"])
        assert cov["functions_ran"] <= cov["functions"] and cov["percent"] > 50
    table = pd.read_csv(tmp_path / "out" / "parity-coverage.csv")
    loop = table[table["reached_by_loop"] & table["target"].isin(LIBRARY)]
    assert len(loop) == sum(len(names) for files in REACHED.values() for names in files.values())
    assert loop["ran"].all()
    # the es-at-scale save helper ran; the es-awd restore-from-snapshot did not (no loop reaches it)
    ran = {(r.file, r.function): r.ran for r in table.itertuples()}
    assert ran[("es_at_scale/utils/worker_extension.py", "WorkerExtension.save_self_weights_to_disk")]
    assert not ran[("distributed_utils.py", "WorkerExtension.restore_self_weights_from_cpu")]
    assert "coverage (es-awd)" in result.console


@pytest.mark.slow   # 4 s (--durations, 2026-12-03): out of the fast tier
def test_only_ref_explains_what_was_not_checked(tmp_path, monkeypatch):
    """--ref of the es-at-scale clone runs what it names: es-at-scale and es-paper (its archive/), nothing else
    (es-awd, named nowhere, gets no row and no not-checked entry); what it names but cannot check
    (the paper's vLLM script) is listed in every format."""
    monkeypatch.chdir(tmp_path)   # no ./refs/es-awd here
    monkeypatch.delenv("ESVERIFY_AWD_REF", raising=False)
    out = tmp_path / "out"
    junit = tmp_path / "parity.xml"
    result = CliRunner().invoke(main, ["parity", "--ref", AT_SCALE, "--devices", "cpu", "--small", "--quiet",
                                       "--case", "*/f32/iid/fit*", "--iterations", "1", "--out", str(out),
                                       "--junit", str(junit)])
    assert result.exit_code == 0, result.output
    assert "clones: es-at-scale " in result.output and "es-awd" not in result.output
    not_checked = pd.read_csv(out / "parity-not_checked.csv")
    assert list(not_checked["target"]) == ["es-paper"] and "_accl.py" in not_checked["not_checked"][0]
    doc = json.loads((out / "parity.json").read_text())
    assert [entry["target"] for entry in doc["sections"]["not_checked"]] == ["es-paper"]
    for name in ("parity.md", "parity.html"):
        text = (out / name).read_text()
        assert "not_checked" in text and "_accl.py" in text and "ESVERIFY_AWD_REF" not in text, name
    suite = ET.parse(junit).getroot()
    skipped = [c.get("name") for c in suite if c.find("skipped") is not None and "not-checked" in c.get("name", "")]
    assert skipped == ["es-paper/not-checked"]
    assert suite.get("failures") == "0" and suite.get("errors") == "0"


def _rows(ops, dtypes, noises=("",)):
    """Row keys (op[/lambda0][/native], dtype) of the mutant test."""
    return {(op + noise, dt) for op in ops for dt in dtypes for noise in noises}


def _both(ops, dtypes):
    """The rows under contract and native noise: a loop fault shows whatever draws the noise."""
    return _rows(ops, dtypes, ("", "/native"))


F, B, M = "f32", "bf16", "mixed"
ALL_MAIN = list(MAIN_VARIANTS)
#: the es-awd rows that draw noise (single-op and loop) where native noise in bf16 differs from f32 cast
AWD_DRAWING = ["perturb", "restore", "update-none", "update-l1", "update-l2", "update-l2/lambda0", "mirrored",
               "caching", *ALL_MAIN]
#: mutant -> ({status: rows (op[/lambda0][/native], dtype)}, words the detail of every non-pass row must
#: contain); every other row of the target's matrix (single-operation rows included, except for a mutant of the
#: loop script alone: LOOP_SCRIPTS) must pass. es-at-scale
#: mutants run under iid (no native rows), es-awd mutants under correlated (contract and native rows).
EXPECTED = {
    "zscore-ddof1": ({"fail": _rows(["fit"], [F, B, M])}, "iteration 0: std_reward handed to z_score"),
    "seeds-lose-iteration": ({"fail": _rows(["fit"], [F, B, M])}, "iteration 1: seed of member 0"),
    "last-engine-not-restored": ({"fail": _rows(["fit"], [F, B, M])},
                                 "iteration 0: member 1 (evaluation 1) was never restored by theirs (engine 1)"),
    "unweighted-batches": ({"fail": _rows(["fit"], [F, B, M])}, "iteration 0: aggregated reward of member 0"),
    "no-extra-update": ({"fail": _rows(["fit"], [F, B, M])}, "number of updates: ours 2, theirs 1"),
    "broadcast-engine-0-only": ({"fail": _rows(["fit"], [F, B, M])}, "iteration 1: reward of member 1"),
    "mirror-passes-batched-together": ({"fail": _both(["main-mirror"], [F, B, M])},
                                       "iteration 1: member 0 (evaluation 5) ran on engine 1 in theirs, 0 in ours"),
    "mirror-sign-flipped": ({"fail": _both(["main-mirror"], [F, B, M])}, "iteration 1: coefficient of member 0"),
    "mirror-divisor-half": ({"fail": _both(["main-mirror"], [F, B, M])},
                            "divisor (population_size) handed to the update"),
    "restore-negate-swapped": ({"fail": _both(ALL_MAIN, [F, B, M])}, "iteration 1: reward of member"),
    "caching-key-without-dtype": ({"fail": _both(["caching", "main-caching"], [M])}, "caching"),
    # the loop rows start at the anchor, so only the missing snapshot shows there; the single-op
    # lambda-0 row (decay applied with lambda 0 is no identity: (theta - anchor) + anchor rounds) fails
    "lambda0-no-shortcut": ({"error": _both(["main-l1-lambda0", "main-l2-lambda0"], [F, B, M]),
                             "fail": _both(["update-l2/lambda0"], [F, B, M])},
                            "weight decay needs original_parameters"),
    "seeds-from-iteration-0": ({"fail": _both(ALL_MAIN, [F, B, M])}, "iteration 1: seed of member 0"),
    "record-uncentred": ({"fail": _both(ALL_MAIN, [F, B, M])}, "in its record iteration_000001.json"),
    "noise-f32-then-cast": ({"fail": _rows(AWD_DRAWING, [B, M], ("/native",))}, "iteration 1: reward of member 0"),
    # the f32 rows hand global seed 0 (the fallback runs), the others one that is not the fallback
    "seed-fallback-changed": ({"fail": _rows(["fit"], [F])}, "iteration 0: seed of member 0"),
    # docs/references.md §5 says fit saves engine 0's weights, not how: a torch.save, a worker method named *save*
    # or a file written under the logging folder after the last update each count; this mutant does none
    "fit-no-final-save": ({"fail": _rows(["fit"], [F, B, M])}, "final save: theirs saved nothing after its last"),
    "global-seed-ignored": ({"fail": _both(ALL_MAIN, [B, M])}, "iteration 1: seed of member 0"),
    # a seed outside the schedule's table cannot be given contract noise: named, as an error
    "seeds-bound-2-31": ({"error": _rows(["fit"], [F, B, M])}, "torch.randn drew with unknown seed"),
    "group-reversed": ({"fail": _rows(["fit"], [F, B, M])}, "iteration 0: seed of member 0 (evaluation 0)"),
    "last-minibatch-dropped": ({"fail": _rows(["fit"], [F, B, M])},
                               "iteration 0: ours evaluated 21 members, theirs 14"),
    "std-eps-twice": ({"fail": _rows(["fit"], [F, B, M])}, "iteration 0: std_reward handed to z_score"),
    "alpha-over-sigma": ({"fail": _rows(["fit"], [F, B, M])}, "iteration 0: alpha handed to the update"),
    "zscore-no-eps": ({"fail": _both(ALL_MAIN, [F, B, M])}, "iteration 1: coefficient of member 0"),
    "mirror-z-plus-half": ({"fail": _both(["main-mirror"], [F, B, M])}, "iteration 1: coefficient of member 0"),
    # the single-op rows see it too; l2's step lambda**2 is above 1, which the reference's assert refuses
    "decay-step-lambda-squared": ({"fail": _both(["update-l1", "main-l1", "main-l2"], [F, B, M]),
                                   "error": _both(["update-l2"], [F, B, M])},
                                  "iteration 1: parameters after the update"),
    "record-iteration-minus-1": ({"fail": _both(ALL_MAIN, [F, B, M])}, "names iteration 0"),
    "broadcast-before-update": ({"fail": _both(ALL_MAIN, [F, B, M])}, "iteration 2: reward of member 1"),
    "snapshot-every-iteration": ({"fail": _both(["main-l1", "main-l2"], [F, B, M])},
                                 "iteration 2: parameters after the update"),
    "restore-skipped-engine-0": ({"fail": _both(ALL_MAIN, [F, B, M])},
                                 "iteration 1: member 0 (evaluation 0) was never restored by theirs (engine 0)"),
    "perturb-sigma-half": ({"fail": _both(ALL_MAIN, [F, B, M])}, "iteration 1: reward of member 0"),
    # contract noise has no stream for seed + 1 (an error naming it); torch's generator draws one
    "restore-reseeded-plus-1": ({"error": _rows(ALL_MAIN, [F, B, M]), "fail": _rows(ALL_MAIN, [F, B, M], ("/native",))},
                                {"error": "torch.randn drew with unknown seed",
                                 "fail": "iteration 1: reward of member"}),
    "restore-caching-ignored": ({"fail": _both(["main-caching"], [F, B, M])},
                                "iteration 1: caching handed to the restore of member 0"),
    "noise-f64-then-cast": ({"fail": _rows(AWD_DRAWING, [F, B, M], ("/native",))}, "iteration 1: reward of member 0"),
    # the stand-in engines compute rewards in the precision they are launched with
    "fit-engines-float16": ({"fail": _rows(["fit"], [F, B, M])}, "theirs launched in float16, documented bfloat16"),
    "fit-engines-default-float16": ({"fail": _rows(["fit"], [F, B, M])},
                                    "theirs launched in float16, documented bfloat16"),
    # the bf16 rows hand --precision bfloat16 anyway; f32 and mixed hand float32
    "main-engines-bfloat16": ({"fail": _both(ALL_MAIN, [F, M])}, "theirs launched in bfloat16, documented float32"),
}
#: mutants whose fault changes nothing the last iteration leaves behind: run for 2 iterations
ITERATIONS = {"broadcast-before-update": 2, "snapshot-every-iteration": 2}
#: the training-loop script of each library reference: no single-operation row runs any of its functions
#: (test_single_op_rows_run_no_function_of_the_loop_scripts), so a mutant that edits only function bodies of
#: it runs only the loop rows (the single-op rows it leaves out cannot change)
LOOP_SCRIPTS = {"es-at-scale": "es_at_scale/trainer/es_trainer.py", "es-awd": "es.py"}


#: every catalogued loop edit: (target, edits, expectation or reason)
ALL_LOOP_EDITS = {**LOOP_MUTANTS, **LOOP_EQUIVALENTS, **LOOP_UNSEEN}


def loop_rows_only(name: str) -> bool:
    """Whether loop mutant, equivalent or unseen fault `name` edits only its target's loop script (LOOP_SCRIPTS)."""
    target, edits, _ = ALL_LOOP_EDITS[name]
    return all(rel == LOOP_SCRIPTS[target] for rel, _, _ in edits)


def row_key(op: str, case_id: str, noise: str, dtype: str) -> tuple:
    """A row's key in EXPECTED: (op[/lambda0][/native], dtype)."""
    return (op + ("/lambda0" if case_id.endswith("/lambda0") else "") + ("/native" if noise == "native" else ""),
            dtype)


def one_row_per_key(cases: list) -> list:
    """The first case of each row key (row_key) of `cases`, in their order. The table's keys are
    (op[/lambda0][/native], dtype): a key's other rows differ only in their population or parameter set
    (24 of the 126 rows of a mutant that edits more than the loop script, all of them mixed-dtype rows: the
    update's summation sweep N8-N129 and reward populations at N30, 14 rows, and the `layers` set of five
    ops under both noise kinds, 10 rows), and every row of a key gets the key's status
    (test_loop_mutant_fails_exactly_its_rows asserted it for each row, and they all did), so one row per key
    detects each mutant as the whole key did. Faults that only those populations and sets show are the
    single-operation catalog's structure and rewards mutants (tests/test_parity_mutants.py)."""
    kept = {}
    for case in cases:
        kept.setdefault(row_key(case.op, case.case_id, case.noise, case.dtype), case)
    return list(kept.values())


def expected_statuses(name: str) -> dict:
    """{row key: status} of loop mutant `name`'s non-pass rows (every other row passes)."""
    return {row: status for status, rows in EXPECTED[name][0].items() for row in rows}


def test_loop_catalog_has_ten_mutants_with_expectations():
    assert len(LOOP_MUTANTS) >= 10 and set(EXPECTED) == set(LOOP_MUTANTS)
    assert len({**LOOP_MUTANTS, **LOOP_EQUIVALENTS, **LOOP_UNSEEN}) == \
        len(LOOP_MUTANTS) + len(LOOP_EQUIVALENTS) + len(LOOP_UNSEEN) and set(ITERATIONS) <= set(LOOP_MUTANTS)
    for name, (target, edits, what) in {**LOOP_MUTANTS, **LOOP_EQUIVALENTS, **LOOP_UNSEEN}.items():
        # one detail: one edit, or the same edit where the stand-in spells that detail more than once
        assert what and target in ("es-at-scale", "es-awd") and len({(o.strip(), n.strip()) for _, o, n in edits}) == 1, \
            name


def loop_options(name: str) -> Options:
    """The parity options loop mutant, equivalent or unseen fault `name` runs under: its target's loop rows
    in f32 and bf16 (and mixed), with the single-op rows unless it edits only the loop script. es-awd
    under correlated: iid caching rows are the reference's documented artefact, which would hide what a
    caching mutant changes. Mutants run ITERATIONS (default 1) iterations, the others 2."""
    target = ALL_LOOP_EDITS[name][0]
    return Options(target=target, devices=("cpu",), dtypes=("f32", "bf16"),
                   schemes=("iid" if target == "es-at-scale" else "correlated",),
                   iterations=ITERATIONS.get(name, 1) if name in LOOP_MUTANTS else 2, small=True,
                   case=LOOPS_ONLY if loop_rows_only(name) else None, quiet=True, timeout=120)


@pytest.fixture(scope="module")
def loop_catalog(request, tmp_path_factory):
    """{name: (rows frame, exit code, unnamed)} of every loop mutant, equivalent and unseen fault this session
    selected, each run on the rows `loop_options` picks, through one child per target that switches to each
    variant (Runner.session, as the mutant catalogs run; a fresh `run_parity` per variant paid a child
    start and its imports each). The exit code is the one parity gives those rows
    (console.exit_code), after the repeat check a parity run makes on the same rows (a variant that
    edits more than the loop script runs single-op rows too). Each variant is a git checkout with its
    edit uncommitted; `unnamed` lists its failing rows whose blame does not name the edited function
   ."""
    from esverify.oracle import Runner
    from esverify.oracle import repeat as _repeat
    from esverify.oracle.console import exit_code
    from esverify.oracle.options import validate
    from esverify.oracle.setup import select_cases
    from standins.mutants import BLAMED, edited_functions, names_the_edit
    tests = ("test_loop_mutant_fails_exactly_its_rows", "test_loop_equivalents_and_unseen_faults_pass_every_row")
    names = sorted({item.callspec.params["name"] for item in request.session.items
                    if item.module is request.module and item.originalname in tests})
    root = tmp_path_factory.mktemp("loop-catalog")
    results = {}
    for target in LIBRARY:
        todo = [n for n in names if ALL_LOOP_EDITS[n][0] == target]
        if not todo:
            continue
        runner = Runner(Options(target=target, devices=("cpu",), quiet=True, timeout=120))
        with runner.session(target, STANDINS / target) as run:
            for name in todo:
                clone = make_loop_mutant(root / name, name, git=True)
                opts = validate(loop_options(name))
                # the rows each mutant's table was written for: the non-finite rewards' loop rows (every
                # coefficient NaN, whatever most loop faults change) are tested on their own
                cases = one_row_per_key([c for c in select_cases(opts, [target], opts.alpha)
                                         if not c.extra.get("rewards")])
                rows, theirs = [], []
                run.forget()
                for case in cases:
                    rows.append(run(case, clone=clone))
                    theirs.append(run.session.last_theirs)
                # the repeat check as a parity run makes it (Runner._run_reference): the chosen single-op
                # rows again, in the reverse order; a row whose reference bits changed is failed in place
                again = _repeat.choose(cases, exclude_ops=adapters.get(target).loop_ops)
                _repeat.run_again(run.session, [(k + 1, cases[k], rows[k], theirs[k], Path(clone).resolve())
                                                for k in again], len(cases))
                frame = pd.DataFrame(rows)
                patched = edited_functions(target, ALL_LOOP_EDITS[name][1])
                unnamed = [f"{r['case']}: {r['blame'][:300]}" for r in rows
                           if r["status"] in BLAMED and not names_the_edit(r["blame"], patched)]
                results[name] = (frame, exit_code(frame, False), unnamed)
    return results


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(LOOP_MUTANTS))
def test_loop_mutant_fails_exactly_its_rows(loop_catalog, name):
    target = LOOP_MUTANTS[name][0]
    frame, code, unnamed = loop_catalog[name]
    if loop_rows_only(name):
        assert set(frame["op"]) == set(adapters.get(target).loop_ops)
    words = EXPECTED[name][1]
    expected = expected_statuses(name)
    # a tagged single-op row (e.g. update-l2/lambda0) and a native row are their own keys; rows of other
    # populations (the paper's, the summation sweep) share their op's key and must all get its status
    got = [(row_key(r["op"], r["case"], r["noise"], r["dtype"]), r["case"], r["status"], r["detail"])
           for _, r in frame.iterrows()]
    assert set(expected) <= {key for key, *_ in got}, f"rows missing: {set(expected) - {key for key, *_ in got}}"
    wrong = {case: (status, expected.get(key, "pass"), detail[:200]) for key, case, status, detail in got
             if status != expected.get(key, "pass")}
    assert not wrong, f"{name}: rows with another status than the table's (got, want, detail): {wrong}"
    for key, case, status, detail in got:
        if status != "pass":
            op = key[0].split("/")[0]
            # the words (per status where given) name the first differing quantity of the loop rows; a
            # single-op row names its op
            said = words[status] if isinstance(words, dict) else words
            assert op in detail and (said in detail or op not in LOOP_OPS), f"{name} {case}: {detail}"
    assert not unnamed, f"{name}: failing rows whose blame does not name the edited function: {unnamed}"
    assert code == 1


def test_loop_script_mutants_edit_only_function_bodies():
    """What lets loop_rows_only mutants, equivalents and unseen faults leave out the single-op rows: each edited
    line of a loop script lies inside a function (module-level code runs at import, for every row), its body
    or its signature (a default argument, evaluated at import too: the single-op rows never import a loop
    script, test_single_op_rows_run_no_function_of_the_loop_scripts)."""
    from esverify.oracle.blame import enclosing, functions_of
    names = [n for n in ALL_LOOP_EDITS if loop_rows_only(n)]
    assert len([n for n in names if n in LOOP_MUTANTS]) >= 20
    for name in names:
        target, edits, _ = ALL_LOOP_EDITS[name]
        text = (STANDINS / target / LOOP_SCRIPTS[target]).read_text()
        for _, old, new in edits:
            at = text.index(old)
            text = text.replace(old, new, 1)
            first = text[:at].count("\n") + 1
            lines = range(first, first + new.count("\n") + 1)
            assert "module level" not in {enclosing(functions_of(text), n) for n in lines}, (name, old)


@pytest.mark.slow
def test_single_op_rows_run_no_function_of_the_loop_scripts(tmp_path):
    """The other half of loop_rows_only: the unmutated stand-ins' single-op rows (every dtype set, scheme and
    noise kind the mutant runs use) never import either loop script, so an edit inside one cannot
    change them. (The table does list a loop script whose functions ran: test_unchanged_standins_pass_every_loop_row
    finds its `reached` functions there.)"""
    result = run_parity(Options(ref=(AT_SCALE, AWD), devices=("cpu",), dtypes=("f32", "bf16"),
                                schemes=("iid", "correlated"), iterations=1, small=True, loops=False,
                                out=str(tmp_path / "out"), quiet=True))
    frame = result.frame[result.frame["target"].isin(LIBRARY)]
    assert set(frame["target"]) == set(LIBRARY) and not set(frame["op"]) & set(LOOP_OPS)
    table = pd.read_csv(tmp_path / "out" / "parity-coverage.csv")
    for target, script in LOOP_SCRIPTS.items():
        # the table lists every clone file the child imported or ran code of: the single-op rows never
        # imported the loop script (so not even its module-level code and signatures ran)
        functions = table[(table["target"] == target) & (table["file"] == script)]
        assert functions.empty, functions.loc[functions["ran"], "function"].tolist()
    # and the table does see single-op rows run: the worker functions they call are marked ran
    assert table[(table["target"] == "es-at-scale") & (table["file"] == "es_at_scale/utils/worker_extension.py")][
        "ran"].any()


@pytest.mark.slow
def test_reuse_of_an_equal_size_draw_gets_one_verdict_in_every_row_kind(tmp_path):
    """A reference that reuses, within a call, one draw per (seed, element count, dtype, device): under
    torch's generator and correlated contract noise that is the same computation (every row passes, the
    restore and `layers` rows too), under iid the reuse artifact in every row that draws, single-op,
    in-process loop and `fit` alike (ours replays the same reuse and agrees bit for bit)."""
    from standins.mutants import make_mutant
    clone = make_mutant(tmp_path, "reuse-equal-size-every-draw")
    result = run_parity(Options(ref=str(clone), target="es-at-scale", devices=("cpu",), dtypes=("f32", "bf16"),
                                schemes=("iid", "correlated"), iterations=1, small=True,
                                out=str(tmp_path / "out"), quiet=True))
    frame = result.frame
    drawing_iid = frame["op"].isin(["perturb", "restore", "update", "loop", "fit"]) & (frame["scheme"] == "iid")
    assert set(frame.loc[drawing_iid, "op"]) == {"perturb", "restore", "update", "loop", "fit"}
    wrong = frame.loc[drawing_iid & (frame["status"] != "artifact"), ["case", "status", "detail"]]
    assert wrong.empty, wrong.to_string()
    assert all("ours with the same reuse agrees bit for bit" in d for d in frame.loc[drawing_iid, "detail"])
    others = frame.loc[~drawing_iid & (frame["status"] != "pass"), ["case", "status", "detail"]]
    assert others.empty, others.to_string()


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(LOOP_REUSE_EQUIVALENTS))
def test_a_reuse_in_one_call_of_a_loop_is_replayed_call_by_call(tmp_path, name):
    """A reference that reuses an equal-size draw in ONE of its calls (es-at-scale's perturb, es-awd's
    restore): under torch's generator and correlated noise nothing changes, so every correlated and native
    row passes; under iid each row whose draws show it is the reuse artifact, loop rows included, because
    ours replays the reuse the hook recorded call by call (per iteration, per member). One map for the
    whole case made our restore reuse too, and the loop rows failed ("rewards first differ ...")."""
    target = LOOP_REUSE_EQUIVALENTS[name][0]
    clone = make_loop_mutant(tmp_path, name)
    result = run_parity(Options(ref=str(clone), target=target, devices=("cpu",), dtypes=("f32",),
                                schemes=("iid", "correlated"), iterations=1, small=True,
                                out=str(tmp_path / "out"), quiet=True))
    frame = result.frame
    loops = frame["op"].isin(adapters.get(target).loop_ops + ("loop",))
    iid = frame["scheme"] == "iid"
    assert (frame.loc[loops & iid, "status"] == "artifact").all() and (loops & iid).sum() >= 1, \
        frame.loc[loops & iid, ["case", "status", "detail"]].to_string()
    assert all("ours with the same reuse agrees bit for bit" in d for d in frame.loc[loops & iid, "detail"])
    wrong = frame.loc[~frame["status"].isin(["pass", "artifact"]) | (~iid & (frame["status"] != "pass")),
                      ["case", "status", "detail"]]
    assert wrong.empty, wrong.to_string()


def test_reuse_plan_maps_each_call_of_a_tape_to_its_own_reuse():
    """ReusePlan.from_tape: each member's perturb and restore and each update take the map of their own
    call's undrawn slots (compare.reuse_sources); an evaluation or iteration the reference did not make maps
    nothing; a tape without any undrawn slot (or without the record) gives no plan."""
    from esverify.oracle.reuse_plan import CallOrderPlan, ReusePlan
    layout = [("f32", (2, 3)), ("f32", (6,)), ("f32", (2, 3)), ("bf16", (2, 3))]
    tape = {"iterations": [
        {"members": [{"missing": [2], "restore_missing": []}, {"missing": [], "restore_missing": [1, 2]}],
         "update": {"missing": [3]}},
        {"members": [{"missing": [], "restore_missing": []}], "update": {"missing": []}},
        {"members": [{"missing": [2]}], "update": None}]}     # evaluations after the last update: not a step
    plan = ReusePlan.from_tape(tape, layout)
    assert plan.perturb(0, 0) == {2: 0} and plan.restore(0, 0) == {}
    assert plan.perturb(0, 1) == {} and plan.restore(0, 1) == {1: 0, 2: 0}
    assert plan.update(0) == {3: 0} and plan.update(1) == {} and plan.update(2) == {}
    assert plan.perturb(0, 5) == {} and plan.perturb(2, 0) == {} and len(plan.iterations) == 2
    quiet = {"iterations": [{"members": [{"missing": [], "restore_missing": []}], "update": {"missing": []}}]}
    assert ReusePlan.from_tape(quiet, layout) is None
    assert ReusePlan.from_tape({"iterations": [{"members": [{}], "update": {"seeds": []}}]}, layout) is None
    order = CallOrderPlan([[2], [], [1, 2]], layout)
    assert [order.next() for _ in range(4)] == [{2: 0}, {}, {1: 0, 2: 0}, {}]


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted({**LOOP_EQUIVALENTS, **LOOP_UNSEEN}))
def test_loop_equivalents_and_unseen_faults_pass_every_row(loop_catalog, name):
    """The catalogued equivalents and known false passes (each with its reason) pass every row as the mutants
    run them: one that fails now is seen by the rows and belongs in LOOP_MUTANTS with its expected rows."""
    target = {**LOOP_EQUIVALENTS, **LOOP_UNSEEN}[name][0]
    frame, code, _ = loop_catalog[name]
    if loop_rows_only(name):
        assert set(frame["op"]) == set(adapters.get(target).loop_ops)
    assert (frame["status"] == "pass").all(), frame.loc[frame["status"] != "pass", ["case", "detail"]].to_string()
    assert code == 0


def test_engine_precision_rounds_the_weights_before_the_reward():
    """A stand-in engine computes its reward on its weights rounded to the precision it was launched with
   : float16 and bfloat16 give other rewards than float32 on the same weights, and our reward in
    the documented precision is the child's bit for bit."""
    import importlib.util
    import torch
    from esverify.oracle.rewards import loop_reward
    spec = importlib.util.spec_from_file_location("loop_stubs_under_test", oracles_dir() / "loop_stubs.py")
    stubs = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(stubs)
    g = torch.Generator().manual_seed(5)
    weights = [torch.randn(7, 3, generator=g) * 0.1, torch.randn(5, generator=g, dtype=torch.float64)]
    by = {}
    for name in ("float32", "float16", "bfloat16", "auto"):
        dtype = stubs.precision_dtype(name)
        by[name] = loop_reward(weights, 0.01, dtype)
        rounded = weights if dtype is None else [w.to(dtype) for w in weights]
        assert np.float64(by[name]).tobytes() == np.float64(loop_reward(rounded, 0.01)).tobytes()
    assert len({np.float64(v).tobytes() for v in (by["float32"], by["float16"], by["bfloat16"])}) == 3
    assert by["auto"] == loop_reward(weights, 0.01)      # the weights' own dtypes (one is f64)
    assert stubs.precision_dtype("fp16") is torch.float16 and stubs.precision_dtype(torch.bfloat16) is torch.bfloat16
    assert stubs.precision_name("bf16") == "bfloat16"
    with pytest.raises(ValueError, match="unknown precision 'float8'"):
        stubs.precision_dtype("float8")


def test_loop_global_seed_runs_the_fallback_and_a_given_seed():
    """f32 rows hand global seed 0 (the reference's `or 42` runs), the others a seed that is not the fallback,
    so a changed fallback and an ignored seed both show (loop mutants seed-fallback-changed, global-seed-ignored)."""
    from esverify.oracle.loop_rows import loop_command, loop_global_seed
    for target, first in (("es-at-scale", 0), ("es-awd", 1)):
        for dtype, run_seed, want in (("f32", 42, 0), ("f32", 7, 0), ("bf16", 42, 43), ("bf16", 0, 43),
                                      ("bf16", 7, 7), ("mixed", 123, 123), ("mixed", 42, 43)):
            case = adapters.get(target).loop_cases("cpu", dtype, "correlated", 7, 0.001, 0.0005, 1)[0]
            assert loop_global_seed(case, run_seed) == want, (target, dtype, run_seed)
            command = loop_command(case, want)
            assert command["global_seed"] == want
            # the table holds the reference's first draw: default_rng((global_seed or 42) + first iteration)
            drawn = np.random.default_rng((want or 42) + first).integers(0, 2 ** 30, size=case.population)
            assert {str(int(s)) for s in drawn} <= set(command["handles"]), (target, dtype, run_seed)


def test_functions_of_names_methods_and_keeps_nested_bodies_apart(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(oracles_dir()))
    import child_coverage as child_loops   # oracles/child_coverage.py: imported here only to test its pure helper
    source = tmp_path / "m.py"
    source.write_text(textwrap.dedent('''
        def top():
            """doc"""
            def inner():
                return 1
            return inner

        class K:
            def method(self):
                return 2
    '''))
    found = {name: (first, last, nested) for name, first, last, nested in child_loops.functions_of(source)}
    assert set(found) == {"top", "top.inner", "K.method"}
    first, last, nested = found["top"]
    assert (first, last) == (3, 6) and nested == [(4, 5)]
    assert found["K.method"][:2] == (10, 10)


@pytest.mark.slow   # 3 s a run (--durations, 2026-12-03): out of the fast tier
@pytest.mark.parametrize("line_coverage, installed", [(True, False), (False, True), (True, True)])
def test_child_without_coverage_still_lists_the_functions_that_ran(tmp_path, line_coverage, installed):
    """The child's Python often lacks coverage.py: the function table comes from the
    interpreter itself, so no "unknown whether ... ran" appears on a working setup. Line counts come
    from coverage.py only with --line-coverage (a trace function slows the children): the
    coverage section's `lines` column then holds each function's executed lines, else it is blank."""
    fake = tmp_path / "nocov" / "coverage"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("raise ImportError('coverage.py is not installed here')\n")
    import os
    env = {"PYTHONPATH": os.pathsep.join([str(fake.parent)] + [p for p in [os.environ.get("PYTHONPATH")] if p])} \
        if not installed else {}
    result = run_parity(Options(ref=AT_SCALE, target="es-at-scale", devices=("cpu",), dtypes=("f32",),
                                schemes=("iid",), iterations=1, small=True, case="*/fit/*", child_env=env,
                                out=str(tmp_path / "out"), quiet=True, line_coverage=line_coverage))
    assert list(result.frame["status"]) == ["pass"] and result.exit_code == 0
    warnings = result.metadata["warnings"]
    assert not any("unknown whether" in w or "did not run" in w for w in warnings), warnings
    coverage = result.metadata["coverage"]["es-at-scale"]
    assert coverage["how"].startswith("sys.monitoring" if sys.version_info >= (3, 12)
                                      else "profile hooks (cProfile's recorder)"), coverage["how"]
    assert ("coverage.py is not installed for the child" in coverage["how"]) is (line_coverage and not installed)
    assert coverage["reached_not_run"] == [] and coverage["error"] == ""
    frame = pd.read_csv(tmp_path / "out" / "parity-coverage.csv")
    counted = line_coverage and installed
    assert frame["lines"].notna().all() if counted else frame["lines"].isna().all()
    assert (coverage["lines"] is not None) is counted
    if counted:   # a function ran exactly when some line of its own ran (fit's body is more than a line)
        assert ((frame["lines"] > 0) == frame["ran"]).all()
        assert int(frame.set_index("function").loc["EvolutionStrategiesTrainer.fit", "lines"]) > 1
    ran = {(r.file, r.function) for r in frame.itertuples() if r.ran}
    for name in ("EvolutionStrategiesTrainer.__init__", "EvolutionStrategiesTrainer.fit",
                 "EvolutionStrategiesTrainer.eval_step", "EvolutionStrategiesTrainer.train_step"):
        assert ("es_at_scale/trainer/es_trainer.py", name) in ran, name
    assert ("es_at_scale/utils/worker_extension.py", "WorkerExtension.init_inter_engine_group") in ran
    # launch_engines is a seam of ours: the reference's own never runs
    assert ("es_at_scale/trainer/es_trainer.py", "EvolutionStrategiesTrainer.launch_engines") not in ran


@pytest.mark.slow   # 3 s (--durations, 2026-12-03): out of the fast tier
def test_worker_numerics_fault_is_named_at_the_parameters_after_the_update(tmp_path):
    """A fault that changes no seed, reward or coefficient (the update fused, single-op mutant) shows in
    the loop as the parameters after the first update, with the slot and both bit patterns."""
    from standins.mutants import make_mutant
    clone = make_mutant(tmp_path, "fma-update")
    result = run_parity(Options(ref=str(clone), target="es-at-scale", devices=("cpu",), dtypes=("f32",),
                                schemes=("iid",), iterations=1, small=True, case="*/fit/*",
                                out=str(tmp_path / "out"), quiet=True))
    row = result.frame.iloc[0]
    assert row["status"] == "fail" and row["mismatches"] > 0
    assert "fit: iteration 0: parameters after the update:" in row["detail"]
    from esverify.oracle.paramsets import SMALL_SHAPES
    slot = row["first_mismatch_index"].split("[")[0]
    assert slot in {name for name, _ in SMALL_SHAPES} and row["first_mismatch_ours"].startswith("0x")


@pytest.mark.parametrize("op", LOOP_OPS)
def test_loop_command_is_built_before_our_side_and_maps_every_seed_our_loop_draws(op):
    """The child starts on the schedule's table while our side runs: the table must already hold every seed
    our tape hands to the update (each mapped to itself, the 30-bit seed being the member seed)."""
    from esverify.oracle import paramsets
    from esverify.oracle.loop_rows import loop_command, loop_updates, run_ours
    target = "es-at-scale" if op == "fit" else "es-awd"
    case = next(c for c in adapters.get(target).loop_cases("cpu", "f32", "correlated", 7, 0.001, 0.0005, 2) if c.op == op)
    names, tensors = paramsets.build("f32", False, "base")
    tape = run_ours(case, names, tensors, 5, "poly32", None)
    command = loop_command(case, 5)
    assert len(tape["iterations"]) == tape["updates"] == loop_updates(case) == (3 if op == "fit" else 2)
    drawn = {s for it in tape["iterations"] for s in it["update"]["seeds"]}
    assert len(drawn) >= len(tape["iterations"]) and all(0 <= s < 2 ** 30 for s in drawn)
    assert {str(s): f"0x{s:016x}" for s in drawn}.items() <= command["handles"].items()
    assert command["global_seed"] == 5 and command["iterations"] == 2 and command["noise"] == "contract"


#: --timeout of the hanging-loop test: the hung row waits it out (wall time, no CPU), the other rows each
#: run one iteration of a small loop (0.1-0.3 s of CPU; a restarted child's start-up has a timeout of its
#: own). The children fork from the session's warm start server with numba's kernels loaded: a fresh child
#: on an empty numba cache took 3-4 s for its first row (2026-12-08), which this timeout would not allow
HANG_TIMEOUT = 4.0


@pytest.mark.slow   # 10 s with the 4 s timeout (2026-12-08; 19 s with 12 s, 29 s with 20 s): out of the fast tier
def test_a_hanging_loop_is_a_timeout_row_and_the_next_row_still_runs(tmp_path):
    """The loop rows share the single-op rows' request path (Runner._exchange): a loop that hangs is killed
    with its process group at --timeout, named as a timeout, and the restarted child runs the next row."""
    from standins.mutants import make_variant
    clone = make_variant(tmp_path, "es-awd", [("es.py", "def main(args):\n", "def main(args):\n"
                                                "    if args.mirror_sampling:\n"
                                                "        import time as _clock\n"
                                                "        _clock.sleep(600)\n")])
    result = run_parity(Options(ref=str(clone), target="es-awd", devices=("cpu",), dtypes=("f32",),
                                schemes=("correlated",), noises=("contract",), iterations=1, small=True,
                                case="*/main*", timeout=HANG_TIMEOUT, out=str(tmp_path / "out"), quiet=True))
    rows = {r["op"]: (r["status"], r["detail"]) for _, r in result.frame.iterrows()}
    assert rows["main-mirror"] == ("error", "timeout: main-mirror did not finish within 4 s; the child's process "
                                            "group was killed and the child restarted")
    assert {op: status for op, (status, _) in rows.items() if op != "main-mirror"} == \
        {op: "pass" for op in MAIN_VARIANTS if op != "main-mirror"}
    assert result.exit_code == 1
