"""`goldens check`: recompute every golden vector on every backend and compare bits.

For each area: load and validate `<goldens dir>/<area>.json`, refuse a
file whose contract name or version differs from the implementation's,
then ask each backend the area lists to recompute every vector and
compare bit patterns (compare.py). Optionally compare the files with
those committed at a git ref (history.py).

Outcome (exit codes are part of the CLI contract):
  0  every bit equal (libm-divergence rows allowed unless strict);
  1  any mismatch, recompute error, or change since --against REF without a version move;
  2  a file missing (for a required area), unreadable, failing the schema,
     with a version different from the implementation's, an area module
     that does not import while its goldens exist, a requested backend that
     is not available here, or an unknown --against ref (the CLI adds: a
     --json/--junit report that cannot be written).
Every registered area must have its golden file: an area without goldens
is an unchecked contract.

Before anything runs, a process that flushes subnormals to zero
(`esverify.numerics_probe`) is refused (exit 2): its results in the
subnormal range are not the contract's. Sizes a vector declares (n, shapes,
populations) are checked against its expected values before any backend
computes (exit 2 on a disagreement). libm-divergence rows are allowed only
up to `libm_allowance(n)` per (area, backend); above it the gate fails with a
`systematic-divergence` row (docs/goldens.md says how the cap was chosen).
The numpy version is part of what the profiles depend on (docs/numerics.md §2: z-score
takes numpy's own mean and std): the result records it.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from .. import numerics_probe
from . import areas as area_mod
from . import compare, digest, fileformat, history
from .compare import LIBM_RATE_CAP, libm_allowance

@dataclass
class CheckResult:
    rows: list = field(default_factory=list)        #: compare.row dicts (failures and divergences)
    summary: list = field(default_factory=list)     #: one dict per (area, backend)
    errors: list = field(default_factory=list)      #: exit-2 reasons
    environment: dict = field(default_factory=lambda: {"numpy": np.__version__})  #: what the profiles depend on

    @property
    def table(self) -> pd.DataFrame:
        return compare.frame(self.rows)

    def exit_code(self, strict: bool) -> int:
        if self.errors:
            return 2
        bad = set(compare.FAILING) | ({compare.LIBM_DIVERGENCE} if strict else set())
        return 1 if any(r["status"] in bad for r in self.rows) else 0

    def verdict(self, strict: bool) -> str:
        code = self.exit_code(strict)
        n_vec = sum(s["vectors"] for s in self.summary)
        backends = sorted({s["backend"] for s in self.summary})
        div = sum(r["status"] == compare.LIBM_DIVERGENCE for r in self.rows)
        fails = sum(r["status"] in compare.FAILING for r in self.rows)
        if code == 2:
            return "goldens check: ERROR (exit 2): " + "; ".join(self.errors)
        numpy = f" (numpy {self.environment['numpy']})"
        tail = f"; {div} libm-divergence value(s)" + (" (fail under --strict)" if strict else "") if div else ""
        unsupported = sum(r["status"] == compare.UNSUPPORTED for r in self.rows)
        if unsupported:   # an --impl that does not claim a vector's needs: listed, never counted as equal
            n_vec -= unsupported
            numpy += f"; {unsupported} vector(s) unsupported by the implementation"
        if code == 1:
            return (f"goldens check: FAIL (exit 1): {fails} failing row(s){tail}, "
                    f"{n_vec} vector recomputations on {', '.join(backends) or 'no backend'}{numpy}")
        if div:   # never "bit-equal" when a value differs
            return (f"goldens check: PASS: {n_vec} vector recomputations on {', '.join(backends) or 'no backend'}; "
                    f"{div} value(s) differ by one f32 ulp (libm-divergence, within the cap per area and "
                    f"backend), every other value identical{numpy}")
        return (f"goldens check: PASS: {n_vec} vector recomputations bit-equal on "
                f"{', '.join(backends) or 'no backend'}{numpy}")


def _load_area(name: str, result: CheckResult):
    try:
        return area_mod.get_area(name)
    except Exception as exc:  # a broken area module must not hide the other areas' results
        reason = f"module {area_mod.AREA_MODULES.get(name, '?')} does not import ({type(exc).__name__}: {exc})"
        result.errors.append(f"area {name!r}: {reason}; its goldens cannot be checked")
        return None


def check(goldens_dir: Path, areas: list[str] | None = None, backends: list[str] | None = None,
          against: str | None = None, impl=None) -> CheckResult:
    """Run the gate over `areas` (default: every registered area) in `goldens_dir`.

    `backends` restricts the backends (names as the area lists them); one
    that is not available here is an exit-2 error (a CI job asking for
    torch-cuda must not pass on a machine without CUDA). Returns a CheckResult; never raises for a bad
    golden file (it becomes an exit-2 error) or a backend exception (an `error` row).
    `impl`: an esverify.goldens.impl_target.ImplTarget (``--impl CMD``), recomputing every vector through
    that wrapper instead of the backends (the caller closes it); its setup failure is exit 2.
    """
    result = CheckResult()
    flush = numerics_probe.flush_to_zero_status()
    if flush.flushing:   # before anything runs: every subnormal result would be wrong
        result.errors.append(flush.message())
        return result
    fileformat.clean_stale_temps(goldens_dir)
    names = list(areas) if areas is not None else area_mod.area_names()
    from .. import registry
    result.environment["plugin_problems"] = registry.problems()   # a name a plug-in claimed twice: reported
    for name in names:
        if name not in area_mod.AREA_MODULES:
            result.errors.append(f"unknown golden area {name!r}; known: {sorted(area_mod.AREA_MODULES)}")
    if result.errors:
        return result
    if impl is not None:
        setup = impl.open()
        if setup:
            result.errors.append(setup)
            return result
        result.rows += impl.requirement_rows()
    git = None
    if against is not None:
        try:
            git = history.resolve(goldens_dir, against)
        except history.GitRefError as exc:
            result.errors.append(str(exc))
            return result
    for name in names:
        path = fileformat.golden_path(goldens_dir, name)
        area = _load_area(name, result)
        if impl is not None and area is not None:
            area = impl.as_area(area)
        doc = None
        try:
            doc = fileformat.load(path)
        except fileformat.GoldenFileError as exc:
            result.errors.append(str(exc))
        if git is not None:
            try:
                old = history.load_at(git[0], git[1], path, against)
            except fileformat.GoldenFileError as exc:
                result.errors.append(str(exc))
                old = None
            result.rows += history.against_rows(name, old, doc, against)
        if doc is None or area is None:
            continue
        contract = doc["contract"]
        if contract["name"] != name:
            result.errors.append(f"{path} names contract {contract['name']!r}, expected {name!r}")
            continue
        if contract["version"] != area.version:
            result.errors.append(f"{path} records {name} version {contract['version']} but the implementation's "
                                 f"{area.version_constant} is {area.version} (file version vs constant)")
            continue
        problems = _size_problems(area, doc, path)
        if problems:   # before computing: a vector asking for 2e7 values where 5 are expected
            result.errors += problems
            continue
        _recompute_area(area, doc, backends, result)
    return result


def _size_problems(area, doc, path) -> list[str]:
    """Every vector whose declared sizes disagree with its expected values (area.check_sizes), named."""
    if area.check_sizes is None:
        return []
    out = []
    for vector in doc["vectors"]:
        try:
            problems = area.check_sizes(vector)
        except Exception as exc:  # a field the kind needs is missing or of the wrong type
            problems = [f"malformed for its kind ({type(exc).__name__}: {exc})"]
        for problem in problems:
            out.append(f"{path}: vector {vector['id']!r}: {problem} (refused before computing)")
            if len(out) >= 20:
                return out + ["... (more vectors not listed)"]
    return out


def _libm_values(vector: dict) -> int:
    if not compare.is_libm_class(vector):
        return 0
    if digest.is_digest(vector):   # a digest stands for `count` values of the stream
        return digest.count_of(vector)
    return sum(len(f["values"]) for f in vector["expected"].values())


def _located(area, vector, backend, got, rows) -> list:
    """A failing vector's rows replaced by the first differing values (a digest's element, a chain's
    iteration and element), found by asking the backend again (Area.locate); unchanged when the area
    does not locate this kind (locate returns None)."""
    try:
        located = area.locate(vector, backend, got)
    except Exception as exc:  # locating is a courtesy: the compared rows still fail the vector
        return rows + [compare.row(area.name, backend, vector["id"], status="error",
                                   detail=f"the vector differs; locating the first difference failed "
                                          f"({type(exc).__name__}: {exc})")]
    return rows if located is None else located


def _recompute_area(area, doc, backends, result: CheckResult) -> None:
    available = list(area.backends())
    chosen = available if backends is None else [b for b in backends if b in available]
    if backends is not None:
        missing = [b for b in backends if b not in available]
        if missing:
            result.errors.append(f"area {area.name}: backend(s) {missing} requested but not available here "
                                 f"(available: {available})")
    for backend in chosen:
        started = time.perf_counter()
        rows = []
        for vector in doc["vectors"]:
            try:
                got = area.recompute(vector, backend)
            except Exception as exc:  # a crashing backend is a finding, not a crash of the gate
                # impl targets raise exceptions carrying a status (error, unsupported) and a detail
                rows.append(compare.row(area.name, backend, vector["id"], status=getattr(exc, "status", "error"),
                                        detail=getattr(exc, "detail", None)
                                        or f"recompute raised {type(exc).__name__}: {exc}"))
                continue
            trace = None
            if area.libm_trace is not None:
                trace = (lambda v=vector, b=backend: area.libm_trace(v, b))
            found = compare.compare_vector(area.name, backend, vector, got, libm_trace=trace)
            if found and area.locate is not None:
                found = _located(area, vector, backend, got, found)
            rows += found
        n_libm = sum(_libm_values(v) for v in doc["vectors"])
        div, cap = sum(r["status"] == compare.LIBM_DIVERGENCE for r in rows), libm_allowance(n_libm)
        if div > cap:
            rows.append(compare.row(area.name, backend, None, status=compare.SYSTEMATIC,
                                    detail=f"{div} libm-divergence values among {n_libm} libm-class values "
                                           f"(rate {div / max(n_libm, 1):.2e}) exceed the cap of {cap} "
                                           f"(rate cap {LIBM_RATE_CAP:g}; the contract expects about 1e-8): "
                                           f"this backend's libm differs systematically"))
        result.rows += rows
        result.summary.append({
            "area": area.name, "backend": backend, "vectors": len(doc["vectors"]),
            "mismatches": sum(r["status"] in compare.FAILING for r in rows),
            "libm_divergences": div, "libm_cap": cap,
            "unsupported": sum(r["status"] == compare.UNSUPPORTED for r in rows),
            "seconds": round(time.perf_counter() - started, 3)})
