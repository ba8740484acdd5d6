"""`esverify replay` cannot be fooled: each kind of failure as a table over its variants.

Kinds: a checkpoint tensor of another dtype or shape is a difference (never a cast); resume is keyed on
the bytes each unit read; strict JSON in and out; every later failure is one line with a non-verdict
exit code; signals tear everything down; every safetensors dtype is read and the verdict does not
depend on the file format."""
from __future__ import annotations

import hashlib
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


def test_resume_verifies_again_a_unit_recorded_with_another_digest(awd, tmp_path):
    """A unit a state folder recorded with the bare sha256 digests of earlier releases is verified again, and a
    unit's digest is XXH3-128 of what it read, named."""
    import xxhash
    first, code = _run(awd, awd["final"], tmp_path, name="state")
    records = sorted((tmp_path / "state" / "units").glob("unit-*.json"))
    assert code == 0 and records
    for path in records:
        unit = json.loads(path.read_text())
        algorithm, digest = unit["inputs"].split(":")
        assert algorithm == "xxh3-128" and len(digest) == 32 and int(digest, 16) >= 0
        unit["inputs"] = hashlib.sha256(b"the bytes").hexdigest()
        path.write_text(json.dumps(unit))
    again, code = _run(awd, awd["final"], tmp_path, name="state")
    assert (code, again["resumed_units"], again["reverified_units"]) == (0, 0, len(records))
    assert xxhash.xxh3_128(b"").hexdigest() == "99aa06d3014798d86001c324468d497f"   # the library's known answer


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
    (lambda m, n: m.update({n[0]: "model-2.safetensors"}),
     "maps tensor w1 to model-2.safetensors, which does not hold it"),
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
    ("checkpoint cut short before the pool starts", 2, "ReplayError", "final.safetensors: "),
    ("checkpoint removed", 1, "ReplayError", "final.safetensors: no such file or folder"),
    ("error inside a unit", 1, "ReplayInfrastructureError", "failed: AttributeError: no .x")])
@pytest.mark.slow   # 2 s (--durations, 2026-12-03): out of the fast tier
def test_a_failure_while_units_run_is_one_line_and_keeps_the_verified_units(awd, tmp_path, monkeypatch, case,
                                                                           workers, error, message):
    import esverify.replay as api
    expect = tmp_path / "final.safetensors"
    save_file({k: v.contiguous() for k, v in torch.load(awd["final"], weights_only=True).items()}, expect)
    hook = {"checkpoint cut short": lambda r: _truncate(expect), "checkpoint removed": lambda r: expect.unlink(),
            }.get(case)
    if case == "error inside a unit":
        _raise_inside(monkeypatch)
    if case.endswith("before the pool starts"):   # after the up-front checks; no timing: every unit fails
        from esverify.replay import runners
        real = runners.run_local
        monkeypatch.setattr(runners, "run_local", lambda *a: (_truncate(expect), real(*a))[1])
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


# ------------------------------------------------------------------ kind 5: signals tear everything down

def _children() -> dict:
    """{pid: parent pid} of every process, from /proc (psutil is not a dependency)."""
    out = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            fields = stat.rsplit(")", 1)[1].split()
            out[int(entry)] = (int(fields[1]), fields[0])   # (ppid, state)
    return out


def _descendants(pid: int) -> set:
    table, found, todo = _children(), set(), [pid]
    while todo:
        parent = todo.pop()
        for child, (ppid, _) in table.items():
            if ppid == parent and child not in found:
                found.add(child)
                todo.append(child)
    return found


def _alive(pids) -> set:
    table = _children()
    return {p for p in pids if p in table and table[p][1] != "Z"}


def _wait_for(predicate, seconds: float) -> bool:
    import time
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(0.05)
    return False


