"""The EGGROLL driver's adapter tape file (esverify.references.eggroll.tape_arrays): what `write` is given,
`read` gives back, bit for bit, with names, order, dtypes and shapes; a file whose index is missing or does not
fit its data is a ValueError naming the file and the fault, and in a parity run an error row saying so."""
from __future__ import annotations

import re
import zipfile

import numpy as np
import pandas as pd
import pytest

from esverify.oracle import Options, run_parity
from esverify.references.eggroll import rows, tape_arrays
from standins.mutants import STANDINS


def _arrays() -> dict:
    gen = np.random.default_rng(7)
    out = {}
    for m in range(3):
        for l, (o, i) in enumerate(((4, 4), (6, 4), (4, 6))):
            out[f"m{m}.l{l}.A"] = gen.integers(0, 2**16, (2, i), dtype=np.uint16)
            out[f"m{m}.l{l}.B"] = gen.integers(0, 2**16, (o, 2), dtype=np.uint16)
            out[f"m{m}.l{l}.BA"] = gen.integers(0, 2**16, (o, i), dtype=np.uint16)
    # other dtypes, a 0-dim and an empty array between them: each kept as it was
    out["wide"] = gen.integers(0, 2**32, (3, 5), dtype=np.uint32)
    out["scalar"] = np.array(0xBEEF, dtype=np.uint16)
    out["empty"] = np.zeros((0, 3), dtype=np.uint16)
    out["last"] = np.arange(7, dtype=np.uint16)
    return out


def test_read_gives_back_every_array_bit_for_bit_in_order(tmp_path):
    arrays = _arrays()
    path = tape_arrays.write(tmp_path / "t.npz", arrays)
    got = tape_arrays.read(path)
    assert list(got) == list(arrays)
    for key, value in arrays.items():
        assert got[key].dtype == value.dtype and got[key].shape == value.shape, key
        assert got[key].tobytes() == value.tobytes(), key
    with np.load(path) as stored:   # a few members, not one per array
        assert sorted(stored.files) == sorted(tape_arrays.INDEX + ("data0", "data1"))


def _rewrite(path, change):
    """Save `path` again with its members as `change` ({member: array or None to drop it}) leaves them."""
    with np.load(path) as stored:
        members = {k: stored[k] for k in stored.files}
    for key, value in change(members).items():
        if value is None:
            del members[key]
        else:
            members[key] = value
    np.savez(path, **members)


def _first_rank_negative(members):
    ndims = members["index_ndims"].copy()
    ndims[0], ndims[1] = -1, ndims[0] + ndims[1] + 1   # their sum still fits index_dims
    return {"index_ndims": ndims}


@pytest.mark.parametrize("change, says", [
    (lambda m: {"index_offsets": None}, "not an adapter tape file: no member index_offsets"),
    (lambda m: {"data1": None}, "wide is in data1, which the file lacks"),
    (lambda m: {"index_kinds": m["index_kinds"][:3]}, "31 names, 3 kinds"),
    (lambda m: {"index_keys": np.array(["a"] * 31)}, "a name appears twice"),
    (lambda m: {"index_dims": np.full(59, 100, dtype=np.int64)}, "m0.l0.A spans elements 0..10000 of data0, which "
                                                                 "has 368"),
    (_first_rank_negative, "m0.l0.A has rank -1"),
    (lambda m: {"index_dims": -m["index_dims"]}, "m0.l0.A has shape (-2, -4)"),
    (lambda m: {"data0": m["data0"].reshape(2, -1)}, "not one-dimensional"),
    # an index that passes the bounds yet is no tiling `write` makes: found, not read as other arrays
    (lambda m: {"index_offsets": np.where(np.arange(31) == 1, 0, m["index_offsets"])},
     "starts at element 0 of data0, where the arrays before it end at 8"),
    (lambda m: {"data0": np.concatenate([m["data0"], m["data0"][:2]])}, "data0 has 370 elements, its arrays 368"),
    (lambda m: {"index_offsets": m["index_offsets"].astype(np.float64)}, "an index member not of integers"),
    (lambda m: {"index_keys": np.arange(31)}, "names of dtype int64"),
    (lambda m: {"index_keys": np.array("m0.l0.A")}, "not one-dimensional"),
])
def test_an_index_that_does_not_fit_is_a_value_error_naming_the_file(tmp_path, change, says):
    path = tape_arrays.write(tmp_path / "t.npz", _arrays())
    _rewrite(path, change)
    with pytest.raises(ValueError, match=re.escape(str(path))) as err:
        tape_arrays.read(path)
    assert says in str(err.value) and "\n" not in str(err.value)


