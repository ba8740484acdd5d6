"""`esverify parity`: the click command over esverify.oracle.runner.

Every option of the issue, with its default; usage and setup errors exit
2 (click's own convention for usage errors; one line, before any case
runs), fail/error/unverifiable rows exit 1 (skipped ones too with
--require-all; a run that checked no row: verdict `nothing checked`), a
clean run exits 0, and a run stopped by SIGINT, SIGTERM or SIGHUP writes
its partial report (verdict `interrupted`) and exits 130, 143 or 129. The
report goes to --out; a short table to stdout; progress (tqdm, with ETA)
to stderr when it is a terminal and --quiet is not given. The clone paths,
the child Python, the formats and the report folder may come from
ESVERIFY_* variables or [tool.esverify] in pyproject.toml (esverify.cliutil).
"""
from __future__ import annotations

import os
import sys

import click

from ..cliutil import CONTEXT, SIZE, Choice, ConfigError, resolve
from ..report import FORMATS

_DEFAULT_CASE_SEED = 20260401   #: esverify.oracle.cases.DEFAULT_CASE_SEED (not imported: keeps --help light)


def _reference_names() -> list[str]:
    from .adapters import names
    return names()


def _alias_options(command):
    """The deprecated per-reference options (the registry's alias options: an adapter's `alias_flag`,
    e.g. the first --ref's successor), each kept for one release as another way to name that reference's
    clone. Read from the registry, not the adapters: building this command imports no adapter."""
    from .adapters import alias_options
    for name, (flag, env_var, default_path) in reversed(alias_options().items()):
        dest = flag.lstrip("-").replace("-", "_")
        command = click.option(flag, dest, type=click.Path(file_okay=False, path_type=str),
                               default=None, help=f"Deprecated alias of --ref for the {name} clone "
                                                  f"(default: ${env_var}, then [tool.esverify] "
                                                  f"{dest.replace('_', '-')}, then ./{default_path}).")(command)
    return command


def _check_given_paths(ref, aliases) -> None:
    """A clone path typed on the command line that does not exist is a usage error answered before
    the oracle (torch, the adapters) is imported; the same words as esverify.oracle.setup, which checks
    every other path (environment, config file)."""
    given = [("--ref", p) for p in ref or ()]
    given += [("--" + n.replace("_", "-"), p) for n, p in aliases.items() if p]
    for option, path in given:
        if not os.path.exists(os.path.expanduser(path)):
            click.echo(f"esverify parity: error: {option} {path}: does not exist; fix: pass the top folder of a "
                       "reference clone (docs/parity.md, 'The reference clones')", err=True)
            sys.exit(2)


def _csv(value: str) -> tuple:
    return tuple(v.strip() for v in value.split(",") if v.strip())


@click.command("parity", context_settings=CONTEXT)
@click.option("--ref", "ref", type=click.Path(path_type=str), multiple=True,
              help="A reference clone (or, for a reference that is one module, its .py file); repeat it for "
                   "several (" + ", ".join(_reference_names()) + "): each is "
                   "recognised by the reference adapters, and one clone may hold several references. Default: "
                   "each reference's $ESVERIFY_* variable, then [tool.esverify], then ./refs/<name>.")
@click.option("--discover", is_flag=True,
              help="With --ref given, also run the references found elsewhere ($ESVERIFY_* variables, "
                   "./refs/<name>); without it only the --ref clones run.")
@click.option("--blame-base", "blame_base", default=None, metavar="COMMIT",
              help="The commit of the clone its changes are counted from when a failing row names the code "
                   "(default: the commit docs/references.md was validated against, when the clone's history "
                   "has it; else its uncommitted changes only).")
@_alias_options
@click.option("--target", type=Choice([*_reference_names(), "all"]), default=None,
              help="Which reference(s) to run (default: every reference whose clone is found).")
@click.option("--python", "python", type=str, multiple=True, metavar="[NAME=]PATH",
              help="Interpreter of the children that run the references (torch and numpy, and what a reference "
                   "adds: docs/parity.md): PATH for every reference, NAME=PATH for reference NAME alone; repeatable "
                   "(default: $ESVERIFY_PYTHON, then [tool.esverify] python, entries separated by commas, then "
                   "the Python running esverify).")
@click.option("--dtypes", default="f32,f16,bf16", show_default=True,
              help="Comma-separated dtypes; with two or more, the mixed-dtype set runs too.")
@click.option("--schemes", default="iid,correlated", show_default=True, help="Noise schemes (docs/CONTRACT.md §4).")
@click.option("--devices", default=None, help="cpu,cuda by default (cuda rows skipped without a GPU); "
                                               "a device named here and not seen is a setup error.")
@click.option("--mapping", type=Choice(["poly32", "libm64"]), default="poly32", show_default=True,
              help="The uniform-to-Gaussian mapping of the contract's noise (docs/CONTRACT.md §3): poly32 is "
                   "bit-exact on every backend, libm64 within one backend.")