@pytest.fixture(scope="module")
def long_run(tmp_path_factory):
    """A trainer run cut into thousands of one-element units: long enough to be signalled mid-way."""
    from replay_runs import trainer_run
    return trainer_run(tmp_path_factory.mktemp("long"), iterations=2, sizes={"w": (3000,)})


def _start(run, state):
    import subprocess
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).parent.parent))
    return subprocess.Popen([sys.executable, "-m", "esverify", "replay", "--base", str(run["base"]), "--log",
                             str(run["log"]), "--expect", str(run["final"]), "--workers", "2",
                             "--shard-elements", "1", "--state-dir", str(state)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, text=True)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
@pytest.mark.parametrize("signame", ["SIGTERM", "SIGINT", "SIGHUP"])
@pytest.mark.slow   # 6 s (--durations, 2026-12-03): out of the fast tier
def test_a_signal_stops_the_workers_and_writes_the_partial_report(long_run, tmp_path, signame):
    import signal
    sig = getattr(signal, signame)
    proc = _start(long_run, tmp_path / "s")
    units = tmp_path / "s" / "units"
    try:
        # a worker's first unit compiles the contract noise (numba): on a loaded machine that takes a while
        assert _wait_for(lambda: units.is_dir() and len(list(units.glob("unit-*.json"))) >= 3, 600)
        workers = _descendants(proc.pid)
        assert len(workers) >= 2            # the pool (and multiprocessing's resource tracker)
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=300)   # a bound, not a measurement: a loaded machine is slow to tear down
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 128 + sig, err
    assert err.strip().splitlines()[-1].startswith("report: ") and "Traceback" not in err
    report = json.loads((tmp_path / "s" / "report.json").read_text())
    kept = len(list(units.glob("unit-*.json")))
    assert report["verdict"] == "interrupted" and report["signal"] == signame
    assert sum(t["verified_units"] for t in report["tensors"]) == kept >= 3 and kept < report["units"]
    assert f"INTERRUPTED by {signame}" in out
    assert _wait_for(lambda: not _alive(workers), 60), f"left running: {_alive(workers)}"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
@pytest.mark.slow   # 5 s (--durations, 2026-12-03): out of the fast tier
def test_a_worker_whose_parent_died_exits_by_itself(long_run, tmp_path):
    import signal
    proc = _start(long_run, tmp_path / "s")
    units = tmp_path / "s" / "units"
    try:
        # a worker's first unit compiles the contract noise (numba): on a loaded machine that takes a while
        assert _wait_for(lambda: units.is_dir() and len(list(units.glob("unit-*.json"))) >= 3, 600)
        workers = _descendants(proc.pid)
        proc.send_signal(signal.SIGKILL)    # no handler runs: the workers must notice on their own
        proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert _wait_for(lambda: not _alive(workers), 60), f"left running: {_alive(workers)}"


# ------------------------------------------------------------------ kind 6: every safetensors dtype, any format

def _table_buffers() -> dict:
    """One buffer per dtype of the safetensors table that this torch has (ES never changes buffers); F32, F16
    and BF16 tensors are the replayed parameters (the awd run's own tensors, here F32)."""
    from esverify.replay.weights import _ST_DTYPES
    g = torch.Generator().manual_seed(3)
    out = {}
    for code, dtype in _ST_DTYPES.items():
        if code in ("F32", "F16", "BF16"):
            continue
        size = torch.empty(0, dtype=dtype).element_size()
        raw = torch.randint(0, 256, (5 * size,), dtype=torch.uint8, generator=g)
        if dtype == torch.bool:
            raw = raw & 1
        out[f"buf_{code}"] = raw.view(dtype).clone()
    return out


