"""Variants of the stand-in clones: reference-side mutants and bad-input fixtures.

Each variant is a copy of a stand-in clone (tests/standins/es-at-scale or
tests/standins/es-awd) with ONE detail edited: a list of (file, old, new)
text replacements, each `old` occurring exactly once. Building them at
test time keeps every file in the tree valid Python 3.11 (the 3.12-only
f-string fixture exists only in a temporary folder).

MUTANTS is the mutation catalog: single-detail edits of
four kinds (hook: generator use; masking: bugs a fixed case parameter
would hide; numerics; accounting: what a row's draws show), each with the
rows it runs on and the status each must get. EQUIVALENTS compute the same
bits by other means and must pass. BAD_INPUTS are broken clones a parity
run must report clearly. (Loop mutants live in loop_mutants.py.)
"""
from __future__ import annotations

import atexit
import re
import shutil
import subprocess
import tempfile
import textwrap
from pathlib import Path

import numpy

STANDINS = Path(__file__).resolve().parent
WORKER = "es_at_scale/utils/worker_extension.py"
SHAPING = "es_at_scale/utils/reward_shaping.py"
AWD = "weight_update_utils.py"

from typing import NamedTuple


class Mutant(NamedTuple):
    """One single-detail edit of a stand-in clone and what parity must say about it.

    run: Options overrides that pick the rows it needs (dtypes, schemes, noises, case pattern);
    expect: [(fnmatch pattern on the case id, status)], first match wins, every other row passes;
    or a rule case -> status on the case's own parameters (esverify.oracle.cases.Case);
    diagnosis: a diagnosis name every non-pass row must carry ('' for none);
    kind: hook (generator use), masking (fixed case parameters), numerics, accounting (draws)."""
    target: str
    edits: list
    what: str
    kind: str
    run: dict
    expect: list
    diagnosis: str = ""


#: the worker's noise draw (unindented); perturb, restore and update each write it out (docs/references.md §1)
_DRAW = ("generator = torch.Generator(device=param.device)\n"
         "generator.manual_seed(seed)\n"
         "noise = torch.randn(param.shape, dtype=param.dtype, device=param.device, generator=generator)")
_RANDN = "noise = torch.randn(param.shape, dtype=param.dtype, device=param.device, generator=generator)"
#: where each draw sits: its indent and the line after it (which makes the anchor unique)
_DRAW_SITES = {"perturb": (12, "param.data.add_(scale * noise)"),
               "restore": (12, "param.data.add_(-sigma * noise)"),
               "update": (16, "update.add_(noise.to(torch.float32) * coeff)")}


def _draw_at(site: str, draw: str = _DRAW) -> str:
    """The draw of method `site` (or `draw` in its place), indented as there, with the line after it."""
    pad, after = _DRAW_SITES[site]
    return textwrap.indent(draw, " " * pad) + "\n" + " " * pad + after


def _each_draw(draw: str, sites=("perturb", "restore", "update")) -> list:
    """One edit per method that draws noise, each replacing its draw by `draw`: the same edit the former
    shared helper took in one place."""
    return [(WORKER, _draw_at(site), _draw_at(site, draw)) for site in sites]


_UPDATE_LOOP = """        for name, param in self.model_runner.model.named_parameters():
            update = torch.zeros(param.shape, dtype=torch.float32, device=param.device)"""
_UPDATE_ADD = "update.add_(noise.to(torch.float32) * coeff)"
_UPDATE_SCALE = "update.mul_(alpha / population_size)"
_UPDATE_SEEDS = "            for seed, coeff in zip(seeds, coeffs):"
_PERTURB_FOR = "        for name, param in self.model_runner.model.named_parameters():"
_PERTURB_LOOP = _PERTURB_FOR + "\n" + _draw_at("perturb")
_ZSCORE = "perf[\"norm_reward\"] = (perf[\"avg_reward\"] - mean_reward) / (std_reward + 1e-8)"
_AWD_GEN = """    generator = torch.Generator(device=device)
    generator.manual_seed(seed)
    return torch.randn(shape, dtype=dtype, device=device, generator=generator)"""
_AWD_KEY = "key = (seed, str(param.device), param.dtype, tuple(param.shape))"
_AWD_APPLY = "        param.add_(acc, alpha=alpha / population_size)\n"
_AWD_PERTURB = "param.add_(noise, alpha=scale)"


#: a draw reused within a call per (seed, element count, dtype, device), reshaped (needs `_cache = {}` per call)
_REUSED_DRAW = """key = (seed, param.numel(), param.dtype, str(param.device))
if key not in _cache:
    generator = torch.Generator(device=param.device)
    generator.manual_seed(seed)
    _cache[key] = torch.randn(param.shape, dtype=param.dtype, device=param.device, generator=generator)
noise = _cache[key].reshape(param.shape)"""


def _awd_each_key(new_key: str) -> list:
    """The noise cache key edited in both places that cache (apply, 12 spaces in; update, 16 in)."""
    return [(AWD, "\n" + " " * pad + _AWD_KEY, "\n" + " " * pad + new_key) for pad in (12, 16)]
_AWD_L1 = "delta = torch.sign(delta) * torch.clamp(delta.abs() - step, min=0)"
_AWD_STEP = "step = alpha * weight_decay_lambda"

A, W = "es-at-scale", "es-awd"


def _f32(x) -> float:
    return float(numpy.float32(x))


def _lambda_f32_shows(case) -> str:
    """alpha * lambda rounded through f32 moves l1's f32 threshold by an ulp where it rounds otherwise."""
    step = _f32(_f32(case.alpha) * _f32(case.lam))
    return "fail" if case.lam and step != _f32(case.alpha * case.lam) else "pass"


