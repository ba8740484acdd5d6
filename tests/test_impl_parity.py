"""`esverify parity --impl CMD` on the stand-ins.

The clean-room trainer behind the protocol gives the same rows as
in-process; the C implementation (examples/impl_c) passes every
es-at-scale case, its planted fault (bf16 truncation) fails exactly the
bf16 and mixed-dtype cases, and the es-awd cases it does not claim are
`unsupported`, never passed.
"""
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from esverify.oracle import Options
from esverify.oracle.impl_side import ImplSide
from esverify.oracle.adapters import all_adapters

LOOP_OPS = tuple(op for a in all_adapters() for op in a.loop_ops)
from esverify.oracle.runner import Runner
from standins.mutants import STANDINS

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
CC = shutil.which("cc")


def parity(tmp_path, impl=None, target="es-at-scale", noises=("contract",), loops=True):
    tmp_path.mkdir(parents=True, exist_ok=True)
    opts = Options(ref=(str(STANDINS / "es-at-scale"), str(STANDINS / "es-awd"), str(STANDINS / "skill-sample")),
                   target=target,
                   dtypes=("f32", "bf16"), schemes=("correlated",), devices=("cpu",), devices_explicit=True,
                   noises=noises, loops=loops,
                   iterations=2, small=True, out=str(tmp_path / "out"), quiet=True)
    runner = Runner(opts)
    side = None
    if impl is not None:
        side = ImplSide(impl, log_path=tmp_path / "impl.log", env=ENV)
        assert side.open() is None
        runner.impl_side = side
        runner.notes.add(side.describe())
    try:
        result = runner.run()
    finally:
        if side is not None:
            side.close()
    return result.frame.set_index("case"), result.exit_code


@pytest.mark.slow   # 38 s (--durations, 2026-12-03): out of the fast tier
def test_clean_room_wrapper_gives_the_in_process_rows(tmp_path):
    # the in-process run without its loop rows: they are not wired to --impl, so there is nothing to
    # compare them with (20 s instead of 30 s, 2026-12-04)
    direct, code_direct = parity(tmp_path / "a", target="all", loops=False)
    via, code_via = parity(tmp_path / "b", impl=f"{sys.executable} -m esverify.impl", target="all")
    columns = ["status", "elements", "mismatches", "max_ulp", "rule"]
    columns = [c for c in columns if c in direct.columns]
    single = ~via["op"].isin(LOOP_OPS)
    assert single.sum() == len(direct) and via.loc[~single].shape[0] > 0
    assert (via.loc[~single, "status"] == "unsupported").all()
    # NaN and infinite rewards are outside the protocol (docs/PROTOCOL.md §4): listed, never sent
    nonfinite = via.index.str.endswith(("/nan", "/inf"))
    assert nonfinite.sum() > 0 and (via.loc[nonfinite, "status"] == "unsupported").all()
    assert (direct.loc[direct.index.str.endswith(("/nan", "/inf")), "status"] == "pass").all()
    single &= ~nonfinite
    # the same values (the loop rows' empty cells make via's integer columns float)
    pd.testing.assert_frame_equal(via.loc[single, columns], direct.loc[single, columns], check_dtype=False)
    assert code_via == code_direct == 0


@pytest.mark.skipif(CC is None, reason="no C compiler: `cc` is not on PATH")
@pytest.mark.parametrize("fault", [False, True])
@pytest.mark.slow   # 13 s (--durations, 2026-12-03): out of the fast tier
def test_c_implementation_parity(tmp_path, fault):
    exe = tmp_path / "esimpl"
    subprocess.run([CC, "-std=c11", "-O2", *(["-DPLANTED_FAULT"] if fault else []),
                    *map(str, sorted((ROOT / "examples/impl_c").glob("*.c"))), "-lm", "-o", str(exe)], check=True)
    frame, code = parity(tmp_path, impl=str(exe), target="all")
    awd = frame[frame["target"] == "es-awd"]
    assert len(awd) and (awd["status"] == "unsupported").all()          # es-awd is not claimed
    loop_rows = frame["op"].isin(LOOP_OPS)
    assert len(frame[loop_rows]) and (frame.loc[loop_rows, "status"] == "unsupported").all()   # not wired to --impl
    at_scale = frame[(frame["target"] == "es-at-scale") & ~loop_rows]
    nonfinite = at_scale.index.str.endswith(("/nan", "/inf"))   # outside the protocol (docs/PROTOCOL.md §4)
    assert nonfinite.sum() > 0 and (at_scale.loc[nonfinite, "status"] == "unsupported").all()
    at_scale = at_scale[~nonfinite]
    bf16 = at_scale["dtype"].isin(["bf16", "mixed"])
    if not fault:
        assert (at_scale["status"] == "pass").all(), at_scale[at_scale["status"] != "pass"]["detail"]
        assert code == 0
    else:
        # all-equal rewards: zero coefficients, so the update is the identity and the fault cannot show
        equal = at_scale.index.str.endswith("/equal")
        assert (at_scale.loc[equal, "status"] == "pass").all()
        bf16 &= ~equal
        assert (at_scale.loc[bf16, "status"] == "fail").all(), \
            at_scale.index[bf16 & (at_scale["status"] != "fail")].tolist()
        assert (at_scale.loc[~bf16, "status"] == "pass").all()
        assert code == 1


@pytest.mark.slow   # 5 s (--durations, 2026-12-03): out of the fast tier
def test_native_noise_cases_are_unsupported_under_impl(tmp_path):
    """Protocol v1 carries contract noise only: a native row is `unsupported`, never a pass."""
    frame, _ = parity(tmp_path, impl=f"{sys.executable} -m esverify.impl", noises=("native",))
    native = frame[frame["noise"] == "native"]
    assert len(native) and (native["status"] == "unsupported").all(), native["status"].value_counts()
