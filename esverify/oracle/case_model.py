"""A parity case and its parameters: pure data, drawn from a case seed.

A `Case` says which reference call (`op`) runs on which parameter set
(`dtype`, `big`, or explicit `shapes`), device, noise scheme and noise
source (`contract`: the RNG contract's noise through the hook; `native`:
torch's own generator, correlated only, docs/references.md §3a), with its
population, sigma, alpha, decay lambda and the seed handles the reference
receives. Its id `target/device/dtype/scheme/op/N<population>[/native][/tag]`
is what `--case PATTERN` matches.

Parameters are drawn from `--case-seed` (default DEFAULT_CASE_SEED, recorded
in the report's metadata) so that no fixed constant masks a bug: sigma and
alpha log-uniform and unrelated to each other or to the paper's constants,
the decay lambda not a power of two, seed handles unsorted, irregularly
spaced (at least HANDLE_GAP apart, so a reference deriving seed + offset
lands on an unknown handle) and below 2**31, the population odd and not a
multiple of 3 (nor of an engine count of 2 or 3). Each case draws from its
own stream (case seed, id without the device), so cpu and cuda rows of a
case share parameters. The paper's case (N = 30, sigma 0.001, alpha
0.0005) stays as its own row (`/paper`); z-score and update cases also run
at populations across numpy's pairwise-summation boundaries (POPULATIONS).

The training loops (esverify.oracle.loop_rows) add each
reference's loop rows (its adapter's `loop_ops`), always on the small set,
under contract noise and (correlated only) native noise, like the other
rows.

Single-operation contract cases use the set with the 1M-element tensor
(unless `small`); native cases and the loop use the small set.

Which ops a reference has, and its part of the matrix, is its adapter's
(esverify.oracle.adapters: `Adapter.cases`, walked by `walk_cells`); the
ops the core knows how to replay are perturb, restore, update (decay
none / l1 / l2, mirrored, caching), decay (the decay alone), zscore (f64)
and the in-process loop.

Design record: this module knows no reference; the adapters
(esverify.oracle.adapters) build their cases from it (`walk_cells`,
`random_case_of`, `generic_shrink_candidates`), and esverify.oracle.cases
puts the adapters' parts together (the matrix, --case-json, --fuzz).
"""
from __future__ import annotations

import math
import zlib
from dataclasses import dataclass, field, replace

import numpy as np

#: sigma, alpha and population of the default matrix's cases: the fine-tuning paper's hyperparameters
#: (docs/numerics.md), the values a user's run most likely has
CASE_SIGMA = 0.001
CASE_ALPHA = 0.0005
CASE_POPULATION = 30
DEFAULT_CASE_SEED = 20260401
#: populations across numpy's pairwise-summation block boundaries (8-way unrolled, 128-element blocks)
POPULATIONS = (8, 9, 16, 17, 127, 128, 129)
#: smallest distance between two seed handles: seed + any offset below it is an unknown handle
HANDLE_GAP = 1000
HANDLE_MAX = 1 << 31
#: reward of the loop: -fsum((theta - REWARD_TARGET)**2)
REWARD_TARGET = 0.01
#: the member perturbed by the single perturb/restore cases
PERTURB_MEMBER = 1
NOISES = ("contract", "native")

#: the reward populations of the matrix besides `normal` (esverify.oracle.rewards)
REWARD_SHAPES = ("sparse", "outliers", "ties", "equal", "tiny")


