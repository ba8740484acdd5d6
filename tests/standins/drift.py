"""Drifted clones of the stand-ins: the changes real repositories show between releases (docs/parity.md,
"What a later commit does to a verdict").

Design record: a user clones a reference's newest commit, not the one its
driver was validated against (eggroll-vllm's HEAD adds a task class to its
entry script's imports, docs/references.md §8). `drifted_clone` copies a
stand-in into a git repository whose first commit is the stand-in as it
is (the "validated" commit), then commits each drift on top, one commit
per kind:

- `task-class`: a new task class in tasks.py, imported by the entry script at module level;
- `absent-import`: a new top-level import of a package no interpreter has (an optional feature
  whose default leaves it off);
- `cli-flag`: a new command-line flag / configuration field whose default changes nothing;
- `helper`: a new helper function nobody calls, and a new file nobody imports;
- `comments`: comments and blank lines, the code itself unchanged;
- hyperscale-es (JAX, a child of its own): `absent-import` (outside a `try`) and `guarded-import`
  (inside one) at the top of a noiser module, `option` (a new noiser option with a default and a new
  `init_noiser` keyword), `noiser-file` (a new noiser registered in noiser/__init__.py), `common-names`
  (models/common.py gains names), `moved-file` (a noiser module renamed, its import in noiser/__init__.py
  following it).

None of them may change a row's verdict, and the first screen must name
them (placeholders, the distance from the validated commit). BEHAVIOUR
holds, per stand-in, the other way: edits of one sign, one scale and one
written dtype, each of which must make a row fail on the drifted clone
too. Edits are (file, old, new) text replacements, each `old` occurring
exactly once (tests/standins/mutants.py's format). NOT_DRIVEN holds the
changes of a later commit that esverify cannot drive (what the driver reads
moved or was renamed): each must end its rows with one line, "esverify could
not drive this clone: ...", naming what the driver reads, never blaming the
reference and never a traceback.
"""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import NamedTuple

from standins.mutants import STANDINS

#: the module no interpreter has (a new optional dependency of a later commit)
ABSENT = "esverify_drift_optional_pkg"
EGG = "es_lora_multinode.py"
TRAINER = "es_at_scale/trainer/es_trainer.py"
WORKER = "es_at_scale/utils/worker_extension.py"
AWD_ES = "es.py"
AWD = "weight_update_utils.py"
SKILL = "es_finetuning_skill.py"


class Drift(NamedTuple):
    """One kind of change between releases: its edits, the files it adds ({relative path: text}) and the
    files it moves ({old relative path: new one}; moved before the edits are applied)."""
    edits: list
    files: dict = {}
    moves: dict = {}


_HELPER = ("def summarize_population(values):\n"
           "    \"\"\"Mean of a list of rewards (a later release's logging helper; nothing calls it).\"\"\"\n"
           "    return sum(values) / max(1, len(values))\n\n\n")
_HELPER_FILE = {"drift_utils.py": "\"\"\"A later release's helpers: nothing imports them.\"\"\"\n\n\n"
                                  "def format_reward(value):\n    return f\"{value:.4f}\"\n"}
_COMMENT = "# Copyright the authors. Reformatted for a later release; the code below is unchanged.\n\n"
_OPTIONAL = f"import {ABSENT}  # optional feature (off by default)\n"

