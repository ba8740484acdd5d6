"""`esverify replay` (docs/replay.md): bit-for-bit replays of an es-awd-style loop on the stand-in's own
numerics and of clean-room trainer runs; tampering and broken logs fail with the right message;
results do not depend on shard or worker counts; an interrupted replay resumes."""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from safetensors.torch import load_file, save_file

sys.path.insert(0, str(Path(__file__).parent))
from replay_runs import awd_run, trainer_run  # noqa: E402

from esverify import registry  # noqa: E402
from esverify.cli import main  # noqa: E402
from esverify.references.es_awd.runlog import RUNLOG_FORMAT as AWD_FORMAT  # noqa: E402
from esverify.references.es_awd.runlog import is_awd_log, read_awd_log  # noqa: E402
from esverify.replay import ReplayError, replay  # noqa: E402
from esverify.replay.log import LogError, RunLogFormat, read_log  # noqa: E402
from esverify.replay.units import plan_units  # noqa: E402
from esverify.replay.weights import open_weights  # noqa: E402


@pytest.fixture(scope="module", autouse=True)
def _stop_resource_tracker():
    """A spawn pool starts multiprocessing's per-interpreter resource tracker, which lives as long as
    pytest; stop it so that the session's leak check sees only processes a test really left."""
    yield
    from multiprocessing import resource_tracker
    resource_tracker._resource_tracker._stop()


def _replay(run, tmp_path, name="state", **kw):
    kw.setdefault("workers", 1)
    return replay(run["base"], run["log"], run["final"], state_dir=tmp_path / name, **kw)


def _bits(path):
    w = open_weights(path)
    return {n: w.read(n).view(torch.int16 if w.info(n)[1] != torch.float32 else torch.int32).tolist()
            for n in w.names()}


@pytest.fixture(scope="module")
def awd(tmp_path_factory):
    return awd_run(tmp_path_factory.mktemp("awd"), dtype=torch.float32, engines=2, population=6, mirror=True,
                   iterations=3)


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    return trainer_run(tmp_path_factory.mktemp("trainer"), profile="es-awd", dtype=torch.float32)


@pytest.mark.parametrize("dtype,mirror,engines,decay,caching", [
    (torch.float32, True, 2, "none", False), (torch.bfloat16, True, 2, "l2", True),
    (torch.float16, False, 3, "l1", False), (torch.float32, False, 4, "l2", False),
    (torch.bfloat16, True, 1, "l1", False)])
def test_awd_loop_replays_bit_for_bit_and_naive_does_not(tmp_path, dtype, mirror, engines, decay, caching):
    run = awd_run(tmp_path, dtype=dtype, mirror=mirror, engines=engines, decay=decay, caching=caching,
                  lam=0.5 if decay != "none" else 0.0, iterations=4, population=6 if mirror else 8)
    report, code = _replay(run, tmp_path, out=tmp_path / "rebuilt.safetensors")
    assert (code, report["verdict"], report["mismatches"]) == (0, "bit-equal", 0)
    assert report["naive_mismatches"] > 0          # the engine residue is real: updates alone are not the run
    assert report["elements"] == 33 * 7 + 7 + 7 * 5 + 64
    assert any("num_engines" in n for n in report["notes"]) and any("CUDA" in n for n in report["notes"])
    saved = torch.load(run["final"], weights_only=True)
    rebuilt = load_file(tmp_path / "rebuilt.safetensors")
    assert set(rebuilt) == set(saved)
    for k in saved:
        assert rebuilt[k].dtype == saved[k].dtype and torch.equal(rebuilt[k].view(torch.uint8),
                                                                   saved[k].view(torch.uint8))


def test_num_engines_changes_the_checkpoint(awd, tmp_path):
    """The same seeds and coefficients with another engine count are other weights (docs/replay.md §3)."""
    log = _copy_log(awd, tmp_path)
    args = json.loads((log / "args.json").read_text())
    args["num_engines"] = 3
    (log / "args.json").write_text(json.dumps(args))
    report, code = replay(awd["base"], log, awd["final"], workers=1, state_dir=tmp_path / "s")
    assert code == 1 and report["mismatches"] > 0