def test_an_empty_array_listed_after_one_at_its_offset_still_reads(tmp_path):
    # a tiling of the data all the same: the empty array reads no element of the one beside it
    path = tape_arrays.write(tmp_path / "t.npz", {"b": np.arange(3, dtype=np.uint16), "e": np.zeros(0, np.uint16),
                                                 "c": np.arange(2, dtype=np.uint16)})
    order = [0, 2, 1]
    _rewrite(path, lambda m: {**{k: m[k][order] for k in ("index_keys", "index_kinds", "index_offsets", "index_ndims")},
                              "index_dims": np.array([3, 2, 0])})
    got = tape_arrays.read(path)
    assert list(got) == ["b", "c", "e"] and [v.tolist() for v in got.values()] == [[0, 1, 2], [0, 1], []]


def test_dims_past_int64_are_the_value_error_not_a_wrapped_size(tmp_path):
    path = tape_arrays.write(tmp_path / "t.npz", {"a": np.zeros(4, np.uint16)})
    _rewrite(path, lambda m: {"index_ndims": np.array([2]), "index_dims": np.array([2**32, 2**32])})
    with pytest.raises(ValueError, match=r"a spans elements 0\.\.18446744073709551616 of data0, which has 4"):
        tape_arrays.read(path)


@pytest.mark.parametrize("arrays, says", [
    ({"a\x00": np.zeros(2, np.uint16)}, "ends in NUL"),
    ({"be": np.zeros(2, ">u2")}, "is >u2, not in native byte order"),
])
def test_write_refuses_what_would_not_read_back_as_written(tmp_path, arrays, says):
    with pytest.raises(ValueError, match=re.escape(says)):
        tape_arrays.write(tmp_path / "t.npz", arrays)


def test_an_older_drivers_tape_says_what_it_lacks(tmp_path):
    path = tmp_path / "old.npz"
    np.savez(path, **{"m0.l0.A": np.zeros(2, np.uint16)})
    with pytest.raises(ValueError, match="one member per array, as drivers before the index wrote"):
        tape_arrays.read(path)


def test_a_file_that_is_no_npz_raises_what_np_load_raises(tmp_path):
    path = tmp_path / "t.npz"
    path.write_bytes(b"PK\x03\x04 not a zip")
    with pytest.raises((zipfile.BadZipFile, ValueError, OSError)):
        tape_arrays.read(path)


def test_a_corrupted_tape_file_is_an_error_row(tmp_path, monkeypatch):
    """One eggroll row whose first adapter file loses the end of its data (as a truncated write would): an
    error row naming the file and the array past the data, the run goes on to its report."""
    real = tape_arrays.read

    def truncated(path):
        _rewrite(path, lambda m: {"data0": m["data0"][:-1]})
        return real(path)

    monkeypatch.setattr(rows.tape_arrays, "read", truncated)
    opts = Options(ref=[str(STANDINS / "eggroll-vllm")], devices=("cpu",), out=str(tmp_path / "report"), quiet=True,
                   target="eggroll", case="eggroll/cpu/f32/correlated/eggroll-main/N4/r1-e1")
    frame = run_parity(opts).frame
    assert len(frame) == 1
    row = frame.iloc[0]
    assert row["status"] == "error", row.to_dict()
    assert "the adapter tape's index does not fit its data" in row["detail"]
    assert "theirs-step-000-adapters.npz" in row["detail"] and "spans elements" in row["detail"]
    assert len(pd.read_csv(tmp_path / "report" / "parity-cases.csv")) == 1