def _alpha_over_n_f32_shows(case) -> str:
    """rd32(rd32(alpha) / N) differs from rd32(alpha / N) for some alphas; bf16 rounding hides one ulp."""
    differs = _f32(_f32(case.alpha) / case.population) != _f32(case.alpha / case.population)
    return "fail" if differs and case.dtype != "bf16" else "pass"

def _zscore_differs(variant):
    """A rule for a z_score mutant: fail where `variant(r - mean, std)` gives other bits than
    (r - mean) / (std + 1e-8) on the case's own rewards (few distinct values, as sparse 0/1 or tied
    rewards have, or all-equal ones, may give the same bits: then the row rightly passes)."""
    def rule(case) -> str:
        from esverify.oracle.nonfinite import zscore
        from esverify.oracle.ours import case_rewards
        r = case_rewards(42, case.population, case.rewards)    # the catalog runs with the default --seed
        _, mean, std = zscore(r)    # numpy's mean and std, as the parent hands them (NaN ones included)
        same = all(numpy.float64(variant(float(x) - mean, std)).tobytes()
                   == numpy.float64((float(x) - mean) / (std + 1e-8)).tobytes() for x in r)
        return "pass" if same else "fail"
    return rule


ALL = [("*", "fail")]
#: a NaN coefficient (the `nan` and `inf` reward populations: the mean or the std is NaN) makes every weight NaN
#: whatever the noise or the scaling: an update fault of those shows on the finite populations only
NAN_HIDES = [("*/nan", "pass"), ("*/inf", "pass")]
#: an update fault on zero coefficients (all-equal rewards): the update is the identity either way
ZERO_COEFFS_HIDE = [("*/equal", "pass"), *NAN_HIDES, ("*", "fail")]
#: an f32 accumulator change of a few ulps: the final bf16 rounding hides it in the small sets
BF16_HIDES = [("*/bf16/*", "pass"), ("*", "fail")]
#: a change that is the identity on f32 tensors (a cast to f32, an f32 accumulator)
F32_SAME = [("*/f32/*", "pass"), ("*", "fail")]
PERTURB = {"dtypes": ("f32",), "case": "*/perturb/*"}
RESTORE = {"dtypes": ("f32",), "case": "*/restore/*"}
UPDATE = {"dtypes": ("f32", "bf16"), "case": "*/update/N7*"}
PAPER = {"dtypes": ("f32",), "case": "*/update/N30*"}
AWD_UPDATE = {"dtypes": ("f32", "bf16"), "case": "*/update-none/N7*"}
ZSCORE = {"case": "*/zscore/*", "noises": ("contract",)}

#: the update rows of the reward populations (the sweep set; with f32 alone, f32), NaN and infinity included
POPULATIONS_UPDATE = {"dtypes": ("f32",), "case": "*/update/N30/*"}
AWD_POPULATIONS_UPDATE = {"dtypes": ("f32",), "case": "*/update-none/N30/*"}
#: a change of what happens to non-finite coefficients only: the `nan` and `inf` rows fail, every finite one passes
NONFINITE_ONLY = [("*/nan", "fail"), ("*/inf", "fail")]
_FINITE_OR_ZERO = "coeff = coeff if abs(coeff) < float(\"inf\") else 0.0   # NaN and +-inf to zero"