@pytest.mark.parametrize("profile,dtype,antithetic,decay,noise,scheme", [
    ("es-awd", torch.float32, True, "none", "contract", "correlated"),
    ("es-at-scale", torch.bfloat16, False, "l2", "contract", "iid"),
    ("es-awd", torch.float16, True, "l1", "contract", "correlated"),
    ("es-at-scale", torch.float32, True, "l1", "torch", "correlated")])
def test_trainer_run_replays_bit_for_bit(tmp_path, profile, dtype, antithetic, decay, noise, scheme):
    run = trainer_run(tmp_path, profile=profile, dtype=dtype, antithetic=antithetic, decay=decay,
                      lam=0.5 if decay != "none" else 0.0, noise=noise, scheme=scheme)
    report, code = _replay(run, tmp_path, shard_elements=50)
    assert (code, report["mismatches"]) == (0, 0)
    assert report["model"]["noise"] == ("native" if noise == "torch" else "contract")
    assert report["model"]["profile"] == profile and report["naive_mismatches"] > 0
    # every member was perturbed and restored on the trainer's own weights, in member order
    first = json.loads((run["log"] / "iteration_updates" / "iteration_000000.json").read_text())
    n = 6 // 2 if antithetic else 6
    assert first["evaluated_on_saved"] == ([[k // 2, 1 - 2 * (k % 2)] for k in range(6)] if antithetic
                                           else [[k, 1] for k in range(n)])


def test_trainer_run_with_the_wrong_profile_differs(trained, tmp_path):
    report, code = _replay(trained, tmp_path, profile="es-at-scale")
    assert code == 1 and report["mismatches"] > 0


def test_one_element_edit_of_the_checkpoint_is_named(awd, tmp_path):
    sd = torch.load(awd["final"], weights_only=True)
    edited = sd["w1"].clone()
    edited.view(-1)[100] = edited.view(-1)[100].nextafter(torch.tensor(float("inf")))
    sd["w1"] = edited
    torch.save(sd, tmp_path / "tampered.pt")
    report, code = replay(awd["base"], awd["log"], tmp_path / "tampered.pt", workers=1, state_dir=tmp_path / "s")
    assert (code, report["verdict"], report["mismatches"]) == (1, "differs", 1)
    [bad] = [t for t in report["tensors"] if t["replay"]["mismatches"]]
    first = bad["replay"]["first"]
    assert (bad["name"], first["index"], first["ulp"], bad["replay"]["max_ulp"]) == ("w1", 100, 1, 1)
    # the sides are named for what they are: the checkpoint under test holds the edited bits
    assert sorted(first) == ["checkpoint", "index", "replayed", "ulp"] and report["format"].endswith("/2")
    assert first["checkpoint"].startswith(f"0x{edited.view(-1)[100:101].view(torch.int32).item() & 0xffffffff:08x}")
    assert "w1" in report["text"] and "[100]" in report["text"] and "1 ulp" in report["text"]
    line = next(ln for ln in report["text"].splitlines() if "[100]" in ln)
    assert f"checkpoint {first['checkpoint']}" in line and f"replayed {first['replayed']}" in line
    assert "expected" not in report["text"] and "the checkpoint under test" in report["text"]


def _copy_log(run, tmp_path) -> Path:
    import shutil
    dst = tmp_path / "log"
    shutil.copytree(run["log"], dst)
    return dst


def test_dropped_iteration_file_is_an_error_naming_it(awd, tmp_path):
    log = _copy_log(awd, tmp_path)
    (log / "iteration_updates" / "iteration_000002.json").unlink()
    with pytest.raises(ReplayError, match=r"iteration_updates/iteration_000002\.json: missing"):
        replay(awd["base"], log, awd["final"], workers=1, state_dir=tmp_path / "s")
    assert not (tmp_path / "s").exists()            # nothing written for a bad input


def test_dropped_last_iteration_is_caught_by_num_iterations(awd, tmp_path):
    log = _copy_log(awd, tmp_path)
    (log / "iteration_updates" / "iteration_000003.json").unlink()
    with pytest.raises(LogError, match=r"iteration_000003\.json: missing"):
        read_awd_log(log)


def test_swapped_pair_of_seeds_differs(awd, tmp_path):
    log = _copy_log(awd, tmp_path)
    path = log / "iteration_updates" / "iteration_000002.json"
    doc = json.loads(path.read_text())
    assert doc["seeds"][0] != doc["seeds"][1]
    doc["seeds"][0], doc["seeds"][1] = doc["seeds"][1], doc["seeds"][0]
    path.write_text(json.dumps(doc))
    report, code = replay(awd["base"], log, awd["final"], workers=1, state_dir=tmp_path / "s")
    assert code == 1 and report["verdict"] == "differs"
    assert all(t["replay"]["mismatches"] > 0 for t in report["tensors"])   # every tensor takes every seed's noise


def test_wrong_alpha_differs_and_missing_alpha_is_an_error(awd, tmp_path):
    log = _copy_log(awd, tmp_path)
    args = json.loads((log / "args.json").read_text())
    (log / "args.json").write_text(json.dumps(dict(args, alpha=args["alpha"] * 1.5)))
    report, code = replay(awd["base"], log, awd["final"], workers=1, state_dir=tmp_path / "s")
    assert code == 1 and report["mismatches"] > report["elements"] // 2
    del args["alpha"]
    (log / "args.json").write_text(json.dumps(args))
    with pytest.raises(ReplayError, match=r"args\.json: alpha missing"):
        replay(awd["base"], log, awd["final"], workers=1, state_dir=tmp_path / "s2")


@pytest.mark.parametrize("edit,message", [
    (lambda d: d.update(update_coefficients=d["update_coefficients"][:-1]),
     r"iteration_000001\.json: 3 seeds but 2 update_coefficients"),
    (lambda d: d.update(seeds=d["seeds"][:-1], update_coefficients=d["update_coefficients"][:-1]),
     r"iteration_000001\.json: 2 seeds, args\.json says population_size/2 = 3"),
    (lambda d: d.update(iteration=7), r"iteration_000001\.json: holds iteration 7"),
    (lambda d: d["seeds"].__setitem__(0, -1), r"iteration_000001\.json: seeds\[0\] = -1")])
def test_inconsistent_iteration_records_name_the_file(awd, tmp_path, edit, message):
    log = _copy_log(awd, tmp_path)
    path = log / "iteration_updates" / "iteration_000001.json"
    doc = json.loads(path.read_text())
    edit(doc)
    path.write_text(json.dumps(doc))
    with pytest.raises(LogError, match=message):
        read_awd_log(log)


def test_checkpoint_of_another_shape_differs_and_a_missing_tensor_is_an_error(awd, tmp_path):
    sd = torch.load(awd["final"], weights_only=True)
    sd["w1"] = sd["w1"][:-1].clone()
    torch.save(sd, tmp_path / "other.pt")
    report, code = replay(awd["base"], awd["log"], tmp_path / "other.pt", workers=1, state_dir=tmp_path / "s0")
    (w1,) = [t for t in report["tensors"] if t["replay"]["mismatches"]]
    assert (code, w1["name"], w1["replay"]["mismatches"]) == (1, "w1", 33 * 7)
    assert "shape (32, 7) where the replay" in w1["replay"]["layout"] and "(33, 7)" in w1["replay"]["layout"]
    assert "other.pt: tensor w1: shape (32, 7)" in report["text"]
    del sd["w1"]
    torch.save(sd, tmp_path / "fewer.pt")
    with pytest.raises(ReplayError, match=r"fewer\.pt: has no tensor 'w1'"):
        replay(awd["base"], awd["log"], tmp_path / "fewer.pt", workers=1, state_dir=tmp_path / "s")


def test_weights_only_loading_refuses_pickled_code(awd, tmp_path):
    import pickle

    class Evil:
        def __reduce__(self):
            return (os.system, ("true",))
    torch.save({"w1": Evil()}, tmp_path / "evil.pt", pickle_module=pickle)
    with pytest.raises(ReplayError, match=r"evil\.pt: not a torch state_dict loadable with weights_only=True"):
        replay(awd["base"], awd["log"], tmp_path / "evil.pt", workers=1, state_dir=tmp_path / "s")


def test_hugging_face_folder_and_sharded_index(awd, tmp_path):
    sd = torch.load(awd["final"], weights_only=True)
    folder = tmp_path / "hf"
    folder.mkdir()
    names = list(sd)
    save_file({k: sd[k] for k in names[:2]}, folder / "model-00001-of-00002.safetensors")
    save_file({k: sd[k] for k in names[2:]}, folder / "model-00002-of-00002.safetensors")
    (folder / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {
        k: f"model-0000{1 if i < 2 else 2}-of-00002.safetensors" for i, k in enumerate(names)}}))
    report, code = replay(awd["base"], awd["log"], folder, workers=1, state_dir=tmp_path / "s")
    assert (code, report["mismatches"]) == (0, 0)


