"""The `esverify audit` click command (issue 5).

Exit status: 0 nothing found, 1 at least one finding, 2 usage error
(click's own convention for bad options, reused for "outside a checkout
without --tree", unreadable archives and an --out that cannot be written).
"""
from __future__ import annotations

import datetime as dt
from pathlib import Path

import click

from esverify.cliutil import CONTEXT, SIZE, ConfigError, resolve, suggest
from esverify.report import FORMATS

from . import similarity, text
from .sources import DEFAULT_MAX_FILE_BYTES


def _formats(ctx, param, values) -> tuple[str, ...]:
    """Accept `--format json --format md` and `--format json,md` alike."""
    chosen = [f.strip() for v in values for f in v.split(",") if f.strip()]
    unknown = [f for f in chosen if f not in FORMATS]
    if unknown or not chosen:
        hint = suggest(unknown[0], FORMATS) if unknown else ""
        raise click.BadParameter(f"{unknown or values!r}: choose from {', '.join(FORMATS)}{hint}", ctx, param)
    return tuple(dict.fromkeys(chosen))


@click.command("audit", context_settings=CONTEXT)
@click.option("--tree", type=click.Path(exists=True, file_okay=False, path_type=Path),
              help="Folder to audit (a checkout: tracked plus untracked, not ignored files; otherwise every file). "
                   "Default: the git top level of the current directory.")
@click.option("--wheel", "wheels", multiple=True, type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="A built wheel or sdist to audit (what ships). Repeatable.")
@click.option("--history", is_flag=True, help="Also audit every blob ever committed (git objects).")
@click.option("--ref", "refs", multiple=True, type=click.Path(exists=True, file_okay=False, path_type=Path),
              help="A reference clone (any reference). Repeatable. Without it sections 1-3 are skipped.")
@click.option("--interfaces", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="Interface data telling a shared interface from shared code (docs/audit.md, 'Interface "
                   "regions'). Default: the oracle_child/interfaces.json esverify ships.")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path),
              help="Report folder, checked before any work; one holding an earlier audit report is refused unless "
                   "--overwrite. Default: a fresh audit-<UTC time>-<pid>-<random>/ under $ESVERIFY_REPORTS, then "
                   "[tool.esverify] reports, then ./reports.")
@click.option("--overwrite", is_flag=True,
              help="Replace an earlier audit report in --out (its files are removed first); without it a "
                   "folder holding one is refused.")
@click.option("--format", "formats", multiple=True, default=FORMATS, show_default=True, callback=_formats,
              help=f"Report format(s) among {', '.join(FORMATS)}: repeatable or comma-separated "
                   "(as `parity --format`; also $ESVERIFY_FORMAT, [tool.esverify] format).")
@click.option("--threshold", type=click.FloatRange(0.0, 1.0, min_open=True),
              default=similarity.DEFAULT_THRESHOLD, show_default=True,
              help="Similarity (shared / fingerprinted tokens, either way) a pair needs to be a finding.")
@click.option("--min-tokens", type=click.IntRange(min=1), default=similarity.DEFAULT_MIN_TOKENS,
              show_default=True, help="Shared copydetect tokens a copied region needs for a similarity finding.")
@click.option("--min-words", type=click.IntRange(min=2), default=text.DEFAULT_MIN_WORDS, show_default=True,
              help="Shared run of normalised words that makes a text finding.")
@click.option("--ngram", type=click.IntRange(min=2), default=text.DEFAULT_NGRAM, show_default=True,
              help="Word n-gram size of the text pass (must not exceed --min-words).")
@click.option("--max-file-size", "max_file_bytes", type=SIZE, default=DEFAULT_MAX_FILE_BYTES,
              show_default=f"{DEFAULT_MAX_FILE_BYTES >> 20}M",
              help="Largest file or archive member read (a size, e.g. 64M, as parity's --max-memory); a larger one "
                   "is a finding 'too large to audit' (sizes are checked before reading).")
