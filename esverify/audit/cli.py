"""The `esverify audit` click command.

Exit status: 0 nothing found, 1 at least one finding, 2 usage error
(click's own convention for bad options, reused for "outside a checkout
without --tree", unreadable archives and an --out that cannot be written).
"""
from __future__ import annotations

import datetime as dt
import textwrap
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
                   "regions'). Default: each built-in reference's child/interfaces.json.")
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
    from .run import run_audit, write

    if max_file_bytes < 1:
        raise click.BadParameter(f"{max_file_bytes} is not a size >= 1 byte", param_hint="--max-file-size")
    try:
        settings = resolve(ctx, ["formats", "reports"])
    except ConfigError as exc:
        raise click.UsageError(exc.message) from None
    if settings.sources["formats"] != "command line" and settings.values["formats"]:
        formats = _formats(ctx, None, (settings.values["formats"],))

    opts = _options(tree, wheels, history, refs, interfaces, threshold=threshold, min_tokens=min_tokens,
                    min_words=min_words, ngram=ngram, max_file_bytes=max_file_bytes)
    from esverify.interrupt import Interrupted, catching
    from esverify.outputs import remove_empty
    folder, made = _claim_folder(out, overwrite, settings)
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
    result.metadata = _report_metadata(result, settings)
    write_error = None
    try:
        written = write(result, out, formats)
    except OSError as exc:  # not a finding: the report could not be written where asked
        written, write_error = [], exc

    code = 1 if result.findings else 0
    for line in first_screen(result, 2 if write_error else code):
        click.echo(line)
    if write_error is not None:  # the verdict above is still shown; the run itself failed
        click.echo("no report written")
        raise click.BadParameter(f"cannot write the report under {out}: {write_error}", param_hint="--out")
    click.echo(fit(f"report: {out} ({len(written)} files; exit {code})"))
    raise SystemExit(code)


def _options(tree, wheels, history, refs, interfaces, *, threshold, min_tokens, min_words, ngram, max_file_bytes):
    """Check what to audit and how, and gather it into AuditOptions; click usage errors (exit 2)."""
    from .. import gitinfo
    from .run import AuditOptions
    if ngram > min_words:
        raise click.BadParameter(f"--ngram {ngram} exceeds --min-words {min_words}", param_hint="--ngram")
    if tree is None and not wheels:
        tree = gitinfo.toplevel(Path.cwd())
        if tree is None:
            raise click.UsageError("not inside a git checkout: pass --tree PATH (or --wheel FILE)")
    if history and (tree is None or gitinfo.toplevel(tree) != tree.resolve()):
        raise click.UsageError("--history needs the top level of a git checkout (default tree or --tree PATH)")
    return AuditOptions(tree=tree.resolve() if tree else None, wheels=list(wheels), history=history,
                        refs=[r.resolve() for r in refs], threshold=threshold, min_tokens=min_tokens,
                        ngram=ngram, min_words=min_words, max_file_bytes=max_file_bytes,
                        interfaces=interfaces.resolve() if interfaces else None)


def _claim_folder(out, overwrite: bool, settings):
    """Claim the report folder before any work, so a report that cannot be written costs no audit:
    (the claimed folder, the parent folders made for it). A refusal is one line on stderr, exit 2."""
    from esverify.outputs import OutputError, claim_report_folder, missing_folders, remove_empty
    from esverify.report import report_patterns
    base = Path(settings.values["reports"]).expanduser() if settings.values["reports"] else Path("reports")
    made = missing_folders(out or base)   # removed again when the audit is refused
    try:
        folder = claim_report_folder(out, "audit", report_patterns("audit"), overwrite=overwrite, base=base)
    except OutputError as exc:
        remove_empty(made)
        click.echo(f"esverify audit: error: {exc}", err=True)   # one line: what, where, why
        raise SystemExit(2) from None
    return folder, made


