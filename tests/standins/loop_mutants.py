"""Loop mutants of the stand-in clones (issue 9): ONE detail of a training loop edited.

Same edit format as tests/standins/mutants.py: a list of (file, old, new)
text replacements applied to a copy of a stand-in clone, each `old`
occurring exactly once. These are the kinds of loop faults that pass every
single-operation row (the parent hands both sides the seeds, mean/std,
coefficients and divisor) and that only the `fit` / `main` rows can see,
plus one noise fault (f32 drawn and cast) that only native-noise rows see,
in the loops as in the single-operation rows.
"""
from __future__ import annotations

from standins.mutants import make_variant

TRAINER = "es_at_scale/trainer/es_trainer.py"
ES = "es.py"
DIST = "distributed_utils.py"
AWD = "weight_update_utils.py"

_RESTORE_AT = ("                ray.get(self.engines[j].collective_rpc.remote(\"restore_self_weights\", "
               "args=(seed, self.sigma)))")
_BATCH_SUM = """                total["sum"] += entry["avg_reward"] * entry["count"]
                total["count"] += entry["count"]"""

#: name -> (target, [(file, old, new)], what it changes)
LOOP_MUTANTS = {
    "zscore-ddof1": ("es-at-scale", [(TRAINER, "std_reward = float(numpy.std(rewards))",
                                      "std_reward = float(numpy.std(rewards, ddof=1))")],
                     "fit: std of the rewards with ddof=1"),
    "seeds-lose-iteration": ("es-at-scale", [(TRAINER, "default_rng(seed=(self.global_seed or 42) + iteration)",
                                              "default_rng(seed=(self.global_seed or 42))")],
                             "fit: the seed schedule loses its + iteration (every iteration reuses the same seeds)"),
    "last-engine-not-restored": ("es-at-scale", [(TRAINER, _RESTORE_AT, """                if j < len(group) - 1:
    """ + _RESTORE_AT)], "fit: the last engine of each group is never restored"),
    "unweighted-batches": ("es-at-scale", [(TRAINER, _BATCH_SUM, """                total["sum"] += entry["avg_reward"]
                total["count"] += 1""")], "fit: mini-batch rewards averaged without their batch sizes"),
    "no-extra-update": ("es-at-scale", [(TRAINER, "if iteration > self.num_iterations:",
                                         "if iteration >= self.num_iterations:")],
                        "fit: num_iterations updates instead of the reference's num_iterations + 1"),
    "broadcast-engine-0-only": ("es-at-scale", [(TRAINER, """args=(0,)) for engine in self.engines])""",
                                                 """args=(0,)) for engine in self.engines[:1]])""")],
                                "fit: the broadcast reaches engine 0 only (the other engines keep stale weights)"),
    "mirror-sign-flipped": ("es-awd", [(ES, "coeffs = [float(z[k] - z[k + len(seeds)]) for k in range(len(seeds))]",
                                        "coeffs = [float(z[k + len(seeds)] - z[k]) for k in range(len(seeds))]")],
                            "main: the mirrored coefficient's sign flipped (z(-) - z(+))"),
    "mirror-divisor-half": ("es-awd", [(ES, "args=(seeds, coeffs, args.alpha, n, args.caching,",
                                        "args=(seeds, coeffs, args.alpha, len(seeds), args.caching,")],
                            "main: divisor N/2 instead of N when mirroring"),
    "restore-negate-swapped": ("es-awd", [(DIST, "scale = sigma if negate else -sigma",
                                           "scale = -sigma if negate else sigma")],
                               "main: the es-awd restore path with its negate logic swapped"),
    "caching-key-without-dtype": ("es-awd", [(AWD, "key = (seed, str(param.device), param.dtype, tuple(param.shape))",
                                              "key = (seed, str(param.device), tuple(param.shape))")],
                                  "caching branch: noise reused across dtypes (key without the dtype)"),
    "lambda0-no-shortcut": ("es-awd", [(AWD, """decay = weight_decay_type != "none" and weight_decay_lambda > 0""",
                                        """decay = weight_decay_type != "none\"""")],
                            "lambda = 0 no longer means no decay in the update"),
    "seeds-from-iteration-0": ("es-awd", [(ES, "rng = np.random.default_rng((args.global_seed or 42) + iteration)",
                                           "rng = np.random.default_rng((args.global_seed or 42) + iteration - 1)")],
                               "main: seeds drawn as if the first iteration were 0"),
    "record-uncentred": ("es-awd", [(ES, """"update_coefficients": coeffs}""",
                                     """"update_coefficients": [float(r) for r in rewards[:len(seeds)]]}""")],
                         "main: the iteration record holds the raw rewards instead of the coefficients"),
    # contract noise rounds the same gaussian to any dtype, so only torch's own generator (native rows) sees it
    "noise-f32-then-cast": ("es-awd", [(AWD, "return torch.randn(shape, dtype=dtype, device=device, generator=generator)",
                                        "return torch.randn(shape, dtype=torch.float32, device=device, "
                                        "generator=generator).to(dtype)")],
                            "generate_noise draws f32 and casts instead of drawing in the parameter dtype"),
}


def make_loop_mutant(tmp, name: str):
    """Copy the stand-in clone of the mutant's target under `tmp` with its edit applied; the clone root."""
    target, edits, _ = LOOP_MUTANTS[name]
    return make_variant(tmp, target, edits)
