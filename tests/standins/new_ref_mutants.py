"""Mutants of the stand-ins of the two new references (docs/references.md §6 and §7): data only.

Same edit format as tests/standins/loop_mutants.py: a list of (file, old,
new) text replacements applied to a copy of a stand-in (make_variant), the
edits in order, each `old` occurring exactly once in the file as it stands
when the edit is applied. The paper's scripts live in archive/ of the
es-at-scale stand-in; the skill sample is tests/standins/skill-sample.

Each entry says what it changes (`what`), which dtypes and noise kinds
should reveal it (`reveals`: contract noise means the parity hook's noise,
native noise torch's or numpy's own generator) and `shows`: the dtypes on
which tests/test_new_ref_standins.py's in-process runs (native noise, a
two-tensor model, 2 iterations at N = 4, 2 model copies for the paper
scripts) must give other bits than the unmutated stand-in; that test
checks it, so an entry whose fault the tiny runs cannot reach says so with
an empty `shows` and the reason in `reveals` (`maybe`: dtypes where the
outcome depends on the CPU's kernels, not asserted). EQUIVALENTS change nothing
observable: the same runs must give the same bits, on every dtype that runs.
Names are unique across the three dicts.
"""
from __future__ import annotations

from typing import NamedTuple

PAPER = "es-at-scale"           # the stand-in folder that holds archive/
SKILL = "skill-sample"
COUNTDOWN = "archive/es_fine-tuning_countdown.py"
COUNTDOWN_IID = "archive/es_fine-tuning_countdown_iid.py"
CONCISENESS = "archive/es_fine-tuning_conciseness.py"
SKILL_FILE = "es_finetuning_skill.py"

#: every dtype the in-process runs use; the skill sample raises on bf16, so its runs have f32 and f16
PAPER_DTYPES = ("f32", "f16", "bf16")
SKILL_DTYPES = ("f32", "f16")


class NewRefMutant(NamedTuple):
    """One single-detail edit of a new reference's stand-in (target: PAPER or SKILL).

    shows: dtypes on which the tiny in-process runs must differ from the unmutated stand-in (every other
    dtype must give the same bits), except `maybe`: dtypes where that depends on the CPU's kernels."""
    target: str
    edits: list
    what: str
    reveals: str
    shows: tuple = ()
    maybe: tuple = ()


_UPDATE_DRAW = """                gen = torch.Generator(device=param.device)
                gen.manual_seed(int(seed))
                noise = torch.randn(param.shape, generator=gen, device=param.device, dtype=param.dtype)
                noise.mul_(float(r_norm))"""
_SKILL_MEMBER_SEED = """            seed = seed_base + gen * population_size + m
            np.random.seed(seed)
            noise = torch.tensor("""
_SKILL_UPDATE_SEED = """            seed = seed_base + gen * population_size + m
            np.random.seed(seed)
            noise = np.random.randn("""

