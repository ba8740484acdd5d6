"""`esverify replay` cannot be fooled (issue 27): each kind of failure as a table over its variants.

Kinds: a checkpoint tensor of another dtype or shape is a difference (never a cast); resume is keyed on
the bytes each unit read; strict JSON in and out; every later failure is one line with a non-verdict
exit code; signals tear everything down; every safetensors dtype is read and the verdict does not
depend on the file format."""
from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

sys.path.insert(0, str(Path(__file__).parent))
from replay_runs import awd_run  # noqa: E402

from esverify.replay import replay  # noqa: E402


@pytest.fixture(scope="module", autouse=True)
def _stop_resource_tracker():
    yield
    from multiprocessing import resource_tracker
    resource_tracker._resource_tracker._stop()


@pytest.fixture(scope="module")
def awd(tmp_path_factory):
    return awd_run(tmp_path_factory.mktemp("awd"), dtype=torch.float32, engines=2, population=6, mirror=True,
                   iterations=2)


BUFFERS = {"steps": torch.tensor([5000000000, 1, -3], dtype=torch.int64),
           "mask": torch.tensor([True, False, True]),
           "scale": torch.tensor([0.5, 2.0, -1.0], dtype=torch.float64)}


@pytest.fixture(scope="module")
def buffered(awd, tmp_path_factory):
    """The awd run with integer, bool and f64 buffers in the base and the checkpoint (ES never changes them)."""
    folder = tmp_path_factory.mktemp("buffered")
    from safetensors.torch import load_file
    base = load_file(awd["base"])
    save_file({**base, **BUFFERS}, folder / "base.safetensors")
    final = torch.load(awd["final"], weights_only=True)
    torch.save({**final, **BUFFERS}, folder / "final.pt")
    return {"base": folder / "base.safetensors", "log": awd["log"], "final": folder / "final.pt", "sd": final}


def _run(run, expect, tmp_path, name="s", **kw):
    kw.setdefault("workers", 1)
    return replay(run["base"], run["log"], expect, state_dir=tmp_path / name, **kw)


# ------------------------------------------------------------------ kind 1: comparisons never convert

@pytest.mark.parametrize("name,tampered,dtypes", [
    ("steps", BUFFERS["steps"].to(torch.int32), ("int32", "int64")),      # 5000000000 wraps to 705032704
    ("steps", BUFFERS["steps"].to(torch.bool), ("bool", "int64")),
    ("steps", BUFFERS["steps"].to(torch.uint64) if hasattr(torch, "uint64") else None, ("uint64", "int64")),
    ("steps", BUFFERS["steps"].to(torch.float64), ("float64", "int64")),
    ("mask", BUFFERS["mask"].to(torch.uint8), ("uint8", "bool")),
    ("scale", BUFFERS["scale"].to(torch.int64), ("int64", "float64")),
    ("scale", BUFFERS["scale"].to(torch.float32), ("float32", "float64")),
    ("w1", None, ("float16", "float32")),        # a replayed tensor in another float dtype than the log's precision
    ("b1", None, ("float64", "float32"))])
def test_a_tensor_of_another_dtype_is_a_difference_naming_both(buffered, tmp_path, name, tampered, dtypes):
    sd = {**buffered["sd"], **BUFFERS}
    if tampered is None:
        tampered = sd[name].to(getattr(torch, dtypes[0]))
    sd[name] = tampered
    torch.save(sd, tmp_path / "t.pt")
    report, code = _run(buffered, tmp_path / "t.pt", tmp_path)
    bad = [t for t in report["tensors"] if t["replay"]["mismatches"]]
    assert (code, report["verdict"], [t["name"] for t in bad]) == (1, "differs", [name])
    assert bad[0]["replay"]["mismatches"] == bad[0]["elements"]
    assert f"dtype {dtypes[0]} where the replay has {dtypes[1]}" in bad[0]["replay"]["layout"]
    assert f"tensor {name}: dtype {dtypes[0]}" in report["text"]


def test_the_untampered_buffers_are_bit_equal(buffered, tmp_path):
    report, code = _run(buffered, buffered["final"], tmp_path)
    assert (code, report["mismatches"]) == (0, 0)
    sd = {**buffered["sd"], **BUFFERS}
    sd["steps"] = sd["steps"].clone()
    sd["steps"][0] += 1
    torch.save(sd, tmp_path / "t.pt")
    report, code = _run(buffered, tmp_path / "t.pt", tmp_path, name="s2")
    (t,) = [t for t in report["tensors"] if t["replay"]["mismatches"]]
    assert (code, t["name"], t["replay"]["first"]["index"]) == (1, "steps", 0)