@click.option("--seed", type=int, default=42, show_default=True, help="ES seed (u64) of the member seeds.")
@click.option("--population", type=int, default=None,
              help="Population of the update and loop cases (default: drawn from --case-seed; the paper's "
                   "N=30 case and the population sweep are fixed).")
@click.option("--sigma", type=float, default=None, help="Fix sigma for every case but the paper's "
                                                        "(default: drawn per case from --case-seed).")
@click.option("--alpha", type=float, default=None, help="Fix alpha for every case but the paper's "
                                                        "(default: drawn per case, unrelated to sigma).")
@click.option("--case-seed", "case_seed", type=int, default=_DEFAULT_CASE_SEED, show_default=True,
              help="Seed of the case parameters (sigma, alpha, lambda, seed handles, population); "
                   "recorded in the report.")
@click.option("--noise", "noise", default="contract,native", show_default=True,
              help="contract (the RNG contract's noise through the hook) and/or native (torch's own "
                   "generator; correlated rows only).")
@click.option("--fuzz", type=int, default=0, show_default=True, help="Run N random cases instead of the matrix; a failure is shrunk "
                                                  "to a minimal case printed as one command line.")
@click.option("--case-json", "case_json", default=None, help="Run exactly this case (JSON, as --fuzz prints it).")
@click.option("--iterations", type=int, default=3, show_default=True,
              help="Length of the loop cases (a loop that makes one update more is a reported quirk).")
@click.option("--case", "case", default=None, help="Run only cases whose id matches (fnmatch; an exact case id "
                                                   "selects that case; else a substring). Default: every case.")
@click.option("--keep-tensors", is_flag=True, help="Save both sides' tensors of failing cases under --out.")
@click.option("--out", type=click.Path(file_okay=False, path_type=str), default=None,
              help="Report folder, checked before any work; one holding an earlier report is refused unless "
                   "--overwrite (default: a fresh parity-<UTC time>-<pid>-<random>/ under $ESVERIFY_REPORTS, "
                   "then [tool.esverify] reports, then ./reports).")
@click.option("--format", "formats", default=",".join(FORMATS), show_default=True,
              help="Comma-separated report formats: csv, json, md, html (also $ESVERIFY_FORMAT, "
                   "[tool.esverify] format).")
@click.option("--junit", type=click.Path(dir_okay=False, path_type=str), default=None,
              help="Also write JUnit XML to this file (one testcase per row; its counts agree with the exit "
                   "code). Default: none.")
@click.option("--summary", "summary_path", type=click.Path(dir_okay=False, path_type=str), default=None,
              help="Also write a short Markdown verdict and needs-attention block to this file (for a CI job "
                   "page; also appended to $GITHUB_STEP_SUMMARY when that is set). Default: none.")
@click.option("--timeout", type=float, default=120.0, show_default=True,
              help="Seconds per case; on expiry the child is killed, the row is an error, the run goes on. "
                   "A child gets max(--timeout, 60) s to start.")
@click.option("--max-memory", "max_memory", type=SIZE, default=None, show_default="half the RAM",
              help="Memory limit of each child (RLIMIT_DATA), e.g. 8G; 0: none.")
@click.option("--max-output", "max_output", type=SIZE, default="20M", show_default=True,
              help="Child output kept per target (first and last halves, the cut marked); also the floor of "
                   "the largest file a child may write; 0: keep all.")
@click.option("--small", is_flag=True, help="Leave out the >= 1M-element tensor (quick runs).")
@click.option("--require-all", is_flag=True,
              help="Exit 1 when any row was not checked here (skipped: no GPU, child Python too old for a "
                   "file, a clone not given); for CI jobs that must cover everything.")
@click.option("--overwrite", is_flag=True,
              help="Replace an earlier report in --out (its report files are removed first); without it a "
                   "folder holding a report is refused.")
@click.option("--quiet", is_flag=True, help="No progress display (there is none either when stderr is not a "
                                             "terminal, e.g. in CI).")
@click.option("--impl", "impl_cmd", default=None, metavar="CMD",
              help="Our side is this protocol wrapper (docs/PROTOCOL.md) instead of the clean-room trainer.")
@click.option("--no-loops", is_flag=True, help="Leave out the training-loop rows (fit, main-*); the report "
                                               "lists them as not checked.")
@click.option("--no-warm-start", is_flag=True,
              help="Start each reference child in a fresh interpreter instead of forking it from a server "
                   "that imported torch once (the default: one server per interpreter with two children "
                   "or more; docs/parity.md, \"Warm starts\").")
@click.option("--line-coverage", is_flag=True,
              help="Also count the clone's executed lines with coverage.py in each child (the coverage "
                   "section's `lines`); off by default: its trace function slows the children (docs/parity.md, "
                   "\"Coverage\").")
