"""`grebench site`, as a plain typer-style function (registered with `app.command()(site)`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from flows.cli.common import ConfigOption, fail, read_config


def site(
    out: Annotated[Path | None, typer.Option("--out", "-o", help="default: <data_dir>/site")] = None,
    config: ConfigOption = None,
) -> None:
    """Render the static results website (leaderboard, validation, papers, runs) from the results database."""
    from tasks.report.site import build_site

    cfg = read_config(config)
    try:
        result = build_site(cfg.database, out or cfg.data_dir / "site")
    except FileNotFoundError as error:
        fail(str(error))
    typer.echo(f"{len(result.pages)} pages, {len(result.charts)} charts in {result.out_dir}")
    typer.echo(f"open {result.index.resolve().as_uri()}")
