"""Typed, validated view of `pipelines.toml`: the whole file (`Config`), its one loader (`load_config`)
and the merge of a pipeline's overrides, so stages only ever see final values. Every problem is a
`ConfigError` with a one-line message that names the offending key.

Each stage's settings are a frozen pydantic model in a module of its own beside this one:
config_ingest (with the venues and the synthetic source), config_curate, config_preprocess,
config_generate, config_qualify, config_score, config_validate; config_llm holds the backend settings
they share, config_commands those of `grebench query` and `grebench schedule`, config_base the frozen
base model, the list of stages and the name checks. Every public name is importable from here:
`from tasks.core.config import Config, LLMConfig, load_config`.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import PrivateAttr, ValidationError, field_validator, model_validator

from tasks.core.config_base import (
    CONFIGURED_STAGES,
    PIPELINE_NAME,
    STAGES,
    VENUE_SEGMENT,
    BackendName,
    ConfigError,
    Frozen,
    Stage,
    check_pipeline_name,
    check_venue_id,
    select_stages,
)
from tasks.core.config_commands import QueryConfig, ScheduleConfig
from tasks.core.config_curate import CurateConfig
from tasks.core.config_generate import CandidateConfig, GenerateConfig, InjectionConfig
from tasks.core.config_ingest import IngestConfig, SyntheticSource, VenueConfig
from tasks.core.config_llm import LLMConfig, Quantization
from tasks.core.config_preprocess import PreprocessConfig
from tasks.core.config_qualify import QualifyConfig
from tasks.core.config_score import EvalLMConfig, ReferenceFlagsConfig, ReviewQualityConfig, ScoreConfig
from tasks.core.config_validate import ValidateConfig

# every stage imports its settings from here
__all__ = [
    "CONFIGURED_STAGES", "DEFAULT_CONFIG", "PIPELINE_NAME", "PIPELINE_TABLES", "STAGES", "VENUE_SEGMENT",
    "BackendName", "CandidateConfig", "Config", "ConfigError", "CurateConfig", "EvalLMConfig", "Frozen",
    "GenerateConfig", "IngestConfig", "InjectionConfig", "LLMConfig", "PathsConfig", "PipelineConfig",
    "PreprocessConfig", "QualifyConfig", "Quantization", "QueryConfig", "ReferenceFlagsConfig",
    "ReviewQualityConfig", "ScheduleConfig", "ScoreConfig", "Stage", "SyntheticSource", "ValidateConfig",
    "VenueConfig", "check_paths", "check_pipeline_name", "check_venue_id", "check_writable", "extended",
    "load_config", "select_stages", "writable_problem",
]

DEFAULT_CONFIG = Path("pipelines.toml")


class PathsConfig(Frozen):
    data_dir: Path = Path("data")
    # "{pipeline}" in the path gives each pipeline its own results database (the shipped config:
    # data/{pipeline}/grebench.duckdb). Without it one file is shared, and materialize refuses to
    # replace one pipeline's results with another's (tasks/stages/materialize/build.py).
    database: Path = Path("data/grebench.duckdb")

    @field_validator("database")
    @classmethod
    def _one_placeholder(cls, value: Path) -> Path:
        text = str(value).replace("{pipeline}", "")
        if "{" in text or "}" in text:
            raise ValueError("the only placeholder allowed is {pipeline}")
        return value


class PipelineConfig(Frozen):
    description: str = ""
    source: Literal["openreview", "synthetic"] = "openreview"
    synthetic: SyntheticSource = SyntheticSource()
    venues: tuple[str, ...]
    stages: tuple[Stage, ...]
    ingest: dict[str, Any] = {}
    curate: dict[str, Any] = {}
    preprocess: dict[str, Any] = {}
    generate: dict[str, Any] = {}
    score: dict[str, Any] = {}
    validate: dict[str, Any] = {}
    qualify: dict[str, Any] = {}

    @field_validator("venues", "stages")
    @classmethod
    def _not_empty(cls, value: tuple) -> tuple:
        if not value:
            raise ValueError("must not be empty")
        repeated = sorted({v for v in value if value.count(v) > 1})
        if repeated:
            raise ValueError(f"lists {repeated} more than once")
        return value

    @field_validator("venues")
    @classmethod
    def _safe_venue_ids(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        return tuple(check_venue_id(v) for v in value)


class Config(Frozen):
    """The whole file. `root` is the folder relative paths are resolved against."""

    root: Path = Path(".")
    paths: PathsConfig = PathsConfig()
    ingest: IngestConfig = IngestConfig()
    curate: CurateConfig = CurateConfig()
    preprocess: PreprocessConfig = PreprocessConfig()
    generate: GenerateConfig = GenerateConfig()
    score: ScoreConfig = ScoreConfig()
    validate: ValidateConfig = ValidateConfig()
    qualify: QualifyConfig = QualifyConfig()
    query: QueryConfig = QueryConfig()
    schedule: ScheduleConfig = ScheduleConfig()
    venues: dict[str, VenueConfig] = {}
    pipelines: dict[str, PipelineConfig] = {}
    _pipeline: str | None = PrivateAttr(None)   # set by for_pipeline: the pipeline this config runs

    @field_validator("pipelines")
    @classmethod
    def _safe_names(cls, value: dict[str, PipelineConfig]) -> dict[str, PipelineConfig]:
        for name in value:
            check_pipeline_name(name)
        return value

    @property
    def data_dir(self) -> Path:
        return self.root / self.paths.data_dir

    @property
    def per_pipeline_database(self) -> bool:
        return "{pipeline}" in str(self.paths.database)

    @property
    def database(self) -> Path:
        """The results database of the pipeline this config was resolved for (`for_pipeline`)."""
        return self.database_for(self._pipeline)

    def database_for(self, pipeline: str | None) -> Path:
        """The results database of `pipeline` (`paths.database` with {pipeline} filled in)."""
        if not self.per_pipeline_database:
            return self.root / self.paths.database
        if pipeline is None:
            raise ConfigError("paths.database holds {pipeline}: name the pipeline whose results you mean "
                              "(--pipeline)")
        return self.root / str(self.paths.database).replace("{pipeline}", check_pipeline_name(pipeline))

    @model_validator(mode="after")
    def _ratings_on_scale(self) -> Config:
        scale = set(self.curate.common_scale)
        for venue_id, venue in self.venues.items():
            off = {raw: mapped for raw, mapped in (venue.rating_map or {}).items() if mapped not in scale}
            if off:
                raw, mapped = next(iter(off.items()))
                raise ValueError(f"venues.{venue_id}.rating_map: {raw!r} maps to {mapped:g}, which is not on "
                                 f"curate.common_scale {list(self.curate.common_scale)}")
        return self

    def venue(self, venue_id: str) -> VenueConfig:
        return self.venues.get(venue_id, VenueConfig())

    def for_pipeline(self, name: str, venues: Sequence[str] | None = None) -> Config:
        """The config with the named pipeline's stage overrides merged in.

        A name `<base>-<year>` resolves to pipeline `<base>` with `{year}` in its venue ids filled
        in (the yearly refresh); `venues` replaces the pipeline's venue list.
        """
        pipelines = dict(self.pipelines)
        if name not in pipelines:
            match = re.fullmatch(r"(.+)-(\d{4})", name)
            base = pipelines.get(match.group(1)) if match else None
            if base is None:
                known = ", ".join(sorted(self.pipelines)) or "none"
                raise ConfigError(f"unknown pipeline {name!r} (known: {known})")
            year = match.group(2)
            pipelines[name] = base.model_copy(update={"venues": tuple(v.replace("{year}", year) for v in base.venues)})
        if venues:
            try:
                checked = tuple(check_venue_id(v) for v in venues)
            except ValueError as error:
                raise ConfigError(str(error)) from None
            pipelines[name] = pipelines[name].model_copy(update={"venues": checked})
        pipeline = pipelines[name]
        if any("{year}" in v for v in pipeline.venues):
            raise ConfigError(f"pipeline {name!r} is a yearly template: run it as '{name}-<year>'")
        merged = self._merged(name, pipeline)
        merged._pipeline = name
        return merged

    def _merged(self, name: str, pipeline: PipelineConfig) -> Config:
        """The config with `pipeline`'s overrides merged in, every pipeline kept (`pipelines[name]` is `pipeline`)."""
        alone = self._alone(name, pipeline)
        return alone.model_copy(update={"pipelines": {**self.pipelines, name: alone.pipelines[name]}})

    def _alone(self, name: str, pipeline: PipelineConfig) -> Config:
        """The config with `pipeline`'s overrides merged in, validated with that one pipeline only: the
        work is the same for each pipeline however many the file has (checking them all is linear)."""
        merged = self.model_dump(exclude={"pipelines"})
        merged["pipelines"] = {name: pipeline.model_dump()}
        for stage in CONFIGURED_STAGES:
            merged[stage].update(getattr(pipeline, stage))
        return _validate(merged, where=f"pipelines.{name}")