def test_safetensors_range_reads_match_whole_reads(awd):
    w = open_weights(awd["base"])
    whole = w.read("w1")
    for a, b in [(0, 1), (5, 40), (7, 14), (200, 231), (0, 231)]:
        assert torch.equal(w.read("w1", a, b), whole[a:b])


def test_units_whole_tensors_native_ranges_contract():
    tensors = [("a", (10, 3), torch.float32), ("n", (4,), torch.int64), ("z", (0,), torch.float32)]
    native = plan_units(tensors, "native", 7)
    assert [(u.name, u.start, u.end, u.kind) for u in native] == [("a", 0, 30, "replay"), ("n", 0, 4, "static"),
                                                                  ("z", 0, 0, "replay")]
    contract = plan_units(tensors, "contract", 7)
    assert [(u.start, u.end) for u in contract if u.name == "a"] == [(0, 7), (7, 14), (14, 21), (21, 28), (28, 30)]


def _essence(report):
    return [(t["name"], t["replay"], t["naive"]) for t in report["tensors"]]


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(shard=st.integers(1, 400), workers=st.sampled_from([1, 1, 2]))
@pytest.mark.slow   # 5 s (--durations, 2026-12-03): out of the fast tier
def test_results_identical_for_any_shard_and_worker_count(tmp_path_factory, trained, shard, workers):
    tmp = tmp_path_factory.mktemp("prop")
    tampered = tmp / "tampered.pt"       # something to find, so that equal reports say more than "0 == 0"
    sd = torch.load(trained["final"], weights_only=True)
    sd["c"].view(-1)[123] += 1.0
    torch.save(sd, tampered)
    ref, _ = replay(trained["base"], trained["log"], tampered, workers=1, state_dir=tmp / "ref",
                    shard_elements=1 << 20, out=tmp / "ref.safetensors")
    got, code = replay(trained["base"], trained["log"], tampered, workers=workers, state_dir=tmp / "got",
                       shard_elements=shard, out=tmp / "got.safetensors")
    assert code == 1 and _essence(got) == _essence(ref)
    assert got["tensors"][2]["replay"]["first"]["index"] == 123
    assert _bits(tmp / "got.safetensors") == _bits(tmp / "ref.safetensors")


