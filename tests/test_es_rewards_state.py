"""Rewards that cannot become a finite f64 and u64 values in the trainer's JSON state (items 4, 7).

Every reward that cannot become a finite f64 gets a TypeError or ValueError naming the member, and
the refused update changes no byte of theta and not the iteration counter (docs/numerics.md §2, §6). The state
writes u64 values as "0x" + 16 hex digits (docs/CONTRACT.md §5) and reads both forms.
"""
from __future__ import annotations

import decimal
import fractions
import json
import math

import numpy as np
import pytest
import torch

from esverify.es import Config, Trainer
from esverify.es.shaping import check_rewards

U64 = (1 << 64) - 1

BAD = [
    (10 ** 400, ValueError, "too large"),
    (-(10 ** 400), ValueError, "too large"),
    (decimal.Decimal("0.5"), TypeError, "Decimal"),
    (fractions.Fraction(1, 3), TypeError, "Fraction"),
    ("1.0", TypeError, "str"),
    (None, TypeError, "NoneType"),
    (True, TypeError, "bool"),
    (1j, TypeError, "complex"),
    (math.nan, ValueError, "NaN or infinite"),
    (-math.inf, ValueError, "NaN or infinite"),
    (np.float16("inf"), ValueError, "NaN or infinite"),
    (np.float32("nan"), ValueError, "NaN or infinite"),
    (np.float64("-inf"), ValueError, "NaN or infinite"),
    (np.longdouble("1e400") if np.finfo(np.longdouble).max > 1e400 else np.longdouble("inf"), ValueError, ""),
    (np.complex128(1), TypeError, "complex"),
    (np.bool_(True), TypeError, "bool"),
    (torch.tensor(math.nan), ValueError, "NaN or infinite"),
    (torch.tensor(math.inf, dtype=torch.bfloat16), ValueError, "NaN or infinite"),
    (torch.tensor([1.0]), TypeError, "Tensor"),
    (torch.tensor(True), TypeError, "Tensor"),
    (np.array([1.0]), ValueError, "ndarray of length 1: rewards must be 1-D"),
    (np.array("1.0"), TypeError, "ndarray"),
    (np.array(np.inf), ValueError, "NaN or infinite"),
]


@pytest.mark.parametrize("bad,exc,why", BAD, ids=[f"{type(b[0]).__name__}-{k}" for k, b in enumerate(BAD)])
@pytest.mark.parametrize("member", [0, 2])
def test_every_bad_reward_names_the_member_and_changes_nothing(bad, exc, why, member):
    p = torch.randn(37)
    h = torch.randn(5, dtype=torch.float16)
    before = [p.clone(), h.clone()]
    tr = Trainer([p, h], Config(population=3, restore="snapshot"))   # step restores bytes exactly
    rewards = [0.25, -1.0, 2.0]
    rewards[member] = bad
    with pytest.raises(exc, match=rf"reward of member {member} .*{why}"):
        tr.update(rewards)
    assert tr.iteration == 0
    assert torch.equal(p.view(torch.int32), before[0].view(torch.int32))
    assert torch.equal(h.view(torch.int16), before[1].view(torch.int16))
    # the same error from step(), after theta is restored
    with pytest.raises(exc, match=rf"reward of member {member} "):
        tr.step(lambda m: rewards[m])
    assert tr.iteration == 0 and tr.active_member is None
    assert torch.equal(p.view(torch.int32), before[0].view(torch.int32))


def test_accepted_rewards_convert_exactly():
    """Python int/float, numpy integer/floating scalars and 0-d real tensors: each the f64 it denotes."""
    got = check_rewards([3, 2 ** 53 + 1, np.int8(-7), np.uint64(U64), np.float16(0.1), np.float32(0.1),
                         0.1, torch.tensor(0.1, dtype=torch.bfloat16), torch.tensor(5, dtype=torch.int64),
                         np.longdouble(0.5), np.array(0.75), np.array(9, dtype=np.uint8)])
    want = [3.0, float(2 ** 53), -7.0, float(U64), float(np.float16(0.1)), float(np.float32(0.1)), 0.1,
            torch.tensor(0.1, dtype=torch.bfloat16).item(), 5.0, 0.5, 0.75, 9.0]
    assert got.dtype == np.float64 and got.tolist() == want
    assert check_rewards(torch.tensor([1.5, -2.0], dtype=torch.float16)).tolist() == [1.5, -2.0]
    assert check_rewards(np.array([1, 2], dtype=np.int32)).tolist() == [1.0, 2.0]
    with pytest.raises(ValueError, match="member 1"):
        check_rewards(np.array([0.0, np.inf]))
    with pytest.raises(TypeError, match="sequence"):
        check_rewards("0.5")


