"""`grebench site`, as a plain typer-style function (registered with `app.command()(site)`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from flows.cli.common import (
    ConfigOption,
    PipelineOption,
    chosen_results,
    fail,
)


def site(
    out: Annotated[Path | None, typer.Option("--out", "-o", help="default: <data_dir>/site "
                                             "(<data_dir>/<pipeline>/site with a database per pipeline)")] = None,
    pipeline: PipelineOption = None,
    config: ConfigOption = None,
    benchmarks: Annotated[Path | None, typer.Option("--benchmarks", help="CSV of other benchmarks' scores (model, "
                                                    "benchmark, score; benchmark parameter_size: the model's size): "
                                                    "the leaderboard page adds their Spearman and the size plot")] = None,
) -> None:
    """Render the static results website (leaderboard, validation, papers, runs) from a results database."""
    from flows.cli.validate import read_benchmarks
    from tasks.report.site import build_site

    bench = read_benchmarks(benchmarks)
    database, folder = chosen_results(config, pipeline, out, "site")
    try:
        result = build_site(database, folder, bench)
    except FileNotFoundError as error:
        fail(str(error))
    typer.echo(f"{len(result.pages)} pages, {len(result.charts)} charts in {result.out_dir}")
    typer.echo(f"open {result.index.resolve().as_uri()}")
