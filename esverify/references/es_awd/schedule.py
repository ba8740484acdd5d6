"""The `es-awd` seed schedule (docs/references.md §5): the es-at-scale draw with the reference's first
iteration 1, ``numpy.random.default_rng((seed or 42) + i + 1)`` at the trainer's iteration i."""
from esverify.es.seeds import default_rng_schedule

SCHEDULE = default_rng_schedule("es-awd", first_iteration=1)