@click.pass_context
def audit(ctx, tree, wheels, history, refs, interfaces, out, overwrite, formats, threshold, min_tokens, min_words,
          ngram, max_file_bytes):
    """Evidence for the clean-room claim: similarity, text, identity, import
    boundary and provenance. Exit 0: nothing found; 1: a finding; 2: usage error (an --out that
    cannot be written is found before any work); 130/143/129: stopped by SIGINT/SIGTERM/SIGHUP (a
    report with the verdict `interrupted` is written)."""
    from .. import gitinfo
    from .run import AuditOptions, run_audit, write

    if max_file_bytes < 1:
        raise click.BadParameter(f"{max_file_bytes} is not a size >= 1 byte", param_hint="--max-file-size")
    try:
        settings = resolve(ctx, ["formats", "reports"])
    except ConfigError as exc:
        raise click.UsageError(exc.message) from None
    if settings.sources["formats"] != "command line" and settings.values["formats"]:
        formats = _formats(ctx, None, (settings.values["formats"],))

    if ngram > min_words:
        raise click.BadParameter(f"--ngram {ngram} exceeds --min-words {min_words}", param_hint="--ngram")
    if tree is None and not wheels:
        tree = gitinfo.toplevel(Path.cwd())
        if tree is None:
            raise click.UsageError("not inside a git checkout: pass --tree PATH (or --wheel FILE)")
    if history and (tree is None or gitinfo.toplevel(tree) != tree.resolve()):
        raise click.UsageError("--history needs the top level of a git checkout (default tree or --tree PATH)")
    opts = AuditOptions(tree=tree.resolve() if tree else None, wheels=list(wheels), history=history,
                        refs=[r.resolve() for r in refs], threshold=threshold, min_tokens=min_tokens,
                        ngram=ngram, min_words=min_words, max_file_bytes=max_file_bytes,
                        interfaces=interfaces.resolve() if interfaces else None)
    from esverify.interrupt import Interrupted, catching
    from esverify.outputs import OutputError, claim_report_folder, missing_folders, remove_empty
    from esverify.report import report_patterns
    base = Path(settings.values["reports"]).expanduser() if settings.values["reports"] else Path("reports")
    made = missing_folders(out or base)   # removed again when the audit is refused (issue 19 item 7)
    try:   # before any work: a report that cannot be written must not cost the audit
        folder = claim_report_folder(out, "audit", report_patterns("audit"), overwrite=overwrite, base=base)
    except OutputError as exc:
        remove_empty(made)
        click.echo(f"esverify audit: error: {exc}", err=True)   # one line: what, where, why
        raise SystemExit(2) from None
    out = folder.path
    started = dt.datetime.now(dt.timezone.utc)
    try:
        with catching():
            try:
                result = run_audit(opts)
            except ValueError as exc:
                folder.release()
                remove_empty([folder.path] if out is None else [])
                remove_empty(made)
                raise click.UsageError(str(exc)) from exc
            except Interrupted as exc:
                _write_interrupted(out, formats, exc, started)
                click.echo(f"verdict: interrupted by {exc.signal_name}; report: {out} (exit {exc.exit_code})")
                raise SystemExit(exc.exit_code) from None
    finally:
        folder.release()
    sim = result.sections["similarity"]
    shared_interface = sim[sim["status"] == "interface"] if len(sim) else sim
    reason = (result.metadata.get("interface") or {}).get("reason")
    result.metadata = {"verdict": result.metadata["verdict"], "exit_code": 1 if result.findings else 0,
                       **({"reason": reason} if reason else {}),
                       "counts": {"findings": result.findings, "review": result.review,
                                  "interface": len(shared_interface)},
                       "started_utc": result.metadata.get("started_utc"),
                       "finished_utc": result.metadata.get("finished_utc"),
                       "command_line": " ".join(["esverify", *__import__("sys").argv[1:]]), **result.metadata,
                       "settings": settings.metadata()}
    write_error = None
    try:
        written = write(result, out, formats)
    except OSError as exc:  # not a finding: the report could not be written where asked
        written, write_error = [], exc

    from esverify.report import console_table
    code = 1 if result.findings else 0
    # the verdict first, as parity and goldens check print it; the report's folder last
    click.echo(f"esverify audit: {str(result.metadata['verdict']).upper()} (exit {2 if write_error else code}): "
               f"{result.findings} finding(s), {result.review} listed for review")
    click.echo(console_table(result.sections["summary"]))
    for name in ("similarity", "text", "identity", "imports", "readability"):
        frame = result.sections[name]
        hits = frame[frame["status"] == "finding"] if len(frame) else frame
        if len(hits):
            click.echo(f"\n{name} findings:")
            click.echo(console_table(hits, max_rows=20))
    if len(shared_interface):   # evidence, not findings: which files share which declared interface
        click.echo(f"\ninterface (not findings): {reason}")
        shown = shared_interface[["tree_file", "ref", "ref_file", "longest_region_tokens"]].copy()
        shown["declarations"] = shared_interface["interface"].map(_declarations_brief)
        click.echo(console_table(shown, max_rows=20))
    imp = result.sections["imports"]
    review = imp[imp["status"] == "review"] if len(imp) else imp
    if len(review):
        click.echo("\nlisted for review (informational):")
        click.echo(console_table(review, max_rows=20))
    for warning in result.metadata.get("warnings", []):
        click.echo(f"warning: {warning}")
    if write_error is not None:  # the verdict above is still shown; the run itself failed
        click.echo("\nno report written")
        raise click.BadParameter(f"cannot write the report under {out}: {write_error}", param_hint="--out")
    click.echo(f"\nreport: {out} ({len(written)} files; exit {code})")
    raise SystemExit(code)


def _declarations_brief(text: str, shown: int = 3) -> str:
    """'es-awd: import os; def f(a); ...' cut to its first `shown` declarations and a count (the report
    has them all)."""
    head, _, rest = str(text).partition(": ")
    items = [i for i in rest.split("; ") if i]
    more = f" (+{len(items) - shown} more)" if len(items) > shown else ""
    return f"{len(items)} from {head}: " + "; ".join(items[:shown]) + more


def _write_interrupted(out: Path, formats, exc, started) -> None:
    """The partial audit report: verdict `interrupted`, exit 128 + the signal, no sections run."""
    import sys

    import pandas as pd

    from esverify.report import write_report
    finished = dt.datetime.now(dt.timezone.utc)
    metadata = {"verdict": "interrupted", "exit_code": exc.exit_code, "counts": {},
                "started_utc": started.isoformat(timespec="seconds"),
                "finished_utc": finished.isoformat(timespec="seconds"),
                "command_line": " ".join(["esverify", *sys.argv[1:]]), "interrupted_by": exc.signal_name}
    summary = pd.DataFrame([{"section": name, "verdict": "not-run", "findings": None,
                             "note": f"interrupted by {exc.signal_name}"}
                            for name in ("similarity", "text", "identity", "imports", "provenance")])
    write_report(out, "audit", {"summary": summary}, metadata, formats=formats, title="esverify clean-room audit")
