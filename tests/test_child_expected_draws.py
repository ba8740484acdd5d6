"""The child's expected draws (oracles/child_server.py `expected_draws`, the draw accounting's yardstick):
one draw per (member seed, slot), a seed given twice twice, and with caching one per (seed, first slot of
each distinct (device, dtype, shape)), whatever iterable the tensors come in."""
from __future__ import annotations

import torch

import child_files

child_files.on_path()
import child_server  # noqa: E402


def test_each_seed_each_slot_and_a_repeated_seed_twice():
    tensors = [torch.zeros(4), torch.zeros(2, 2), torch.zeros(4, dtype=torch.float16)]
    assert child_server.expected_draws(iter(tensors), [7, torch.tensor(9), 7]) == {
        (7, 0): 2, (7, 1): 2, (7, 2): 2, (9, 0): 1, (9, 1): 1, (9, 2): 1}
    assert child_server.expected_draws(tensors, []) == {}


def test_caching_expects_the_first_slot_of_each_layout_for_every_seed():
    tensors = [torch.zeros(4), torch.zeros(2, 2), torch.zeros(4), torch.zeros(4, dtype=torch.float16),
               torch.zeros(2, 2)]
    assert child_server.expected_draws((t for t in tensors), [3, 3, 5], caching=True) == {
        (3, 0): 2, (3, 1): 2, (3, 3): 2, (5, 0): 1, (5, 1): 1, (5, 3): 1}
