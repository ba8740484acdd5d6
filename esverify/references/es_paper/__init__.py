"""es-paper, the paper's original scripts (docs/references.md): everything esverify knows about it on the parent side.

adapter (parity adapter), rows (its whole-loop rows), profile (numerics
profile `es-paper`), loop (our side of its loop, `run_paper_loop`),
golden_area (golden area `es-paper`), schedule (its seed schedule `es-paper`),
model (the straight-line model of its ops and loop). Its child driver is
esverify/references/es_paper/child/driver.py.
"""
from esverify.record import Reference

REFERENCE = Reference(
    name="es-paper",
    adapter="esverify.references.es_paper.adapter:ADAPTER",
    profiles=("esverify.references.es_paper.profile:PROFILE",),
    golden_areas=("esverify.references.es_paper.golden_area:AREA",),
    seed_schedules=("esverify.references.es_paper.schedule:SCHEDULE",),
)
