"""The noise memo of our side (esverify.oracle.noise_memo) and the store under it (esverify.rng.memo):
the same bits as drawing afresh, copies handed out, the byte budget kept, emptied after a run
(docs/parity.md, "Our side's noise")."""
from __future__ import annotations

from collections import OrderedDict

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from esverify.es import Config, Trainer
from esverify.es.noise import NoiseSource, TorchNoise
from esverify.oracle import noise_memo
from esverify.oracle.noise_memo import MemoNoise, MemoTorchNoise, memoized
from esverify.oracle.ours import SlotMappedTrainer
from esverify.rng.memo import RangeMemo

U64 = st.integers(0, 2 ** 64 - 1)


def _bits(t: torch.Tensor) -> np.ndarray:
    return t.contiguous().view(torch.int32).numpy().copy()


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from([1, 2, 0x9E3779B97F4A7C15, 2 ** 64 - 1]), st.integers(0, 9),
                          st.integers(0, 70), st.booleans()), min_size=1, max_size=25),
       st.sampled_from(["poly32", "libm64"]), st.integers(0, 600))
def test_memo_noise_hands_out_the_bits_of_a_fresh_draw_whatever_the_order_and_budget(draws, mapping, budget):
    """Differential: every draw through a memo (any budget, ranges repeated and overlapping, with and without
    `out`, the caller writing into what it got) equals NoiseSource's draw bit for bit, and both count the
    same elements."""
    memo, plain = MemoNoise(mapping, memo=RangeMemo(budget)), NoiseSource(mapping)
    for seed, first, n, into in draws:
        want = plain.draw(seed, first, n, torch.device("cpu"))
        out = torch.full((n,), 7.0) if into else None
        got = memo.draw(seed, first, n, torch.device("cpu"), out)
        assert np.array_equal(_bits(got), _bits(want)), (seed, first, n)
        if into:
            assert got is out
        got.add_(1.0)                               # the caller's copy: nothing kept changes
    assert memo.elements == plain.elements == sum(n for _, _, n, _ in draws)
    assert memo.memo.bytes <= budget or len(memo.memo) == 1


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_memo_torch_noise_is_torchs_own_draw_every_time(dtype):
    """torch's noise through the memo: the bits of TorchNoise.draw_tensor, for a repeated seed too, and a
    caller writing into its copy changes no later draw."""
    memo, plain = MemoTorchNoise(memo=RangeMemo(1 << 20)), TorchNoise()
    like = torch.zeros(3, 11, dtype=dtype)
    for seed in (5, 6, 5, 5, 2 ** 40 + 3):
        got = memo.draw_tensor(seed, like)
        assert np.array_equal(_bits(got), _bits(plain.draw_tensor(seed, like)))
        got.mul_(3.0)
    assert memo.elements == plain.elements == 5 * 33
    assert len(memo.memo) == 3


def test_a_range_memo_drops_the_least_recently_used_and_keeps_the_newest():
    """Known answer: ranges of 4, 8 and 12 bytes under a 16-byte budget."""
    memo = RangeMemo(16)
    draws = []

    def drawn(n):
        def draw():
            draws.append(n)
            return torch.zeros(n)
        return draw
    assert memo.get("a", drawn(1))[1] is False and memo.get("b", drawn(2))[1] is False
    assert memo.get("a", drawn(1))[1] is True              # now the most recent
    memo.get("c", drawn(3))                                 # 24 bytes: b, the least recent, leaves
    assert memo.keys() == ["a", "c"] and memo.bytes == 16
    memo.get("d", drawn(5))                                 # 20 bytes alone: over the budget, kept alone
    assert memo.keys() == ["d"] and memo.bytes == 20
    assert draws == [1, 2, 3, 5]
    memo.clear()
    assert memo.keys() == [] and memo.bytes == 0