# ------------------------------------------------------------------ kind 2: resume keyed on content

def _edit_in_place(path: Path, offset_from_end: int) -> None:
    """Flip one byte of `path` in place, keeping its size and restoring its access and modification times."""
    st = os.stat(path)
    with open(path, "r+b") as fh:
        fh.seek(st.st_size - offset_from_end)
        byte = fh.read(1)
        fh.seek(st.st_size - offset_from_end)
        fh.write(bytes([byte[0] ^ 0x01]))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert (os.stat(path).st_size, os.stat(path).st_mtime_ns) == (st.st_size, st.st_mtime_ns)


@pytest.mark.parametrize("which,fmt", [("expect", "safetensors"), ("expect", "pt"), ("base", "safetensors")])
def test_resume_reuses_a_unit_only_on_the_same_bytes(awd, tmp_path, which, fmt):
    """An in-place edit that keeps size and mtime (cp -p, touch -r, a restored backup) is re-verified."""
    from safetensors.torch import load_file
    run = dict(awd)
    final = torch.load(awd["final"], weights_only=True)
    if fmt == "safetensors":
        save_file({k: v.contiguous() for k, v in final.items()}, tmp_path / "final.safetensors")
        run["final"] = tmp_path / "final.safetensors"
    else:
        shutil.copy(awd["final"], tmp_path / "final.pt")
        run["final"] = tmp_path / "final.pt"
    shutil.copy(awd["base"], tmp_path / "base.safetensors")
    run["base"] = tmp_path / "base.safetensors"
    first, code = _run(run, run["final"], tmp_path, name="state")
    assert (code, first["resumed_units"]) == (0, 0)
    again, code = _run(run, run["final"], tmp_path, name="state")
    assert (code, again["resumed_units"], again["reverified_units"]) == (0, again["units"], 0)
    target = run["base"] if which == "base" else run["final"]
    if fmt == "pt":   # the last tensor's storage lies before the zip's central directory: edit inside it
        data = open(target, "rb").read()
        raw = final[list(final)[-1]].contiguous().view(torch.uint8).numpy().tobytes()
        offset = len(data) - data.rindex(raw)
    else:             # safetensors: the data region ends the file; its last byte belongs to the last tensor
        offset = 1
    _edit_in_place(target, offset)
    changed = load_file(target) if fmt == "safetensors" else torch.load(target, weights_only=True)
    assert any(not torch.equal(changed[k].view(torch.uint8) if changed[k].dtype != torch.bool else changed[k],
                               (load_file(awd["base"]) if which == "base" else final)[k].view(torch.uint8))
               for k in changed)
    edited, code = _run(run, run["final"], tmp_path, name="state")
    assert code == 1 and edited["verdict"] == "differs"
    assert edited["reverified_units"] == 1 and edited["resumed_units"] == edited["units"] - 1
    assert "re-verified: 1 units" in edited["text"]


# ------------------------------------------------------------------ kind 3: strict JSON in, strict JSON out

def _copy_log(run, tmp_path) -> Path:
    log = tmp_path / "log"
    shutil.copytree(run["log"], log)
    return log


def _with_text(path: Path, edit) -> None:
    path.write_text(edit(path.read_text()))


_STRICT = [   # (file, edit of its text, what the error says)
    ("args.json", lambda t: t.replace('"sigma": ', '"sigma": 0.02, "sigma": ', 1), "duplicate key 'sigma'"),
    ("args.json", lambda t: t.replace('"precision": "float32"', '"precision": NaN'), "non-finite literal NaN"),
    ("args.json", lambda t: t.replace('"alpha": 0.05', '"alpha": Infinity'), "non-finite literal Infinity"),
    ("args.json", lambda t: t.replace('"alpha": 0.05', '"alpha": 1e999'), "overflows to inf"),
    ("iteration_updates/iteration_000001.json",
     lambda t: t.replace('"update_coefficients": ', '"update_coefficients": [0, 0, 0], "update_coefficients": '),
     "duplicate key 'update_coefficients'"),
    ("iteration_updates/iteration_000002.json", lambda t: t.replace('"update_coefficients": [',
                                                                    '"update_coefficients": [-Infinity, ', 1),
     "non-finite literal -Infinity")]


