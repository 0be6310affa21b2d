"""The `grebench` command line."""

from __future__ import annotations

import atexit
import json
import os
import sys
import threading
import traceback
from datetime import datetime
from typing import TYPE_CHECKING, Annotated, NoReturn

import typer

if TYPE_CHECKING:
    from flows.cli.interrupts import Stopped

# Embedded defaults for Prefect's ephemeral server: a slow 2-core machine needs more than the
# default 20 s to start it, and nothing here may phone home. Explicit settings still win.
os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "180")
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# An empty PREFECT_API_URL names no server: Prefect then starts its temporary one, but its events
# client reads the empty URL, fails, and every event of the run logs a "stopped service" traceback.
if "PREFECT_API_URL" in os.environ and not os.environ["PREFECT_API_URL"].strip():
    del os.environ["PREFECT_API_URL"]

from flows.cli.common import ConfigOption, OneLineUsage, config_path, fail, read_config  # noqa: E402
from flows.cli.failures import (  # noqa: E402, F401 - part of the CLI's API
    SITUATIONS,
    KnownFailureFilter,
    quiet_known_failures,
    situation,
)
from flows.cli.query import (  # noqa: E402, F401 - check_read_only: part of the CLI's API
    EXIT_INTERRUPTED,
    EXIT_TIMEOUT,
    check_read_only,
    query,
)
from flows.cli.site import site  # noqa: E402
from flows.cli.submit import export, submit  # noqa: E402
from flows.cli.validate import report, validate  # noqa: E402
from tasks.checks import load_checked_config  # noqa: E402
from tasks.core.config import Config, ConfigError, check_paths, select_stages  # noqa: E402
from tasks.core.errors import GrebenchError  # noqa: E402
from tasks.core.stage_inputs import check_inputs  # noqa: E402

PLAN_YEARS = (1970, 2999)   # the dates `schedule --on` can plan from

