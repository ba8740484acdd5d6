"""`esverify goldens generate|check` (click). Exit codes are documented in docs/goldens.md.

The goldens folder is the checkout's `goldens/` (or the wheel's copy);
`--goldens-dir` / ESVERIFY_GOLDENS_DIR overrides it so that tests and
experiments never touch the committed files.
"""
from __future__ import annotations

import sys
from pathlib import Path

import click

from .. import paths, report
from ..cliutil import CONTEXT
from ..interrupt import VERDICT as INTERRUPTED
from ..interrupt import Interrupted, catching
from ..outputs import OutputError, check_file, check_folder
from ..reportset import ReportSet
from . import areas as area_mod

#: every backend label an area can list (esverify.rng.backend_targets); `torch-cuda` needs a GPU
BACKEND_LABELS = ("numpy", "numba", "torch-cpu", "torch-cuda")


def _backends(ctx, param, values) -> tuple:
    """Refuse a misspelt backend once, up front, naming the valid labels."""
    unknown = [v for v in values if v not in BACKEND_LABELS]
    if unknown:
        raise click.BadParameter(f"unknown backend {', '.join(map(repr, unknown))}; valid names: "
                                 f"{', '.join(BACKEND_LABELS)}", ctx, param)
    return values


def _check_outputs(pairs) -> None:
    """Every report destination is checked before any work (exit 2, one line naming path and reason)."""
    for option, path, kind in pairs:
        if path is None:
            continue
        try:
            check_file(path, option) if kind == "file" else check_folder(path, option)
        except OutputError as exc:
            click.echo(f"esverify goldens: error: {exc}", err=True)
            sys.exit(2)

GOLDENS_DIR_OPTION = click.option(
    "--goldens-dir", type=click.Path(file_okay=False, path_type=Path), envvar="ESVERIFY_GOLDENS_DIR",
    default=None, help="Folder of the golden files (default: the checkout's goldens/ or the installed copy; "
                       "env ESVERIFY_GOLDENS_DIR).")


@click.group(context_settings=CONTEXT)
def goldens():
    """Bit-level golden vectors: generate them from the reference, check every backend against them.

    Exit codes: see `esverify goldens check -h` and `esverify goldens generate -h` (0 pass, 1 fail or
    refused, 2 cannot run, 128+N stopped by signal N).
    """


@goldens.command()
@click.option("--area", "areas", multiple=True, metavar="AREA",
              help="Area(s) to generate (repeatable; default: every registered area, the contract's `rng` "
                   "and each reference's, as `goldens check` lists them).")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Write the files here instead of the goldens folder.")
@click.option("--bump", is_flag=True, help="Allow changed or removed vector ids: checks that the area's version "
                                           "constant was incremented and CHANGELOG.md has '## <area> v<N>'.")
@click.option("--changelog", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="CHANGELOG.md checked by --bump (default: beside the goldens folder).")
@GOLDENS_DIR_OPTION
def generate(areas, out, bump, changelog, goldens_dir):
    """Write goldens/<area>.json from the slow reference, refusing silent contract changes.

    Exit 0 written or unchanged; 1 refused (changed/removed vectors without a valid --bump);
    2 cannot run (wheel install without --out, unreadable baseline, area module not importable);
    130/143/129 stopped by SIGINT/SIGTERM/SIGHUP (files already written are complete).
    """
    from . import generate as gen
    _check_outputs([("--out", out, "dir")])
    if goldens_dir is None and out is None and paths.checkout_root() is None:
        click.echo("goldens generate: this esverify is an installed package, not a checkout; its goldens are "
                   "read-only package data. Pass --out DIR (or run from a git checkout).", err=True)
        sys.exit(2)
    baseline = goldens_dir or paths.goldens_dir()
    target = out or baseline
    changelog = changelog or baseline.parent / "CHANGELOG.md"
    try:
        with catching():
            outcomes = gen.generate(list(areas) or None, baseline, target, bump, changelog)
    except Interrupted as exc:   # each golden file is written atomically: none is left half-written
        click.echo(f"goldens generate: {INTERRUPTED} by {exc.signal_name}; files already written are "
                   f"complete, the others unchanged (exit {exc.exit_code})", err=True)
        sys.exit(exc.exit_code)
    for o in outcomes:
        stream = o.status in ("refused", "error", "skipped")
        click.echo(f"{o.area}: {o.status}: {o.message}", err=stream)
    code = gen.exit_code(outcomes)
    click.echo(f"goldens generate: {'done' if code == 0 else 'REFUSED' if code == 1 else 'ERROR'} (exit {code})",
               err=code != 0)
    sys.exit(code)


@goldens.command()
@click.option("--area", "areas", multiple=True, metavar="AREA",
              help="Area(s) to check (repeatable; default: every registered area).")
@click.option("--backend", "backends", multiple=True, metavar="NAME", callback=_backends,
              help=f"Only these backends (repeatable; {', '.join(BACKEND_LABELS)}; default: every backend "
                   "available here).")