@dataclass
class Case:
    """One parity case (see the module docstring). sigma, alpha, lam: Python floats; handles: the seed
    handle of each member (loop: of each iteration's members, iteration-major); shapes: None for the
    standard set, else ((name, shape), ...) of a custom set (fuzzing, the `layers` set) and ties its
    tied aliases; rewards: the reward population (esverify.oracle.rewards.SHAPES)."""
    target: str
    device: str
    dtype: str           #: "f32", "f16", "bf16", "mixed", or "f64" for zscore
    scheme: str          #: "iid", "correlated", or "-" for zscore
    op: str
    population: int
    sigma: float
    alpha: float
    big: bool = False
    extra: dict = field(default_factory=dict)
    tag: str = ""        #: id suffix that keeps ids unique ("paper", "lambda0", "fuzz")
    noise: str = "contract"   #: "contract" or "native"; "-" for zscore
    lam: float = 0.0     #: anchored-decay lambda (decay ops)
    handles: tuple = ()
    shapes: tuple | None = None
    ties: tuple = ()     #: ((alias, slot name), ...): the alias is the same Parameter (a tied output head)
    rewards: str = "normal"   #: the reward population of update/zscore cases (esverify.oracle.rewards)

    @property
    def case_id(self) -> str:
        base = f"{self.target}/{self.device}/{self.dtype}/{self.scheme}/{self.op}/N{self.population}"
        if self.noise == "native":
            base += "/native"
        if self.rewards != "normal":
            base += f"/{self.rewards}"
        return f"{base}/{self.tag}" if self.tag else base

    @property
    def kind(self) -> str:
        """The reference call family: perturb, restore, update, decay, zscore or loop."""
        return self.op.split("-")[0] if self.op.startswith(("update", "decay")) else (
            "update" if self.op in ("mirrored", "caching") else self.op)

    @property
    def decay(self) -> str:
        return self.op.split("-")[1] if self.op.startswith(("update-", "decay-")) else "none"

    @property
    def iterations(self) -> int:
        return int(self.extra.get("iterations", 1))

    def handle(self, member: int, iteration: int = 0) -> int:
        """The seed handle the reference receives for `member` (of `iteration`, for the loop)."""
        return int(self.handles[iteration * self.population + member])

    def params_text(self) -> str:
        """sigma, alpha, lambda as one short text for the report."""
        text = f"sigma={self.sigma!r} alpha={self.alpha!r}"
        return text + (f" lambda={self.lam!r}" if self.decay != "none" else "")


@dataclass
class Cell:
    """One (device, noise source, dtype set, scheme) of the matrix, handed to an adapter's `cell_cases`.

    population: the main population; big: whether contract rows use the 1M-element set;
    sweep: this is the set the population sweep and reward populations run on; shape_scheme: the
    scheme the reward populations run on; add(op, n, big=False, tag="", extra=None, rewards=...,
    layered=False): append one case of this cell (parameters drawn from the case seed)."""
    device: str
    noise: str
    dtype: str
    scheme: str
    population: int
    big: bool
    sweep: bool
    shape_scheme: str
    add: object = None



# ------------------------------------------------------------------ drawing parameters

def _stream(case_seed: int, key: str) -> np.random.Generator:
    return np.random.default_rng([int(case_seed), zlib.crc32(key.encode())])


def _sig(x: float, digits: int = 4) -> float:
    """x rounded to `digits` significant decimal digits (readable, not dyadic)."""
    return float(f"{x:.{digits - 1}e}")


def draw_handles(rng: np.random.Generator, n: int) -> tuple:
    """n distinct seed handles in [HANDLE_GAP, HANDLE_MAX), unsorted, pairwise >= HANDLE_GAP apart."""
    out: list[int] = []
    while len(out) < n:
        h = int(rng.integers(HANDLE_GAP, HANDLE_MAX))
        if all(abs(h - o) >= HANDLE_GAP for o in out):
            out.append(h)
    if n > 2 and out == sorted(out):          # unsorted on purpose (a "seeds sorted" bug must show)
        out[0], out[-1] = out[-1], out[0]
    return tuple(out)


def draw_sigma_alpha(rng: np.random.Generator) -> tuple[float, float]:
    """sigma in [2e-4, 2e-2] and alpha in [1e-4, 1e-2], log-uniform and independent, neither a default
    case constant nor sigma / 2."""
    while True:
        sigma = _sig(10 ** rng.uniform(-3.7, -1.7))
        alpha = _sig(10 ** rng.uniform(-4.0, -2.0))
        if sigma != CASE_SIGMA and alpha not in (CASE_ALPHA, sigma / 2):
            return sigma, alpha


def draw_lambda(rng: np.random.Generator, alpha: float) -> float:
    """A decay lambda, never a power of two (alpha * lambda must round in f32), whose step
    alpha * lambda is log-uniform in [2e-3, 1.5e-2]: l1 then zeroes part of the +-0.02 deltas of the
    offset sets and l2's factor 1 - step is visible even in bf16."""
    while True:
        lam = _sig(10 ** rng.uniform(math.log10(2e-3), math.log10(1.5e-2)) / max(alpha, 1e-12), 3)
        if math.frexp(lam)[0] != 0.5 and alpha * lam < 0.5:
            return lam