PIPELINE_TABLES = (*CONFIGURED_STAGES, "synthetic")   # a pipeline's tables that `extends` merges key by key


def extended(pipelines: dict[str, Any]) -> dict[str, Any]:
    """The pipelines with every `extends = "<other>"` resolved: a pipeline starts from the other one's
    keys (its description aside), its own keys win, and each of its tables (`score`, `generate`, ...)
    is merged into the other's key by key (a key whose value is a table or list replaces the other's whole).
    Each pipeline is resolved once, walking its chain of bases without recursion: linear in the file's
    size, however long the chains."""
    done: dict[str, Any] = {}
    for name in pipelines:
        chain: list[str] = []        # name, its base, its base's base, ... up to one resolved or with no base
        at: str | None = name
        while at is not None and at not in done:
            if at in chain:
                cycle = " -> ".join((*chain[chain.index(at):], at))
                raise ConfigError(f"pipelines.{at}.extends: a cycle ({cycle})")
            chain.append(at)
            raw = pipelines[at]
            base = raw.get("extends") if isinstance(raw, dict) else None
            if base is not None and not isinstance(base, str):
                raise ConfigError(f"pipelines.{at}.extends: name one pipeline as a string (extends = \"demo\"), "
                                  f"not a {type(base).__name__}")
            if base is not None and base not in pipelines:
                raise ConfigError(f"pipelines.{at}.extends: unknown pipeline {base!r}")
            at = base
        for link in reversed(chain):
            raw = pipelines[link]
            if not isinstance(raw, dict) or "extends" not in raw:
                done[link] = raw
                continue
            own = {k: v for k, v in raw.items() if k != "extends"}
            merged = {k: v for k, v in done[raw["extends"]].items() if k != "description"}
            for key, value in own.items():
                both_tables = key in PIPELINE_TABLES and isinstance(value, dict) and isinstance(merged.get(key), dict)
                merged[key] = {**merged[key], **value} if both_tables else value
            done[link] = merged
    return {name: done[name] for name in pipelines}   # in the file's order


