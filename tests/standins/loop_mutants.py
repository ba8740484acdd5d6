"""Loop mutants of the stand-in clones: ONE detail of a training loop edited.

Same edit format as tests/standins/mutants.py: a list of (file, old, new)
text replacements applied to a copy of a stand-in clone, each `old`
occurring exactly once. These are the kinds of loop faults that pass every
single-operation row (the parent hands both sides the seeds, mean/std,
coefficients and divisor) and that only the `fit` / `main` rows can see,
plus one noise fault (f32 drawn and cast) that only native-noise rows see,
in the loops as in the single-operation rows. `LOOP_EQUIVALENTS` holds
single-detail edits that change nothing observable and `LOOP_UNSEEN` the
faults that still pass every row (false passes), each with the reason.
"""
from __future__ import annotations

from standins.mutants import make_variant

TRAINER = "es_at_scale/trainer/es_trainer.py"
WORKER = "es_at_scale/utils/worker_extension.py"
ES = "es.py"
DIST = "distributed_utils.py"
AWD = "weight_update_utils.py"

_RESTORE_AT = ("                ray.get(self.engines[j].collective_rpc.remote(\"restore_self_weights\", "
               "args=(seed, self.sigma)))")
_AWD_UPDATE = """        ray.get(engines[0].collective_rpc.remote(
            "update_weights_from_seeds", args=(seeds, coeffs, args.alpha),
            kwargs={"population_size": n, "caching": args.caching, "weight_decay_type": args.weight_decay_type,
                    "weight_decay_lambda": args.weight_decay_lambda}))"""
_AWD_BROADCAST = """        ray.get([engine.collective_rpc.remote("broadcast_all_weights", args=(0,)) for engine in engines])"""
_AWD_RESTORE = """                    ray.get(engines[j].collective_rpc.remote("restore_self_weights","""
_AWD_LOOP_HEAD = """    for iteration in range(1, args.num_iterations + 1):
        rng"""
#: the worker's perturb loop and its draw (es-at-scale)
_PERTURB_LOOP = """        for name, param in self.model_runner.model.named_parameters():
            generator = torch.Generator(device=param.device)
            generator.manual_seed(seed)
            noise = torch.randn(param.shape, dtype=param.dtype, device=param.device, generator=generator)
            param.data.add_(scale * noise)"""
_BATCH_SUM = """                total["reward_sum"] += perf["avg_reward"] * len(input_batch)
                total["count"] += len(input_batch)"""

