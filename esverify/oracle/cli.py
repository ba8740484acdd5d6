"""`esverify parity`: the click command over esverify.oracle.runner (issue 4 item 3).

Every option of the issue, with its default; usage and setup errors exit
2 (click's own convention for usage errors), fail/error/unverifiable rows
exit 1, a clean run exits 0. The report goes to --out; a short table to
stdout; progress (tqdm, with ETA) to stderr unless --quiet.
"""
from __future__ import annotations

import sys

import click

from ..report import FORMATS


def _csv(value: str) -> tuple:
    return tuple(v.strip() for v in value.split(",") if v.strip())


@click.command("parity")
@click.option("--ref", "ref", type=str, default=None,
              help="es-at-scale clone (default: $ESVERIFY_REF, then ./refs/es-at-scale).")
@click.option("--awd-ref", "awd_ref", type=str, default=None,
              help="es-awd clone (default: $ESVERIFY_AWD_REF, then ./refs/es-awd).")
@click.option("--target", type=click.Choice(["es-at-scale", "es-awd", "all"]), default=None,
              help="Which target(s) to run (default: every target whose clone is found).")
@click.option("--python", "python", type=str, default=sys.executable, show_default=True,
              help="Interpreter of the child that runs the reference (needs torch and numpy).")
@click.option("--dtypes", default="f32,f16,bf16", show_default=True,
              help="Comma-separated dtypes; with two or more, the mixed-dtype set runs too.")
@click.option("--schemes", default="iid,correlated", show_default=True, help="Noise schemes (docs/CONTRACT.md §4).")
@click.option("--devices", default=None, help="cpu,cuda by default (cuda rows skipped without a GPU); "
                                               "a device named here and not seen is a setup error.")
@click.option("--mapping", type=click.Choice(["poly32", "libm64"]), default="poly32", show_default=True)
@click.option("--seed", type=int, default=42, show_default=True, help="ES seed (u64) of the member seeds.")
@click.option("--population", type=int, default=6, show_default=True,
              help="Population of the update and loop cases (the paper's N=30 case is fixed).")
@click.option("--sigma", type=float, default=0.001, show_default=True)
@click.option("--alpha", type=float, default=None, help="Step size (default sigma / 2).")
@click.option("--iterations", type=int, default=3, show_default=True, help="Length of the full-loop case.")
@click.option("--case", "case", default=None, help="Run only cases whose id matches (fnmatch, or substring).")
@click.option("--keep-tensors", is_flag=True, help="Save both sides' tensors of failing cases under --out.")
@click.option("--out", default=None, help="Report folder (default reports/parity-<UTC time>/).")
@click.option("--format", "formats", default=",".join(FORMATS), show_default=True,
              help="Comma-separated report formats: csv, json, md, html.")
@click.option("--junit", default=None, help="Also write JUnit XML to this file.")
@click.option("--timeout", type=float, default=120.0, show_default=True,
              help="Seconds per case; on expiry the child is killed, the row is an error, the run goes on.")
@click.option("--small", is_flag=True, help="Leave out the >= 1M-element tensor (quick runs).")
@click.option("--quiet", is_flag=True, help="No progress display.")
def parity(ref, awd_ref, target, python, dtypes, schemes, devices, mapping, seed, population, sigma, alpha,
           iterations, case, keep_tensors, out, formats, junit, timeout, small, quiet):
    """Bit-for-bit parity of the clean-room trainer against reference clones on identical noise."""
    from .runner import Options, Runner, UsageError
    opts = Options(ref=ref, awd_ref=awd_ref, target=target, python=python, dtypes=_csv(dtypes),
                   schemes=_csv(schemes), devices=_csv(devices) if devices else ("cpu", "cuda"),
                   devices_explicit=devices is not None, mapping=mapping, seed=seed, population=population,
                   sigma=sigma, alpha=alpha, iterations=iterations, case=case, keep_tensors=keep_tensors,
                   out=out, formats=_csv(formats), junit=junit, timeout=timeout, quiet=quiet, small=small,
                   argv=["esverify"] + sys.argv[1:])
    try:
        result = Runner(opts).run()
    except UsageError as exc:
        click.echo(f"esverify parity: error: {exc}", err=True)
        sys.exit(2)
    click.echo(result.console)
    sys.exit(result.exit_code)