def draw_population(rng: np.random.Generator) -> int:
    """An odd population, not a multiple of 3: not a multiple of 2 or of an engine count of 2 or 3."""
    return int(rng.choice([5, 7, 11, 13]))


def main_population(case_seed: int) -> int:
    """The population of the perturb/restore/update/loop cases drawn from `case_seed`."""
    return draw_population(_stream(case_seed, "population"))


def finish_case(case: Case, case_seed: int, sigma=None, alpha=None) -> Case:
    """Fill sigma/alpha/lambda/handles from the case's own stream unless given."""
    rng = _stream(case_seed, case.case_id.replace(f"/{case.device}/", "/", 1))
    s, a = draw_sigma_alpha(rng)
    if case.tag != "paper":
        case.sigma = s if sigma is None else sigma
        case.alpha = a if alpha is None else alpha
    lam = draw_lambda(rng, case.alpha)
    if case.decay != "none":
        case.lam = 0.0 if case.tag == "lambda0" else lam
    members = case.population * (case.iterations if case.op == "loop" else 1)
    case.handles = draw_handles(rng, members)
    return case


# ------------------------------------------------------------------ the matrix

def walk_cells(adapter, matrix) -> list:
    """The default `Adapter.cases`: per device the adapter's `device_cases`, then per (noise, dtype
    set, scheme) cell its `cell_cases`, the population sweep and reward populations of its
    `sweep_op`, its `layered_ops` on the `layers` set, and its `loop_cases`."""
    from .set_shapes import LAYERED_SHAPES, LAYERED_TIES
    population = matrix.population if matrix.population is not None else main_population(matrix.case_seed)
    sets = list(matrix.dtypes) + (["mixed"] if len(matrix.dtypes) > 1 else [])
    sweep_set = sets[-1]        # the extra populations run on one set: the mixed one when there is one
    schemes = list(matrix.schemes)
    # the reward populations run on one set and one scheme (the population is what they vary)
    shape_scheme = "correlated" if "correlated" in schemes else schemes[0]
    cases = []

    def adder(device, dtype, scheme, noise):
        def add(op, n, big=False, tag="", extra=None, rewards="normal", layered=False):
            case = Case(adapter.name, device, dtype, scheme, op, n, CASE_SIGMA, CASE_ALPHA, big,
                        dict(extra or {}), tag, noise, rewards=rewards)
            if layered:
                case.shapes, case.ties = LAYERED_SHAPES, LAYERED_TIES
            cases.append(finish_case(case, matrix.case_seed, matrix.sigma, matrix.alpha))
        return add

    for device in matrix.devices:
        def add_plain(dtype, scheme, op, n, noise, **kw):
            adder(device, dtype, scheme, noise)(op, n, **kw)
        adapter.device_cases(matrix, device, population, add_plain)
        for noise in matrix.noises:
            for dtype in sets:
                # native noise has the correlated scheme only: no native rows when --schemes leaves it out
                for scheme in (schemes if noise == "contract" else [s for s in schemes if s == "correlated"]):
                    # native rows use the small set: torch's draw has no 1M-element path of its own,
                    # and the contract rows keep the big tensor (the default matrix stays fast)
                    add = adder(device, dtype, scheme, noise)
                    cell = Cell(device, noise, dtype, scheme, population, not matrix.small and noise == "contract",
                                dtype == sweep_set, shape_scheme, add)
                    adapter.cell_cases(matrix, cell)
                    if adapter.sweep_op and cell.sweep and noise == "contract":
                        for n in POPULATIONS:
                            if n != population:
                                add(adapter.sweep_op, n)
                        if scheme == shape_scheme:
                            from .rewards import NONFINITE   # a NaN and an infinite reward: rows of their own
                            for shape in REWARD_SHAPES + NONFINITE:
                                add(adapter.sweep_op, CASE_POPULATION, rewards=shape)
                    if cell.sweep:   # several layers, a tied head: on one set, small tensors
                        for op in adapter.layered_ops:
                            n = population + population % 2 if op == "mirrored" else population
                            add(op, n, tag="layers", layered=True)
                    if matrix.loops:
                        for case in adapter.loop_cases(device, dtype, scheme, population, CASE_SIGMA,
                                                       CASE_ALPHA, matrix.iterations, noise):
                            cases.append(finish_case(case, matrix.case_seed, matrix.sigma, matrix.alpha))
    return cases