#: name -> (target, [(file, old, new)], what it changes)
LOOP_MUTANTS = {
    "zscore-ddof1": ("es-at-scale", [(TRAINER, "std_reward = float(np.std(rewards))",
                                      "std_reward = float(np.std(rewards, ddof=1))")],
                     "fit: std of the rewards with ddof=1"),
    "seeds-lose-iteration": ("es-at-scale", [(TRAINER, "default_rng(seed=(self.global_seed or 42) + i)",
                                              "default_rng(seed=(self.global_seed or 42))")],
                             "fit: the seed schedule loses its + iteration (every iteration reuses the same seeds)"),
    "last-engine-not-restored": ("es-at-scale", [(TRAINER, _RESTORE_AT, """                if j < len(group) - 1:
    """ + _RESTORE_AT)], "fit: the last engine of each group is never restored"),
    "unweighted-batches": ("es-at-scale", [(TRAINER, _BATCH_SUM, """                total["reward_sum"] += perf["avg_reward"]
                total["count"] += 1""")], "fit: mini-batch rewards averaged without their batch sizes"),
    "no-extra-update": ("es-at-scale", [(TRAINER, "if i > self.num_iterations:",
                                         "if i >= self.num_iterations:")],
                        "fit: num_iterations updates instead of the reference's num_iterations + 1"),
    "broadcast-engine-0-only": ("es-at-scale", [(TRAINER, """args=(0,)) for engine in self.engines])""",
                                                 """args=(0,)) for engine in self.engines[:1]])""")],
                                "fit: the broadcast reaches engine 0 only (the other engines keep stale weights)"),
    # an earlier finding: docs/replay.md §3 describes how the real loop hands's engine 0 on seeds 0, E, 2E, ... of
    # each sign's pass; batching both passes as one list moves members between engines when E does not divide
    # N/2 (main-mirror runs N/2 = 5 seeds on 4 engines for that reason)
    "mirror-passes-batched-together": ("es-awd", [(ES, """        pop_perfs = []
        for members in passes:
""", """        pop_perfs = []
        for members in [sum(passes, [])]:
""")], "main: the +sigma and -sigma passes batched over the engines as one list"),
    "mirror-sign-flipped": ("es-awd", [(ES, "coeffs = [float(z[k] - z[k + len(seeds)]) for k in range(len(seeds))]",
                                        "coeffs = [float(z[k + len(seeds)] - z[k]) for k in range(len(seeds))]")],
                            "main: the mirrored coefficient's sign flipped (z(-) - z(+))"),
    "mirror-divisor-half": ("es-awd", [(ES, '"population_size": n,',
                                        '"population_size": len(seeds),')],
                            "main: divisor N/2 instead of N when mirroring"),
    "restore-negate-swapped": ("es-awd", [(DIST, "scale = noise_scale if negate else -noise_scale",
                                           "scale = -noise_scale if negate else noise_scale")],
                               "main: the es-awd restore path with its negate logic swapped"),
    "caching-key-without-dtype": ("es-awd", [(AWD, "\n" + " " * pad + "key = (seed, str(param.device), param.dtype, "
                                                   "tuple(param.shape))",
                                              "\n" + " " * pad + "key = (seed, str(param.device), tuple(param.shape))")
                                             for pad in (12, 16)],   # both places that cache: apply and update
                                  "caching branch: noise reused across dtypes (key without the dtype)"),
    "lambda0-no-shortcut": ("es-awd", [(AWD, """decay = weight_decay_type != "none" and weight_decay_lambda > 0""",
                                        """decay = weight_decay_type != "none\"""")],
                            "lambda = 0 no longer means no decay in the update"),
    "seeds-from-iteration-0": ("es-awd", [(ES, "rng = np.random.default_rng((args.global_seed or 42) + iteration)",
                                           "rng = np.random.default_rng((args.global_seed or 42) + iteration - 1)")],
                               "main: seeds drawn as if the first iteration were 0"),
    "record-uncentred": ("es-awd", [(ES, "        write_iteration_update(logging_dir, iteration, seeds, coeffs)",
                                     "        write_iteration_update(logging_dir, iteration, seeds, "
                                     "[float(r) for r in rewards[:len(seeds)]])")],
                         "main: the iteration record holds the raw rewards instead of the coefficients"),
    # contract noise rounds the same gaussian to any dtype, so only torch's own generator (native rows) sees it
    "noise-f32-then-cast": ("es-awd", [(AWD, "return torch.randn(shape, dtype=dtype, device=device, generator=generator)",
                                        "return torch.randn(shape, dtype=torch.float32, device=device, "
                                        "generator=generator).to(dtype)")],
                            "generate_noise draws f32 and casts instead of drawing in the parameter dtype"),
    # ---- second round (loop-mutants-2): kinds the first fourteen do not cover
    "seed-fallback-changed": ("es-at-scale", [(TRAINER, "default_rng(seed=(self.global_seed or 42) + i)",
                                               "default_rng(seed=(self.global_seed or 43) + i)")],
                              "fit: the global seed's fallback is 43 instead of 42 (seen where no seed is given)"),
    "global-seed-ignored": ("es-awd", [(ES, "rng = np.random.default_rng((args.global_seed or 42) + iteration)",
                                        "rng = np.random.default_rng(42 + iteration)")],
                            "main: the global seed it is given is ignored (always the fallback 42)"),
    "seeds-bound-2-31": ("es-at-scale", [(TRAINER, "rng.integers(0, 2 ** 30, size=self.population_size",
                                          "rng.integers(0, 2 ** 31, size=self.population_size")],
                         "fit: member seeds drawn below 2**31 instead of 2**30"),
    "group-reversed": ("es-at-scale", [(TRAINER, "group = seeds[start:start + self.n_vllm_engines]",
                                        "group = seeds[start:start + self.n_vllm_engines][::-1]")],
                       "fit: the members of a group assigned to the engines in reverse order"),
    "last-minibatch-dropped": ("es-at-scale", [(TRAINER, "for start in range(0, len(input_text), mini_batch_size):",
                                                "for start in range(0, len(input_text) - 1, mini_batch_size):")],
                               "fit: the last (short) mini-batch of the batch is never evaluated"),
    "std-eps-twice": ("es-at-scale", [(TRAINER, "std_reward = float(np.std(rewards))",
                                       "std_reward = float(np.std(rewards)) + 1e-8")],
                      "fit: the std handed to z_score already holds the + 1e-8 (added twice)"),
    "alpha-over-sigma": ("es-at-scale", [(TRAINER, "args=(update_seeds, coeffs, self.alpha, self.population_size)",
                                          "args=(update_seeds, coeffs, self.alpha / self.sigma, "
                                          "self.population_size)")],
                         "fit: the update handed alpha / sigma instead of alpha"),
    "zscore-no-eps": ("es-awd", [(ES, "z = [(r - mean) / (std + 1e-8) for r in rewards]",
                                  "z = [(r - mean) / std for r in rewards]")],
                      "main: z-scores without the + 1e-8"),
    "mirror-z-plus-half": ("es-awd", [(ES, "mean, std = np.mean(rewards), np.std(rewards)",
                                       "mean, std = np.mean(rewards[:len(seeds)]), np.std(rewards[:len(seeds)])")],
                           "main: mean and std over the +sigma members only (changes only mirrored runs)"),
    "decay-step-lambda-squared": ("es-awd", [(AWD, "apply_reference_weight_decay_(param, reference, weight_decay_type, "
                                                   "weight_decay_lambda, alpha)",
                                              "apply_reference_weight_decay_(param, reference, weight_decay_type, "
                                              "weight_decay_lambda, weight_decay_lambda)")],
                                  "the decay handed lambda as its alpha (step lambda**2 instead of alpha * lambda)"),
    "record-iteration-minus-1": ("es-awd", [(ES, 'json.dump({"iteration": iteration,',
                                             'json.dump({"iteration": iteration - 1,')],
                                 "main: the iteration record names the iteration before"),
    # the two faults below change nothing the last iteration leaves behind (the other engines' weights are
    # thrown away, the anchor is taken before the first update): the test runs them for 2 iterations
    "broadcast-before-update": ("es-awd", [(ES, _AWD_UPDATE + "\n" + _AWD_BROADCAST,
                                            _AWD_BROADCAST + "\n" + _AWD_UPDATE)],
                                "main: the broadcast runs before the update (engines 1.. one update behind)"),
    "snapshot-every-iteration": ("es-awd", [(ES, _AWD_LOOP_HEAD, _AWD_LOOP_HEAD.replace("        rng", """\
        if args.weight_decay_type != "none" and args.weight_decay_lambda > 0:
            ray.get(engines[0].collective_rpc.remote("snapshot_weights_to_cpu"))
        rng"""))], "main: the decay anchor re-taken every iteration instead of once before the loop"),
    "restore-skipped-engine-0": ("es-awd", [(ES, _AWD_RESTORE, """                    if j > 0:
    """ + _AWD_RESTORE)], "main: engine 0 is never restored after its member"),
    "perturb-sigma-half": ("es-awd", [(ES, "args=(seed, args.sigma, args.caching, negate))\n                         for j",
                                       "args=(seed, args.sigma / 2, args.caching, negate))\n                         for j")],
                           "main: members perturbed with sigma / 2 (restored with sigma)"),
    "restore-reseeded-plus-1": ("es-awd", [(DIST, "        scale = noise_scale if negate else -noise_scale\n"
                                                  "        apply_seeded_noise_to_parameters(self.model_runner.model"
                                                  ".parameters(), seed, scale",
                                            "        scale = noise_scale if negate else -noise_scale\n"
                                            "        apply_seeded_noise_to_parameters(self.model_runner.model"
                                            ".parameters(), seed + 1, scale")],
                                "main: the restore draws with seed + 1 (contract noise: an unknown seed)"),
    "restore-caching-ignored": ("es-awd", [(ES, "args=(seed, args.sigma, args.caching, negate)))",
                                            "args=(seed, args.sigma, False, negate)))")],
                                "main: the restore not handed the caching flag (a value identity under torch's "
                                "generator and correlated noise; compared as an argument, like the update's)"),
    # f64 drawn then cast: another stream under torch's generator in every dtype, f32 included
    "noise-f64-then-cast": ("es-awd", [(AWD, "return torch.randn(shape, dtype=dtype, device=device, "
                                             "generator=generator)",
                                        "return torch.randn(shape, dtype=torch.float64, device=device, "
                                        "generator=generator).to(dtype)")],
                            "generate_noise draws f64 and casts instead of drawing in the parameter dtype"),
    # the engines launched in another precision than documented: the stand-in engines compute each reward
    # in the precision they are launched with (es-at-scale documents bfloat16, es-awd its --precision)
    "fit-engines-float16": ("es-at-scale", [(TRAINER, "                                                     "
                                                      "model_name=model_name)",
                                             "                                                     "
                                             "model_name=model_name, precision=\"float16\")")],
                            "fit launches its engines in float16 where it documents bfloat16"),
    "fit-engines-default-float16": ("es-at-scale", [(TRAINER, "precision='bfloat16'):", "precision='float16'):")],
                                    "launch_engines' default precision float16 instead of bfloat16"),
    "main-engines-bfloat16": ("es-awd", [(ES, "precision=args.precision)", "precision=\"bfloat16\")")],
                              "main launches its engines in bfloat16 whatever --precision says"),
    "fit-no-final-save": ("es-at-scale", [(TRAINER, '        ray.get(self.engines[0].collective_rpc.remote('
                                                    '"save_self_weights_to_disk", args=(path,)))', "        pass")],
                          "fit never saves engine 0's weights at the end"),
}

