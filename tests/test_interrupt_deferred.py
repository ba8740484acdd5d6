"""interrupt.deferred(): a signal inside the block is raised at check() or at the block's end, never at an
arbitrary bytecode (a raise inside concurrent.futures.wait leaves futures' locks held and the replay hung
at exit after its partial report, seen in CI under load)."""
from __future__ import annotations

import os
import signal
import sys

import pytest

from esverify import interrupt

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="POSIX signals to self")


def _raise_signal(sig) -> None:
    os.kill(os.getpid(), sig)
    for _ in range(1000):   # the Python handler runs at the next bytecode boundaries
        pass


def test_a_signal_inside_deferred_is_held_until_check():
    reached = []
    with pytest.raises(interrupt.Interrupted) as info:
        with interrupt.catching():
            with interrupt.deferred():
                _raise_signal(signal.SIGHUP)
                reached.append("after the signal")
                interrupt.check()
                reached.append("after check")
    assert reached == ["after the signal"]
    assert info.value.signal_name == "SIGHUP" and info.value.exit_code == 129


def test_leaving_deferred_raises_the_held_signal_in_place_of_the_blocks_error():
    with pytest.raises(interrupt.Interrupted) as info:
        with interrupt.catching():
            with interrupt.deferred():
                _raise_signal(signal.SIGTERM)
                raise RuntimeError("a worker died (the signal went to the whole group)")
    assert info.value.signal_name == "SIGTERM"


def test_without_a_signal_deferred_changes_nothing():
    with interrupt.catching():
        with interrupt.deferred():
            interrupt.check()
            value = 7
    assert value == 7
    with pytest.raises(ValueError):
        with interrupt.catching():
            with interrupt.deferred():
                raise ValueError("an ordinary error passes through")


def test_outside_deferred_the_signal_is_raised_at_once_and_a_second_is_ignored():
    reached = []
    with pytest.raises(interrupt.Interrupted) as info:
        with interrupt.catching():
            try:
                _raise_signal(signal.SIGINT)
                reached.append("not reached")
            finally:
                _raise_signal(signal.SIGINT)   # writing the partial report: a second Ctrl-C is ignored
                reached.append("finally ran")
    assert reached == ["finally ran"] and info.value.exit_code == 130
