"""`grebench validate` and `grebench report`, as plain typer-style functions.

Register them on the main app with `app.command()(validate)` and `app.command()(report)`.
"""

from __future__ import annotations

import json
import math
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import polars as pl
import typer

from flows.cli.common import (
    BenchmarksOption,
    ConfigOption,
    PipelineOption,
    fail,
    read_config,
    render_results,
)

JSON_KEYS = ("strategy", "metric", "n", "smd", "ci_low", "ci_high", "p_value", "passed")


class OutputFormat(StrEnum):
    table = "table"
    json = "json"


def _json_value(value: object) -> object:
    return None if isinstance(value, float) and math.isnan(value) else value


def json_rows(validation: pl.DataFrame) -> list[dict[str, object]]:
    """The --format json rows: exactly JSON_KEYS, NaN written as null."""
    return [{k: _json_value(row[k]) for k in JSON_KEYS} for row in validation.iter_rows(named=True)]


def _cell(value: object) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return "nan" if math.isnan(value) else f"{value:.3g}" if value and abs(value) < 1e-3 else f"{value:.3f}"
    return str(value)


def text_table(frame: pl.DataFrame, columns: list[str]) -> str:
    cells = [[_cell(row[c]) for c in columns] for row in frame.iter_rows(named=True)]
    widths = [max(len(c), *(len(r[i]) for r in cells)) for i, c in enumerate(columns)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True))]
    lines += ["  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)) for r in cells]
    return "\n".join(lines)


def validate(
    reviews: Annotated[Path, typer.Option("--reviews", "-r", help="Parquet or CSV: paper_id, reviewer, review "
                                          "[, judgments, abstract, quality]; or a shipped sample's name "
                                          "(iclr2023_gem: real ICLR 2023 reviews)")],
    metric: Annotated[list[str] | None, typer.Option("--metric", "-m", help="metric to test (repeatable); "
                                                     "default: validate.metrics")] = None,
    strategies: Annotated[str | None, typer.Option("--strategies", "-s", help="comma-separated strategies; "
                                                   "default: validate.strategies")] = None,
    format: Annotated[OutputFormat, typer.Option("--format", "-f")] = OutputFormat.table,
    config: ConfigOption = None,
) -> None:
    """Validate metrics on your own reviews: perturb candidates, rescore them, test each metric."""
    from tasks.core.progress import scorer_with_progress
    from tasks.lm import eval_spec
    from tasks.metrics import check_names, get
    from tasks.metrics.resources import build_resources, engine_loglikelihood
    from tasks.stages.validate.review_data import sample_file
    from tasks.stages.validate.reviews_file import ReviewsFileError, load_reviews_file
    from tasks.stages.validate.stage import judgments_by, validate_reviews
    from tasks.stages.validate.strategies import check_strategies

    cfg = read_config(config)
    chosen = tuple(s.strip() for s in strategies.split(",") if s.strip()) if strategies else cfg.validate.strategies
    try:
        check_strategies(chosen)
    except ValueError as error:
        fail(f"--strategies: {error}")
    metrics = tuple(metric) if metric else cfg.validate.metrics
    try:
        check_names(metrics)
        frame = load_reviews_file(reviews if reviews.exists() else sample_file(str(reviews)) or reviews)
    except (ValueError, ReviewsFileError) as error:
        fail(str(error))
    from tasks.core.errors import GrebenchError

    try:
        scored = scorer_with_progress(engine_loglikelihood(eval_spec(cfg.score), cfg.score.token_budget))
        from tasks.core.layout import cache_dir

        resources = build_resources(cfg.score, scored, llm_cache=cache_dir(cfg, "llm"))   # judges, generation oracle
        result = validate_reviews(cfg, frame, resources, metrics, chosen, curated=False)
    except (ValueError, GrebenchError) as error:   # e.g. a refused key, an LLM nobody answers at
        fail(str(error).splitlines()[0])
    dead = all_failed(result.perturbations)
    if format is OutputFormat.json:
        typer.echo(json.dumps(json_rows(result.validation)))
        if dead:
            fail(dead)
        return
    stats = result.stats
    typer.echo(f"{stats['papers']} papers, {stats['candidates']} candidates, {stats['perturbations']} perturbations "
               f"({stats['perturbations_failed']} failed)")
    if "judgments" in frame.columns or any(m.reads == "judgments" for m in get(metrics)):
        typer.echo(f"judgments: {judgments_by(cfg, False, 'the file')}")
    typer.echo(text_table(result.validation, ["metric", "strategy", "kind", "level", "n", "mean_change", "smd",
                                              "ci_low", "ci_high", "p_value", "verdict", "reason"]))
    failed = result.perturbations.filter(pl.col("error").is_not_null())
    for (name, error), group in failed.group_by("strategy", "error", maintain_order=True):
        typer.echo(f"perturbation failed: {name}: {error} ({group.height} candidate(s))")
    if result.human_correlation.height:
        typer.echo("\nSpearman correlation with the human quality score:")
        typer.echo(text_table(result.human_correlation, ["metric", "n", "rho", "p_value", "reason"]))
    if dead:
        fail(dead)


def all_failed(perturbations: pl.DataFrame) -> str | None:
    """One line when every perturbation of some LLM strategy failed (every LLM call errored): its
    tests are then "inconclusive" for want of data, which must not pass for a finished run. (A
    deterministic strategy that cannot apply, e.g. no other paper to swap in, is a result.)"""
    from tasks.stages.validate.strategies import STRATEGIES

    if not perturbations.height or "error" not in perturbations.columns:
        return None
    for (name,), group in perturbations.group_by("strategy", maintain_order=True):
        if name not in STRATEGIES or not STRATEGIES[name].needs_llm:
            continue
        errors = group["error"].drop_nulls()
        if errors.len() == group.height:
            return (f"every perturbation of strategy {name} failed ({group.height} candidate(s)); "
                    f"first error: {errors[0]}")
    return None


def report(
    config: ConfigOption = None,
    out_dir: Annotated[Path | None, typer.Option("--out-dir", "-o", help="default: <data_dir>/report "
                                                 "(<data_dir>/<pipeline>/report with a database per pipeline)")] = None,
    pipeline: PipelineOption = None,
    benchmarks: BenchmarksOption = None,
) -> None:
    """Write the leaderboard figure, the validation heat map and a markdown summary from a results database."""
    from tasks.report.validation import write_report

    for path in render_results(config, pipeline, out_dir, "report", benchmarks, write_report).values():
        typer.echo(str(path))