#: stand-in folder -> {kind: Drift}; the target(s) each stand-in's rows run under are in TARGETS
DRIFTS = {
    "eggroll-vllm": {
        "task-class": Drift([(EGG, "from tasks import MathTask, CountdownTask, ZerosTask, RandomTask\n",
                              "from tasks import MathTask, CountdownTask, ZerosTask, RandomTask, SudokuTask\n"),
                             ("tasks.py", "\nclass ZerosTask:",
                              "\nclass SudokuTask:\n    \"\"\"A later release's task (not used by the default run).\"\"\"\n"
                              "\n    def __init__(self, *args, **kwargs):\n        self.args = args\n\n\n"
                              "class ZerosTask:")]),
        "absent-import": Drift([(EGG, "import weave\n", "import weave\n" + _OPTIONAL)]),
        "cli-flag": Drift([(EGG, "    resume_from: str = None\n",
                            "    resume_from: str = None\n    use_fast_sampler: bool = False\n"
                            "    sampler_log_dir: str = None\n")]),
        "helper": Drift([(EGG, "\ndef get_rng_noise(", "\n" + _HELPER + "def get_rng_noise(")], _HELPER_FILE),
        "comments": Drift([(EGG, "\nimport argparse\n", "\n" + _COMMENT + "import argparse\n")]),
    },
    "es-at-scale": {
        "absent-import": Drift([(TRAINER, "import functools\n", "import functools\n" + _OPTIONAL)]),
        "helper": Drift([(TRAINER, "\nclass ESNcclLLM(LLM):", "\n" + _HELPER + "class ESNcclLLM(LLM):")],
                        {"es_at_scale/utils/drift_utils.py": _HELPER_FILE["drift_utils.py"]}),
        "comments": Drift([(TRAINER, "\nimport gc\n", "\n" + _COMMENT + "import gc\n")]),
    },
    "es-awd": {
        "absent-import": Drift([(AWD_ES, "import wandb\n", "import wandb\n" + _OPTIONAL)]),
        "cli-flag": Drift([(AWD_ES, '    parser.add_argument("--eval_batch_size", type=int, default=512)\n',
                            '    parser.add_argument("--eval_batch_size", type=int, default=512)\n'
                            '    parser.add_argument("--log_every", type=int, default=1, help="a later release\'s '
                            'logging period")\n')]),
        "helper": Drift([(AWD_ES, "\ndef parse_args():", "\n" + _HELPER + "def parse_args():")], _HELPER_FILE),
        "comments": Drift([(AWD_ES, "\nimport argparse\n", "\n" + _COMMENT + "import argparse\n")]),
    },
    "skill-sample": {
        "absent-import": Drift([(SKILL, "import math\n", "import math\n" + _OPTIONAL)]),
        "helper": Drift([(SKILL, "\ndef is_correct(", "\n" + _HELPER + "def is_correct(")], _HELPER_FILE),
        "comments": Drift([(SKILL, "\nimport torch\n", "\n" + _COMMENT + "import torch\n")]),
    },
}

NOISER = "src/hyperscalees/noiser"
COMMON = "src/hyperscalees/models/common.py"
_LATER_NOISER = {f"{NOISER}/eggroll_plus.py": (
    "\"\"\"A later release's noiser (nothing the rows drive uses it).\"\"\"\n"
    "from .eggroll import EggRoll\n\n\n"
    "class EggRollPlus(EggRoll):\n"
    "    OPTIONS = {**EggRoll.OPTIONS, \"warmup_epochs\": 0}\n")}