#: single-detail edits that change nothing a run can observe, each with why (the test checks they pass)
LOOP_EQUIVALENTS = {
    "snapshot-at-lambda0": ("es-awd", [(ES, 'if args.weight_decay_type != "none" and args.weight_decay_lambda > 0:',
                                        'if args.weight_decay_type != "none":')],
                            "a snapshot taken at lambda 0 too is never read: lambda 0 means no decay"),
    "fit-save-engine-1": ("es-at-scale", [(TRAINER, 'ray.get(self.engines[0].collective_rpc.remote('
                                                    '"save_self_weights_to_disk"',
                                           'ray.get(self.engines[1].collective_rpc.remote('
                                           '"save_self_weights_to_disk"')],
                          "after the last broadcast every engine holds engine 0's weights"),
}

#: single-detail FAULTS that pass every row (false passes), each with what a run would need to see it; the
#: test checks they still pass, so a change that makes one visible moves it to LOOP_MUTANTS
LOOP_UNSEEN = {
    "samples-median": ("es-at-scale", [(TRAINER, "rewards.append(float(np.mean(values)) if",
                                        "rewards.append(float(np.median(values)) if")],
                       "the child asks for n_samples 1 and its engines answer one sample per prompt: the "
                       "reduction over samples (rollout_reduce) is not exercised"),
    "mirror-divisor-from-seeds": ("es-awd", [(ES, "size=n // 2 if args.mirror_sampling else n, dtype=np.int64)]",
                                              "size=n // 2 if args.mirror_sampling else n, dtype=np.int64)]\n"
                                              "        n = len(seeds) * 2 if args.mirror_sampling else n")],
                                  "2 * (N // 2) is N for the even population the mirrored rows run; an odd N "
                                  "with mirror_sampling (divisor N over N - 1 members) is not run: our trainer "
                                  "pairs members"),
    "generator-on-cpu": ("es-awd", [(AWD, "generator = torch.Generator(device=device)",
                                     "generator = torch.Generator()")],
                         "identical on --devices cpu; only a CUDA run (torch refuses a CPU generator for a CUDA "
                         "draw) can show it"),
}