PAPER_MUTANTS = {
    "normalise-f64": NewRefMutant(
        PAPER, [(COUNTDOWN, "rewards = np.array(rewards, dtype=np.float32)",
                 "rewards = np.array(rewards, dtype=np.float64)")],
        "main: the rewards z-scored in f64 instead of f32",
        "f32 under both noise kinds (the f32 and f64 z-scores differ in their last bits); f16 and bf16 only "
        "where noise.mul_ rounds a product of the two coefficients apart (about 1 product in 2**13 in f16, "
        "fewer in bf16): large tensors, not the tiny runs", ("f32",)),
    "accumulator-f32": NewRefMutant(
        PAPER, [(COUNTDOWN, "update = torch.zeros_like(param)", "update = torch.zeros_like(param, dtype=torch.float32)")],
        "main: the update accumulated in f32 instead of the parameter dtype",
        "f16 and bf16 under both noise kinds (no rounding at every add_ and at div_); identical in f32",
        ("f16", "bf16")),
    "no-divide-by-population": NewRefMutant(
        PAPER, [(COUNTDOWN, "            update.div_(POPULATION_SIZE)\n", "")],
        "main: the accumulated update is not divided by POPULATION_SIZE (a step N times too large)",
        "every dtype, both noise kinds", ("f32", "f16", "bf16")),
    "iid-update-without-slot": NewRefMutant(
        PAPER, [(COUNTDOWN_IID, "                gen.manual_seed(int(seed) + k)\n",
                 "                gen.manual_seed(int(seed))\n")],
        "_iid main: the update draws with seed instead of seed + k (not the noise the member was evaluated with)",
        "every dtype, both noise kinds, on every parameter but the first (k = 0 is unchanged); with contract "
        "noise the hook sees seed where it expects seed + k", ("f32", "f16", "bf16")),
    "iid-perturb-without-slot": NewRefMutant(
        PAPER, [(COUNTDOWN_IID, "    for k, (name, param) in enumerate(model.named_parameters()):\n"
                                "        gen = torch.Generator(device=param.device)\n"
                                "        gen.manual_seed(int(seed) + k)\n"
                                "        noise = torch.randn(param.shape, generator=gen, device=param.device, "
                                "dtype=param.dtype)\n        param.data.add_(SIGMA * noise)",
                 "    for k, (name, param) in enumerate(model.named_parameters()):\n"
                 "        gen = torch.Generator(device=param.device)\n"
                 "        gen.manual_seed(int(seed))\n"
                 "        noise = torch.randn(param.shape, generator=gen, device=param.device, "
                 "dtype=param.dtype)\n        param.data.add_(SIGMA * noise)")],
        "_iid process_seed: the perturbation draws with seed instead of seed + k (restore and update keep seed + k)",
        "every dtype, both noise kinds: members are evaluated off the perturbation the update assumes and "
        "restored with other noise (the copies drift)", ("f32", "f16", "bf16")),
    "restore-sign-flipped": NewRefMutant(
        PAPER, [(COUNTDOWN, "param.data.add_(-SIGMA * noise)", "param.data.add_(SIGMA * noise)")],
        "process_seed: the restore adds +SIGMA * noise (every copy drifts by 2 sigma per member)",
        "every dtype, both noise kinds (copy 0 enters the update perturbed)", ("f32", "f16", "bf16")),
    "update-add-alpha-fused": NewRefMutant(
        PAPER, [(COUNTDOWN, "param.data.add_(ALPHA * update)", "param.data.add_(update, alpha=ALPHA)")],
        "main: add_(update, alpha=ALPHA) instead of add_(ALPHA * update) (one rounding instead of two)",
        "f16 and bf16 where rounding ALPHA * update to the dtype first moves the sum across a rounding "
        "boundary of the parameter (the CPU kernel computes p + alpha * u in f32 and rounds once): an element "
        "in a few hundred, so the tiny f16 run shows it and the bf16 one does not; f32 where the kernel uses "
        "a fused multiply-add (CPU capability dependent)",
        ("f16",), ("f32",)),
    "initial-seed-ignored": NewRefMutant(
        PAPER, [(COUNTDOWN, "np.random.seed(initial_seed)", "np.random.seed(33)")],
        "main: the seed schedule seeded 33 whatever the module's initial_seed says",
        "only runs that set initial_seed to another value than 33 (every dtype, native noise; with contract "
        "noise the seeds are handles and the schedule is not compared); the in-process runs set 7",
        ("f32", "f16", "bf16")),
    "seeds-bound-2-31": NewRefMutant(
        PAPER, [(COUNTDOWN, "np.random.randint(0, 2**30, size=POPULATION_SIZE", "np.random.randint(0, 2**31, "
                 "size=POPULATION_SIZE")],
        "main: member seeds drawn below 2**31 instead of 2**30 (another seed schedule)",
        "every dtype under native noise (other seeds, other noise); contract noise only if the driver "
        "checks the schedule", ("f32", "f16", "bf16")),
    "zscore-ddof1": NewRefMutant(
        PAPER, [(COUNTDOWN, "(rewards.std() + 1e-8)", "(rewards.std(ddof=1) + 1e-8)")],
        "main: the rewards' std with ddof=1", "every dtype, both noise kinds (z-scores scaled by sqrt((N-1)/N))",
        ("f32", "f16", "bf16")),
    "copies-not-synchronised": NewRefMutant(
        PAPER, [(COUNTDOWN, "                param.data.copy_(original_model.get_parameter(name).data.clone())",
                 "                pass")],
        "main: the other model copies never get copy 0's updated parameters",
        "every dtype, both noise kinds, with --gpu_threads > 1 and 2 or more iterations (members of the "
        "second iteration on copies 1.. are evaluated at stale parameters)", ("f32", "f16", "bf16")),
}

