"""Mutants of the EGGROLL stand-in (tests/standins/eggroll-vllm, docs/references.md): data only.

Same edit format as tests/standins/new_ref_mutants.py: a list of (file, old,
new) text replacements applied to a copy of the stand-in (make_variant), in
order, each `old` occurring exactly once in the file as it stands when the
edit is applied.

Each entry says what it changes (`what`), what a parity row should see
(`reveals`), and `shows`: the parts of the eggroll driver's collected output
(esverify/references/eggroll/child/driver.py) that the in-process runs of
tests/test_eggroll_mutants.py (native noise, the tiny model, N 4, 3 steps at
steps_per_adapter 2, std normalisation on, 2 engines; one run f32 at r 1,
one bf16 at r 2) must give other bits for than the unmutated stand-in; every
other part must keep its bits. The parts:
- `rewards`: every reward of every step (the F matrices);
- `ba`: the perturbation each member is evaluated with (B·A in f16, per weight);
- `factors`: the adapter's A and B bits (a difference there alone is a note,
  not a fail: the sign may sit on A or on B);
- `fitnesses`: the shaped fitnesses and pair differences the update received;
- `weights`: every engine after every step, and the final weights;
- `updates`: the number of updates.
`maybe`: parts whose outcome depends on the CPU's kernels (not asserted).
EQUIVALENTS change nothing that decides behaviour: `shows` is empty or only
`factors`. Names are unique across the two dicts.
"""
from __future__ import annotations

from typing import NamedTuple

TARGET = "eggroll-vllm"
TRAINER = "es_lora_multinode.py"
#: the parts of the collected output a row compares (see the module docstring)
PARTS = ("rewards", "ba", "factors", "fitnesses", "weights", "updates")
ALL_BUT_FACTORS = ("rewards", "ba", "fitnesses", "weights")
EVERYTHING = ("rewards", "ba", "factors", "fitnesses", "weights")
#: what the update alone changes: the weights, hence the later steps' rewards and shaped fitnesses
UPDATE_ONLY = ("rewards", "fitnesses", "weights")


class EggrollMutant(NamedTuple):
    """One single-detail edit of the stand-in and the parts of the driver's output it changes."""
    edits: list
    what: str
    reveals: str
    shows: tuple = ()
    maybe: tuple = ()
    target: str = TARGET


_SEED = "    seed = base_seed + num_pop_pairs * num_layers * step + num_layers * pop_pair_idx + layer_idx\n"
_DRAWS = ("    a = torch.normal(mean=0.0, std=1.0, size=shapes[0], generator=generator)\n"
          "    b = torch.normal(mean=0.0, std=1.0, size=shapes[1], generator=generator)\n")
_ADAPTER_SIGN = ("                if m % 2 == 1:\n"
                 "                    lora_b = -lora_b\n")
_UPDATE_GENERATION = ("        num_layers = len(peft_shapes_dict)\n"
                      "        generation = es_step // args.steps_per_adapter\n")
_ADAPTER_GENERATION = ("        num_layers = len(self.peft_shapes_dict)\n"
                       "        generation = es_step // args.steps_per_adapter\n")
_A_SCALE = "                A = torch.stack(a_list) * math.sqrt(sigma)\n"
_B_SCALE = "                B = torch.stack(b_list) * math.sqrt(sigma / r)\n"
_DIVISOR = "            delta = (1.0 / (population * sigma + 1e-8)) * grad\n"
_LR = "            delta = delta * args.learning_rate\n"

#: the update's per-weight accumulator and its chunk loop (the rows with several chunks reach the second)
_GRAD_CHUNKS = ("            grad = torch.zeros(out_dim, in_dim, dtype=torch.float32)\n"
                "            for start in range(0, num_pairs, chunk):\n")