DRIFTS["hyperscale-es"] = {
    "absent-import": Drift([(f"{NOISER}/eggroll.py", "import jax.numpy as jnp\n", "import jax.numpy as jnp\n"
                             + f"import {ABSENT} as chex  # optional: typed-array checks (off by default)\n")]),
    "guarded-import": Drift([(f"{NOISER}/open_es.py", "import jax.numpy as jnp\n",
                              "import jax.numpy as jnp\n\ntry:\n    import chex  # optional: shape checks\n"
                              "except ImportError:\n    chex = None\n")]),
    "option": Drift([(f"{NOISER}/eggroll.py", '"use_batched_update": False}',
                      '"use_batched_update": False, "fused_update": False}'),
                     (f"{NOISER}/base_noiser.py", "solver=None, solver_kwargs=None, **options):",
                      "solver=None, solver_kwargs=None, mesh=None, **options):")]),
    "noiser-file": Drift([(f"{NOISER}/__init__.py", "from .open_es import OpenES\n",
                           "from .open_es import OpenES\nfrom .eggroll_plus import EggRollPlus\n"),
                          (f"{NOISER}/__init__.py", "ALL_NOISERS = {", 'ALL_NOISERS = {"eggroll_plus": EggRollPlus, ')],
                         _LATER_NOISER),
    "common-names": Drift([(COMMON, "PARAM, MM_PARAM, EMB_PARAM, EXCLUDED = 0, 1, 2, 3\n",
                            "PARAM, MM_PARAM, EMB_PARAM, EXCLUDED = 0, 1, 2, 3\nLORA_PARAM = 4\n\n\n"
                            "def count_params(params):\n    \"\"\"A later release's helper (nothing calls it).\"\"\"\n"
                            "    return sum(x.size for x in jax.tree_util.tree_leaves(params))\n")]),
    "moved-file": Drift([(f"{NOISER}/__init__.py", "from .open_es import OpenES\n",
                          "from .openes_noiser import OpenES\n")],
                        moves={f"{NOISER}/open_es.py": f"{NOISER}/openes_noiser.py"}),
}

#: EggRoll's option `rank` renamed `lora_rank` where the noisers define and read it (AltEggRoll shares its factors)
_LORA_RANK = [(f"{NOISER}/eggroll.py", '"noise_reuse": 0, "rank": 1,', '"noise_reuse": 0, "lora_rank": 1,'),
              (f"{NOISER}/eggroll.py", '    r = frozen["rank"]\n', '    r = frozen["lora_rank"]\n'),
              (f"{NOISER}/alteggroll.py", '"noise_reuse": 0, "rank": 1}', '"noise_reuse": 0, "lora_rank": 1}'),
              (f"{NOISER}/alteggroll.py", 'jnp.sqrt(frozen["rank"])', 'jnp.sqrt(frozen["lora_rank"])')]

#: stand-in folder -> {kind: (Drift, the words of the one line its rows end with)}: later commits esverify cannot
#: drive, because what its driver reads moved or was renamed (each applied alone, on the stand-in)
NOT_DRIVEN = {
    "hyperscale-es": {
        # the parameter-tree helpers moved: the driver reads simple_es_tree_key and MM_PARAM there
        "moved-common": (Drift([(f"{NOISER}/base_noiser.py", "from ..models.common import",
                                 "from ..models.tree import")],
                               moves={COMMON: "src/hyperscalees/models/tree.py"}),
                         "it reads src/hyperscalees/models/common.py (simple_es_tree_key, MM_PARAM), "
                         "which this clone does not have"),
        # the noiser's registry name changed: the rows drive ALL_NOISERS["eggroll"]
        "renamed-noiser": (Drift([(f"{NOISER}/__init__.py", '"eggroll": EggRoll, ', '"egg_roll": EggRoll, ')]),
                           "it reads ALL_NOISERS['eggroll'] of src/hyperscalees/noiser/__init__.py, which has no "
                           "'eggroll'"),
        # an option the rows set was renamed: init_noiser refuses the keyword
        "renamed-option": (Drift(_LORA_RANK),
                           "init_noiser refused the keywords the driver passes"),
        # the same rename, by a noiser that keeps only the options it knows: a row would compare another
        # rank's values and blame the reference
        "ignored-option": (Drift([*_LORA_RANK,
                                  (f"{NOISER}/base_noiser.py", 'frozen = {"solver": tx, **cls.OPTIONS, **options}',
                                   'frozen = {"solver": tx, **cls.OPTIONS, '
                                   '**{k: v for k, v in options.items() if k in cls.OPTIONS}}'),
                                  (f"{NOISER}/base_noiser.py", "        if unknown:\n", "        if unknown and False:\n")]),
                           "EggRoll.init_noiser did not keep the options the driver passes (rank=2;"),
    },
}