def test_state_dict_writes_u64_values_as_hex_and_reads_both_forms():
    tr = Trainer([torch.zeros(3)], Config(population=2, seed=U64))
    tr.update([0.0, 1.0])
    state = tr.state_dict()
    assert state["config"]["seed"] == "0xffffffffffffffff" and state["iteration"] == "0x0000000000000001"
    # a reader that parses numbers as f64 keeps every value of the state exactly
    as_floats = json.loads(json.dumps(state), parse_int=float)
    assert as_floats["config"]["seed"] == "0xffffffffffffffff"
    for form in (state, json.loads(json.dumps(state))):
        fresh = Trainer([torch.zeros(3)], Config(population=2))
        fresh.load_state_dict(form)
        assert fresh.config.seed == U64 and fresh.iteration == 1
    legacy = json.loads(json.dumps(state))
    legacy["config"]["seed"], legacy["iteration"] = U64, 1      # the old bare-number form still loads
    fresh = Trainer([torch.zeros(3)], Config(population=2))
    fresh.load_state_dict(legacy)
    assert fresh.config.seed == U64 and fresh.iteration == 1
    for bad in ("0xfff", "18446744073709551615", float(U64), -1, 1 << 64, True):
        broken = json.loads(json.dumps(state))
        broken["config"]["seed"] = bad
        with pytest.raises(ValueError, match="state config seed must be a u64"):
            Trainer([torch.zeros(3)], Config(population=2)).load_state_dict(broken)


def _big_ints(value, path="$"):
    """Paths of JSON integers that an f64-based reader would round (|n| > 2**53)."""
    if isinstance(value, dict):
        return [p for k, v in value.items() for p in _big_ints(v, f"{path}.{k}")]
    if isinstance(value, list):
        return [p for k, v in enumerate(value) for p in _big_ints(v, f"{path}[{k}]")]
    return [path] if isinstance(value, int) and not isinstance(value, bool) and abs(value) > 2 ** 53 else []


def test_no_json_the_project_writes_has_a_bare_u64():
    """The trainer state and every committed golden file: no integer beyond 2**53 as a bare number."""
    from esverify import paths
    tr = Trainer([torch.zeros(3)], Config(population=2, seed=U64 - 5))
    assert _big_ints(json.loads(json.dumps(tr.state_dict()))) == []
    for name in ("rng", "es-at-scale", "es-awd"):
        doc = json.loads((paths.goldens_dir() / f"{name}.json").read_text())
        assert _big_ints(doc) == [], name


@pytest.mark.slow   # 5 s (--durations, 2026-12-03): out of the fast tier
def test_parity_reports_write_the_u64_seed_as_hex(tmp_path):
    """The parity JSON report (and its metadata file) hold no integer an f64 reader would round."""
    from click.testing import CliRunner
    from esverify.cli import main
    from standins.mutants import STANDINS
    out = tmp_path / "out"
    result = CliRunner().invoke(main, ["parity", "--ref", str(STANDINS / "es-at-scale"), "--target", "es-at-scale",
                                       "--devices", "cpu", "--small", "--dtypes", "f32", "--schemes", "iid",
                                       "--iterations", "1", "--quiet", "--seed", str(U64), "--out", str(out)])
    assert result.exit_code == 0, result.output
    for name in ("parity.json", "parity-metadata.json"):
        doc = json.loads((out / name).read_text())
        assert _big_ints(doc) == [], name
    assert json.loads((out / "parity.json").read_text())["metadata"]["seed"] == "0xffffffffffffffff"
