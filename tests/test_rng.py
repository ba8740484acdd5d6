"""esverify.rng: splitmix64 known answers, counter access, seeds, argument errors (docs/CONTRACT.md §2, §4)."""
import numpy as np
import pytest
import torch
from hypothesis import example, given
from hypothesis import strategies as st

from esverify import rng
from esverify.rng import scalar

U64 = st.integers(0, 2**64 - 1)

# docs/CONTRACT.md §2: the sequential generator seeded with 1234567.
KNOWN_1234567 = [6457827717110365317, 3203168211198807973, 9817491932198370423,
                 4593380528125082431, 16408922859458223821]


def test_contract_version():
    assert rng.CONTRACT_VERSION == 1


def test_known_answers_sequential_and_counter():
    assert scalar.sequential(1234567, 5) == KNOWN_1234567
    assert [rng.at(1234567, i) for i in range(5)] == KNOWN_1234567
    # Vigna's splitmix64.c with state 0: first output 0xe220a8397b1dcdaf.
    assert rng.at(0, 0) == 0xE220A8397B1DCDAF


def test_known_answers_numpy_and_torch():
    idx = np.arange(5, dtype=np.uint64)
    got = rng.at(1234567, idx)
    assert got.dtype == np.uint64 and got.tolist() == KNOWN_1234567
    t = rng.at(1234567, torch.arange(5, dtype=torch.int64))
    assert t.dtype == torch.int64
    assert [v & (2**64 - 1) for v in t.tolist()] == KNOWN_1234567


@given(seed=U64, i=st.integers(0, 300))
@example(seed=0, i=0)
@example(seed=2**64 - 1, i=300)
def test_at_is_ith_sequential_output(seed, i):
    assert rng.at(seed, i) == scalar.sequential(seed, i + 1)[-1]


@given(seed=U64, idx=st.lists(U64, min_size=1, max_size=40))
@example(seed=2**64 - 1, idx=[0, 2**64 - 1, 2**63, 2**63 - 1])
def test_at_numpy_and_torch_hold_the_same_bits(seed, idx):
    want = [rng.at(seed, i) for i in idx]
    got_np = rng.at(seed, np.array(idx, dtype=np.uint64))
    assert got_np.dtype == np.uint64 and got_np.tolist() == want
    signed = torch.tensor([i - 2**64 if i >> 63 else i for i in idx], dtype=torch.int64)
    got_t = rng.at(seed, signed)
    assert got_t.dtype == torch.int64 and got_t.device == signed.device
    assert [v & (2**64 - 1) for v in got_t.tolist()] == want
    # a 2-D index keeps its shape
    assert rng.at(seed, np.array(idx, dtype=np.uint64).reshape(1, -1)).shape == (1, len(idx))


@given(seed=U64, iteration=st.integers(0, 2**40), population=st.integers(1, 2**20),
       member=st.integers(0, 2**20))
@example(seed=2**64 - 1, iteration=2**40, population=2**20, member=2**20)
def test_member_seed_is_the_spec_formula(seed, iteration, population, member):
    want = scalar.at(seed ^ 0x65735F7365656473, (iteration * population + member) % 2**64)
    assert rng.member_seed(seed, iteration, population, member) == want
    assert want == scalar.member_seed(seed, iteration, population, member)


@given(ms=U64, slot=st.integers(0, 10_000))
def test_stream_seed_schemes(ms, slot):
    assert rng.stream_seed(ms, slot, "correlated") == ms
    assert rng.stream_seed(ms, slot, "iid") == scalar.at(ms ^ 0x65735F6E6F697365, slot)
    assert rng.stream_seed(ms, slot, "iid") != rng.stream_seed(ms, slot + 1, "iid")


def test_member_seed_counter_wraps_u64():
    # iteration * population + member overflows u64: the counter wraps.
    big = 2**63
    assert rng.member_seed(7, big, 2, 3) == rng.member_seed(7, 0, 1, 3)


