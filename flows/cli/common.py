"""What every `grebench` command shares: the --config option, finding pipelines.toml, failing cleanly."""

from __future__ import annotations

import os
import shlex
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, NoReturn, TypeVar

import typer
from typer.core import TyperGroup

try:   # typer 0.29 carries its own copy of click
    from typer._click import Context
    from typer._click.exceptions import UsageError
except ImportError:   # earlier typer: click itself
    from click import Context, UsageError

from tasks.checks import load_checked_config
from tasks.core.config import Config, ConfigError

T = TypeVar("T")
REPO_CONFIG = Path(__file__).resolve().parents[2] / "pipelines.toml"
ConfigOption = Annotated[
    Path | None,
    typer.Option("--config", "-c", help="pipelines.toml to use (default: ./pipelines.toml, else the project's)"),
]

PipelineOption = Annotated[
    str | None,
    typer.Option("--pipeline", "-p", help="whose results (default: the newest pipeline database)"),
]


def fail(message: str) -> NoReturn:
    """`error: <message>` as one printable line (tasks/core/errors.py `printable`), exit 2."""
    from tasks.core.errors import printable
    from tasks.stages.ingest.auth import scrub

    typer.echo(f"error: {printable(scrub(str(message)))}", err=True)
    raise typer.Exit(2)


class OneLineUsage(TyperGroup):
    """The command group whose usage errors (a missing option, a value that is not a number, an unknown
    command) read like every other failure: one `error:` line, exit 2, instead of click's framed box."""

    def invoke(self, ctx: Context) -> object:
        try:
            return super().invoke(ctx)
        except UsageError as error:
            command = error.ctx.command_path if error.ctx is not None else ctx.command_path
            fail(f"{command}: {error.format_message()} (see {command} --help)")


def config_path(config: Path | None) -> Path:
    """--config, else $GREBENCH_CONFIG, else ./pipelines.toml, else the project's own."""
    if config is not None:
        return config
    env = os.environ.get("GREBENCH_CONFIG")
    if env:
        return Path(env)
    local = Path("pipelines.toml")
    return local if local.is_file() else REPO_CONFIG


def pipeline_databases(cfg: Config) -> dict[str, Path]:
    """Every pipeline's results database on disk (paths.database with {pipeline} filled in), by name."""
    import glob
    import re

    from tasks.core.config import PIPELINE_NAME

    full = cfg.root / str(cfg.paths.database)   # an absolute template stays as it is
    pattern = re.compile(re.escape(str(full)).replace(re.escape("{pipeline}"), f"({PIPELINE_NAME.pattern})"))
    at = next((i for i, part in enumerate(full.parts) if "{pipeline}" in part), len(full.parts) - 1)
    base = Path(*full.parts[:at])                # globbed from its last folder without {pipeline}
    rest = "/".join(glob.escape(part).replace("{pipeline}", "*") for part in full.parts[at:])
    found = {}
    for path in base.glob(rest):
        match = pattern.fullmatch(str(path))
        if match and path.is_file():
            found[match.group(1)] = path
    return found


def results_database(cfg: Config, pipeline: str | None) -> tuple[Path, str | None]:
    """(the database a read command shows, a line saying which pipeline when it was chosen for the user).

    `--pipeline` picks one; without it the newest pipeline database is shown. A missing database
    ends the command with one line saying how to build it.
    """
    from tasks.core.locks import built_for

    try:
        if pipeline is not None or not cfg.per_pipeline_database:
            database = cfg.database_for(pipeline)
            if not database.is_file():
                name = pipeline or "demo"
                fail(f"no results database at {database}: run `grebench run {shlex.quote(name)}` first")
            holder = built_for(database)
            if pipeline is not None and holder is not None and holder != pipeline:
                fail(f"{database} holds the results of pipeline {holder!r}, not {pipeline!r}")
            return database, None
    except ValueError as error:   # a ConfigError, or a --pipeline name that is not allowed
        fail(str(error))
    found = pipeline_databases(cfg)
    if not found:
        fail(f"no results database yet ({cfg.paths.database}): run `grebench run demo` (or another pipeline) first")
    name = max(found, key=lambda n: found[n].stat().st_mtime)
    others = sorted(set(found) - {name})
    note = f"results of pipeline {name} ({found[name]})"
    if others:
        note += f"; also built: {', '.join(others)} (choose with --pipeline)"
    return found[name], note


def output_folder(cfg: Config, database: Path, chosen: Path | None, kind: str) -> Path:
    """Where `site` / `report` write: `chosen`, else <data_dir>/<kind>, or beside the pipeline's own
    database (<data_dir>/<pipeline>/<kind>) when each pipeline has one; checked writable now."""
    from tasks.core.config import ConfigError, check_writable

    folder = chosen or (database.parent / kind if cfg.per_pipeline_database else cfg.data_dir / kind)
    try:
        check_writable(folder)
    except ConfigError as error:
        fail(f"{'--out' if chosen else 'the output folder'} {error}")
    return folder


def read_config(config: Path | None) -> Config:
    """The config --config points at; a config error ends the command with its message."""
    try:
        return load_checked_config(config_path(config))
    except ConfigError as error:
        fail(str(error))


BenchmarksOption = Annotated[
    Path | None,
    typer.Option("--benchmarks", help="CSV of other benchmarks' scores (model, benchmark, score; benchmark "
                 "parameter_size: the model's size): adds their Spearman with each leaderboard and the size plot"),
]


def render_results(config: Path | None, pipeline: str | None, out: Path | None, kind: str,
                   benchmarks: Path | None, render: Callable[[Path, Path, Any], T]) -> T:
    """What `report` and `site` share: the --benchmarks file read and checked, the pipeline's results database
    and output folder chosen (`chosen_results`), then `render(database, folder, benchmarks)`; a database that
    is not there is one `error:` line."""
    bench = read_benchmarks(benchmarks)
    database, folder = chosen_results(config, pipeline, out, kind)
    try:
        return render(database, folder, bench)
    except FileNotFoundError as error:
        fail(str(error))


def read_benchmarks(path: Path | None) -> Any:
    """The --benchmarks CSV (a polars frame) read and checked (one `error:` line when it is not usable); None
    without one."""
    if path is None:
        return None
    from tasks.report.benchmarks import read_benchmarks_csv

    try:
        return read_benchmarks_csv(path)
    except ValueError as error:
        fail(f"--benchmarks: {error}")


def chosen_results(config: Path | None, pipeline: str | None, out: Path | None, kind: str) -> tuple[Path, Path]:
    """(results database, output folder) of `report` / `site`: the pipeline's database (or the newest,
    said in one line) and `out`, or the folder of `kind` beside that database."""
    cfg = read_config(config)
    database, note = results_database(cfg, pipeline)
    if note:
        typer.echo(note)
    return database, output_folder(cfg, database, out, kind)
