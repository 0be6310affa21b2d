"""`grebench plan --gap G`: the papers a release needs to separate two models at gap G."""

from __future__ import annotations

import math
from typing import Annotated

import typer

from flows.cli.common import ConfigOption, PipelineOption, fail, read_config


def plan(
    gap: Annotated[float, typer.Option("--gap", help="the difference in a metric's mean to detect (its units)")],
    power: Annotated[float, typer.Option("--power", help="chance of detecting a true gap")] = 0.8,
    alpha: Annotated[float, typer.Option("--alpha", help="two-sided level of the paired test")] = 0.05,
    metric: Annotated[str | None, typer.Option("--metric", "-m", help="one metric (default: every board)")] = None,
    config: ConfigOption = None,
    pipeline: PipelineOption = None,
) -> None:
    """Papers needed to tell two models apart at --gap, from the paired spread of the last release's scores."""
    import polars as pl

    from flows.cli.common import results_database
    from tasks.core import damage
    from tasks.metrics.registry import candidate_scores
    from tasks.stages.validate.leaderboard import per_paper
    from tasks.stages.validate.planning import TooManyPapers
    from tasks.stages.validate.planning import plan as make_plan

    if not (math.isfinite(gap) and gap > 0):
        fail(f"--gap {gap:g}: give a positive, finite difference")
    if not (0 < power < 1 and 0 < alpha < 1):
        fail("--power and --alpha must lie between 0 and 1")
    if metric is not None and not metric.strip():
        fail("--metric is empty: name one metric (grebench query \"select distinct metric from scores\")")
    cfg = read_config(config)
    database, note = results_database(cfg, pipeline)
    if note:
        typer.echo(note)
    if not database.is_file():
        fail(f"no results database at {database}: run a pipeline first (grebench run demo)")
    with damage.results_database(database) as con, damage.reading(database, damage.REBUILD):
        tables = {row[0] for row in con.execute("select table_name from information_schema.tables").fetchall()}
        if "scores" not in tables:
            fail(f"{database.name} has no scores table: run the score stage first")
        pairs = pl.from_arrow(con.sql("select paper_id, candidate, source, reference, metric, eval_lm, score, "
                                          "reason from scores").to_arrow_table())
    if metric is not None:
        pairs = pairs.filter(pairs["metric"] == metric)
        if pairs.is_empty():
            fail(f"--metric {metric!r}: no scores of that metric in {database.name}")
    try:
        table = make_plan(per_paper(candidate_scores(pairs)), gap, alpha, power)
    except TooManyPapers as error:
        fail(f"--gap {gap:g}: {error}")
    if table.is_empty():
        fail("no pair of models shares 3 scored papers: nothing to estimate the spread from")
    typer.echo(f"papers needed to detect a gap of {gap:g} (two-sided alpha {alpha:g}, power {power:g}; paired "
               "t-test on per-paper differences, spread from the last release, docs/submit.md):")
    for row in table.iter_rows(named=True):
        typer.echo(f"- {row['metric']} ({row['eval_lm']}): {row['papers_median']} papers for the median pair "
                   f"(sd of differences {row['sd_median']:.4g}), {row['papers_max']} for the most spread "
                   f"(sd {row['sd_max']:.4g}); {row['pairs']} pairs of models")