def test_correlated_gives_equal_size_slots_equal_noise_iid_does_not():
    ms = rng.member_seed(2024, 3, 8, 5)
    c0, c1 = (rng.gaussian(rng.stream_seed(ms, s, "correlated"), 300) for s in (0, 1))
    assert np.array_equal(c0.view(np.uint32), c1.view(np.uint32))
    short = rng.gaussian(rng.stream_seed(ms, 2, "correlated"), 120)
    assert np.array_equal(short.view(np.uint32), c0[:120].view(np.uint32))  # shared prefix
    i0, i1 = (rng.gaussian(rng.stream_seed(ms, s, "iid"), 300) for s in (0, 1))
    assert (i0.view(np.uint32) != i1.view(np.uint32)).sum() > 290


@pytest.mark.parametrize("call, name", [
    (lambda: rng.gaussian(-1, 3), "seed"),
    (lambda: rng.gaussian(2**64, 3), "seed"),
    (lambda: rng.gaussian(1.5, 3), "seed"),
    (lambda: rng.gaussian(1, -1), "n"),
    (lambda: rng.gaussian(1, 3, first=-2), "first"),
    (lambda: rng.gaussian(1, 3, first=2**64 - 2), "first"),
    (lambda: rng.gaussian(1, 3, mapping="box-muller"), "mapping"),
    (lambda: rng.gaussian(1, 3, backend="jax"), "backend"),
    (lambda: rng.gaussian(1, 3, chunk_elements=0), "chunk_elements"),
    (lambda: rng.gaussian(1, 3, device="no-such-device"), "device"),
    (lambda: rng.gaussian(1, 3, device="meta"), "device"),
    (lambda: rng.gaussian_into(np.empty(3, np.float64), 1), "out"),
    (lambda: rng.gaussian_into(np.empty((2, 2), np.float32), 1), "out"),
    (lambda: rng.gaussian_into([0.0] * 3, 1), "out"),
    (lambda: rng.at(2**64, 0), "seed"),
    (lambda: rng.at(0, -1), "index"),
    (lambda: rng.at(0, np.zeros(2, np.float64)), "index"),
    (lambda: rng.at(0, np.array([3, -1], np.int64)), "index"),
    (lambda: rng.member_seed(-1, 0, 1, 0), "seed"),
    (lambda: rng.member_seed(1, -1, 1, 0), "iteration"),
    (lambda: rng.stream_seed(1, 0, "shared"), "scheme"),
    (lambda: rng.stream_seed(2**64, 0, "iid"), "member_seed"),
    (lambda: rng.stream_seed(1, -3, "iid"), "slot"),
])
def test_bad_input_names_the_argument(call, name):
    with pytest.raises((ValueError, TypeError), match=name):
        call()


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-CUDA error")
def test_cuda_device_without_cuda_is_a_clear_error():
    with pytest.raises(ValueError, match="device.*CUDA is not available"):
        rng.gaussian(1, 3, device="cuda")


def test_mapping_registry_is_named_values():
    assert set(rng.MAPPINGS) == {"poly32", "libm64"}
    for name, m in rng.MAPPINGS.items():
        assert m.name == name
        for backend in rng.BACKENDS:
            assert callable(m.kernel(backend))
    assert rng.MAPPINGS["poly32"].bitwise_portable and not rng.MAPPINGS["libm64"].bitwise_portable


@given(seed=U64, first=st.one_of(st.integers(0, 300), st.integers(2**64 - 300, 2**64 - 1)),
       n=st.integers(0, 9), mapping=st.sampled_from(["poly32", "libm64"]))
@example(seed=0, first=2**64 - 1, n=1, mapping="poly32")          # the last element: the sine half of the last pair
@example(seed=2**64 - 1, first=1, n=0, mapping="libm64")          # an odd start and nothing to return
def test_scalar_gaussian_by_pairs_is_the_element_by_element_stream(seed, first, n, mapping):
    """scalar.gaussian computes each aligned pair once for both its elements: the same bits as the
    element functions, one element at a time, for any start (odd or even) and count (the pairs' own
    bits are the committed goldens': tests/test_goldens_file.py regenerates them byte for byte)."""
    first = min(first, 2**64 - n)
    got = scalar.gaussian(seed, n, first, mapping)
    want = [scalar.MAPPINGS[mapping](seed, j) for j in range(first, first + n)]
    assert [scalar.f32_bits(x) for x in got] == [scalar.f32_bits(x) for x in want]