MUTANTS = {
    # ---- rewards that are not finite: identical for finite coefficients, different otherwise
    "update-nonfinite-coeff-zero": Mutant(A, [(WORKER, _UPDATE_SEEDS, _UPDATE_SEEDS + "\n                " + _FINITE_OR_ZERO)],
        "update maps a NaN or infinite coefficient to zero", "rewards", POPULATIONS_UPDATE, NONFINITE_ONLY),
    "awd-update-nonfinite-coeff-zero": Mutant(W, [(AWD, "        for seed, coeff in zip(seeds, coeffs):",
                                                   "        for seed, coeff in zip(seeds, coeffs):\n            "
                                                   + _FINITE_OR_ZERO)],
        "es-awd's update maps a NaN or infinite coefficient to zero", "rewards", AWD_POPULATIONS_UPDATE,
        NONFINITE_ONLY),
    # ---- hook: how the reference uses its generators (docs/references.md §3a)
    "generator-cached-not-reseeded": Mutant(A, _each_draw("""cache = self.__dict__.setdefault("_generators", {})
if seed not in cache:
    cache[seed] = torch.Generator(device=param.device)
    cache[seed].manual_seed(seed)
noise = torch.randn(param.shape, dtype=param.dtype, device=param.device, generator=cache[seed])"""),
        "one generator per seed, cached across tensors and calls, never reseeded", "hook", PERTURB, ALL, "advanced"),
    "generator-shared-in-update": Mutant(A, [(WORKER, _draw_at("update"), _draw_at("update", """noise = torch.randn(param.shape, dtype=param.dtype, device=param.device, generator=gens.setdefault(seed, torch.Generator(device=param.device).manual_seed(seed)))""")),
                                             (WORKER, _UPDATE_LOOP, "        gens = {}\n" + _UPDATE_LOOP)],
        "update seeds one generator per seed and reuses it for every tensor", "hook", PAPER, ZERO_COEFFS_HIDE,
        "advanced"),
    "generator-module-cache": Mutant(A, [(WORKER, "class WorkerExtension:", "_GENERATORS = {}\n\n\nclass WorkerExtension:"),
                                         *_each_draw("""key = (str(param.device), seed)
if key not in _GENERATORS:
    _GENERATORS[key] = torch.Generator(device=param.device).manual_seed(seed)
noise = torch.randn(param.shape, dtype=param.dtype, device=param.device, generator=_GENERATORS[key])""")],
        "a module-level generator cache keyed by (device, seed), never reseeded", "hook", RESTORE, ALL, "advanced"),
    "default-generator": Mutant(A, _each_draw("""noise = torch.randn(param.shape, dtype=param.dtype, device=param.device, generator=torch.default_generator)"""),
        "draws on torch's default generator (seeded once per call by torch.manual_seed)", "hook", PERTURB, ALL,
        "advanced"),
    "generator-other-device": Mutant(A, _each_draw(_DRAW.replace("generator = torch.Generator(device=param.device)",
                                          "generator = torch.Generator(device='cuda' if param.device.type == 'cpu' else 'cpu')")),
        "the generator is made on another device than the tensor's", "hook", PERTURB, [("*", "error")]),
    "noise-f32-then-cast": Mutant(A, _each_draw(_DRAW.replace(_RANDN,
                                       "noise = torch.randn(param.shape, dtype=torch.float32, device=param.device, generator=generator).to(param.dtype)")),
        "noise drawn in f32 and cast, instead of drawn in the parameter dtype (native noise shows it)", "hook",
        {"dtypes": ("f32", "bf16"), "case": "*/perturb/*"}, [("*/bf16/*/native", "fail"), ("*/mixed/*/native*", "fail")]),
    "no-generator": Mutant(A, _each_draw(_DRAW.replace("device=param.device, generator=generator)", "device=param.device)")),
        "noise drawn from torch's global generator (no generator passed): refused under contract noise; under "
        "native noise torch draws it and the values differ", "hook", PERTURB, [("*/native*", "fail"), ("*", "error")]),
    "seed-plus-slot": Mutant(A, [(WORKER, _PERTURB_LOOP, _PERTURB_LOOP.replace(
        _PERTURB_FOR, "        for index, (name, param) in enumerate(self.model_runner.model.named_parameters()):").replace(
        "generator.manual_seed(seed)", "generator.manual_seed(seed + index)"))],
        "perturb seeds each tensor with seed + slot index", "hook", PERTURB, [("*/native*", "fail"), ("*", "error")]),
    "awd-generator-cached": Mutant(W, [(AWD, _AWD_GEN, """    key = (str(device), seed)
    if key not in _GENERATORS:
        _GENERATORS[key] = torch.Generator(device=device).manual_seed(seed)
    return torch.randn(shape, dtype=dtype, device=device, generator=_GENERATORS[key])"""),
                                       (AWD, "def generate_noise(", "_GENERATORS = {}\n\n\ndef generate_noise(")],
        "es-awd caches one generator per (device, seed) and never reseeds it", "hook",
        {"dtypes": ("f32",), "case": "*/perturb/*"}, ALL, "advanced"),
    "awd-no-generator": Mutant(W, [(AWD, "device=device, generator=generator)", "device=device)")],
        "es-awd draws from torch's global generator", "hook", {"dtypes": ("f32",), "case": "*/perturb/*"},
        [("*/native*", "fail"), ("*", "error")]),
    # ---- masking: bugs a fixed case parameter would hide
    "sigma-constant": Mutant(A, [(WORKER, "scale = -noise_scale if negate else noise_scale",
                                  "scale = -0.001 if negate else 0.001")],
        "perturb uses the paper's sigma instead of its argument", "masking", PERTURB, ALL),
    "alpha-constant": Mutant(A, [(WORKER, _UPDATE_SCALE, "update.mul_(0.0005 / population_size)")],
        "update uses the paper's alpha instead of its argument (the paper's row cannot see it)", "masking",
        PAPER, [("*/paper", "pass"), ("*/equal", "pass"), *NAN_HIDES, ("*", "fail")]),
    "seeds-sorted": Mutant(A, [(WORKER, _UPDATE_SEEDS, "            for seed, coeff in zip(sorted(seeds), coeffs):")],
        "seeds sorted, coefficients left in order", "masking", UPDATE, ALL),
    "skip-bias": Mutant(A, [(WORKER, _PERTURB_LOOP, _PERTURB_LOOP.replace(
        "            generator = torch.Generator",
        "            if name.endswith(\"bias\"):\n                continue\n            generator = torch.Generator"))],
        "perturb skips parameters whose name ends in bias", "masking", PERTURB, ALL, "skip"),
    "skip-lm-head-update": Mutant(A, [(WORKER, _UPDATE_LOOP, _UPDATE_LOOP.replace(
        "            update = torch.zeros", "            if name.startswith(\"lm_head\"):\n                continue\n            update = torch.zeros"))],
        "update skips lm_head.weight (tied to the embedding in many models; in the `layers` set it is tied, "
        "so no slot of its own, and skipping the name changes nothing)", "masking", UPDATE,
        [("*/layers", "pass"), ("*", "fail")], "skip"),
    "zscore-reciprocal": Mutant(A, [(SHAPING, _ZSCORE, _ZSCORE.replace("/ (std_reward + 1e-8)", "* (1 / (std_reward + 1e-8))"))],
        "z-score multiplies by 1/(std+eps) instead of dividing", "masking", ZSCORE,
        _zscore_differs(lambda d, s: d * (1 / (s + 1e-8)))),
    "awd-lambda-f32": Mutant(W, [(AWD, _AWD_STEP, "step = float(torch.tensor(alpha, dtype=torch.float32) * weight_decay_lambda)")],
        "decay step alpha * lambda computed in f32 (exact when lambda is a power of two)", "masking",
        {"dtypes": ("f32",), "case": "*-l1/*"}, _lambda_f32_shows),
    "awd-divide-by-len-seeds": Mutant(W, [(AWD, _AWD_APPLY, "        param.add_(acc, alpha=alpha / len(seeds))\n")],
        "es-awd divides by len(seeds): N/2 with mirrored pairs", "masking",
        {"dtypes": ("f32",), "case": "*/f32/*/*/N*", "schemes": ("correlated",), "noises": ("contract",)},
        [("*/mirrored/*", "fail")]),
    "awd-skip-0dim": Mutant(W, [(AWD, "    for param in parameters:\n        if caching:",
                                 "    for param in parameters:\n        if param.dim() == 0:\n            continue\n        if caching:")],
        "es-awd perturb skips 0-dim tensors", "masking", {"dtypes": ("f32",), "case": "*/perturb/*"}, ALL, "skip"),
    # ---- numerics: where a rounding happens
    "fma-update": Mutant(A, [(WORKER, _UPDATE_ADD, "update.add_(noise.to(torch.float32), alpha=coeff)")],
        "fused multiply-add in the update accumulation", "numerics", UPDATE, BF16_HIDES),
    "acc-in-param-dtype": Mutant(A, [(WORKER, _UPDATE_LOOP, _UPDATE_LOOP.replace("dtype=torch.float32, device", "dtype=param.dtype, device"))],
        "update accumulator in the parameter dtype instead of f32", "numerics", UPDATE, F32_SAME),
    "divide-by-sigma": Mutant(A, [(WORKER, _UPDATE_SCALE, "update.mul_(alpha / population_size / 0.001)")],
        "update divided by sigma (0.001)", "numerics", UPDATE, ALL),
    "alpha-over-n-in-f32": Mutant(A, [(WORKER, _UPDATE_SCALE, "update.mul_(torch.tensor(alpha, dtype=torch.float32) / population_size)")],
        "alpha / N divided in f32 after rounding alpha", "numerics",
        {"dtypes": ("f32", "bf16"), "case": "*/update/N*", "noises": ("contract",)}, _alpha_over_n_f32_shows),
    "per-term-scaling": Mutant(A, [(WORKER, _UPDATE_ADD, "update.add_(noise.to(torch.float32) * (coeff * alpha / population_size))"),
                                   (WORKER, _UPDATE_SCALE, "pass")],
        "alpha / N applied to each term instead of once", "numerics", UPDATE, BF16_HIDES),
    "noise-in-f32": Mutant(A, [(WORKER, _draw_at("update"), _draw_at("update", _DRAW.replace("dtype=param.dtype", "dtype=torch.float32")))],
        "update noise drawn in f32 instead of the parameter dtype", "numerics", UPDATE, F32_SAME),
    "zscore-eps-in-variance": Mutant(A, [(SHAPING, "mean_reward) / (std_reward + 1e-8)\n", "mean_reward) / (std_reward ** 2 + 1e-8) ** 0.5\n")],
        "epsilon added to the variance inside z_score", "numerics", ZSCORE,
        _zscore_differs(lambda d, s: d / (s ** 2 + 1e-8) ** 0.5)),
    "zscore-eps-1e-6": Mutant(A, [(SHAPING, "mean_reward) / (std_reward + 1e-8)\n", "mean_reward) / (std_reward + 1e-6)\n")],
        "z-score epsilon 1e-6 instead of 1e-8", "numerics", ZSCORE, _zscore_differs(lambda d, s: d / (s + 1e-6))),
    "restore-sign": Mutant(A, [(WORKER, "param.data.add_(-sigma * noise)", "param.data.add_(sigma * noise)")],
        "restore adds +sigma * noise", "numerics", RESTORE, ALL),
    "perturb-fused": Mutant(A, [(WORKER, "param.data.add_(scale * noise)", "param.data.add_(noise, alpha=scale)")],
        "perturb with a fused scaled add instead of a rounded product", "numerics",
        {"dtypes": ("f32", "bf16"), "case": "*/perturb/*"}, ALL),
    "update-add-in-f32": Mutant(A, [(WORKER, "param.data.add_(update.to(param.dtype))",
                                     "param.data.copy_((param.data.float() + update).to(param.dtype))")],
        "update added to the parameter in f32 (one rounding instead of two)", "numerics", UPDATE, F32_SAME),
    "awd-acc-in-f32": Mutant(W, [(AWD, "acc = torch.zeros_like(param)", "acc = torch.zeros_like(param, dtype=torch.float32)")],
        "es-awd accumulator in f32 instead of the tensor dtype", "numerics", AWD_UPDATE, F32_SAME),
    "awd-l2-factor-in-dtype": Mutant(W, [(AWD, "delta = delta * (1 - step)", "delta = delta * torch.tensor(1 - step, dtype=delta.dtype)")],
        "es-awd l2 factor rounded to the tensor dtype", "numerics", {"dtypes": ("bf16",), "case": "*/decay-l2/*"}, ALL),
    "awd-scale-unfused": Mutant(W, [(AWD, _AWD_APPLY, "        param.add_(acc * (alpha / population_size))\n")],
        "es-awd update scale applied as a rounded product, not a fused scaled add", "numerics",
        {"dtypes": ("f32",), "case": "*/update-none/N7*"}, ALL),
    "awd-l1-no-clamp": Mutant(W, [(AWD, _AWD_L1, "delta = delta - torch.sign(delta) * step")],
        "es-awd l1 decay without the clamp at zero", "numerics", {"dtypes": ("f32",), "case": "*/decay-l1/*"}, ALL),
    "awd-restore-abs-scale": Mutant(W, [(AWD, _AWD_PERTURB, "param.add_(noise, alpha=abs(scale))")],
        "es-awd adds +|scale|: restore perturbs again", "numerics", {"dtypes": ("f32",), "case": "*/restore/*"}, ALL),
    "awd-decay-toward-zero": Mutant(W, [(AWD, "parameter.copy_(delta + reference_parameter)", "parameter.copy_(delta)")],
        "es-awd decays toward zero instead of the anchor", "numerics", {"dtypes": ("f32",), "case": "*/decay-l2/*"}, ALL),
    # ---- draw accounting: what the draws of a row say
    "eager-update": Mutant(A, [(WORKER, _UPDATE_LOOP, _UPDATE_LOOP.replace(
        "in self.model_runner.model.named_parameters():", "in list(self.model_runner.model.named_parameters()):"))],
        "update materialises the parameter list before drawing", "accounting", UPDATE,
        [("*/iid/*", "unverifiable")], "eager"),
    "eager-perturb": Mutant(A, [(WORKER, _PERTURB_LOOP, _PERTURB_LOOP.replace(
        "in self.model_runner.model.named_parameters():", "in list(self.model_runner.model.named_parameters()):"))],
        "perturb materialises the parameter list before drawing", "accounting", PERTURB,
        [("*/iid/*", "unverifiable")], "eager"),
    "reuse-equal-size": Mutant(A, [(WORKER, _PERTURB_LOOP, """        reused = {}
        for name, param in self.model_runner.model.named_parameters():
            key = (param.numel(), param.dtype)
            if key not in reused:
""" + textwrap.indent(_DRAW, " " * 16) + """
                reused[key] = noise
            noise = reused[key].reshape(param.shape)
            param.data.add_(scale * noise)""")],
        "perturb reuses one draw for tensors of equal size and dtype", "accounting",
        {"dtypes": ("f32", "bf16"), "case": "*/perturb/*"},
        # the `layers` set too: the what-if takes a same-dtype draw of equal size before another dtype's
        # draw of equal shape; its correlated rows agree
        [("*/iid/*", "artifact")], "reuse"),
    # the same-size draw reused within a call, at every draw (perturb, restore, update): under torch's
    # generator and correlated contract noise every slot of a member draws the same stream, so this is the
    # same computation (every row passes, restore and `layers` rows included); under iid it is the reuse
    # artifact wherever ours with the same reuse agrees bit for bit
    "reuse-equal-size-every-draw": Mutant(A, [
        (WORKER, "        self._set_seed(seed)\n        for name, param in",
         "        self._set_seed(seed)\n        _cache = {}\n        for name, param in"),
        (WORKER, "        scale = -noise_scale if negate else noise_scale\n",
         "        scale = -noise_scale if negate else noise_scale\n        _cache = {}\n"),
        (WORKER, _UPDATE_LOOP, "        _cache = {}\n" + _UPDATE_LOOP),
        *_each_draw(_REUSED_DRAW)],
        "every draw reuses, within a call, one draw per (seed, element count, dtype, device), reshaped",
        "accounting", {"dtypes": ("f32", "bf16"), "case": "*/[pru][ep][rsd]*/N7*"},
        [("*/iid/*", "artifact")], "reuse"),
    # a slot really never perturbed (nor restored): perturb rows see it, and restore rows in the perturbed
    # state they compare besides the round trip's result (which alone may agree bit for bit)
    "skip-norm-perturb-restore": Mutant(A, [
        (WORKER, _PERTURB_LOOP, _PERTURB_LOOP.replace(
            "            generator = torch.Generator",
            "            if name.endswith(\"norm.weight\"):\n                continue\n            generator = torch.Generator")),
        (WORKER, "            param.data.add_(-sigma * noise)",
         "            if name.endswith(\"norm.weight\"):\n                continue\n            param.data.add_(-sigma * noise)")],
        "perturb and restore skip the norm weights (drawing the restore's noise all the same)", "accounting",
        {"dtypes": ("f32",), "case": "*/[pr]e[rs]*/*"}, ALL, "skip"),
    "skip-first-seed": Mutant(A, [(WORKER, _UPDATE_SEEDS, "            for seed, coeff in list(zip(seeds, coeffs))[1:]:")],
        "update leaves out the first member", "accounting", UPDATE, ALL, "skip"),
    "awd-cache-key-no-dtype": Mutant(W, _awd_each_key("key = (seed, str(param.device), tuple(param.shape))"),
        "es-awd's noise cache key drops the dtype", "accounting",
        {"dtypes": ("f32", "bf16"), "case": "*/caching/*"},
        [("*/f32/iid/*", "artifact"), ("*/bf16/iid/*", "artifact"), ("*/mixed/*", "fail")], "reuse"),
    "awd-skip-last-pair": Mutant(W, [(AWD, "        acc = torch.zeros_like(param)\n        for seed, coeff in zip(seeds, coeffs):",
                                      "        acc = torch.zeros_like(param)\n        for seed, coeff in list(zip(seeds, coeffs))[:-1]:")],
        "es-awd's update leaves out the last (seed, coeff)", "accounting",
        {"dtypes": ("f32",), "case": "*/mirrored/*"}, ALL, "skip"),
    # ---- structure: rules keyed on the layer index, the parameter kind or a tie (the `layers` set shows them)
    "layer-seed-offset": Mutant(A, [(WORKER, _PERTURB_LOOP, _PERTURB_LOOP.replace(
        "generator.manual_seed(seed)", "generator.manual_seed(seed + (int(name.split('.layers.')[1].split('.')[0]) if '.layers.' in name else 0))"))],
        "perturb seeds layer i with seed + i (one decoder layer hides it)", "structure", PERTURB,
        [("*/native/layers", "fail"), ("*/layers", "error")]),
    "freeze-later-layers": Mutant(A, [(WORKER, _UPDATE_LOOP, _UPDATE_LOOP.replace(
        "            update = torch.zeros", "            if (int(name.split('.layers.')[1].split('.')[0]) if '.layers.' in name else 0) >= 1:\n                continue\n            update = torch.zeros"))],
        "update freezes every layer but the first", "structure", {"dtypes": ("f32",), "case": "*/update/N7*"},
        [("*/layers", "fail")], "skip"),
    "per-layer-sigma": Mutant(A, [(WORKER, _PERTURB_LOOP, _PERTURB_LOOP.replace(
        "param.data.add_(scale * noise)", "param.data.add_(scale / (1 + (int(name.split('.layers.')[1].split('.')[0]) if '.layers.' in name else 0)) * noise)"))],
        "perturb scales sigma down per layer", "structure", PERTURB, [("*/layers", "fail")]),
    "tied-head-twice": Mutant(A, [(WORKER, _PERTURB_LOOP, _PERTURB_LOOP.replace(
        "named_parameters()", "named_parameters(remove_duplicate=False)"))],
        "perturb walks named_parameters(remove_duplicate=False): a tied head perturbs the embedding twice",
        "structure", PERTURB, [("*/layers", "fail")], "extra"),
    "modules-walk-tied": Mutant(A, [(WORKER, _UPDATE_LOOP, _UPDATE_LOOP.replace(
        "        for name, param in self.model_runner.model.named_parameters():",
        "        for name, param in ((n, p) for m in self.model_runner.model.modules() for n, p in m.named_parameters(recurse=False)):"))],
        "update walks modules() and each one's own parameters: a tied weight is updated twice",
        "structure", {"dtypes": ("f32",), "case": "*/update/N7*"}, [("*/layers", "fail")], "extra"),
    # ---- rewards: code that acts on outliers, ties, equal rewards, a degenerate std (reward populations)
    "zscore-clip-5": Mutant(A, [(SHAPING, _ZSCORE, _ZSCORE.replace(
        "= (perf[\"avg_reward\"] - mean_reward) / (std_reward + 1e-8)",
        "= max(-5.0, min(5.0, (perf[\"avg_reward\"] - mean_reward) / (std_reward + 1e-8)))"))],
        "z-scores clipped to [-5, 5] (only an outlier reaches it)", "rewards", ZSCORE,
        _zscore_differs(lambda d, s: max(-5.0, min(5.0, d / (s + 1e-8))))),
    "zscore-dead-zone": Mutant(A, [(SHAPING, _ZSCORE, _ZSCORE + "\n        if abs(perf[\"norm_reward\"]) < 1e-5:\n            perf[\"norm_reward\"] = 0.0")],
        "z-scores below a threshold of 1e-5 set to zero", "rewards", ZSCORE,
        # the edit's own test (`abs(z) < 1e-5`), which a NaN fails: a NaN z-score is kept
        _zscore_differs(lambda d, s: 0.0 if abs(d / (s + 1e-8)) < 1e-5 else d / (s + 1e-8))),
    "zscore-std-floor": Mutant(A, [(SHAPING, _ZSCORE, _ZSCORE.replace("(std_reward + 1e-8)", "(max(std_reward, 1e-6) + 1e-8)"))],
        "a degenerate std floored at 1e-6", "rewards", ZSCORE, _zscore_differs(lambda d, s: d / (max(s, 1e-6) + 1e-8))),
    "zscore-zero-std-raw": Mutant(A, [(SHAPING, _ZSCORE, _ZSCORE + "\n        if std_reward == 0:\n            perf[\"norm_reward\"] = perf[\"avg_reward\"]")],
        "a zero std hands the raw rewards on as coefficients", "rewards", ZSCORE, [("*/equal", "fail")]),
    # ---- state: what a case leaves behind for the next one (only the repeat check sees it)
    "noise-cache-scaled-in-place": Mutant(A, [(WORKER, "class WorkerExtension:", "_NOISE = {}\n\n\nclass WorkerExtension:"),
                                              (WORKER, _PERTURB_LOOP, _PERTURB_FOR + "\n" + _draw_at("perturb", _DRAW.replace(
                                                  _RANDN, "noise = _NOISE.setdefault((seed, name, str(param.device)), "
                                                  + _RANDN.split(" = ", 1)[1] + ")")).replace(
                                                  "param.data.add_(scale * noise)", "param.data.add_(noise.mul_(scale))"))],
        "a module-level noise cache whose entries perturb scales in place: right the first time, wrong when a "
        "case comes again", "state", PERTURB, ALL, "state"),
}

