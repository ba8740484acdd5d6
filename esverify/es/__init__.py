"""esverify.es: the clean-room evolution-strategies trainer (docs/numerics.md).

Public API:
- `Config`, `Trainer` (perturb / restore / materialize / update / step /
  capture_anchor / state_dict / load_state_dict / iteration);
- `PROFILES`, `get_profile` (`es-at-scale`, `es-awd` with rules cpu/cuda, `es-paper`);
- `esverify.references.es_paper.loop.run_paper_loop`: the paper scripts' loop (docs/numerics.md §3 `es-paper`);
- `shape_rewards(rewards, shaping) -> (coeffs, stats)` (docs/numerics.md §2);
- `apply_anchor_decay_(params, anchors, decay, lam, alpha, ...)` (docs/numerics.md §5);
- `noise_seed(config, iteration, member)`: the member seed the trainer uses;
- `perturb_tensor_`, `update_tensor_`: a profile's kernels on caller-given noise.
The straight-line reference for tests and goldens is `esverify.es.reference`.

Dependencies point one way: es -> rng (noise), never back. Checks:
``python -m pytest -q tests/test_es_*.py`` and ``esverify goldens check``.
"""
from .. import forksafe
from .config import Config
from .decay import apply_anchor_decay_
from .kernels import perturb_tensor_, update_tensor_
from .noise import CONTRACT_VERSION, noise_seed
from .profiles import PROFILES, Profile, get_profile
from .shaping import shape_rewards
from .trainer import STATE_FORMAT, Trainer

forksafe.install()   # the trainer's torch paths in a forked child: one thread, no deadlock (esverify.forksafe)

__all__ = ["Config", "Trainer", "PROFILES", "Profile", "get_profile", "shape_rewards",
           "apply_anchor_decay_", "noise_seed", "perturb_tensor_", "update_tensor_",
           "CONTRACT_VERSION", "STATE_FORMAT"]
