"""`[query]` and `[schedule]`: the settings of the `grebench query` and `grebench schedule` commands."""

from __future__ import annotations

from datetime import UTC, datetime

from pydantic import Field, field_validator

from tasks.core.config_base import Frozen, check_pipeline_name, check_venue_id


class QueryConfig(Frozen):
    """Limits of `grebench query` (flows/cli/query.py), set before the user's SQL runs and locked."""

    timeout_seconds: float = Field(300.0, gt=0, le=7 * 86400)   # --timeout overrides it; then the query is interrupted
    memory_limit_mb: int = Field(2048, ge=64, le=4 * 1024 * 1024)     # DuckDB's memory_limit
    max_spill_mb: int = Field(2048, ge=0, le=64 * 1024 * 1024)         # DuckDB's max_temp_directory_size (0: no spilling)
    threads: int = Field(2, ge=1, le=1024)
    # The whole process's address space (RLIMIT_AS) is capped at memory_limit_mb plus this, so that
    # allocations DuckDB does not count (one huge string) fail as "Out of Memory" instead of swapping
    address_space_headroom_mb: int = Field(1024, ge=256, le=1024 * 1024)


class ScheduleConfig(Frozen):
    """The yearly refresh deployment registered by `grebench schedule`."""

    deployment: str = "yearly-refresh"
    pipeline: str = "refresh"          # a pipeline whose venue ids contain {year}
    cron: str = "0 6 15 12 *"          # 06:00 on 15 December, once the year's reviews are public
    timezone: str = "UTC"
    venues: tuple[str, ...] = ()       # fixed venue list parameter; empty: the pipeline's template

    @field_validator("pipeline")
    @classmethod
    def _safe_pipeline(cls, value: str) -> str:
        return check_pipeline_name(value)

    @field_validator("venues")
    @classmethod
    def _safe_venues(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        return tuple(check_venue_id(v) for v in value)

    @field_validator("timezone")
    @classmethod
    def _known_zone(cls, value: str) -> str:
        from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

        try:
            ZoneInfo(value)
        except (ZoneInfoNotFoundError, ValueError):
            raise ValueError("unknown time zone (use an IANA name such as 'UTC' or 'Europe/Paris')") from None
        return value

    @field_validator("cron")
    @classmethod
    def _five_fields(cls, value: str) -> str:
        from cronsim import CronSim, CronSimError

        try:
            CronSim(value, datetime.now(UTC))
        except CronSimError as error:
            raise ValueError(f"not a valid cron expression: {error}") from None
        return value
