"""Parity fidelity, round 2: the stand-in model is a real torch.nn.Module, the noise hook
accepts every call torch computes like torch.randn(size, generator=g) (proven here on this torch)
and nothing else, the reward populations and the `layers` set, and the repeat check.

The end-to-end mutants of these kinds (structure, rewards, state) and the new equivalents run in
tests/test_parity_mutants.py.
"""
from __future__ import annotations

import copy
import dataclasses
import importlib.util
import json
import sys

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from esverify import rng as es_rng
from esverify.es import shape_rewards
from esverify.oracle import Options, adapters, cases, ours, paramsets, repeat, rewards, run_parity
from esverify.paths import oracles_dir
from standins.mutants import STANDINS, make_mutant


def _load_child_module():
    # child_server imports its sibling modules by plain name, as the child (started in oracles/) does:
    # without the folder on the path this file only loaded after another test file had put it there
    if str(oracles_dir()) not in sys.path:
        sys.path.insert(0, str(oracles_dir()))
    spec = importlib.util.spec_from_file_location("child_server_fidelity", oracles_dir() / "child_server.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


child = _load_child_module()
DTYPES = (torch.float32, torch.float16, torch.bfloat16, torch.float64)
#: 0-dim, below, at and above the 16 elements where torch's CPU normal kernel changes path, 2-D
SIZES = ((), (1,), (7,), (15,), (16,), (17,), (3, 40), (1031, 3))


def _bits(t: torch.Tensor) -> np.ndarray:
    return paramsets.tensor_bits(t.detach()).reshape(-1)


def _gen(seed=1234, device="cpu"):
    return torch.Generator(device=device).manual_seed(seed)


# ------------------------------------------------------------------ the stand-in model is a Module

NAMES = [n for n, _ in paramsets.LAYERED_SHAPES]


def _layered(ties=paramsets.LAYERED_TIES):
    names, tensors = paramsets.build("mixed", False, shapes=paramsets.LAYERED_SHAPES)
    return child.StandInModel(names, tensors, dict(ties)), names, tensors


def test_the_stand_in_model_is_a_module_with_every_api():
    model, names, tensors = _layered()
    assert isinstance(model, torch.nn.Module)
    assert [n for n, _ in model.named_parameters()] == names
    assert [n for n, _ in model.named_parameters(remove_duplicate=True)] == names
    assert [n for n, _ in model.named_parameters(remove_duplicate=False)] == names + ["lm_head.weight"]
    assert list(model.parameters(recurse=True)) == list(model.tensors)
    assert list(model.parameters(recurse=False)) == []            # the root holds submodules only
    assert list(model.state_dict()) == names + ["lm_head.weight"]  # slot order, then the tied head
    assert list(model.buffers()) == [] and len(list(model.modules())) > len(paramsets.LAYERED_SHAPES) // 4
    assert model.lm_head.weight is model.model.embed_tokens.weight is model.tensors[0]
    assert model.model.layers[2].self_attn.q_proj.weight is model.tensors[names.index(
        "model.layers.2.self_attn.q_proj.weight")]
    assert len(model.model.layers) == paramsets.LAYERS
    for given_t, param in zip(tensors, model.tensors):     # the Parameters share the tensors' storage
        assert isinstance(param, torch.nn.Parameter) and not param.requires_grad
        assert param.data_ptr() == given_t.data_ptr() and param.dtype == given_t.dtype
    state = model.state_dict()
    assert all(torch.equal(state[n], t) for n, t in zip(names, tensors))
    model.tensors[3].data.add_(1.0)                          # in place through the module: the slot sees it
    assert torch.equal(model.tensors[3], tensors[3])
    clone = copy.deepcopy(model)
    assert [n for n, _ in clone.named_parameters()] == names


def test_every_parameter_iterator_records_the_slot_as_it_yields():
    model, names, _ = _layered()
    seen = []
    for name, _ in model.named_parameters():
        seen.append(model.current)
    assert seen == list(range(len(names)))
    layer = model.model.layers[1]
    for name, param in layer.named_parameters(prefix="model.layers.1"):
        assert model.current == names.index(name) and model.tensors[model.current] is param
    for module in model.modules():                      # a walk over modules and their own parameters
        for param in module.parameters(recurse=False):
            assert model.tensors[model.current] is param
    it = model.named_parameters(remove_duplicate=False)
    for name, param in it:
        if name == "lm_head.weight":                     # the tied alias is the embedding's slot
            assert model.current == 0
    everything = list(model.parameters())                # consumed first: the last slot (eager)
    assert model.current == len(names) - 1 and len(everything) == len(names)


@given(st.lists(st.tuples(st.integers(0, 2), st.integers(0, 2)), min_size=1, max_size=6, unique=True))
def test_any_module_ordered_set_builds_and_walks_in_slot_order(layout):
    names = [f"model.layers.{i}.proj{j}.weight" for i, j in sorted(layout)]
    tensors = [torch.zeros(k + 1) for k in range(len(names))]
    model = child.StandInModel(names, tensors)
    assert [n for n, _ in model.named_parameters()] == names == list(model.state_dict())
    for k, _ in enumerate(model.parameters()):
        assert model.current == k


def test_bad_names_and_ties_are_refused_naming_the_problem():
    z = [torch.zeros(1)] * 3
    with pytest.raises(ValueError, match="not in module order: slot 1 is 'b.y'"):
        child.StandInModel(["a.x", "b.y", "a.z"], z)
    with pytest.raises(ValueError, match="own parameters come before"):
        child.StandInModel(["a.sub.x", "a.w"], z[:2])
    with pytest.raises(ValueError, match="is a parameter and a module|given twice or is also a module"):
        child.StandInModel(["a", "a.b"], z[:2])
    with pytest.raises(ValueError, match="distinct"):
        child.StandInModel(["a", "a"], z[:2])
    with pytest.raises(ValueError, match="tie 'head' -> 'nope'"):
        child.StandInModel(["a", "b"], z[:2], {"head": "nope"})
    with pytest.raises(ValueError, match="tie"):
        paramsets.check_ties(["a", "b"], [("b", "a")])


def test_a_set_with_ties_round_trips_through_its_file(tmp_path):
    names, tensors = paramsets.build("f32", False, shapes=paramsets.LAYERED_SHAPES)
    path = paramsets.write(tmp_path / "s.npz", names, tensors, paramsets.LAYERED_TIES)
    assert child.load_ties(path) == dict(paramsets.LAYERED_TIES)
    assert child.load_set(path, "cpu")[0] == names
    plain = paramsets.write(tmp_path / "p.npz", names, tensors)
    assert child.load_ties(plain) == {}


def test_the_layers_set_spells_a_real_checkpoint():
    names = NAMES
    layers = {n.split(".")[2] for n in names if n.startswith("model.layers.")}
    assert layers == {"0", "1", "2"}
    for kind in ("embed_tokens.weight", "q_proj.bias", "input_layernorm.weight", "model.norm.weight", "mlp.down_proj"):
        assert any(kind in n for n in names), kind
    shapes = dict(paramsets.LAYERED_SHAPES)
    assert sum(1 for s in shapes.values() if s == ()) == paramsets.LAYERS          # a 0-dim scalar per layer
    assert all(np.prod(s) % 32 for s in shapes.values() if s)                       # the rule `cpu` tail
    assert dict(paramsets.LAYERED_TIES) == {"lm_head.weight": "model.embed_tokens.weight"}
    assert sum(int(np.prod(s)) for s in shapes.values()) < 12_000                  # small: the matrix stays fast
    child.StandInModel(names, [torch.zeros(s) for s in shapes.values()], dict(paramsets.LAYERED_TIES))
    names_small = [n for n, _ in paramsets.SMALL_SHAPES]                           # the standard set too
    child.StandInModel(names_small, [torch.zeros(s) for _, s in paramsets.SMALL_SHAPES])


# ------------------------------------------------------------------ torch draws equal to randn (this torch)

DRAWS = {
    "torch.normal(0, 1, size)": lambda size, d, g: torch.normal(0, 1, size, generator=g, dtype=d),
    "torch.normal(0., 1., size=)": lambda size, d, g: torch.normal(0., 1., size=size, generator=g, dtype=d),
    "torch.normal(mean=0, std=1, size=)": lambda size, d, g: torch.normal(mean=0, std=1, size=size, generator=g,
                                                                          dtype=d),
    "Tensor.normal_()": lambda size, d, g: torch.empty(size, dtype=d).normal_(generator=g),
    "Tensor.normal_(0, 1)": lambda size, d, g: torch.empty(size, dtype=d).normal_(0, 1, generator=g),
    "Tensor.normal_(mean=0., std=1.)": lambda size, d, g: torch.empty(size, dtype=d).normal_(mean=0., std=1.,
                                                                                            generator=g),
    "torch.randn_like": lambda size, d, g: torch.randn_like(torch.empty(size, dtype=d), generator=g),
    "torch.randn(*sizes, out=)": lambda size, d, g: torch.randn(*(size or [()]), generator=g,
                                                        out=torch.empty(size, dtype=d)),
    "torch.nn.init.normal_": lambda size, d, g: torch.nn.init.normal_(torch.empty(size, dtype=d), generator=g),
}


@pytest.mark.parametrize("entry", sorted(DRAWS))
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_each_accepted_entry_point_is_bitwise_torch_randn_on_this_torch(entry, dtype):
    """The equivalences the hook relies on (docs/references.md §3b), with real generators: the same bits
    as torch.randn(size, generator=g, dtype=d), and the generator left where randn leaves it."""
    for size in SIZES:
        g_ref, g = _gen(), _gen()
        want = torch.randn(size, generator=g_ref, dtype=dtype)
        got = DRAWS[entry](size, dtype, g)
        assert got.dtype == dtype and tuple(got.shape) == size
        assert np.array_equal(_bits(got), _bits(want)), (entry, size)
        assert torch.equal(g.get_state(), g_ref.get_state()), (entry, size)


@pytest.mark.parametrize("what, draw, like", [
    ("normal_(0, 2)", lambda g: torch.empty(40).normal_(0, 2, generator=g), (40,)),
    ("normal(0.5, 1, size)", lambda g: torch.normal(0.5, 1, (40,), generator=g), (40,)),
    ("randn_like(transposed)", lambda g: torch.randn_like(torch.empty(40, 3).t(), generator=g), (3, 40)),
    ("normal_ of a transposed tensor", lambda g: torch.empty(40, 3).t().normal_(generator=g), (3, 40)),
])
def test_what_the_hook_refuses_is_not_randn_on_this_torch(what, draw, like):
    """The calls refused under contract noise draw other numbers (or fill another order) than randn."""
    got = draw(_gen())
    assert tuple(got.shape) == like and not torch.equal(got, torch.randn(like, generator=_gen()))


def test_only_plus_zero_and_one_are_the_standard_normal():
    # -0.0 as the mean: torch adds the mean, and -0 + z differs from randn's +0 + z where z is -0
    assert child._standard(-0.0, 1) and child._standard(0, 2) and child._standard(torch.zeros(()), 1)
    assert child._standard(True, 1) and not child._standard(0, 1) and not child._standard(0.0, 1.0)


# ------------------------------------------------------------------ the hook under contract and native noise

@pytest.fixture
def hook():
    h = child.NoiseHook()
    model = child.StandInModel(["a", "b"], [torch.zeros(3, 5, dtype=torch.bfloat16), torch.zeros(20)])
    h.configure(model, {1000: 0x1234, 2000: 0x5678}, "iid", "poly32", None)
    return h, model


def _contract(slot, n, dtype, position=0):
    stream = es_rng.stream_seed(0x5678, slot, "iid")
    return torch.from_numpy(es_rng.gaussian(stream, n, first=position, mapping="poly32")).to(dtype)


CONTRACT_CALLS = {
    "randn": lambda h, t, g: h(t.shape, dtype=t.dtype, generator=g),
    "randn(*sizes)": lambda h, t, g: h(*t.shape, dtype=t.dtype, generator=g),
    "randn(size=)": lambda h, t, g: h(size=t.shape, dtype=t.dtype, generator=g),
    "randn(out=)": lambda h, t, g: h(t.shape, generator=g, out=torch.empty(t.shape, dtype=t.dtype)),
    "randn_like": lambda h, t, g: h.randn_like(t, generator=g),
    "normal(0, 1, size)": lambda h, t, g: h.normal(0, 1, tuple(t.shape), generator=g, dtype=t.dtype),
    "normal(0., 1., size=)": lambda h, t, g: h.normal(0., 1., size=t.shape, generator=g, dtype=t.dtype),
    "normal_": lambda h, t, g: h.normal_(torch.empty_like(t), generator=g),
    "normal_(0, 1)": lambda h, t, g: h.normal_(torch.empty_like(t), 0, 1, generator=g),
}


@pytest.mark.parametrize("call", sorted(CONTRACT_CALLS))
def test_every_accepted_call_draws_the_contract_stream_like_randn(hook, call):
    h, model = hook
    for slot, t in enumerate(model.parameters()):
        g = _gen(2000)
        first = CONTRACT_CALLS[call](h, t, g)
        second = CONTRACT_CALLS[call](h, t, g)             # the generator is a stream: it continues
        n = t.numel()
        assert first.dtype == t.dtype and tuple(first.shape) == tuple(t.shape)
        assert np.array_equal(_bits(first), _bits(_contract(slot, n, t.dtype)))
        assert np.array_equal(_bits(second), _bits(_contract(slot, n, t.dtype, position=n)))
    assert [(d[1], d[2]) for d in h.draws] == [(0, 0), (0, 15), (1, 0), (1, 20)]


@pytest.mark.parametrize("call, message", [
    (lambda h, t: h.normal_(torch.empty(4), 0, 2, generator=_gen(2000)), "mean 0 and std 2"),
    (lambda h, t: h.normal_(torch.empty(4), -0.0, 1, generator=_gen(2000)), "mean -0.0"),
    (lambda h, t: h.normal(torch.zeros(4), 1.0, generator=_gen(2000)), "not numbers"),
    (lambda h, t: h.normal(0, 1, generator=_gen(2000)), "no size"),
    (lambda h, t: h.randn_like(torch.empty(4, 3).t(), generator=_gen(2000)), "non-contiguous"),
    (lambda h, t: h.normal_(torch.empty(4, 3).t(), generator=_gen(2000)), "non-contiguous"),
    (lambda h, t: h.normal_(torch.empty(4)), "without a generator"),
    (lambda h, t: h.normal(0, 1, (4,)), "without a generator"),
    (lambda h, t: h.randn_like(torch.empty(4), generator=_gen(1001)), "unknown seed 1001"),
    (lambda h, t: h((4,), generator=_gen(2000), names=("x",)), "named tensor"),
])
def test_what_is_not_randn_is_refused_under_contract_noise(hook, call, message):
    h, model = hook
    next(model.parameters())
    with pytest.raises(child.NoiseAttributionError, match=message):
        call(h, None)
    assert h.draws == []


def test_native_noise_is_torchs_own_for_every_entry_and_refuses_nothing(hook):
    h, model = hook
    h.noise = "native"
    next(model.parameters())
    calls = [
        (lambda f: f["normal_"](torch.empty(30), 0, 2, generator=_gen(1000)), True),    # refused under contract
        (lambda f: f["normal"](0, 1, (30,), generator=_gen(1000)), True),
        (lambda f: f["randn_like"](torch.empty(30), generator=_gen(1000)), True),
        (lambda f: f["randn"]((30,), generator=_gen(1000)), True),
        (lambda f: f["randn"]((30,), generator=_gen(77)), False),                         # not a member's seed
    ]
    ours = {"normal_": h.normal_, "normal": h.normal, "randn_like": h.randn_like, "randn": h}
    for call, attributed in calls:
        assert np.array_equal(_bits(call(ours)), _bits(call(child.ORIGINALS)))
    assert [d[:3] for d in h.draws] == [(1000, 0, 0)] * 4
    assert h.foreign == [{"entry": "torch.randn", "seed": 77, "slot": 0, "elements": 30}]
    torch.manual_seed(1000)
    got = h((30,))                                         # no generator: torch's default one, as torch does
    torch.manual_seed(1000)
    assert torch.equal(got, child.ORIGINALS["randn"]((30,)))
    assert h.foreign[-1]["seed"] is None


def test_installed_hook_covers_every_entry_and_uninstalls_to_torchs_own():
    saved = {k: v for k, v in child.ORIGINALS.items()}
    h = child.NoiseHook()
    model = child.StandInModel(["a"], [torch.zeros(20)])
    h.configure(model, {1000: 0x1234}, "correlated", "poly32", None)
    old, child.HOOK = child.HOOK, h
    try:
        child.install_hook()
        next(model.parameters())
        for draw in (lambda: torch.randn(20, generator=_gen(1000)),
                     lambda: torch.normal(0, 1, (20,), generator=_gen(1000)),
                     lambda: torch.empty(20).normal_(generator=_gen(1000)),
                     lambda: torch.randn_like(torch.empty(20), generator=_gen(1000))):
            assert np.array_equal(draw().numpy(), es_rng.gaussian(0x1234, 20, mapping="poly32"))
        with pytest.raises(child.NoiseAttributionError):
            torch.empty(3).normal_()
        child.uninstall_hook()
        assert torch.randn is saved["randn"] and torch.normal is saved["normal"]
        assert torch.randn_like is saved["randn_like"] and torch.Tensor.normal_ is saved["normal_"]
        child.install_hook()
        torch.randn = saved["randn"]      # a loop driver that puts back torch.randn only: the rest follows
        assert torch.equal(torch.empty(8).normal_(0, 2, generator=_gen(5)),
                           saved["normal_"](torch.empty(8), 0, 2, generator=_gen(5)))
    finally:
        child.uninstall_hook()
        child.HOOK = old
    assert torch.Tensor.normal_ is saved["normal_"]


# ------------------------------------------------------------------ reward populations

@settings(max_examples=60, deadline=None)
@given(st.sampled_from(rewards.SHAPES), st.integers(0, 2 ** 32), st.integers(2, 200))
def test_each_reward_population_gives_what_we_expect_of_it(shape, seed, n):
    """Known in advance (esverify.oracle.rewards.expectations): e.g. equal rewards -> all-zero coefficients,
    an outlier -> |z| > 5, a tiny spread -> the 1e-8 of the divisor dominates."""
    if shape == "outliers" and n < rewards.OUTLIER_MIN:
        with pytest.raises(ValueError, match="at least 27"):
            rewards.draw(shape, seed, n)
        return
    r = rewards.draw(shape, seed, n)
    assert r.shape == (n,) and np.array_equal(r, rewards.draw(shape, seed, n))
    coeffs, _ = shape_rewards(r, "zscore")
    assert rewards.expectations(shape, r, coeffs) == []


@pytest.mark.parametrize("shape, wrong", [
    ("outliers", lambda r, c: np.clip(c, -5, 5)),
    ("tiny", lambda r, c: np.where(np.abs(c) < 1e-3, 0.0, c)),
    ("tiny", lambda r, c: (r - r.mean()) / (max(r.std(), 1e-6) + 1e-8)),
    ("equal", lambda r, c: r.copy()),
    ("sparse", lambda r, c: np.where(r > 0, 1.0, 0.0)),
    ("ties", lambda r, c: c + np.arange(len(c)) * 1e-12),
])
def test_a_wrong_shaping_breaks_its_populations_expectation(shape, wrong):
    r = rewards.draw(shape, 20260401, 30)
    coeffs, _ = shape_rewards(r, "zscore")
    assert rewards.expectations(shape, r, coeffs) == []
    assert rewards.expectations(shape, r, wrong(r, coeffs)) != []


@pytest.mark.parametrize("target, op", [("es-at-scale", "update"), ("es-awd", "update-none"), ("es-awd", "mirrored")])
def test_equal_rewards_leave_the_parameters_bit_for_bit_on_our_side(target, op):
    case = cases.Case(target, "cpu", "mixed", "iid", op, 30, 0.01, 0.003, rewards="equal")
    case.handles = cases.draw_handles(np.random.default_rng(1), 30)
    names, tensors = paramsets.build("mixed", False, shapes=paramsets.LAYERED_SHAPES)
    before = [_bits(t) for t in tensors]
    anchor = [t.clone() for t in tensors]
    result = ours.run(cases.check(case), names, tensors, anchor, 42, "poly32", None)
    assert all(c == 0.0 for c in result.command["coeffs"])
    assert all(np.array_equal(_bits(t), b) for t, b in zip(result.tensors, before))


def test_the_matrix_runs_each_reward_population_and_the_layers_set():
    matrix = cases.build_matrix(["es-at-scale", "es-awd"], ["cpu"], ["f32", "f16", "bf16"], ["iid", "correlated"],
                                iterations=1)
    by_id = {c.case_id: c for c in matrix}
    for shape in cases.REWARD_SHAPES:
        assert f"es-at-scale/cpu/f64/-/zscore/N30/{shape}" in by_id
        assert f"es-at-scale/cpu/mixed/correlated/update/N30/{shape}" in by_id
        assert f"es-awd/cpu/mixed/correlated/update-none/N30/{shape}" in by_id
    layered = [c for c in matrix if c.tag == "layers"]
    assert {(c.target, c.op) for c in layered} == {(a.name, op) for a in adapters.all_adapters() for op in a.layered_ops}
    assert {c.noise for c in layered} == {"contract", "native"} and {c.scheme for c in layered} == {"iid", "correlated"}
    assert all(c.shapes == paramsets.LAYERED_SHAPES and c.ties == paramsets.LAYERED_TIES for c in layered)
    again = cases.from_json(cases.to_json(layered[0]))
    assert again == layered[0]
    shaped = by_id["es-awd/cpu/mixed/correlated/update-none/N30/outliers"]
    assert cases.from_json(cases.to_json(shaped)).rewards == "outliers"


def test_fuzz_draws_reward_populations_and_the_layers_set():
    rng = np.random.default_rng(3)
    drawn = [cases.random_case(rng, ["es-at-scale", "es-awd"]) for _ in range(400)]
    assert {c.rewards for c in drawn} == set(rewards.SHAPES)
    assert {c.rewards for c in drawn if c.kind not in ("update", "zscore")} == {"normal"}
    assert any(c.ties for c in drawn)
    for c in drawn:
        assert cases.from_json(cases.to_json(c)) == c
    shrunk = cases.shrink_candidates(next(c for c in drawn if c.rewards == "outliers" and c.op != "zscore"))
    assert any(c.rewards == "normal" for c in shrunk)


@pytest.mark.parametrize("change, message", [
    (dict(rewards="outliers", population=7), "at least 27"),
    (dict(rewards="bimodal"), "rewards must be one of"),
    (dict(op="perturb", rewards="sparse"), "takes no rewards"),
    (dict(shapes=(("a", (3,)),), ties=(("b", "c"),)), "tie"),
    (dict(ties=(("b", "a"),)), "ties need the case's own shapes"),
])
def test_bad_rewards_or_ties_in_a_case_are_refused(change, message):
    case = cases.Case("es-at-scale", "cpu", "f32", "iid", "update", 7, 0.01, 0.01)
    case.handles = cases.draw_handles(np.random.default_rng(0), 40)
    with pytest.raises(ValueError, match=message):
        cases.check(dataclasses.replace(case, **change))


# ------------------------------------------------------------------ the repeat check

def test_repeat_choose_difference_and_mark():
    matrix = cases.build_matrix(["es-at-scale"], ["cpu"], ["f32"], ["iid"], iterations=1, loops=False)
    picked = repeat.choose(matrix)
    assert len(picked) == repeat.REPEATS and picked == sorted(picked, reverse=True)
    assert all(not matrix[k].big for k in picked)
    assert repeat.choose(matrix[:2]) == [1, 0]
    a = [np.array([1, 2, 3], dtype=np.uint32), np.array([7], dtype=np.uint16)]
    assert repeat.difference(a, [x.copy() for x in a], ["x", "y"]) == ""
    b = [a[0].copy(), np.array([9], dtype=np.uint16)]
    assert repeat.difference(a, b, ["x", "y"]) == "1 element(s) differ, first y[0]: 0x0007 then 0x0009"
    row = {"status": "pass", "diagnosis": "", "detail": ""}
    repeat.mark(row, 3, 9, "1 element(s) differ")
    assert row["status"] == "fail" and row["diagnosis"] == "state"
    assert "run position 3 and again at position 9 (after 5 other case(s)" in row["detail"]
    assert row["detail"].endswith("first run: pass")


@pytest.mark.slow   # 7 s (--durations, 2026-12-03): out of the fast tier
def test_the_repeat_check_fails_a_reference_that_keeps_state_between_cases(tmp_path):
    """A module-level noise cache scaled in place: every row passes in order; run again, each differs."""
    quick = dict(target="es-at-scale", devices=("cpu",), dtypes=("f32",), small=True, loops=False, quiet=True,
                 case="*/perturb/*")
    clone = make_mutant(tmp_path, "noise-cache-scaled-in-place")
    result = run_parity(Options(ref=str(clone), out=str(tmp_path / "bad"), **quick))
    frame = result.frame
    assert len(frame) == 6 and set(frame["status"]) == {"fail"} and result.exit_code == 1
    assert frame["diagnosis"].eq("state").all()
    assert frame["detail"].str.contains(r"run position \d+ and again at position \d+").all()
    record = result.metadata["children"]["es-at-scale"]["repeat"]
    assert [r["again"] for r in record] == [7, 8, 9, 10, 11, 12] and not any(r["identical"] for r in record)
    assert [r["first"] for r in record] == [6, 5, 4, 3, 2, 1]
    clean = run_parity(Options(ref=str(STANDINS / "es-at-scale"), out=str(tmp_path / "good"), **quick))
    assert set(clean.frame["status"]) == {"pass"}
    assert all(r["identical"] for r in clean.metadata["children"]["es-at-scale"]["repeat"])
    doc = json.loads((tmp_path / "good" / "parity-metadata.json").read_text())
    assert len(doc["children"]["es-at-scale"]["repeat"]) == 6
