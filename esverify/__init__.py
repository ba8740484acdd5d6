"""esverify: a parity-and-golden verification harness for evolution strategies.

Layers (dependencies point one way): ``cli`` -> ``goldens``, ``oracle``,
``audit``; ``goldens`` and ``oracle`` -> ``es`` -> ``rng``; ``bits`` and
``report`` are used by all and use none of them. Nothing under
``esverify/`` imports the oracle drivers (``oracles/`` in a checkout,
``esverify/oracles/`` in a wheel): they run only in a child process.
"""

__version__ = "0.1.0"