@pytest.mark.parametrize("name,edit,message", _STRICT)
def test_the_run_log_is_read_as_strict_json(awd, tmp_path, name, edit, message):
    from click.testing import CliRunner

    from esverify.cli import main
    log = _copy_log(awd, tmp_path)
    _with_text(log / name, edit)
    result = CliRunner().invoke(main, ["replay", "--base", str(awd["base"]), "--log", str(log), "--expect",
                                       str(awd["final"]), "--workers", "1", "--state-dir", str(tmp_path / "s")])
    assert result.exit_code == 2, result.output
    assert name in result.output and message in result.output
    assert len(result.output.strip().splitlines()) == 1 and not (tmp_path / "s").exists()


@pytest.mark.parametrize("key,value", [
    ("precision", "fp8"), ("precision", 16), ("precision", ["float32"]), ("weight_decay_type", ["l2"]),
    ("weight_decay_type", 2), ("esverify.noise", "gpu"), ("esverify.scheme", "shared"),
    ("esverify.mapping", "libm32"), ("esverify.profile", 3), ("esverify.noise", True)])
def test_a_setting_is_one_of_its_known_names(tmp_path, key, value):
    """A setting that names something is checked against the names esverify knows, whatever JSON type."""
    from esverify.replay.log import LogError, read_log
    from replay_runs import trainer_run
    run = trainer_run(tmp_path / "run", iterations=1)
    args = json.loads((run["log"] / "args.json").read_text())
    where, _, leaf = key.rpartition(".")
    (args[where] if where else args)[leaf] = value
    (run["log"] / "args.json").write_text(json.dumps(args))
    with pytest.raises(LogError, match=rf"args\.json( esverify)?: {leaf} must be one of"):
        read_log(run["log"])


def test_shard_index_and_state_are_strict(awd, tmp_path):
    from esverify.replay import ReplayError
    sd = torch.load(awd["final"], weights_only=True)
    folder = tmp_path / "hf"
    folder.mkdir()
    save_file({k: v.contiguous() for k, v in sd.items()}, folder / "a.safetensors")
    names = list(sd)
    entries = ", ".join(f'"{k}": "a.safetensors"' for k in names)
    (folder / "model.safetensors.index.json").write_text(
        '{"weight_map": {' + entries + f', "{names[0]}": "b.safetensors"' + '}}')
    with pytest.raises(ReplayError, match=rf"model\.safetensors\.index\.json.*duplicate key '{names[0]}'"):
        _run(awd, folder, tmp_path)
    # report.json and every unit record are strict JSON that reads back
    from esverify import jsonin
    report, _ = _run(awd, awd["final"], tmp_path, name="ok")
    for path in [tmp_path / "ok" / "report.json", *sorted((tmp_path / "ok" / "units").glob("*.json"))]:
        jsonin.load_path(path)
    # a unit record with a key given twice is not trusted: the unit is replayed again
    unit = sorted((tmp_path / "ok" / "units").glob("*.json"))[0]
    _with_text(unit, lambda t: t.replace('"unit": ', '"unit": 0, "unit": ', 1))
    again, code = _run(awd, awd["final"], tmp_path, name="ok")
    assert code == 0 and again["resumed_units"] == again["units"] - 1


# ------------------------------------------------------------------ kind 4: every later failure is one line

