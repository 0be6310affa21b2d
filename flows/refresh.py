"""The yearly refresh: one parent flow that runs every stage for the year's venues.

Each stage skips work already done (cached raw pages, finished shards, cached LLM answers), so a
rerun or a resumed run only does what is missing. `grebench schedule` registers this flow as a
Prefect deployment with a yearly cron schedule.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from prefect import flow

from flows.pipeline import pipeline_flow
from tasks.checks import load_checked_config
from tasks.core.config import Config, ScheduleConfig
from tasks.core.summary import StageSummary


@flow(name="yearly-refresh", log_prints=True)
def refresh_flow(
    year: int | None = None,
    venues: list[str] | None = None,
    pipeline: str = "refresh",
    config_path: str = "pipelines.toml",
) -> dict[str, StageSummary]:
    """Run `pipeline` for `year` (default: the current year) on its venues, or on `venues`."""
    from tasks.core.config import require_refresh_tables

    require_refresh_tables(config_path, pipeline, year or datetime.now(UTC).year, venues)  # before ingest
    year = year or datetime.now(UTC).year
    summary = pipeline_flow(pipeline=f"{pipeline}-{year}", config_path=config_path, venues=venues or None)
    write_site(load_checked_config(config_path))
    return summary


def write_site(cfg: Config) -> None:
    """The refresh ends by rendering the static site from the results database (`grebench site`)."""
    from tasks.report.site import build_site

    if not cfg.database.is_file():
        print(f"no results database at {cfg.database}: the site is not written")
        return
    site = build_site(cfg.database, cfg.data_dir / "site")
    print(f"site: {len(site.pages)} pages in {site.out_dir}, open {site.index.resolve().as_uri()}")


def deployment_parameters(schedule: ScheduleConfig, config_path: str) -> dict[str, Any]:
    """Parameters the scheduled runs get; `year` is left out so each run takes its own year."""
    return {"venues": list(schedule.venues) or None, "pipeline": schedule.pipeline, "config_path": config_path}


def build_deployment(cfg: Config, config_path: str) -> Any:
    """The refresh deployment with its yearly cron schedule (not registered yet)."""
    from prefect.schedules import Cron

    schedule = cfg.schedule
    cfg.for_pipeline(f"{schedule.pipeline}-{datetime.now(UTC).year}")  # the template must resolve
    return refresh_flow.to_deployment(
        name=schedule.deployment,
        schedules=[Cron(schedule.cron, timezone=schedule.timezone)],
        parameters=deployment_parameters(schedule, config_path),
        description=f"GRE-bench yearly refresh of pipeline {schedule.pipeline!r}",
        tags=["grebench", "yearly"],
    )


def next_runs(cron: str, timezone: str, count: int = 3) -> list[datetime]:
    from zoneinfo import ZoneInfo

    from cronsim import CronSim

    it = CronSim(cron, datetime.now(ZoneInfo(timezone)))
    return [next(it) for _ in range(count)]
