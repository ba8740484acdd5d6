"""esverify.oracle: identical-noise parity against out-of-tree reference clones (issue 4).

The reference code runs only in a child interpreter, driven by the scripts
in `oracles/` (executed by path, never imported). This package builds the
case matrix (`cases`), runs our side (`ours`, the one adapter to
esverify.es), talks to the child (`child`), compares bits (`compare`) and
writes the report (`runner`, through esverify.report). Entry points:
`esverify parity` (`cli`) and `run_parity(Options)`.
"""
from .runner import Options, RunResult, Runner, UsageError


def run_parity(options: Options) -> RunResult:
    """Run a parity matrix; see Options and docs/parity.md. Raises UsageError on bad options."""
    return Runner(options).run()


__all__ = ["Options", "RunResult", "Runner", "UsageError", "run_parity"]