def _sharded(awd, tmp_path, weight_map_edit) -> Path:
    sd = torch.load(awd["final"], weights_only=True)
    folder = tmp_path / "hf"
    folder.mkdir()
    names = list(sd)
    save_file({k: sd[k].contiguous() for k in names[:2]}, folder / "model-1.safetensors")
    save_file({k: sd[k].contiguous() for k in names[2:]}, folder / "model-2.safetensors")
    weight_map = {k: "model-1.safetensors" if i < 2 else "model-2.safetensors" for i, k in enumerate(names)}
    weight_map_edit(weight_map, names)
    (folder / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    return folder


@pytest.mark.parametrize("edit,message", [
    (lambda m, n: m.update({n[0]: "model-3.safetensors"}), "shard model-3.safetensors (of tensor w1) does not exist"),
    (lambda m, n: m.update({n[0]: "model-2.safetensors"}), "maps tensor w1 to model-2.safetensors, which does not hold it"),
    (lambda m, n: m.update({n[3]: "model-1.safetensors"}), "maps tensor emb to model-1.safetensors, which does not"),
    (lambda m, n: m.update({n[0]: "../model-1.safetensors"}), "is not a file name in"),
    (lambda m, n: m.update({n[0]: ["model-1.safetensors"]}), "weight_map must map tensor names to shard file names")])
def test_the_whole_shard_index_is_checked_up_front(awd, tmp_path, edit, message):
    from click.testing import CliRunner

    from esverify.cli import main
    folder = _sharded(awd, tmp_path, edit)
    result = CliRunner().invoke(main, ["replay", "--base", str(awd["base"]), "--log", str(awd["log"]), "--expect",
                                       str(folder), "--workers", "1", "--state-dir", str(tmp_path / "s")])
    assert result.exit_code == 2 and message in result.output and "model.safetensors.index.json" in result.output
    assert len(result.output.strip().splitlines()) == 1 and not (tmp_path / "s").exists()


def _truncate(path):
    with open(path, "r+b") as fh:
        fh.truncate(os.path.getsize(path) // 2)


def _kill_workers(_result):
    import multiprocessing
    import signal
    for child in multiprocessing.active_children():
        os.kill(child.pid, signal.SIGKILL)


def _raise_inside(monkeypatch):
    from esverify.replay import kernel
    monkeypatch.setattr(kernel, "replay_elements", lambda *a: (_ for _ in ()).throw(AttributeError("no .x\nline 2")))


@pytest.mark.parametrize("case,workers,error,message", [
    ("checkpoint cut short", 1, "ReplayError", "final.safetensors: not a readable safetensors file"),
    ("checkpoint cut short", 2, "ReplayError", "final.safetensors: "),
    ("checkpoint removed", 1, "ReplayError", "final.safetensors: no such file or folder"),
    ("worker killed", 2, "ReplayInfrastructureError", "a worker process died"),
    ("error inside a unit", 1, "ReplayInfrastructureError", "failed: AttributeError: no .x")])
def test_a_failure_while_units_run_is_one_line_and_keeps_the_verified_units(awd, tmp_path, monkeypatch, case,
                                                                           workers, error, message):
    import esverify.replay as api
    expect = tmp_path / "final.safetensors"
    save_file({k: v.contiguous() for k, v in torch.load(awd["final"], weights_only=True).items()}, expect)
    hook = {"checkpoint cut short": lambda r: _truncate(expect), "checkpoint removed": lambda r: expect.unlink(),
            "worker killed": _kill_workers, "error inside a unit": None}[case]
    if case == "error inside a unit":
        _raise_inside(monkeypatch)
        hook = None
    seen = []

    def after(result):
        seen.append(result["unit"])
        if len(seen) == 1 and hook is not None:
            hook(result)
    with pytest.raises(getattr(api, error)) as info:
        replay(awd["base"], awd["log"], expect, workers=workers, state_dir=tmp_path / "s", after_unit=after)
    text = str(info.value)
    assert message in text and "\n" not in text
    assert f"the {len(seen)} of 4 units verified so far are kept" in text
    assert len(list((tmp_path / "s" / "units").glob("unit-*.json"))) == len(seen)
    assert not (tmp_path / "s" / "report.json").exists()


def test_paths_reach_the_workers_absolute(awd, tmp_path, monkeypatch):
    """Relative paths are resolved before a Job is built (a Ray worker runs elsewhere, in another folder)."""
    from esverify.replay import kernel, runners
    jobs = []
    real = runners.run_local
    monkeypatch.setattr(runners, "run_local", lambda job, *a: (jobs.append(job), real(job, *a))[1])
    monkeypatch.chdir(awd["log"].parent)
    report, code = replay("base.safetensors", "log", "final_model_weights.pt", workers=1,
                          state_dir="rel-state", out="out.safetensors")
    assert code == 0 and isinstance(jobs[0], kernel.Job)
    assert all(Path(p).is_absolute() for p in (jobs[0].base, jobs[0].expect, jobs[0].pieces))
    shutil.rmtree("rel-state")
    os.unlink("out.safetensors")


def test_ray_without_a_cluster_names_esverifys_own_flag(awd, tmp_path, monkeypatch):
    """Ray's own message tells the user to set "the --address flag"; esverify's option is --ray."""
    import types

    from esverify.replay import ReplayError

    def init(**kwargs):
        raise ConnectionError("Could not find any running Ray instance. Please specify the one to connect to by "
                              "setting `--address` flag or `RAY_ADDRESS` environment variable.")
    fake = types.SimpleNamespace(is_initialized=lambda: False, init=init)
    monkeypatch.setitem(sys.modules, "ray", fake)
    with pytest.raises(ReplayError) as info:
        _run(awd, awd["final"], tmp_path, ray="auto")
    text = str(info.value)
    assert text.startswith("--ray auto: cannot connect to a Ray cluster") and "--ray HOST:PORT" in text
    assert "--address" not in text and "\n" not in text
