"""The core's Adapter of a reference written as a spec (esverify.oracle.spec.ReferenceSpec).

Design record: a reference writes twelve members; the core keeps its rich
view (esverify.oracle.adapters.base.Adapter, the members the cases, rows,
sessions and reports read) and this class answers it from the spec, so
the core reads every reference alike, whether it subclasses Adapter or
writes a spec. `adapter_of` builds one Adapter per spec object, so that
every lookup of a reference returns the same adapter.
"""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from ..case_model import Case, Cell
from ..spec import NO_NOISE_CELL, ChildRequest, LoopSpec, ReferenceSpec
from .base import Adapter

#: id(spec) -> (spec, its adapter): the spec is kept so that its id is not reused
_BUILT: dict = {}


def adapter_of(spec: ReferenceSpec) -> SpecAdapter:
    """The SpecAdapter of `spec` (the same object for the same spec); TypeError when it is not a ReferenceSpec."""
    if not isinstance(spec, ReferenceSpec):
        raise TypeError(f"{spec!r} is not a ReferenceSpec")
    built = _BUILT.get(id(spec))
    if built is None or built[0] is not spec:
        built = _BUILT[id(spec)] = (spec, SpecAdapter(spec))
    return built[1]


class SpecAdapter(Adapter):
    """The Adapter of one ReferenceSpec: its data fields become the Adapter's attributes, its hooks and the
    optional callables of its clone and ops answer the Adapter's methods (each with the spec's documented
    default when it is None)."""

    def __init__(self, spec: ReferenceSpec):
        self.spec = spec
        clone, ops, texts = spec.clone, spec.ops, spec.texts
        self.name, self.driver, self.profile = spec.name, spec.driver, spec.profile
        self.files, self.ops_need, self.identifying = dict(clone.files), dict(clone.needs), clone.identifying
        self.licence, self.validated_commit = clone.licence, clone.validated_commit
        self.env_var, self.default_path, self.alias_flag = clone.env_var, clone.default_path, clone.alias_flag
        self.child_needs = tuple(clone.child_needs)          # read by esverify.oracle.interpreters
        self.standalone_child = clone.standalone_child      # interpreters, runner, session: no torch there
        self.ops, self.loop_ops, self.layered_ops = tuple(ops.single), tuple(ops.loops), tuple(ops.layered)
        self.sweep_op, self.fuzz_ops = ops.sweep, tuple(ops.fuzz)
        self.summary, self.reached, self.findings = texts.summary, dict(texts.reached), dict(texts.findings)
        self.computes, self.paths = dict(texts.computes), tuple(texts.paths)   # paths: esverify.oracle.run_paths
        self.native = texts.native   # whose generator its native rows draw from (the console's legend)
        if spec.ours.nonfinite_update is not None:   # read with getattr by the non-finite rows
            self.nonfinite_update = spec.ours.nonfinite_update

    # ------------------------------------------------------------ the clone: the spec's callables, else the defaults

    def recognise(self, path: Path) -> str | None:
        recognise = self.spec.clone.recognise
        return super().recognise(path) if recognise is None else recognise(path)

    def layout(self, path: Path) -> dict:
        layout = self.spec.clone.layout
        return super().layout(path) if layout is None else dict(layout(path))

    def accepts_file(self) -> bool:
        return self.spec.clone.single_file

    def clone_root(self, path: Path) -> Path:
        path = Path(path)   # a one-module reference named by its file: the child starts in the file's folder
        return path.parent if self.spec.clone.single_file and path.is_file() else path

    def looks_for(self) -> str:
        return self.spec.clone.looks_for or super().looks_for()

    def how_to_give(self) -> str:
        return self.spec.clone.how_to_give or super().how_to_give()

    # ------------------------------------------------------------ cases: the reference's own, or one hook at
    # three places of the matrix

    def cases(self, matrix) -> list:
        own = self.spec.ops.matrix
        return super().cases(matrix) if own is None else list(own(matrix))

    def check_case(self, case) -> None:
        check = self.spec.ops.check
        if check is None:
            super().check_case(case)
        else:
            check(case)

    def random_case(self, rng, device: str, noises, iterations: int = 2):
        draw = self.spec.ops.draw
        return super().random_case(rng, device, noises, iterations) if draw is None else \
            draw(rng, device, noises, iterations)

    def shrink_candidates(self, case) -> list:
        shrink = self.spec.ops.shrink
        return super().shrink_candidates(case) if shrink is None else list(shrink(case))

    def _ask(self, matrix, cell: Cell, keep: tuple) -> list:
        """[(op, n, big, tag, extra, rewards, layered)] of the ops in `keep` that the `cases` hook adds for
        `cell` (the default hook: each noiseless op once in the cell without noise; each other single op,
        and each loop op on small tensors, once per cell with noise)."""
        added = []

        def add(op, n, big=False, tag="", extra=None, rewards="normal", layered=False):
            if op in keep:
                added.append((op, n, big, tag, extra, rewards, layered))
        if self.spec.cases is not None:
            self.spec.cases(matrix, replace(cell, add=add))
        elif (cell.noise, cell.scheme, cell.dtype) == NO_NOISE_CELL:
            for op in self.spec.ops.noiseless:
                add(op, cell.population)
        else:
            for op in self.ops:
                add(op, cell.population, cell.big)
            for op in self.loop_ops:
                add(op, cell.population)
        return added

    def device_cases(self, matrix, device, population, add) -> None:
        if not self.spec.ops.noiseless:
            return
        noise, scheme, dtype = NO_NOISE_CELL
        cell = Cell(device, noise, dtype, scheme, population, False, False, scheme)
        for op, n, big, tag, extra, rewards, layered in self._ask(matrix, cell, self.spec.ops.noiseless):
            add(dtype, scheme, op, n, noise, big=big, tag=tag, extra=extra, rewards=rewards, layered=layered)

    def cell_cases(self, matrix, cell) -> None:
        keep = tuple(op for op in self.ops if op not in self.spec.ops.noiseless)
        for op, n, big, tag, extra, rewards, layered in self._ask(matrix, cell, keep):
            cell.add(op, n, big, tag, extra, rewards, layered)

    def loop_cases(self, device, dtype, scheme, population, sigma, alpha, iterations, noise="contract") -> list:
        from ..set_shapes import LAYERED_SHAPES, LAYERED_TIES
        from .casebook import MatrixSpec
        # the hook sees the one cell these loop rows belong to: its device, dtype, scheme, noise, population
        # and iterations; the run's other matrix options (small, case_seed, loops) are not passed down here
        # (the core's walk has already applied them: loop rows are asked only when loops are on)
        matrix = MatrixSpec(devices=(device,), dtypes=(dtype,), schemes=(scheme,), population=population,
                            iterations=iterations, noises=(noise,))
        cell = Cell(device, noise, dtype, scheme, population, False, False, scheme)
        out = []
        for op, n, big, tag, extra, rewards, layered in self._ask(matrix, cell, self.loop_ops):
            case = Case(self.name, device, dtype, scheme, op, n, sigma, alpha, big, dict(extra or {}), tag, noise,
                        rewards=rewards)
            if layered:
                case.shapes, case.ties = LAYERED_SHAPES, LAYERED_TIES
            out.append(case)
        return out

    # ------------------------------------------------------------ rows

    def _request(self, case) -> ChildRequest:
        return ChildRequest() if self.spec.request is None else self.spec.request(case)

    def set_variant(self, case) -> str:
        return self._request(case).variant

    def needs_anchor(self, case) -> bool:
        return self._request(case).anchor

    def rule_for(self, device: str) -> str:
        rule = self.spec.ours.rule
        return super().rule_for(device) if rule is None else rule(device)

    def loop_spec(self, case) -> LoopSpec:
        if self.spec.loop is None:
            return super().loop_spec(case)
        from ..rewards import with_nonfinite_target
        spec = self.spec.loop(case)
        spec = replace(spec, data=with_nonfinite_target(spec.data, case.extra.get("rewards")))
        return spec if self.spec.quirks is None else replace(spec, quirks=self.spec.quirks)

    def run_row(self, session, case):
        return None if self.spec.run_row is None else self.spec.run_row(session, case)

    # ------------------------------------------------------------ reports

    def not_checked(self, loops_left_out: bool = False) -> str:
        more = self.spec.texts.not_checked
        return super().not_checked(loops_left_out) + (f" ({more})" if more else "")

    def never_checked(self) -> list[tuple[str, str]]:
        return [tuple(pair) for pair in self.spec.texts.never_checked]


__all__ = ["SpecAdapter", "adapter_of"]