def _format_error(error: ValidationError, where: str) -> str:
    first = error.errors()[0]
    key = ".".join(part for part in (where, *(str(p) for p in first["loc"])) if part)
    message = first["msg"].removeprefix("Value error, ")
    if first["type"] == "extra_forbidden":
        message = "unknown key"
    elif "input" in first and not isinstance(first["input"], dict):
        message = f"{message} (got {first['input']!r})"
    more = len(error.errors()) - 1
    suffix = f" (and {more} more problem{'s' if more > 1 else ''})" if more else ""
    return f"{key}: {message}{suffix}" if key else f"{message}{suffix}"


def _validate(data: dict[str, Any], where: str = "") -> Config:
    try:
        return Config.model_validate(data)
    except ValidationError as error:
        raise ConfigError(_format_error(error, where)) from None


MAX_TOML_DEPTH = 32        # arrays and inline tables nested deeper: no setting needs it, a parser's stack does
MAX_NUMBER_DIGITS = 64     # a longer number: no setting needs it (Python refuses ints past 4,300 digits)
_TOML_TOKENS = re.compile(r'"""[\s\S]*?"""(?!")|\'\'\'[\s\S]*?\'\'\'(?!\')|"(?:[^"\\\n]|\\.)*"|\'[^\'\n]*\''
                          r"|#[^\n]*|[\[{]|[\]}]|[0-9][0-9_]{" + str(MAX_NUMBER_DIGITS) + ",}")


