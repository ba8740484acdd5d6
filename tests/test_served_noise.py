"""Served noise (docs/parity.md, "Served noise"): the parent writes each contract range its noise memo hands
out to a private folder (esverify.rng.memo.ServedRanges), each child's noise hook reads a range from there
instead of drawing it (oracles/child_server.contract_range), and the bits are the contract's whichever
way a child gets them: drawn with numba, drawn without it (numpy), or served."""
from __future__ import annotations

import os
import stat
import sys

import numpy as np
import pytest
import torch

from esverify import rng
from esverify.oracle import noise_memo
from esverify.oracle.child_process import Child
from esverify.oracle.noise_memo import MemoNoise
from esverify.rng.memo import SERVED_GRID, ServedRanges, served_name, served_range, served_stream

pytestmark = pytest.mark.skipif(not rng.backends.numba_available(), reason="compares numba's draws with numpy's")


def _bits(values) -> np.ndarray:
    array = values.numpy() if isinstance(values, torch.Tensor) else values
    return np.ascontiguousarray(array, dtype=np.float32).view(np.uint32).copy()


@pytest.fixture()
def child_server():
    from esverify.paths import oracles_dir
    if str(oracles_dir()) not in sys.path:   # the child's modules import each other by plain name
        sys.path.insert(0, str(oracles_dir()))
    import child_server
    try:
        yield child_server
    finally:
        child_server.SERVED["folder"] = None
        child_server.NOISE_ELEMENTS.clear()


def test_a_served_name_holds_what_decides_the_bits():
    # poly32 is bitwise portable (docs/CONTRACT.md §3b): one name on every backend; libm64 names its backend
    assert served_name("poly32", "numba", 5, 0, 16) == served_name("poly32", "numpy", 5, 0, 16) \
        == served_name("poly32", None, 5, 0, 16) == "poly32-0000000000000005-0-10.f32"
    assert served_name("libm64", "numba", 2 ** 64 - 1, 3, 1) == "libm64.numba-ffffffffffffffff-3-1.f32"
    assert served_name("libm64", "numba", 1, 0, 4) != served_name("libm64", "numpy", 1, 0, 4)
    with pytest.raises(ValueError, match="name the backend"):
        served_name("libm64", None, 1, 0, 4)
    for bad in ({"stream": -1}, {"stream": 2 ** 64}, {"first": 1.0}, {"n": True}):
        args = {"stream": 1, "first": 0, "n": 4, **bad}
        with pytest.raises(ValueError):
            served_name("poly32", "numba", args["stream"], args["first"], args["n"])
    with pytest.raises(ValueError, match="unknown|mapping"):
        served_name("nope", "numba", 1, 0, 4)


def test_served_ranges_are_read_back_bit_for_bit_read_only_and_dropped_past_the_budget(tmp_path):
    served = ServedRanges(tmp_path, budget=3 * 4 * 100)
    ranges = {}
    for k in range(5):
        values = rng.gaussian(10 + k, 100, first=k)
        values[0] = [np.nan, np.inf, -0.0, -np.inf, 1e-45][k]    # whatever the bits, they come back
        name = served_name("poly32", "numba", 10 + k, k, 100)
        assert served.put(name, values) is True
        assert served.put(name, torch.from_numpy(values)) is False   # kept: not written again
        ranges[name] = values
    names = list(ranges)
    assert sorted(os.listdir(tmp_path)) == sorted(names[2:]) and served.bytes == 1200 and served.written == 5
    for name in names[:2]:
        assert served_range(tmp_path, name, 100) is None          # dropped: the child draws it
    for name in names[2:]:
        back = served_range(tmp_path, name, 100)
        assert back.dtype == np.float32 and back.flags.writeable
        assert np.array_equal(_bits(back), _bits(ranges[name]))
        assert stat.S_IMODE(os.stat(tmp_path / name).st_mode) == 0o444
    assert served_range(tmp_path, names[4], 99) is None            # not the range asked for
    assert served_range(None, names[4], 100) is None
    assert served_range(tmp_path / "gone", names[4], 100) is None
    with pytest.raises(ValueError, match="name"):
        served.put("../x.f32", ranges[names[4]])
    with pytest.raises(ValueError, match="f4"):
        served.put(served_name("poly32", None, 1, 0, 3), np.zeros(3, np.float64))
    with pytest.raises(ValueError, match="budget"):
        ServedRanges(tmp_path, -1)