def test_interrupted_replay_resumes_from_verified_units(trained, tmp_path):
    full, _ = _replay(trained, tmp_path, name="full", shard_elements=64)
    seen = []

    def stop(result):
        seen.append(result["unit"])
        if len(seen) == 2:
            raise KeyboardInterrupt
    with pytest.raises(KeyboardInterrupt):
        _replay(trained, tmp_path, name="resume", shard_elements=64, after_unit=stop)
    assert len(list((tmp_path / "resume" / "units").glob("unit-*.json"))) == 2
    assert not (tmp_path / "resume" / "report.json").exists()
    redone = []
    again, code = _replay(trained, tmp_path, name="resume", shard_elements=64,
                          after_unit=lambda r: redone.append(r["unit"]))
    assert code == 0 and again["resumed_units"] == 2 and len(redone) == full["units"] - 2
    assert not set(redone) & set(seen) and _essence(again) == _essence(full)


def test_state_of_another_replay_is_refused(trained, awd, tmp_path):
    _replay(trained, tmp_path, name="s")
    with pytest.raises(ReplayError, match="holds the state of another replay"):
        _replay(awd, tmp_path, name="s")


def test_cli_exit_codes_and_report(awd, tmp_path):
    runner = CliRunner()
    base = ["replay", "--base", str(awd["base"]), "--log", str(awd["log"]), "--workers", "1"]
    ok = runner.invoke(main, base + ["--expect", str(awd["final"]), "--state-dir", str(tmp_path / "a"),
                                     "--report", str(tmp_path / "r.json")])
    assert ok.exit_code == 0, ok.output
    assert "verdict: BIT-EQUAL" in ok.output and "naive replay" in ok.output
    assert json.loads((tmp_path / "r.json").read_text())["verdict"] == "bit-equal"
    sd = torch.load(awd["final"], weights_only=True)
    sd["emb"][3] = 0.0
    torch.save(sd, tmp_path / "t.pt")
    bad = runner.invoke(main, base + ["--expect", str(tmp_path / "t.pt"), "--state-dir", str(tmp_path / "b")])
    assert bad.exit_code == 1 and "DIFFERS" in bad.output and "emb" in bad.output
    page = (tmp_path / "b" / "report.html").read_text()   # the same report for a browser, sides named
    assert "<th>replayed</th><th>checkpoint</th>" in page and "exit 1" in page and "emb" in page
    assert "<th>replayed</th>" in (tmp_path / "a" / "report.html").read_text()
    usage = runner.invoke(main, base + ["--expect", str(awd["final"]), "--noise", "nope"])
    assert usage.exit_code == 2
    log = _copy_log(awd, tmp_path)
    (log / "args.json").write_text("{")
    setup = runner.invoke(main, ["replay", "--base", str(awd["base"]), "--log", str(log), "--expect",
                                 str(awd["final"]), "--state-dir", str(tmp_path / "c")])
    assert setup.exit_code == 2 and "args.json: not valid JSON" in setup.output