app = typer.Typer(
    cls=OneLineUsage,
    help="GRE-bench: benchmark LLM-written peer reviews against fresh human reviews.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)

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
        check_inputs(cfg, pipeline, chosen or cfg.pipelines[pipeline].stages)   # before Prefect starts
        from flows.cli.run import preload_first_local_model
        from flows.cli.server import ephemeral_server_starting, prepare_flows

        prepare_flows()   # the Prefect server this command starts ends with it, even on kill -9
        with ephemeral_server_starting():   # the flows import and the first model loads meanwhile
            preload_first_local_model(cfg, chosen or cfg.pipelines[pipeline].stages)
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
    if not PLAN_YEARS[0] <= day.year <= PLAN_YEARS[1]:   # the cron and the venue calendars overflow far out
        fail(f"--on {on}: give a date in the years {PLAN_YEARS[0]} to {PLAN_YEARS[1]}")
    try:
        cfg = load_checked_config(path)
        deployment = build_deployment(cfg, str(path.resolve()))
        plan = cfg.schedule
        runs = next_runs(plan.cron, plan.timezone, start=datetime(day.year, day.month, day.day, tzinfo=UTC)
                         if on else None)
        cycles = describe_plan(cfg, day, runs, offline=dry_run)
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
        from tasks.stages.ingest.login_check import credentials_set

        typer.echo(f"credentials set: {credentials_set()} (not checked in a dry run)")
        typer.echo("dry run: nothing registered")
        return
    for line in scheduled_login(cfg, plan.pipeline, runs[0] if runs else None):
        typer.echo(line)
    from prefect import serve

    from flows.cli.server import prepare_flows

    prepare_flows()   # the Prefect server this command starts ends with it, even on kill -9
    typer.echo("registering and serving the deployment (Ctrl-C to stop)")
    serve(deployment)


def scheduled_login(cfg: Config, pipeline: str, first_run: datetime | None) -> list[str]:
    """The login lines of the hosts a scheduled `pipeline` reads; fails in one line when the login is
    missing or refused, or is a token that expires before the first run."""
    from tasks.stages.ingest.login_check import check_pipeline_login, needs_login

    if not needs_login(cfg, pipeline):
        return []
    try:
        identities = check_pipeline_login(cfg, pipeline)
    except GrebenchError as error:
        fail(str(error).splitlines()[0] if str(error) else type(error).__name__)
    for identity in identities:
        if identity.source == "token" and identity.expires and first_run and identity.expires < first_run:
            fail(f"OPENREVIEW_TOKEN expires {identity.expires:%Y-%m-%d %H:%M} UTC, before the first scheduled run "
                 f"({first_run.isoformat()}): set OPENREVIEW_USERNAME and OPENREVIEW_PASSWORD (and "
                 "OPENREVIEW_TOTP_SECRET for a two-factor account) so each run logs in itself")
    return [identity.line() for identity in identities]


app.command()(query)
app.command()(validate)
app.command()(report)
app.command()(site)
app.command()(submit)   # submitted reviews -> a candidate on the leaderboard (docs/submit.md)
app.command()(export)   # the benchmark's papers and review form for submitters

from flows.cli.plan import plan  # noqa: E402 - `grebench plan --gap G`: papers a release needs

app.command()(plan)

from flows.cli.login import login  # noqa: E402 - `grebench login --check`: who OpenReview says we are
from flows.cli.venues import venues  # noqa: E402 - `grebench venues`: a year's venues and their facts

app.command()(venues)
app.command()(login)

from flows.cli.reproduce import reproduce_app  # noqa: E402 - `grebench reproduce gem-table2`: a paper's table

app.add_typer(reproduce_app, name="reproduce")

from flows.cli.calibrate import calibrate_app  # noqa: E402 - `grebench calibrate binoculars`: a threshold at an FPR

app.add_typer(calibrate_app, name="calibrate")

def sql_arguments(args: list[str]) -> list[str]:
    """`args` with `--` put before the SQL of `grebench query` when the SQL starts with `-` (a comment,
    "-- totals\nselect ..."): no option name holds a space or a line break, SQL of that shape does."""
    if not args or args[0] != "query" or "--" in args:
        return args
    for i, arg in enumerate(args[1:], start=1):
        if arg.startswith("-") and any(c.isspace() for c in arg):
            return [*args[:i], *args[i + 1:], "--", arg]
    return args


def _leave(code: int) -> NoReturn:
    """Exit now: after a failure inside DuckDB, interpreter teardown only adds noise (leak reports)."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def _signal_behind(done: SystemExit) -> Stopped | None:
    """The `Stopped` signal that an exit was made from (typer raises `Exit(130)` from a KeyboardInterrupt)."""
    from flows.cli.interrupts import Stopped

    def behind(error: BaseException) -> BaseException | None:   # "raise ... from None": a handled stop
        return error.__cause__ if error.__cause__ is not None or error.__suppress_context__ else error.__context__

    seen, cause = set(), behind(done)
    while cause is not None and id(cause) not in seen:
        if isinstance(cause, Stopped):
            return cause
        seen.add(id(cause))
        cause = behind(cause)
    return None


def _finish(code: int | str | None) -> NoReturn:
    """End the process as the interpreter would (threads' exit hooks and joins, atexit handlers: Prefect's
    log flush and server stop) but without its teardown, which walks every object torch, transformers
    and Prefect made (1-2.5 s after a run) and has DuckDB report the ones it still holds."""
    from flows.cli.interrupts import end_on_signal

    end_on_signal()            # the command is done: a signal now ends it with its line, not an atexit traceback
    threading._shutdown()      # what Py_Finalize runs first: the threads' exit hooks, then the joins
    atexit._run_exitfuncs()
    if isinstance(code, str):
        print(code, file=sys.stderr)
    _leave(1 if isinstance(code, str) else code or 0)


def main(argv: list[str] | None = None) -> None:
    """The `grebench` entry point: the typer app, with the machine's situations in one line. A signal that
    lands while an exit is already being handled (the command done, its line being chosen) ends the command
    with the signal's line too, not with a traceback from inside the handler."""
    try:
        _main(argv)
    except KeyboardInterrupt as stopped:
        from flows.cli.interrupts import NOTHING_LOST, end_children

        end_children()
        typer.echo(f"error: {getattr(stopped, 'what', 'interrupted (Ctrl-C)')}; {NOTHING_LOST}", err=True)
        _leave(getattr(stopped, "code", EXIT_INTERRUPTED))


def _main(argv: list[str] | None) -> None:
    from tasks.core.errors import GrebenchError, printable
    from tasks.stages.ingest.auth import scrub, scrub_log_records

    scrub_log_records()
    if argv is None:   # the process is this command's: Ctrl-C and SIGTERM end it within seconds
        from flows.cli.interrupts import install

        install()
    args = sql_arguments(list(sys.argv[1:] if argv is None else argv))
    try:
        app(args=args, prog_name="grebench")
    except KeyboardInterrupt as stopped:
        from flows.cli.interrupts import NOTHING_LOST, end_children

        end_children()
        typer.echo(f"error: {getattr(stopped, 'what', 'interrupted (Ctrl-C)')}; {NOTHING_LOST}", err=True)
        _leave(getattr(stopped, "code", EXIT_INTERRUPTED))
    except SystemExit as done:
        stopped = _signal_behind(done)
        if stopped is not None:   # typer turns a KeyboardInterrupt into a silent exit 130: say which signal
            from flows.cli.interrupts import NOTHING_LOST, end_children

            end_children()
            typer.echo(f"error: {stopped.what}; {NOTHING_LOST}", err=True)
            _leave(stopped.code)
        if done.code in (EXIT_TIMEOUT, EXIT_INTERRUPTED, 143):   # a query thread may still be inside DuckDB:
            _leave(done.code)                               # leave now, without waiting on it
        if argv is None:   # the process ends here
            _finish(done.code)
        raise
    except GrebenchError as error:
        typer.echo(f"error: {printable(scrub(str(error).splitlines()[0] if str(error) else type(error).__name__))}",
                   err=True)
        _leave(2)
    except Exception as error:
        line = situation(error)
        if line is None:
            if argv is not None:
                raise
            print(scrub("".join(traceback.format_exception(error))), end="", file=sys.stderr)   # a bug: its traceback, scrubbed
            _leave(1)
        typer.echo(f"error: {printable(scrub(line))}", err=True)
        _leave(1)


if __name__ == "__main__":
    main()