MUTANTS = {
    # a change of what happens to non-finite values only: every finite run keeps its bits, so only the row of
    # NaN rewards (adapter.NONFINITE_ROWS) can see it (tests/test_nonfinite_rows.py)
    "nan-pair-differences-to-zero": EggrollMutant(
        [(TRAINER, "        pair_diffs = torch.from_numpy(fitnesses[0::2] - fitnesses[1::2]).to(torch.float32)\n",
          "        pair_diffs = torch.from_numpy(fitnesses[0::2] - fitnesses[1::2]).to(torch.float32)\n"
          "        pair_diffs = torch.nan_to_num(pair_diffs, nan=0.0, posinf=0.0, neginf=0.0)\n")],
        "apply_lora_es_update: NaN and infinite pair differences mapped to zero",
        "the weights after the update of the NaN-reward row (every weight NaN in the reference, unchanged here); "
        "a finite run gives the same bits"),
    # confined to the second and later update chunks: every row of one chunk (N 4: two pairs) agrees bit for
    # bit, so only the rows with several chunks (adapter.CHUNK_ROWS) can see it (tests/test_parity_paths.py)
    "grad-reset-per-chunk": EggrollMutant(
        [(TRAINER, _GRAD_CHUNKS, "            for start in range(0, num_pairs, chunk):\n"
                                 "                grad = torch.zeros(out_dim, in_dim, dtype=torch.float32)\n")],
        "apply_lora_es_update: the accumulator reset at every chunk (only the last chunk's pairs reach Δ)",
        "the weights after the update at two or more chunks (the chunk rows); one chunk gives the same bits"),
    "seed-pair-term": EggrollMutant(
        [(TRAINER, _SEED, _SEED.replace("num_layers * pop_pair_idx", "pop_pair_idx"))],
        "get_rng_noise: id = base_seed + P·L·s + k + l (the pair term not scaled by L: pair 1's weight 0 draws "
        "pair 0's weight 1)",
        "every dtype and rank, native noise (other torch streams); under contract noise the hook decodes the "
        "ids as other (pair, weight) streams", EVERYTHING),
    "draw-order-b-first": EggrollMutant(
        [(TRAINER, _DRAWS, "    b = torch.normal(mean=0.0, std=1.0, size=shapes[1], generator=generator)\n"
                           "    a = torch.normal(mean=0.0, std=1.0, size=shapes[0], generator=generator)\n")],
        "get_rng_noise: b (out x r) drawn before a (r x in)",
        "every dtype and rank, both noise kinds (a and b read other parts of the stream)", EVERYTHING),
    "no-sqrt-rank-on-b": EggrollMutant(
        [(TRAINER, _B_SCALE, _B_SCALE.replace("math.sqrt(sigma / r)", "math.sqrt(sigma)"))],
        "apply_lora_es_update: b scaled by sqrt(sigma) instead of sqrt(sigma / r) (the adapters keep it)",
        "rank above 1 only (sqrt(sigma / 1) = sqrt(sigma)): the update is sqrt(r) times too large", UPDATE_ONLY),
    "adapter-scale-sigma": EggrollMutant(
        [(TRAINER, "                lora_a = (math.sqrt(args.sigma) * a).to(torch.float16)\n",
          "                lora_a = (args.sigma * a).to(torch.float16)\n")],
        "generate_local_adapters: A = f16(sigma · a) instead of f16(sqrt(sigma) · a)",
        "every dtype and rank, both noise kinds: members are evaluated off the perturbation the update assumes",
        ("rewards", "ba", "factors", "fitnesses", "weights")),
    "update-noise-f16": EggrollMutant(
        [(TRAINER, _A_SCALE, _A_SCALE.replace("torch.stack(a_list) * math.sqrt(sigma)",
                                              "(torch.stack(a_list) * math.sqrt(sigma)).half().float()")),
         (TRAINER, _B_SCALE, _B_SCALE.replace("torch.stack(b_list) * math.sqrt(sigma / r)",
                                              "(torch.stack(b_list) * math.sqrt(sigma / r)).half().float()"))],
        "apply_lora_es_update: the update uses the f16-rounded factors (the adapters' values) instead of f32",
        "f32 weights (every element's Δ moves), bf16 where a rounding boundary is crossed", UPDATE_ONLY),
    "divisor-pairs": EggrollMutant(
        [(TRAINER, _DIVISOR, _DIVISOR.replace("population * sigma", "num_pairs * sigma"))],
        "apply_lora_es_update: Δ divided by P·σ instead of N·σ (twice too large)",
        "every dtype and rank, both noise kinds", UPDATE_ONLY),
    "no-epsilon": EggrollMutant(
        [(TRAINER, _DIVISOR, _DIVISOR.replace(" + 1e-8", ""))],
        "apply_lora_es_update: 1 / (N·σ) without the 1e-8",
        "f32 (the f32 factor 1/(N·σ + 1e-8) differs from 1/(N·σ) at N·σ = 0.04); bf16 only where that crosses "
        "a rounding boundary (not in the bf16 run)", UPDATE_ONLY),
    "one-combined-factor": EggrollMutant(
        [(TRAINER, _DIVISOR + _LR, "            delta = (args.learning_rate / (population * sigma + 1e-8)) * grad\n")],
        "apply_lora_es_update: one factor lr / (N·σ + 1e-8) instead of two f32 multiplies",
        "f32 where the two roundings differ from one (the f32 run here shows it); bf16 rarely (not the bf16 "
        "run); kernel dependent, so not asserted",
        (), ("rewards", "fitnesses", "weights")),
    "rank1-batched": EggrollMutant(
        [(TRAINER, "                if r == 1:\n", "                if r == 0:\n")],
        "apply_lora_es_update: rank 1 through the batched path (bmm, sum over pairs) instead of one mm",
        "rank 1 only, where the mm's accumulation differs from the pairwise sum (the f32 run here shows it; "
        "kernel dependent, so not asserted)",
        (), ("rewards", "fitnesses", "weights")),
    "update-ignores-noise-reuse": EggrollMutant(
        [(TRAINER, _UPDATE_GENERATION, _UPDATE_GENERATION.replace("es_step // args.steps_per_adapter", "es_step"))],
        "apply_lora_es_update: noise of generation es_step instead of es_step // steps_per_adapter (the update "
        "redraws streams the members were not evaluated with)",
        "every step but 0 with steps_per_adapter > 1; under contract noise the ids of generations past the run "
        "are refused", UPDATE_ONLY),
    "adapters-ignore-noise-reuse": EggrollMutant(
        [(TRAINER, _ADAPTER_GENERATION, _ADAPTER_GENERATION.replace("es_step // args.steps_per_adapter", "es_step"))],
        "generate_local_adapters: adapters of generation es_step (only rewritten at generation boundaries, so "
        "step 2 serves generation 2's noise where the update uses generation 1's)",
        "runs crossing a generation boundary with steps_per_adapter > 1", ("rewards", "ba", "factors", "fitnesses",
                                                                            "weights")),
    "std-ddof1": EggrollMutant(
        [(TRAINER, "        fitness_std = shaped.std()\n", "        fitness_std = shaped.std(ddof=1)\n")],
        "main: the fitnesses' standard deviation with ddof 1", "runs with --normalize-with-std, every dtype",
        UPDATE_ONLY),
    "centre-per-member": EggrollMutant(
        [(TRAINER, "        centred = fitness_matrix - fitness_matrix.mean(axis=0)\n",
          "        centred = fitness_matrix - fitness_matrix.mean(axis=1, keepdims=True)\n")],
        "main: fitnesses centred per member (over the prompts) instead of per prompt (over the members)",
        "every run: each member's mean over prompts is then 0 up to rounding", UPDATE_ONLY),
    "slice-v-over-k": EggrollMutant(
        [(TRAINER, '            start = {"q_proj": 0, "k_proj": q_rows, "v_proj": q_rows + k_rows}[proj]\n',
          '            start = {"q_proj": 0, "k_proj": q_rows, "v_proj": q_rows}[proj]\n')],
        "map_peft_updates_to_vllm: v_proj's update lands on k_proj's rows of qkv_proj",
        "every run: k's rows get k's and v's update, v's rows none", UPDATE_ONLY),
    "b-from-a-fresh-generator": EggrollMutant(
        [(TRAINER, _DRAWS, _DRAWS.replace("size=shapes[1], generator=generator)",
                                          "size=shapes[1], generator=torch.Generator().manual_seed(seed))"))],
        "get_rng_noise: b drawn from a new generator seeded the same id (it restarts the stream a was drawn "
        "from instead of continuing it)",
        "every run, both noise kinds; under contract noise the draw audit also shows b at position 0 of its "
        "stream instead of r·in", EVERYTHING),
    "sign-on-update-flipped": EggrollMutant(
        [(TRAINER, "        pair_diffs = torch.from_numpy(fitnesses[0::2] - fitnesses[1::2]).to(torch.float32)\n",
          "        pair_diffs = torch.from_numpy(fitnesses[1::2] - fitnesses[0::2]).to(torch.float32)\n")],
        "apply_lora_es_update: d_k = f[2k+1] - f[2k] (the update descends)", "every run", UPDATE_ONLY),
    # a written dtype alone: the adapter files hold f32 factors where the reference writes f16; the stand-in
    # engine serves the file's dtype (a stand-in that rounded every adapter to f16 passed this mutant)
    "adapters-written-f32": EggrollMutant(
        [(TRAINER, "                lora_a = (math.sqrt(args.sigma) * a).to(torch.float16)\n"
                   "                lora_b = (math.sqrt(args.sigma / r) * b).to(torch.float16)\n",
          "                lora_a = (math.sqrt(args.sigma) * a).to(torch.float32)\n"
          "                lora_b = (math.sqrt(args.sigma / r) * b).to(torch.float32)\n")],
        "generate_local_adapters: the adapter factors kept and written in f32 instead of f16",
        "every run: the members are evaluated with B·A in f32, so every reward, the shaped fitnesses and the "
        "weights after the first update differ", EVERYTHING),
}

