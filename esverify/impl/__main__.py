"""`python -m esverify.impl [--backend numpy|numba|torch]`: the clean-room trainer as a protocol wrapper.

Speaks docs/PROTOCOL.md on stdin/stdout (stderr for logs) until stdin closes.
`--backend` picks esverify.rng's noise backend (default: the fastest here).
"""
from __future__ import annotations

import argparse
import sys

from .server import serve, trainer_capabilities, trainer_handlers


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m esverify.impl", description=__doc__.splitlines()[0])
    parser.add_argument("--backend", default=None, help="esverify.rng noise backend (numpy, numba, torch)")
    ns = parser.parse_args(argv)
    return serve(trainer_handlers(ns.backend), trainer_capabilities())


if __name__ == "__main__":
    sys.exit(main())
