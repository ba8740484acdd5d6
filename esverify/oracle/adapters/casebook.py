"""The cases part of a reference adapter: its ops and its share of the default matrix (docs/parity.md,
"The matrix"); see esverify.oracle.adapters.clone for the four parts."""
from __future__ import annotations

from dataclasses import dataclass

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


class CaseBook:
    """A reference's cases: the ops it has, its part of the default matrix, and how a case of it is checked,
    drawn (`--fuzz`) and shrunk. Subclasses provide `ops` and `cell_cases`."""

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
