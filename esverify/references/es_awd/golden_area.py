"""The `es-awd` golden area: the Trainer area of esverify.goldens.es_area on this reference's profile (docs/goldens.md)."""
from esverify.goldens import chain
from esverify.goldens.es_area import trainer_area

from .profile import PROFILE

AREA = chain.with_chain(trainer_area(PROFILE, "esverify.references.es_awd.profile.VERSION"))   # with its chained MC vector
