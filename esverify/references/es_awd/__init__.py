"""es-awd, the ES-with-anchored-weight-decay scripts (docs/references.md): everything esverify knows about it.

adapter: the parity adapter (`--ref`); profile: numerics profile `es-awd`
(rules cpu/cuda, one of `esverify replay --profile`'s choices); golden_area: its golden
area (the Trainer area of esverify.goldens.es_area); model: the straight-line model of its profile;
schedule: its loop's seed schedule `es-awd`; runlog: its run log as `esverify replay` reads it (its
`iteration_updates/` folder, no esverify block). Its child driver is esverify/references/es_awd/child/driver.py.
"""
from esverify.record import Reference

REFERENCE = Reference(
    name="es-awd",
    adapter="esverify.references.es_awd.adapter:ADAPTER",
    profiles=("esverify.references.es_awd.profile:PROFILE",),
    replay_profiles=("es-awd",),
    golden_areas=("esverify.references.es_awd.golden_area:AREA",),
    clone_modules=("weight_update_utils", "distributed_utils"),
    runlog_formats=("esverify.references.es_awd.runlog:RUNLOG_FORMAT",),
    models=("esverify.references.es_awd.model:MODEL",),
    seed_schedules=("esverify.references.es_awd.schedule:SCHEDULE",),
    alias_option=("--awd-ref", "ESVERIFY_AWD_REF", "refs/es-awd"),
)