#: equivalent edits: the same bits, so parity must pass every row they run on
EQUIVALENTS = {
    "sub-for-add-neg": Mutant(A, [(WORKER, "param.data.add_(-sigma * noise)", "param.data.sub_(sigma * noise)")],
        "restore with sub_(sigma * noise) instead of add_(-sigma * noise)", "numerics", RESTORE, []),
    "noise-times-scale": Mutant(A, [(WORKER, "param.data.add_(scale * noise)", "param.data.add_(noise * scale)")],
        "noise * scale instead of scale * noise", "numerics", PERTURB, []),
    "len-seeds-for-population": Mutant(A, [(WORKER, _UPDATE_SCALE, "update.mul_(alpha / len(seeds))")],
        "divides by len(seeds), which equals N here", "masking", UPDATE, []),
    "zeros-like": Mutant(A, [(WORKER, "update = torch.zeros(param.shape, dtype=torch.float32, device=param.device)",
                              "update = torch.zeros_like(param, dtype=torch.float32)")],
        "zeros_like(param, dtype=f32) for the accumulator", "numerics", UPDATE, []),
    "generator-chained-seed": Mutant(A, _each_draw("""generator = torch.Generator(device=param.device).manual_seed(seed)
""" + _RANDN),
        "manual_seed chained on the constructor", "hook", PERTURB, []),
    "module-generator-reseeded": Mutant(A, [(WORKER, "class WorkerExtension:", "_GENERATORS = {}\n\n\nclass WorkerExtension:"),
                                            *_each_draw("""generator = _GENERATORS.setdefault(str(param.device), torch.Generator(device=param.device))
generator.manual_seed(seed)
""" + _RANDN)],
        "one module-level generator per device, reseeded before every draw", "hook", RESTORE, []),
    "draw-twice": Mutant(A, [(WORKER, _draw_at("update"), _draw_at("update", _DRAW + "\n" + _DRAW))],
        "update draws every noise twice with fresh generators and keeps the second", "accounting", PAPER, []),
    "relu-for-clamp": Mutant(W, [(AWD, _AWD_L1, "delta = torch.sign(delta) * torch.relu(delta.abs() - step)")],
        "relu instead of clamp(min=0) in l1 decay", "numerics", {"dtypes": ("f32", "bf16"), "case": "*/decay-l1/*"}, []),
    "awd-l2-commuted": Mutant(W, [(AWD, "delta = delta * (1 - step)", "delta = (1 - step) * delta")],
        "(1 - step) * delta instead of delta * (1 - step)", "numerics", {"dtypes": ("f32", "bf16"), "case": "*/decay-l2/*"}, []),
    # ---- legal torch.nn.Module API calls (the stand-in model is a real Module)
    "named-parameters-remove-duplicate": Mutant(A, [(WORKER, _PERTURB_LOOP, _PERTURB_LOOP.replace(
        "named_parameters()", "named_parameters(prefix=\"\", recurse=True, remove_duplicate=True)"))],
        "perturb walks named_parameters(prefix='', recurse=True, remove_duplicate=True)", "structure", PERTURB, []),
    "parameters-recurse": Mutant(A, [(WORKER, _UPDATE_LOOP, _UPDATE_LOOP.replace(
        "for name, param in self.model_runner.model.named_parameters():",
        "for param in self.model_runner.model.parameters(recurse=True):"))],
        "update walks parameters(recurse=True)", "structure", {"dtypes": ("f32",), "case": "*/update/N7*"}, []),
    "module-introspection": Mutant(A, [(WORKER, _PERTURB_LOOP, """        model = self.model_runner.model
        print(len(model.state_dict()), len(list(model.buffers())), len(list(model.modules())), model.training)
""" + _PERTURB_LOOP)],
        "perturb first reads state_dict(), buffers(), modules() and .training", "structure", PERTURB, []),
    # ---- torch calls that draw exactly torch.randn's numbers from the generator (docs/references.md §3b)
    "normal-in-place": Mutant(A, _each_draw(_DRAW.replace(_RANDN, "noise = torch.empty(param.shape, dtype=param.dtype, device=param.device).normal_(generator=generator)")),
        "noise drawn with Tensor.normal_(generator=...) instead of torch.randn", "hook",
        {"dtypes": ("f32", "bf16"), "case": "*/perturb/*"}, []),
    "torch-normal": Mutant(A, _each_draw(_DRAW.replace(_RANDN, "noise = torch.normal(0, 1, tuple(param.shape), generator=generator, dtype=param.dtype, device=param.device)")),
        "noise drawn with torch.normal(0, 1, size, generator=...)", "hook", {"dtypes": ("f32", "bf16"), "case": "*/perturb/*"}, []),
    "normal-01-in-place": Mutant(A, _each_draw(_DRAW.replace(_RANDN, "noise = torch.empty(param.shape, dtype=param.dtype, device=param.device).normal_(0, 1, generator=generator)")),
        "noise drawn with Tensor.normal_(0, 1, generator=...)", "hook", PERTURB, []),
    "randn-like": Mutant(A, _each_draw(_DRAW.replace(_RANDN, "noise = torch.randn_like(param, generator=generator)")),
        "noise drawn with torch.randn_like(param, generator=...)", "hook", PERTURB, []),
    "randn-out": Mutant(A, _each_draw(_DRAW.replace(_RANDN, "noise = torch.randn(param.shape, generator=generator, out=torch.empty(param.shape, dtype=param.dtype, device=param.device))")),
        "noise drawn with torch.randn(size, generator=..., out=...), the dtype from out", "hook", PERTURB, []),
    "init-normal": Mutant(A, _each_draw(_DRAW.replace(_RANDN, "noise = torch.nn.init.normal_(torch.empty(param.shape, dtype=param.dtype, device=param.device), generator=generator)")),
        "noise drawn with torch.nn.init.normal_(..., generator=...)", "hook", PERTURB, []),
    "awd-torch-normal": Mutant(W, [(AWD, "return torch.randn(shape, dtype=dtype, device=device, generator=generator)",
                                    "return torch.normal(0., 1., size=tuple(shape), generator=generator, dtype=dtype, device=device)")],
        "es-awd draws with torch.normal(0., 1., size=..., generator=...)", "hook",
        {"dtypes": ("f32", "bf16"), "case": "*/perturb/*"}, []),
    # ---- rewards: degenerate-std handling that changes no bit
    "zscore-zero-std-guard": Mutant(A, [(SHAPING, _ZSCORE, _ZSCORE + "\n        if std_reward == 0:\n            perf[\"norm_reward\"] = 0.0")],
        "a zero std gives zero coefficients explicitly (what (0) / 1e-8 gives anyway)", "rewards", ZSCORE, []),
    "awd-skip-zero-coefficients": Mutant(W, [(AWD, "            acc.add_(noise, alpha=coeff)\n        param.add_(acc",
                                              "            if coeff == 0:\n                continue\n            acc.add_(noise, alpha=coeff)\n        param.add_(acc")],
        "es-awd skips the add of a zero coefficient (drawing the noise all the same)", "rewards",
        {"dtypes": ("f32",), "case": "*/update-none/N*", "schemes": ("correlated",), "noises": ("contract",)}, []),
    "zscore-keys-loop": Mutant(A, [(SHAPING, "    for key, perf in seeds_perf.items():", "    for key in list(seeds_perf):\n        perf = seeds_perf[key]")],
        "z_score walks the keys and indexes", "numerics", ZSCORE, []),
}