@settings(max_examples=80, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 6), st.integers(1, 9)), max_size=40), st.integers(0, 64))
def test_a_range_memo_is_an_lru_of_bytes(requests, budget):
    """Property against a slow obviously-correct model: after every request the keys kept, their order and
    the byte count are the model's; a hit never draws."""
    memo, model = RangeMemo(budget), OrderedDict()
    sizes = {}
    for key, n in requests:
        n = sizes.setdefault(key, n)                   # one key, one range
        drew = []
        tensor, hit = memo.get(key, lambda n=n: drew.append(n) or torch.zeros(n))
        assert hit == (key in model) and bool(drew) != hit and tensor.numel() == n
        model[key] = n
        model.move_to_end(key)
        while sum(model.values()) * 4 > budget and len(model) > 1:
            model.popitem(last=False)
        assert memo.keys() == list(model) and memo.bytes == 4 * sum(model.values())


def test_a_range_memo_refuses_a_budget_that_is_not_a_byte_count():
    for bad in (-1, 1.5, True, "64"):
        with pytest.raises(ValueError, match="budget"):
            RangeMemo(bad)


@pytest.mark.parametrize("noise", ["contract", "torch"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("profile", ["es-at-scale", "es-awd", "es-paper"])
def test_our_sides_trainer_gives_the_plain_trainers_bits(noise, dtype, profile, monkeypatch):
    """Differential: SlotMappedTrainer (noise through the memo, uncopied) against the library's Trainer, on
    two trainers run one after the other (the second one's draws all come from the memo), for perturb,
    restore, update and decay."""
    monkeypatch.setattr(noise_memo, "MEMO", RangeMemo(1 << 20))
    config = Config(population=6, sigma=0.01, alpha=0.05, scheme="correlated", seed=11, profile=profile,
                    anchor_decay="l2", anchor_lambda=0.5, chunk_elements=5)

    def run(cls):
        tensors = [torch.linspace(-1, 1, 13).to(dtype), torch.linspace(0, 2, 6).to(dtype).reshape(2, 3)]
        trainer = cls([("w", tensors[0]), ("b", tensors[1])], config, noise=noise)
        states = []
        for _ in range(2):
            for m in range(config.population):
                trainer.perturb(m)
                states += [_bits(t.float()) for t in tensors]
                trainer.restore(m)
            trainer.update(np.linspace(-1.0, 2.0, config.population))
            states += [_bits(t.float()) for t in tensors]
        return states, trainer.noise.elements
    plain = run(Trainer)
    with noise_memo.keeping():
        for _ in range(2):
            mine = run(SlotMappedTrainer)
            assert len(mine[0]) == len(plain[0]) and all(np.array_equal(a, b) for a, b in zip(mine[0], plain[0]))
            assert mine[1] == plain[1]
        assert len(noise_memo.MEMO) > 0
    assert len(noise_memo.MEMO) == 0


def _profile_cases():
    from esverify.es.profiles import PROFILES
    return [(name, rule, dtype) for name, profile in sorted(PROFILES.items()) for rule in profile.rules
            for dtype in (torch.float32, torch.float16, torch.bfloat16)]


@pytest.mark.parametrize("name,rule,dtype", _profile_cases())
def test_no_profile_writes_into_the_noise_it_is_given(name, rule, dtype):
    """Our side's trainer hands the profiles the memo's kept noise itself (copies=False): every profile's
    perturb (into `out` and in place), accumulate (twice, then apply into theta) and accumulate_drawn must
    leave that noise's bits as they were, also with a NaN, an infinity and -0.0 among them, and no result
    may share its memory."""
    from esverify.es.profiles import get_profile
    profile = get_profile(name)
    n = 37                                          # not a multiple of 32: es-awd's cpu tail runs too
    eps = torch.from_numpy(np.random.default_rng(3).normal(size=n).astype(np.float32))
    eps[5], eps[9], eps[11] = float("nan"), float("inf"), -0.0
    before = _bits(eps)
    theta = torch.linspace(-1, 1, n).to(dtype)
    out = torch.empty_like(theta)
    profile.perturb(theta, eps, 0.01, rule, 0, n, out)
    profile.perturb(theta, eps, -0.01, rule, 0, n, theta)
    acc = profile.new_acc(n, dtype, torch.device("cpu"))
    for coeff in (1.0, -0.25):
        acc = profile.accumulate(acc, eps, coeff, dtype, rule, 0, n)
        assert acc.data_ptr() != eps.data_ptr()
    profile.apply(theta, acc, profile.scale(0.5, 4), rule, 0, n, theta)
    if profile.accumulate_drawn is not None:
        profile.accumulate_drawn(profile.new_acc(n, dtype, torch.device("cpu")), [1, 2], 0, "poly32", [1.0, -1.0],
                                 dtype, rule)
    assert np.array_equal(_bits(eps), before)
    assert out.data_ptr() != eps.data_ptr()


def test_memoized_keeps_the_kind_mapping_backend_and_torch_seed():
    seed_of = lambda s: s % 97   # noqa: E731
    contract = memoized(NoiseSource("libm64", "numpy"))
    torch_noise = memoized(TorchNoise(seed_of))
    assert (type(contract), contract.kind, contract.mapping, contract.backend) == (MemoNoise, "contract", "libm64",
                                                                                    "numpy")
    assert contract.copies and not memoized(NoiseSource("poly32"), copies=False).copies
    assert (type(torch_noise), torch_noise.kind, torch_noise.torch_seed) == (MemoTorchNoise, "torch", seed_of)
    assert contract.memo is None and torch_noise.memo is None     # MEMO, inside noise_memo.keeping()


def test_a_parity_run_draws_through_the_memo_and_empties_it_at_its_end(tmp_path, monkeypatch):
    """End to end on the es-at-scale stand-in: the run's rows pass with our side's noise coming through the
    memo (ranges drawn again are copied: hits), and nothing is kept once the run returns."""
    from esverify.oracle import Options, run_parity
    from standins.mutants import STANDINS
    memo, hits = RangeMemo(noise_memo.BUDGET_BYTES), []
    get = memo.get

    def counted(key, draw):
        tensor, hit = get(key, draw)
        hits.append(hit)
        return tensor, hit
    memo.get = counted
    monkeypatch.setattr(noise_memo, "MEMO", memo)
    result = run_parity(Options(ref=str(STANDINS / "es-at-scale"), target="es-at-scale", devices=("cpu",), small=True,
                                dtypes=("f16",), schemes=("iid",), iterations=1, case="*/f16/iid/[pru]*",
                                out=str(tmp_path / "out"), quiet=True))
    ran = result.frame[result.frame["status"] != "skipped"]
    assert len(ran) >= 3 and set(ran["status"]) == {"pass"}, ran[["case", "status", "detail"]].to_string()
    assert any(hits) and not all(hits)
    assert len(memo) == 0 and memo.bytes == 0


def test_one_memo_keeps_mappings_and_dtypes_apart():
    """Two mappings on one memo draw their own bits (the key holds the mapping), and torch's f16 and f32
    draws of one seed and shape are two keys (their bits differ)."""
    memo = RangeMemo(1 << 20)
    poly, libm = MemoNoise("poly32", memo=memo), MemoNoise("libm64", memo=memo)
    cpu = torch.device("cpu")
    assert np.array_equal(_bits(poly.draw(9, 0, 40, cpu)), _bits(NoiseSource("poly32").draw(9, 0, 40, cpu)))
    assert np.array_equal(_bits(libm.draw(9, 0, 40, cpu)), _bits(NoiseSource("libm64").draw(9, 0, 40, cpu)))
    torch_noise, plain = MemoTorchNoise(memo=memo), TorchNoise()
    for dtype in (torch.float32, torch.float16, torch.float32):
        like = torch.zeros(40, dtype=dtype)
        assert np.array_equal(_bits(torch_noise.draw_tensor(9, like)), _bits(plain.draw_tensor(9, like)))
    assert len(memo) == 4


def test_the_memo_is_used_only_inside_keeping_and_emptied_when_the_last_block_ends(monkeypatch):
    """Outside a run or session nothing is kept (a test calling our side directly leaves the process as it
    found it); nested blocks share the memo, and the outer one's end empties it."""
    memo = RangeMemo(1 << 20)
    monkeypatch.setattr(noise_memo, "MEMO", memo)
    noise, cpu = memoized(NoiseSource("poly32")), torch.device("cpu")
    noise.draw(3, 0, 8, cpu)
    assert len(memo) == 0
    with noise_memo.keeping():
        noise.draw(3, 0, 8, cpu)
        with noise_memo.keeping():
            noise.draw(4, 0, 8, cpu)
        assert len(memo) == 2
    assert len(memo) == 0


def test_what_the_memo_does_not_take_is_the_plain_draw_with_its_errors(monkeypatch):
    """Arguments NoiseSource refuses are refused, never read as another range's key; `out`, empty ranges
    and other devices are NoiseSource's own draw, and the memo is not touched."""
    memo = RangeMemo(1 << 20)
    noise, cpu = MemoNoise("poly32", memo=memo), torch.device("cpu")
    noise.draw(1, 0, 4, cpu)
    for args in ((True, 0, 4), (1.0, 0, 4), (1, 0.0, 4), (1, 0, 4.0)):
        with pytest.raises((TypeError, ValueError)):
            NoiseSource("poly32").draw(*args, cpu)
        with pytest.raises((TypeError, ValueError)):
            noise.draw(*args, cpu)
    calls = []
    monkeypatch.setattr(NoiseSource, "draw", lambda self, *args: calls.append(args) or "plain")
    out = torch.empty(4)
    assert noise.draw(1, 0, 4, cpu, out) == "plain" and noise.draw(1, 0, 0, cpu) == "plain"
    assert noise.draw(1, 0, 4, torch.device("meta")) == "plain" and len(calls) == 3
    monkeypatch.setattr(TorchNoise, "draw_tensor", lambda self, seed, like: "plain")
    assert MemoTorchNoise(memo=memo).draw_tensor(5, torch.zeros(3, device="meta")) == "plain"
    assert memo.keys() == [("contract", "poly32", None, 1, 0, 4)]


def test_a_range_drawn_while_the_memo_is_cleared_is_not_kept():
    memo = RangeMemo(1 << 20)

    def draw():
        memo.clear()        # a run ending while another thread draws
        return torch.zeros(4)
    tensor, hit = memo.get("k", draw)
    assert not hit and tensor.numel() == 4 and len(memo) == 0 and memo.bytes == 0


def test_our_sides_trainer_keeps_the_memo_after_loading_a_state():
    trainer = SlotMappedTrainer([torch.zeros(5)], Config(population=4, profile="es-awd"))
    trainer.load_state_dict(trainer.state_dict())
    assert type(trainer.noise) is MemoNoise and trainer.noise.copies is False


def test_without_copies_the_kept_tensor_itself_is_handed_out():
    memo = RangeMemo(1 << 20)
    noise, cpu = MemoNoise("poly32", memo=memo, copies=False), torch.device("cpu")
    first = noise.draw(7, 0, 16, cpu)
    assert noise.draw(7, 0, 16, cpu) is first
    torch_noise = MemoTorchNoise(memo=memo, copies=False)
    like = torch.zeros(4, 4)
    assert torch_noise.draw_tensor(3, like) is torch_noise.draw_tensor(3, like)


def test_a_session_draws_through_the_memo_and_empties_it_at_its_end(monkeypatch):
    """Runner.session() (fuzz shrinking, mutant catalogs) holds the memo for its cases and empties it."""
    from esverify.oracle import Options, Runner, cases
    from standins.mutants import STANDINS
    memo = RangeMemo(noise_memo.BUDGET_BYTES)
    monkeypatch.setattr(noise_memo, "MEMO", memo)
    matrix = cases.build_matrix(["es-at-scale"], ["cpu"], ("f16",), ("iid",), iterations=1, small=True,
                                noises=("contract",), loops=False)
    runner = Runner(Options(target="es-at-scale", devices=("cpu",), quiet=True, timeout=120))
    with runner.session("es-at-scale", STANDINS / "es-at-scale") as run:
        rows = [run(c) for c in cases.select(matrix, "*/f16/iid/[pru]*")]
        kept = len(memo)
    assert rows and {r["status"] for r in rows} == {"pass"}, [(r["case"], r["detail"][:80]) for r in rows]
    assert kept > 0 and len(memo) == 0