@click.option("--against", metavar="GITREF", default=None,
              help="Also fail on vectors changed or removed since GITREF without a version move.")
@click.option("--strict", is_flag=True, help="libm-divergence (libm64, exactly one ulp) fails too.")
@click.option("--junit", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write a JUnit XML report here (atomic).")
@click.option("--json", "json_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write a JSON report here (atomic).")
@click.option("--impl", "impl_cmd", metavar="CMD", default=None,
              help="Check another implementation: start CMD (a protocol wrapper, docs/PROTOCOL.md) and recompute "
                   "every vector it claims through it, instead of esverify's backends.")
@click.option("--require", "require", metavar="OP,...", default=None,
              help="With --impl: fail (exit 1) unless the wrapper claims every operation listed.")
@click.option("--impl-log", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="With --impl: append the wrapper's stderr here (default: a temporary file, named in the output).")
@click.option("--impl-deadline", type=click.FloatRange(min=0.001), default=60.0, show_default=True,
              help="With --impl: seconds per request before the wrapper is killed and the vector is an error "
                   "(the start and capabilities reply have their own 60 s).")
@GOLDENS_DIR_OPTION
def check(areas, backends, against, strict, junit, json_path, goldens_dir, impl_cmd, require, impl_log,
          impl_deadline):
    """Recompute every golden vector on every available backend and compare bit patterns.

    Exit 0 all equal (libm-divergence allowed unless --strict); 1 any mismatch or change since
    --against without a version move; 2 missing/unreadable/bad-schema file, version mismatch,
    unknown --against ref; 130/143/129 stopped by SIGINT/SIGTERM/SIGHUP (a report marked interrupted).
    """
    import pandas as pd
    from . import gate
    _check_outputs([("--junit", junit, "file"), ("--json", json_path, "file")])
    directory = goldens_dir or paths.goldens_dir()
    target = _impl_target(impl_cmd, require, impl_log, impl_deadline, backends)
    started = report.utc_now()
    try:
        with catching():
            result = gate.check(directory, list(areas) or None, list(backends) or None, against, impl=target)
    except Interrupted as exc:
        _interrupted_check_report(exc, started, junit, json_path, directory, against, strict)
    finally:
        if target is not None:
            target.close()
    code = result.exit_code(strict)
    verdict = result.verdict(strict)
    # the verdict first, as parity prints it; an exit-2 verdict names every error, so each is said once
    click.echo(report.terminal_text(verdict), err=code != 0)   # an error may quote a hostile file
    summary = pd.DataFrame(result.summary, columns=["area", "backend", "vectors", "mismatches",
                                                    "libm_divergences", "libm_cap"]
                           + (["unsupported"] if target else []) + ["seconds"])
    from ..console import fit_table

    def shown(text):   # the console keeps to its width when --json holds every cell whole; else nothing is cut
        return text if json_path is None else fit_table(text, rest=str(json_path))
    if len(summary):
        click.echo(shown(report.console_table(summary)))
    table = result.table
    if len(table):
        click.echo("")
        click.echo(shown(report.console_table(table)))
    header = {"verdict": verdict, "exit_code": code,
              "counts": {"vectors": int(summary["vectors"].sum()) if len(summary) else 0,
                         "mismatches": int(summary["mismatches"].sum()) if len(summary) else 0,
                         "errors": len(result.errors)},
              "started_utc": started, "finished_utc": report.utc_now(), "command_line": _command_line()}
    metadata = {**header, "goldens_dir": str(directory), "against": against, "strict": strict,
                "numpy": result.environment["numpy"], "errors": result.errors,
                "plugin_problems": result.environment.get("plugin_problems", [])}
    if target is not None:
        metadata["impl"] = target.identity()
        click.echo(f"impl: {target.identity()}")
    files = ReportSet()   # --json and --junit: both written, or neither (esverify.reportset)
    try:
        if json_path is not None:
            files.add_text(json_path, report.to_json({"summary": summary, "differences": table}, metadata,
                                                          header))
        if junit is not None:
            cases = _junit_cases(result, summary, table, strict)
            seconds = float(summary["seconds"].sum()) if len(summary) else 0.0
            files.add_text(junit, report.to_junit(cases, "esverify.goldens", name_cols=["area", "backend", "vector"],
                                                  failing=("fail",), skipping=("skipped", "unsupported"),
                                                  time_col="seconds", suite_time=seconds, exit_code=code,
                                                  verdict=verdict, reason=verdict, timestamp=started))
        files.commit()
    except OSError as exc:  # a CI job must not read an unwritten report as "mismatch" (exit 1)
        click.echo(f"error: cannot write the report: {exc} (exit 2)", err=True)
        sys.exit(2)
    sys.exit(code)


def _impl_target(impl_cmd, require, impl_log, impl_deadline, backends):
    """The ImplTarget of --impl (not started), or None; usage errors (exit 2) for bad combinations."""
    if impl_cmd is None:
        if require:
            raise click.UsageError("--require needs --impl")
        return None
    if backends:
        raise click.UsageError("--impl replaces the backends: do not combine it with --backend")
    from .impl_target import ImplTarget
    ops = [op.strip() for op in (require or "").split(",") if op.strip()]
    try:
        return ImplTarget(impl_cmd, log_path=impl_log, deadline_s=impl_deadline, require=ops)
    except ValueError as exc:   # an empty or unparsable command line, an unknown --require operation
        raise click.UsageError(str(exc) if str(exc).startswith("--") else f"--impl {impl_cmd!r}: {exc}") from None


def _junit_cases(result, summary: pd.DataFrame, table: pd.DataFrame, strict: bool) -> pd.DataFrame:
    """One testcase per checked unit, an (area, backend), whatever its status: "fail"
    with every failing difference of that unit in its detail, else "pass"; one skipped testcase per
    vector the --impl wrapper does not claim (not checked); one error testcase per exit-2 error."""
    import pandas as pd
    from .compare import FAILING as failing
    bad = set(failing) | ({"libm-divergence"} if strict else set())
    rows = []
    for s in summary.to_dict(orient="records"):
        unit = table[(table["area"] == s["area"]) & (table["backend"] == s["backend"])] if len(table) else table
        failed = unit[unit["status"].isin(bad)] if len(unit) else unit
        checked = s["vectors"] - (s.get("unsupported") or 0)
        if len(failed):
            said = "; ".join(f"{r['vector']}/{r['field']}[{r['element']}]: {r['status']}: {r['detail'] or ''} "
                             f"expected {r['expected']} got {r['got']} ulp {r['ulp']}"
                             for r in failed.head(50).to_dict(orient="records"))
            more = f"; and {len(failed) - 50} more" if len(failed) > 50 else ""
            detail, status = f"{len(failed)} failing value(s) in {checked} vectors: {said}{more}", "fail"
        else:
            divergent = int((unit["status"] == "libm-divergence").sum()) if len(unit) else 0
            detail = f"{checked} vectors bit-equal" if not divergent else \
                f"{checked} vectors, {divergent} libm-divergence value(s) within the cap"
            status = "pass"
        rows.append({"area": s["area"], "backend": s["backend"], "vector": "*", "status": status, "detail": detail,
                     "seconds": s.get("seconds")})
    units = {(s["area"], s["backend"]) for s in summary.to_dict(orient="records")}
    for r in (table.to_dict(orient="records") if len(table) else []):   # e.g. --against: a vector changed
        if r["status"] in bad and (r["area"], r["backend"]) not in units:
            rows.append({"area": r["area"], "backend": r["backend"], "vector": r["vector"], "status": "fail",
                         "detail": f"{r['status']}: {r['detail'] or ''}", "seconds": 0.0})
    for r in (table[table["status"] == "unsupported"].to_dict(orient="records") if len(table) else []):
        rows.append({"area": r["area"], "backend": r["backend"], "vector": r["vector"], "status": "unsupported",
                     "detail": f"unsupported: {r['detail'] or 'not claimed by the implementation'}", "seconds": 0.0})
    for e in result.errors:
        rows.append({"area": "*", "backend": "*", "vector": "*", "status": "error", "detail": e, "seconds": 0.0})
    return pd.DataFrame(rows, columns=["area", "backend", "vector", "status", "detail", "seconds"])


def _command_line() -> str:
    return " ".join(["esverify", *sys.argv[1:]])


def _interrupted_check_report(exc: Interrupted, started, junit, json_path, directory, against, strict):
    """The gate was stopped by a signal: say so, leave a marked report where one was asked, exit 128+N."""
    import pandas as pd
    code = exc.exit_code
    verdict = f"goldens check: {INTERRUPTED.upper()} by {exc.signal_name} (exit {code})"
    header = {"verdict": INTERRUPTED, "exit_code": code, "counts": {}, "started_utc": started,
              "finished_utc": report.utc_now(), "command_line": _command_line()}
    metadata = {**header, "goldens_dir": str(directory), "against": against, "strict": strict,
                "interrupted_by": exc.signal_name}
    empty = pd.DataFrame(columns=["area", "backend", "vectors", "mismatches", "libm_divergences", "seconds"])
    if json_path is not None:
        report.write_atomic(json_path, report.to_json({"summary": empty}, metadata, header))
    if junit is not None:
        cases = pd.DataFrame(columns=["area", "backend", "vector", "status", "detail"])
        report.write_atomic(junit, report.to_junit(cases, "esverify.goldens", name_cols=["area", "backend", "vector"],
                                                   exit_code=code, verdict=INTERRUPTED,
                                                   reason=f"interrupted by {exc.signal_name}: no vector checked",
                                                   timestamp=started))
    click.echo(verdict, err=True)
    sys.exit(code)