def test_keeping_serves_what_the_memo_hands_out_and_removes_the_folder_at_its_end():
    source = MemoNoise("poly32", "numba")
    assert noise_memo.served_folder() is None
    with noise_memo.keeping():
        folder = noise_memo.served_folder()
        assert folder and os.path.isdir(folder) and stat.S_IMODE(os.stat(folder).st_mode) == 0o700
        source.draw(76, 0, 100, torch.device("cpu"))                  # no child without numba: nothing written
        assert os.listdir(folder) == []
        with noise_memo.materializing():
            drawn = source.draw(77, 3, 1000, torch.device("cpu"))
            source.draw(77, 3, 1000, torch.device("cpu"))             # a hit: not written again
            source.draw(78, 0, 10, torch.device("cpu"), out=torch.empty(10))   # out=: not the memo's, not served
        assert os.listdir(folder) == [served_name("poly32", None, 77, 3, 1000)]
        assert noise_memo.SERVED.written == 1
        back = served_range(folder, served_name("poly32", "numpy", 77, 3, 1000), 1000)
        assert np.array_equal(_bits(back), _bits(drawn))
        with noise_memo.keeping():                                    # nested: the same folder
            assert noise_memo.served_folder() == folder
        assert os.path.isdir(folder)
    assert noise_memo.served_folder() is None and not os.path.exists(folder)


def test_a_whole_tensors_range_is_put_together_from_the_pieces_our_side_drew(tmp_path):
    """Our side's trainer draws a tensor in chunks of its DEFAULT_CHUNK; a reference draws the whole tensor."""
    from esverify.es.numerics import DEFAULT_CHUNK
    assert SERVED_GRID == DEFAULT_CHUNK
    served, stream, n = ServedRanges(tmp_path, 1 << 30), 12345, 2 * SERVED_GRID + 77
    whole = rng.gaussian(stream, n)
    for start in range(0, n, SERVED_GRID):
        size = min(SERVED_GRID, n - start)
        served.put(served_name("poly32", None, stream, start, size), whole[start:start + size])
    assert np.array_equal(_bits(served_stream(tmp_path, "poly32", "numpy", stream, 0, n)), _bits(whole))
    got = served_stream(tmp_path, "poly32", "numba", stream, SERVED_GRID, n - SERVED_GRID)   # from a piece on
    assert np.array_equal(_bits(got), _bits(whole[SERVED_GRID:]))
    assert served_stream(tmp_path, "poly32", None, stream, 5, SERVED_GRID + 9) is None     # not on the grid
    assert served_stream(tmp_path, "poly32", None, stream + 1, 0, n) is None               # another stream
    os.unlink(tmp_path / served_name("poly32", None, stream, SERVED_GRID, SERVED_GRID))
    assert served_stream(tmp_path, "poly32", None, stream, 0, n) is None                   # a piece gone
    assert served_stream(None, "poly32", None, stream, 0, n) is None


@pytest.mark.parametrize("profile", ["es-at-scale", "es-awd"])
def test_materializing_serves_an_updates_noise_with_the_same_bits(profile):
    """The update's kernel draws its noise as it computes (never through the memo); inside materializing() it
    draws through the memo, so every range is served, and the update's bits are the same."""
    from esverify.es import Config
    from esverify.oracle.ours import SlotMappedTrainer
    config = Config(population=5, sigma=0.01, alpha=0.05, scheme="iid", seed=3, profile=profile)

    def update():
        tensors = [torch.linspace(-1, 1, 3000), torch.linspace(0, 2, 600)]
        trainer = SlotMappedTrainer([("w", tensors[0]), ("b", tensors[1])], config, noise="contract")
        trainer.update(np.linspace(-1.0, 2.0, config.population))
        return [_bits(t) for t in tensors]
    with noise_memo.keeping():
        inline = update()
        assert os.listdir(noise_memo.served_folder()) == []
        with noise_memo.materializing():
            served = update()
            assert len(os.listdir(noise_memo.served_folder())) == 2 * config.population
        assert all(np.array_equal(a, b) for a, b in zip(inline, served))
    assert noise_memo._materializing == 0