#: name -> (target, [(file, old, new)], what is broken)
BAD_INPUTS = {
    "shaping-needs-3.12": ("es-at-scale", [(SHAPING, "print(f\"member {key}: avg_reward {perf['avg_reward']:.6g}",
                                            "print(f\"member {key}: avg_reward {perf[\"avg_reward\"]:.6g}")],
                           "reward_shaping.py with a nested same-quote f-string (Python 3.12 syntax)"),
    "absent-package": ("es-at-scale", [(WORKER, "import numpy as np\n", "import numpy as np\nimport vllm_not_installed_here\n")],
                       "worker_extension.py imports a package the child lacks"),
    "hang": ("es-at-scale", [(WORKER, "        started = time.time()\n",
                              "        started = time.time()\n        time.sleep(3600)\n")],
             "perturb_self_weights hangs"),
    "self-kill": ("es-at-scale", [(WORKER, "param.data.add_(-sigma * noise)",
                                   "param.data.add_(-sigma * noise)\n"
                                   "            __import__('os').kill(__import__('os').getpid(), 9)")],
                  "restore_self_weights kills its own process (SIGKILL)"),
    "no-generator": ("es-at-scale", _each_draw(_DRAW.replace("device=param.device, generator=generator)",
                                                              "device=param.device)")),
                     "noise drawn from torch's global generator (no generator passed)"),
    "normal-other-std": ("es-at-scale", _each_draw(_DRAW.replace(_RANDN, "noise = torch.empty(param.shape, dtype=param.dtype, "
                                                                 "device=param.device).normal_(0, 2, generator=generator)")),
                         "noise drawn with Tensor.normal_(0, 2): not standard normals"),
}