#: equivalent reuse edits: a call reuses an equal-size draw of the same seed (the same values under torch's
#: generator and correlated noise, so nothing changes there), in ONE of the calls a loop makes, so that a
#: replay of one map for the whole case would not reproduce it. Under iid each row that draws is a pass or
#: the `reuse` artifact (ours replaying the reference's reuse call by call agrees bit for bit), in single
#: ops and loops alike (tests/test_parity_loops.py)
LOOP_REUSE_EQUIVALENTS = {
    "perturb-reuses-equal-size": ("es-at-scale", [(WORKER, _PERTURB_LOOP, """        reused = {}
        for name, param in self.model_runner.model.named_parameters():
            key = (param.numel(), param.dtype)
            if key not in reused:
                generator = torch.Generator(device=param.device)
                generator.manual_seed(seed)
                noise = torch.randn(param.shape, dtype=param.dtype, device=param.device, generator=generator)
                reused[key] = noise
            noise = reused[key].reshape(param.shape)
            param.data.add_(scale * noise)""")],
                                  "the worker's perturb (only) reuses one draw per (element count, dtype), reshaped"),
    "restore-caches-equal-shape": ("es-awd", [(DIST, """        scale = noise_scale if negate else -noise_scale
        apply_seeded_noise_to_parameters(self.model_runner.model.parameters(), seed, scale, caching=caching)""",
                                               """        scale = noise_scale if negate else -noise_scale
        apply_seeded_noise_to_parameters(self.model_runner.model.parameters(), seed, scale, caching=True)""")],
                                   "the worker's restore (only) reuses the noise of equal-shape tensors "
                                   "(caching=True whatever it is handed)"),
}


def make_loop_mutant(tmp, name: str, git: bool = False):
    """Copy the stand-in clone of the mutant's target under `tmp` with its edit applied; the clone root
    (`git`: see mutants.make_variant)."""
    target, edits, _ = {**LOOP_MUTANTS, **LOOP_EQUIVALENTS, **LOOP_UNSEEN, **LOOP_REUSE_EQUIVALENTS}[name]
    return make_variant(tmp, target, edits, git=git)