#: stand-in folder -> (the target its rows run under, a --case pattern of a few rows that the BEHAVIOUR
#: edits reach, parity options of those rows)
TARGETS = {
    "eggroll-vllm": ("eggroll", "eggroll/cpu/f32/*", {}),
    # the training loops import the drifted entry files (single-operation rows import the worker only)
    "es-at-scale": ("es-at-scale", "es-at-scale/cpu/f32/iid/fit/N7", {"small": True}),
    "es-awd": ("es-awd", "es-awd/cpu/f32/iid/main/N7", {"small": True}),
    "skill-sample": ("skill-sample", "skill-sample/cpu/f32/correlated/es_train_loop/N5", {"small": True}),
    # shaping, OpenES's perturbation and the jitted rank-2 update, and (the noisers and tree updates added
    # since match the pattern too) the tree updates', EggRollBS's, AltEggRoll's and the sparse update's rows
    # of N 4 and 8: 17 rows on contract and native noise, whose verdicts a drifted clone must keep
    "hyperscale-es": ("hyperscale-es", "hyperscale-es/cpu/f32/correlated/*[gst]/N[348]*", {}),
}

#: stand-in folder -> a --case pattern narrower than TARGETS' for the runs whose assertions read only the
#: rows of a few ops (a BEHAVIOUR edit must fail one of them; the `ignored-option` change of NOT_DRIVEN is
#: asserted on them): hyperscale-es's shaping, OpenES's perturbation and the jitted rank-2 update on
#: contract and native noise, 5 rows of TARGETS' 17. Why: each row compiles its functions in the JAX child,
#: afresh for an edited clone (the compilation cache's key is the program), and the other 12 are most of
#: that. fnmatch has no alternation: the character classes spell the three ids position by position
#: (tests/test_drift.py checks what the pattern selects)
FEW_ROWS = {
    "hyperscale-es": "hyperscale-es/cpu/f32/correlated/[spu][ehp][adr][apt][itu][enr][-bg][-/j][Noi][3pt][/2e]*",
}

#: stand-in folder -> {"sign" | "scale" | "dtype": edits}: behaviour changes that must fail a row of TARGETS
#: (of FEW_ROWS, for a stand-in that has them)
BEHAVIOUR = {
    "eggroll-vllm": {
        "sign": [(EGG, "        pair_diffs = torch.from_numpy(fitnesses[0::2] - fitnesses[1::2]).to(torch.float32)\n",
                  "        pair_diffs = torch.from_numpy(fitnesses[1::2] - fitnesses[0::2]).to(torch.float32)\n")],
        "scale": [(EGG, "            delta = delta * args.learning_rate\n",
                   "            delta = delta * (2 * args.learning_rate)\n")],
        # the adapter files written in f32, not f16 (the stand-in engine serves what the file holds)
        "dtype": [(EGG, "                lora_a = (math.sqrt(args.sigma) * a).to(torch.float16)\n"
                        "                lora_b = (math.sqrt(args.sigma / r) * b).to(torch.float16)\n",
                   "                lora_a = (math.sqrt(args.sigma) * a).to(torch.float32)\n"
                   "                lora_b = (math.sqrt(args.sigma / r) * b).to(torch.float32)\n")],
    },
    "es-at-scale": {
        "sign": [(WORKER, "update.add_(noise.to(torch.float32) * coeff)", "update.sub_(noise.to(torch.float32) * coeff)")],
        "scale": [(WORKER, "update.mul_(alpha / population_size)", "update.mul_(2 * alpha / population_size)")],
        # the update written into the weights through bf16 instead of the parameter's dtype
        "dtype": [(WORKER, "param.data.add_(update.to(param.dtype))", "param.data.add_(update.to(torch.bfloat16))")],
    },
    "es-awd": {
        "sign": [(AWD, "            acc.add_(noise, alpha=coeff)\n        param.add_(acc, alpha=alpha / population_size)",
                  "            acc.add_(noise, alpha=-coeff)\n        param.add_(acc, alpha=alpha / population_size)")],
        "scale": [(AWD, "        param.add_(acc, alpha=alpha / population_size)\n",
                   "        param.add_(acc, alpha=2 * alpha / population_size)\n")],
        # the update's accumulator in f16 whatever the parameter's dtype
        "dtype": [(AWD, "acc = torch.zeros_like(param)", "acc = torch.zeros_like(param, dtype=torch.float16)")],
    },
    "skill-sample": {
        "sign": [(SKILL, "params_perturbed = params_current + sigma * noise", "params_perturbed = params_current - sigma * noise")],
        "scale": [(SKILL, "(lr / sigma) * torch.tensor(update", "(2 * lr / sigma) * torch.tensor(update")],
        # the update written in f16 whatever the parameters' dtype
        "dtype": [(SKILL, "torch.tensor(update, dtype=params_init.dtype)", "torch.tensor(update, dtype=torch.float16)")],
    },
    "hyperscale-es": {
        "sign": [(f"{NOISER}/base_noiser.py", "jnp.where(thread % 2 == 0, 1.0, -1.0)",
                  "jnp.where(thread % 2 == 0, -1.0, 1.0)")],
        "scale": [(f"{NOISER}/eggroll.py", 'dyn["sigma"] / jnp.sqrt(r)', 'dyn["sigma"] * jnp.sqrt(r)')],
        # the full-rank noise drawn in bf16 whatever the parameter's dtype
        "dtype": [(f"{NOISER}/base_noiser.py", "param.shape, dtype=param.dtype)", "param.shape, dtype=jnp.bfloat16)")],
    },
}


