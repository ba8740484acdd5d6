"""`esverify replay`: verify a checkpoint from its base weights and its run log (docs/replay.md).

Exit codes: 0 the checkpoint is bit-equal to the replay, 1 it differs
(the report names the first differing element of every tensor), 2 a
usage or setup error (bad log, weights, options; nothing was computed) or
input found unreadable while the units ran, 3 an infrastructure failure
(a worker killed, a lost Ray node), 128 + signal when interrupted (the
partial report written, the verified units kept).
"""
from __future__ import annotations

import sys
from pathlib import Path

import click


def _profiles() -> list[str]:
    """The `--profile` choices: the profiles the references' records offer to replay (esverify.registry),
    read from the records when the command is built, importing no profile (`--help` stays light)."""
    from esverify import registry
    return registry.replay_profiles()


@click.command("replay")
@click.option("--base", required=True, type=click.Path(exists=True), help="Base weights: safetensors, torch state_dict or Hugging Face folder.")
@click.option("--log", "log_dir", required=True, type=click.Path(exists=True, file_okay=False), help="The run's logging folder (args.json, iteration_updates/).")
@click.option("--expect", required=True, type=click.Path(exists=True), help="The checkpoint to verify (same formats as --base).")
@click.option("--out", type=click.Path(dir_okay=False), default=None, help="Also write the reconstructed weights here (.safetensors, else torch).")
@click.option("--profile", type=click.Choice(_profiles()), default=None, help="Numerics profile (default: from the log: the one a trainer log names; a reference's own log: its reference's profile).")
@click.option("--noise", type=click.Choice(["native", "contract"]), default=None, help="native: torch's generator; contract: esverify's (default: from the log).")
@click.option("--workers", type=click.IntRange(min=1), default=None, help="Local worker processes (default: one per 2^29 member-elements of work, at most the number of cores; a small model runs in this process).")
@click.option("--ray", "ray_address", default=None, metavar="ADDRESS|auto", help="Run the work units as Ray tasks on this cluster.")
@click.option("--state-dir", type=click.Path(file_okay=False), default=None, help="Resume state and report.json (default: ./esverify-replay-<fingerprint>).")
@click.option("--report", "report_path", type=click.Path(dir_okay=False), default=None, help="Also write report.json here.")
@click.option("--shard-elements", type=click.IntRange(min=1), default=None, help="Elements per work unit under contract noise (default 16777216).")
@click.option("--batching", type=click.Choice(["members", "passes"]), default="passes", show_default=True, help="Logs that do not list the members engine 0 evaluated (a reference's own log): how members were handed to engines (docs/replay.md §3).")
@click.option("--device", type=click.Choice(["cpu", "cuda"]), default="cpu", help="Device type the run used (native noise and rounding rule follow it).")
def replay(base, log_dir, expect, out, profile, noise, workers, ray_address, state_dir, report_path,
           shard_elements, batching, device):
    """Rebuild CKPT from BASE and the logged seeds and coefficients, bit for bit, and say where it differs.

    \b
    Exit codes (docs/replay.md, "The report and exit codes"):
      0    bit-equal
      1    differs (the report names the elements)
      2    usage or setup error, or input that cannot be replayed (names the file)
      3    infrastructure failure: a worker killed, a lost Ray node (verified units kept)
      130  interrupted by SIGINT; 143 SIGTERM, 129 SIGHUP (partial report, verified units kept)
    """
    from .api import ReplayError, ReplayInfrastructureError
    from .api import replay as run
    try:
        report, code = run(base, log_dir, expect, out=out, profile=profile, noise=noise, workers=workers,
                           ray=ray_address, state_dir=state_dir, shard_elements=shard_elements, device=device,
                           report_path=report_path, batching=batching)
    except ReplayError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(2)
    except ReplayInfrastructureError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(3)
    except KeyboardInterrupt:
        click.echo("interrupted: the units verified so far are kept; run the same command again to continue",
                   err=True)
        sys.exit(130)
    from ..console import fit   # the console keeps to its width; report.json holds every detail
    from ..report import write_atomic
    from .report import render_html
    click.echo(fit(report["text"], rest=f"{report['state_dir']}/report.json"))
    page = Path(report["state_dir"]) / "report.html"
    try:   # the page to read in a browser; report.json, already written, is the record
        write_atomic(page, render_html(report, code))
        shown = f", {page}"
    except OSError as exc:
        shown = f" (no report.html: {exc})"
    click.echo(f"report: {report['state_dir']}/report.json{shown}", err=True)
    sys.exit(code)