def test_ray_missing_says_how_to_install(awd, tmp_path, monkeypatch):
    import builtins
    real = builtins.__import__

    def no_ray(name, *a, **k):
        if name == "ray" or name.startswith("ray."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)   # what a missing package raises
        return real(name, *a, **k)
    monkeypatch.setattr(builtins, "__import__", no_ray)
    with pytest.raises(ReplayError, match=r"--ray needs Ray, which is not installed: pip install ray"):
        _replay(awd, tmp_path, ray="auto")


def test_base_in_another_precision_is_cast_like_the_run_loading_it(tmp_path):
    """A bf16 run from f32 base weights: the base is cast to the checkpoint's dtype (docs/replay.md §3)."""
    run = awd_run(tmp_path, dtype=torch.bfloat16, iterations=2)
    wide = {k: v.float() for k, v in load_file(run["base"]).items()}
    save_file(wide, tmp_path / "base-f32.safetensors")
    report, code = replay(tmp_path / "base-f32.safetensors", run["log"], run["final"], workers=1,
                          state_dir=tmp_path / "s")
    assert (code, report["mismatches"]) == (0, 0) and {t["dtype"] for t in report["tensors"]} == {"bfloat16"}


def test_integer_buffers_are_compared_as_they_are(awd, tmp_path):
    base = load_file(awd["base"])
    save_file(dict(base, steps=torch.arange(5)), tmp_path / "base.safetensors")
    sd = torch.load(awd["final"], weights_only=True)
    torch.save(dict(sd, steps=torch.arange(5)), tmp_path / "same.pt")
    report, code = replay(tmp_path / "base.safetensors", awd["log"], tmp_path / "same.pt", workers=1,
                          state_dir=tmp_path / "a")
    assert code == 0 and [t["kind"] for t in report["tensors"] if t["name"] == "steps"] == ["static"]
    torch.save(dict(sd, steps=torch.tensor([0, 1, 9, 3, 4])), tmp_path / "edited.pt")
    report, code = replay(tmp_path / "base.safetensors", awd["log"], tmp_path / "edited.pt", workers=1,
                          state_dir=tmp_path / "b")
    [steps] = [t for t in report["tensors"] if t["name"] == "steps"]
    assert code == 1 and steps["replay"]["mismatches"] == 1 and steps["replay"]["first"]["index"] == 2


