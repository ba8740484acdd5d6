"""The hyperscale-es spec: HyperscaleES's noisers, driven in a JAX child (docs/hyperscale.md §10).

Design record: a `ReferenceSpec` (esverify.oracle.spec), from which the core builds its adapter.
The reference is JAX code, so none of the core's torch paths apply; every row is its own (`run_row`,
in .rows): the child (child/driver.py, under the reference's interpreter, which has jax, jaxlib and
optax: `--python hyperscale-es=PATH`) runs the noisers' class methods on values the row chooses,
our numpy model (.shaping, .noise, .update) computes the same, and the core judges the comparison
(esverify.oracle.verdict). Rows:

- shaping, shaping-grouped: `convert_fitnesses` (eager f32) with group size 0 and 4;
- perturb-eggroll (rank 1), perturb-openes: each thread's perturbed parameter in the forward
  pass, f32/f16/bf16;
- update-jit, update-eager (rank 2, N 8), update-jit-r1, update-eager-r1 (rank 1, N 16): one
  EggRoll sgd update of an (8, 5) leaf, f32/f16/bf16, jitted and eager;
- tree-sgd-jit, tree-sgd-eager, tree-adamw-jit, tree-adamw-eager (.rows_tree): two updates of a tree
  with a matrix, a bias, an EXCLUDED and a scanned leaf, sgd or adamw, f32, N 4, rank 4;
- loop-e2e (a loop op, .rows_loop): the clone's own tests/end_to_end_test.py in the child, every update
  replayed by our model (.loop_e2e: adamw, matrix and bias leaves), native noise, f32, once.
- noise-sparse, noise-alteggroll, noise-eggrollbs, eggrollbs-defaults, sparse-batch, update-alteggroll-jit/-eager,
  update-sparse-jit/-eager (.rows_noisers, ops in .noiser_ops): the other noisers' perturbations, updates
  and documented defects.

Each row runs on contract noise (the child's `jax.random.normal` served from the RNG contract,
.contract, through a host callback that refuses a key it cannot attribute) and on native noise
(JAX's own draws against our model of them: such a row holds for that jaxlib and that CPU's
instruction set). Every row's detail ends with jax, jaxlib, the CPU's FMA and XLA_FLAGS.
The scheme does not apply (one stream per (epoch, pair, leaf)): the rows run in one scheme cell.
"""
from __future__ import annotations

from pathlib import Path

from esverify.oracle.spec import CloneSpec, OpsSpec, OurSide, ReferenceSpec, ReportTexts

from . import noiser_ops

#: op -> (rank, population) of the update rows: K = N*r = 16 over an (8, 5) leaf, a dot whose order XLA's
#: CPU kernel was measured to take (four accumulators; docs/hyperscale.md §8)
UPDATES = {"update-jit": (2, 8), "update-eager": (2, 8), "update-jit-r1": (1, 16), "update-eager-r1": (1, 16)}
#: op -> group size of the shaping rows
SHAPINGS = {"shaping": 0, "shaping-grouped": 4}
#: op -> the noiser whose forward perturbation the row checks
PERTURBS = {"perturb-eggroll": "eggroll", "perturb-openes": "open_es"}
#: op -> solver of the tree rows (.rows_tree: several leaves, a scanned one, an excluded one; f32, N 4, 2 steps)
TREES = {"tree-sgd-jit": "sgd", "tree-sgd-eager": "sgd", "tree-adamw-jit": "adamw", "tree-adamw-eager": "adamw"}
OPS = (*SHAPINGS, *PERTURBS, *UPDATES, *TREES, *noiser_ops.OPS)
#: the end-to-end test as a loop row (.rows_loop): native noise, f32, once
LOOPS = ("loop-e2e",)
NAME = "hyperscale-es"


def cases(matrix, cell) -> None:
    """The rows of one cell: CPU only, one scheme cell (one stream per (epoch, pair, leaf): the scheme does not
    apply), no mixed set; shaping once, in f32 under contract noise (it draws none)."""
    if cell.device != "cpu" or cell.dtype == "mixed" or cell.scheme != cell.shape_scheme:
        return
    if cell.dtype == "f32" and cell.noise == "contract":
        for op in SHAPINGS:
            cell.add(op, 32)
    for op in PERTURBS:
        cell.add(op, 4)
    for op, (_, n) in UPDATES.items():
        cell.add(op, n)
    if cell.dtype == "f32":
        for op in TREES:
            cell.add(op, 4)
    noiser_ops.cases(cell)           # sparse, AltEggRoll, EggRollBS (.rows_noisers)
    if cell.dtype == "f32" and cell.noise == "native":
        for op in LOOPS:
            cell.add(op, 64)      # the test's own 64 threads (the row reads them from the child)