def toml_shape_problem(text: str) -> str | None:
    """What makes `text` unfit to parse, before it is parsed: arrays or inline tables nested deeper
    than MAX_TOML_DEPTH (a parser recurses per level), a number longer than MAX_NUMBER_DIGITS digits;
    else None. Strings and comments are skipped, so a bracket or digits inside them count for nothing."""
    depth = 0
    for token in _TOML_TOKENS.finditer(text):
        kind = token.group()
        if kind in "[{":
            depth += 1
            if depth > MAX_TOML_DEPTH:
                line = text.count("\n", 0, token.start()) + 1
                return f"line {line}: arrays or tables nested more than {MAX_TOML_DEPTH} deep"
        elif kind in "]}":
            depth = max(0, depth - 1)
        elif kind[0].isdigit():
            line = text.count("\n", 0, token.start()) + 1
            return f"line {line}: a number of more than {MAX_NUMBER_DIGITS} digits"
    return None


def load_config(path: Path | str = DEFAULT_CONFIG) -> Config:
    """Read and validate pipelines.toml; relative paths resolve against its folder."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"{path}: config file not found")
    try:
        text = path.read_text(encoding="utf-8")
        shape = toml_shape_problem(text)
        if shape is not None:
            raise ConfigError(f"{path}: {shape}")
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise ConfigError(f"{path}: not valid TOML: {error}") from None
    except UnicodeDecodeError as error:
        line = path.read_bytes()[: error.start].count(b"\n") + 1
        raise ConfigError(f"{path}: line {line}: not UTF-8 text (byte 0x{error.object[error.start]:02x}); "
                          "save the file as UTF-8") from None
    if "root" in data:
        raise ConfigError(f"{path}: root: unknown key")
    data["root"] = path.resolve().parent
    try:
        if isinstance(data.get("pipelines"), dict):
            data["pipelines"] = extended(data["pipelines"])
        cfg = _validate(data)
        for name in cfg.pipelines:     # every pipeline's overrides, checked now and named with the file
            cfg._alone(name, cfg.pipelines[name])
    except ConfigError as error:
        raise ConfigError(f"{path}: {error}") from None
    return cfg


def writable_problem(folder: Path) -> str | None:
    """Why `folder` (or the nearest folder above it that exists) cannot be written; None when it can."""
    import os
    import tempfile

    existing = next((p for p in (folder, *folder.parents) if p.exists()), None)
    if existing is None or not existing.is_dir():
        return f"{existing} is a file, not a folder"
    if not os.access(existing, os.W_OK | os.X_OK):
        return f"{existing} is not writable"
    try:   # what os.access cannot tell: read-only mounts, /proc, root squash
        tempfile.TemporaryFile(dir=existing).close()
    except OSError as error:
        return f"{existing} is not writable ({error.strerror})"
    return None


def check_writable(folder: Path) -> None:
    """A ConfigError naming `folder` and the problem when it cannot be written."""
    problem = writable_problem(folder)
    if problem:
        raise ConfigError(f"{folder}: {problem}")


def check_paths(cfg: Config, config_path: Path | str) -> None:
    """Fail now, with the key and the file, if data_dir or the database's folder cannot be written."""
    for key, folder in (("paths.data_dir", cfg.data_dir), ("paths.database", cfg.database.parent)):
        problem = writable_problem(folder)
        if key == "paths.database" and cfg.database.is_dir():
            problem = f"{cfg.database} is a folder, not a database file"
        if problem:
            raise ConfigError(f"{config_path}: {key}: {problem}")