def _report_metadata(result, settings) -> dict:
    """The report's metadata: the verdict, exit code and counts first, then the audit's own, then the settings."""
    sim = result.sections["similarity"]
    shared_interface = sim[sim["status"] == "interface"] if len(sim) else sim
    reason = result.metadata.get("reason")
    return {"verdict": result.metadata["verdict"], "exit_code": 1 if result.findings else 0,
            **({"reason": reason} if reason else {}),
            "counts": {"findings": result.findings, "review": result.review,
                       "interface": len(shared_interface)},
            "started_utc": result.metadata.get("started_utc"),
            "finished_utc": result.metadata.get("finished_utc"),
            "command_line": " ".join(["esverify", *__import__("sys").argv[1:]]), **result.metadata,
            "settings": settings.metadata()}


#: the console's first screen: at most this many lines, each at most WIDTH characters (docs/audit.md)
SCREEN_LINES = 40
WIDTH = 160
#: lines of the first screen left for findings (the verdict, the sections, the base code, the tail)
FINDING_LINES = 30


def fit(line: str, width: int = WIDTH) -> str:
    """`line` cut to `width` characters, the middle elided (a path's head and its file name both stay)."""
    line = line.replace("\n", " ")
    if len(line) <= width:
        return line
    keep = width - 3
    return line[:keep - keep // 2] + "..." + line[len(line) - keep // 2:]


def first_screen(result, code: int) -> list[str]:
    """The verdict, the sections' verdicts, the base code, then one line per finding (file pair,
    similarity, the audited file's own tokens, its lines), then counts of what is listed only in the
    report. At most SCREEN_LINES - 1 lines (the report folder follows), none over WIDTH characters;
    the regions themselves are only in the report files."""
    import pandas as pd
    meta = result.metadata
    lines = [f"esverify audit: {str(meta['verdict']).upper()} (exit {code}): {result.findings} finding(s), "
             f"{result.review} listed for review"]
    verdicts = [f"{r['section']} {r['verdict']}" + (f" ({r['findings']})" if r["findings"] else "")
                for r in result.sections["summary"].to_dict("records")]
    lines.append("sections: " + "; ".join(verdicts))
    base = (meta.get("interface") or {}).get("base code, briefly")
    if base:
        lines.append(f"base code (idioms listed, not counted): {base}")
    found = result.sections.get("findings")
    if found is not None and len(found):
        lines.append("findings (section: our file ~ reference file: similarity, our tokens, our lines):")
        rows = found.to_dict("records")
        shown = rows if len(rows) <= FINDING_LINES else rows[:FINDING_LINES - 1]
        for r in shown:
            facts = []
            if pd.notna(r["similarity"]):
                facts.append(f"{float(r['similarity']):.2f}")
            if pd.notna(r["our_tokens"]):
                facts.append(f"{int(r['our_tokens'])} {'words' if r['section'] == 'text' else 'tokens'}")
            if isinstance(r["our_lines"], str) and r["our_lines"]:
                facts.append(f"lines {r['our_lines']}")
            tail = f": {', '.join(facts)}" if facts else ""
            names = [str(r["file"])] + ([str(r["ref_file"])] if r["ref_file"] else [])
            room = WIDTH - len(f"  {r['section']}: ") - len(tail) - 3 * (len(names) - 1)
            lines.append(f"  {r['section']}: " + " ~ ".join(fit(n, max(20, room // len(names))) for n in names) + tail)
        if len(shown) < len(rows):
            lines.append(f"  ... {len(rows) - len(shown)} more finding(s): the report's `findings` section")
    sim = result.sections["similarity"]
    shared = int((sim["status"] == "interface").sum()) if len(sim) else 0
    if shared:
        lines.append(f"{shared} pair(s) share only interface and idioms (not findings): the report's `similarity` "
                     "section lists their declarations and idioms")
    if result.review:
        lines.append(f"{result.review} import(s) listed for review (informational): the report's `imports` section")
    room = SCREEN_LINES - 1 - len(lines)
    for n, warning in enumerate(meta.get("warnings", [])):   # wrapped, not cut: a warning is read whole
        wrapped = textwrap.wrap(f"warning: {warning}", WIDTH, subsequent_indent="  ", break_on_hyphens=False)
        if len(wrapped) > room - 1:
            lines.append(f"... {len(meta['warnings']) - n} more warning(s) in the report's metadata")
            break
        lines += wrapped
        room -= len(wrapped)
    return [fit(line) for line in lines[:SCREEN_LINES - 1]]


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
