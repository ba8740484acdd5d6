"""The `esverify` command line (click).

Subcommands are loaded lazily so that `esverify --help` and `esverify
audit` do not pay for importing torch and numba: `goldens` (generate and
check bit-level goldens), `parity` (run the oracle against reference
clones), `audit` (evidence for the clean-room claim) and `replay` (verify a
checkpoint from its run log, docs/replay.md).
"""
from __future__ import annotations

import importlib

import click

from . import __version__
from .cliutil import CONTEXT

#: command name -> (module, attribute, one-line help); each module owns its command.
SUBCOMMANDS = {
    "audit": ("esverify.audit.cli", "audit", "Evidence for the clean-room claim (import boundary, similarity)."),
    "goldens": ("esverify.goldens.cli", "goldens", "Generate and check the bit-level golden vectors."),
    "parity": ("esverify.oracle.cli", "parity", "Bit-for-bit parity against reference clones on identical noise."),
    "replay": ("esverify.replay.cli", "replay", "Verify a checkpoint from its base weights and its logged seeds and coefficients."),
}


class LazyGroup(click.Group):
    def list_commands(self, ctx):
        return sorted(SUBCOMMANDS)

    def get_command(self, ctx, name):
        if name not in SUBCOMMANDS:
            return None
        module, attr, _ = SUBCOMMANDS[name]
        return getattr(importlib.import_module(module), attr)

    def format_commands(self, ctx, formatter):
        # the listing uses the static help, so `esverify --help` imports no subcommand
        with formatter.section("Commands"):
            formatter.write_dl([(name, SUBCOMMANDS[name][2]) for name in self.list_commands(ctx)])


@click.group(cls=LazyGroup, context_settings=CONTEXT)
@click.version_option(__version__, prog_name="esverify")
def main():
    """esverify: bit-level goldens, oracle parity and a clean-room audit for evolution strategies.

    Each command's help (esverify COMMAND -h) lists its exit codes: 0 pass, 1 a failure or finding,
    2 usage or setup error, 128+N stopped by signal N. Shell completion: eval "$(_ESVERIFY_COMPLETE=bash_source
    esverify)" in ~/.bashrc (zsh_source, fish_source for the other shells).
    """
    from .console import harden
    harden()   # a console that cannot encode a path must not turn a written report's exit 0 into 1
