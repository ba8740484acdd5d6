"""Shared test settings.

Hypothesis runs without deadlines (this 2-core machine is noisy and timing
is never asserted) and with a bounded number of examples per property;
HYPOTHESIS_PROFILE=thorough raises it for a long local run. Tests marked
`cuda` skip cleanly on a machine without a CUDA device (CI has none).
"""
import os

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile("default", deadline=None, max_examples=40,
                          suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("thorough", deadline=None, max_examples=1000,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))


def _has_cuda() -> bool:
    try:
        import torch
        return torch.cuda.is_available()
    except Exception:
        return False


HAS_CUDA = _has_cuda()


def pytest_collection_modifyitems(config, items):
    if HAS_CUDA:
        return
    skip = pytest.mark.skip(reason="not run: no CUDA device on this machine")
    for item in items:
        if "cuda" in item.keywords:
            item.add_marker(skip)
