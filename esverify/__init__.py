"""esverify: a parity-and-golden verification harness for evolution strategies.

Layers (dependencies point one way): ``cli`` -> ``goldens``, ``oracle``,
``audit``; ``goldens`` and ``oracle`` -> ``es`` -> ``rng``; ``bits`` and
``report`` are used by all and use none of them. Nothing under
``esverify/`` imports the child's code (the shared runtime ``oracles/`` and each
reference's ``esverify/references/<name>/child/``): it runs only in a child process.
"""

__version__ = "0.1.0"