#: target -> its stand-in as the one commit of a git repository, made once per process (_committed)
_COMMITTED: dict = {}


def _committed(target: str) -> Path:
    """The stand-in of `target` as the one commit of a git repository in a temp folder of this process
    (removed at its exit), which make_variant(git=True) copies whole. Why: `git init`, `add` and `commit`
    for every variant cost three git processes each (about 50 ms of CPU), and a catalog builds dozens of
    variants of one stand-in; a copy of one committed repository is the same repository (its index's file
    stamps differ, so git re-reads the files and finds them unchanged)."""
    if target not in _COMMITTED:
        base = Path(tempfile.mkdtemp(prefix="standin-git-"))
        atexit.register(shutil.rmtree, base, True)
        repo = base / target
        shutil.copytree(STANDINS / target, repo, ignore=shutil.ignore_patterns("__pycache__"))
        cmd = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@example.org"]
        for args in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "stand-in"]):
            subprocess.run(cmd + args, check=True)
        _COMMITTED[target] = repo
    return _COMMITTED[target]


def make_variant(tmp: Path, target: str, edits, git: bool = False) -> Path:
    """Copy the stand-in clone of `target` under `tmp` and apply `edits`; returns the clone root. With `git`,
    the unedited copy is the one commit of a git repository and the edits are uncommitted changes: what a
    failing row's blame names (esverify.oracle.blame; `edited_functions` says what it must name)."""
    dest = Path(tmp) / f"{target}-variant"
    if git:
        shutil.copytree(_committed(target), dest, symlinks=True)
    else:
        shutil.copytree(STANDINS / target, dest, ignore=shutil.ignore_patterns("__pycache__"))
    for rel, old, new in edits:
        path = dest / rel
        text = path.read_text()
        assert text.count(old) == 1, f"{rel}: the edit's anchor occurs {text.count(old)} times, want 1: {old!r}"
        path.write_text(text.replace(old, new))
    return dest


