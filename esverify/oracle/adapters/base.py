"""The reference adapter: what the oracle core knows about one reference (CONTRIBUTING.md, "Adding a reference").

Design record (issue 21): one reference = one adapter. The core (cases,
runner, session, reports, command line) is written once against this base
class, as numpy's Generator is written against BitGenerator, and checks
only that an adapter is one. An adapter declares its clone layout and how
to recognise it, its child driver (a script under oracle_child/), its numerics
profile, its part of the default matrix, how to check, draw and shrink a
case, the per-reference data of the reports (functions its loops reach,
documented findings, the not-checked text, the rerun arguments), and
optionally runs whole rows itself (`run_row`). Everything a subclass must
provide raises NotImplementedError here; everything else has a default
that a simple single-op reference can keep.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from ..case_model import Cell


@dataclass(frozen=True)
class MatrixSpec:
    """The matrix options every adapter builds its cases from (docs/parity.md, "The matrix").

    devices/dtypes/schemes/noises: tuples of names; population/sigma/alpha: None draws them from
    case_seed (esverify.oracle.cases); iterations: loop length; small: leave out the 1M-element
    tensor; loops: include the training-loop rows."""
    devices: tuple
    dtypes: tuple
    schemes: tuple
    population: int | None = None
    sigma: float | None = None
    alpha: float | None = None
    iterations: int = 3
    small: bool = False
    noises: tuple = ("contract", "native")
    case_seed: int = 20260401
    loops: bool = True


@dataclass(frozen=True)
class LoopSpec:
    """How the core replays one training-loop row of a reference (esverify.oracle.loop_rows).

    style: "batched" (every member evaluated on each mini-batch of `data`, the batch-weighted mean
    reward per member, z-scores handed over explicitly) or "passes" (one pass over the members per sign,
    the mean reward over `data`, mirrored pairs when `mirror`); engines: engines the members are
    grouped over; schedule: the seed schedule of esverify.es.schedule (and its FIRST_ITERATION key);
    data, mini_batch: the reward targets of an iteration and the mini-batch size (batched);
    mirror, caching, decay, lam: the loop's sampling and anchored-decay settings (caching None: its
    perturb/restore take no such argument); extra_update: the loop makes one update more than
    num_iterations (a documented quirk; `finding` names it in the adapter's findings);
    deterministic: the entry point switches torch.use_deterministic_algorithms on when given a seed;
    first_record: the number of its first iteration; saves: "state_dict" (final weights saved with
    torch.save) or "any" (any save after the last update); merges_equal_seeds: members of equal seed
    are one member (a note when the schedule draws equal seeds); engine_dtype: the precision the
    reference documents launching its engines with ("bfloat16", "float16", "float32"; "auto": the
    weights' own): our rewards are computed in it, the stand-in engines compute theirs in what the loop
    really launched (docs/parity.md, "The training loops"); command: the op-specific fields of the
    child's loop command. (A loop whose caching=True reuses noise needs no flag: the hook sees the
    reuse and the one rule of every row judges it, esverify.oracle.compare.judge_reuse.)"""
    style: str
    engines: int
    schedule: str
    data: tuple
    command: dict
    mini_batch: int = 0
    mirror: bool = False
    caching: bool | None = None
    decay: str = "none"
    lam: float = 0.0
    extra_update: bool = False
    finding: str | None = None
    deterministic: bool = False
    first_record: int = 1
    saves: str = "state_dict"
    merges_equal_seeds: bool = False
    engine_dtype: str = "auto"


class Adapter:
    """One reference, as the oracle core sees it. Subclasses set the class attributes and override
    what the base cannot know; see CONTRIBUTING.md, "Adding a reference"."""

    #: the reference's name: the first part of every case id, the report's `target` column
    name: str = ""
    #: one line saying what the reference is (shown by `esverify parity --help` and docs)
    summary: str = ""
    #: environment variable naming the clone path when no --ref is given
    env_var: str = ""
    #: the clone path tried last, relative to the working directory
    default_path: str = ""
    #: a deprecated option that names this reference's clone (e.g. "--awd-ref"), or None
    alias_flag: str | None = None
    #: the child driver, run by path in the child interpreter beside the shared child code: a file name
    #: under oracle_child/ (a built-in reference), or an absolute path (a plug-in's driver in its own package)
    driver: str = ""
    #: licence file name in the clone (docs/references.md §4)
    licence: str = ""
    #: commit prefix docs/references.md was validated against
    validated_commit: str = ""
    #: module key -> path relative to the clone root
    files: dict = {}
    #: op (or op family) -> module key it needs
    ops_need: dict = {}
    #: module keys whose file alone identifies a clone (None: every key of `files`); a file of a generic
    #: name (an `es.py`) is no clone of this reference without one of these beside it
    identifying: tuple | None = None
    #: our numerics profile (esverify.es.profiles) the clean-room side runs this reference's cases under
    profile: str = ""
    #: the single-operation ops a case of this reference may have
    ops: tuple = ()
    #: the op names of its training-loop rows
    loop_ops: tuple = ()
    #: the ops of the `layers` set (several layers, a tied head) in the matrix
    layered_ops: tuple = ()
    #: the op the population sweep and reward populations run (None: none)
    sweep_op: str | None = None
    #: the ops `random_case` draws from (repeats weight them)
    fuzz_ops: tuple = ()
    #: clone file -> functions its loops reach (docs/references.md §5), for the coverage section
    reached: dict = {}
    #: finding key -> description of a documented reference quirk a row may observe
    findings: dict = {}
    #: op (or op family, the part before "-") -> ["clone file::qualified function"] that compute its
    #: results: a failing row of a clean clone names them (esverify.oracle.blame; docs/parity.md "Blame")
    computes: dict = {}

    # ------------------------------------------------------------- the clone

    def recognise(self, path: Path) -> str | None:
        """None when `path` is a clone of this reference (usable, perhaps with files missing); else the
        reason it is not, one line. The default: at least one layout file is there."""
        path = Path(path)
        if not path.is_dir():
            return f"{path} is not a directory"
        keys = self.files if self.identifying is None else self.identifying
        if any((path / self.files[k]).is_file() for k in keys):
            return None
        found = sorted(rel for rel in self.files.values() if (path / rel).is_file())
        if found:   # a generic file name matched, nothing that identifies the reference
            lacks = sorted(rel for rel in self.files.values() if rel not in found)
            return (f"not an {self.name} clone: it lacks {', '.join(lacks)} (it has only {', '.join(found)}, "
                    "a name other code uses too)")
        return f"{path} is not a clone of {self.name}: none of its files {sorted(self.files.values())} is there"

    def near_miss(self, path: Path) -> str | None:
        """The reason `path` is not a clone of this reference when it has some of its files (a generic
        name matched) but lacks the rest; None when it is a clone or has none of its files."""
        reason = self.recognise(path)
        return reason if reason and reason.startswith(f"not an {self.name} clone: it lacks") else None

    def layout(self, path: Path) -> dict:
        """module key -> path relative to the clone root, as the clone at `path` has them (the default:
        `files`; a reference whose files sit in different folders in different clones overrides it)."""
        return dict(self.files)

    def clone_root(self, path: Path) -> Path:
        """The folder the child is started on for the clone at `path` (the default: `path` itself; a
        reference that is one file names its folder)."""
        return Path(path)

    def accepts_file(self) -> bool:
        """Whether a clone of this reference may be given as a single file (`--ref FILE.py`)."""
        return False

    def looks_for(self) -> str:
        """One line: what a clone of this reference has (for the "no adapter recognises PATH" error)."""
        return "one of " + ", ".join(sorted(self.files.values()))

    def module_key(self, case) -> str | None:
        """The layout module key the row of `case` needs (its load error is the row's error)."""
        return self.ops_need.get(case.kind) or self.ops_need.get(case.op.split("-")[0])

    # ------------------------------------------------------------- cases

    def all_ops(self) -> tuple:
        """Every op of this reference, single-op and loop, in report order."""
        return (*self.ops, *self.loop_ops)

    def cases(self, matrix: MatrixSpec) -> list:
        """This reference's part of the default matrix, in a stable order (device, noise, dtype,
        scheme, op); ids unique. The default walks the cells (esverify.oracle.case_model.walk_cells) and
        asks `device_cases`, `cell_cases` and `loop_cases` for each."""
        from ..case_model import walk_cells
        return walk_cells(self, matrix)

    def device_cases(self, matrix: MatrixSpec, device: str, population: int, add) -> None:
        """Cases without noise of one device (e.g. z-scores): add(dtype, scheme, op, n, noise, ...)."""

    def cell_cases(self, matrix: MatrixSpec, cell: Cell) -> None:
        """The single-op cases of one cell (cell.add); the sweep, reward populations and `layers`
        rows are added by the core from `sweep_op` and `layered_ops`."""
        raise NotImplementedError(f"{type(self).__name__}.cell_cases must be overridden")

    def loop_cases(self, device, dtype, scheme, population, sigma, alpha, iterations, noise="contract") -> list:
        """The training-loop cases of one cell (small parameter sets only); none by default."""
        return []

    def loop_spec(self, case) -> LoopSpec:
        """How the core replays the loop row `case` (one of `loop_ops`); see LoopSpec."""
        raise NotImplementedError(f"{type(self).__name__}.loop_spec must be overridden when it has loop_ops")

    def check_case(self, case) -> None:
        """ValueError with the reason when `case` is not a case of this reference (its op); the core
        checks what every case shares (case_model.check_common)."""
        if case.op not in self.all_ops():
            raise ValueError(f"case: op {case.op!r} is not an op of target {case.target!r}")

    def random_case(self, rng, device: str, noises, iterations: int = 2):
        """One random case of this reference for `--fuzz` (esverify.oracle.case_model.random_case_of draws
        the shapes and parameters; an adapter with other ops overrides this)."""
        from ..case_model import random_case_of
        return random_case_of(self, rng, device, noises, iterations)

    def shrink_candidates(self, case) -> list:
        """Simpler variants of `case`, simplest first (each passes this adapter's check and check_common)."""
        from ..case_model import generic_shrink_candidates
        return generic_shrink_candidates(case, self)

    # ------------------------------------------------------------- running a row

    def set_variant(self, case) -> str:
        """The parameter-set variant a single-op case starts from (esverify.oracle.paramsets)."""
        return "base"

    def needs_anchor(self, case) -> bool:
        """Whether a single-op case gets the anchor set (anchored decay)."""
        return False

    def rule_for(self, device: str) -> str:
        """The profile rule a case on `device` runs under ("" when the profile has one rule)."""
        return ""

    def run_row(self, session, case) -> dict | None:
        """The row of `case` when this adapter runs it entirely (see esverify.oracle.session.Session
        for what `session` offers), or None: the core's generic single-op path runs it."""
        return None

    # ------------------------------------------------------------- reports

    def computes_for(self, case) -> list[str]:
        """["file::function"] that compute the results of `case`'s op (`computes`; [] when unknown)."""
        return list(self.computes.get(case.op) or self.computes.get(case.kind)
                    or self.computes.get(case.op.split("-")[0]) or [])

    def rerun_args(self, path) -> list[str]:
        """The options naming this reference's clone in a rerun command line."""
        return ["--ref", str(path)]

    def how_to_give(self) -> str:
        """How a user gives this reference's clone, for "not checked" lines."""
        return f"--ref PATH or set ${self.env_var}"

    def not_checked(self, loops_left_out: bool = False) -> str:
        """The ops a report lists as not checked: every op, or (loops_left_out) the loop ops."""
        return ", ".join(self.loop_ops if loops_left_out else self.all_ops())

    def never_checked(self) -> list[tuple[str, str]]:
        """[(what, why)]: parts of the reference parity never checks, listed in every report that runs it
        (none by default)."""
        return []

    def finding(self, key: str) -> str:
        """The description of finding `key` (KeyError names the adapter's findings)."""
        if key not in self.findings:
            raise KeyError(f"{self.name}: unknown finding {key!r}; known: {sorted(self.findings)}")
        return self.findings[key]

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name}>"


def even(n: int) -> int:
    """n, or n + 1 when odd (mirrored pairs need an even population, docs/numerics.md §4)."""
    return n + n % 2


__all__ = ["Adapter", "Cell", "LoopSpec", "MatrixSpec", "even", "replace"]