SKILL_MUTANTS = {
    "update-sign-flipped": NewRefMutant(
        SKILL, [(SKILL_FILE, "params_current = params_current.cpu() + (lr / sigma)",
                 "params_current = params_current.cpu() - (lr / sigma)")],
        "es_train_loop: the update subtracted (descends the reward)", "f32 and f16, both noise kinds",
        SKILL_DTYPES),
    "divisor-lr-only": NewRefMutant(
        SKILL, [(SKILL_FILE, "(lr / sigma) * torch.tensor(update", "lr * torch.tensor(update")],
        "es_train_loop: the step lr instead of lr / sigma", "f32 and f16, both noise kinds", SKILL_DTYPES),
    "utilities-by-rank": NewRefMutant(
        SKILL, [(SKILL_FILE, "        update = np.zeros(params_current.numel())\n",
                 "        update = np.zeros(params_current.numel())\n"
                 "        rank = np.argsort(np.argsort(-rewards))\n"),
                (SKILL_FILE, "update += utilities[m] * noise", "update += utilities[rank[m]] * noise")],
        "es_train_loop: utilities indexed by reward rank (the page's stated intent), not by member number",
        "f32 and f16, both noise kinds, whenever the members' rewards are not already in decreasing order",
        SKILL_DTYPES),
    "seed-without-generation": NewRefMutant(
        SKILL, [(SKILL_FILE, _SKILL_MEMBER_SEED, _SKILL_MEMBER_SEED.replace(" + gen * population_size", "")),
                (SKILL_FILE, _SKILL_UPDATE_SEED, _SKILL_UPDATE_SEED.replace(" + gen * population_size", ""))],
        "es_train_loop: seed = seed_base + m (every generation reuses generation 0's noise)",
        "f32 and f16 from the second generation on, both noise kinds", SKILL_DTYPES),
    "update-rounded-once": NewRefMutant(
        SKILL, [(SKILL_FILE, "torch.tensor(update, dtype=params_init.dtype)",
                 "torch.tensor(update.astype(str(params_init.dtype)[6:]), dtype=params_init.dtype)")],
        "es_train_loop: the f64 update rounded once, by numpy, straight to the parameter dtype (torch 2.13 "
        "rounds f64 -> f32 -> f16: measured, docs/numerics.md)",
        "f16 only, where an element's f64 sum lies within an f32 half-ulp of an f16 rounding midpoint (about "
        "1 element in 14,000 on 2M random sums); identical in f32, bf16 cannot run. The tiny runs do not reach "
        "it", ()),
    "skill-zscore-ddof1": NewRefMutant(
        SKILL, [(SKILL_FILE, "(rewards.std() + 1e-8)", "(rewards.std(ddof=1) + 1e-8)")],
        "es_train_loop: the rewards' std with ddof=1", "f32 and f16, both noise kinds", SKILL_DTYPES),
    "unused-accumulation-dropped": NewRefMutant(
        SKILL, [(SKILL_FILE, "            noise_accumulator += utilities[m] * noise.cpu().numpy()\n", "")],
        "es_train_loop: the unused accumulation removed (a fix: bf16 parameters no longer raise TypeError)",
        "bf16 only: it runs instead of raising (f32 and f16 bits unchanged); above 30 members the IndexError "
        "moves to the update loop, after every member was evaluated", ()),
}