def check_common(case: Case) -> Case:
    """ValueError when `case` breaks what every case shares (cases.check adds its adapter's own check):
    bad scheme/noise pair, too few handles, population or parameters out of range."""
    if case.op != "zscore":
        if case.noise not in NOISES:
            raise ValueError(f"case: noise must be one of {NOISES}, got {case.noise!r}")
        if case.scheme not in ("iid", "correlated") or (case.noise == "native" and case.scheme != "correlated"):
            raise ValueError(f"case: scheme {case.scheme!r} with noise {case.noise!r} (native noise is "
                             "correlated only)")
    if case.population < 2 or (case.op == "mirrored" and case.population % 2):
        raise ValueError(f"case: population {case.population} (>= 2; even for mirrored)")
    need = case.population * (case.iterations if case.op == "loop" else 1)
    if len(case.handles) < need or len(set(case.handles)) != len(case.handles):
        raise ValueError(f"case: needs {need} distinct seed handles, got {len(case.handles)}")
    if not all(0 <= h < HANDLE_MAX for h in case.handles):
        raise ValueError("case: seed handles must be in [0, 2**31)")
    if not (0 < case.sigma < math.inf and 0 <= case.alpha < math.inf and 0 <= case.lam < math.inf):
        raise ValueError("case: sigma must be > 0, alpha and lambda >= 0, all finite")
    if case.decay == "l2" and case.alpha * case.lam >= 1:
        raise ValueError("case: l2 decay needs alpha * lambda < 1")
    if case.ties:
        from .set_shapes import check_ties
        if case.shapes is None:
            raise ValueError("case: ties need the case's own shapes")
        check_ties([n for n, _ in case.shapes], case.ties)
    if case.rewards != "normal" and case.kind not in ("update", "zscore"):
        raise ValueError(f"case: rewards {case.rewards!r} on op {case.op!r}, which takes no rewards")
    from .rewards import check_shape
    check_shape(case.rewards, case.population)
    if case.kind == "decay" and not case.lam > 0:
        # lambda 0 means no decay in the update (docs/numerics.md §5, docs/references.md §2); the decay alone with
        # step 0 would still round-trip (theta - anchor) + anchor in the reference
        raise ValueError("case: the decay alone needs lambda > 0")
    return case


# ------------------------------------------------------------------ fuzzing

#: the parameter dtypes of the matrix (esverify.oracle.paramsets.DTYPES maps them to torch dtypes; named
#: here so that checking options imports no torch)
MATRIX_DTYPES = ("f32", "f16", "bf16")
FUZZ_DTYPES = (*MATRIX_DTYPES, "mixed")
#: in the order torch walks a real model (each module's parameters together; docs/references.md §3)
_NAMES = ("model.embed_tokens.weight", "model.layers.0.self_attn.q_proj.weight",
          "model.layers.0.self_attn.q_proj.bias", "model.layers.0.self_attn.k_proj.weight",
          "model.layers.0.mlp.up_proj.weight", "model.norm.weight", "lm_head.weight")


