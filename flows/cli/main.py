"""The `grebench` command line."""

from __future__ import annotations

import json
import os
import sys
from enum import StrEnum
from typing import Annotated

import typer

# Embedded defaults for Prefect's ephemeral server: a slow 2-core machine needs more than the
# default 20 s to start it, and nothing here may phone home. Explicit settings still win.
os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "180")
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from flows.cli.common import ConfigOption, config_path, fail, read_config  # noqa: E402
from flows.cli.site import site  # noqa: E402
from flows.cli.submit import export, submit  # noqa: E402
from flows.cli.validate import report, validate  # noqa: E402
from tasks.checks import load_checked_config  # noqa: E402
from tasks.core.config import ConfigError, check_paths, select_stages  # noqa: E402
from tasks.core.errors import GrebenchError  # noqa: E402

app = typer.Typer(
    help="GRE-bench: benchmark LLM-written peer reviews against fresh human reviews.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)

READ_ONLY_STATEMENTS = {"SELECT", "EXPLAIN", "PRAGMA"}


class Format(StrEnum):
    table = "table"
    csv = "csv"
    json = "json"


@app.command()
def run(
    pipeline: Annotated[str, typer.Argument(help="a pipeline name from pipelines.toml, e.g. demo")],
    stages: Annotated[
        str | None, typer.Option("--stages", "-s", help="comma-separated subset of the pipeline's stages")
    ] = None,
    json_output: Annotated[bool, typer.Option("--json", help="print the stage summaries as JSON")] = False,
    config: ConfigOption = None,
) -> None:
    """Run a named pipeline (all its stages, or the ones chosen with --stages)."""
    path = config_path(config)
    try:
        cfg = load_checked_config(path).for_pipeline(pipeline)
        chosen = parse_stages(stages, cfg.pipelines[pipeline].stages)
        check_paths(cfg, path)
        from flows.pipeline import pipeline_flow

        summary = pipeline_flow(pipeline=pipeline, config_path=str(path), stages=chosen)
    except GrebenchError as error:    # every error that stops a run: one line, exit 1
        fail(str(error).splitlines()[0])
    if json_output:
        typer.echo(json.dumps({stage: s.as_dict() for stage, s in summary.items()}, indent=2, default=str))
    else:
        from flows.cli.run import run_summary

        typer.echo(run_summary(cfg, pipeline, summary))


def parse_stages(option: str | None, configured: tuple[str, ...]) -> list[str] | None:
    """The stages `--stages` names (None: all of the pipeline's), checked by `select_stages`."""
    if option is None:
        return None
    return select_stages(configured, [s.strip() for s in option.split(",")])


@app.command()
def pipelines(config: ConfigOption = None) -> None:
    """List the pipelines pipelines.toml defines."""
    cfg = read_config(config)
    for name, spec in cfg.pipelines.items():
        typer.echo(f"{name:<12} {', '.join(spec.stages):<60} {spec.description}")


@app.command()
def schedule(
    dry_run: Annotated[bool, typer.Option("--dry-run", help="print the deployment, register nothing")] = False,
    on: Annotated[str | None, typer.Option("--on", help="plan as if today were this date (YYYY-MM-DD)")] = None,
    config: ConfigOption = None,
) -> None:
    """Register the yearly refresh as a Prefect deployment with its cron schedule, and serve it."""
    from datetime import UTC, date, datetime

    from flows.refresh import build_deployment, describe_plan, next_runs
    from tasks.core.venue_facts import FactsError

    path = config_path(config)
    try:
        day = date.fromisoformat(on) if on else datetime.now(UTC).date()
    except ValueError:
        fail(f"--on {on!r}: not a date (give YYYY-MM-DD)")
    try:
        cfg = load_checked_config(path)
        deployment = build_deployment(cfg, str(path.resolve()))
        plan = cfg.schedule
        runs = next_runs(plan.cron, plan.timezone, start=datetime(day.year, day.month, day.day, tzinfo=UTC)
                         if on else None)
        cycles = describe_plan(cfg, day, runs)
    except (ConfigError, FactsError) as error:
        fail(str(error))
    typer.echo(f"deployment: {deployment.flow_name}/{deployment.name}")
    typer.echo(f"entrypoint: {deployment.entrypoint}")
    typer.echo(f"parameters: {json.dumps(deployment.parameters)}")
    typer.echo(f"cron:       {plan.cron} ({plan.timezone})")
    typer.echo("next runs:  " + ", ".join(t.isoformat() for t in runs))
    for line in cycles:
        typer.echo(line)
    if dry_run:
        typer.echo("dry run: nothing registered")
        return
    from prefect import serve

    typer.echo("registering and serving the deployment (Ctrl-C to stop)")
    serve(deployment)


def check_read_only(sql: str) -> None:
    """Refuse anything but reading statements, with a message that says which statement."""
    import duckdb

    try:
        statements = duckdb.extract_statements(sql)
    except duckdb.Error as error:
        raise ValueError(f"cannot parse the query: {error}") from None
    if not statements:
        raise ValueError("the query is empty")
    for statement in statements:
        kind = statement.type.name
        if kind not in READ_ONLY_STATEMENTS:
            raise ValueError(
                f"grebench query is read-only: {kind} statements are refused "
                f"({statement.query.strip()[:60]!r}); results are rebuilt by `grebench run <pipeline>`"
            )


@app.command()
def query(
    sql: Annotated[str, typer.Argument(help="read-only SQL, e.g. \"select count(*) from reviews\"")],
    format: Annotated[Format, typer.Option("--format", "-f")] = Format.table,
    max_rows: Annotated[int, typer.Option(help="rows shown in table format")] = 200,
    config: ConfigOption = None,
) -> None:
    """Run read-only SQL against the results database and print the result."""
    import duckdb

    try:
        database = load_checked_config(config_path(config)).database
        check_read_only(sql)
    except (ConfigError, ValueError) as error:
        fail(str(error))
    if not database.is_file():
        fail(f"no results database at {database}: run `grebench run demo` (or another pipeline) first")
    from tasks.core.locks import LockTimeout, locked, recover_database, wal_path
    from tasks.core.sandbox import connect_sandboxed, write_csv, write_json

    if wal_path(database).exists():   # left by a killed writer: replay it, or move it aside
        try:
            with locked(database, timeout=30):
                recover_database(database)
        except LockTimeout as error:
            fail(str(error))
    try:
        with connect_sandboxed(database) as con:
            if format is Format.table:
                relation = con.sql(sql)
                if relation is not None:
                    relation.show(max_rows=max_rows, max_col_width=80)
            elif format is Format.csv:
                write_csv(con.execute(sql), sys.stdout)
            else:
                write_json(con.execute(sql), sys.stdout)
    except duckdb.Error as error:
        fail(str(error).splitlines()[0])


app.command()(validate)
app.command()(report)
app.command()(site)
app.command()(submit)   # submitted reviews -> a candidate on the leaderboard (docs/submit.md)
app.command()(export)   # the benchmark's papers and review form for submitters

from flows.cli.venues import venues  # noqa: E402 - `grebench venues`: a year's venues and their facts

app.command()(venues)

if __name__ == "__main__":
    app()
