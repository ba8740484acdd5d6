"""esverify.replay: verify a checkpoint from its base weights and its run log (docs/replay.md).

A checkpoint of an ES run is a pure function of the base weights and the
logged (seeds, coefficients) of every iteration, given alpha, sigma, the
population, the decay, the noise and the numerics profile. This package
rebuilds it bit for bit, sharded into work units, and reports the first
differing element of every tensor (docs/replay.md).

Modules, one job each:
- `log`: read and check a run log in the `iteration_updates/` layout (the
  clean-room trainer's, or a reference's own read through its package's
  `RunLogFormat`, such as es-awd's logging folder);
- `weights`: lazy reading of safetensors, torch state_dict files and
  Hugging Face folders; atomic writing;
- `units`: the work units (tensor, element range);
- `kernel`: the replay of one unit (engine-residue model, naive replay);
- `runners`: in-process, a local process pool, Ray tasks;
- `state`: the resume state of a replay;
- `report`: the verdict, as JSON and text.
`replay(...)` (`esverify.replay.api`) ties them together; the click
command is `esverify.replay.cli.replay`.

Checks: ``python -m pytest -q tests/test_replay.py tests/test_replay_ray.py``.
"""
import importlib


def __getattr__(name):
    # the api (torch, numpy) is imported on first use (PEP 562): `esverify replay --help` needs none of it
    if name in __all__:
        value = getattr(importlib.import_module(".api", __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["replay", "ReplayError", "ReplayInfrastructureError", "EXIT_BIT_EQUAL", "EXIT_DIFFERS", "EXIT_SETUP",
           "EXIT_INFRASTRUCTURE"]