#: single-detail edits that change nothing observable, each with why (the same in-process runs, same bits)
EQUIVALENTS = {
    "paper-rename-coefficient": NewRefMutant(
        PAPER, [(COUNTDOWN, "r_norm = rewards_normalized[seed_idx]", "coeff = rewards_normalized[seed_idx]"),
                (COUNTDOWN, "noise.mul_(float(r_norm))", "noise.mul_(float(coeff))")],
        "main: the local r_norm renamed coeff", "a local's name is not observable"),
    "paper-scalar-on-the-right": NewRefMutant(
        PAPER, [(COUNTDOWN, "param.data.add_(ALPHA * update)", "param.data.add_(update * ALPHA)")],
        "main: update * ALPHA instead of ALPHA * update",
        "a Python float times a tensor is the same multiply kernel either side (one rounding, commutative)"),
    "paper-rewards-f64-tensor": NewRefMutant(
        PAPER, [(COUNTDOWN, "rewards_tensor = torch.zeros(POPULATION_SIZE, dtype=torch.float32",
                 "rewards_tensor = torch.zeros(POPULATION_SIZE, dtype=torch.float64")],
        "main: the rewards gathered in an f64 tensor",
        "np.array(..., dtype=np.float32) rounds each reward to f32 once either way (f64 -> f32 directly, or "
        "f64 -> f32 in the tensor and exactly back)"),
    "paper-mean-over-prompts": NewRefMutant(
        PAPER, [(COUNTDOWN, "total_reward = sum(rewards) / len(dataset)", "total_reward = sum(rewards) / len(rewards)")],
        "process_seed: divided by the number of rewards instead of len(dataset)",
        "evaluate_model returns one reward per prompt: the same length"),
    "paper-generator-reseeded": NewRefMutant(
        PAPER, [(COUNTDOWN, "            update = torch.zeros_like(param)\n",
                 "            update = torch.zeros_like(param)\n            gen = torch.Generator(device=param.device)\n"),
                (COUNTDOWN, _UPDATE_DRAW, _UPDATE_DRAW.replace("                gen = torch.Generator(device=param.device)\n",
                                                               ""))],
        "main: one generator per parameter, reseeded per member, instead of a new one per member",
        "manual_seed rewinds a generator to the start of its stream (docs/references.md §3a)"),
    "skill-rename-accumulator": NewRefMutant(
        SKILL, [(SKILL_FILE, "noise_accumulator = np.zeros(", "unused_sum = np.zeros("),
                (SKILL_FILE, "noise_accumulator += utilities[m]", "unused_sum += utilities[m]")],
        "es_train_loop: the unused accumulator renamed", "a local's name is not observable"),
    "skill-sum-not-in-place": NewRefMutant(
        SKILL, [(SKILL_FILE, "update += utilities[m] * noise * rewards_normalized[m]",
                 "update = update + utilities[m] * noise * rewards_normalized[m]")],
        "es_train_loop: update = update + ... instead of update += ...",
        "the same f64 addition in the same order; only the array object differs"),
    "update-rounded-f32-first": NewRefMutant(
        SKILL, [(SKILL_FILE, "torch.tensor(update, dtype=params_init.dtype)",
                 "torch.tensor(update.astype(np.float32), dtype=params_init.dtype)")],
        "es_train_loop: the f64 update rounded to f32 before the parameter dtype",
        "torch 2.13 CPU itself converts an f64 array to f16 through f32 (0 of 2M random sums differ, measured): "
        "the explicit f32 step is the rounding torch does anyway"),
    "skill-step-precomputed": NewRefMutant(
        SKILL, [(SKILL_FILE, "(lr / sigma) * torch.tensor(update", "float(lr / sigma) * torch.tensor(update")],
        "es_train_loop: float(lr / sigma) instead of (lr / sigma)",
        "lr / sigma is already a Python float: float() returns the same value"),
}