EQUIVALENTS = {
    # a reuse inside the loop: the odd member of a pair takes the even member's draw instead of redrawing it from
    # the same seed (the same values under torch's generator and under the hook's contract streams alike)
    "adapters-reuse-the-pair-draw": EggrollMutant(
        [(TRAINER, "        for m in population_indices:\n            tensors = {}\n",
          "        drawn = {}\n        for m in population_indices:\n            tensors = {}\n"),
         (TRAINER, """                a, b = get_rng_noise(args.base_seed, num_pairs, m // 2, num_layers, layer_idx, generation,
                                     [(r, in_dim), (out_dim, r)])
                lora_a""", """                if (m // 2, layer_idx) not in drawn:
                    drawn[m // 2, layer_idx] = get_rng_noise(args.base_seed, num_pairs, m // 2, num_layers, layer_idx,
                                                             generation, [(r, in_dim), (out_dim, r)])
                a, b = drawn[m // 2, layer_idx]
                lora_a""")],
        "generate_local_adapters: a pair's draw made once and reused for its odd member",
        "the same seed gives the same a, b: no bit changes"),
    "sign-on-a": EggrollMutant(
        [(TRAINER, _ADAPTER_SIGN, _ADAPTER_SIGN.replace("lora_b = -lora_b", "lora_a = -lora_a"))],
        "generate_local_adapters: the antithetic sign on A instead of B",
        "f16 negation is exact and B·A = (−B)·A = B·(−A): the members are evaluated with the same perturbation "
        "and the update (which redraws a, b) is untouched; only the factors' bits differ (a note, not a fail)",
        ("factors",)),
    "sign-inside-the-scale": EggrollMutant(
        [(TRAINER, "                lora_b = (math.sqrt(args.sigma / r) * b).to(torch.float16)\n" + _ADAPTER_SIGN,
          "                lora_b = (math.sqrt(args.sigma / r) * (b if m % 2 == 0 else -b)).to(torch.float16)\n")],
        "generate_local_adapters: b negated before the scaling and the f16 rounding, not after",
        "negation is exact and rounding to nearest is symmetric: the same f16 bits"),
    "chunk-not-capped": EggrollMutant(
        [(TRAINER, "            chunk = min(args.es_update_chunk_size, num_pairs)\n",
          "            chunk = args.es_update_chunk_size\n")],
        "apply_lora_es_update: an explicit chunk size not capped at P",
        "a chunk larger than P covers the same pairs in one chunk (the range stops at P)"),
    "one-generator-reseeded": EggrollMutant(
        [(TRAINER, "    generator = torch.Generator(device=\"cpu\")\n    generator.manual_seed(seed)\n",
          "    generator = _GENERATOR\n    generator.manual_seed(seed)\n"),
         (TRAINER, "\n\nclass WorkerExtension:", "\n\n_GENERATOR = torch.Generator(device=\"cpu\")\n\n\nclass WorkerExtension:")],
        "get_rng_noise: one module-level generator reseeded per call instead of a new one",
        "manual_seed rewinds a generator to the start of its stream (docs/references.md §3a), under torch's noise "
        "and the hook's alike"),
    "update-scalar-on-the-right": EggrollMutant(
        [(TRAINER, _LR, _LR.replace("delta * args.learning_rate", "args.learning_rate * delta"))],
        "apply_lora_es_update: lr · Δ instead of Δ · lr",
        "a Python float times a tensor is the same f32 multiply either side (commutative, one rounding)"),
}
