"""A reference as data: the spec a reference package writes (CONTRIBUTING.md, "Adding a reference").

Design record: the oracle core reads a reference through the rich interface
of esverify.oracle.adapters.base.Adapter (46 members over four parts). A
reference need not write that interface: it writes one `ReferenceSpec`, a
frozen record of at most twelve members (six of data, six hooks with plain
defaults), and the core builds its Adapter from it
(esverify.oracle.adapters.from_spec.SpecAdapter), as the goldens gate
reads an `esverify.goldens.area.Area` and the replay a `RunLogFormat`:
required fields, a few optional callables, and the core never branches on
a name. Every member is documented in one place: the docstring of its
record below.

This module is a leaf a reference may import: it imports nothing of
esverify.oracle (the case and cell types a hook receives are
esverify.oracle.case_model's). `LoopSpec` and `LoopQuirks` live here for
that reason (esverify.oracle.adapters.loopspec re-exports them).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

#: the noise, scheme and dtype of the one cell per device whose cases draw no noise (z-scores, in f64)
NO_NOISE_CELL = ("-", "-", "f64")


def even(n: int) -> int:
    """n, or n + 1 when odd (mirrored pairs need an even population, docs/numerics.md §4)."""
    return n + n % 2


@dataclass(frozen=True)
class CloneSpec:
    """Where a reference's clone is and how it is recognised (esverify.oracle.clones; docs/references.md §4).

    files: module key -> path relative to the clone root (a clone is recognised by any of them, or by
    one of `identifying`); needs: op (or op family, the part of the op before "-") -> the module key its
    rows need (that module's load error is the row's error); licence: the licence file's name in the
    clone; validated_commit: the commit prefix docs/references.md was validated against ("": none);
    env_var: the environment variable naming the clone when no --ref is given; default_path: the clone
    path tried last, relative to the working directory; identifying: the module keys whose file alone
    identifies a clone (None: every key of `files`; a generic name such as es.py is no clone without
    one of these beside it); child_needs: Python modules the child interpreter must have besides torch
    and numpy (checked before a run, docs/parity.md); alias_flag: a deprecated option naming this clone
    (e.g. "--<name>-ref"), or None; it must repeat the reference record's `alias_option`;
    standalone_child: the driver speaks the child protocol itself and imports nothing of the shared child
    runtime (oracles/, which imports torch), as a JAX reference's does: `child_needs` is then all its
    child needs (torch and numpy are not added) and its child is never forked from a warm start server
    (which imports torch).

    For a clone that is not a fixed set of files (each None or empty by default, with the plain behaviour
    said here): recognise(path) -> None when the folder (or file) `path` is a clone of the reference, else
    the reason it is not, one line (None: at least one of the files `identifying` names is there);
    layout(path) -> module key -> path relative to the clone root, as the clone at `path` has them (None:
    `files`, for a reference whose files sit in different folders in different clones); single_file: the
    reference is one module: `--ref` may name its .py file, and the child starts in that file's folder;
    looks_for: one line saying what a clone has, for the "no reference adapter recognises PATH" error
    ("": one of `files`); how_to_give: how a user gives the clone, for a report's "not checked" lines
    ("": "--ref PATH or set $<env_var>")."""
    files: dict
    needs: dict = field(default_factory=dict)
    licence: str = ""
    validated_commit: str = ""
    env_var: str = ""
    default_path: str = ""
    identifying: tuple | None = None
    child_needs: tuple = ()
    alias_flag: str | None = None
    recognise: Callable[[Path], str | None] | None = None
    layout: Callable[[Path], dict] | None = None
    single_file: bool = False
    looks_for: str = ""
    how_to_give: str = ""
    standalone_child: bool = False


@dataclass(frozen=True)
class OpsSpec:
    """The ops of a reference (docs/parity.md, "The matrix"), each a string naming a call of its child driver.

    single: the single-operation ops, in report order; loops: the training-loop ops (each needs the
    spec's `loop`); layered: the ops run on the `layers` set (several layers, a tied head); sweep: the op
    the population sweep and the reward populations run (None: none); fuzz: the ops `--fuzz` draws
    from (repeats weight them); noiseless: the single ops whose cases draw no noise (z-scores, in f64):
    their cases are added once per device, in the cell of no noise (NO_NOISE_CELL), and only there.

    For a reference whose cases are its own (each None by default, with the plain behaviour said here; a
    Case is esverify.oracle.case_model's): matrix(matrix) -> [Case]: its whole share of the matrix (the
    esverify.oracle.adapters.MatrixSpec), in report order, ids unique, for rows that are not one per cell
    (fixed settings of their own, e.g. one row per script): it replaces the core's walk over the cells,
    so the spec's `cases` hook, `sweep` and `layered` go unused (None: the walk); check(case) -> None:
    ValueError with the reason when `case` is not a case of the reference (what every case shares is the
    core's check; None: its op must be one of `single` and `loops`); draw(rng, device, noises,
    iterations) -> Case: one random case for `--fuzz` (rng: a numpy Generator; None: the core draws one of
    the `fuzz` ops); shrink(case) -> [Case]: simpler variants of a failing case, simplest first, each
    passing `check` (None: the core's generic shrink)."""
    single: tuple = ()
    loops: tuple = ()
    layered: tuple = ()
    sweep: str | None = None
    fuzz: tuple = ()
    noiseless: tuple = ()
    matrix: Callable | None = None
    check: Callable | None = None
    draw: Callable | None = None
    shrink: Callable | None = None


@dataclass(frozen=True)
class ReportTexts:
    """What the reports say of a reference (esverify.oracle.parity_report, loop_report, blame, run_paths).

    summary: one line saying what the reference is; reached: clone file -> the functions its loops reach
    (docs/references.md §5; the coverage section); findings: finding key -> the description of a documented
    quirk a row may record; computes: op (or op family) -> ["clone file::qualified function"] computing its
    results (a failing row of a clean clone names them, docs/parity.md "Blame"); never_checked: ((what,
    why), ...) parts of the reference parity never checks, listed in every report that runs it; paths:
    ((what, selected by, (case-id patterns, ...)), ...) the code paths a run can reach (the run-paths
    section); not_checked: what a report's "not checked" line adds, in parentheses, after the ops it lists
    ("": nothing); native: whose generator draws the noise of its native rows, as the console's legend
    names it ("torch's": a torch reference's)."""
    summary: str = ""
    reached: dict = field(default_factory=dict)
    findings: dict = field(default_factory=dict)
    computes: dict = field(default_factory=dict)
    never_checked: tuple = ()
    paths: tuple = ()
    not_checked: str = ""
    native: str = "torch's"


@dataclass(frozen=True)
class ChildRequest:
    """What the child is handed for a single-op case besides the case (esverify.oracle.paramsets).

    variant: the parameter set's variant the case starts from ("base"; "offset": theta differs from the
    anchor); anchor: whether the case also gets the anchor set (anchored decay)."""
    variant: str = "base"
    anchor: bool = False


@dataclass(frozen=True)
class OurSide:
    """How our (clean-room) side runs a reference's cases, beyond its numerics profile (esverify.es.profiles).

    rule(device name) -> the profile rule a case on that device runs under (None: the profile's own
    `rule_for` when it has several rules, else ""); nonfinite_update(params, noise, coeffs, alpha,
    population): the reference's update as it writes it, in torch calls on whole tensors, for the rows
    with non-finite rewards (esverify.oracle.nonfinite.update; None: the trainer's arithmetic)."""
    rule: Callable[[str], str] | None = None
    nonfinite_update: Callable | None = None


class LoopQuirks:
    """What a reference's training loop does its own way, as code of its package (docs/references.md §5):
    the core's loop row (esverify.oracle.loop_rows, loop_compare) calls these hooks; the defaults are a loop
    that makes num_iterations updates, numbers its records from 1, saves its final weights with torch.save,
    and leaves the determinism switch alone. A reference overrides what its loop does otherwise."""

    def updates(self, iterations: int) -> int:
        """How many updates the loop makes for num_iterations `iterations`."""
        return iterations

    def record_number(self, index: int) -> int:
        """The iteration number the loop's record of its `index`-th update (from 0) carries."""
        return index + 1

    def deterministic(self, global_seed) -> bool:
        """Whether the loop's entry point switches torch.use_deterministic_algorithms on for `global_seed`
        (our side then runs under the same setting)."""
        return False

    def save_missing(self, theirs: dict) -> str | None:
        """Why the loop's tape `theirs` lacks the final save the loop makes (None: it has it). The default:
        the final weights saved with torch.save (`theirs["saved"]`)."""
        return None if theirs.get("saved") else "final state_dict: theirs saved none with torch.save"

    def notes(self, session, case, ours: dict, theirs: dict) -> list[str]:
        """Notes the row carries for what the reference's loop did its own way in this run (a quirk seen:
        `session.record_finding` lists it among the findings); none by default."""
        return []


@dataclass(frozen=True)
class LoopSpec:
    """How the core replays one training-loop row of a reference (esverify.oracle.loop_rows).

    style: "batched" (every member evaluated on each mini-batch of `data`, the batch-weighted mean
    reward per member, z-scores handed over explicitly) or "passes" (one pass over the members per sign,
    the mean reward over `data`, mirrored pairs when `mirror`); engines: engines the members are
    grouped over; schedule: the seed schedule of esverify.es.schedule (and its FIRST_ITERATION key);
    data, mini_batch: the reward targets of an iteration and the mini-batch size (batched);
    mirror, caching, decay, lam: the loop's sampling and anchored-decay settings (caching None: its
    perturb/restore take no such argument); engine_dtype: the precision the reference documents
    launching its engines with ("bfloat16", "float16", "float32"; "auto": the weights' own): our rewards
    are computed in it, the stand-in engines compute theirs in what the loop really launched
    (docs/parity.md, "The training loops"); command: the op-specific fields of the child's loop command;
    quirks: what the loop does its own way (`LoopQuirks`, code of the reference's package). (A loop whose
    caching=True reuses noise needs no flag: the hook sees the reuse and the one rule of every row judges
    it, esverify.oracle.compare.judge_reuse.)"""
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
    engine_dtype: str = "auto"
    quirks: LoopQuirks = field(default_factory=LoopQuirks)


@dataclass(frozen=True)
class ReferenceSpec:
    """One reference as the oracle core needs it: six data fields and six hooks (CONTRIBUTING.md, "Adding
    a reference"). A reference package exposes one as its record's `adapter` ("package.module:SPEC");
    esverify.oracle.adapters.get builds the core's Adapter from it.

    Data:
      name: the reference's name: the first part of every case id, the report's `target` column; it is
        its record's name.
      clone: its clone's layout and recognition (`CloneSpec`).
      ops: its ops (`OpsSpec`).
      driver: the child driver, an absolute path in the reference's own package (a built-in's is its
        child/driver.py), run by path in the child beside the shared child runtime (oracles/); the other
        .py files of its folder and its interfaces.json are copied beside it.
      profile: the numerics profile (esverify.es.profiles) our side runs its cases under.
      texts: what the reports say of it (`ReportTexts`; default: nothing).

    Hooks (None by default but `ours`, an OurSide, and `quirks`, a LoopQuirks instance; the plain behaviour
    of each default is said here):
      cases(matrix, cell) -> None: adds the cases of one cell of the matrix with cell.add(op, n, big=False,
        tag="", extra=None, rewards="normal", layered=False) (esverify.oracle.case_model.Cell; matrix: the
        esverify.oracle.adapters.MatrixSpec, e.g. its `iterations`). Loop ops may be added with the single
        ops: the core puts them where the loop rows go and leaves them out under --no-loops; the hook is
        asked once for the single ops and once for the loop ops of a cell, and (with ops.noiseless) once
        per device with the cell of no noise (noise, scheme, dtype = NO_NOISE_CELL); each time the core
        keeps only the cases it asked for. The population sweep, the reward populations and the `layers`
        rows the core adds from `ops`. None: each of ops.noiseless once in the cell of no noise, each other
        op of ops.single once per cell with noise at the cell's population and set, and each of ops.loops
        once per cell with noise at the cell's population. (A reference whose rows are not one per cell
        writes ops.matrix instead.)
      request(case) -> ChildRequest: what the child is handed for a single-op case (None: ChildRequest()).
      ours: how our side runs its cases beyond the profile (`OurSide`: the profile rule of a device, the
        reference's own update for non-finite rewards; default: OurSide()).
      loop(case) -> LoopSpec: how the core replays the loop row `case` (required when ops.loops is not
        empty, unless `run_row` runs those rows). Its `data` are the finite targets: the core makes the
        first one NaN or infinite for a case whose extra names non-finite rewards
        (esverify.oracle.rewards.with_nonfinite_target).
      quirks: the LoopQuirks of every loop row (None: what `loop`'s LoopSpec names, by default none).
      run_row(session, case) -> the first result of a row kind the core lacks (an
        esverify.oracle.verdict.Outcome, which the core judges: a reference never decides a verdict), or
        None for the core's own path (None: always the core's).
        The core's services reach it through `session.tools` (esverify.oracle.row_tools.RowTools): the child
        round trip (exchange), the bitwise comparison (compare, findings), the parameter sets (read_set,
        tensor_bits, dtype_name) and the loops' reward (reward, with_nonfinite_target); a reference imports
        none of them.

    ValueError (at construction) for an empty name, or loop ops with neither `loop` nor `run_row` (a
    reference that runs its loop rows itself needs no LoopSpec)."""
    name: str
    clone: CloneSpec
    ops: OpsSpec
    driver: str
    profile: str
    texts: ReportTexts = ReportTexts()
    cases: Callable | None = None
    request: Callable | None = None
    ours: OurSide = OurSide()
    loop: Callable | None = None
    quirks: LoopQuirks | None = None
    run_row: Callable | None = None

    def __post_init__(self):
        if not self.name:
            raise ValueError("ReferenceSpec: name must not be empty")
        if self.ops.loops and self.loop is None and self.run_row is None:
            raise ValueError(f"ReferenceSpec {self.name!r}: loop ops {self.ops.loops} need a `loop` hook "
                             "(or a `run_row` that runs them)")


__all__ = ["ChildRequest", "CloneSpec", "LoopQuirks", "LoopSpec", "NO_NOISE_CELL", "OpsSpec", "OurSide",
           "ReferenceSpec", "ReportTexts", "even"]
