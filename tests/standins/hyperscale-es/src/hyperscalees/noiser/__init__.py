"""Stand-in: the noisers by name (docs/hyperscale.md)."""
from .base_noiser import Noiser
from .eggroll import EggRoll
from .open_es import OpenES
from .alteggroll import AltEggRoll
from .eggrollbs import EggRollBS
from .sparse import Sparse

ALL_NOISERS = {"noop": Noiser, "open_es": OpenES, "eggroll": EggRoll, "reeggroll": EggRoll,
               "eggrollbs": EggRollBS, "alteggroll": AltEggRoll, "sparse": Sparse}
