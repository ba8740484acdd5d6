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
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from . import area as area_mod
from . import compare, fileformat, history

@dataclass
class CheckResult:
    rows: list = field(default_factory=list)        #: compare.row dicts (failures and divergences)
    summary: list = field(default_factory=list)     #: one dict per (area, backend)
    errors: list = field(default_factory=list)      #: exit-2 reasons

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
        tail = f"; {div} libm-divergence value(s)" + (" (fail under --strict)" if strict else " (allowed)") if div else ""
        unsupported = sum(r["status"] == compare.UNSUPPORTED for r in self.rows)
        if unsupported:   # an --impl that does not claim a vector's needs: listed, never counted as equal
            n_vec -= unsupported
            tail += f"; {unsupported} vector(s) unsupported by the implementation"
        if code == 1:
            return (f"goldens check: FAIL (exit 1): {fails} failing row(s){tail}, "
                    f"{n_vec} vector recomputations on {', '.join(backends) or 'no backend'}")
        return (f"goldens check: PASS: {n_vec} vector recomputations bit-equal on "
                f"{', '.join(backends) or 'no backend'}{tail}")


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
    `impl`: an esverify.impl.target.ImplTarget (``--impl CMD``), recomputing every vector through
    that wrapper instead of the backends (the caller closes it); its setup failure is exit 2.
    """
    result = CheckResult()
    names = list(areas) if areas is not None else area_mod.area_names()
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
        _recompute_area(area, doc, backends, result)
    return result


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
            rows += compare.compare_vector(area.name, backend, vector, got)
        result.rows += rows
        result.summary.append({
            "area": area.name, "backend": backend, "vectors": len(doc["vectors"]),
            "mismatches": sum(r["status"] in compare.FAILING for r in rows),
            "libm_divergences": sum(r["status"] == compare.LIBM_DIVERGENCE for r in rows),
            "unsupported": sum(r["status"] == compare.UNSUPPORTED for r in rows),
            "seconds": round(time.perf_counter() - started, 3)})
