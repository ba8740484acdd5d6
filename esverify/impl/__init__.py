"""esverify.impl: the module-wrapper protocol (docs/PROTOCOL.md), so any ES implementation runs the gate.

- `wire`: frames (16-byte prefix, JSON header, raw little-endian tensor payload);
- `client`: `ImplProcess`, the implementation under test as a child process,
  every request under a deadline, restarts, process-group cleanup;
- `client` also holds `Unsupported`, what a request the wrapper did not
  claim raises (its golden vectors -> protocol requests are
  esverify.goldens.impl_target, for ``esverify goldens check --impl CMD``);
- `server`: the Python wrapper loop and the clean-room trainer behind it
  (``python -m esverify.impl``).

The protocol's JSON Schema ships beside this file (`protocol.schema.json`).
Checks: ``python -m pytest -q tests/test_impl*.py``.
"""
from .client import ImplFailure, ImplProcess, WrapperError
from .wire import PROTOCOL_VERSION, Tensor

__all__ = ["ImplProcess", "ImplFailure", "WrapperError", "Tensor", "PROTOCOL_VERSION"]