def run_row(session, case):
    """The Outcome of row `case` (.rows; the core's comparison and torch are imported when a row runs)."""
    from . import rows
    if case.op in LOOPS:
        from . import rows_loop
        return rows_loop.e2e_row(session, case)
    if case.op in TREES:
        from . import rows_tree
        return rows_tree.tree_row(session, case, TREES[case.op])
    if case.op in noiser_ops.OPS:
        from . import rows_noisers
        return rows_noisers.run_row(session, case)
    if case.op in SHAPINGS:
        return rows.shaping_row(session, case, SHAPINGS[case.op])
    if case.op in PERTURBS:
        return rows.perturb_row(session, case, PERTURBS[case.op])
    return rows.update_row(session, case, *UPDATES[case.op])


ADAPTER = ReferenceSpec(
    name=NAME,
    clone=CloneSpec(
        files={"noiser": "src/hyperscalees/noiser/__init__.py", "eggroll": "src/hyperscalees/noiser/eggroll.py",
               "common": "src/hyperscalees/models/common.py"},
        needs={"shaping": "noiser", "perturb": "noiser", "update": "noiser", "noise": "noiser", "sparse": "noiser",
               "eggrollbs": "noiser", "tree": "noiser", "loop": "noiser"},
        licence="LICENSE", validated_commit="b77f7d6", env_var="ESVERIFY_HYPERSCALE_REF",
        default_path="refs/HyperscaleES", identifying=("noiser", "eggroll"),
        # child/driver.py speaks the child protocol itself: a user's JAX environment needs no torch
        child_needs=("jax", "jaxlib", "optax", "numpy"), standalone_child=True),
    ops=OpsSpec(single=OPS, loops=LOOPS),
    driver=str(Path(__file__).with_name("child") / "driver.py"),
    profile=NAME,
    texts=ReportTexts(
        native="JAX's threefry",
        summary="hyperscale-es: HyperscaleES's noisers (EggRoll, OpenES, sparse, AltEggRoll, EggRollBS) in JAX: "
                "shaping, perturbation, update",
        findings={
            "compilation-cache": "the end-to-end test points JAX's persistent compilation cache at "
                                 "HF_HOME/hyperscaleescomp with no size or time threshold: every compiled program "
                                 "is written into the user's Hugging Face folder",
            "excluded-decay": "with adamw (the end-to-end test's solver) weight decay moves EXCLUDED leaves, whose "
                              "gradient is zero: they are excluded from the estimate, not from the optimiser",
            "pvary-gone": "the LLM loop's generation builder (llm_experiments/utils.py) calls jax.lax.pvary, which "
                          "jax 0.10 removed: under the child's jax the loop fails at trace time (the loop itself is "
                          "not run: this is the child's jax, probed)",
            "frozen-noise": "noise_reuse 0 (every noiser's default, and the end-to-end test's) draws epoch 0's "
                            "noise in every epoch: the perturbations never change",
            "grouped-shaping": "group_size > 0 centres each group on its own mean but divides by the spread of "
                               "all N raw scores (mixed statistics)",
            "trace-print": "do_updates prints 'LORA UPDATE' with the factors' shapes at trace time: once per "
                           "matrix leaf per compilation, never per step",
            "eggrollbs-defaults": "EggRollBS at its defaults (group_size 0, noise_reuse 0) is unusable: every "
                                  "thread's noise is zero, convert_fitnesses raises ZeroDivisionError, and so does "
                                  "do_mm with a Python-int epoch (both branches of the epoch select run)",
            "eggrollbs-groups": "EggRollBS gives zero noise to threads whose index mod group_size is 0 or 1, and "
                                "its convert_fitnesses returns G values (the mean over groups), not N: do_updates "
                                "fails for more than one group",
            "sparse-batch": "the sparse noiser's do_mm indexes the input's first axis: right for one input "
                            "vector, a broadcasting error or silently wrong values for a batch",
            "sparse-options": "the sparse noiser accepts rank and drops it, stores q_multiplier and never reads "
                              "it, and its import appends a folder that does not exist to sys.path",
            "bf16-noise": "bf16 normals take at most 128 distinct values (jax draws 8 random bits per bf16 "
                          "uniform)",
        },
        paths=(
            ("fitness shaping over all N scores (group size 0)", "op shaping", ("*/shaping/*",)),
            ("fitness shaping per group (group size 4)", "op shaping-grouped", ("*/shaping-grouped/*",)),
            ("EggRoll's low-rank perturbation in the forward pass", "op perturb-eggroll", ("*/perturb-eggroll/*",)),
            ("OpenES's full-rank perturbation", "op perturb-openes", ("*/perturb-openes/*",)),
            ("the jitted update, rank > 1", "op update-jit", ("*/update-jit/*",)),
            ("the eager update, rank > 1", "op update-eager", ("*/update-eager/*",)),
            ("the rank-1 update (jitted and eager)", "ops update-jit-r1, update-eager-r1",
             ("*/update-jit-r1/*", "*/update-eager-r1/*")),
            ("half precision (f16 and bf16) parameters", "dtypes f16, bf16", ("*/cpu/f16/*", "*/cpu/bf16/*")),
            ("contract noise through the host callback", "noise contract",
             ("*/perturb-*/N[0-9]", "*/update-*/N[0-9]", "*/update-*/N[0-9][0-9]")),
            ("JAX's own noise (threefry, erf_inv)", "noise native", ("*/native",)),
            ("the sparse noiser's forward pass: positions (JAX's uniform) and values", "op noise-sparse",
             ("*/noise-sparse/*",)),
            ("AltEggRoll's low-rank perturbation", "op noise-alteggroll", ("*/noise-alteggroll/*",)),
            ("EggRollBS's masked perturbation and its shaping (two groups)", "op noise-eggrollbs",
             ("*/noise-eggrollbs/*",)),
            ("EggRollBS at its defaults", "op eggrollbs-defaults", ("*/eggrollbs-defaults/*",)),
            ("the sparse do_mm on a batch", "op sparse-batch", ("*/sparse-batch/*",)),
            ("AltEggRoll's sign update (jitted and eager)", "ops update-alteggroll-jit, update-alteggroll-eager",
             ("*/update-alteggroll-*",)),
            ("the sparse noiser's update (jitted and eager)", "ops update-sparse-jit, update-sparse-eager",
             ("*/update-sparse-*",)),
            ("a tree update with sgd: matrix, bias, excluded and scanned leaves (jitted and eager)",
             "ops tree-sgd-jit, tree-sgd-eager", ("*/tree-sgd-*",)),
            ("a tree update with adamw, two steps (weight decay on the excluded leaf)",
             "ops tree-adamw-jit, tree-adamw-eager", ("*/tree-adamw-*",)),
            ("the end-to-end test, replayed update by update (adamw, several leaves)", "op loop-e2e",
             ("*/loop-e2e/*",)),
        ),
        computes={"shaping": ["src/hyperscalees/noiser/eggroll.py::EggRoll.convert_fitnesses"],
                  "perturb-eggroll": ["src/hyperscalees/noiser/eggroll.py::EggRoll.do_mm"],
                  "perturb-openes": ["src/hyperscalees/noiser/open_es.py::OpenES.get_noisy_standard"],
                  "update": ["src/hyperscalees/noiser/eggroll.py::EggRoll.do_updates"],
                  "noise-sparse": ["src/hyperscalees/noiser/sparse.py::Sparse.do_mm"],
                  "noise-alteggroll": ["src/hyperscalees/noiser/alteggroll.py::AltEggRoll.do_mm"],
                  "noise-eggrollbs": ["src/hyperscalees/noiser/eggrollbs.py::EggRollBS.do_mm",
                                      "src/hyperscalees/noiser/eggrollbs.py::EggRollBS.convert_fitnesses"],
                  "eggrollbs-defaults": ["src/hyperscalees/noiser/eggrollbs.py::EggRollBS.do_mm",
                                         "src/hyperscalees/noiser/eggrollbs.py::EggRollBS.convert_fitnesses"],
                  "sparse-batch": ["src/hyperscalees/noiser/sparse.py::Sparse.do_mm"],
                  **{f"update-alteggroll-{m}": ["src/hyperscalees/noiser/alteggroll.py::AltEggRoll.do_updates"]
                     for m in ("jit", "eager")},
                  **{f"update-sparse-{m}": ["src/hyperscalees/noiser/sparse.py::Sparse.do_updates"]
                     for m in ("jit", "eager")},
                  "tree": ["src/hyperscalees/noiser/eggroll.py::EggRoll.do_updates",
                           "src/hyperscalees/models/common.py::simple_es_tree_key"],
                  "loop-e2e": ["src/hyperscalees/noiser/eggroll.py::EggRoll.convert_fitnesses",
                               "src/hyperscalees/noiser/eggroll.py::EggRoll.do_updates",
                               "src/hyperscalees/noiser/eggroll.py::EggRoll.do_mm",
                               "src/hyperscalees/noiser/eggroll.py::EggRoll.get_noisy_standard"]},
        never_checked=(
            ("the LLM loop", "no row runs llm_experiments: the child's jax is probed for jax.lax.pvary (pvary-gone), "
                             "the loop itself is not run"),
            ("GPU and other CPUs", "XLA's CPU arithmetic of this host only; native rows hold for its jaxlib and "
                                   "instruction set"),
        )),
    cases=cases,
    ours=OurSide(rule=lambda device: ""),   # no torch profile rule: the rows' arithmetic is XLA's, in numpy
    run_row=run_row,
)
