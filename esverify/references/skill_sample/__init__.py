"""skill-sample, the skill's sample ES script (docs/references.md): everything esverify knows about it on the parent side.

adapter (parity adapter), rows (its whole-loop rows), profile (loop profile
`skill-sample`), loop (our side of its loop, `run_skill_loop`), model (the
slow numpy model the goldens are expected from), golden_area (golden area
`skill-sample`). Its child driver is esverify/references/skill_sample/child/driver.py.
"""
from esverify.record import Reference

REFERENCE = Reference(
    name="skill-sample",
    adapter="esverify.references.skill_sample.adapter:ADAPTER",
    profiles=("esverify.references.skill_sample.profile:PROFILE",),
    golden_areas=("esverify.references.skill_sample.golden_area:AREA",),
)