def random_case_of(adapter, rng: np.random.Generator, device: str = "cpu", noises=NOISES, iterations=2) -> Case:
    """One random case of `adapter` (its `fuzz_ops`): op, dtype set, scheme, noise, shapes (1-4 tensors,
    0-dim to a few thousand elements, equal shapes sometimes; or the `layers` set with its tied head),
    population, reward population (update and zscore ops: half the time one of REWARD_SHAPES), sigma,
    alpha, lambda and handles."""
    from .set_shapes import LAYERED_SHAPES, LAYERED_TIES
    from .rewards import OUTLIER_MIN
    target = adapter.name
    ops = adapter.fuzz_ops
    op = str(rng.choice(ops))

    def rewards_for(n):
        shape = str(rng.choice(REWARD_SHAPES)) if rng.random() < 0.5 else "normal"
        return shape, (n + OUTLIER_MIN if shape == "outliers" and n < OUTLIER_MIN else n)
    if op == "zscore":
        shape, n = rewards_for(int(rng.integers(2, 140)))
        case = Case(target, device, "f64", "-", op, n, 1.0, 1.0, noise="-", tag="fuzz", rewards=shape)
        case.handles = draw_handles(rng, n)
        adapter.check_case(case)
        return check_common(case)
    noise = str(rng.choice(list(noises)))
    scheme = "correlated" if noise == "native" else str(rng.choice(["iid", "correlated"]))
    count = int(rng.integers(1, 5))
    shapes = []
    for k in range(count):
        if shapes and rng.random() < 0.25:
            shape = shapes[-1][1]                                  # equal shapes: caching and reuse
        else:
            rank = int(rng.integers(0, 3))
            shape = tuple(int(d) for d in rng.integers(1, 70, rank))
        shapes.append((_NAMES[k % len(_NAMES)] if k < len(_NAMES) else f"extra.{k}.weight", shape))
    ties = ()
    if rng.random() < 0.15:
        shapes, ties = list(LAYERED_SHAPES), LAYERED_TIES
    n = int(rng.integers(2, 20))
    shape = "normal"
    if op in ("update", "update-none", "update-l1", "update-l2", "mirrored", "caching"):
        shape, n = rewards_for(n)
    if op == "mirrored":
        n += n % 2
    sigma, alpha = draw_sigma_alpha(rng)
    case = Case(target, device, str(rng.choice(FUZZ_DTYPES)), scheme, op, n, sigma, alpha,
                extra={"iterations": iterations} if op == "loop" else {}, tag="fuzz", noise=noise,
                shapes=tuple(shapes), ties=tuple(ties), rewards=shape)
    if case.decay != "none":
        lam0 = case.kind == "update" and rng.random() < 0.15     # lambda 0 means no decay in the update
        case.lam = 0.0 if lam0 else draw_lambda(rng, case.alpha)
    case.handles = draw_handles(rng, n * (case.iterations if op == "loop" else 1))
    adapter.check_case(case)
    return check_common(case)


def whole_loop_shrink_candidates(case: Case) -> list:
    """Simpler variants of a row that runs a reference's whole loop with its own seeds (no handles): two
    members, one iteration (es-paper, skill-sample)."""
    out = []
    if case.population > 2:
        out.append(replace(case, population=2))
    if case.iterations > 1:
        out.append(replace(case, extra={**case.extra, "iterations": 1}))
    return out


def generic_shrink_candidates(case: Case, adapter=None):
    """Simpler variants of `case`, simplest first: fewer tensors, smaller tensors, a smaller
    population, fewer loop iterations, f32, the correlated scheme, round parameters."""
    out = []
    shapes = list(case.shapes) if case.shapes is not None else None
    if case.ties:
        out.append(replace(case, ties=()))
    if shapes and len(shapes) > 1:
        for k in range(len(shapes)):
            out.append(replace(case, shapes=tuple(shapes[:k] + shapes[k + 1:])))
    if shapes:
        for k, (name, shape) in enumerate(shapes):
            if math.prod(shape) > 1:
                smaller = tuple(max(1, d // 2) for d in shape)
                out.append(replace(case, shapes=tuple(shapes[:k] + [(name, smaller)] + shapes[k + 1:])))
    per = case.iterations if case.op == "loop" else 1
    step = 2 if case.op == "mirrored" else 1
    for n in sorted({2, case.population // 2 + (case.population // 2) % step, case.population - step}):
        if 2 <= n < case.population and not (case.op == "mirrored" and n % 2):
            handles = tuple(case.handles[i * case.population + m] for i in range(per) for m in range(n))
            out.append(replace(case, population=n, handles=handles))
    if case.op == "loop" and case.iterations > 1:
        out.append(replace(case, extra=dict(case.extra, iterations=1), handles=case.handles[:case.population]))
    if case.rewards != "normal":
        out.append(replace(case, rewards="normal"))
    if case.op != "zscore":
        if case.dtype != "f32":
            out.append(replace(case, dtype="f32"))
        if case.scheme != "correlated":
            out.append(replace(case, scheme="correlated"))
        for field_, simple in (("sigma", 0.01), ("alpha", 0.01), ("lam", 2.5)):
            value = getattr(case, field_)
            if value and value != simple and not (field_ == "lam" and case.decay == "none"):
                out.append(replace(case, **{field_: simple}))
    valid = []
    for c in out:
        try:
            if adapter is not None:
                adapter.check_case(c)
            valid.append(check_common(c))
        except ValueError:
            continue
    return valid