@click.pass_context
def parity(ctx, ref, discover, blame_base, target, python, dtypes, schemes, devices, mapping, seed, population, sigma, alpha,
           case_seed, noise, fuzz, case_json, iterations, case, keep_tensors, out, formats, junit, summary_path,
           timeout, max_memory, max_output, small, require_all, overwrite, quiet, impl_cmd, no_loops, no_warm_start,
           line_coverage, **aliases):
    """Bit-for-bit parity of the clean-room trainer against reference clones on identical noise.

    Exit codes: 0 every row checked here passed (or is a documented artifact, or a reference's own
    documented defect); 1 a row failed, erred or is unverifiable, no row was checked (verdict "nothing
    checked"), or, with --require-all, a row was not checked here or is a defect; 2 usage or setup error
    (before any case runs; nothing is left behind); 130/143/129 stopped by SIGINT/SIGTERM/SIGHUP (a partial
    report, verdict "interrupted").
    Configuration: command line > ESVERIFY_* environment > [tool.esverify] in pyproject.toml > default
    (docs/parity.md, "Configuration").
    """
    try:
        settings = resolve(ctx, ["ref", *aliases, "python", "formats", "reports"])   # cliutil.settings_table() has each alias
    except ConfigError as exc:
        click.echo(f"esverify parity: error: {exc.message}", err=True)
        sys.exit(2)
    _check_given_paths(ref, aliases)
    from .options import Options, UsageError
    # each reference's clone variable is the runner's own (it names it in its messages): only the
    # command line and the config file are passed as paths
    given = {n: None if settings.sources[n].startswith("environment") else settings.values[n]
             for n in ("ref", *aliases)}
    ref = given["ref"]
    alias_paths = {"--" + n.replace("_", "-"): given[n] for n in aliases if given[n]}
    from .interpreters import parse_python
    try:
        python, pythons = parse_python(settings.get("python") or None)
    except UsageError as exc:
        click.echo(f"esverify parity: error: {exc}", err=True)
        sys.exit(2)
    formats = settings.get("formats", ",".join(FORMATS))
    extra = {"case_seed": case_seed}
    opts = Options(ref=ref, aliases=alias_paths, target=target, python=python or sys.executable,
                   python_explicit=python is not None, pythons=pythons, dtypes=_csv(dtypes),
                   schemes=_csv(schemes), devices=_csv(devices) if devices else ("cpu", "cuda"),
                   devices_explicit=devices is not None, mapping=mapping, seed=seed, population=population,
                   sigma=sigma, alpha=alpha, noises=_csv(noise), fuzz=fuzz, case_json=case_json,
                   iterations=iterations, case=case, keep_tensors=keep_tensors,
                   out=out, formats=_csv(formats), junit=junit, summary=summary_path, timeout=timeout,
                   quiet=quiet, small=small, reports=settings.get("reports"), settings=settings.metadata(),
                   max_memory=max_memory, max_output=max_output, require_all=require_all, overwrite=overwrite,
                   loops=not no_loops, warm_start=not no_warm_start, line_coverage=line_coverage,
                   discover=discover, blame_base=blame_base,
                   argv=["esverify"] + sys.argv[1:], **extra)
    result = _run(opts, impl_cmd, timeout)
    _show(result)
    sys.exit(result.exit_code)


def _run(opts, impl_cmd, timeout: float):
    """Run the cases, against the protocol wrapper `impl_cmd` when given (else the clean-room
    trainer), and return the runner's result. A usage or setup error is one line on stderr, exit 2."""
    from .options import UsageError
    from .runner import Runner
    side = None
    try:
        runner = Runner(opts)
        if impl_cmd is not None:
            from .impl_side import ImplSide
            side = ImplSide(impl_cmd, deadline_s=timeout)
            error = side.open()
            if error:
                click.echo(f"esverify parity: error: {error}", err=True)
                sys.exit(2)
            runner.impl_side = side
            runner.notes.add(side.describe())
        return runner.run()
    except UsageError as exc:
        click.echo(f"esverify parity: error: {exc}", err=True)
        sys.exit(2)
    finally:
        if side is not None:
            side.close()


def _show(result) -> None:
    """Tell the outcome: the console table, the block for GitHub's job page, the fuzz cases shrunk."""
    from ..console import fit
    click.echo(fit(result.console, rest=f"the report ({result.out_dir})"))   # the console keeps to its width
    step = os.environ.get("GITHUB_STEP_SUMMARY")
    if step and result.step_summary:   # GitHub's job page: each step appends its block
        try:
            with open(step, "a", encoding="utf-8") as fh:
                fh.write(result.step_summary + "\n")
        except OSError as exc:
            click.echo(f"warning: cannot append to $GITHUB_STEP_SUMMARY {step}: {exc}", err=True)
    fuzz_report = result.metadata.get("fuzz")
    if fuzz_report:
        click.echo(f"fuzz: {fuzz_report['cases']} cases, {fuzz_report['failures']} bad, "
                   f"{fuzz_report['cases_per_s']} cases/s")
        for item in fuzz_report["shrunk"]:
            click.echo(f"fuzz: {item['case']} ({item['status']}) shrinks in {item['runs']} runs to:\n  "
                       f"{item['command']}")
