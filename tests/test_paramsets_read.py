"""paramsets.read, the parent's reader of parameter sets and of the child's result files: numpy's own .npy
headers (as np.savez writes them) are matched as bytes, not parsed with ast (thousands of members a run),
and the result is what np.load gives, arrays writable; any other file is np.load's to read or refuse, with
its own error."""
from __future__ import annotations

import ast

import numpy as np
import pytest
import torch

import child_files
from esverify.oracle import paramsets

child_files.on_path()
import child_server  # noqa: E402

DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.float64]


def _by_np_load(path):
    with np.load(path) as data:
        dtypes = [str(d) for d in data["dtypes"]]
        names = [str(n) for n in data["names"]] if "names" in data else []
        return names, [data[f"slot{k}"] for k in range(len(dtypes))], dtypes


def _same(a, b):
    assert (a[0], a[2]) == (b[0], b[2]) and len(a[1]) == len(b[1])
    for x, y in zip(a[1], b[1]):
        assert (x.dtype, x.shape, x.tobytes()) == (y.dtype, y.shape, y.tobytes())
        assert y.flags.writeable and y.flags.c_contiguous == x.flags.c_contiguous


def test_sets_and_result_files_read_as_np_load_reads_them_without_ast(tmp_path, monkeypatch):
    rng = np.random.default_rng(54)
    shapes = [(), (0,), (3,), (2, 5), (1, 0, 4), (7, 1, 2)]
    tensors = [torch.from_numpy(rng.standard_normal(s)).to(DTYPES[k % 4]) for k, s in enumerate(shapes)]
    tensors[2][1] = float("nan")
    paths = [paramsets.write(tmp_path / "set.npz", [f"m.{k}.weight" for k in range(len(shapes))], tensors),
             tmp_path / "theirs.npz"]
    child_server.save_results(paths[1], tensors)
    expected = [_by_np_load(p) for p in paths]

    def refuse(*args, **kwargs):
        raise AssertionError("a header was parsed with ast")
    monkeypatch.setattr(ast, "literal_eval", refuse)
    for path, want in zip(paths, expected):
        got = paramsets.read(path)
        _same(want, got)
        got[1][0][...] = 0   # a new array of its own


@pytest.mark.parametrize("kind", ["fortran", "big-endian", "compressed", "names-only-member"])
def test_other_npz_files_read_as_np_load_reads_them(tmp_path, kind):
    path = tmp_path / "x.npz"
    slot = np.arange(6, dtype=np.uint32).reshape(2, 3)
    if kind == "fortran":
        np.savez(path, dtypes=np.array(["f32"]), slot0=np.asfortranarray(slot))
    elif kind == "big-endian":
        np.savez(path, dtypes=np.array(["f32"]), slot0=slot.astype(">u4"))
    elif kind == "compressed":
        np.savez_compressed(path, dtypes=np.array(["f32"]), names=np.array(["w"]), slot0=slot)
    else:   # a member without the .npy suffix: np.load reads it under that name
        import zipfile
        with zipfile.ZipFile(path, "w") as z:
            for name, a in (("dtypes.npy", np.array(["f32"])), ("slot0.npy", slot), ("names", np.array(["w"]))):
                with z.open(name, "w") as f:
                    np.lib.format.write_array(f, a)
    _same(_by_np_load(path), paramsets.read(path))


@pytest.mark.parametrize("kind", ["missing-slot", "not-a-zip", "plain-npy", "truncated", "absent"])
def test_files_np_load_refuses_are_refused_with_its_error(tmp_path, kind):
    path = tmp_path / "x.npz"
    if kind == "missing-slot":
        np.savez(path, dtypes=np.array(["f32", "f16"]), slot0=np.zeros(2, np.uint32))
    elif kind == "not-a-zip":
        path.write_bytes(b"not a zip at all")
    elif kind == "plain-npy":
        np.save(tmp_path / "x.npy", np.arange(3))
        (tmp_path / "x.npy").rename(path)
    elif kind == "truncated":
        child_server.save_results(path, [torch.zeros(40)])
        path.write_bytes(path.read_bytes()[:100])
    with pytest.raises(Exception) as theirs:
        _by_np_load(path)
    with pytest.raises(Exception) as ours:
        paramsets.read(path)
    assert (type(ours.value), str(ours.value)) == (type(theirs.value), str(theirs.value))


def test_read_members_is_np_loads_dict_without_ast_for_numpys_own_headers(tmp_path, monkeypatch):
    arrays = {f"m{m}.l{l}.{k}": np.arange(m + l + 1, dtype=np.uint16).reshape(1, -1) for m in range(3)
              for l in range(2) for k in ("A", "B", "BA")}
    np.savez(tmp_path / "adapters.npz", **arrays)
    np.savez(tmp_path / "fortran.npz", a=np.asfortranarray(np.arange(6, dtype=np.uint16).reshape(2, 3)))
    with np.load(tmp_path / "fortran.npz") as data:
        fortran = {k: data[k] for k in data.files}
    monkeypatch.setattr(ast, "literal_eval", lambda *a, **k: (_ for _ in ()).throw(AssertionError("ast")))
    got = paramsets.read_members(tmp_path / "adapters.npz")
    assert list(got) == list(arrays) and all(
        (got[k].dtype, got[k].shape, got[k].tobytes()) == (a.dtype, a.shape, a.tobytes()) for k, a in arrays.items())
    monkeypatch.undo()
    other = paramsets.read_members(tmp_path / "fortran.npz")   # another header: np.load's reading
    assert other.keys() == fortran.keys() and np.array_equal(other["a"], fortran["a"])
    assert not other["a"].flags.c_contiguous
