"""Stand-in: the noisers by name (docs/hyperscale.md)."""
from .base_noiser import Noiser
from .eggroll import EggRoll
from .open_es import OpenES

ALL_NOISERS = {"noop": Noiser, "open_es": OpenES, "eggroll": EggRoll, "reeggroll": EggRoll}