@pytest.mark.parametrize("tamper", [False, True])
def test_every_safetensors_dtype_is_read_and_the_format_does_not_change_the_verdict(awd, tmp_path, tamper):
    from safetensors.torch import load_file
    buffers = _table_buffers()
    assert {"buf_U16", "buf_U32", "buf_U64", "buf_F8_E4M3", "buf_F8_E5M2", "buf_BOOL", "buf_C64"} <= set(buffers)
    save_file({**load_file(awd["base"]), **buffers}, tmp_path / "base.safetensors")
    expect = {**torch.load(awd["final"], weights_only=True), **{k: v.clone() for k, v in buffers.items()}}
    if tamper:      # one element of every buffer changes in one bit
        for k, v in buffers.items():
            raw = expect[k].view(torch.uint8) if v.dtype != torch.bool else None
            if raw is None:
                expect[k][2] = not bool(expect[k][2])
            else:
                raw[2 * v.element_size()] ^= 1
    save_file({k: v.contiguous() for k, v in expect.items()}, tmp_path / "e.safetensors")
    torch.save(expect, tmp_path / "e.pt")
    run = {"base": tmp_path / "base.safetensors", "log": awd["log"]}
    reports = {}
    for fmt in ("safetensors", "pt"):
        report, code = _run(run, tmp_path / f"e.{fmt}", tmp_path, name=fmt)
        reports[fmt] = sorted((t["name"], t["dtype"], json.dumps(t["replay"])) for t in report["tensors"])
        assert code == (1 if tamper else 0)
        bad = {t["name"]: t["replay"] for t in report["tensors"] if t["replay"]["mismatches"]}
        assert set(bad) == (set(buffers) if tamper else set())
        assert all(b["mismatches"] == 1 and b["first"]["index"] == 2 for b in bad.values())
    assert reports["safetensors"] == reports["pt"]


@pytest.mark.parametrize("code", ["F4", "F6_E2M3", "F6_E3M2"])
def test_a_dtype_torch_does_not_have_is_refused_in_one_line(awd, tmp_path, code):
    """The format names dtypes torch has none for: refused naming the dtype, never read as something else."""
    import struct

    from click.testing import CliRunner

    from esverify.cli import main
    from esverify.replay.weights import _ST_DTYPES
    if code in _ST_DTYPES:
        pytest.skip(f"this torch has a dtype for {code}")
    size = 4 * (4 if code == "F4" else 6) // 8     # four elements of 4 or 6 bits
    header = json.dumps({"x": {"dtype": code, "shape": [4], "data_offsets": [0, size]}}).encode()
    header += b" " * (-len(header) % 8)
    path = tmp_path / "odd.safetensors"
    path.write_bytes(struct.pack("<Q", len(header)) + header + b"\0" * size)
    result = CliRunner().invoke(main, ["replay", "--base", str(path), "--log", str(awd["log"]), "--expect", str(path),
                                       "--workers", "1", "--state-dir", str(tmp_path / "s")])
    assert result.exit_code == 2 and len(result.output.strip().splitlines()) == 1
    assert f"odd.safetensors: tensor x has dtype {code}, a dtype of the safetensors format" in result.output


@pytest.mark.slow   # 3 s (--durations, 2026-12-03): out of the fast tier
def test_a_killed_worker_is_an_infrastructure_failure_that_keeps_the_verified_units(long_run, tmp_path):
    """A pool worker killed (the OOM killer's SIGKILL) mid-run: exit 3's error, one line, units kept; the run
    has thousands of units, so some are always left when the first result arrives."""
    from esverify.replay import ReplayInfrastructureError
    seen = []

    def after(result):
        seen.append(result["unit"])
        if len(seen) == 1:
            _kill_workers(result)
    with pytest.raises(ReplayInfrastructureError) as info:
        replay(long_run["base"], long_run["log"], long_run["final"], workers=2, shard_elements=1,
               state_dir=tmp_path / "s", after_unit=after)
    text = str(info.value)
    assert text.startswith("a worker process died while replaying unit") and "\n" not in text
    assert f"the {len(seen)} of 3000 units verified so far are kept" in text
    assert len(list((tmp_path / "s" / "units").glob("unit-*.json"))) == len(seen)