@pytest.mark.parametrize("mapping", ["poly32", "libm64"])
def test_the_childs_range_is_the_same_drawn_with_numba_with_numpy_or_served(child_server, mapping, tmp_path):
    stream, first, n = 0x9E3779B97F4A7C15, 7, 5000
    numba = child_server.contract_range(stream, first, n, mapping, "numba", "cpu")
    child_server.NOISE_ELEMENTS.clear()
    served = ServedRanges(tmp_path, 1 << 20)
    served.put(served_name(mapping, "numba", stream, first, n), numba.clone())
    child_server.SERVED["folder"] = str(tmp_path)
    from_parent = child_server.contract_range(stream, first, n, mapping, "numba", "cpu")
    as_array = child_server.contract_range(stream, first, n, mapping, "numba", None)   # numpy's legacy hook
    assert dict(child_server.NOISE_ELEMENTS) == {"served": 2 * n}
    assert np.array_equal(_bits(from_parent), _bits(numba)) and np.array_equal(_bits(as_array), _bits(numba))
    numpy = child_server.contract_range(stream, first, n, mapping, "numpy", "cpu")
    if mapping == "poly32":   # served to a child without numba: the bits its numpy draw gives
        assert child_server.NOISE_ELEMENTS["served"] == 3 * n
        child_server.SERVED["folder"] = None
        assert np.array_equal(_bits(child_server.contract_range(stream, first, n, mapping, "numpy", "cpu")),
                              _bits(numba))
    else:                     # bit-exact per backend only (§3a): a numpy child draws its own
        assert child_server.NOISE_ELEMENTS["drawn"] == n
    assert np.array_equal(_bits(numpy), _bits(rng.gaussian(stream, n, first=first, mapping=mapping, backend="numpy")))


def _run(tmp_path, label, monkeypatch, child_env=None, serve=True):
    """Parity rows of small es-at-scale and skill-sample cases, with every reply's noise counts."""
    from esverify.oracle import Options, run_parity
    from esverify.oracle.warm_kept import not_kept
    from standins.mutants import STANDINS
    counts = []
    request = Child.request

    def counted(self, command, timeout):
        reply = request(self, command, timeout)
        counts.append((command.get("op"), reply.get("noise_elements", {})))
        return reply
    with monkeypatch.context() as patch:
        patch.setattr(Child, "request", counted)
        if not serve:
            patch.setattr(noise_memo, "_serve_start", lambda: None)
        with not_kept():
            result = run_parity(Options(
                ref=(str(STANDINS / "es-at-scale"), str(STANDINS / "skill-sample")), target=None,
                devices=("cpu",), small=True, dtypes=("f32",), iterations=1, noises=("contract",),
                case="*/cpu/f32/*/[pe][es]*/N[57]",   # es-at-scale's perturb (torch's hook), the sample's loop (numpy's)
                out=str(tmp_path / label), quiet=True, child_env=dict(child_env or {})))
    frame = result.frame.sort_values("case")
    return frame, counts, result.metadata


def test_a_child_with_numba_one_without_and_one_served_give_the_same_rows(tmp_path, monkeypatch):
    """Three children, each row compared bit for bit with our side: drawing with numba (nothing served),
    drawing without numba (NUMBA_DISABLE_JIT: numpy), and served by the parent (nothing drawn)."""
    numba, numba_counts, _ = _run(tmp_path, "numba", monkeypatch, serve=False)
    plain, plain_counts, meta = _run(tmp_path, "numpy", monkeypatch, {"NUMBA_DISABLE_JIT": "1"}, serve=False)
    served, served_counts, _ = _run(tmp_path, "served", monkeypatch, {"NUMBA_DISABLE_JIT": "1"})
    ran = numba[numba["status"] != "skipped"]
    assert len(ran) >= 2 and set(ran["status"]) == {"pass"}, ran[["case", "status", "detail"]].to_string()
    assert set(ran["case"].str.split("/").str[0]) == {"es-at-scale", "skill-sample"}
    columns = ["case", "status", "diagnosis", "detail", "mismatches", "max_ulp_diff"]
    for other in (plain, served):
        assert numba[columns].to_dict("records") == other[columns].to_dict("records")
    assert "numba" not in meta["children"]["es-at-scale"]["noise_backends"]["cpu"]
    for counts in (numba_counts, plain_counts):
        assert sum(c.get("drawn", 0) for _, c in counts) > 0 and not any(c.get("served") for _, c in counts)
    # our side ran first for the child without numba: it read every range of its perturbs; the sample's loop
    # runs before our side replays it (our side needs its rewards), so its child draws what it needs
    perturbs = [c for op, c in served_counts if op == "perturb"]
    assert sum(c.get("served", 0) for c in perturbs) > 0 and not any(c.get("drawn") for c in perturbs)
