"""The `esverify` command line (click).

Subcommands are loaded lazily so that `esverify --help` and `esverify
audit` do not pay for importing torch and numba: `goldens` (generate and
check bit-level goldens), `parity` (run the oracle against reference
clones) and `audit` (evidence for the clean-room claim).
"""
from __future__ import annotations

import importlib

import click

from . import __version__

#: command name -> (module, attribute); each module owns its command.
SUBCOMMANDS = {
    "goldens": ("esverify.goldens.cli", "goldens"),
    "parity": ("esverify.oracle.cli", "parity"),
    "audit": ("esverify.audit.cli", "audit"),
}


class LazyGroup(click.Group):
    def list_commands(self, ctx):
        return sorted(SUBCOMMANDS)

    def get_command(self, ctx, name):
        if name not in SUBCOMMANDS:
            return None
        module, attr = SUBCOMMANDS[name]
        return getattr(importlib.import_module(module), attr)


@click.group(cls=LazyGroup)
@click.version_option(__version__, prog_name="esverify")
def main():
    """esverify: bit-level goldens, oracle parity and a clean-room audit for evolution strategies."""