def _git(root: Path, *args) -> str:
    return subprocess.run(["git", "-C", str(root), "-c", "user.name=t", "-c", "user.email=t@example.org", *args],
                          check=True, capture_output=True, text=True).stdout.strip()


def apply_edits(root: Path, edits) -> None:
    """Apply (file, old, new) edits under `root` in order; AssertionError when an `old` is not there once."""
    for rel, old, new in edits:
        path = Path(root) / rel
        text = path.read_text()
        assert text.count(old) == 1, f"{rel}: the edit's anchor occurs {text.count(old)} times, want 1: {old!r}"
        path.write_text(text.replace(old, new))


def drifted_clone(tmp, standin: str, kinds=None, behaviour: str | None = None) -> tuple[Path, str]:
    """(clone root, the commit of the unedited stand-in) of a git clone under `tmp`: the stand-in `standin`
    committed as it is, then one commit per drift kind (`kinds`, default every kind of DRIFTS[standin]; a
    kind of NOT_DRIVEN[standin] may be named too), then
    with `behaviour` ("sign", "scale" or "dtype") one more commit holding that BEHAVIOUR edit."""
    root = Path(tmp) / standin
    shutil.copytree(STANDINS / standin, root, ignore=shutil.ignore_patterns("__pycache__"))
    _git(root, "init", "-q")
    _git(root, "add", "-A")
    _git(root, "commit", "-qm", "the validated commit (the stand-in as it is)")
    base = _git(root, "rev-parse", "HEAD")
    for kind in kinds if kinds is not None else DRIFTS[standin]:
        drift = DRIFTS[standin][kind] if kind in DRIFTS[standin] else NOT_DRIVEN[standin][kind][0]
        for old, new in drift.moves.items():
            _git(root, "mv", old, new)
        apply_edits(root, drift.edits)
        for rel, text in drift.files.items():
            (root / rel).write_text(text)
        _git(root, "add", "-A")
        _git(root, "commit", "-qm", f"drift: {kind}")
    if behaviour is not None:
        apply_edits(root, BEHAVIOUR[standin][behaviour])
        _git(root, "commit", "-qam", f"behaviour: {behaviour}")
    return root, base
