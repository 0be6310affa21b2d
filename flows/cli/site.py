"""`grebench site`, as a plain typer-style function (registered with `app.command()(site)`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from flows.cli.common import BenchmarksOption, ConfigOption, PipelineOption, render_results


def site(
    out: Annotated[Path | None, typer.Option("--out", "-o", help="default: <data_dir>/site "
                                             "(<data_dir>/<pipeline>/site with a database per pipeline)")] = None,
    pipeline: PipelineOption = None,
    config: ConfigOption = None,
    benchmarks: BenchmarksOption = None,
) -> None:
    """Render the static results website (leaderboard, validation, papers, runs) from a results database."""
    from tasks.report.site import build_site

    result = render_results(config, pipeline, out, "site", benchmarks, build_site)
    typer.echo(f"{len(result.pages)} pages, {len(result.charts)} charts in {result.out_dir}")
    typer.echo(f"open {result.index.resolve().as_uri()}")
