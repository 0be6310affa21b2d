"""What every `grebench` command shares: the --config option, finding pipelines.toml, failing cleanly."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, NoReturn

import typer

from tasks.checks import load_checked_config
from tasks.core.config import Config, ConfigError

REPO_CONFIG = Path(__file__).resolve().parents[2] / "pipelines.toml"
ConfigOption = Annotated[
    Path | None,
    typer.Option("--config", "-c", help="pipelines.toml to use (default: ./pipelines.toml, else the project's)"),
]


def fail(message: str) -> NoReturn:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(2)


def config_path(config: Path | None) -> Path:
    """--config, else $GREBENCH_CONFIG, else ./pipelines.toml, else the project's own."""
    if config is not None:
        return config
    env = os.environ.get("GREBENCH_CONFIG")
    if env:
        return Path(env)
    local = Path("pipelines.toml")
    return local if local.is_file() else REPO_CONFIG


def read_config(config: Path | None) -> Config:
    """The config --config points at; a config error ends the command with its message."""
    try:
        return load_checked_config(config_path(config))
    except ConfigError as error:
        fail(str(error))