def edited_functions(target: str, edits) -> dict:
    """{file: the functions (esverify.oracle.blame's names, "module level" outside any) enclosing the lines
    `edits` write into the stand-in `target`}, edits applied in order as make_variant applies them."""
    from esverify.oracle.blame import enclosing, functions_of
    texts, patched = {}, {}
    for rel, old, new in edits:
        text = texts.get(rel) or (STANDINS / target / rel).read_text()
        at = text.index(old)          # where the edit lands (its new text may also occur elsewhere)
        text = texts[rel] = text.replace(old, new)
        start = text[:at].count("\n") + 1
        functions = functions_of(text)
        patched.setdefault(rel, set()).update(enclosing(functions, n)
                                              for n in range(start, start + new.count("\n") + 1))
    return patched


#: the row statuses that carry a blame line (esverify.oracle.row_runner)
BLAMED = ("fail", "error", "unverifiable")


def names_the_edit(blame: str, patched: dict) -> bool:
    """Whether a failing row's `blame` names one of the edited functions of `patched` (edited_functions)
    among the code the row ran: a hunk "FILE:LINES, in FUNCTION" of that file and
    function, whole, in the list before ", which this row ran" (esverify.oracle.blame.explain)."""
    ran, said, _ = blame.partition(", which this row ran")
    return bool(said) and any(re.search(rf"(^| ){re.escape(rel)}:\d+(-\d+)?, in {re.escape(fn)}"
                                        rf"( \(its signature\))?(;| and |$)", ran)
                              for rel, fns in patched.items() for fn in fns)


def make_mutant(tmp: Path, name: str, git: bool = False) -> Path:
    """A copy of the stand-in with mutant (or equivalent) `name` applied (`git`: see make_variant)."""
    mutant = MUTANTS.get(name) or EQUIVALENTS[name]
    built = Path(tmp) / name / f"{mutant.target}-variant"
    if built.exists():       # built already: the same name is the same edits
        return built
    return make_variant(Path(tmp) / name, mutant.target, mutant.edits, git=git)


def make_bad(tmp: Path, name: str) -> Path:
    target, edits, _ = BAD_INPUTS[name]
    return make_variant(Path(tmp) / f"bad-{name}", target, edits)
