"""The `es-at-scale` golden area: the Trainer area of esverify.goldens.es_area on this reference's profile (docs/goldens.md),
with its own es-run cases (a snapshot restore; the paper's defaults at population 30) and the shaping vectors."""
from esverify.goldens import chain
from esverify.goldens.es_area import MIXED, es_run_case, sample_rewards, trainer_area

from .profile import PROFILE

#: the note on the shared odd-sizes vectors' comment in this area's committed file
ODD_SIZES_NOTE = " (70 crosses es-awd's 32-element tail at 64)"


def own_cases(profile: str, base: dict) -> list[dict]:
    """The area's own es-run cases (`trainer_area`'s extra_cases)."""
    return [es_run_case(profile, "snapshot-restore", "snapshot restore copies the bytes back", MIXED,
                        [(2, sample_rewards(4, 6))], **{**base, "restore": "snapshot"}),
            es_run_case(profile, "paper-defaults-population-30", "the paper's defaults: sigma 0.001, alpha = "
                        "sigma/2, population 30, correlated, z-score", MIXED, [(29, sample_rewards(30, 7))])]


AREA = chain.with_chain(trainer_area(PROFILE, "esverify.references.es_at_scale.profile.VERSION",   # with its chained MC vector
                                     extra_cases=own_cases, shaping=True, odd_sizes_note=ODD_SIZES_NOTE))