def test_progress_bar_counts_units(trained, tmp_path, capsys):
    _replay(trained, tmp_path, shard_elements=100, progress=True)
    err = capsys.readouterr().err
    assert "replay" in err and "6/6" in err   # w: 120 elements, b: 37, c: 300 in units of 100


@pytest.mark.parametrize("batching", ["members", "passes"])
def test_batching_matters_only_when_engines_do_not_divide_the_seeds(tmp_path, batching):
    """3 seeds on 2 engines: engine 0 evaluates (s0+, s2+, s1-) when batches run over the whole member
    list, (s0+, s2+, s0-, s2-) when they run within each sign's pass (docs/replay.md §3)."""
    run = awd_run(tmp_path, engines=2, population=6, mirror=True, iterations=3, batching=batching)
    other = "passes" if batching == "members" else "members"
    right, code = _replay(run, tmp_path, name="right", batching=batching)
    assert (code, right["mismatches"]) == (0, 0)
    wrong, code = _replay(run, tmp_path, name="wrong", batching=other)
    assert code == 1 and wrong["mismatches"] > 0 and any(f"--batching {batching}" in n for n in wrong["notes"])
    even = awd_run(tmp_path / "even", engines=3, population=6, mirror=True, iterations=2, batching=batching)
    for b in ("members", "passes"):   # 3 seeds on 3 engines: both readings are the same
        assert _replay(even, tmp_path, name=f"even-{b}", batching=b)[1] == 0


def test_evaluated_positions_of_both_batchings(awd):
    log = read_awd_log(awd["log"])
    it = log.iterations[0]
    assert log.evaluated(it, "members") == [(0, 1), (2, 1), (1, -1)]
    assert log.evaluated(it, "passes") == [(0, 1), (2, 1), (0, -1), (2, -1)]


# ------------------------------------------- run-log formats: the core asks the registry, never names a reference
def test_the_awd_format_is_registered_and_claims_only_its_own_logs(awd, trained, tmp_path):
    assert registry.runlog_formats()["es-awd"] is AWD_FORMAT
    assert (AWD_FORMAT.replay, AWD_FORMAT.profile, AWD_FORMAT.first_iteration, AWD_FORMAT.engine_share) == \
        (None, "es-awd", 1, True)
    assert is_awd_log(awd["log"]) and not is_awd_log(trained["log"]) and not is_awd_log(tmp_path / "nowhere")
    log = _copy_log(awd, tmp_path)
    for text in ("{", "[]", '{"a": 1, "a": 2}', '{"esverify": {"format": "x"}}', '{"esverify": 3}'):
        (log / "args.json").write_text(text)
        assert not is_awd_log(log), text
    (log / "args.json").write_text('{"esverify": null}')   # a null block is no block, as read_log takes it
    assert is_awd_log(log)
    run_log = read_awd_log(awd["log"])
    assert (run_log.source, run_log.profile, run_log.noise, [it.number for it in run_log.iterations]) == \
        ("es-awd", None, None, [1, 2, 3])


