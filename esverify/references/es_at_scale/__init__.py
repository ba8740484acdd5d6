"""es-at-scale, the ES-at-scale library (docs/references.md): everything esverify knows about it on the parent side.

adapter: the parity adapter (`--ref`); profile: numerics profile `es-at-scale` (one of
`esverify replay --profile`'s choices);
golden_area: its golden area (the Trainer area of esverify.goldens.es_area); model: the
straight-line model of its profile; schedule: its loop's seed schedule `es-at-scale`. Its child
driver is esverify/references/es_at_scale/child/driver.py.
"""
from esverify.record import Reference

REFERENCE = Reference(
    name="es-at-scale",
    adapter="esverify.references.es_at_scale.adapter:ADAPTER",
    profiles=("esverify.references.es_at_scale.profile:PROFILE",),
    replay_profiles=("es-at-scale",),
    golden_areas=("esverify.references.es_at_scale.golden_area:AREA",),
    clone_modules=("es_at_scale", "es_trainer", "worker_extension", "reward_shaping"),
    models=("esverify.references.es_at_scale.model:MODEL",),
    seed_schedules=("esverify.references.es_at_scale.schedule:SCHEDULE",),
)
