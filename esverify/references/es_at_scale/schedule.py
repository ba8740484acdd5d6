"""The `es-at-scale` seed schedule (docs/references.md §5): the trainer loop's iteration i (its counter,
from 0) draws ``numpy.random.default_rng((seed or 42) + i).integers(0, 2**30, size=count, dtype=int64)``."""
from esverify.es.seeds import default_rng_schedule

SCHEDULE = default_rng_schedule("es-at-scale", first_iteration=0)
