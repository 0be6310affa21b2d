"""`grebench submit` and `grebench export`, as plain typer-style functions.

Register them on the main app with `app.command()(submit)` and `app.command()(export)`.
"""

from __future__ import annotations

from collections import Counter
from datetime import date
from pathlib import Path
from typing import Annotated

import typer

from flows.cli.common import ConfigOption, config_path, fail
from tasks.checks import load_checked_config
from tasks.core.config import Config, ConfigError, check_paths
from tasks.core.errors import GrebenchError

RESCORE = ("score", "validate", "materialize")
PipelineOption = Annotated[str | None, typer.Option(
    "--pipeline", "-p", help="the pipeline whose benchmark this is (default: the one pipeline with curated papers)")]


def pick_pipeline(cfg: Config, pipeline: str | None) -> str:
    """--pipeline, else the one configured pipeline whose curate stage has run."""
    if pipeline is not None:
        return pipeline
    ready = [name for name in cfg.pipelines
             if any((cfg.data_dir / name).glob("*/curate/papers.parquet"))]
    if len(ready) == 1:
        return ready[0]
    if not ready:
        raise ConfigError("no pipeline has benchmark papers yet: run one first (e.g. `grebench run demo`)")
    raise ConfigError(f"several pipelines have benchmark papers ({', '.join(ready)}): choose one with --pipeline")


def parse_cutoff(text: str) -> date:
    try:
        return date.fromisoformat(text)
    except ValueError:
        raise ConfigError(f"--cutoff {text!r}: give the training-data cutoff as a date, YYYY-MM-DD") from None


def submit(
    reviews: Annotated[Path, typer.Option("--reviews", "-r", help="Parquet, CSV or JSON Lines: paper_id, review "
                                          "[, rating, confidence, model]")],
    name: Annotated[str, typer.Option("--name", "-n", help="the name on the leaderboard")],
    cutoff: Annotated[str, typer.Option("--cutoff", help="the system's training-data cutoff, YYYY-MM-DD: papers "
                                        "public on or before it are not scored")],
    pipeline: PipelineOption = None,
    replace: Annotated[bool, typer.Option("--replace", help="replace an earlier submission of this name")] = False,
    score: Annotated[bool, typer.Option("--score/--no-score", help="score, rebuild the leaderboard and the "
                                        "database now (the pipeline's score, validate, materialize stages)")] = True,
    config: ConfigOption = None,
) -> None:
    """Add a file of reviews written by any system to the leaderboard as a submitted candidate."""
    from flows.cli.failures import situation
    from tasks.stages.generate.submit import (
        build_submission,
        check_name,
        check_name_text,
        judge_submission,
        submission_lock,
        write_submission,
    )

    path = config_path(config)
    try:
        check_name_text(name)
        base = load_checked_config(path)
        chosen = pick_pipeline(base, pipeline)
        cfg = base.for_pipeline(chosen)
        day = parse_cutoff(cutoff)
        check_paths(cfg, path)
        with submission_lock(cfg, chosen, name):     # from the name check to the swap: one submit of a name at once
            replaced = check_name(cfg, chosen, name, replace)
            submission = build_submission(cfg, chosen, reviews, name, day, replaced)
            judged = judge_submission(submission, cfg)
            summary = write_submission(cfg, chosen, submission, judged)
    except GrebenchError as error:      # every error that stops a run: one line, exit 2
        fail(str(error).splitlines()[0])
    except Exception as error:          # a full disk, a read-only folder: one line, exit 2
        line = situation(error)
        if line is None:
            raise
        fail(line)
    meta = submission.meta
    typer.echo(f"{name}: {meta['rows_in']} rows: {meta['accepted']} accepted, {meta['excluded']} excluded by the "
               f"cutoff {day}, {meta['rejected']} rejected; {meta['missing']} of {meta['benchmark_papers']} benchmark "
               f"papers without a review{' (replaced the earlier submission)' if replaced else ''}")
    for rule, n in Counter(submission.rejects["rule"].to_list()).most_common():
        typer.echo(f"  rejected {n:>4}  {rule}")
    typer.echo(f"  judgments: {judged.judgments.height} lines, {summary.llm_calls} LLM call(s)")
    stages = [s for s in RESCORE if s in cfg.pipelines[chosen].stages]
    command = f"grebench run {chosen} --stages {','.join(stages)}"
    if not score or not stages:
        typer.echo(f"not scored yet: `{command}` scores it")
        return
    from flows.cli.server import prepare_flows
    from flows.pipeline import pipeline_flow

    prepare_flows()   # the Prefect server this command starts ends with it, even on kill -9 (as `run`)
    try:
        pipeline_flow(pipeline=chosen, config_path=str(path), stages=stages)
    except GrebenchError as error:
        fail(str(error).splitlines()[0])
    typer.echo(f"scored ({', '.join(stages)}); see it with")
    typer.echo("  grebench query \"select metric, rank, rank_low, rank_high, model, mean, tied_with from leaderboard "
               "where kind = 'submitted'\"")


def export(
    out: Annotated[Path, typer.Option("--out", "-o", help="folder to write the papers and the review form to")],
    pipeline: PipelineOption = None,
    config: ConfigOption = None,
) -> None:
    """Write the benchmark's papers and review form for people who submit reviews (`grebench submit`)."""
    from flows.cli.failures import situation
    from tasks.core.config import check_writable
    from tasks.report.export import write_export

    try:
        base = load_checked_config(config_path(config))
        chosen = pick_pipeline(base, pipeline)
        data = base.data_dir.resolve()
        if out.resolve() == data or data in out.resolve().parents:
            raise ConfigError(f"--out {out} lies in the data folder {base.data_dir}, where the pipelines keep their "
                              "outputs, caches and databases: choose a folder outside it")
        try:
            check_writable(out)     # a file, a folder under a file, /proc: said now, in one line
        except ConfigError as error:
            raise ConfigError(f"--out {error}") from None
        written = write_export(base.for_pipeline(chosen), chosen, out)
    except GrebenchError as error:
        fail(str(error).splitlines()[0])
    except OSError as error:        # a full disk, or what the check could not foresee
        fail(situation(error) or f"--out {out}: {error.strerror or error}")
    typer.echo(f"{written['papers']} papers ({written['with_text']} with their PDF text), release "
               f"{written['release_id']}, in {written['out']}: {', '.join(written['files'])}")