def test_the_core_reads_a_log_without_a_block_only_through_a_format(awd):
    with pytest.raises(LogError, match=r"^args\.json: has no esverify block, so it is not a trainer log, and no "
                                       r"reference's run-log format recognises it"):
        read_log(awd["log"])


def test_the_awd_format_puts_batching_in_the_replays_identity(awd, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    members, _ = replay(awd["base"], awd["log"], awd["final"], workers=1, batching="members")
    passes, code = replay(awd["base"], awd["log"], awd["final"], workers=1, batching="passes")
    assert code == 0 and members["state_dir"] != passes["state_dir"]
    assert passes["model"]["source"] == "es-awd" and passes["model"]["residue"] == "engine 0 of 2, batching passes"


def test_a_format_with_only_a_name_and_detect_takes_the_defaults(awd, tmp_path, monkeypatch):
    """RunLogFormat's defaults: no profile of its own (then --profile is needed), the first iteration 0, no
    engine share: no num_engines note, the residue "logged per iteration", batching not in the identity."""
    plain = RunLogFormat(name="plain", detect=is_awd_log)
    monkeypatch.setattr(registry, "runlog_formats", lambda: {"plain": plain})
    with pytest.raises(ReplayError, match=r"iteration_000003\.json: iteration 3 is outside the run's iterations 0\.\.2"):
        _replay(awd, tmp_path, name="a", profile="es-awd")
    shifted = RunLogFormat(name="plain", detect=is_awd_log, first_iteration=1)
    monkeypatch.setattr(registry, "runlog_formats", lambda: {"plain": shifted})
    with pytest.raises(ReplayError, match=r"args\.json: names no numerics profile \(the replay needs one: give "
                                          r"--profile\)"):
        _replay(awd, tmp_path, name="b")
    assert not (tmp_path / "b").exists()
    monkeypatch.chdir(tmp_path)
    report, code = replay(awd["base"], awd["log"], awd["final"], workers=1, profile="es-awd", batching="passes")
    other, _ = replay(awd["base"], awd["log"], awd["final"], workers=1, profile="es-awd", batching="members")
    assert code == 0 and report["model"]["source"] == "plain" and report["model"]["residue"] == "logged per iteration"
    assert not any("num_engines" in n for n in report["notes"]) and other["state_dir"] == report["state_dir"]


def test_a_log_two_formats_recognise_is_refused_and_never_given_to_the_first(awd, tmp_path, monkeypatch):
    """Which format replays a log is never decided by the registry's order: two that detect it are a usage
    error naming both, before any work."""
    twin = RunLogFormat(name="twin", detect=is_awd_log, profile="es-awd")
    monkeypatch.setattr(registry, "runlog_formats", lambda: {"es-awd": AWD_FORMAT, "twin": twin})
    with pytest.raises(ReplayError, match=r"run log is recognised by more than one run-log format \(es-awd, twin\)"):
        _replay(awd, tmp_path, name="a")
    assert not (tmp_path / "a").exists()


def test_a_trainer_log_that_names_no_profile_needs_one(trained, tmp_path):
    log = _copy_log(trained, tmp_path)
    args = json.loads((log / "args.json").read_text())
    del args["esverify"]["profile"]
    (log / "args.json").write_text(json.dumps(args))
    with pytest.raises(ReplayError, match=r"args\.json: names no numerics profile"):
        replay(trained["base"], log, trained["final"], workers=1, state_dir=tmp_path / "s")
    report, code = replay(trained["base"], log, trained["final"], workers=1, state_dir=tmp_path / "s",
                          profile="es-awd")
    assert (code, report["model"]["profile"]) == (0, "es-awd")


def test_replay_profile_choices_come_from_the_registry_records():
    from esverify.replay.cli import replay as command
    [option] = [p for p in command.params if p.name == "profile"]
    assert list(option.type.choices) == registry.replay_profiles() == ["es-at-scale", "es-awd"]
    assert CliRunner().invoke(main, ["replay", "--base", ".", "--log", ".", "--expect", ".", "--profile",
                                     "es-paper"]).exit_code == 2
